"""Kernels whose source is a file: Inductor-generated Triton and a user @triton.jit kernel.

A small MLP block (LayerNorm, Linear, GELU, residual, softmax over the output) under
``torch.compile`` (compiled before the profiler starts, so Inductor's own Python is not
recorded), plus a hand-written Triton kernel defined in this file, ``scale_shift_kernel``,
launched every step. Writes ``inductor_kernels.pt.trace.json.gz`` (5 ProfilerSteps, with
stacks and shapes) into --out. Run with ``TORCHINDUCTOR_CACHE_DIR`` pointing under --out
so the compiled modules the trace names can be kept with it.

    TORCHINDUCTOR_CACHE_DIR=/tmp/ind/cache python workloads/inputs/inductor_kernels.py --out /tmp/ind
"""

from __future__ import annotations

import argparse
import gzip
import shutil
import sys
import tempfile
from pathlib import Path

import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from torch import nn
from torch.profiler import ProfilerActivity, profile, schedule


@triton.jit
def scale_shift_kernel(x_ptr, out_ptr, n, scale, shift, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    keep = offs < n
    x = tl.load(x_ptr + offs, mask=keep)
    tl.store(out_ptr + offs, x * scale + shift, mask=keep)


def scale_shift(x: torch.Tensor, scale: float, shift: float) -> torch.Tensor:
    out = torch.empty_like(x)
    n = x.numel()
    scale_shift_kernel[(triton.cdiv(n, 1024),)](x, out, n, scale, shift, BLOCK=1024)
    return out


class MLP(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.up = nn.Linear(dim, 4 * dim)
        self.down = nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x + self.down(F.gelu(self.up(self.norm(x))))
        return torch.softmax(y * 0.5, dim=-1)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="inductor")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    dev = torch.device("cuda")
    model = MLP(1024).to(dev, torch.bfloat16)
    compiled = torch.compile(model)
    x = torch.randn(16, 512, 1024, device=dev, dtype=torch.bfloat16)

    def step() -> torch.Tensor:
        with torch.no_grad():
            return scale_shift(compiled(x), 2.0, -1.0)

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    with profile(
        activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
        record_shapes=True,
        with_stack=True,
        schedule=schedule(wait=0, warmup=1, active=5, repeat=1),
    ) as prof:
        for _ in range(6):
            step()
            prof.step()
        torch.cuda.synchronize()
    tmp = Path(tempfile.mkdtemp()) / "t.json"
    prof.export_chrome_trace(str(tmp))
    with open(tmp, "rb") as src, gzip.open(out / "inductor_kernels.pt.trace.json.gz", "wb", compresslevel=9) as dst:
        shutil.copyfileobj(src, dst)
    print("wrote", out / "inductor_kernels.pt.trace.json.gz", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
