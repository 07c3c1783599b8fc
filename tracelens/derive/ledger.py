"""The time ledger: every microsecond of the analysed window on each GPU, attributed to
exactly one cause. The causes add up to the window; every finding, share, gain and the
headline are read from here (or refine a part of it), so nothing is counted twice.

Busy time (the union of kernels, copies and memsets over all streams) is split by what
ran, one class per instant, in this precedence (overlap goes to the earlier class):

    gpu_busy_compute   kernels near their compute roof (the roofline's bound)
    gpu_busy_memory    kernels near the memory roof
    gpu_busy_latency   kernels far from both roofs (too short, too small a grid)
    gpu_busy_unknown   kernels no model covers
    gpu_busy_copy      memcpy / memset
    communication      collective kernels (NCCL, RCCL) that nothing else overlaps: the
                       exposed part; a collective under compute is free

Idle time is split into gaps, each with one cause, from what the host was doing when
the GPU ran dry:

    host_sync        a blocking call (cudaStreamSynchronize, .item()'s copy, a copy to or
                     from pageable memory) was already waiting when the GPU drained and
                     returned in the gap; it owns the gap up to its return plus one
                     launch's worth of host time
    communication    the host was inside a collective (gloo/c10d/NCCL op) for most of the
                     gap, or the next GPU activity is a collective already queued: waiting
                     for the other ranks
    allocation       the host was inside cudaMalloc/cudaFree (and their hip twins)
    compilation      the host was inside torch.compile (Dynamo/Inductor frames)
    profiler         the host was inside torch.profiler's own Python (prof.step())
    harness          the host was inside a benchmark harness's own method between timed
                     regions: a cache flush (PARAM's [param|clear_cache]) or a warm-up
                     range (domain.HARNESS_MARKERS): the benchmark's method, not the
                     program's bottleneck
    startup          the host was doing one-off start-up work inside the window: capturing
                     CUDA/HIP graphs (the launches between BeginCapture and EndCapture
                     are recorded, not run), instantiating them, or a cold first launch
                     (a launch call of host_calls.COLD_LAUNCH_MIN_US or more: the module's code
                     loaded, a graph uploaded)
    launch_overhead  the next launch came after the GPU drained and either the gap is at
                     most one eager op's host cost, or it lies in a launch-bound region
                     (short kernels that start at the launch-latency floor: the queue is
                     empty, and the host spends longer per kernel than the kernel runs),
                     where gaps are jitter of the same dispatch loop, or it is a short gap
                     (DISPATCH_GAP_MAX_US) that no long op covers: dispatch between ops,
                     with no named host work (issue 24 §6: one regime, not two)
    host_bound       the launch came later than that: the host was doing other work
    idle_other       the next kernel was already queued (a cross-stream wait, an event,
                     the device's own latency) or its launch is not in the trace
    unrecorded       a down-sampled trace's (model/sampling.py) host_bound, launch_overhead
                     and idle_other: the kernels and host ops that ran there were dropped
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracelens.derive.host_calls import (
    blocking_call_rows,
    harness_intervals,
    named_intervals,
    profiler_intervals,
    startup_intervals,
)
from tracelens.derive.intervals import covered, merge_intervals, overlap, subtract, total, union
from tracelens.derive.roofline import Roofline
from tracelens.derive.window import StepSpan, Window
from tracelens.domain import (
    ALLOC_APIS,
    COMPILER_EXCLUDE,
    COMPILER_MARKERS,
    GRAPH_LAUNCH_APIS,
    is_collective_kernel,
    is_collective_wait_op,
)
from tracelens.model.schema import Kind
from tracelens.model.trace import TraceModel, name_matches
from tracelens.report.enums import CAUSES as CAUSES  # the contract's causes: re-exported for the ledger's readers
from tracelens.report.enums import Cause

#: A gap up to this long, with the launch arriving after the GPU drained, is launch
#: overhead: one eager op costs 5-30 µs of host time (aten dispatch plus
#: cudaLaunchKernel, whose median is 3-12 µs in the real traces).
LAUNCH_GAP_MAX_US = 50.0

#: Host and GPU clocks are aligned by CUPTI to within a few µs; a sync "returns in the
#: gap" if it ends no earlier than this before the GPU's last activity ends.
SYNC_RETURN_SLACK_US = 10.0

#: A kernel that starts within this long of its launch call's return found an empty
#: queue: the launch-latency floor is 4-10 µs on the H200 and A100 traces.
QUEUE_EMPTY_US = 25.0
#: A launch-bound region has at least this many activities in a row that found an
#: empty queue...
REGION_MIN_KERNELS = 20
#: ...and the host spends longer per kernel than the kernels run (idle > busy inside).
REGION_MIN_IDLE_SHARE = 0.5
#: Inside a launch-bound region a gap is still host work when it is this many times the
#: region's median gap and at least REGION_HOST_WORK_MIN_US: one slow piece of host work
#: (a data batch, a print), not dispatch jitter.
REGION_OUTLIER_FACTOR = 8.0
REGION_HOST_WORK_MIN_US = 500.0

#: A host-bound gap this short that no op longer than DISPATCH_OP_MAX_US covers (half of
#: it) is per-op dispatch (Python, framework and dispatcher overhead between eager ops),
#: the launch/dispatch regime: HTA's df_index_resolver splits 635 ms of dispatch into
#: host_bound and launch_overhead otherwise. 300 µs is the host_bound analyzer's per-op gap.
DISPATCH_GAP_MAX_US = 300.0
DISPATCH_OP_MAX_US = 300.0

#: A host range "covers" a gap when it overlaps at least this share of it.
COVER_SHARE = 0.5

#: Number of columns in the timeline picture.
TIMELINE_BINS = 480

BUSY_CAUSES: tuple[Cause, ...] = (
    "gpu_busy_compute",
    "gpu_busy_memory",
    "gpu_busy_latency",
    "gpu_busy_unknown",
    "gpu_busy_copy",
    "communication",
)
IDLE_CAUSES: tuple[Cause, ...] = (
    "host_sync",
    "communication",
    "allocation",
    "compilation",
    "profiler",
    "harness",
    "startup",
    "launch_overhead",
    "host_bound",
    "idle_other",
    "unrecorded",
)
#: `unrecorded` in a down-sampled trace (sampled_rank-0: 355 ms of "host work in ##
#: backward ##" is the autograd thread's dropped ops and kernels).
UNRECORDED_FROM = ("host_bound", "launch_overhead", "idle_other")
#: The kernel classes of busy time, highest precedence first (see the module docstring).
_BOUND_CLASS = {"compute": "gpu_busy_compute", "memory": "gpu_busy_memory", "latency": "gpu_busy_latency"}


@dataclass(frozen=True)
class DeviceLedger:
    """The ledger of one GPU over the analysis window."""

    device: int
    window_start: float
    window_end: float
    busy_us: float
    by_cause: dict[str, float]  # every cause in CAUSES; adds up to window_us
    gaps: pd.DataFrame  # start, end, dur, cause, next_row, launch_row, sync_row, in_region
    busy_intervals: np.ndarray  # (n, 2) merged busy intervals inside the window
    busy_classes: dict[str, np.ndarray]  # busy cause -> its exclusive (n, 2) intervals
    comm_us: float  # collective kernel time in the window (overlapped or not)
    comm_overlapped_us: float  # of it, hidden under other GPU work
    regions: tuple[tuple[float, float, int], ...]  # launch-bound regions: start, end, activities
    n_activities: int

    @property
    def window_us(self) -> float:
        return self.window_end - self.window_start

    @property
    def idle_us(self) -> float:
        return max(self.window_us - self.busy_us, 0.0)

    def share(self, cause: str) -> float:
        return self.by_cause.get(cause, 0.0) / self.window_us if self.window_us > 0 else 0.0

    def gaps_of(self, cause: str) -> pd.DataFrame:  # the idle gaps the ledger charged to `cause`
        return self.gaps[self.gaps["cause"].to_numpy() == cause]  # numpy's compare: a third of pandas' str =='s


@dataclass(frozen=True)
class StepLedger:
    step: int
    start: float
    end: float
    busy_us: float
    by_cause: dict[str, float]

    @property
    def span_us(self) -> float:
        return self.end - self.start


@dataclass(frozen=True)
class TimelineBins:
    """Fractions of each bin taken by each cause (primary device)."""

    start: float
    end: float
    by_cause: dict[str, np.ndarray]


@dataclass(frozen=True)
class Ledger:
    window: Window
    devices: tuple[DeviceLedger, ...]
    steps: tuple[StepLedger, ...]
    timeline: TimelineBins | None

    @property
    def primary(self) -> DeviceLedger | None:
        return self.devices[0] if self.devices else None

    @property
    def windowed_by_steps(self) -> bool:
        return self.window.source in ("steps", "detected", "user") and bool(self.window.steps)

    @property
    def n_steps(self) -> int:
        return max(len(self.window.steps), 1)

    def capped(self, cause: str, time_us: float) -> float:
        """`time_us` of kernels at most the primary GPU's `cause` time: kernels that
        overlap on several streams count once, as the ledger counts them."""
        dev = self.primary
        return min(time_us, dev.by_cause.get(cause, 0.0)) if dev is not None else time_us


# -- the ledger ----------------------------------------------------------------------------


def _busy_classes(
    act: pd.DataFrame,
    rows: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    is_comm: np.ndarray,
    bounds: Mapping[str, str],
    latency_rows: np.ndarray | None,
) -> dict[str, np.ndarray]:
    """A device's busy time by class (BUSY_CAUSES), exclusive, in precedence order: each
    kernel by its name's bound (latency-bound launches apart), copies, collectives."""
    kind = act["kind"].to_numpy()
    cls = np.full(len(act), "gpu_busy_unknown", dtype=object)
    knames = act["name"].astype(str).to_numpy()
    bound_cache: dict[str, str] = {}
    for i in np.flatnonzero(kind == int(Kind.KERNEL)):
        nm = knames[i]
        b = bound_cache.get(nm)
        if b is None:
            b = bound_cache[nm] = _BOUND_CLASS.get(bounds.get(nm, "unknown"), "gpu_busy_unknown")
        cls[i] = b
    if latency_rows is not None and len(latency_rows):
        cls[np.isin(rows, latency_rows) & (kind == int(Kind.KERNEL))] = "gpu_busy_latency"
    cls[kind != int(Kind.KERNEL)] = "gpu_busy_copy"
    cls[is_comm] = "communication"
    busy_classes: dict[str, np.ndarray] = {}
    higher = np.empty((0, 2))
    for c in BUSY_CAUSES:
        sel = cls == c
        iv = merge_intervals(starts[sel], ends[sel]) if sel.any() else np.empty((0, 2))
        busy_classes[c] = subtract(iv, higher)
        higher = union(higher, iv)
    return busy_classes


