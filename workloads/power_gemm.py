"""power_gemm: sustained bf16 matrix products on random data, then on zeros.

The seed documents' power experiment: the same 8192^3 bf16 torch.mm, first on normally
distributed inputs, then on all-zero inputs. Switching power follows the bit flips, so
on random data the H200 reaches its power limit and lowers its SM clock (NVML clocks-
event reason 0x4, software power cap); on zeros it runs faster at a higher clock
(measured here before: about 790 vs 894 TFLOP/s).

What an analyzer should find (run under `tracelens capture`, which samples NVML):
power_throttle with reason sw_power_cap and a lower time-weighted SM clock during the
random phase than during the zeros phase.

Run (on a CUDA machine):
    tracelens capture --no-stack --no-shapes -o sample_traces/power_gemm.pt.trace.json.gz \
        workloads/power_gemm.py --seconds 6
Each phase is marked with record_function("random") / ("zeros"); every 8 products are
one step (tracelens.capture.step()).
"""

from __future__ import annotations

import argparse
import time

import torch

try:
    from tracelens.capture import step
except ImportError:  # run without tracelens: no step marks

    def step() -> None:
        pass


def phase(name: str, a: torch.Tensor, b: torch.Tensor, seconds: float) -> float:
    out = torch.empty_like(a)
    n = 0
    t0 = time.perf_counter()
    with torch.profiler.record_function(name):
        while time.perf_counter() - t0 < seconds:
            for _ in range(8):
                torch.mm(a, b, out=out)
            n += 8
            step()
            torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    tflops = 2 * a.shape[0] * a.shape[1] * b.shape[1] * n / dt / 1e12
    print(f"{name}: {n} products in {dt:.2f} s = {tflops:.0f} TFLOP/s")
    return tflops


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=6.0, help="length of each phase")
    ap.add_argument("--size", type=int, default=8192)
    args = ap.parse_args()
    n = args.size
    g = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16, generator=g)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16, generator=g)
    for _ in range(3):  # warm up cuBLAS
        torch.mm(a, b)
    torch.cuda.synchronize()
    phase("random", a, b, args.seconds)
    time.sleep(0.5)  # a visible idle gap between the phases
    phase("zeros", torch.zeros_like(a), torch.zeros_like(b), args.seconds)


if __name__ == "__main__":
    main()
