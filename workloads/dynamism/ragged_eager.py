"""An eager model fed a different sequence length every step (ragged batches).

Each step draws a sequence length between 64 and 512 and runs a 2-block transformer
encoder (dim 512, batch 8, bf16) on it. With --fixed every batch is padded to 512 (one
shape: the loop could be captured in a CUDA graph or compiled once).

Run
    tracelens capture --memory workloads/dynamism/ragged_eager.py [--fixed]
"""

from __future__ import annotations

import argparse
import random

import torch
import torch.nn.functional as F
from _model import Encoder, setup

MAX_LEN = 512


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--fixed", action="store_true", help="pad every batch to MAX_LEN")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = p.parse_args()
    device, dtype = setup(args.device)
    model = Encoder().to(device, dtype).eval()
    rng = random.Random(0)
    with torch.no_grad():
        for _ in range(args.steps):
            length = rng.randrange(64, MAX_LEN + 1)
            x = torch.randn(8, length, 512, device=device, dtype=dtype)
            if args.fixed:
                x = F.pad(x, (0, 0, 0, MAX_LEN - length))
            model(x)
    torch.cuda.synchronize() if device == "cuda" else None
    print("done")


if __name__ == "__main__":
    main()