def compute_ledger(
    model: TraceModel,
    window: Window,
    roofline: Roofline | None = None,
    down_sampled: bool = False,
) -> Ledger:
    """The ledger of every active GPU over `window`. The roofline gives each kernel name's
    bound (compute, memory, latency or unknown; all unknown without one) and the launches
    latency-bound on their own whatever their name's bound (its `latency_rows`)."""
    bounds = {k.name: k.bound for k in roofline.kernels} if roofline is not None else {}
    latency_rows = roofline.latency_rows if roofline is not None else None
    act_all = model.gpu_activity()
    w0, w1 = window.start_us, window.end_us
    host = model.host
    host_ts = host["ts"].to_numpy()
    host_end = host["end"].to_numpy()
    thread_key = host["pid"].to_numpy() * 1_000_003 + host["tid"].to_numpy()

    sync_rows = blocking_call_rows(model)
    sync_end = host_end[sync_rows] if len(sync_rows) else np.empty(0)
    order = np.argsort(sync_end, kind="stable")
    sync_rows, sync_end = sync_rows[order], sync_end[order]
    sync_ts = host_ts[sync_rows] if len(sync_rows) else np.empty(0)
    sync_thread = thread_key[sync_rows] if len(sync_rows) else np.empty(0, dtype=np.int64)
    op_of = host["op"].to_numpy()
    names = model.arrays.name_table
    codes = model.arrays.name_codes
    # A sync inside a collective op (gloo copies its CUDA tensors to the host) is the
    # collective's wait, not a user sync.
    sync_in_comm = np.array(
        [any(is_collective_wait_op(names[codes[r]]) for r in model.host_chain(int(op_of[s])) if r >= 0)
         if op_of[s] >= 0 else False for s in sync_rows],
        dtype=bool,
    )  # fmt: skip

    comm_iv = named_intervals(model, is_collective_wait_op, (Kind.CPU_OP, Kind.USER_ANNOTATION))
    alloc_iv = named_intervals(model, ALLOC_APIS.__contains__, (Kind.RUNTIME, Kind.DRIVER))
    prof_iv = profiler_intervals(model)
    compile_iv = named_intervals(
        model,
        lambda n: any(m in n for m in COMPILER_MARKERS) and not any(x in n for x in COMPILER_EXCLUDE),
        (Kind.PYTHON, Kind.CPU_OP, Kind.USER_ANNOTATION),
    )
    startup_iv = startup_intervals(model)
    harness_iv = harness_intervals(model)
    launch_col = model.gpu["launch"].to_numpy()
    gpu_names = model.gpu["name"]
    comm_gpu = name_matches(gpu_names, is_collective_kernel)
    # Kernels launched from inside a collective op are collectives too (gloo's copies are
    # not kernels; NCCL's kernels carry their own names).
    if len(host):
        launched_by = np.where(launch_col >= 0, op_of[np.clip(launch_col, 0, None)], -1)
        op_is_comm = name_matches(host["name"], is_collective_wait_op)
        comm_gpu |= (
            (launched_by >= 0)
            & op_is_comm[np.clip(launched_by, 0, None)]
            & (model.gpu["kind"].to_numpy() == int(Kind.KERNEL))
        )

    devices: list[DeviceLedger] = []
    for dev in model.meta.active_devices:
        act = act_all[(act_all["device"] == dev) & (act_all["end"] > w0) & (act_all["ts"] < w1)]
        act = act.sort_values("ts", kind="stable")
        if act.empty:
            continue
        rows = act.index.to_numpy()
        starts = np.clip(act["ts"].to_numpy(), w0, w1)
        ends = np.clip(act["end"].to_numpy(), w0, w1)
        busy = merge_intervals(starts, ends)
        busy_us = total(busy)

        is_comm = comm_gpu[rows]
        busy_classes = _busy_classes(act, rows, starts, ends, is_comm, bounds, latency_rows)
        comm_total = total(merge_intervals(starts[is_comm], ends[is_comm])) if is_comm.any() else 0.0
        comm_overlapped = comm_total - total(busy_classes["communication"])

        gaps = _classify_gaps(
            model, act, starts, ends, busy, w0, w1,
            sync_rows, sync_ts, sync_end, sync_thread, sync_in_comm, thread_key,
            comm_iv, alloc_iv, prof_iv, compile_iv, startup_iv, comm_gpu, harness_iv,
        )  # fmt: skip
        regions = _launch_regions(model, act, starts, ends)
        gaps = _apply_regions(gaps, regions)
        gaps = _dispatch_gaps(model, gaps, thread_key)
        if down_sampled:
            gaps["cause"] = gaps["cause"].where(~gaps["cause"].isin(UNRECORDED_FROM), "unrecorded")
        gaps["dur"] = gaps["end"] - gaps["start"]
        by_cause: dict[str, float] = {c: 0.0 for c in CAUSES}
        for c in BUSY_CAUSES:
            by_cause[c] += total(busy_classes[c])
        idle_sum = gaps.groupby("cause", observed=True)["dur"].sum()
        for cause_name, v in idle_sum.items():
            by_cause[str(cause_name)] += float(v)
        devices.append(
            DeviceLedger(
                device=int(dev), window_start=w0, window_end=w1, busy_us=busy_us, by_cause=by_cause, gaps=gaps,
                busy_intervals=busy, busy_classes=busy_classes, comm_us=comm_total,
                comm_overlapped_us=max(comm_overlapped, 0.0),
                regions=tuple((float(a), float(b), int(n)) for a, b, n in regions), n_activities=len(act),
            )
        )  # fmt: skip
    # Each cause's intervals on the primary device, once for the steps and the timeline.
    ivs: dict[str, np.ndarray] = {c: cause_intervals(devices[0], c) for c in CAUSES} if devices else {}
    steps = _step_ledgers(window.steps, devices[0], ivs) if devices and window.steps else ()
    timeline = _timeline(devices[0], ivs) if devices else None
    return Ledger(window=window, devices=tuple(devices), steps=steps, timeline=timeline)


