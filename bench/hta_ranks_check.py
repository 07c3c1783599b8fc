"""A job's GPU idle and communication per rank: HolisticTraceAnalysis (HTA 0.5) beside
tracelens' job report, printed as a table.

    python bench/hta_ranks_check.py RANKS_DIR [--job-json JOB.json]

HTA reads every rank trace of RANKS_DIR (its temporal breakdown: idle / compute /
non-compute over each rank's span; its idle breakdown: host_wait / kernel_wait / other on
the busiest stream; its communication-computation overlap). HTA 0.5 on pandas 3 fails on
traces of more than 32k events (an int16 correlation index), so the traces are copied with
their python_function events left out first (HTA reads neither their time nor their
stacks). tracelens' side is the job report's per-rank ledger (JOB.json, else
`tracelens report RANKS_DIR --json` is run): GPU busy, idle, and the idle split into
communication (waiting inside collectives) and the rest.
"""

from __future__ import annotations

import argparse
import gzip
import json
import logging
import os
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any


def _strip(src: Path, dst: Path) -> int:
    with gzip.open(src) as fh:
        doc = json.load(fh)
    doc["traceEvents"] = [e for e in doc.get("traceEvents", []) if e.get("cat") != "python_function"]
    with gzip.open(dst, "wt") as fh:
        json.dump(doc, fh)
    return len(doc["traceEvents"])


def hta_side(folder: Path) -> dict[int, dict[str, float]]:
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    os.environ["HTA_DISABLE_NS_ROUNDING"] = "1"
    from hta.trace_analysis import TraceAnalysis

    with tempfile.TemporaryDirectory() as tmp:
        for p in sorted(folder.glob("rank*.json.gz")):
            _strip(p, Path(tmp) / p.name)
        ta = TraceAnalysis(trace_dir=tmp)
        tb = ta.get_temporal_breakdown(visualize=False)
        ranks = [int(r) for r in tb["rank"]]  # (HTA's idle breakdown is of rank 0 alone by default)
        idle, _ = ta.get_idle_time_breakdown(ranks=ranks, visualize=False, consecutive_kernel_delay=30)
        ov = ta.get_comm_comp_overlap(visualize=False)
    out: dict[int, dict[str, float]] = {}
    for row in tb.to_dict("records"):
        r = int(row["rank"])
        mine = idle[idle["rank"] == r]
        top = mine.groupby("stream")["idle_time"].sum().idxmax()  # the stream HTA says idles most
        by = {str(k): float(v) for k, v in mine[mine["stream"] == top].set_index("idle_category")["idle_time"].items()}
        o = ov[ov["rank"] == r]["comp_comm_overlap_pctg"]
        out[r] = {
            "span_ms": float(row["kernel_time(us)"]) / 1e3,
            "busy_ms": (float(row["compute_time(us)"]) + float(row["non_compute_time(us)"])) / 1e3,
            "idle_pct": float(row["idle_time_pctg"]),
            "host_wait_ms": by.get("host_wait", 0.0) / 1e3,
            "kernel_wait_ms": by.get("kernel_wait", 0.0) / 1e3,
            "other_ms": by.get("other", 0.0) / 1e3,
            "overlap_pct": float(o.iloc[0]) if len(o) else float("nan"),
        }
    return out


def tracelens_side(job: dict[str, Any]) -> dict[int, dict[str, float]]:
    out: dict[int, dict[str, float]] = {}
    for r in job["ranks"]:
        led = {e["cause"]: float(e["time_us"]) for e in r["ledger"]}
        window = sum(led.values())
        busy = sum(v for k, v in led.items() if k.startswith("gpu_busy"))
        out[int(r["rank"])] = {
            "span_ms": window / 1e3,
            "busy_ms": busy / 1e3,
            "idle_pct": 100.0 * (1 - busy / window) if window else 0.0,
            "communication_ms": led.get("communication", 0.0) / 1e3,
            "host_bound_ms": led.get("host_bound", 0.0) / 1e3,
            "other_idle_ms": (window - busy - led.get("communication", 0.0) - led.get("host_bound", 0.0)) / 1e3,
        }
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("folder", type=Path)
    p.add_argument("--job-json", type=Path)
    args = p.parse_args()
    job_path = args.job_json
    if job_path is None:
        job_path = Path(tempfile.mkdtemp()) / "job.json"
        subprocess.run([sys.executable, "-m", "tracelens", "report", str(args.folder), "--json", str(job_path),
                        "--out-dir", str(job_path.parent)], check=True, capture_output=True)  # fmt: skip
    tl = tracelens_side(json.loads(job_path.read_text()))
    hta = hta_side(args.folder)
    print("| rank | tool | window ms | GPU busy ms | idle | idle split (ms) | comm/comp overlap |")
    print("|---:|---|---:|---:|---:|---|---:|")
    for r in sorted(set(tl) | set(hta)):
        if r in hta:
            h = hta[r]
            print(f"| {r} | HTA | {h['span_ms']:.1f} | {h['busy_ms']:.2f} | {h['idle_pct']:.1f}% | host_wait "
                  f"{h['host_wait_ms']:.1f}, kernel_wait {h['kernel_wait_ms']:.1f}, other {h['other_ms']:.1f} | "
                  f"{h['overlap_pct']:.1f}% |")  # fmt: skip
        if r in tl:
            t = tl[r]
            print(f"| {r} | tracelens | {t['span_ms']:.1f} | {t['busy_ms']:.2f} | {t['idle_pct']:.1f}% | "
                  f"communication {t['communication_ms']:.1f}, host-bound {t['host_bound_ms']:.1f}, other "
                  f"{t['other_idle_ms']:.1f} | |")  # fmt: skip


if __name__ == "__main__":
    main()
