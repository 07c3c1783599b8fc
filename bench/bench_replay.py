"""The replay's cost (issue 25: graph build and all transforms under 20% of the report's
time on the 250 MB training trace that bench/bench_scale.py makes).

    python bench/bench_replay.py TRACE [TRACE...] [--repeat 3]

For each trace, in this process: load it once; then, repeat times, the whole analysis
(build_report) with the predictions turned off, and the dependency graph's build, the
baseline replay and every finding's transforms (predict.attach, three variants each)
timed on their own. Prints the machine, the load average and a Markdown table.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tracelens import __version__, assemble, predict  # noqa: E402
from tracelens.analyzers import run_all  # noqa: E402
from tracelens.derive.context import AnalysisContext  # noqa: E402
from tracelens.model import load_trace  # noqa: E402


def one(path: Path) -> tuple[float, float, float, float, int, int, float]:
    t0 = time.perf_counter()
    model = load_trace(path)
    load_s = time.perf_counter() - t0
    # The report without predictions: the analyzers, ranking and tables as before.
    real = assemble.attach_predictions
    assemble.attach_predictions = lambda ctx, findings: findings  # type: ignore[assignment]
    try:
        t0 = time.perf_counter()
        assemble.build_report(model)
        report_s = time.perf_counter() - t0
    finally:
        assemble.attach_predictions = real  # type: ignore[assignment]
    ctx = AnalysisContext(model)
    findings = run_all(ctx)
    t0 = time.perf_counter()
    g = ctx.graph
    _ = ctx.replayed
    graph_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    out = predict.attach(ctx, findings)
    attach_s = time.perf_counter() - t0
    replayed = sum(1 for f in out if f.prediction is not None and f.prediction.basis == "replay")
    return report_s, graph_s, attach_s, graph_s + attach_s, g.n if g is not None else 0, replayed, load_s


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("traces", type=Path, nargs="+")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    print(
        f"tracelens {__version__} · Python {platform.python_version()} · {platform.machine()} · {os.cpu_count()} CPUs"
    )
    print("load average before: " + " ".join(f"{v:.1f}" for v in os.getloadavg()))
    print("\n| trace | nodes | findings replayed | load s | analysis without predictions s | graph + baseline s "
          "| transforms s | replay / analysis | replay / (load + analysis) |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for path in args.traces:
        runs = [one(path) for _ in range(args.repeat)]
        rep = statistics.median(r[0] for r in runs)
        gr = statistics.median(r[1] for r in runs)
        tr = statistics.median(r[2] for r in runs)
        tot = statistics.median(r[3] / r[0] for r in runs)
        whole = statistics.median(r[3] / (r[0] + r[6]) for r in runs)
        ld = statistics.median(r[6] for r in runs)
        print(
            f"| {path.name} | {runs[0][4]:,} | {runs[0][5]} | {ld:.2f} | {rep:.2f} | {gr:.2f} | {tr:.2f} | {tot:.0%} "
            f"| {whole:.0%} |",
            flush=True,
        )
    print("\nload average after: " + " ".join(f"{v:.1f}" for v in os.getloadavg()))


if __name__ == "__main__":
    main()
