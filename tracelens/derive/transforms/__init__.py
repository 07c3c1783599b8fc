"""What-if transforms of the window's dependency graph, one per fix the report advises.

Each transform takes the graph (derive/graph.py), an `Edit` to change in place and the
targets its finding names (trace rows), and models one fix; `replay` then gives the
window with the fix applied, and the gain is the replayed difference (issue 25). Every
transform has three variants, from the model's own uncertainty: LOW (the pessimistic
end: the fix costs what it plausibly could), NOMINAL, HIGH (the optimistic end). The
modules' docstrings state each model and the measurement it was checked against.

Shared helpers here: removing host time inside given intervals from a thread's chain,
removing GPU nodes, cutting a call's waits.
"""

from __future__ import annotations

from enum import StrEnum

import numpy as np

from tracelens.derive.graph import END_END, GPU, HOST, DependencyGraph
from tracelens.derive.replay import Edit


class Variant(StrEnum):
    LOW = "low"  # the smallest gain the model allows
    NOMINAL = "nominal"
    HIGH = "high"  # the largest


VARIANTS = (Variant.LOW, Variant.NOMINAL, Variant.HIGH)


def merged(intervals: np.ndarray) -> np.ndarray:
    """Sorted, non-overlapping (n, 2) intervals."""
    iv = np.asarray(intervals, dtype=np.float64).reshape(-1, 2)
    if len(iv) < 2:
        return iv
    iv = iv[np.argsort(iv[:, 0], kind="stable")]
    reach = np.maximum.accumulate(iv[:, 1])
    new = np.ones(len(iv), dtype=bool)
    new[1:] = iv[1:, 0] > reach[:-1]
    starts = iv[new, 0]
    group = np.cumsum(new) - 1
    ends = np.full(len(starts), -np.inf)
    np.maximum.at(ends, group, iv[:, 1])
    return np.column_stack([starts, ends])


def intersect(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The intersection of two sets of intervals (as merged intervals)."""
    a, b = merged(a), merged(b)
    if not len(a) or not len(b):
        return np.empty((0, 2))
    t = np.concatenate([a[:, 0], a[:, 1], b[:, 0], b[:, 1]])
    d = np.concatenate([np.ones(len(a)), -np.ones(len(a)), np.ones(len(b)), -np.ones(len(b))])
    order = np.lexsort((d, t))  # at one instant, ends before starts
    t, depth = t[order], np.cumsum(d[order])
    both = np.flatnonzero(depth[:-1] == 2)
    out = np.column_stack([t[both], t[both + 1]])
    return out[out[:, 1] > out[:, 0]]


def covered(iv: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Length of [a, b] inside the merged intervals `iv`, elementwise."""
    if not len(iv):
        return np.zeros(np.broadcast(a, b).shape)
    starts, ends = iv[:, 0], iv[:, 1]
    cum = np.concatenate([[0.0], np.cumsum(ends - starts)])

    def upto(t: np.ndarray) -> np.ndarray:
        k = np.searchsorted(starts, t, side="right")  # intervals starting at or before t
        full = cum[np.clip(k - 1, 0, None)]
        last = np.clip(t - starts[np.clip(k - 1, 0, None)], 0.0, (ends - starts)[np.clip(k - 1, 0, None)])
        return np.where(k > 0, full + last, 0.0)

    return np.clip(upto(np.asarray(b, dtype=np.float64)) - upto(np.asarray(a, dtype=np.float64)), 0.0, None)


def prev_end(g: DependencyGraph) -> np.ndarray:
    """Each node's measured chain predecessor end (the chain's initial state for firsts)."""
    out = np.empty(g.n)
    out[1:] = g.end[:-1]
    out[g.chain_first[:-1]] = g.chain_init
    return out


def remove_host_time(g: DependencyGraph, edit: Edit, intervals: np.ndarray, share: float = 1.0) -> np.ndarray:
    """Take `share` of the host time inside `intervals` (measured times, any thread) off
    the host chains: each node's gap and own time shrink by the part of them inside.
    Returns the host nodes wholly inside (their waits are the caller's to cut)."""
    assert edit.gap is not None and edit.dur is not None
    iv = merged(intervals)
    h = np.flatnonzero(g.kind == HOST)
    if not len(iv) or not len(h):
        return np.empty(0, np.int64)
    pe = prev_end(g)[h]
    in_gap = covered(iv, pe, g.ts[h])
    in_own = covered(iv, g.ts[h], g.end[h])
    own = g.end[h] - g.ts[h]
    edit.gap[h] = np.maximum(edit.gap[h] - share * in_gap, 0.0)
    frac = np.where(own > 0, in_own / np.where(own > 0, own, 1.0), 0.0)
    edit.dur[h] = edit.dur[h] * (1.0 - share * frac)
    return h[(own > 0) & (in_own >= own - 1e-9)]


def cut_waits(g: DependencyGraph, edit: Edit, nodes: np.ndarray) -> None:
    """The calls no longer wait on the GPU: their wait edges go; their own time stays."""
    assert edit.e_alive is not None and edit.e_fixed is not None
    if not len(nodes):
        return
    edit.e_alive &= ~((g.e_type == END_END) & np.isin(g.e_dst, nodes))
    edit.e_fixed[nodes] = -np.inf


def remove_gpu_nodes(g: DependencyGraph, edit: Edit, nodes: np.ndarray) -> None:
    """The activities do not run: zero time, no gap of their own, and nothing waits for
    them to be launched (they stay as placeholders that keep their stream's order)."""
    assert edit.dur is not None and edit.gap is not None and edit.e_alive is not None and edit.s_fixed is not None
    nodes = nodes[nodes >= 0]
    if not len(nodes):
        return
    edit.dur[nodes] = 0.0
    edit.gap[nodes] = 0.0
    edit.s_fixed[nodes] = -np.inf
    edit.e_alive &= ~(np.isin(g.e_dst, nodes) & (g.e_type != END_END))


def launch_nodes_of(g: DependencyGraph, gpu_nodes: np.ndarray) -> np.ndarray:
    """The host node that launched each GPU node (-1 when it is no node of the window)."""
    nodes = np.asarray(gpu_nodes, dtype=np.int64)
    return g.launcher[nodes] if len(nodes) else np.empty(0, np.int64)


def add_host_time(g: DependencyGraph, edit: Edit, threads: list[tuple[int, int]], at: np.ndarray, extra: float) -> None:
    """The host does `extra` µs more at each time in `at` (measured times) on each thread:
    added to the gap of the thread's first call after it."""
    assert edit.gap is not None
    key_of = {k: c for c, k in enumerate(g.chain_key) if g.chain_host[c]}
    for thread, t in zip(threads, np.asarray(at, dtype=np.float64).tolist(), strict=True):
        c = key_of.get((int(thread[0]), int(thread[1]) & 0xFFFFFFFF))
        if c is None:
            continue
        lo, hi = int(g.chain_first[c]), int(g.chain_first[c + 1])
        i = lo + int(np.searchsorted(g.ts[lo:hi], t, side="left"))
        if i < hi:
            edit.gap[i] += extra


def gpu_nodes_of(g: DependencyGraph) -> np.ndarray:
    return np.flatnonzero(g.kind == GPU)


__all__ = [
    "VARIANTS",
    "Variant",
    "add_host_time",
    "covered",
    "cut_waits",
    "intersect",
    "launch_nodes_of",
    "merged",
    "prev_end",
    "remove_gpu_nodes",
    "remove_host_time",
]
