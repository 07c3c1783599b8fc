"""What the GPU waits on while its next work is already queued (issue 24 §8).

The ledger's idle_other is GPU idle whose next activity had been launched before the gap
began: the device did not wait for this host thread's launch. It waits on something the
trace shows only around the gap: an event on another stream (cudaStreamWaitEvent), a
host thread that sat in a blocking call meanwhile (so the work another stream needed was
launched late), or a peer. On HTA's rank0.json it is 59% of the window: 33 gaps over 5 ms
hold 592 ms, their next work launched a median 164 ms earlier by cudaGraphLaunch and
cudaLaunchKernel, while the main thread sat ~146 ms at a time in device-to-host copies of
a few bytes into pageable memory (aten::copy_ -> cudaMemcpyAsync).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracelens.derive.collectives import Collectives, collective_kind
from tracelens.derive.host_calls import is_profiler_sync, last_launch_ts
from tracelens.derive.intervals import merge_intervals, overlap
from tracelens.derive.ledger import DeviceLedger
from tracelens.domain import ASYNC_COPY_APIS, is_collective_kernel
from tracelens.model.schema import Kind
from tracelens.model.trace import TraceModel, name_matches

#: Queued-work idle gaps at least this long are the ones described (rank0.json: 33 gaps
#: over 5 ms hold 592 ms of its 730 ms idle_other).
QUEUED_GAP_MIN_US = 5_000.0
#: A queued-work gap this long is a stall (the work waits on an event, a peer or a late
#: launch on another stream), not the device's own latency between kernels: inside a
#: replayed CUDA graph of tiny kernels (sample_traces/diff_graph_after) the gaps are a
#: median 0.26 µs and 35% of the window, and fusing the body is the fix.
QUEUED_STALL_MIN_US = 1_000.0
#: Queued-work stalls get a finding from this share of the window on (issue 24 §8: "a
#: cause over 20% of the window gets a finding"); below it a note says what they are.
QUEUED_IDLE_MIN_SHARE = 0.20
#: The blocking calls are named as what the idle coincides with when they overlap at
#: least this share of it (rank0.json: 60%; sampled_rank-0: 0.02%, a coincidence).
BLOCKED_MIN_SHARE = 0.25
#: Host calls named as what the idle coincides with (most overlap first).
MAX_CALLS_NAMED = 3
#: A blocking copy's stream "runs again" at the start of the run of its activities, each
#: within this of the one before, that ends with the copy (rank0.json: the input dist's
#: kernels and the copy on stream 27 run back to back, 0.1-0.7 ms apart, at the end of
#: each 139-147 ms wait).
RESUME_GAP_US = 1_000.0
#: The copy waited on its stream when it ran again this late into the call.
RESUME_LATE_SHARE = 0.5


@dataclass(frozen=True)
class WaitsOn:
    """A collective on another stream that ended before a blocking copy's stream ran
    again: what the copy, and the queued work behind the host's wait, waited on
    (rank0.json: stream 27 ran again 9.7 ms after each 24-26 ms all-to-all on stream 84)."""

    kind: str  # the collective's kind (derive/collectives.collective_kind)
    kernel: str
    stream: int  # the collective's stream
    copy_stream: int
    calls: int  # blocking calls whose stream ran again after it
    kernel_median_us: float
    after_median_us: float  # from the collective's end to the copy's stream running again


@dataclass(frozen=True)
class QueuedWaits:
    idle_us: float  # queued-work idle (idle_other) in the window
    gaps: int
    long_gaps: int  # of them at least QUEUED_GAP_MIN_US
    long_us: float
    stall_us: float  # of the idle, in gaps of QUEUED_STALL_MIN_US or more
    lead_median_us: float | None  # how long before a gap's end its next work was launched
    launch_apis: tuple[str, ...]  # the calls that launched the gaps' next work, most frequent first
    blocked_us: float  # of the idle, while a host thread sat in a blocking call
    blocked_rows: tuple[int, ...]  # those blocking calls' host rows
    #: ("cudaMemcpyAsync in aten::copy_", calls, idle they coincide with, the longest call), most idle first
    blocked_what: tuple[tuple[str, int, float, float], ...]
    blocked_call_median_us: float  # the median length of those calls
    copy_bytes: float  # bytes their device-to-host copies moved
    stream_waits: int  # cudaStreamWaitEvent/hipStreamWaitEvent calls in the window
    waits_on: tuple[WaitsOn, ...] = ()  # the collectives the blocking copies waited on, most kernel time first


def queued_waits(
    model: TraceModel, dev: DeviceLedger | None, blocking_rows: np.ndarray, calls: Collectives | None = None
) -> QueuedWaits | None:
    """The queued-work idle of `dev` and what it coincides with, or None when it has none."""
    if dev is None:
        return None
    g = dev.gaps_of("idle_other")
    if g.empty:
        return None
    host = model.host
    h_ts = host["ts"].to_numpy()
    starts, ends = g["start"].to_numpy(), g["end"].to_numpy()
    long = g["dur"].to_numpy() >= QUEUED_GAP_MIN_US
    launch = g["launch_row"].to_numpy()
    has = launch >= 0
    lead = float(np.median(ends[has] - h_ts[launch[has]])) if has.any() else None
    apis = tuple(pd.Series([model.arrays.name(int(r)) for r in launch[has]]).value_counts().index[:3])
    blocked_us, rows, what, med, nbytes = _blocked(model, blocking_rows, starts, ends)
    kind = host["kind"].to_numpy()
    in_win = (h_ts >= dev.window_start) & (h_ts < dev.window_end)
    waits = int((in_win & (kind == Kind.RUNTIME) & name_matches(host["name"], _is_stream_wait)).sum())
    return QueuedWaits(
        idle_us=float(g["dur"].sum()),
        gaps=len(g),
        long_gaps=int(long.sum()),
        long_us=float(g["dur"].to_numpy()[long].sum()),
        stall_us=float(g["dur"].to_numpy()[g["dur"].to_numpy() >= QUEUED_STALL_MIN_US].sum()),
        lead_median_us=lead,
        launch_apis=tuple(str(a) for a in apis),
        blocked_us=blocked_us,
        blocked_rows=rows,
        blocked_what=what,
        blocked_call_median_us=med,
        copy_bytes=nbytes,
        stream_waits=waits,
        waits_on=_waits_on(model, np.array(rows, dtype=np.int64), calls),
    )


def _is_stream_wait(name: str) -> bool:
    return name in ("cudaStreamWaitEvent", "hipStreamWaitEvent")


def _blocked(
    model: TraceModel, rows: np.ndarray, starts: np.ndarray, ends: np.ndarray
) -> tuple[float, tuple[int, ...], tuple[tuple[str, int, float, float], ...], float, float]:
    """Idle time inside [starts, ends) that a host thread spent in blocking calls, those
    calls, their names (with their op), median length and device-to-host copy bytes."""
    last = last_launch_ts(model)
    rows = np.array([r for r in rows.tolist() if not is_profiler_sync(model, r, last)], dtype=np.int64)
    if not len(rows):
        return 0.0, (), (), 0.0, 0.0
    host = model.host
    ts, end = host["ts"].to_numpy()[rows], host["end"].to_numpy()[rows]
    iv = merge_intervals(ts, end)
    blocked = float(overlap(iv, starts, ends).sum())
    if blocked <= 0:
        return 0.0, (), (), 0.0, 0.0
    gap_iv = merge_intervals(starts, ends)
    per_call = overlap(gap_iv, ts, end)
    hit = per_call > 0
    rows, per_call = rows[hit], per_call[hit]
    durs = host["end"].to_numpy()[rows] - host["ts"].to_numpy()[rows]
    by_what: dict[str, tuple[int, float, float]] = {}
    for r, us, d in zip(rows.tolist(), per_call.tolist(), durs.tolist(), strict=True):
        op = int(model.arrays.op[r])
        key = model.arrays.name(r) + (f" in {model.arrays.name(op)}" if op >= 0 else "")
        n, t, longest = by_what.get(key, (0, 0.0, 0.0))
        by_what[key] = (n + 1, t + us, max(longest, d))
    top = sorted(by_what, key=lambda k: -by_what[k][1])[:MAX_CALLS_NAMED]
    what = tuple((k, *by_what[k]) for k in top)
    gpu = model.gpu
    copies = rows[name_matches(host["name"].iloc[rows], ASYNC_COPY_APIS.__contains__)] if len(rows) else rows
    mc = gpu[(gpu["kind"] == Kind.MEMCPY).to_numpy() & np.isin(gpu["launch"].to_numpy(), copies)]
    nbytes = float(mc["bytes"].clip(lower=0).sum()) if len(mc) else 0.0
    return blocked, tuple(int(r) for r in rows), what, float(np.median(durs)), nbytes


def _waits_on(model: TraceModel, rows: np.ndarray, calls: Collectives | None) -> tuple[WaitsOn, ...]:
    """For each blocking call whose device-to-host copy ran only late in the call: the
    last collective kernel on another stream that ended before the copy's stream ran
    again (inside the call)."""
    gpu = model.gpu
    if not len(rows) or not len(gpu):
        return ()
    host = model.host
    h_ts, h_end = host["ts"].to_numpy(), host["end"].to_numpy()
    act = model.gpu_activity()
    a_ts, a_end, a_stream = act["ts"].to_numpy(), act["end"].to_numpy(), act["stream"].to_numpy()
    a_dev = act["device"].to_numpy()
    is_coll = name_matches(act["name"], is_collective_kernel)
    launch = gpu["launch"].to_numpy()
    # A kernel's kind is its call's (an all-to-all runs as NCCL SendRecv kernels).
    kind_of = {k: c.kind for c in calls.calls for k in c.kernels} if calls is not None else {}
    a_rows = act.index.to_numpy()
    g_stream, g_dev, g_ts = gpu["stream"].to_numpy(), gpu["device"].to_numpy(), gpu["ts"].to_numpy()
    is_copy = gpu["kind"].to_numpy() == int(Kind.MEMCPY)
    found: dict[tuple[str, int, int], list[tuple[float, float, str]]] = {}
    for r in rows.tolist():
        copies = np.flatnonzero((launch == r) & is_copy)
        if not len(copies):
            continue
        c = copies[0]
        s, dev, t = int(g_stream[c]), int(g_dev[c]), float(g_ts[c])
        mine = np.flatnonzero((a_stream == s) & (a_dev == dev) & (a_ts <= t) & (a_end > h_ts[r]))
        mine = mine[np.argsort(a_ts[mine], kind="stable")]
        if not len(mine):
            continue
        i = len(mine) - 1
        while i > 0 and a_ts[mine[i]] - a_end[mine[i - 1]] < RESUME_GAP_US:
            i -= 1
        resume = float(a_ts[mine[i]])
        if resume - h_ts[r] < RESUME_LATE_SHARE * (h_end[r] - h_ts[r]):
            continue
        cand = np.flatnonzero(is_coll & (a_dev == dev) & (a_stream != s) & (a_end <= resume) & (a_end >= h_ts[r]))
        if not len(cand):
            continue
        k = cand[np.argmax(a_end[cand])]
        name = str(act["name"].iat[k])
        key = (kind_of.get(int(a_rows[k]), collective_kind(name)), int(a_stream[k]), s)
        found.setdefault(key, []).append((float(a_end[k] - a_ts[k]), resume - float(a_end[k]), name))
    out = sorted(found.items(), key=lambda kv: -sum(d for d, _, _ in kv[1]))
    return tuple(
        WaitsOn(kind, v[0][2], stream, copy_stream, len(v), float(np.median([d for d, _, _ in v])),
                float(np.median([a for _, a, _ in v])))
        for (kind, stream, copy_stream), v in out
    )  # fmt: skip


def finding_due(q: QueuedWaits | None, window_us: float) -> bool:
    """Whether the queued-work stalls are large enough for a finding of their own."""
    return q is not None and window_us > 0 and q.stall_us >= QUEUED_IDLE_MIN_SHARE * window_us


__all__ = [
    "BLOCKED_MIN_SHARE",
    "QUEUED_GAP_MIN_US",
    "QUEUED_IDLE_MIN_SHARE",
    "QueuedWaits",
    "WaitsOn",
    "finding_due",
    "queued_waits",
]
