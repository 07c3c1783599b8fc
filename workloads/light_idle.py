"""light_idle: a light, mostly idle GPU script that must NOT be reported as throttled.

Small elementwise work with sleeps between steps: the GPU idles most of the time and its
clock drops for the idle reason (NVML 0x1, gpu_idle), which is not throttling.

Run (on a CUDA machine):
    tracelens capture -o sample_traces/light_idle.pt.trace.json.gz workloads/light_idle.py
"""

from __future__ import annotations

import time

import torch

try:
    from tracelens.capture import step
except ImportError:

    def step() -> None:
        pass


def main() -> None:
    x = torch.randn(1 << 20, device="cuda")
    for _ in range(20):
        for _ in range(10):
            x = torch.sin(x) * 1.01
        torch.cuda.synchronize()
        time.sleep(0.05)
        step()
    print("done", float(x.sum()))


if __name__ == "__main__":
    main()
