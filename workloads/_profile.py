"""Shared harness for the tracelens sample-trace workloads.

Every workload script builds its tensors, defines a zero-argument ``step_fn`` and
hands it to :func:`profile_steps`, which

1. runs a few *untraced* warm-up iterations (cuBLAS/cuDNN handle creation, caching
   allocator growth, lazy module loading) so they stay out of the trace,
2. runs ``warmup + steps`` iterations under ``torch.profiler.profile`` with the
   schedule ``wait=0, warmup=W, active=N, repeat=1`` and calls ``prof.step()`` after
   each iteration, so the exported trace carries ``ProfilerStep#K`` annotations
   (K = W .. W+N-1 for the recorded steps),
3. exports the Chrome/Kineto trace and gzips it (level 9) to
   ``<out_dir>/<name>.pt.trace.json.gz``.

Scripts are run from the repository root, e.g.::

    python workloads/host_sync_mask.py --out sample_traces          # CUDA (default)
    python workloads/host_sync_mask.py --device cpu --out /tmp/cpu  # smoke test

On ``--device cpu`` the scripts shrink their sizes and skip CUDA-only parts (pinned
memory, CUDA activities); CPU traces are for smoke tests only and are not kept.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, schedule

UNTRACED_WARMUP = 2


def make_parser(description: str | None) -> argparse.ArgumentParser:
    """Argument parser shared by every workload script."""
    first_line = (description or "").strip().splitlines()[0] if description else None
    parser = argparse.ArgumentParser(
        description=first_line,
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--out", default="sample_traces", help="output directory for the trace")
    parser.add_argument("--device", default="cuda", help="torch device (cuda, cuda:0, cpu)")
    parser.add_argument("--steps", type=int, default=None, help="override the number of active (recorded) steps")
    parser.add_argument("--warmup", type=int, default=None, help="override the number of profiler warm-up steps")
    return parser


def parse_args(description: str | None) -> argparse.Namespace:
    args = make_parser(description).parse_args()
    dev = torch.device(args.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        sys.exit(f"--device {args.device} requested but CUDA is not available (use --device cpu for a smoke test)")
    args.device = dev
    args.is_cuda = dev.type == "cuda"
    return args


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def profile_steps(
    step_fn: Callable[[], object],
    *,
    name: str,
    steps: int,
    warmup: int,
    out_dir: str | os.PathLike,
    device: torch.device | str | None = None,
    untraced_warmup: int = UNTRACED_WARMUP,
    metadata: dict | None = None,
) -> Path:
    """Profile ``warmup + steps`` calls of ``step_fn`` and write a gzipped Chrome trace.

    Returns the path of ``<out_dir>/<name>.pt.trace.json.gz``.
    """
    if device is None:
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(device)
    is_cuda = device.type == "cuda"
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    final = out_dir / f"{name}.pt.trace.json.gz"

    # 1. untraced warm-up
    t0 = time.perf_counter()
    for _ in range(untraced_warmup):
        step_fn()
    sync(device)
    t_warm = time.perf_counter() - t0

    activities = [ProfilerActivity.CPU]
    if is_cuda:
        activities.append(ProfilerActivity.CUDA)

    meta = {
        "workload": name,
        "torch_version": torch.__version__,
        "cuda_version": torch.version.cuda,
        "device": torch.cuda.get_device_name(device) if is_cuda else platform.processor() or "cpu",
        "python": platform.python_version(),
        "profiler_warmup_steps": warmup,
        "active_steps": steps,
        "untraced_warmup_steps": untraced_warmup,
    }
    if metadata:
        meta.update(metadata)

    step_times: list[float] = []
    with profile(
        activities=activities,
        record_shapes=True,
        with_stack=True,
        profile_memory=False,
        schedule=schedule(wait=0, warmup=warmup, active=steps, repeat=1),
    ) as prof:
        for i in range(warmup + steps):
            if i == warmup and hasattr(prof, "add_metadata_json"):
                # first active step: the Kineto session is recording now
                try:
                    prof.add_metadata_json("tracelens_workload", json.dumps(meta))
                except Exception as exc:  # pragma: no cover - best effort
                    print(f"[{name}] add_metadata_json failed: {exc}", file=sys.stderr)
            ts = time.perf_counter()
            step_fn()
            prof.step()
            step_times.append(time.perf_counter() - ts)
        sync(device)

    # 3. export + gzip
    fd, tmp = tempfile.mkstemp(prefix=f"{name}.", suffix=".json", dir=out_dir)
    os.close(fd)
    try:
        prof.export_chrome_trace(tmp)
        with open(tmp, "rb") as src, gzip.open(final, "wb", compresslevel=9) as dst:
            shutil.copyfileobj(src, dst, length=1 << 20)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)

    active = step_times[warmup:]
    host_ms = 1e3 * sum(active) / max(len(active), 1)
    print(
        f"[{name}] device={device} untraced_warmup={t_warm:.2f}s "
        f"host time/active step (profiled, enqueue-side) = {host_ms:.2f} ms -> "
        f"{final} ({final.stat().st_size / 1e6:.2f} MB)"
    )
    return final
