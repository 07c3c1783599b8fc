"""launch_bound: a Python loop of tiny ops, bound by kernel-launch overhead.

What it demonstrates
    Each step runs 200 elementwise ops (add, mul, sin, cos, in turn, 50 rounds) on a
    1024-element fp32 tensor. Each op launches one kernel of ~1-2 us of GPU time, but the
    Python + dispatcher + ``cudaLaunchKernel`` cost per op is several microseconds, so the
    CPU cannot keep the GPU fed: the GPU runs a kernel, then waits for the next launch.
    There are no syncs inside the loop.

What an analyzer should find
    ~200 kernels per ``ProfilerStep``, all tiny (median kernel duration of a few us or
    less, each far below its launch-to-launch spacing); GPU busy fraction low while the
    CPU thread is ~100% busy in ``aten::*`` / ``cudaLaunchKernel``; no host syncs (only the
    profiler's own ``cudaDeviceSynchronize`` at the end of the window). Verdict:
    launch-overhead bound; remedies are fusing ops (torch.compile), CUDA graphs, or
    batching the work into fewer, larger kernels.

Observed in the committed capture (H200, torch 2.11.0+cu130)
    1000 kernels (200/step), ~1 us each; steps ~2.75 ms (~14 us of host time per op);
    GPU busy ~8%; no syncs besides the profiler's ``cudaDeviceSynchronize``.

Run
    python workloads/launch_bound.py --out sample_traces
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch
from _profile import parse_args, profile_steps

NAME = "launch_bound"


def main() -> None:
    args = parse_args(__doc__)
    dev = args.device
    steps = args.steps or 5
    warmup = args.warmup if args.warmup is not None else 2
    rounds = 50  # 4 ops per round -> 200 ops per step

    x0 = torch.randn(1024, device=dev)
    c = torch.full((1024,), 0.999, device=dev)

    keep = [x0]

    def step() -> None:
        y = x0
        for _ in range(rounds):
            y = torch.add(y, 0.01)
            y = torch.mul(y, c)
            y = torch.sin(y)
            y = torch.cos(y)
        keep[0] = y

    profile_steps(
        step,
        name=NAME,
        steps=steps,
        warmup=warmup,
        out_dir=args.out,
        device=dev,
        metadata={"elements": 1024, "ops_per_step": 4 * rounds},
    )


if __name__ == "__main__":
    main()
