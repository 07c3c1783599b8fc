"""GPU time breakdown: when each GPU is busy, when it idles, and why.

Every other host-side analyzer reads this. For each active device:

1. Busy = the union of kernel, memcpy and memset intervals over all streams.
2. The window is the profiled steps (first ProfilerStep start to the end of the last
   step's host or GPU work) where the trace has steps, else the GPU's own span. Setup
   outside the steps (#10, #16 in SOURCES.md are 98-99 % idle over the whole span) is
   not blamed on the program's steady state.
3. Each idle gap is classified by what the host was doing when the GPU ran dry:
   - host_sync: a blocking call (cudaStreamSynchronize, .item()'s copy...) was waiting
     for the GPU when it drained and returned in the gap: the queue was emptied on
     purpose, and the gap is the sync's return plus the time to refill the queue.
   - launch: the next kernel's launch call started after the GPU went idle, and the gap
     is short (<= LAUNCH_GAP_MAX_US): the host is issuing work as fast as it can and
     each kernel finishes before the next arrives.
   - host_bound: the launch came late by more than that: the host was doing something
     else (Python, data preparation, pageable copies).
   - profiler: the host was mostly inside torch.profiler's own Python (prof.step()).
   - other: the next kernel was already queued (dependencies between streams,
     collectives waiting for peers, the device's own kernel-to-kernel latency), or its
     launch is not in the trace.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracelens.model.schema import Kind
from tracelens.model.trace import TraceModel, name_matches

#: Blocking host calls. Each makes the calling thread wait for device work to finish.
#: hipMemcpyWithStream and cudaMemcpy (not Async) are synchronous copies.
SYNC_APIS = frozenset(
    {
        "cudaStreamSynchronize",
        "cudaDeviceSynchronize",
        "cudaEventSynchronize",
        "cudaMemcpy",
        "cuStreamSynchronize",
        "cuCtxSynchronize",
        "cuEventSynchronize",
        "hipStreamSynchronize",
        "hipDeviceSynchronize",
        "hipEventSynchronize",
        "hipMemcpy",
        "hipMemcpyWithStream",
    }
)

#: A gap up to this long, with the launch arriving after the GPU drained, is launch
#: overhead: one eager op costs 5-30 µs of host time (aten dispatch plus
#: cudaLaunchKernel, whose median is 3-12 µs in the real traces). Longer gaps mean the
#: host was busy with something other than issuing the next kernel.
LAUNCH_GAP_MAX_US = 50.0

#: Host and GPU clocks are aligned by CUPTI to within a few µs; a sync "returns in the
#: gap" if it ends no earlier than this before the GPU's last activity ends.
SYNC_RETURN_SLACK_US = 10.0

#: Number of columns in the timeline picture.
TIMELINE_BINS = 480

CAUSES = ("host_sync", "launch", "host_bound", "profiler", "other")

#: Python frames of torch.profiler itself (prof.step(), start/stop). A gap the host spent
#: mostly inside them is the profiler's cost, not the program's: it would not be there
#: without the profiler.
PROFILER_FRAME_MARKERS = ("torch/profiler/", "torch/autograd/profiler.py")


@dataclass(frozen=True)
class DeviceTime:
    """The busy/idle accounting of one GPU over the analysis window."""

    device: int
    window_start: float
    window_end: float
    busy_us: float
    idle_by_cause: dict[str, float]
    gaps: pd.DataFrame  # start, end, dur, cause, next_row, launch_row, sync_row, step
    busy_intervals: np.ndarray  # (n, 2) merged busy intervals inside the window
    n_activities: int

    @property
    def window_us(self) -> float:
        return self.window_end - self.window_start

    @property
    def idle_us(self) -> float:
        return max(self.window_us - self.busy_us, 0.0)


@dataclass(frozen=True)
class StepTime:
    step: int
    start: float
    end: float
    busy_us: float
    idle_by_cause: dict[str, float]

    @property
    def span_us(self) -> float:
        return self.end - self.start


@dataclass(frozen=True)
class TimelineBins:
    """Fractions of each bin that are busy or idle for each cause (primary device)."""

    start: float
    end: float
    busy: np.ndarray
    idle: dict[str, np.ndarray]


@dataclass(frozen=True)
class GpuTime:
    devices: tuple[DeviceTime, ...]
    steps: tuple[StepTime, ...]
    timeline: TimelineBins | None
    windowed_by_steps: bool

    @property
    def primary(self) -> DeviceTime | None:
        return self.devices[0] if self.devices else None


def merge_intervals(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Union of intervals as a sorted (n, 2) array."""
    if not len(starts):
        return np.empty((0, 2))
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    run_end = np.maximum.accumulate(e)
    new = np.empty(len(s), dtype=bool)
    new[0] = True
    new[1:] = s[1:] > run_end[:-1]
    group = np.cumsum(new) - 1
    out_s = s[new]
    out_e = np.zeros(len(out_s))
    np.maximum.at(out_e, group, run_end)
    return np.column_stack([out_s, out_e])