def _classify_gaps(
    model: TraceModel,
    act: pd.DataFrame,
    starts: np.ndarray,
    ends: np.ndarray,
    busy: np.ndarray,
    w0: float,
    w1: float,
    sync_rows: np.ndarray,
    sync_ts: np.ndarray,
    sync_end: np.ndarray,
    sync_thread: np.ndarray,
    sync_in_comm: np.ndarray,
    thread_key: np.ndarray,
    comm_iv: np.ndarray,
    alloc_iv: np.ndarray,
    prof_iv: np.ndarray,
    compile_iv: np.ndarray,
    startup_iv: np.ndarray,
    comm_gpu: np.ndarray,
    harness_iv: np.ndarray,
) -> pd.DataFrame:
    host_ts = model.host["ts"].to_numpy()
    host_end = model.host["end"].to_numpy()
    rows = act.index.to_numpy()
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

    # host_sync: a blocking call already waiting when the GPU drained that returned inside
    # the gap, on the thread that launches the next kernel.
    sync_row = np.full(len(g_start), -1, dtype=np.int64)
    sync_comm = np.zeros(len(g_start), dtype=bool)
    lo = np.searchsorted(sync_end, g_start - SYNC_RETURN_SLACK_US, side="left")
    hi = np.searchsorted(sync_end, g_end, side="right")
    for i in np.flatnonzero(hi > lo):
        cand = slice(lo[i], hi[i])
        waiting = sync_ts[cand] <= g_start[i] + SYNC_RETURN_SLACK_US
        if launch_row[i] >= 0:
            waiting &= sync_thread[cand] == thread_key[launch_row[i]]
        if waiting.any():
            # The last blocking call to return is the one the host waited on (a .tolist()
            # is a pageable copy, then a synchronize).
            j = int(len(waiting) - 1 - np.argmax(waiting[::-1]))
            sync_row[i] = sync_rows[cand][j]
            sync_comm[i] = sync_in_comm[cand][j]
    dur = g_end - g_start
    late = np.nan_to_num(launch_ts, nan=-np.inf) >= g_start - SYNC_RETURN_SLACK_US
    cause = np.full(len(g_start), "idle_other", dtype=object)
    cause[late & (dur > LAUNCH_GAP_MAX_US)] = "host_bound"
    cause[late & (dur <= LAUNCH_GAP_MAX_US)] = "launch_overhead"
    # After the window's last GPU activity the host is still working (the rest of the
    # last step): host work, unless something more specific covers it below.
    cause[~has_next] = "host_bound"
    # Queued work that is a collective: the GPU waits for the other ranks.
    next_is_comm = (next_row >= 0) & comm_gpu[np.clip(next_row, 0, None)]
    cause[~late & next_is_comm] = "communication"

    cause[sync_row >= 0] = "host_sync"
    gaps = pd.DataFrame(
        {
            "start": g_start,
            "end": g_end,
            "cause": cause,
            "next_row": next_row,
            "launch_row": launch_row,
            "sync_row": sync_row,
            "sync_comm": sync_comm,
            "host_side": late | (launch_row < 0),
        }
    )
    gaps = _split_after_sync(gaps, launch_ts, host_end)
    # The parts of a gap the host spent inside a collective, the allocator, the compiler
    # or the profiler are those causes, to the microsecond; this runs after the split so
    # that the host work after a sync is looked at too.
    # Start-up first: a cudaMalloc inside a graph capture is the capture's (its private
    # memory pool), not the steady state's allocator churn.
    # The harness next: a cache flush's allocation is the benchmark's method.
    for iv, name in ((startup_iv, "startup"), (harness_iv, "harness"), (comm_iv, "communication"),
                     (alloc_iv, "allocation"), (compile_iv, "compilation"), (prof_iv, "profiler")):  # fmt: skip
        if len(iv):
            eligible = gaps["host_side"].to_numpy(dtype=bool) & ~np.isin(
                gaps["cause"].to_numpy(),
                ["host_sync", "communication", "allocation", "compilation", "profiler", "startup", "harness"],
            )
            gaps = _carve(gaps, eligible, iv, name)
    # A sync inside a collective (gloo copies CUDA tensors to the host) is its wait.
    cause = gaps["cause"].to_numpy().copy()
    cause[(cause == "host_sync") & gaps["sync_comm"].to_numpy(dtype=bool)] = "communication"
    gaps["cause"] = cause
    return gaps.drop(columns=["sync_comm", "host_side"]).sort_values("start", kind="stable").reset_index(drop=True)


