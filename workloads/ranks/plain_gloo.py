"""Ranks of one gloo job, each profiled with plain `torch.profiler` (no tracelens), as a
user would write it: the job issue 28 names. A DDP loop (Linear-ReLU-Linear, SGD) whose
rank SLOW spends SLOW_MS of host time per step before its forward, so it reaches every
all-reduce late. The ways a user marks steps and records:

    --marks profiler   profile(schedule=...) and prof.step() each step (ProfilerStep#N)
    --marks function   record_function("train_step") around each step, no schedule
    --marks none       no step marks at all (the profiler records the whole loop)
    --stack            with_stack=True (Python frames in the trace)
    --slow python      the slow rank's extra time is pure Python (a tokenizer, say)
    --slow data        ... is a DataLoader whose __getitem__ is slow on that rank
    --slow ops         ... is extra torch ops on the host (CPU tensors) on that rank

Run it alone (it starts the other ranks as subprocesses, on one GPU when there is one:
gloo moves the CUDA gradients through the host; `--backend nccl` puts rank R on GPU R
modulo the GPUs there are, and NCCL refuses two ranks on one GPU):

    python workloads/ranks/plain_gloo.py --out traces/plain --marks profiler --stack

or under torchrun. Writes `<out>/rank<R>.pt.trace.json.gz` (export_chrome_trace, gzipped)
and `<out>/times/rank<R>.json`: the step times measured outside the profiler.
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
from collections.abc import Iterator
from contextlib import nullcontext
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.profiler import ProfilerActivity, profile, record_function, schedule

#: The rank made slow (not 0, so a report that names rank 0 by default is wrong).
SLOW_RANK = 1
#: Host time the slow rank adds per step, before its forward.
SLOW_MS = 25.0
HIDDEN = 1024
BATCH = 64
WAIT, WARMUP, ACTIVE = 2, 2, 6


def python_work(ms: float) -> int:
    t0 = time.perf_counter()
    acc = 0
    while (time.perf_counter() - t0) * 1e3 < ms:
        acc = (acc * 31 + 7) % 1_000_003
    return acc


class SlowData(torch.utils.data.Dataset[torch.Tensor]):
    """A dataset whose items cost `ms` of host time each (decode, augmentation)."""

    def __init__(self, ms: float, n: int, hidden: int) -> None:
        self.ms, self.n, self.hidden = ms, n, hidden

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        python_work(self.ms)
        return torch.ones(self.hidden)


def batches(rank: int, slow: str, ms: float, steps: int, hidden: int) -> Iterator[torch.Tensor]:
    per_item = ms / BATCH if (rank == SLOW_RANK and slow == "data") else 0.0
    data = SlowData(per_item, steps * BATCH, hidden)
    loader = torch.utils.data.DataLoader(data, batch_size=BATCH, num_workers=0)
    yield from loader


def run_rank(rank: int, world: int, args: argparse.Namespace) -> None:
    backend: str = args.backend
    if "MASTER_ADDR" in os.environ and "RANK" in os.environ:
        dist.init_process_group(backend)
    else:
        dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{args.port}", rank=rank, world_size=world)
    dev = torch.device("cuda" if torch.cuda.is_available() and args.device != "cpu" else "cpu")
    if backend == "nccl":  # one GPU per rank where there are enough (NCCL refuses two ranks on one)
        dev = torch.device("cuda", rank % torch.cuda.device_count())
        torch.cuda.set_device(dev)
    if dev.type == "cpu":
        torch.set_num_threads(1)  # ranks share the host's cores: one thread each
    hidden = HIDDEN if dev.type == "cuda" else HIDDEN // 4
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, hidden)).to(dev)
    ddp = DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=1e-3)
    y = torch.randn(BATCH, hidden, device=dev)
    host_a = torch.randn(256, 256)
    slow_here = rank == SLOW_RANK

    def step(x: torch.Tensor) -> None:
        if slow_here and args.slow == "python":
            python_work(args.slow_ms)
        elif slow_here and args.slow == "ops":
            t0 = time.perf_counter()
            while (time.perf_counter() - t0) * 1e3 < args.slow_ms:
                host_a.mul_(0.999).add_(1e-3)
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.mse_loss(ddp(x.to(dev, non_blocking=True)), y)
        loss.backward()
        opt.step()

    total = WAIT + WARMUP + ACTIVE
    data = batches(rank, args.slow, args.slow_ms, total + 2, hidden)
    for _ in range(2):  # untraced warm-up: gloo's first connection, DDP's bucket rebuild
        step(next(data))
    if dev.type == "cuda":
        torch.cuda.synchronize()
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
    kwargs: dict[str, object] = {}
    if args.marks == "profiler":
        kwargs["schedule"] = schedule(wait=WAIT, warmup=WARMUP, active=ACTIVE, repeat=1)
    times: list[float] = []
    with profile(activities=acts, record_shapes=True, with_stack=args.stack, **kwargs) as prof:  # type: ignore[arg-type]
        for _ in range(total if args.marks == "profiler" else ACTIVE):
            t0 = time.perf_counter()
            ctx = record_function("train_step") if args.marks == "function" else nullcontext()
            with ctx:
                step(next(data))
            if dev.type == "cuda":
                torch.cuda.synchronize()
            times.append((time.perf_counter() - t0) * 1e3)
            if args.marks == "profiler":
                prof.step()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp())
    raw = tmp / "trace.json"
    prof.export_chrome_trace(str(raw))
    with open(raw, "rb") as src, gzip.open(out / f"rank{rank}.pt.trace.json.gz", "wb", compresslevel=6) as dst:
        shutil.copyfileobj(src, dst)
    shutil.rmtree(tmp, ignore_errors=True)
    (out / "times").mkdir(exist_ok=True)
    (out / "times" / f"rank{rank}.json").write_text(json.dumps({
        "rank": rank, "slow_rank": SLOW_RANK, "slow": args.slow, "slow_ms": args.slow_ms, "marks": args.marks,
        "stack": args.stack, "device": dev.type, "backend": backend, "world": world, "step_ms": times,
        "torch": torch.__version__}))  # fmt: skip
    dist.barrier()
    dist.destroy_process_group()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--marks", choices=("profiler", "function", "none"), default="profiler")
    p.add_argument("--stack", action="store_true")
    p.add_argument("--slow", choices=("python", "data", "ops", "none"), default="python")
    p.add_argument("--slow-ms", type=float, default=SLOW_MS)
    p.add_argument("--device", default="auto")
    p.add_argument("--backend", choices=("gloo", "nccl"), default="gloo")
    p.add_argument("--port", type=int, default=29571)
    p.add_argument("--rank", type=int, default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        run_rank(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), args)
        return
    if args.rank is not None:
        run_rank(args.rank, args.world, args)
        return
    base = [sys.executable, os.path.abspath(__file__), *sys.argv[1:]]
    children = [subprocess.Popen([*base, "--rank", str(r)]) for r in range(1, args.world)]
    run_rank(0, args.world, args)
    codes = [c.wait() for c in children]
    if any(codes):
        sys.exit(f"a rank failed: exit codes {codes}")


if __name__ == "__main__":
    main()
