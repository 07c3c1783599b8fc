"""Capture overhead on a training loop: `tracelens capture` vs an unprofiled run.

Runs workloads/capture_train_loader.py (DataLoader with 2 workers, AdamW MLP) once
unprofiled and once under each capture configuration, each in its own process, and
prints a Markdown table of the median step time inside the default recording window
(steps 5-24), after it (steps 30 to the end: only tracelens's hooks remain), the whole
process's wall time, and the trace's size and event count.

    python bench/bench_capture.py [--steps 60] [--json results.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WORKLOAD = REPO / "workloads" / "capture_train_loader.py"
#: The default window records steps 5-24 (tracelens.capture.window).
WINDOW = (5, 25)
AFTER = 30

CONFIGS: list[tuple[str, list[str]]] = [
    ("unprofiled", []),
    ("capture (default: stacks, shapes)", []),
    ("capture --no-stack", ["--no-stack"]),
    ("capture --no-stack --no-shapes", ["--no-stack", "--no-shapes"]),
    ("capture --all (whole run, stacks)", ["--all"]),
]


def _median_ms(times: list[float], lo: int, hi: int) -> float:
    part = times[lo:hi]
    return statistics.median(part) * 1e3 if part else float("nan")


def run(name: str, extra: list[str], steps: int, tmp: Path) -> dict[str, object]:
    times_path = tmp / f"times{len(list(tmp.iterdir()))}.json"
    trace = tmp / f"{abs(hash(name))}.pt.trace.json.gz"
    args = [str(WORKLOAD), "--steps", str(steps), "--times", str(times_path)]
    if name == "unprofiled":
        cmd = [sys.executable, *args]
    else:
        cmd = [sys.executable, "-m", "tracelens", "capture", "--no-report", "-o", str(trace), *extra, *args]
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    t0 = time.perf_counter()
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp, timeout=600)
    wall = time.perf_counter() - t0
    if res.returncode != 0:
        raise SystemExit(f"{name}: exit {res.returncode}\n{res.stderr[-3000:]}")
    times = json.loads(times_path.read_text())
    row: dict[str, object] = {
        "config": name,
        "window_ms": _median_ms(times, *WINDOW),
        "after_ms": _median_ms(times, AFTER, len(times)),
        "wall_s": wall,
        "trace_mb": trace.stat().st_size / 1e6 if trace.exists() else None,
    }
    if trace.exists():
        import gzip

        meta = json.loads(gzip.decompress(trace.read_bytes()))["tracelens"]
        row["events"] = meta["recorded"]["events"]
        row["export_s"] = meta["export_s"]
    return row


def machine() -> str:
    import torch

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    return (
        f"{gpu}, {os.cpu_count()} CPUs, {platform.platform()}; Python {platform.python_version()}, "
        f"torch {torch.__version__}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-capture-") as d:
        for name, extra in CONFIGS:
            rows.append(run(name, extra, args.steps, Path(d)))
            print(f"  {name}: done", file=sys.stderr, flush=True)
    base_w, base_a = float(rows[0]["window_ms"]), float(rows[0]["after_ms"])  # type: ignore[arg-type]
    print(f"Machine: {machine()}\n")
    print(f"Workload: workloads/capture_train_loader.py --steps {args.steps} (one run per configuration)\n")
    print("| configuration | step, steps 5-24 (ms) | vs unprofiled | step, steps 30+ (ms) | vs unprofiled "
          "| process wall (s) | trace (MB gz) | events | profiler export (s) |")  # fmt: skip
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        w, a = float(r["window_ms"]), float(r["after_ms"])  # type: ignore[arg-type]
        mb = f"{r['trace_mb']:.2f}" if r.get("trace_mb") is not None else "-"
        ev = f"{r['events']:,}" if "events" in r else "-"
        ex = f"{r['export_s']:.2f}" if "export_s" in r else "-"
        print(
            f"| {r['config']} | {w:.2f} | {w / base_w:.2f}x | {a:.2f} | {a / base_a:.2f}x | {r['wall_s']:.1f} "
            f"| {mb} | {ev} | {ex} |"
        )
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": machine(), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
