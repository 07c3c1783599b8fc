"""wave_sweep: bf16 matmuls, square and rectangular, around the H200's wave boundaries.

For the wave_quantization analyzer (issue 10): Hopper's persistent cuBLAS kernels run
tiles on SMs x CTAs/SM slots whatever their launch grid, so a shape's efficiency comes from
its tile count. Squares 1024..4096 in steps of 128 plus the issue's pairs (1792/1920,
2304/2432), and rectangles: M fixed at 4096 or 8192 (tokens) with N stepping across tile
boundaries, K 4096. Each shape is timed outside the profiler (median of --reps products,
CUDA events, fresh random bf16 data), then run --profiled times inside
record_function("shape_MxNxK") under torch.profiler so the trace carries the kernel names,
grids and shapes. Measured TFLOP/s go into the trace metadata (`tracelens_sweep`) and into
wave_sweep.measured.json.

    python workloads/wave_sweep.py --out sample_traces
    python bench/matmul_sweep_check.py sample_traces/wave_sweep.pt.trace.json.gz
"""

from __future__ import annotations

import json
import os

import torch
from matmul_sweep import sweep


def shapes() -> list[tuple[int, int, int]]:
    out = [(n, n, n) for n in range(1024, 4096 + 1, 128)]
    out += [(1792, 1792, 1792), (1920, 1920, 1920), (2304, 2304, 2304), (2432, 2432, 2432)]
    for m in (4096, 8192):
        out += [(m, n, 4096) for n in range(1024, 4096 + 1, 256)]
    out += [(2304, 4096, 4096), (2432, 4096, 4096), (16384, 1152, 1024), (16384, 1280, 1024)]
    return sorted(dict.fromkeys(out))


def main() -> None:
    dst, results = sweep("wave_sweep", shapes(), default_profiled=2)
    with open(os.path.join(os.path.dirname(dst), "wave_sweep.measured.json"), "w") as f:
        json.dump({"dtype": "bf16", "device": torch.cuda.get_device_name(), "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
