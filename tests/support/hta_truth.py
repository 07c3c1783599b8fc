"""HolisticTraceAnalysis' numbers on the public traces, stored: what tests/test_hta.py
compares ours with.

HTA's own run took 20 of test_hta.py's 24 CPU seconds (parsing each trace into its
dataframes), so every case reads HTA's idle breakdown and overlap from HTA_TRUTH, which
`python bench/hta_truth.py` writes by running HTA (the pinned holistictraceanalysis
0.5.0) on each trace. One test still runs HTA live on two traces and asserts the stored
numbers are what it computes now, and every case checks that its trace's sha256 is the
one the numbers were computed on: a new HTA, pandas or trace fails a test instead of
leaving stale numbers behind.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from support.corpus import DATA

HTA_TRUTH = DATA / "hta_truth.json"

#: Single-stream traces where both tools run on pandas 3 (resnet_act_checkpoint fails
#: inside HTA on pandas 3; rank0.json's CUDA-graph kernels are dropped by HTA's filter).
IDLE_TRACES = [
    "worker0.pt.trace.json.gz",
    "worker0.1623143089861.pt.trace.json.gz",
    "worker0.1623212756351.pt.trace.json.gz",
    "mi250_minitoy_train_ROCm6_2_kineto.json.gz",
    "eager_trace.json.gz",
]

#: The public traces with collectives.
COMM_TRACES = [
    "control.json.gz",
    "nccl_data.json.gz",
    "rank0.json.gz",
    "sampled_rank-0.json.gz",
    "sampled_rank-1.json.gz",
    "df_index_resolver.json.gz",
]


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _analysis(path: Path, tmp: Path) -> Any:
    """HTA's TraceAnalysis of the one trace (a folder of its own), floats kept unrounded
    (HTA rounds timestamps to whole µs unless HTA_DISABLE_NS_ROUNDING=1)."""
    from hta.trace_analysis import TraceAnalysis

    os.environ["HTA_DISABLE_NS_ROUNDING"] = "1"
    shutil.copy(path, tmp / path.name)
    return TraceAnalysis(trace_dir=str(tmp))


def hta_idle(path: Path, tmp: Path) -> dict[str, Any]:
    """HTA's idle breakdown of the (single) kernel stream: its window (the stream's first
    kernel start to last kernel end, raw trace µs) and idle µs by category."""
    ta = _analysis(path, tmp)
    rank = ta.t.get_ranks()[0]
    idle, _ = ta.get_idle_time_breakdown(ranks=[rank], visualize=False, consecutive_kernel_delay=30)
    streams = idle["stream"].unique()
    assert len(streams) == 1, streams
    by = {str(r["idle_category"]): float(r["idle_time"]) for r in idle.to_dict("records")}
    df = ta.t.get_trace(rank)
    sym = ta.t.symbol_table.get_sym_id_map()
    cats = [sym[c] for c in ("kernel", "Kernel", "gpu_memset", "Memset", "gpu_memcpy", "Memcpy") if c in sym]
    k = df[df["stream"].isin(streams) & df["cat"].isin(cats)]
    start = float(k["ts"].min()) + float(ta.t.min_ts)
    end = float((k["ts"] + k["dur"]).max()) + float(ta.t.min_ts)
    return {"start_us": start, "end_us": end, "idle_us": by}


def hta_overlap(path: Path, tmp: Path) -> dict[str, Any]:
    """HTA's comp_comm_overlap_pctg of the trace's one rank."""
    ta = _analysis(path, tmp)
    return {"overlap_pct": float(ta.get_comm_comp_overlap(visualize=False)["comp_comm_overlap_pctg"].iloc[0])}


def compute(kind: str, path: Path) -> dict[str, Any]:
    """HTA's numbers of `kind` ("idle" or "overlap") on the trace, with its sha256."""
    with tempfile.TemporaryDirectory() as tmp:
        out = (hta_idle if kind == "idle" else hta_overlap)(path, Path(tmp))
    return {"sha256": sha256_of(path), **out}


def compute_all(real: dict[str, Path]) -> dict[str, Any]:
    from importlib.metadata import version

    return {
        "hta_version": version("holistictraceanalysis"),
        "idle": {n: compute("idle", real[n]) for n in IDLE_TRACES},
        "overlap": {n: compute("overlap", real[n]) for n in COMM_TRACES},
    }


def stored(kind: str, path: Path) -> dict[str, Any]:
    """HTA's stored numbers of `kind` on the trace; they must be of this very file."""
    entry: dict[str, Any] = json.loads(HTA_TRUTH.read_text())[kind][path.name]
    assert entry["sha256"] == sha256_of(path), f"{path.name} changed: run python bench/hta_truth.py"
    return entry
