"""The NVML sampler's own cost, on the machine it runs on (needs a CUDA GPU and
nvidia-ml-py).

    python bench/bench_sampler.py [--repeat 7] [--interval-ms 10]

Runs a fixed mixed workload (Python-dispatched small kernels plus GEMMs, synchronized
each iteration, so the host thread is the critical path and any GIL time the sampler
takes shows up) with and without the sampler, alternating, and reports the median wall
times, the slowdown, and the sampler's own busy time per second. The bar is < 1 %.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import torch

from tracelens.capture.nvml import NvmlSampler


def workload(iters: int) -> float:
    x = torch.randn(1 << 16, device="cuda")
    a = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(iters):
        for _ in range(20):
            x = torch.sin(x) + 1.0
        a = (a @ a).clamp_(-1, 1)
        torch.cuda.synchronize()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=9)
    ap.add_argument("--iters", type=int, default=3000)
    ap.add_argument("--intervals-ms", default="10,5", help="comma-separated sampling periods to test")
    args = ap.parse_args()
    workload(50)  # warm up
    print(f"machine: {torch.cuda.get_device_name(0)}, {platform.processor() or platform.machine()}")
    print(f"versions: python {platform.python_version()}, torch {torch.__version__}")
    print(f"{args.repeat} alternating runs of {args.iters} iterations per setting; medians")
    cols = ["sampling period", "wall s without", "wall s with", "slowdown (medians)", "slowdown (best runs)"]
    cols += ["spread without"]
    cols += ["sampler thread busy", "samples/s"]
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for interval_ms in (float(x) for x in args.intervals_ms.split(",")):
        off: list[float] = []
        on: list[float] = []
        busy_per_s: list[float] = []
        samples_per_s: list[float] = []
        for _ in range(args.repeat):
            off.append(workload(args.iters))
            sampler = NvmlSampler(interval_ms / 1000.0)
            assert sampler.start(), sampler.note
            t = workload(args.iters)
            res = sampler.stop()
            on.append(t)
            busy_per_s.append(res.busy_s / t)
            samples_per_s.append(res.samples / t)
        m_off, m_on = statistics.median(off), statistics.median(on)
        spread = (max(off) - min(off)) / m_off
        print(
            f"| {interval_ms:g} ms | {m_off:.3f} | {m_on:.3f} | {100 * (m_on / m_off - 1):+.2f}% | "
            f"{100 * (min(on) / min(off) - 1):+.2f}% | "
            f"{100 * spread:.2f}% | {100 * statistics.median(busy_per_s):.2f}% | "
            f"{statistics.median(samples_per_s):.0f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
