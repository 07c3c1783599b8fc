"""A compiled model with a graph break: the forward picks the rows above a threshold
with `x[mask]` (a data-dependent shape: Dynamo cannot trace it, splits the graph in two
and runs the indexing eagerly, which waits for the GPU).

With --fixed the same selection is written with torch.where (a static shape): one graph.

Run
    tracelens capture --no-stack --memory workloads/dynamism/compile_graph_break.py [--fixed]
"""

from __future__ import annotations

import argparse

import torch
from _model import Block, setup


class Gated(torch.nn.Module):
    def __init__(self, fixed: bool, dim: int = 256) -> None:
        super().__init__()
        self.fixed = fixed
        self.pre = Block(dim, 4)
        self.post = Block(dim, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.pre(x)
        score = h.mean(-1)
        if self.fixed:
            h = torch.where((score > 0).unsqueeze(-1), h, torch.zeros_like(h))
            n = (score > 0).sum()
            out = self.post(h)
            return out.sum(1) / n
        keep = h[score > 0]  # data-dependent shape: graph break
        out = self.post(keep.unsqueeze(0))
        return out.sum(1) / keep.shape[0]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--fixed", action="store_true", help="torch.where instead of x[mask]")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = p.parse_args()
    device, dtype = setup(args.device)
    model = Gated(args.fixed).to(device, dtype).eval()
    compiled = torch.compile(model)
    x = torch.randn(4, 256, 256, device=device, dtype=dtype)
    with torch.no_grad():
        for _ in range(args.steps):
            compiled(x)
    print("done")


if __name__ == "__main__":
    main()
