"""A plain script (no profiler, no step marks): set-up, then a Python loop of tiny ops.

What a user would run under `tracelens capture workloads/plain/tiny_loop.py`: start-up
(CUDA init, random data) followed by a steady loop of 200 elementwise ops on a 1024-element
tensor per iteration. The loop is launch-bound: the report must say so, not blame set-up.
"""

from __future__ import annotations

import torch

ITERATIONS = 60
OPS_PER_ITERATION = 50  # x4 ops: add, mul, sin, cos


def setup(device: str) -> tuple[torch.Tensor, torch.Tensor]:
    big = torch.randn(4096, 4096, device=device)  # set-up work the report must not headline
    small = torch.randn(1024, device=device)
    return big, small


def iteration(x: torch.Tensor) -> torch.Tensor:
    for _ in range(OPS_PER_ITERATION):
        x = torch.cos(torch.sin(x * 1.0001 + 0.5))
    return x


def main() -> None:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    big, x = setup(device)
    for _ in range(ITERATIONS):
        x = iteration(x)
    if device == "cuda":
        torch.cuda.synchronize()
    print("done", float(big[0, 0]) + float(x[0]))


if __name__ == "__main__":
    main()
