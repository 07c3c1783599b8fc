"""gemm_bf16: a compute-bound workload: back-to-back 8192^3 bf16 matrix products.

What it demonstrates
    Each step runs 8 ``torch.mm`` calls of [8192, 8192] x [8192, 8192] in bf16 on random
    data (2 * 8192^3 = 1.1 TFLOP each, ~1.4 ms at the ~790 TFLOP/s measured on an H200)
    into a preallocated output. Host work is negligible; the GPU is saturated.

What an analyzer should find
    GPU busy ~100% of each ``ProfilerStep``, time dominated by one Hopper cuBLAS kernel
    (``nvjet_sm90_*``); achieved rate from shapes/dtypes (FLOPs = 2*M*N*K, no ``flops``
    arg in the trace) close to the bf16 peak: compute-bound, arithmetic intensity
    ~2700 FLOP/byte; nothing to fix except possible power/clock throttling
    (sustained 8192^3 bf16 GEMMs drop the SM clock below max on an H200).

Observed in the committed capture (H200, torch 2.11.0+cu130)
    ``nvjet_sm90_tst_320x128_64x3_1x2_h_bz_coopB_NNT``, 1.376 ms each = ~800 TFLOP/s, each
    preceded by a small ``Memset (Device)``; launched by ``cuLaunchKernelEx`` (category
    ``cuda_driver``). The host enqueues a step in ~0.2 ms, so the GPU runs far behind the
    ``ProfilerStep`` ranges: 7 of the 39 kernels in the window were launched in the
    untraced profiler warm-up step and have no launch event in the trace.

Run
    python workloads/gemm_bf16.py --out sample_traces
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch
from _profile import parse_args, profile_steps

NAME = "gemm_bf16"


def main() -> None:
    args = parse_args(__doc__)
    dev = args.device
    n = 8192 if args.is_cuda else 512
    per_step = 8
    steps = args.steps or 4
    warmup = args.warmup if args.warmup is not None else 1

    g = torch.Generator(device=dev).manual_seed(0)
    a = torch.randn(n, n, device=dev, generator=g).to(torch.bfloat16)
    b = torch.randn(n, n, device=dev, generator=g).to(torch.bfloat16)
    c = torch.empty(n, n, device=dev, dtype=torch.bfloat16)

    def step() -> None:
        for _ in range(per_step):
            torch.mm(a, b, out=c)

    profile_steps(
        step,
        name=NAME,
        steps=steps,
        warmup=warmup,
        out_dir=args.out,
        device=dev,
        metadata={"M": n, "N": n, "K": n, "dtype": "bfloat16", "mm_per_step": per_step},
    )


if __name__ == "__main__":
    main()
