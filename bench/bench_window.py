"""Speed of steady-state window detection (tracelens.derive.window) on the traces where
it has the most to do: the largest public traces with their ProfilerSteps dropped, so that
the loop has to be found from the kernels and syncs alone.

    python bench/bench_window.py [--repeat N] [TRACES...]

The budget (issue 8) is 0.5 s a trace on the 2-core development machine; the largest
measured there was ~0.15 s (df_index_resolver, 22k tokens) on an idle machine. This
replaces the test that timed it (a timed unit test fails on a loaded machine, not on slow
code). Prints one table with the machine, its load and the versions.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench_load import machine, versions  # noqa: E402

from tracelens.derive.window import detect_iterations  # noqa: E402
from tracelens.model import load_trace  # noqa: E402

REAL = REPO.parent / "shared" / "real_traces"
#: The traces detection takes longest on (most host tokens to search for a period).
DEFAULT_TRACES = ("df_index_resolver.json.gz", "resnet_kineto.json.gz", "control.json.gz")
BUDGET_S = 0.5


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("traces", nargs="*", type=Path)
    ap.add_argument("--repeat", type=int, default=3, help="runs per trace; the best is shown")
    args = ap.parse_args()
    traces = args.traces or [p for name in DEFAULT_TRACES for p in sorted(REAL.glob(f"*/{name}"))]
    if not traces:
        print(f"no traces given and none found under {REAL}")
        return 2
    print(f"machine: {machine()}")
    print(f"versions: {versions()}")
    print("load average before: " + " ".join(f"{v:.1f}" for v in os.getloadavg()))
    print("| trace | host events | kernels | detected | best s | budget s |")
    print("|---|---|---|---|---|---|")
    for path in traces:
        model = load_trace(path)
        bare = dataclasses.replace(model, steps=model.steps.iloc[0:0])
        device = bare.meta.active_devices[0] if bare.meta.active_devices else None
        best = float("inf")
        found = None
        for _ in range(max(args.repeat, 1)):
            t0 = time.perf_counter()
            found = detect_iterations(bare, device)
            best = min(best, time.perf_counter() - t0)
        what = f"{len(found.spans)} iterations" if found is not None else "none"
        print(f"| {path.name} | {len(model.host):,} | {len(model.kernels()):,} | {what} | {best:.3f} | {BUDGET_S} |")
    print("load average after: " + " ".join(f"{v:.1f}" for v in os.getloadavg()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
