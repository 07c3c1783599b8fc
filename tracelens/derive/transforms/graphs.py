"""Capture each step as a CUDA graph (torch.cuda.graph, torch.compile(mode="reduce-overhead")).

Model: in every step, the host's time from its first launch to its last (dispatch of
every op, every launch call, the Python between them) is replaced by one cudaGraphLaunch,
whose host cost grows with the kernels it holds; the step's kernels keep their durations
and run back to back at the replay's gap on this GPU, none of them waiting for a launch
of its own. Host work before the step's first launch and after its last (data loading,
the loop, logging) stays. LOW keeps the Python between ops (only the ops' and the calls'
host time goes: a capture of the model's forward but not of the code around it) and
launches at 1.5x the measured per-kernel cost; HIGH launches at half of it.

The region must not sync, allocate or change shape: a graph cannot capture a `.item()`
or a `cudaMalloc`, and replays one shape. The caller refuses those regions (the fix is
blocked by the host_sync, allocation or shape_dynamism finding) or applies their fixes
first (a joint prediction).

Measured on the H200 (torch 2.11.0+cu130, sample_traces/diff_graph_after: 200 tiny
kernels replayed from one graph under the profiler): cudaGraphLaunch took 277 µs on the
host (median of 6; 1.39 µs a kernel) and the kernels ran 0.26 µs apart (median gap).
Checked against the `graph` pair of workloads/diff_pairs.py.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tracelens.derive.graph import GPU, HOST, START_START, DependencyGraph
from tracelens.derive.replay import Edit
from tracelens.derive.transforms import Variant, intersect, launch_nodes_of, remove_host_time

#: Host cost of cudaGraphLaunch per kernel in the graph, under the profiler (H200).
GRAPH_LAUNCH_PER_KERNEL_US = 1.39
#: Its fixed part (a graph of one kernel).
GRAPH_LAUNCH_BASE_US = 5.0
#: Gap between consecutive kernels of a replayed graph on one stream (H200).
GRAPH_KERNEL_GAP_US = 0.26
_LOW_FACTOR, _HIGH_FACTOR = 1.5, 0.5


def apply(
    g: DependencyGraph,
    edit: Edit,
    variant: Variant,
    steps: Sequence[tuple[float, float]],
    op_intervals: np.ndarray,
) -> int:
    """`steps`: the (host start, host end) of each step to capture. `op_intervals`: the
    window's top-level op intervals (LOW removes only the host time inside them).
    Returns the number of steps captured."""
    assert edit.gap is not None and edit.dur is not None and edit.e_alive is not None
    per_kernel = GRAPH_LAUNCH_PER_KERNEL_US * {Variant.LOW: _LOW_FACTOR, Variant.HIGH: _HIGH_FACTOR}.get(variant, 1.0)
    if not len(steps):
        return 0
    starts = np.array([a for a, _ in steps], dtype=np.float64)
    ends = np.array([b for _, b in steps], dtype=np.float64)
    # Each host node's step (-1 outside every step).
    step_of = np.searchsorted(starts, g.ts, side="right") - 1
    inside = (step_of >= 0) & (g.ts < ends[np.clip(step_of, 0, None)]) & (g.kind == HOST)
    step_of = np.where(inside, step_of, -1)
    gpu = np.flatnonzero(g.kind == GPU)
    launchers = launch_nodes_of(g, gpu)
    ok = launchers >= 0
    gpu, launchers = gpu[ok], launchers[ok]
    k_step = step_of[launchers]
    ok = k_step >= 0
    launched, launchers, k_step = gpu[ok], launchers[ok], k_step[ok]
    if not len(launched):
        return 0
    # Per (step, thread): the span of nodes from its first launch to its last.
    n_chains = g.n_chains
    key = k_step * n_chains + g.chain[launchers]
    keys, inv = np.unique(key, return_inverse=True)
    lo = np.full(len(keys), np.iinfo(np.int64).max)
    hi = np.full(len(keys), -1, dtype=np.int64)
    np.minimum.at(lo, inv, launchers)
    np.maximum.at(hi, inv, launchers)
    mark = np.zeros(g.n + 1, dtype=np.int64)
    np.add.at(mark, lo, 1)
    np.add.at(mark, hi + 1, -1)
    region = np.cumsum(mark)[: g.n] > 0
    nodes = np.flatnonzero(region)
    if variant == Variant.LOW:
        # Only the ops' and the calls' host time goes: the Python between ops stays.
        spans = np.column_stack([g.ts[lo], g.end[hi]])
        remove_host_time(g, edit, intersect(op_intervals, spans))
    else:
        # From each thread's first launch on, the host does nothing but the graph launch;
        # the work before the first launch (its own gap) stays.
        later = region.copy()
        later[lo] = False
        edit.gap[later] = 0.0
    edit.dur[nodes] = 0.0
    # One graph launch per step, at the step's first launch call.
    steps_hit, first_idx = np.unique(k_step, return_index=True)
    order = np.lexsort((g.ts[launchers], k_step))
    first_of_step = launchers[order][np.searchsorted(k_step[order], steps_hit, side="left")]
    counts = np.bincount(k_step, minlength=len(steps))[steps_hit]
    edit.dur[first_of_step] = GRAPH_LAUNCH_BASE_US + per_kernel * counts
    del first_idx
    # The kernels wait for their step's graph launch, not their own, and run back to back.
    edit.e_alive &= ~((g.e_type == START_START) & np.isin(g.e_dst, launched))
    src = first_of_step[np.searchsorted(steps_hit, k_step)]
    edit.gap[launched] = np.minimum(edit.gap[launched], GRAPH_KERNEL_GAP_US)
    add = (src, launched, np.full(len(src), g.launch_latency_us), np.full(len(src), START_START, dtype=np.int8))
    if edit.extra is not None:
        add = tuple(np.concatenate([x, y]) for x, y in zip(edit.extra, add, strict=True))  # type: ignore[assignment]
    edit.extra = add
    return len(steps_hit)
