"""A loop that calls torch.cuda.empty_cache() every step and allocates buffers whose size
keeps changing: the caching allocator hands its memory back and asks the driver again
(cudaFree synchronises the device, cudaMalloc takes host time).

Each step allocates a work buffer of 16-96 MiB (a different size each step), runs a
small MLP over it and frees it. With --fixed the buffer is one size, allocated once, and
there is no empty_cache().

Run
    tracelens capture --memory workloads/dynamism/empty_cache_loop.py [--fixed]
"""

from __future__ import annotations

import argparse
import random

import torch


class Mlp(torch.nn.Module):
    def __init__(self, dim: int = 1024) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(dim, 4 * dim)
        self.fc2 = torch.nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x)))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--fixed", action="store_true", help="one buffer, allocated once, no empty_cache()")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = p.parse_args()
    dev = args.device
    torch.manual_seed(0)
    model = Mlp().to(dev)
    rng = random.Random(0)
    fixed_rows = 16384
    buf = torch.empty(fixed_rows, 1024, device=dev) if args.fixed else None
    with torch.no_grad():
        for _ in range(args.steps):
            if args.fixed:
                assert buf is not None
                x = buf.normal_()
            else:
                rows = rng.randrange(4096, 24576)  # 16-96 MiB of fp32
                x = torch.randn(rows, 1024, device=dev)
            y = model(x)
            del x, y
            if not args.fixed and dev == "cuda":
                torch.cuda.empty_cache()
    print("done")


if __name__ == "__main__":
    main()
