"""elementwise_fp32: memory-bound elementwise work on 256M fp32 elements (1 GiB tensors).

What it demonstrates
    Each step runs, on 256M-element fp32 tensors (1 GiB each):
      * ``y = x * 1.5 + z`` (mul then add: two kernels, 2 + 3 GiB of traffic),
      * ``torch.exp(y, out=w)`` (2 GiB) and an in-place ``w.add_(x)`` (3 GiB),
      * ``torch.addcmul(w, x, z)`` (3 reads + 1 write: 4 GiB),
      * a transposed copy ``y.view(16384, 16384).t().contiguous()`` (read + strided
        write: 2 GiB).
    About 16 GiB of DRAM traffic per step (~4 ms). Each op does ~1 FLOP per element, so
    arithmetic intensity is ~0.1-0.25 FLOP/byte, far below the H200 ridge point: every kernel waits on DRAM (~4.3 TB/s
    read+write measured on an H200 for a device-to-device copy).

What an analyzer should find
    GPU busy ~100%, kernels from ``elementwise_kernel`` / ``vectorized_elementwise_kernel``
    and a transpose/copy kernel; achieved bandwidth per kernel (bytes from ``Input Dims``
    and dtype / duration) near the memory ceiling, achieved FLOP/s tiny: memory-bound;
    the transposed ``.contiguous()`` copy possibly below the plain copy's bandwidth.
    Remedy: fuse the chain (torch.compile) to cut memory passes, avoid the transpose copy.

Observed in the committed capture (H200, torch 2.11.0+cu130)
    exp 505 us (4.25 TB/s), add 735 us (4.4 TB/s), addcmul 960 us (4.5 TB/s), mul ~503 us;
    the transposed ``.contiguous()`` copy 1.83 ms (~1.2 TB/s, a non-vectorised
    ``elementwise_kernel<128, 2, ...>``). The host enqueues a step in ~0.15 ms, so GPU work
    trails the ``ProfilerStep`` ranges; 4 of the 22 kernels in the window come from the
    profiler warm-up step.

Run
    python workloads/elementwise_fp32.py --out sample_traces
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch
from _profile import parse_args, profile_steps

NAME = "elementwise_fp32"


def main() -> None:
    args = parse_args(__doc__)
    dev = args.device
    side = 16384 if args.is_cuda else 512  # side^2 = 256M elements on CUDA
    n = side * side
    steps = args.steps or 3
    warmup = args.warmup if args.warmup is not None else 1

    g = torch.Generator(device=dev).manual_seed(0)
    x = torch.randn(n, device=dev, generator=g)
    z = torch.randn(n, device=dev, generator=g)
    w = torch.empty(n, device=dev)

    def step() -> None:
        y = x * 1.5 + z  # 2 kernels
        torch.exp(y, out=w)
        w.add_(x)
        y = torch.addcmul(w, x, z, value=0.5)  # 3 reads + 1 write
        t = y.view(side, side).t().contiguous()  # transposed copy
        del y, t

    profile_steps(
        step,
        name=NAME,
        steps=steps,
        warmup=warmup,
        out_dir=args.out,
        device=dev,
        metadata={"elements": n, "dtype": "float32", "bytes_per_tensor": 4 * n},
    )


if __name__ == "__main__":
    main()