def covered(intervals: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Length of `intervals` (sorted, disjoint) inside each [edges[i], edges[i+1])."""
    if not len(intervals):
        return np.zeros(len(edges) - 1)
    s, e = intervals[:, 0], intervals[:, 1]
    cum = np.concatenate([[0.0], np.cumsum(e - s)])

    def upto(t: np.ndarray) -> np.ndarray:
        k = np.searchsorted(s, t, side="right")  # intervals starting at or before t
        total = cum[k]
        last = np.clip(k - 1, 0, None)
        overhang = np.where(k > 0, np.clip(e[last] - t, 0, None), 0.0)
        return total - overhang

    return np.diff(upto(edges))


def analysis_window(model: TraceModel, act: pd.DataFrame) -> tuple[float, float, bool]:
    steps = model.steps
    if len(steps):
        start = float(steps["cpu_ts"].min())
        end = float(np.nanmax([steps["cpu_end"].max(), steps["gpu_end"].max()]))
        if end > start:
            return start, end, True
    return float(act["ts"].min()), float(act["end"].max()), False


def _sync_rows(model: TraceModel) -> pd.DataFrame:
    host = model.host
    is_call = (host["kind"] == Kind.RUNTIME) | (host["kind"] == Kind.DRIVER)
    calls = host[is_call]
    return calls[name_matches(calls["name"], SYNC_APIS.__contains__)]


def compute_gpu_time(model: TraceModel) -> GpuTime:
    act_all = model.gpu_activity()
    devices: list[DeviceTime] = []
    windowed = False
    syncs = _sync_rows(model)
    sync_end = syncs["end"].to_numpy()
    order = np.argsort(sync_end, kind="stable")
    sync_end_sorted = sync_end[order]
    sync_ts_sorted = syncs["ts"].to_numpy()[order]
    sync_row_sorted = syncs.index.to_numpy()[order]
    # The thread of each sync, to match it with the thread that launches next.
    thread_key = model.host["pid"].to_numpy() * 1_000_003 + model.host["tid"].to_numpy()
    sync_thread_sorted = thread_key[sync_row_sorted] if len(sync_row_sorted) else np.empty(0, dtype=np.int64)
    host_ts = model.host["ts"].to_numpy()
    profiler_iv = _profiler_intervals(model)

    for dev in model.meta.active_devices:
        act = act_all[act_all["device"] == dev]
        w0, w1, windowed = analysis_window(model, act)
        act = act[(act["end"] > w0) & (act["ts"] < w1)].sort_values("ts", kind="stable")
        if act.empty:
            continue
        starts = np.clip(act["ts"].to_numpy(), w0, w1)
        ends = np.clip(act["end"].to_numpy(), w0, w1)
        rows = act.index.to_numpy()
        busy = merge_intervals(starts, ends)
        busy_us = float((busy[:, 1] - busy[:, 0]).sum())

        # Gaps: before the first busy interval, between intervals, after the last.
        g_start = np.concatenate([[w0], busy[:, 1]])
        g_end = np.concatenate([busy[:, 0], [w1]])
        keep = g_end - g_start > 0
        g_start, g_end = g_start[keep], g_end[keep]
        # The activity that ends each gap: the first one starting at the gap's end.
        pos = np.searchsorted(starts, g_end, side="left")
        has_next = (pos < len(starts)) & (g_end < w1)
        next_row = np.where(has_next, rows[np.clip(pos, 0, len(rows) - 1)], -1)
        launch = model.gpu["launch"].to_numpy()
        launch_row = np.where(next_row >= 0, launch[np.clip(next_row, 0, None)], -1)
        launch_ts = (
            np.where(launch_row >= 0, host_ts[np.clip(launch_row, 0, None)], np.nan)
            if len(host_ts)
            else np.full(len(launch_row), np.nan)
        )

        # host_sync: a blocking call that was already waiting when the GPU drained and
        # returned inside the gap, on the thread that launches the next kernel (a sync on
        # a side thread does not hold up the launching one).
        sync_row = np.full(len(g_start), -1, dtype=np.int64)
        lo = np.searchsorted(sync_end_sorted, g_start - SYNC_RETURN_SLACK_US, side="left")
        hi = np.searchsorted(sync_end_sorted, g_end, side="right")
        for i in np.flatnonzero(hi > lo):
            cand = slice(lo[i], hi[i])
            waiting = sync_ts_sorted[cand] <= g_start[i] + SYNC_RETURN_SLACK_US
            if launch_row[i] >= 0:
                waiting &= sync_thread_sorted[cand] == thread_key[launch_row[i]]
            if waiting.any():
                sync_row[i] = sync_row_sorted[cand][np.argmax(waiting)]
        dur = g_end - g_start
        late = np.nan_to_num(launch_ts, nan=-np.inf) >= g_start - SYNC_RETURN_SLACK_US
        cause = np.full(len(g_start), "other", dtype=object)
        cause[late & (dur > LAUNCH_GAP_MAX_US)] = "host_bound"
        cause[late & (dur <= LAUNCH_GAP_MAX_US)] = "launch"
        cause[sync_row >= 0] = "host_sync"
        if len(profiler_iv):
            in_prof = overlap(profiler_iv, g_start, g_end)
            cause[(cause != "host_sync") & (cause != "other") & (in_prof > 0.5 * dur)] = "profiler"
        gaps = pd.DataFrame(
            {
                "start": g_start,
                "end": g_end,
                "cause": cause,
                "next_row": next_row,
                "launch_row": launch_row,
                "sync_row": sync_row,
            }
        )
        gaps = _split_after_sync(gaps, launch_ts, model.host["end"].to_numpy())
        gaps["dur"] = gaps["end"] - gaps["start"]
        gaps["cause"] = pd.Categorical(gaps["cause"], categories=list(CAUSES))
        idle_by_cause = {c: float(gaps.loc[gaps["cause"] == c, "dur"].sum()) for c in CAUSES}
        devices.append(
            DeviceTime(
                device=int(dev),
                window_start=w0,
                window_end=w1,
                busy_us=busy_us,
                idle_by_cause=idle_by_cause,
                gaps=gaps,
                busy_intervals=busy,
                n_activities=len(act),
            )
        )
    steps = _step_times(model, devices[0]) if devices and windowed else ()
    timeline = _timeline(devices[0]) if devices else None
    return GpuTime(devices=tuple(devices), steps=steps, timeline=timeline, windowed_by_steps=windowed)


def _profiler_intervals(model: TraceModel) -> np.ndarray:
    host = model.host
    py = host[host["kind"] == Kind.PYTHON]
    if py.empty:
        return np.empty((0, 2))
    names = py["name"].astype(str)
    mask = np.zeros(len(py), dtype=bool)
    for marker in PROFILER_FRAME_MARKERS:
        mask |= names.str.contains(marker, regex=False).to_numpy()
    sel = py[mask]
    return merge_intervals(sel["ts"].to_numpy(), sel["end"].to_numpy())


def overlap(intervals: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Length of the (sorted, disjoint) intervals inside each [starts[i], ends[i])."""
    s, e = intervals[:, 0], intervals[:, 1]
    cum = np.concatenate([[0.0], np.cumsum(e - s)])

    def upto(t: np.ndarray) -> np.ndarray:
        k = np.searchsorted(s, t, side="right")
        last = np.clip(k - 1, 0, None)
        return cum[k] - np.where(k > 0, np.clip(e[last] - t, 0, None), 0.0)

    return upto(ends) - upto(starts)


def _split_after_sync(gaps: pd.DataFrame, launch_ts: np.ndarray, host_end: np.ndarray) -> pd.DataFrame:
    """A sync owns its gap up to its return plus one launch's worth of host time
    (LAUNCH_GAP_MAX_US). If the host then spent longer before launching the next kernel,
    it was doing other work (post-processing the value it waited for, say): that tail is
    host_bound, marked by keeping `sync_row` on the split-off row."""
    sync_row = gaps["sync_row"].to_numpy()
    has_sync = sync_row >= 0
    if not has_sync.any():
        return gaps
    sync_end = np.where(has_sync, host_end[np.clip(sync_row, 0, None)], np.nan)
    start = gaps["start"].to_numpy()
    end = gaps["end"].to_numpy()
    cut = np.maximum(start, sync_end) + LAUNCH_GAP_MAX_US
    waited = np.where(np.isnan(launch_ts), end, launch_ts)  # no next launch: host work to the end
    split = has_sync & (cut < end) & (waited > cut)
    if not split.any():
        return gaps
    head = gaps.copy()
    head.loc[split, "end"] = cut[split]
    tail = gaps[split].copy()
    tail["start"] = cut[split]
    tail["cause"] = "host_bound"
    return pd.concat([head, tail]).sort_values("start", kind="stable").reset_index(drop=True)


def _step_times(model: TraceModel, dev: DeviceTime) -> tuple[StepTime, ...]:
    st = model.steps.sort_values("cpu_ts")
    starts = st["cpu_ts"].to_numpy()
    bounds = np.concatenate([starts, [dev.window_end]])
    busy = covered(dev.busy_intervals, bounds)
    gaps = dev.gaps
    by_cause = {}
    for c in CAUSES:
        g = gaps[gaps["cause"] == c]
        iv = g[["start", "end"]].to_numpy()
        by_cause[c] = covered(iv, bounds) if len(iv) else np.zeros(len(starts))
    out = []
    for i, step in enumerate(st["step"].to_numpy()):
        out.append(
            StepTime(
                step=int(step),
                start=float(bounds[i]),
                end=float(bounds[i + 1]),
                busy_us=float(busy[i]),
                idle_by_cause={c: float(by_cause[c][i]) for c in CAUSES},
            )
        )
    return tuple(out)


def _timeline(dev: DeviceTime) -> TimelineBins:
    edges = np.linspace(dev.window_start, dev.window_end, TIMELINE_BINS + 1)
    width = np.diff(edges)
    width[width <= 0] = 1.0
    busy = covered(dev.busy_intervals, edges) / width
    idle = {}
    for c in CAUSES:
        g = dev.gaps[dev.gaps["cause"] == c]
        iv = g[["start", "end"]].to_numpy()
        idle[c] = covered(iv, edges) / width if len(iv) else np.zeros(TIMELINE_BINS)
    return TimelineBins(start=dev.window_start, end=dev.window_end, busy=busy, idle=idle)
