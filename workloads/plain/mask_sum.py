"""A plain script (no profiler, no step marks): a loop with data-dependent syncs.

Every iteration does elementwise work on 16M fp32 elements, `y[mask]` (nonzero: a host
sync), `.item()` on the loss and a Python `if` on a tensor. The report must headline the
syncs of the loop with their lines, not the set-up.
"""

from __future__ import annotations

import torch

ITERATIONS = 20
N = 1 << 24


def main() -> None:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    n = N if device == "cuda" else 1 << 16
    x = torch.randn(n, device=device)
    w = torch.randn(n, device=device)
    total = 0.0
    for _ in range(ITERATIONS):
        y = torch.tanh(x * w + 0.1) * 2.0
        mask = y > 0.5
        picked = y[mask]  # nonzero: the host waits for the GPU
        loss = picked.sum() / n
        if loss > 0:  # a tensor `if`: another sync
            total += loss.item()  # and another
        x = x + 0.001 * y
    print("total", total)


if __name__ == "__main__":
    main()
