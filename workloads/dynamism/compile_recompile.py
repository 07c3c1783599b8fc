"""torch.compile(dynamic=False) given a new input length each step: every step
recompiles (until Dynamo's recompile limit, when it falls back to eager).

With --fixed every input is padded to one length: one graph, compiled once.

Run
    tracelens capture --no-stack --memory --steps 1-7 workloads/dynamism/compile_recompile.py [--fixed]
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from _model import Encoder, setup

MAX_LEN = 256


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--fixed", action="store_true", help="pad every input to MAX_LEN")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = p.parse_args()
    device, dtype = setup(args.device)
    model = Encoder(dim=256, heads=4, layers=2).to(device, dtype).eval()
    compiled = torch.compile(model, dynamic=False)
    with torch.no_grad():
        for i in range(args.steps):
            length = 64 + 16 * i  # a new length every step
            x = torch.randn(4, length, 256, device=device, dtype=dtype)
            if args.fixed:
                x = F.pad(x, (0, 0, 0, MAX_LEN - length))
            compiled(x)
    print("done")


if __name__ == "__main__":
    main()