def _carve(gaps: pd.DataFrame, eligible: np.ndarray, iv: np.ndarray, cause: str) -> pd.DataFrame:
    """Split the eligible gaps where they meet the sorted, disjoint intervals `iv`: the
    overlapping pieces get `cause`, the rest keep theirs; every piece keeps its gap's
    links (next kernel, launch, sync)."""
    idx = np.flatnonzero(eligible)
    if not len(idx):
        return gaps
    s = gaps["start"].to_numpy()[idx]
    e = gaps["end"].to_numpy()[idx]
    lo = np.searchsorted(iv[:, 1], s, side="right")
    hi = np.searchsorted(iv[:, 0], e, side="left")
    n = np.clip(hi - lo, 0, None)
    hit = n > 0
    if not hit.any():
        return gaps
    owner = np.repeat(np.arange(len(idx)), n)
    j = np.repeat(lo, n) + (np.arange(n.sum()) - np.repeat(np.cumsum(n) - n, n))
    p_s = np.maximum(s[owner], iv[j, 0])
    p_e = np.minimum(e[owner], iv[j, 1])
    ok = p_e > p_s
    owner, p_s, p_e = owner[ok], p_s[ok], p_e[ok]
    if not len(owner):
        return gaps
    # Boundaries of each gap that was hit, in order: its start, each covered piece's start
    # and end, its end. Segments between consecutive boundaries alternate outside,
    # inside, outside, ...
    hit_gaps = np.unique(owner)
    rank_in_gap = np.arange(len(owner)) - np.searchsorted(owner, owner, side="left")
    pts = np.concatenate([s[hit_gaps], p_s, p_e, e[hit_gaps]])
    who = np.concatenate([hit_gaps, owner, owner, hit_gaps])
    seq = np.concatenate([np.zeros(len(hit_gaps)), 2 * rank_in_gap + 1, 2 * rank_in_gap + 2,
                          np.full(len(hit_gaps), np.inf)])  # fmt: skip
    order = np.lexsort((seq, who))
    pts, who = pts[order], who[order]
    first = np.searchsorted(who, who, side="left")
    pos_in_gap = np.arange(len(pts)) - first
    same = who[1:] == who[:-1]
    seg_s, seg_e, seg_w = pts[:-1][same], pts[1:][same], who[:-1][same]
    inside = (pos_in_gap[:-1][same] % 2) == 1
    keep = seg_e > seg_s
    seg_s, seg_e, seg_w, inside = seg_s[keep], seg_e[keep], seg_w[keep], inside[keep]
    base = gaps.iloc[idx[seg_w]].copy()
    base["start"] = seg_s
    base["end"] = seg_e
    cause_col = base["cause"].to_numpy().copy()
    cause_col[inside] = cause
    base["cause"] = cause_col
    rest = gaps.drop(index=gaps.index[idx[hit_gaps]])
    return pd.concat([rest, base], ignore_index=True)


