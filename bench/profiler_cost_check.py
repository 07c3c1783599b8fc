"""The step without the profiler, predicted from a profiled trace (derive/profiler_cost.py),
against the step measured with CUDA events outside the profiler, on the real programs of
workloads/programs (H200 traces of branch programs: tracelens capture with Python stacks
and shapes; the unprofiled steps from its README's closing table, time_steps.py).

    python bench/profiler_cost_check.py [--dir /work/coord/programs-traces/h200]

Prints per program: the profiled step, the profiler's estimated host time, the predicted
unprofiled step and its error; the headline's gain profiled and without the profiler, and
the measured gain where the fix was timed (PyG: DataLoader workers 0 -> 4).
"""

from __future__ import annotations

import argparse
import platform
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tracelens import __version__  # noqa: E402
from tracelens.assemble import build_report  # noqa: E402
from tracelens.derive.context import AnalysisContext  # noqa: E402
from tracelens.model import load_trace  # noqa: E402

#: Unprofiled step (ms, CUDA events, median) and, where the first fix was timed, the
#: unprofiled step after it (workloads/programs/README.md on branch programs).
MEASURED = {
    "prog_timm": (40.4, None),
    "prog_pyg": (28.4, 16.2),
    "prog_trainer": (43.1, None),
    "prog_lightning": (127.6, 15.7),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default="/work/coord/programs-traces/h200")
    ap.add_argument("--programs", default=",".join(MEASURED))
    args = ap.parse_args()
    print(f"tracelens {__version__} · Python {platform.python_version()} · {platform.machine()}")
    print("traces captured on an NVIDIA H200 (torch 2.11.0+cu130, with_stack, record_shapes)\n")
    print("| program | profiled step | profiler (est.) | unprofiled predicted | measured | error |"
          " headline gain profiled | without profiler | measured |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name in args.programs.split(","):
        path = Path(args.dir) / f"{name}.pt.trace.json.gz"
        if not path.exists():
            print(f"| {name} | (no trace at {path}) |")
            continue
        ctx = AnalysisContext(load_trace(path))
        rep = build_report(ctx.model, ctx=ctx)
        k = max(ctx.replay_span[3], 1)
        step = ctx.window_us / max(ctx.n_steps, 1)
        unprof = step - (ctx.replayed - ctx.unprofiled) / k
        measured, after = MEASURED[name]
        s = rep.summary
        top = next((f for f in rep.findings if f.category == s.primary), None)
        p = top.prediction if top is not None else None
        gain = p.gain_us if p is not None else 0.0
        u_gain = p.unprofiled_gain_us if p is not None and p.unprofiled_step_us > 0 else float("nan")
        m_gain = f"{measured - after:.1f}" if after is not None else "n/a"
        print(
            f"| {name} | {step / 1e3:.1f} | {(step - unprof) / 1e3:.1f} | {unprof / 1e3:.1f} | {measured:.1f} | "
            f"{(unprof / 1e3 - measured) / measured:+.0%} | {gain / 1e3:.1f} ({s.primary}) | {u_gain / 1e3:.1f} | "
            f"{m_gain} |"
        )
    print("\n(ms per step; error = (predicted - measured) / measured, of the unprofiled step)")


if __name__ == "__main__":
    main()
