"""Check the matmul-shape analyzers against the H200 sweep (no GPU needed).

    python bench/matmul_sweep_check.py [sample_traces/matmul_sweep.pt.trace.json.gz]

Prints, per shape of workloads/matmul_sweep.py: alignment verdict, kernel, tile, waves,
predicted wave efficiency, the kernel's TFLOP/s in the trace and the CUDA-event TFLOP/s
measured outside the profiler; then the correlation between predicted efficiency and
measured throughput across the square sweep, raw and with the size trend removed (small
products are slower for reasons other than waves: too little work per SM).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from tracelens.derive.matmuls import MatmulRow, matmul_rows
from tracelens.model import load_trace

REPO = Path(__file__).resolve().parents[1]


def detrended_r(rows: list[MatmulRow], y: np.ndarray) -> tuple[float, float]:
    eff = np.array([r.wave_efficiency for r in rows])
    logf = np.log(np.array([2.0 * r.m * r.n * r.k for r in rows]))
    design = np.vstack([logf, np.ones_like(logf)]).T
    coef, *_ = np.linalg.lstsq(design, y, rcond=None)
    return float(np.corrcoef(eff, y)[0, 1]), float(np.corrcoef(eff, y - design @ coef)[0, 1])


def correlations(trace: Path, measured: Path, min_size: int) -> dict[str, tuple[float, float, int]]:
    rows = [r for r in matmul_rows(load_trace(trace)) if r.m == r.n == r.k and r.aligned and r.m >= min_size]
    meas = {(x["m"], x["n"], x["k"]): x["tflops"] for x in json.loads(measured.read_text())["results"]}
    out = {}
    for name, y in (
        ("kernel TFLOP/s in the trace", np.array([r.tflops for r in rows])),
        ("CUDA-event TFLOP/s", np.array([meas[(r.m, r.n, r.k)] for r in rows])),
    ):
        raw, detr = detrended_r(rows, y)
        out[name] = (raw, detr, len(rows))
    return out


def main() -> None:
    trace = Path(sys.argv[1]) if len(sys.argv) > 1 else REPO / "sample_traces" / "matmul_sweep.pt.trace.json.gz"
    measured = trace.with_name(trace.name.replace(".pt.trace.json.gz", ".measured.json"))
    meas = {(x["m"], x["n"], x["k"]): x["tflops"] for x in json.loads(measured.read_text())["results"]}
    rows = sorted(matmul_rows(load_trace(trace)), key=lambda r: (r.m, r.n, r.k))
    print("| M x N x K | aligned | fallback kernel | tile | tiles | slots | waves | predicted efficiency "
          "| kernel TFLOP/s | CUDA-event TFLOP/s |")  # fmt: skip
    print("|" + "---|" * 10)
    for r in rows:
        print(
            f"| {r.m}x{r.n}x{r.k} | {'yes' if r.aligned else 'NO'} | {'yes' if r.fallback_kernel else ''} | {r.tile} "
            f"| {r.tiles} | {r.slots} | {r.waves:.2f} | {r.wave_efficiency:.0%} | {r.tflops:.0f} "
            f"| {meas.get((r.m, r.n, r.k), float('nan')):.0f} |"
        )
    for min_size in (1024, 2048):
        for name, (raw, detr, n) in correlations(trace, measured, min_size).items():
            print(
                f"square shapes >= {min_size} ({n}): efficiency vs {name}: r = {raw:.2f}, size-detrended r = {detr:.2f}"
            )


if __name__ == "__main__":
    main()
