"""Interval arithmetic on sorted (n, 2) arrays of [start, end) µs: unions, differences,
totals, and how much of each bin or range they cover. Vectorised (numpy), for the ledger
and every analyzer that measures time inside a set of intervals."""

from __future__ import annotations

import numpy as np


def merge_intervals(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Union of intervals as a sorted (n, 2) array."""
    if not len(starts):
        return np.empty((0, 2))
    order = np.argsort(starts, kind="stable")
    s, e = np.asarray(starts, dtype=float)[order], np.asarray(ends, dtype=float)[order]
    run_end = np.maximum.accumulate(e)
    new = np.empty(len(s), dtype=bool)
    new[0] = True
    new[1:] = s[1:] > run_end[:-1]
    group = np.cumsum(new) - 1
    out_s = s[new]
    out_e = np.full(len(out_s), -np.inf)
    np.maximum.at(out_e, group, run_end)
    return np.column_stack([out_s, out_e])


def union(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if not len(a):
        return b
    if not len(b):
        return a
    both = np.vstack([a, b])
    return merge_intervals(both[:, 0], both[:, 1])


def subtract(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Sorted disjoint intervals `a` minus sorted disjoint intervals `b`."""
    if not len(a) or not len(b):
        return a
    # Boundaries of a and b; a point is in the result when inside a and not inside b.
    pts = np.unique(np.concatenate([a.ravel(), b.ravel()]))
    mids = (pts[:-1] + pts[1:]) / 2
    in_a = _inside(a, mids)
    in_b = _inside(b, mids)
    keep = in_a & ~in_b
    if not keep.any():
        return np.empty((0, 2))
    segs = np.column_stack([pts[:-1][keep], pts[1:][keep]])
    return merge_intervals(segs[:, 0], segs[:, 1])


def _inside(iv: np.ndarray, t: np.ndarray) -> np.ndarray:
    k = np.searchsorted(iv[:, 0], t, side="right") - 1
    ok = k >= 0
    out = np.zeros(len(t), dtype=bool)
    out[ok] = t[ok] < iv[k[ok], 1]
    return out


def total(iv: np.ndarray) -> float:
    return float((iv[:, 1] - iv[:, 0]).sum()) if len(iv) else 0.0


def covered(intervals: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Length of `intervals` (sorted, disjoint) inside each [edges[i], edges[i+1])."""
    if not len(intervals):
        return np.zeros(len(edges) - 1)
    s, e = intervals[:, 0], intervals[:, 1]
    cum = np.concatenate([[0.0], np.cumsum(e - s)])

    def upto(t: np.ndarray) -> np.ndarray:
        k = np.searchsorted(s, t, side="right")  # intervals starting at or before t
        last = np.clip(k - 1, 0, None)
        overhang = np.where(k > 0, np.clip(e[last] - t, 0, None), 0.0)
        return cum[k] - overhang

    return np.diff(upto(edges))


def overlap(intervals: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Length of the (sorted, disjoint) intervals inside each [starts[i], ends[i])."""
    if not len(intervals):
        return np.zeros(len(starts))
    s, e = intervals[:, 0], intervals[:, 1]
    cum = np.concatenate([[0.0], np.cumsum(e - s)])

    def upto(t: np.ndarray) -> np.ndarray:
        k = np.searchsorted(s, t, side="right")
        last = np.clip(k - 1, 0, None)
        return cum[k] - np.where(k > 0, np.clip(e[last] - t, 0, None), 0.0)

    return upto(np.asarray(ends, dtype=float)) - upto(np.asarray(starts, dtype=float))
