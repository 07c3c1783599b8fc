"""A plain script (no profiler, no step marks): two ranks sharing one GPU over gloo.

Rank 0 is this process (the one `tracelens capture` profiles); it starts rank 1 as a
subprocess. Each step both do the same GPU work, then all-reduce a CUDA tensor with gloo.
Rank 1 spends extra host time per step (a busy loop standing in for slow preprocessing),
so rank 0 waits inside the all-reduce: its report must name the wait as communication.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import torch
import torch.distributed as dist

STEPS = 12
SLOW_RANK_EXTRA_S = 0.02
PORT = int(os.environ.get("GLOO_WAIT_PORT", "29533"))


def main() -> None:
    rank = int(os.environ.get("GLOO_WAIT_RANK", "0"))
    child = None
    if rank == 0:
        env = dict(os.environ, GLOO_WAIT_RANK="1")
        child = subprocess.Popen([sys.executable, os.path.abspath(__file__)], env=env)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{PORT}", rank=rank, world_size=2)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    a = torch.randn(2048, 2048, device=device)
    grad = torch.zeros(1 << 20, device=device)
    for _ in range(STEPS):
        for _ in range(4):
            b = a @ a
        grad += b[:1024].flatten()[: grad.numel()].sum() * 1e-6
        if rank == 1:
            t0 = time.perf_counter()
            while time.perf_counter() - t0 < SLOW_RANK_EXTRA_S:
                pass
        dist.all_reduce(grad)
    dist.destroy_process_group()
    if child is not None:
        child.wait()
    print("rank", rank, "done")


if __name__ == "__main__":
    main()
