"""A 40-step DDP loop on gloo, as issue 33 describes it: a Linear-ReLU-Linear model and
SGD, where rank 1 spends 20 ms of Python per step before its forward (pure-Python work
standing for preprocessing or a tokenizer: no torch op, so only the host side of its
trace can say why it is late).

    torchrun --nproc-per-node 2 -m tracelens capture workloads/ranks/ddp_cpu.py

`--device cuda` runs the same loop with the model on the GPU (every rank on GPU 0 when
there is one GPU: gloo moves the CUDA gradients through the host). `--slow-rank`,
`--slow-ms`, `--steps` change the case. Plain `torchrun ... ddp_cpu.py` (no tracelens)
runs it unprofiled.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

#: The rank made slow (not 0, so a report that names rank 0 by default is wrong).
SLOW_RANK = 1
#: Python time the slow rank adds per step, before its forward.
SLOW_MS = 20.0
STEPS = 40
HIDDEN = 512
BATCH = 64


def python_work(ms: float) -> int:
    """Pure Python for `ms` milliseconds (no torch op: what a tokenizer or a
    hand-written augmentation does), returning something so it is not optimised out."""
    t0 = time.perf_counter()
    acc = 0
    while (time.perf_counter() - t0) * 1e3 < ms:
        acc = (acc * 31 + 7) % 1_000_003
    return acc


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=STEPS)
    p.add_argument("--slow-rank", type=int, default=SLOW_RANK)
    p.add_argument("--slow-ms", type=float, default=SLOW_MS)
    p.add_argument("--device", default="cpu")
    p.add_argument("--times", type=Path, help="write each rank's step times (ms, measured here) as DIR/rank<R>.json")
    args = p.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    dev = torch.device(args.device)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(HIDDEN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, HIDDEN)).to(dev)
    ddp = DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=1e-3)
    x = torch.randn(BATCH, HIDDEN, device=dev)
    y = torch.randn(BATCH, HIDDEN, device=dev)
    times = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        if rank == args.slow_rank:
            python_work(args.slow_ms)
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.mse_loss(ddp(x), y)
        loss.backward()
        opt.step()
        times.append((time.perf_counter() - t0) * 1e3)
    if args.times is not None:
        args.times.mkdir(parents=True, exist_ok=True)
        (args.times / f"rank{rank}.json").write_text(json.dumps({"rank": rank, "step_ms": times}))
    if dev.type == "cuda":
        torch.cuda.synchronize()
    dist.barrier()
    dist.destroy_process_group()
    if os.environ.get("DDP_CPU_EXIT"):  # a test's way to make the script fail on one rank
        code = int(os.environ["DDP_CPU_EXIT"].split(":")[1])
        if rank == int(os.environ["DDP_CPU_EXIT"].split(":")[0]):
            raise SystemExit(code)


if __name__ == "__main__":
    main()
