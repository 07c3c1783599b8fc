"""probe: does this torch record CUPTI range-profiler counters per kernel?

    python workloads/counters/probe.py --out DIR [--device cpu]

Issue 35. torch.profiler takes `experimental_config=_ExperimentalConfig(profiler_metrics=[...],
profiler_measure_per_kernel=True)`; Kineto then runs its CUPTI range profiler in kernel-replay
mode and writes one `cuda_profiler_range` event per kernel with the metric values as args. Kineto
compiled that profiler only for CUDA <= 12.6 (`HAS_CUPTI_RANGE_PROFILER`) and removed it in
2026-06 (pytorch/kineto#1437), so on a CUDA 13 build the config may be accepted and record
nothing. This script finds out, on the machine it runs on, and prints every answer first:

1. the config's signature in this torch, and whether it accepts the arguments;
2. a small workload (bf16 matmul, softmax, an elementwise add, a sum) recorded with the metrics
   per kernel, and again per kernel off; each trace's events counted by category, the first
   ranges printed; the traces are kept (`DIR/probe_*.json.gz`);
3. whether the driver restricts GPU performance counters to admin users
   (`RmProfilingAdminOnly` in /proc/driver/nvidia/params: NVreg_RestrictProfilingToAdminUsers).

A summary is written to `DIR/probe.json`. Every step is guarded: one failing is reported and
the next still runs.
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import os
import shutil
import sys
import time
import traceback
from pathlib import Path
from typing import Any

#: The metrics asked for: Kineto's FLOP alias (its nine SASS FMA/ADD/MUL counters), its
#: tensor-core alias, and DRAM bytes: what HTA's documentation asks for.
METRICS = ("kineto__cuda_core_flops", "kineto__tensor_core_insts", "dram__bytes_read.sum", "dram__bytes_write.sum")


def _say(summary: dict[str, Any], key: str, value: Any) -> None:
    summary[key] = value
    print(f"[probe] {key}: {value}", flush=True)


def _workload(torch: Any, dev: Any) -> None:
    big = dev.type == "cuda"
    n = 2048 if big else 64
    dt = torch.bfloat16 if big else torch.float32
    a = torch.randn(n, n, device=dev, dtype=dt)
    b = torch.randn(n, n, device=dev, dtype=dt)
    c = a @ b
    s = torch.softmax(c.float(), dim=-1)
    d = s + 1.0
    d.sum()
    if big:
        torch.cuda.synchronize()


def _count(path: Path) -> dict[str, Any]:
    with open(path) as f:
        data = json.load(f)
    events = data.get("traceEvents") or []
    cats = collections.Counter(str(e.get("cat")) for e in events if e.get("ph") == "X")
    ranges = [e for e in events if e.get("cat") == "cuda_profiler_range"]
    out: dict[str, Any] = {"categories": dict(cats), "ranges": len(ranges)}
    out["first_ranges"] = [
        {"name": str(e.get("name"))[:120], "dur": e.get("dur"), "args": e.get("args")} for e in ranges[:3]
    ]
    out["top_keys"] = sorted(k for k in data if k != "traceEvents")
    return out


def _record(torch: Any, dev: Any, out: Path, tag: str, per_kernel: bool, summary: dict[str, Any]) -> None:
    from torch.profiler import ProfilerActivity, profile

    try:
        config = torch._C._profiler._ExperimentalConfig(
            profiler_metrics=list(METRICS), profiler_measure_per_kernel=per_kernel
        )
    except Exception as exc:
        _say(summary, f"{tag}.config", f"refused: {type(exc).__name__}: {exc}")
        return
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
    raw = out / f"probe_{tag}.json"
    t0 = time.perf_counter()
    try:
        with profile(activities=acts, record_shapes=True, experimental_config=config) as prof:
            for _ in range(2):
                _workload(torch, dev)
        prof.export_chrome_trace(str(raw))
    except Exception as exc:
        _say(summary, f"{tag}.record", f"failed: {type(exc).__name__}: {exc}")
        traceback.print_exc()
        return
    _say(summary, f"{tag}.seconds", round(time.perf_counter() - t0, 2))
    try:
        _say(summary, f"{tag}.trace", _count(raw))
    except Exception as exc:
        _say(summary, f"{tag}.trace", f"unreadable: {type(exc).__name__}: {exc}")
    with open(raw, "rb") as src, gzip.open(out / f"probe_{tag}.json.gz", "wb") as dst:
        shutil.copyfileobj(src, dst)
    raw.unlink()


def _admin_only() -> str:
    params = Path("/proc/driver/nvidia/params")
    try:
        for line in params.read_text().splitlines():
            if line.startswith("RmProfilingAdminOnly"):
                return line.strip()
    except OSError as exc:
        return f"unreadable ({exc})"
    return "no RmProfilingAdminOnly line"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("probe_out"))
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    summary: dict[str, Any] = {}
    import torch

    dev = torch.device(args.device if torch.cuda.is_available() or args.device == "cpu" else "cpu")
    _say(summary, "torch", torch.__version__)
    _say(summary, "cuda", torch.version.cuda)
    _say(summary, "device", torch.cuda.get_device_name(0) if dev.type == "cuda" else "cpu")
    _say(summary, "euid", os.geteuid())
    _say(summary, "RmProfilingAdminOnly", _admin_only())
    cfg = getattr(getattr(torch._C, "_profiler", None), "_ExperimentalConfig", None)
    _say(summary, "config_signature", (cfg.__init__.__doc__ or "").splitlines()[0][:600] if cfg else "absent")
    try:
        _workload(torch, dev)  # handles, kernels loaded, before any profiler
    except Exception as exc:
        _say(summary, "warmup", f"failed: {type(exc).__name__}: {exc}")
    _record(torch, dev, args.out, "per_kernel", True, summary)
    _record(torch, dev, args.out, "whole_range", False, summary)
    per = summary.get("per_kernel.trace")
    works = isinstance(per, dict) and per.get("ranges", 0) > 0
    _say(summary, "verdict", "ranges recorded" if works else "no cuda_profiler_range events: range profiler absent")
    (args.out / "probe.json").write_text(json.dumps(summary, indent=1, default=str))


if __name__ == "__main__":
    try:
        main()
    except Exception:
        traceback.print_exc()
        sys.exit(1)