def _split_after_sync(gaps: pd.DataFrame, launch_ts: np.ndarray, host_end: np.ndarray) -> pd.DataFrame:
    """A sync owns its gap up to its return plus one launch's worth of host time
    (LAUNCH_GAP_MAX_US). If the host then spent longer before launching the next kernel,
    it was doing other work (post-processing the value it waited for, say): that tail is
    host_bound, marked by keeping `sync_row` on the split-off row."""
    sync_row = gaps["sync_row"].to_numpy()
    has_sync = (sync_row >= 0) & (gaps["cause"].to_numpy() == "host_sync")
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
    tail["host_side"] = True
    return pd.concat([head, tail]).sort_values("start", kind="stable").reset_index(drop=True)


def _launch_regions(
    model: TraceModel, act: pd.DataFrame, starts: np.ndarray, ends: np.ndarray
) -> list[tuple[float, float, int]]:
    """Runs of activities that each found an empty queue (start within QUEUE_EMPTY_US of
    their launch call's return) and whose span is mostly idle: the host's dispatch loop
    is the critical path."""
    launch = act["launch"].to_numpy()
    if not len(model.host) or not (launch >= 0).any():
        return []
    host_end = model.host["end"].to_numpy()
    call_end = np.where(launch >= 0, host_end[np.clip(launch, 0, None)], np.nan)
    empty = (launch >= 0) & (starts - call_end <= QUEUE_EMPTY_US)
    out: list[tuple[float, float, int]] = []
    # Runs of consecutive `empty` activities.
    edges = np.flatnonzero(np.diff(np.concatenate([[0], empty.astype(np.int8), [0]])))
    for a, b in zip(edges[::2], edges[1::2], strict=True):
        n = int(b - a)
        if n < REGION_MIN_KERNELS:
            continue
        t0, t1 = float(starts[a]), float(ends[a:b].max())
        if t1 <= t0:
            continue
        busy = total(merge_intervals(starts[a:b], ends[a:b]))
        if 1.0 - busy / (t1 - t0) >= REGION_MIN_IDLE_SHARE:
            out.append((t0, t1, n))
    return out


