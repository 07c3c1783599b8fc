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

import argparse
import gzip
import json
import os
import shutil
import statistics
import tempfile

import torch


def shapes() -> list[tuple[int, int, int]]:
    out = [(n, n, n) for n in range(1024, 4096 + 1, 128)]
    out += [(1792, 1792, 1792), (1920, 1920, 1920), (2304, 2304, 2304), (2432, 2432, 2432)]
    for m in (4096, 8192):
        out += [(m, n, 4096) for n in range(1024, 4096 + 1, 256)]
    out += [(2304, 4096, 4096), (2432, 4096, 4096), (16384, 1152, 1024), (16384, 1280, 1024)]
    return sorted(dict.fromkeys(out))


def timed(a: torch.Tensor, b: torch.Tensor, reps: int) -> float:
    """Median ms of one product, CUDA events around each."""
    for _ in range(3):
        torch.mm(a, b)
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.mm(a, b)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="sample_traces")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--profiled", type=int, default=2, help="products per shape inside the profiler")
    args = ap.parse_args()
    g = torch.Generator(device="cuda").manual_seed(0)
    data = {}
    results = []
    for m, n, k in shapes():
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=g)
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16, generator=g)
        ms = timed(a, b, args.reps)
        tflops = 2 * m * n * k / (ms * 1e-3) / 1e12
        results.append({"m": m, "n": n, "k": k, "median_ms": round(ms, 5), "tflops": round(tflops, 2)})
        data[(m, n, k)] = (a, b)
        print(f"{m}x{n}x{k}: {ms:.4f} ms, {tflops:.0f} TFLOP/s", flush=True)
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=acts, record_shapes=True) as prof:
        for (m, n, k), (a, b) in data.items():
            with torch.profiler.record_function(f"shape_{m}x{n}x{k}"):
                for _ in range(args.profiled):
                    torch.mm(a, b)
            torch.cuda.synchronize()
        prof.add_metadata_json("tracelens_sweep", json.dumps({"dtype": "bf16", "results": results}))
    os.makedirs(args.out, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        raw = os.path.join(tmp, "t.json")
        prof.export_chrome_trace(raw)
        dst = os.path.join(args.out, "wave_sweep.pt.trace.json.gz")
        with open(raw, "rb") as src, gzip.open(dst, "wb", compresslevel=9) as out:
            shutil.copyfileobj(src, out)
    with open(os.path.join(args.out, "wave_sweep.measured.json"), "w") as f:
        json.dump({"dtype": "bf16", "device": torch.cuda.get_device_name(), "results": results}, f, indent=1)
    print(f"wrote {dst}: {os.path.getsize(dst) / 1e6:.2f} MB, {len(results)} shapes")


if __name__ == "__main__":
    main()
