"""The replay's accuracy and cost (issue 25).

    python bench/bench_replay.py --accuracy [TRACE...]          # every sample and public trace
    python bench/bench_replay.py TRACE [TRACE...] [--repeat 3]  # the cost

--accuracy: the unmodified replay of each trace against the step it measured (goal:
within 2%), worst first. For each trace: the window's measured time a step (the part the
replay covers: whole steps from the middle of a window over REPLAY_MAX_NODES), the
replay from a cold start (every node's time unknown) over the same steps, and the
replay in a loop that runs on (the predictions' baseline: at least the host's time for
its steps). Where the trace's metadata has the step timed with CUDA events outside the
profiler (workloads/diff_pairs.py), the replay without the profiler's own host cost
(derive/profiler_cost.py) against it too. A trace whose replay misses says why
(no GPU activity, a sampled or partial trace). Without TRACE: sample_traces/*.json.gz
and ../shared/real_traces/*/*.json.gz.

The cost (issue 25: graph build and all transforms under 20% of the report's time on the
250 MB training trace that bench/bench_scale.py makes): for each trace, in this process:
load it once; then, repeat times, the whole analysis (build_report) with the predictions
turned off, and the dependency graph's build, the baseline replay and every finding's
transforms (predict.attach, three variants each) timed on their own. Prints the machine,
the load average and a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tracelens import __version__, assemble, predict  # noqa: E402
from tracelens.derive.context import AnalysisContext  # noqa: E402
from tracelens.derive.replay import replay  # noqa: E402
from tracelens.model import load_trace  # noqa: E402

#: The unmodified replay's goal (issue 25).
REPLAY_GOAL = 0.02
REAL = REPO.parent / "shared" / "real_traces"


def all_traces() -> list[Path]:
    return sorted((REPO / "sample_traces").glob("*.json.gz")) + sorted(REAL.glob("*/*.json.gz"))


def event_step_us(model: object) -> float:
    """The step timed with CUDA events outside the profiler (the trace's metadata), or 0."""
    meta = model.meta.metadata.get("tracelens_workload")  # type: ignore[attr-defined]
    data = json.loads(meta) if isinstance(meta, str) else (meta or {})
    return float(data.get("event_step_ms", 0.0)) * 1e3 if isinstance(data, dict) else 0.0


def accuracy(path: Path) -> dict[str, object]:
    """The unmodified replay of one trace against its measured step (µs a step)."""
    model = load_trace(path)
    ctx = AnalysisContext(model)
    name = path.name.split(".json")[0].removesuffix(".pt.trace")
    row: dict[str, object] = {"trace": name, "where": path.parent.name}
    g = ctx.graph if ctx.ledger.primary is not None else None
    if g is None:
        return {**row, "reason": "no GPU activity to replay"}
    start, end, _, steps = ctx.replay_span
    steps = max(steps, 1)
    s = replay(g, cold=True)
    measured = (end - start) / steps
    row.update(
        steps=steps,
        nodes=g.n,
        measured_us=measured,
        replay_us=s.span_us / steps,
        error=(s.span_us / steps - measured) / measured if measured > 0 else 0.0,
        steady_us=ctx.replayed / steps,
        converged=s.converged,
        max_node_err_us=float(max(abs(s.end - g.end).max(initial=0.0), abs(s.start - g.ts).max(initial=0.0))),
    )
    ev = event_step_us(model)
    if ev > 0:
        row.update(events_us=ev, unprofiled_us=ctx.unprofiled / steps, events_error=(ctx.unprofiled / steps - ev) / ev)
    notes = [n for n in g.notes if n]
    if abs(float(row["error"])) > REPLAY_GOAL or not s.converged:  # type: ignore[arg-type]
        row["reason"] = "; ".join(notes) or "unexplained"
    return row


def print_accuracy(paths: list[Path], out: str | None) -> None:
    rows = []
    for p in paths:
        try:
            rows.append(accuracy(p))
        except Exception as e:  # a trace the replay cannot read is a row, not a stop
            rows.append({"trace": p.name, "where": p.parent.name, "reason": f"error: {type(e).__name__}: {e}"})
    key = lambda r: -abs(float(r.get("error", 0.0)))  # noqa: E731
    print("\n## The unmodified replay vs the measured step (worst first)\n")
    print("| trace | where | steps | nodes | measured µs/step | replay (cold) | error | steady-state replay "
          "| max node error µs | reason |")  # fmt: skip
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in sorted(rows, key=key):
        if "measured_us" not in r:
            print(f"| {r['trace']} | {r['where']} | | | | | | | | {r.get('reason', '')} |")
            continue
        print(
            f"| {r['trace']} | {r['where']} | {r['steps']} | {r['nodes']:,} | {r['measured_us']:,.1f} "
            f"| {r['replay_us']:,.1f} | {float(r['error']):+.2%} | {r['steady_us']:,.1f} "  # type: ignore[arg-type]
            f"| {r['max_node_err_us']:.2g} | {r.get('reason', '')} |"
        )
    within = [r for r in rows if "error" in r and abs(float(r["error"])) <= REPLAY_GOAL]  # type: ignore[arg-type]
    replayed = [r for r in rows if "error" in r]
    print(f"\n{len(within)} of {len(replayed)} replayed traces within {REPLAY_GOAL:.0%} ({len(rows)} traces read)")
    ev = [r for r in rows if "events_us" in r]
    if ev:
        print("\n## Without the profiler: the replay less the profiler's own host cost vs CUDA events (worst first)\n")
        print("| trace | profiled µs/step | replay without the profiler | CUDA events | error |")
        print("|---|---:|---:|---:|---:|")
        for r in sorted(ev, key=lambda r: -abs(float(r["events_error"]))):  # type: ignore[arg-type]
            print(
                f"| {r['trace']} | {r['measured_us']:,.1f} | {r['unprofiled_us']:,.1f} | {r['events_us']:,.1f} "
                f"| {float(r['events_error']):+.1%} |"  # type: ignore[arg-type]
            )
    if out:
        Path(out).write_text(json.dumps(rows, indent=1, default=float))


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
    findings = assemble.findings_of(ctx)  # worded, as build_report hands them to predict.attach
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
    ap.add_argument("traces", type=Path, nargs="*")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--accuracy", action="store_true", help="the unmodified replay vs the measured step")
    ap.add_argument("--json", help="with --accuracy: also write the rows as JSON here")
    args = ap.parse_args()
    print(
        f"tracelens {__version__} · Python {platform.python_version()} · {platform.machine()} · {os.cpu_count()} CPUs"
    )
    if args.accuracy:
        print_accuracy(args.traces or all_traces(), args.json)
        return
    if not args.traces:
        ap.error("the cost needs TRACE (e.g. the 250 MB trace bench/bench_scale.py makes)")
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