def _apply_regions(gaps: pd.DataFrame, regions: list[tuple[float, float, int]]) -> pd.DataFrame:
    """Inside a launch-bound region, late-launch gaps are dispatch overhead, however long,
    unless one is an outlier that one piece of host work explains."""
    gaps = gaps.copy()
    gaps["in_region"] = False
    if not regions:
        return gaps
    r_start = np.array([r[0] for r in regions])
    r_end = np.array([r[1] for r in regions])
    g_start = gaps["start"].to_numpy()
    g_end = gaps["end"].to_numpy()
    k = np.searchsorted(r_start, g_start, side="right") - 1
    inside = (k >= 0) & (g_end <= r_end[np.clip(k, 0, None)]) & (g_start >= r_start[np.clip(k, 0, None)])
    gaps["in_region"] = inside
    cause = gaps["cause"].to_numpy().copy()
    dur = g_end - g_start
    # The gaps of each region as one slice of a stable sort by region (a mask over every
    # gap per region was regions x gaps: 0.23 s on a 50-step trace, and growing with it).
    rows = np.flatnonzero(inside)
    rows = rows[np.argsort(k[rows], kind="stable")]
    edges = np.flatnonzero(np.diff(k[rows])) + 1
    for sel in np.split(rows, edges) if len(rows) else ():
        med = float(np.median(dur[sel]))
        limit = max(REGION_OUTLIER_FACTOR * med, REGION_HOST_WORK_MIN_US)
        dispatch = sel[(cause[sel] == "host_bound") & (dur[sel] < limit)]
        cause[dispatch] = "launch_overhead"
    gaps["cause"] = cause
    return gaps


