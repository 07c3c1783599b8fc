"""Several ranks on one GPU over gloo: identical GPU work and an all-reduce per step.

Each rank runs the same matmuls on the one GPU (NCCL needs a GPU per rank; gloo moves
the CUDA tensor through the host), then all-reduces a 4 MiB gradient, under
torch.profiler, and writes `<out>/rank<R>.pt.trace.json.gz`. The cases:

    balanced    every rank does the same work
    host_slow   rank SLOW spends SLOW_HOST_MS of host time per step before the
                all-reduce (a busy loop standing for slow preprocessing)
    gpu_heavy   rank SLOW runs GPU_HEAVY_FACTOR times the matmuls (load imbalance)

Run it by itself (it starts the other ranks as subprocesses):

    python workloads/ranks/gloo_ranks.py --case host_slow --world 3 --out sample_traces/ranks_host_slow

or under torchrun (one process per rank, RANK/WORLD_SIZE from the environment):

    torchrun --nproc-per-node 3 workloads/ranks/gloo_ranks.py --case host_slow --out DIR

`--device cpu` runs the same program on the CPU (a smoke test; those traces have no GPU).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile, schedule

#: The rank made slow in the host_slow and gpu_heavy cases (not 0, so a report that just
#: names rank 0 is wrong).
SLOW = 1
#: Host time the slow rank adds per step: a few times the step's GPU work, so the wait is
#: far above the jitter of processes sharing one GPU.
SLOW_HOST_MS = 15.0
#: The heavy rank's matmul count over the others'.
GPU_HEAVY_FACTOR = 3
MATMULS = 4
SIZE = 2048
GRAD_ELEMS = 1 << 20  # 4 MiB of fp32
WAIT, WARMUP, ACTIVE = 2, 2, 6


def _busy(ms: float) -> None:
    t0 = time.perf_counter()
    while (time.perf_counter() - t0) * 1e3 < ms:
        pass


def run_rank(rank: int, world: int, case: str, out: Path, device: str, port: int, profile_it: bool = True) -> None:
    if "MASTER_ADDR" in os.environ and "RANK" in os.environ:
        dist.init_process_group("gloo")  # torchrun's env:// rendezvous
    else:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    dev = torch.device(device)
    size = SIZE if dev.type == "cuda" else 256
    a = torch.randn(size, size, device=dev)
    grad = torch.zeros(GRAD_ELEMS if dev.type == "cuda" else 1 << 14, device=dev)
    n_mm = MATMULS * (GPU_HEAVY_FACTOR if case == "gpu_heavy" and rank == SLOW else 1)

    def step() -> None:
        b = a
        for _ in range(n_mm):
            b = (a @ b) * (1.0 / size)
        grad.add_(b.flatten()[: grad.numel()], alpha=1e-6)
        if case == "host_slow" and rank == SLOW:
            with torch.profiler.record_function("make_batch"):
                _busy(SLOW_HOST_MS)
        dist.all_reduce(grad)

    if not profile_it:  # under `tracelens capture`: it profiles; mark the steps for it
        try:
            from tracelens.capture import step as mark
        except ImportError:
            mark = None
        for _ in range(WAIT + WARMUP + ACTIVE + 2):
            step()
            if mark is not None:
                mark()
        if dev.type == "cuda":
            torch.cuda.synchronize()
        dist.barrier()
        dist.destroy_process_group()
        return
    for _ in range(2):  # untraced warm-up: cuBLAS handles, gloo's first connection
        step()
    if dev.type == "cuda":
        torch.cuda.synchronize()
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
    tmp = Path(tempfile.mkdtemp())
    with profile(
        activities=acts, schedule=schedule(wait=WAIT, warmup=WARMUP, active=ACTIVE, repeat=1), record_shapes=True
    ) as prof:
        prof.add_metadata_json(
            "tracelens_workload",
            json.dumps({"workload": "gloo_ranks", "case": case, "rank": rank, "world": world, "slow_rank": SLOW,
                        "slow_host_ms": SLOW_HOST_MS, "gpu_heavy_factor": GPU_HEAVY_FACTOR,
                        "torch": torch.__version__}),
        )  # fmt: skip
        for _ in range(WAIT + WARMUP + ACTIVE):
            step()
            prof.step()
    raw = tmp / "trace.json"
    prof.export_chrome_trace(str(raw))
    out.mkdir(parents=True, exist_ok=True)
    with open(raw, "rb") as src, gzip.open(out / f"rank{rank}.pt.trace.json.gz", "wb", compresslevel=9) as dst:
        shutil.copyfileobj(src, dst)
    shutil.rmtree(tmp, ignore_errors=True)
    dist.barrier()
    dist.destroy_process_group()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--case", choices=("balanced", "host_slow", "gpu_heavy"), default="balanced")
    p.add_argument("--world", type=int, default=3)
    p.add_argument("--out", type=Path, default=Path("sample_traces/ranks"))
    p.add_argument("--device", default="cuda")
    p.add_argument("--port", type=int, default=29541)
    p.add_argument("--rank", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--no-profile", action="store_true", help="no torch.profiler of its own (under tracelens capture)")
    args = p.parse_args()
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:  # under torchrun
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        run_rank(rank, world, args.case, args.out, args.device, args.port, not args.no_profile)
        return
    if args.rank is not None:
        run_rank(args.rank, args.world, args.case, args.out, args.device, args.port)
        return
    base = [sys.executable, os.path.abspath(__file__), "--case", args.case, "--world", str(args.world),
            "--out", str(args.out), "--device", args.device, "--port", str(args.port)]  # fmt: skip
    children = [subprocess.Popen([*base, "--rank", str(r)]) for r in range(1, args.world)]
    run_rank(0, args.world, args.case, args.out, args.device, args.port)
    codes = [c.wait() for c in children]
    if any(codes):
        sys.exit(f"a rank failed: exit codes {codes}")


if __name__ == "__main__":
    main()
