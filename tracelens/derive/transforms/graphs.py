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
from tracelens.derive.transforms import Variant, launch_nodes_of, remove_host_time

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
    host = g.kind == HOST
    gpu = np.flatnonzero(g.kind == GPU)
    launchers = launch_nodes_of(g, gpu)
    src_x: list[np.ndarray] = []
    dst_x: list[np.ndarray] = []
    captured = 0
    for a, b in steps:
        in_step = host & (g.ts >= a) & (g.ts < b)
        launched = gpu[(launchers >= 0) & in_step[np.clip(launchers, 0, None)]]
        if not len(launched):
            continue
        first_launch = int(launch_nodes_of(g, launched[:1])[0])
        # Per thread, the span from its first launch in the step to its last.
        lnodes = np.unique(launch_nodes_of(g, launched))
        spans = []
        for c in np.unique(g.chain[lnodes]).tolist():
            mine = lnodes[g.chain[lnodes] == c]
            spans.append(np.arange(int(mine.min()), int(mine.max()) + 1))
        nodes = np.concatenate(spans)
        if variant == Variant.LOW:
            for span in spans:
                lo, hi = g.ts[span[0]], g.end[span[-1]]
                ops = op_intervals[(op_intervals[:, 1] > lo) & (op_intervals[:, 0] < hi)]
                if len(ops):
                    remove_host_time(g, edit, np.clip(ops, lo, hi))
        else:
            # From each thread's first launch on, the host does nothing but the graph
            # launch; the work before the first launch (its own gap) stays.
            for span in spans:
                edit.gap[span[1:]] = 0.0
        edit.dur[nodes] = 0.0
        edit.dur[first_launch] = GRAPH_LAUNCH_BASE_US + per_kernel * len(launched)
        # The kernels wait for the graph's launch, not their own, and run back to back.
        edit.e_alive &= ~((g.e_type == START_START) & np.isin(g.e_dst, launched))
        src_x.append(np.full(len(launched), first_launch, dtype=np.int64))
        dst_x.append(launched)
        edit.gap[launched] = np.minimum(edit.gap[launched], GRAPH_KERNEL_GAP_US)
        captured += 1
    if src_x:
        s, d = np.concatenate(src_x), np.concatenate(dst_x)
        add = (s, d, np.full(len(s), g.launch_latency_us), np.full(len(s), START_START, dtype=np.int8))
        if edit.extra is not None:
            add = tuple(np.concatenate([x, y]) for x, y in zip(edit.extra, add, strict=True))  # type: ignore[assignment]
        edit.extra = add
    return captured
