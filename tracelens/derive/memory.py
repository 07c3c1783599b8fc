"""The memory profile of the analysed window: the allocator's [memory] events
(profile_memory) of the primary device, binned over time, with the peaks, the churn per
step, fragmentation at the peak and the ops that allocate most.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from tracelens.derive.ledger import DeviceLedger
from tracelens.model.schema import Kind
from tracelens.model.sources import PySource, user_source
from tracelens.model.trace import TraceModel

if TYPE_CHECKING:  # the context is made of this module: imported for its type only
    pass

#: Memory events mapped to ops at most (a long profile_memory trace has millions).
#: Ops listed as allocating most.
MAX_TOP_OPS = 8
MAX_MEMORY_EVENTS = 500_000


#: Points in the memory-over-time series of the report.
MEMORY_BINS = 240


_CUDA_DEVICE_TYPE = 1  # c10::DeviceType::CUDA (HIP builds report CUDA too)


@dataclass(frozen=True)
class MemoryProfile:
    """The [memory] events of the primary device inside the window."""

    start_us: float
    end_us: float
    relative: bool  # no totals in the trace: allocated is relative to the recording's start
    peak_allocated: float
    peak_reserved: float  # 0 when the trace has no totals
    allocated_per_step: float  # bytes allocated (positive events) per step: the churn
    freed_per_step: float
    events: int
    fragmentation_at_peak: float  # reserved - allocated at the allocated peak (0 without totals)
    top_ops: tuple[tuple[str, float, int, PySource | None], ...] = ()  # op, bytes allocated, events, source
    series_ts: tuple[float, ...] = field(default=())
    series_allocated: tuple[float, ...] = field(default=())
    series_reserved: tuple[float, ...] = field(default=())


def memory_profile(model: TraceModel, dev: DeviceLedger | None, n_steps: int) -> MemoryProfile | None:
    """The memory profile of `dev`'s window (None without [memory] events there)."""
    mem = model.memory
    if dev is None or mem.empty:
        return None
    dtype = mem["device_type"].to_numpy(dtype=float, na_value=-1)
    dev_id = mem["device_id"].to_numpy(dtype=float, na_value=-1)
    sel = dtype == _CUDA_DEVICE_TYPE
    if (sel & (dev_id == dev.device)).any():
        sel &= dev_id == dev.device
    m = mem[sel].sort_values("ts", kind="stable")
    if m.empty:
        return None
    ts = m["ts"].to_numpy(dtype=float)
    b = m["bytes"].to_numpy(dtype=float, na_value=0.0)
    alloc_total = m["total_allocated"].to_numpy(dtype=float, na_value=np.nan)
    res_total = m["total_reserved"].to_numpy(dtype=float, na_value=np.nan)
    relative = bool(np.isnan(alloc_total).all())
    allocated = np.cumsum(b) if relative else _ffill(alloc_total)
    reserved = np.zeros(len(ts)) if np.isnan(res_total).all() else _ffill(res_total)
    w0, w1 = dev.window_start, dev.window_end
    inw = (ts >= w0) & (ts < w1)
    if not inw.any():
        return None
    a_w, r_w, b_w = allocated[inw], reserved[inw], b[inw]
    peak_i = int(np.nanargmax(a_w))
    steps = max(n_steps, 1)
    edges = np.linspace(w0, w1, MEMORY_BINS + 1)
    idx = np.clip(np.searchsorted(edges, ts[inw], side="right") - 1, 0, MEMORY_BINS - 1)
    s_alloc = np.full(MEMORY_BINS, np.nan)
    s_res = np.full(MEMORY_BINS, np.nan)
    np.fmax.at(s_alloc, idx, a_w)
    np.fmax.at(s_res, idx, r_w)
    s_alloc, s_res = _ffill(s_alloc), _ffill(s_res)
    return MemoryProfile(
        start_us=w0,
        end_us=w1,
        relative=relative,
        peak_allocated=float(np.nanmax(a_w)),
        peak_reserved=float(np.nanmax(r_w)) if r_w.size else 0.0,
        allocated_per_step=float(b_w[b_w > 0].sum()) / steps,
        freed_per_step=float(-b_w[b_w < 0].sum()) / steps,
        events=int(inw.sum()),
        fragmentation_at_peak=float(max(r_w[peak_i] - a_w[peak_i], 0.0)) if not relative and r_w[peak_i] > 0 else 0.0,
        top_ops=_top_alloc_ops(model, ts[inw], b_w),
        series_ts=tuple(np.round((edges[:-1] + edges[1:]) / 2, 1).tolist()),
        series_allocated=tuple(np.nan_to_num(s_alloc).round(0).tolist()),
        series_reserved=tuple(np.nan_to_num(s_res).round(0).tolist()),
    )


def _ffill(a: np.ndarray) -> np.ndarray:
    a = np.asarray(a, dtype=float).copy()
    ok = ~np.isnan(a)
    if not ok.any():
        return np.zeros(len(a))
    idx = np.where(ok, np.arange(len(a)), 0)
    np.maximum.accumulate(idx, out=idx)
    out = a[idx]
    first = int(np.argmax(ok))
    out[:first] = a[first]
    return out


def _top_alloc_ops(
    model: TraceModel, ts: np.ndarray, b: np.ndarray
) -> tuple[tuple[str, float, int, PySource | None], ...]:
    """The ops that allocate most: each positive [memory] event charged to the innermost
    CPU op around it."""
    pos = np.flatnonzero(b > 0)[:MAX_MEMORY_EVENTS]
    host = model.host
    ops = np.flatnonzero(host["kind"].to_numpy() == int(Kind.CPU_OP))
    if not len(pos) or not len(ops):
        return ()
    o_ts = host["ts"].to_numpy()[ops]
    order = np.argsort(o_ts, kind="stable")
    ops, o_ts = ops[order], o_ts[order]
    end = host["end"].to_numpy()
    parent = model.arrays.parent
    kind = model.arrays.kind
    k = np.searchsorted(o_ts, ts[pos], side="right") - 1
    by: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    first: dict[str, int] = {}
    for j, kk in zip(pos, k, strict=True):
        if kk < 0:
            continue
        r = int(ops[kk])
        # The latest op to start may have ended; its enclosing ops may still be open.
        while r >= 0 and end[r] < ts[j]:
            r = int(parent[r])
            while r >= 0 and kind[r] != int(Kind.CPU_OP):
                r = int(parent[r])
        if r < 0:
            continue
        name = model.arrays.name(r)
        by[name][0] += float(b[j])
        by[name][1] += 1
        first.setdefault(name, r)
    ranked = sorted(by.items(), key=lambda kv: -kv[1][0])[:MAX_TOP_OPS]
    return tuple((n, v[0], int(v[1]), user_source(model, first[n])) for n, v in ranked)
