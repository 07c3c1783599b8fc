"""A plain script (no profiler, no step marks): set-up, then back-to-back bf16 GEMMs.

8192^3 bf16 products for about three seconds: compute-bound at the matrix units' rate;
power and clocks may throttle. Set-up (random data) must not headline.
"""

from __future__ import annotations

import time

import torch

SECONDS = 3.0


def main() -> None:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    n = 8192 if device == "cuda" else 256
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    t0 = time.time()
    count = 0
    while time.time() - t0 < SECONDS:
        for _ in range(8):
            c = a @ b
        count += 8
        if device == "cuda":
            torch.cuda.synchronize()
    print("products", count, float(c[0, 0]))


if __name__ == "__main__":
    main()
