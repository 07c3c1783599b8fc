"""gemm_misaligned: bf16 matrix products whose inner dimensions break 16-byte alignment.

What it demonstrates
    Each step runs, inside a ``record_function`` range named after the shape, 3 bf16
    ``torch.mm`` calls for each of these (M, N, K) shapes, A [M, K] x B [K, N]:
      * ``aligned_4096``   4096 x 4096 x 4096
      * ``k4095``          4096 x 4096 x 4095  (A's rows are 4095 elements: not a multiple of 8)
      * ``n4095``          4096 x 4095 x 4096  (B's and C's rows are 4095 elements)
      * ``aligned_2048``   2048 x 2048 x 2048
      * ``odd_2047``       2047 x 2047 x 2047
    When an operand's leading dimension is not a multiple of 8 bf16 elements (16 bytes),
    cuBLAS cannot use its aligned Hopper kernels and falls back to slower ones (seen on
    an H200: ``cutlass_75_tensorop_bf16_s1688gemm_bf16_*_align1``, 2.6-5x slower).

What an analyzer should find
    For each misaligned shape: a kernel name different from the aligned twin (align1 /
    sm75-80 kernels instead of ``nvjet_sm90_*``), achieved TFLOP/s (2*M*N*K / duration,
    from ``Input Dims``) several times lower than the aligned shape of nearly the same
    FLOPs; recommendation: pad the dimension to a multiple of 8 (or 64).

Observed in the committed capture (H200, torch 2.11.0+cu130)
    aligned 4096^3: ``nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT``, 166 us, ~827 TFLOP/s;
    K=4095 and N=4095: ``cutlass_75_tensorop_bf16_s1688gemm_bf16_256x128_nn_align1``,
    ~962 us, ~143 TFLOP/s (5.8x slower); aligned 2048^3: nvjet, 23 us, ~744 TFLOP/s;
    2047^3: the same align1 kernel, 108 us, ~158 TFLOP/s. nvjet kernels are launched by
    ``cuLaunchKernelEx``, the cutlass ones by ``cuLaunchKernel`` (both ``cuda_driver``).

Run
    python workloads/gemm_misaligned.py --out sample_traces
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch
from _profile import parse_args, profile_steps

NAME = "gemm_misaligned"

# (label, M, N, K)
SHAPES = [
    ("aligned_4096", 4096, 4096, 4096),
    ("k4095", 4096, 4096, 4095),
    ("n4095", 4096, 4095, 4096),
    ("aligned_2048", 2048, 2048, 2048),
    ("odd_2047", 2047, 2047, 2047),
]
# smoke-test sizes for --device cpu (same alignment pattern, 16x smaller)
SHAPES_CPU = [
    ("aligned_256", 256, 256, 256),
    ("k255", 256, 256, 255),
    ("n255", 256, 255, 256),
    ("aligned_128", 128, 128, 128),
    ("odd_127", 127, 127, 127),
]


def main() -> None:
    args = parse_args(__doc__)
    dev = args.device
    shapes = SHAPES if args.is_cuda else SHAPES_CPU
    reps = 3
    steps = args.steps or 3
    warmup = args.warmup if args.warmup is not None else 1

    g = torch.Generator(device=dev).manual_seed(0)
    cases = []
    for label, m, n, k in shapes:
        a = torch.randn(m, k, device=dev, generator=g).to(torch.bfloat16)
        b = torch.randn(k, n, device=dev, generator=g).to(torch.bfloat16)
        cases.append((f"mm_{label}_M{m}_N{n}_K{k}", a, b))

    def step() -> None:
        for tag, a, b in cases:
            with torch.profiler.record_function(tag):
                for _ in range(reps):
                    torch.mm(a, b)

    profile_steps(
        step,
        name=NAME,
        steps=steps,
        warmup=warmup,
        out_dir=args.out,
        device=dev,
        metadata={"shapes": [c[0] for c in cases], "dtype": "bfloat16", "reps": reps},
    )


if __name__ == "__main__":
    main()
