"""capture_compile: a script whose model is compiled with torch.compile.

A 4-block MLP-mixer-like module (LayerNorm, Linear 2048, GELU, residual) on batch
64 x 2048 bf16, compiled with `torch.compile` (inductor, default mode), then called
ITERS times under no_grad. The first call compiles (seconds of Python that a
with_stack recording of the whole run would mostly consist of); the default window
skips it: the steps are the outermost module calls.

Run
    tracelens capture workloads/capture_compile.py [--iters 60]
"""

import argparse
import time

import torch


class Block(torch.nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(dim)
        self.fc1 = torch.nn.Linear(dim, 2 * dim)
        self.fc2 = torch.nn.Linear(2 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(torch.nn.functional.gelu(self.fc1(self.norm(x))))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iters", type=int, default=60)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    dim = 2048 if args.device == "cuda" else 64
    dtype = torch.bfloat16 if args.device == "cuda" else torch.float32
    model = torch.nn.Sequential(*[Block(dim) for _ in range(4)]).to(args.device, dtype)
    compiled = torch.compile(model)
    x = torch.randn(64, dim, device=args.device, dtype=dtype)
    t0 = time.perf_counter()
    with torch.no_grad():
        for i in range(args.iters):
            y = compiled(x)
            if i == 0:
                y.sum().item()
                print(f"[capture_compile] first call (compile) {time.perf_counter() - t0:.1f} s", flush=True)
    print(f"[capture_compile] {args.iters} calls, {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
