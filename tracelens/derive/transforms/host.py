"""Host work that the fix removes: torch.compile compiling inside the loop (a recompile
for every new shape), cuDNN/cuBLAS planning for a shape seen the first time, allocator
calls and torch.cuda.empty_cache().

Model: the host time inside the listed intervals leaves the training thread (calls wholly
inside take no time and no longer wait), everything else stays; where the fix makes
kernels bigger (padding ragged lengths to one), their durations are scaled by the
caller's factors. LOW keeps `low_share` of the host time (allocations that still miss
the cache, a compile that still happens once in the window), HIGH removes all of it.

A recompile's own GPU work (Inductor benchmarking the kernels it generated, the cache
fills between the runs) is launched from inside the compile: it goes with the compile
(remove_launched_inside; dyn_recompile -> dyn_recompile_fixed, 3,344 of 3,384 kernels).

A step that plans for a new shape runs the rest of its host work slower too: in the
steps where the fix removes planning, the host's other time between calls keeps
WARM_GAP_SHARE of what it measured (NOMINAL; LOW keeps all of it, HIGH WARM_GAP_SHARE_HIGH)
(warm_host; cuDNN's planning evicting the host's caches is the likely cause, not shown).

Checked against the `ragged` (eager encoder fed a new length every step -> padded) and
`empty_cache` pairs of workloads/diff_pairs.py, and the dyn_* sample pairs
(workloads/dynamism).
"""

from __future__ import annotations

import numpy as np

from tracelens.derive.graph import HOST, DependencyGraph
from tracelens.derive.replay import Edit
from tracelens.derive.transforms import Variant, covered, cut_waits, merged, remove_gpu_nodes, remove_host_time


def apply(
    g: DependencyGraph,
    edit: Edit,
    variant: Variant,
    intervals: np.ndarray,
    low_share: float = 0.75,
    kernel_rows: np.ndarray | None = None,
    kernel_factors: np.ndarray | None = None,
) -> None:
    assert edit.dur is not None
    share = {Variant.LOW: low_share, Variant.HIGH: 1.0}.get(variant, 1.0)
    inside = remove_host_time(g, edit, np.asarray(intervals, dtype=np.float64).reshape(-1, 2), share)
    if share >= 1.0:
        edit.dur[inside] = 0.0
    cut_waits(g, edit, inside)
    if kernel_rows is not None and kernel_factors is not None and len(kernel_rows):
        nodes = g.node_of_gpu_rows(np.asarray(kernel_rows, dtype=np.int64))
        ok = nodes >= 0
        edit.dur[nodes[ok]] = edit.dur[nodes[ok]] * np.asarray(kernel_factors, dtype=np.float64)[ok]


def remove_launched_inside(g: DependencyGraph, edit: Edit, intervals: np.ndarray) -> int:
    """The GPU activities launched by a call inside `intervals` (measured times) do not run;
    returns how many."""
    iv = merged(np.asarray(intervals, dtype=np.float64).reshape(-1, 2))
    gpu = np.flatnonzero(g.launcher >= 0)
    if not len(iv) or not len(gpu):
        return 0
    t = g.ts[g.launcher[gpu]]
    inside = gpu[covered(iv, t, t + 1e-3) > 0]
    remove_gpu_nodes(g, edit, inside)
    return len(inside)


#: The host's time between calls in a step that no longer plans for a new shape, over that
#: time with the planning taken out (H200, fitted on the `ragged` pair: 1026 µs a step
#: padded vs 1378 µs left after removing the planning, 0.745; on dyn_ragged -> fixed, not
#: fitted, 2418 vs 3230 µs, 0.749).
WARM_GAP_SHARE = 0.745
WARM_GAP_SHARE_HIGH = 0.7


#: The same for the work after a step's first copy from pageable memory, once the copy is
#: pinned: the staging copy (19 MB a step in the `pinned` pair) leaves the host's caches
#: cold for the work after it. H200, bench/host_speed_probe.py (fresh processes): the conv net's forward
#: enqueues in 680 and 595 µs after a pageable copy, 455 and 456 µs after a pinned one
#: (0.67, 0.77); under the profiler with stacks 1892 vs 1058 µs (0.56). NOMINAL 0.67,
#: HIGH the profiled 0.56.
PAGEABLE_WARM_SHARE = 0.67
PAGEABLE_WARM_SHARE_HIGH = 0.56

#: The same for the work after a step's first cudaFree (empty_cache() releasing the cache:
#: each free waits for the device), once the allocator keeps its blocks. H200, the
#: `empty_cache` pair's three captures (sample_traces/pairs, pairs_r1, pairs_r2): a step's
#: randn, two linears and relu, less their allocator calls, take 563, 722 and 654 µs of
#: host before and 411, 632 and 370 µs after (0.73, 0.88, 0.57). NOMINAL the median, HIGH
#: the lowest.
FREE_WARM_SHARE = 0.73
FREE_WARM_SHARE_HIGH = 0.57


def warm_host(
    g: DependencyGraph,
    edit: Edit,
    variant: Variant,
    spans: np.ndarray,
    shares: tuple[float, float] = (WARM_GAP_SHARE, WARM_GAP_SHARE_HIGH),
) -> None:
    """The host nodes inside `spans` (the steps whose cache-evicting work the fix removes)
    keep `shares` (NOMINAL, HIGH) of their gaps; LOW keeps them all (see the module
    docstring)."""
    share = {Variant.LOW: 1.0, Variant.HIGH: shares[1]}.get(variant, shares[0])
    iv = merged(np.asarray(spans, dtype=np.float64).reshape(-1, 2))
    h = np.flatnonzero(g.kind == HOST)
    if share >= 1.0 or not len(iv) or not len(h):
        return
    at = np.searchsorted(iv[:, 0], g.ts[h], side="right") - 1
    inside = h[(at >= 0) & (g.ts[h] < iv[np.clip(at, 0, None), 1])]
    if edit.gap_scale is None:
        edit.gap_scale = np.ones(g.n)
    edit.gap_scale[inside] *= share
