"""Kernels that run faster: a matmul padded to an aligned shape, a compute-bound kernel at
its roof, a full last wave, clocks that no longer throttle, a memory-bound kernel at the
bandwidth roof.

Model: each listed kernel's duration is multiplied by its factor (the analyzer's
estimate of the fixed kernel's time over today's: 1/slowdown against an aligned peer
measured in the same trace, the roof share, the wave efficiency, the clock ratio);
everything else, and the dependencies, stay. The replay then says what the faster
kernels buy the step: nothing where the host, not the GPU, sets its pace. LOW and HIGH
move the factor by the caller's spread (`low`/`high` factors).

Checked against the H200 `align` pair of workloads/diff_pairs.py (bf16 mm K=4095 ->
4096, the cutlass_75 align1 fallback vs nvjet).
"""

from __future__ import annotations

import numpy as np

from tracelens.derive.graph import DependencyGraph
from tracelens.derive.replay import Edit


def apply(g: DependencyGraph, edit: Edit, gpu_rows: np.ndarray, factors: np.ndarray) -> int:
    """Scale the kernels (model.gpu rows) by their factors; returns the nodes changed."""
    assert edit.dur is not None
    nodes = g.node_of_gpu_rows(np.asarray(gpu_rows, dtype=np.int64))
    ok = nodes >= 0
    f = np.clip(np.asarray(factors, dtype=np.float64)[ok], 0.0, 1.0)
    edit.dur[nodes[ok]] = edit.dur[nodes[ok]] * f
    return int(ok.sum())


def scale(g: DependencyGraph, edit: Edit, gpu_rows: np.ndarray, factors: np.ndarray) -> int:
    """Like apply, with factors above 1 allowed (kernels that the fix makes longer)."""
    assert edit.dur is not None
    nodes = g.node_of_gpu_rows(np.asarray(gpu_rows, dtype=np.int64))
    ok = nodes >= 0
    edit.dur[nodes[ok]] = edit.dur[nodes[ok]] * np.clip(np.asarray(factors, dtype=np.float64)[ok], 0.0, None)
    return int(ok.sum())
