"""The profiler turned off: the step as the user sees it without torch.profiler.

Model: every host node of the graph keeps the share of its gap and of its own time that
is not the profiler's recorded events (derive/profiler_cost.py: a fixed cost per Python
frame, torch op and runtime call on its thread); GPU work is unchanged. A CUDA-graph
launch keeps GRAPH_LAUNCH_UNPROFILED_US of its host time (derive/profiler_cost.py), and
its kernels that waited for the call to return wait for the shortened call
(_graph_launches).
Applied on top of a fix's edit, it scales what the fix left, so a fix that removes host work also
removes that work's profiler cost once. LOW takes the per-event costs at
profiler_cost.LOW_SCALE of nominal (the microbenchmark's), HIGH at HIGH_SCALE.

Checked against the CUDA-event step times measured outside the profiler on the H200
pairs of workloads/diff_pairs.py (every side) and on timm, PyG and the Trainer
(workloads/programs/README.md on branch programs): bench/diff_pairs_check.py prints the
unprofiled error beside the profiled one.
"""

from __future__ import annotations

import numpy as np

from tracelens.derive.graph import CLOCK_SLACK_US, END_START, GPU, HOST, START_START, DependencyGraph
from tracelens.derive.profiler_cost import HIGH_SCALE, LOW_SCALE, ProfilerCost
from tracelens.derive.replay import Edit
from tracelens.derive.transforms import Variant


def apply(g: DependencyGraph, edit: Edit, cost: ProfilerCost, variant: Variant = Variant.NOMINAL) -> None:
    assert edit.gap is not None and edit.dur is not None
    scale = {Variant.LOW: LOW_SCALE, Variant.HIGH: HIGH_SCALE}.get(variant, 1.0)
    gap_keep, dur_keep = cost.keep(g, scale)
    edit.gap *= gap_keep
    edit.dur *= dur_keep
    _graph_launches(g, edit, cost, scale)


#: A CUDA graph's first kernel started this soon after its launch call returned: it waited
#: for the call (H200, diff_graph_u_after: under the profiler every replay's first kernel
#: started 4.6-5.7 µs after cudaGraphLaunch returned, the stream idle 120-180 µs before).
RELEASE_US = 20.0


#: What CUPTI adds on the GPU between consecutive kernels of a replayed CUDA graph (µs):
#: diff_graph_after's 200 kernels ran 0.256 µs apart under the profiler (median) and
#: 0.14 µs apart without it ((268.7 µs a step by CUDA events - 240.6 µs of kernels) / 200).
#: Fitted on the `graph` pair; graph_u (300 kernels) is scored as unseen.
CUPTI_GRAPH_KERNEL_GAP_US = 0.12


def _graph_launches(g: DependencyGraph, edit: Edit, cost: ProfilerCost, scale: float) -> None:
    """A launch call that launched several kernels (a CUDA graph) keeps its time without
    the profiler (profiler_cost.GRAPH_LAUNCH_UNPROFILED_US), with no MIN_KEEP floor: the
    cost is its measured time, not an estimate from events. A launch's first kernel that
    waited for the call to return (started within RELEASE_US after it) waits for the
    shortened call: its stream gap becomes
    the nominal one and an edge from the call's end carries the measured delay. The
    graph's kernels run CUPTI_GRAPH_KERNEL_GAP_US closer together."""
    assert edit.gap is not None and edit.dur is not None
    launched = g.launcher[g.launcher >= 0]
    if not len(launched):
        return
    many = np.zeros(g.n, dtype=bool)
    many[np.flatnonzero(np.bincount(launched, minlength=g.n) > 1)] = True
    calls = np.flatnonzero(many & (g.kind == HOST))
    own = g.end[calls] - g.ts[calls]
    keep = np.where(own > 0, np.clip(1.0 - scale * cost.in_own[calls] / np.where(own > 0, own, 1.0), 0.0, 1.0), 1.0)
    edit.dur[calls] = g.dur[calls] * keep
    gpu = np.flatnonzero((g.kind == GPU) & (g.launcher >= 0))
    gpu = gpu[many[g.launcher[gpu]]]
    # CUPTI's GPU-side cost between a graph's kernels.
    edit.gap[gpu] = np.maximum(edit.gap[gpu] - CUPTI_GRAPH_KERNEL_GAP_US, 0.0)
    src = g.launcher[gpu]
    after = g.ts[gpu] - g.end[src]
    # Each launch's first kernel (its graph's kernels run in order on their stream).
    first = np.ones(len(gpu), dtype=bool)
    first[1:] = src[1:] != src[:-1]
    held = first & (after >= -CLOCK_SLACK_US) & (after <= RELEASE_US)
    if not held.any():
        return
    nodes, src, after = gpu[held], src[held], np.maximum(after[held], 0.0)
    edit.gap[nodes] = np.minimum(edit.gap[nodes], g.gpu_gap_us)
    # Its launch edge (from the call's start) takes the nominal latency: the call's end binds.
    edges = (g.e_type == START_START) & np.isin(g.e_dst, nodes) & many[g.e_src]
    if edges.any():
        if edit.e_delay is None:
            edit.e_delay = g.e_delay.copy()
        edit.e_delay[edges] = np.minimum(edit.e_delay[edges], g.launch_latency_us)
    add = (src, nodes, after, np.full(len(nodes), END_START, dtype=np.int8))
    if edit.extra is not None:
        add = tuple(np.concatenate([x, y]) for x, y in zip(edit.extra, add, strict=True))  # type: ignore[assignment]
    edit.extra = add