def _dispatch_gaps(model: TraceModel, gaps: pd.DataFrame, thread_key: np.ndarray) -> pd.DataFrame:
    """Short host-bound gaps (not after a sync) that no long op covers on the launching
    thread are dispatch between ops: launch_overhead (see DISPATCH_GAP_MAX_US)."""
    cause = gaps["cause"].to_numpy().copy()
    dur = (gaps["end"] - gaps["start"]).to_numpy()
    launch_row = gaps["launch_row"].to_numpy()
    cand = np.flatnonzero(
        (cause == "host_bound") & (dur <= DISPATCH_GAP_MAX_US) & (gaps["sync_row"].to_numpy() < 0) & (launch_row >= 0)
    )
    if not len(cand) or model.host.empty:
        return gaps
    host = model.host
    # A gap before a graph replay is the loop's own host time: the dispatch fix (a CUDA
    # graph) is already made there.
    graph_launch = name_matches(host["name"], GRAPH_LAUNCH_APIS.__contains__)
    cand = cand[~graph_launch[launch_row[cand]]]
    if not len(cand):
        return gaps
    h_ts, h_end = host["ts"].to_numpy(), host["end"].to_numpy()
    kind = host["kind"].to_numpy()
    # Named host work: a long op with no ops inside it, doing the work itself (a CPU
    # aten::fill_ under aten::zeros, a blocking pageable copy). A compiled backward whose
    # gaps lie between its child ops is dispatch, however long it is; step marks and
    # ProfilerSteps are no work.
    rng = (kind == Kind.CPU_OP) | (kind == Kind.USER_ANNOTATION)
    inner = host["range_inner"].to_numpy()
    parent = host["parent"].to_numpy()
    rows = np.flatnonzero(rng & (inner == np.arange(len(host))))
    up = parent[rows]
    up_range = np.where(up >= 0, inner[np.clip(up, 0, None)], -1)
    child_sum = np.zeros(len(host))
    ok = up_range >= 0
    np.add.at(child_sum, up_range[ok], (h_end - h_ts)[rows[ok]])
    own = (h_end - h_ts) - child_sum
    step_starts = model.steps["cpu_ts"].to_numpy() if len(model.steps) else np.empty(0)
    long_op = np.zeros(len(host), dtype=bool)
    long_op[rows] = (own[rows] > DISPATCH_OP_MAX_US) & (child_sum[rows] <= 0)
    long_op &= ~((kind == Kind.USER_ANNOTATION) & np.isin(h_ts, step_starts))
    long_op &= ~name_matches(host["name"], lambda n: n.startswith("ProfilerStep#"))
    g_start, g_end = gaps["start"].to_numpy()[cand], gaps["end"].to_numpy()[cand]
    g_thread = thread_key[launch_row[cand]]
    covered = np.zeros(len(cand))
    for key in np.unique(g_thread):
        sel = np.flatnonzero(g_thread == key)
        rows = np.flatnonzero(long_op & (thread_key == key))
        if len(rows):
            iv = merge_intervals(h_ts[rows], h_end[rows])
            covered[sel] = overlap(iv, g_start[sel], g_end[sel])
    dispatch = covered < COVER_SHARE * (g_end - g_start)
    cause[cand[dispatch]] = "launch_overhead"
    return gaps.assign(cause=cause)


