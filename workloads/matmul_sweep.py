"""matmul_sweep: bf16 matmul shapes around alignment and wave boundaries, timed.

For the misaligned_matmul and wave_quantization analyzers:
  * the seed's quiz, M=N=K=2047 vs 2048;
  * odd K and odd N against the aligned twin at 2048 and 4096;
  * square N from 1024 to 4096 in steps of 64, across the wave boundaries of the tiles
    cuBLAS picks on the GPU.
Each shape runs inside record_function("shape_MxNxK") under torch.profiler
(record_shapes=True), after being timed outside the profiler with CUDA events (median of
--reps products); the measured TFLOP/s go into the trace's metadata under
`tracelens_sweep`, so tests can compare the analyzers' predictions with measurements.

What an analyzer should find: every shape with an odd K or N flagged misaligned (and
running a fallback kernel), no aligned shape flagged; predicted wave efficiency tracking
the measured TFLOP/s across the square sweep.

Run (on a CUDA machine):
    python workloads/matmul_sweep.py --out sample_traces
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
    out = [(2047, 2047, 2047), (2048, 2048, 2048)]
    for s in (2048, 4096):
        out += [(s, s, s - 1), (s, s - 1, s), (s, s, s)]
    out += [(n, n, n) for n in range(1024, 4096 + 1, 64)]
    return list(dict.fromkeys(out))


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


def sweep(
    name: str, shape_list: list[tuple[int, int, int]], default_profiled: int
) -> tuple[str, list[dict[str, float]]]:
    """Time each bf16 shape with CUDA events, then run it under torch.profiler inside
    record_function("shape_MxNxK"); write <out>/<name>.pt.trace.json.gz. Returns the path
    and the measured rows (shared with wave_sweep.py)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="sample_traces")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--profiled", type=int, default=default_profiled, help="products per shape inside the profiler")
    args = ap.parse_args()
    g = torch.Generator(device="cuda").manual_seed(0)
    data = {}
    results: list[dict[str, float]] = []
    for m, n, k in shape_list:
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
        # Metadata must be added while the profiler is still running to reach the export.
        prof.add_metadata_json("tracelens_sweep", json.dumps({"dtype": "bf16", "results": results}))
    os.makedirs(args.out, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        raw = os.path.join(tmp, "t.json")
        prof.export_chrome_trace(raw)
        dst = os.path.join(args.out, f"{name}.pt.trace.json.gz")
        with open(raw, "rb") as src, gzip.open(dst, "wb", compresslevel=9) as out:
            shutil.copyfileobj(src, out)
    print(f"wrote {dst}: {os.path.getsize(dst) / 1e6:.2f} MB, {len(results)} shapes")
    return dst, results


def main() -> None:
    sweep("matmul_sweep", shapes(), default_profiled=3)


if __name__ == "__main__":
    main()