def cause_intervals(dev: DeviceLedger, cause: str) -> np.ndarray:
    """The sorted intervals of one cause (busy classes and idle gaps of that cause)."""
    idle = dev.gaps_of(cause)[["start", "end"]].to_numpy(dtype=float).reshape(-1, 2)
    busy = dev.busy_classes.get(cause, np.empty((0, 2)))
    return union(busy, idle) if len(idle) and len(busy) else (busy if len(busy) else idle)


def _step_ledgers(steps: tuple[StepSpan, ...], dev: DeviceLedger, ivs: dict[str, np.ndarray]) -> tuple[StepLedger, ...]:
    spans = sorted(steps, key=lambda s: s.start_us)
    bounds = np.array([[max(s.start_us, dev.window_start), min(s.end_us, dev.window_end)] for s in spans])
    if not len(bounds):
        return ()
    edges = np.concatenate([bounds[:, 0], [bounds[-1, 1]]])
    per_cause = {c: covered(ivs[c], edges) for c in CAUSES}
    busy = covered(dev.busy_intervals, edges)
    return tuple(
        StepLedger(
            step=s.index, start=float(edges[i]), end=float(edges[i + 1]), busy_us=float(busy[i]),
            by_cause={c: float(per_cause[c][i]) for c in CAUSES},
        )
        for i, s in enumerate(spans)
    )  # fmt: skip


def _timeline(dev: DeviceLedger, ivs: dict[str, np.ndarray]) -> TimelineBins:
    edges = np.linspace(dev.window_start, dev.window_end, TIMELINE_BINS + 1)
    width = np.diff(edges)
    width[width <= 0] = 1.0
    return TimelineBins(
        start=dev.window_start,
        end=dev.window_end,
        by_cause={c: covered(ivs[c], edges) / width for c in CAUSES},
    )
