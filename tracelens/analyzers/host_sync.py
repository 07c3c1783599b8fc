"""host_sync: the host waits on a device result.

Question 1 of the diagnostic order. A blocking call (cudaStreamSynchronize behind
`.item()`, `x[mask]`'s nonzero, `.cpu()`, an explicit synchronize...) empties the GPU's
queue: the host cannot enqueue the next kernel until the device result arrives.

Cost model: the GPU idle that follows each sync until the queue refills (the gaps that
the ledger attributes to it). The host time blocked inside the call is reported as
evidence but is not the cost: while the host waits the GPU is working, and a sync that
returns while plenty of work is still queued costs almost nothing - we say so instead
of flagging it.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pandas as pd

from tracelens.analyzers.base import Category, Fact, Found, Place
from tracelens.derive.context import AnalysisContext
from tracelens.derive.host_calls import blocking_call_rows, is_profiler_sync, one_per_call
from tracelens.derive.intervals import overlap
from tracelens.domain import is_library_file
from tracelens.model.schema import Kind
from tracelens.model.sources import (
    PySource,
    op_chain,
    program_source,
    python_call,
    user_source,
    user_stack,
)
from tracelens.model.trace import TraceModel, name_matches

#: A sync whose GPU idle is under this share of the host time it blocked is "while the
#: GPU was busy anyway": the device had queued work to do and barely noticed.
BUSY_ANYWAY_IDLE_RATIO = 0.05

#: Device-to-host copy rate into pinned memory on the H200 (PCIe Gen5 x16; the pinned
#: host-to-device copies of host_bound_pinned ran at ~55 GB/s). A blocking pageable copy
#: that runs slower than this costs its own time beyond what the bytes need.
PINNED_COPY_BYTES_PER_S = 50e9
#: A blocking copy's own GPU time counts when it is at least this share of the window: a
#: copy inside the step is then where the host's wait goes (issue 34 §2).
SLOW_COPY_MIN_SHARE = 0.05

#: At most this many sites per finding (the rest are summed into the finding's totals).
MAX_SITES = 8
#: Constructs that end a CUDA graph or a compiled region: the program needs the value on
#: the host (the blocked-by rule counts them over every site, not the MAX_SITES shown:
#: prog_detection_fixed has 18 sites, 144 such calls in 3 steps, 72 in its top 8). An
#: explicit synchronize is the harness's (TraceLens's synchronize_each_step), outside the
#: model code a graph or torch.compile would take.
GRAPH_ENDING_CONSTRUCTS: frozenset[str] = frozenset({"data_dependent_shape", "item", "branch", "device_to_host_copy"})
#: The evidence id of their count (the blocked-by rule reads it: predict/blocking.sync_cut).
GRAPH_ENDING_CALLS = "graph_ending_calls"


#: The kinds of Python code that sync, recognised from the ops around the sync (each
#: described, with its fix, in tracelens.explain.host_sync).
SyncConstruct = Literal[
    "data_dependent_shape",
    "item",
    "branch",
    "device_to_host_copy",
    "host_to_device_copy",
    "explicit_synchronize",
    "other",
]


#: Which way a finding's pageable copies go: all uploads, all read-backs, both, or
#: copies whose kind the trace does not say.
CopyDirection = Literal["host_to_device", "device_to_host", "both", "unknown"]


def direction_of(name: str) -> CopyDirection:
    """A memcpy's direction from its own kind (Kineto's `Memcpy HtoD (...)`, ROCm's
    `CopyHostToDevice`, ...)."""
    if "HtoD" in name or "HostToDevice" in name:
        return "host_to_device"
    if "DtoH" in name or "DeviceToHost" in name:
        return "device_to_host"
    return "unknown"


@dataclass(frozen=True)
class SyncSite:
    construct: SyncConstruct
    call: str  # the Python call that synced, where the source says ("" if unknown)
    ops: tuple[str, ...]  # enclosing ops, innermost first
    api: str


@dataclass(frozen=True)
class HostSyncFacts:
    count: int
    host_us: float  # blocked in the calls
    busy_anyway: bool  # they returned while the GPU still had queued work
    #: Each group's Python call, or its construct where the call is unknown, costliest first.
    calls: tuple[tuple[str, SyncConstruct], ...]
    constructs: tuple[SyncConstruct, ...]  # in order of the idle they cause
    idle_us: float = 0.0  # GPU idle after them
    #: Their blocking copies to or from pageable memory, where slow enough to count
    #: (0: not counted): GPU time and bytes, and which way they go (from each memcpy's own
    #: kind: `Memcpy HtoD (Pageable -> Device)` is an upload, `Memcpy DtoH (Device ->
    #: Pageable)` a read-back; issue 24/27: uploads were called device-to-host).
    copy_us: float = 0.0
    copy_bytes: float = 0.0
    copy_direction: CopyDirection = "unknown"


_DATA_DEPENDENT_OPS = (
    "aten::nonzero",
    "aten::masked_select",
    "aten::unique",
    "aten::_unique",
    "aten::_unique2",
    "aten::unique_consecutive",
    "aten::unique_dim",
    "aten::repeat_interleave",
    "aten::bincount",
    "aten::histc",
    "aten::masked_scatter",
)
_COPY_OPS = ("aten::copy_", "aten::_to_copy", "aten::to", "aten::cpu", "aten::tolist", "aten::numpy")


def classify(ops: list[str], memcpy_names: list[str], api: str) -> SyncConstruct:
    """Which construct caused a sync, from the enclosing ops (innermost first)."""
    if any(op.startswith(_DATA_DEPENDENT_OPS) for op in ops):
        return "data_dependent_shape"
    if "aten::is_nonzero" in ops:
        return "branch"
    if "aten::item" in ops or "aten::_local_scalar_dense" in ops:
        return "item"
    if any(op in _COPY_OPS for op in ops):
        if any("HtoD" in m for m in memcpy_names) and not any("DtoH" in m for m in memcpy_names):
            return "host_to_device_copy"
        return "device_to_host_copy"
    if not ops or api in ("cudaDeviceSynchronize", "hipDeviceSynchronize", "cudaEventSynchronize"):
        return "explicit_synchronize"
    return "other"


def _memcpys_by_op(model: TraceModel) -> dict[int, list[str]]:
    gpu = model.gpu
    copies = gpu[(gpu["kind"] == Kind.MEMCPY) & (gpu["launch"] >= 0)]
    ops = model.host["op"].to_numpy()
    out: dict[int, list[str]] = defaultdict(list)
    for launch, name in zip(copies["launch"].to_numpy(), copies["name"].astype(str), strict=True):
        op = int(ops[launch])
        if op >= 0:
            out[op].append(name)
    return out


@dataclass
class _Group:
    """The syncs of one construct, runtime call, op chain and source: one site."""

    construct: SyncConstruct
    api: str
    ops: tuple[str, ...]
    source: PySource | None
    stack: tuple[PySource, ...]
    call: str = ""
    count: int = 0
    host_us: float = 0.0
    idle_us: float = 0.0
    tail_us: float = 0.0
    steps: set[int] | None = None
    rows: list[int] | None = None


def _idle_after_syncs(ctx: AnalysisContext) -> tuple[dict[int, float], dict[int, float]]:
    """GPU idle the ledger attributes to each sync row, and the host-bound idle that
    followed it (the host did other work after the sync returned; counted under
    host_bound, reported here as context)."""
    idle_by_sync: dict[int, float] = defaultdict(float)
    tail_by_sync: dict[int, float] = defaultdict(float)
    # Only the primary GPU: the finding's share is of its window (other GPUs' idle would
    # be counted once per device and overflow the share).
    for dev in ctx.ledger.devices[:1]:
        sync_gaps = dev.gaps[dev.gaps["sync_row"] >= 0]
        gap_cause = sync_gaps["cause"].to_numpy()
        for row, dur, cause in zip(
            sync_gaps["sync_row"].to_numpy(), sync_gaps["dur"].to_numpy(), gap_cause, strict=True
        ):
            if cause == "host_sync":
                idle_by_sync[int(row)] += float(dur)
            elif cause == "host_bound":
                tail_by_sync[int(row)] += float(dur)
    return idle_by_sync, tail_by_sync


def _group_syncs(
    ctx: AnalysisContext, sync_rows: np.ndarray, idle_by_sync: dict[int, float], tail_by_sync: dict[int, float]
) -> tuple[dict[tuple[str, str, tuple[str, ...], str], _Group], int]:
    """The window's blocking calls grouped into sites, and how many were the profiler's own."""
    model = ctx.model
    host = model.host
    launches = model.gpu["launch"].to_numpy()
    launched = launches[launches >= 0]
    last_launch_ts = float(host["ts"].to_numpy()[launched].max()) if len(launched) else np.inf
    window = ctx.ledger.primary
    w0 = window.window_start if window else -np.inf
    w1 = window.window_end if window else np.inf
    memcpys = _memcpys_by_op(model)
    ts = host["ts"].to_numpy()
    dur = host["dur"].to_numpy()
    steps = host["step"].to_numpy()
    op_col = host["op"].to_numpy()

    groups: dict[tuple[str, str, tuple[str, ...], str], _Group] = {}
    profiler_syncs = 0
    # One host wait per logical call: a pageable .tolist() is a copy and a synchronize
    # inside one op; both calls' host time and idle go to the call, counted once.
    calls_of = _calls_of(model, sync_rows)
    for row, parts in calls_of.items():
        if not any(w0 - 1 <= ts[r] <= w1 + 1 or idle_by_sync.get(r, 0.0) > 0.0 for r in parts):
            continue
        if is_profiler_sync(model, row, last_launch_ts):
            profiler_syncs += 1
            continue
        api = model.arrays.name(row)
        ops = op_chain(model, row)
        construct = classify(ops, memcpys.get(int(op_col[row]), []), api)
        src = inner = user_source(model, row)
        if src is not None and is_library_file(src.file):
            # A sync inside a library (transformers' pipeline moving tensors) is fixed
            # where the program calls it: its own frame names the site (issue 24 §3);
            # the library's frame keeps sites apart and stays in the site's stack.
            src = program_source(model, row) or src
        call = python_call(model, row)
        if not call and "aten::index" in ops and construct == "data_dependent_shape":
            call = "tensor[bool_mask]"
        key = (construct, api, tuple(ops[:3]), (inner.label if inner else "") + call)
        grp = groups.get(key)
        if grp is None:
            grp = _Group(construct, api, tuple(ops[:4]), src, tuple(user_stack(model, row)), call=call, steps=set())
            groups[key] = grp
        grp.count += 1
        if grp.rows is None:
            grp.rows = []
        grp.rows.extend(parts)
        grp.host_us += float(sum(dur[r] for r in parts))
        grp.idle_us += sum(idle_by_sync.get(r, 0.0) for r in parts)
        grp.tail_us += sum(tail_by_sync.get(r, 0.0) for r in parts)
        if steps[row] >= 0 and grp.steps is not None:
            grp.steps.add(int(steps[row]))
    return groups, profiler_syncs


def analyze(ctx: AnalysisContext) -> list[Found[HostSyncFacts, SyncSite]]:
    sync_rows = blocking_call_rows(ctx.model)
    if not len(sync_rows):
        return []
    idle_by_sync, tail_by_sync = _idle_after_syncs(ctx)
    groups, profiler_syncs = _group_syncs(ctx, sync_rows, idle_by_sync, tail_by_sync)
    if not groups:
        return []
    ranked = sorted(groups.values(), key=lambda g: (g.idle_us, g.host_us), reverse=True)
    count = sum(g.count for g in ranked)
    graph_ending = sum(g.count for g in ranked if g.construct in GRAPH_ENDING_CONSTRUCTS)
    host_us = sum(g.host_us for g in ranked)
    idle_us = sum(g.idle_us for g in ranked)
    tail_us = sum(g.tail_us for g in ranked)
    # The blocking pageable copies' own transfer time: the host waits for the copy itself
    # (a 256 MB .cpu() at 0.9 GB/s is most of a step, with the GPU busy copying).
    copy_us, copy_bytes, direction = _pageable_copies(ctx, [r for g in ranked for r in (g.rows or [])])
    slow = copy_us >= SLOW_COPY_MIN_SHARE * ctx.window_us  # else not counted
    copy_us = copy_us if slow else 0.0
    copy_gain = max(copy_us - copy_bytes / PINNED_COPY_BYTES_PER_S * 1e6, 0.0)
    places = tuple(
        Place(
            count=g.count,
            time_us=g.idle_us,
            facts=SyncSite(g.construct, g.call, g.ops[:3], g.api),
            host_us=g.host_us,
            ops=g.ops,
            api=g.api,
            source=g.source,
            stack=g.stack,
            steps=tuple(sorted(g.steps or ())),
            kind=g.construct,
            call=g.call,
        )
        for g in ranked[:MAX_SITES]
    )
    # Constructs in order of the idle they cause; the advice follows the same order.
    constructs = tuple(dict.fromkeys(g.construct for g in ranked))
    # One entry per call as the title names it (its construct where the call is unknown).
    named: dict[str, tuple[str, SyncConstruct]] = {}
    for g in ranked:
        named.setdefault(g.call or g.construct, (g.call, g.construct))
    calls = tuple(named.values())
    sources = tuple(dict.fromkeys(g.source for g in ranked if g.source is not None))[:MAX_SITES]
    busy_during = _busy_during(ctx, [g.rows for g in ranked])
    # (the GPU is busy during a slow blocking copy because it is copying: that is the cost)
    busy_anyway = idle_us < BUSY_ANYWAY_IDLE_RATIO * host_us and busy_during >= 0.5 * host_us and copy_us == 0
    return [
        Found(
            category=Category.HOST_SYNC,
            time_us=idle_us + copy_us,
            expected_gain_us=idle_us + copy_gain,
            facts=HostSyncFacts(
                count, host_us, busy_anyway, calls, constructs, idle_us, copy_us, copy_bytes, direction
            ),
            evidence=(
                Fact("sync_calls", count, "count"),
                Fact(GRAPH_ENDING_CALLS, graph_ending, "count"),
                Fact("host_blocked_us", host_us, "us"),
                Fact("busy_while_blocked_us", busy_during, "us"),
                Fact("idle_after_us", idle_us, "us"),
                Fact("host_bound_after_us", tail_us, "us"),
                Fact("constructs", ", ".join(constructs)),
                Fact("runtime_calls", ", ".join(sorted({g.api for g in ranked}))),
                Fact("profiler_syncs", profiler_syncs, "count"),
            ),
            places=places,
            sources=sources,
            tags=constructs,
        )
    ]


def _pageable_copies(ctx: AnalysisContext, rows: list[int]) -> tuple[float, float, CopyDirection]:
    """GPU time (primary device, inside the window), bytes and direction of the pageable
    memcpys that these blocking calls launched."""
    dev = ctx.ledger.primary
    if dev is None or not rows:
        return 0.0, 0.0, "unknown"
    gpu = ctx.model.gpu
    mc = gpu[(gpu["kind"] == Kind.MEMCPY).to_numpy() & np.isin(gpu["launch"].to_numpy(), rows)]
    mc = mc[(mc["device"] == dev.device) & (mc["ts"] < dev.window_end) & (mc["end"] > dev.window_start)]
    mc = mc[name_matches(mc["name"], lambda n: "Pageable" in n)] if len(mc) else mc
    if not len(mc):
        return 0.0, 0.0, "unknown"
    ts = np.clip(mc["ts"].to_numpy(), dev.window_start, dev.window_end)
    end = np.clip(mc["end"].to_numpy(), dev.window_start, dev.window_end)
    ways = {direction_of(n) for n in mc["name"].astype(str)} - {"unknown"}
    direction: CopyDirection = ways.pop() if len(ways) == 1 else ("both" if ways else "unknown")
    return float((end - ts).sum()), float(mc["bytes"].clip(lower=0).sum()), direction


def _calls_of(model: TraceModel, sync_rows: np.ndarray) -> dict[int, list[int]]:
    """Blocking rows grouped into logical calls: {the call's row: all its rows}; a
    blocking copy dropped by one_per_call joins the first synchronize of its op after it."""
    kept = one_per_call(model, sync_rows)
    out: dict[int, list[int]] = {int(r): [int(r)] for r in kept}
    dropped = np.setdiff1d(sync_rows, kept)
    if not len(dropped):
        return out
    op = model.host["op"].to_numpy()
    ts = model.host["ts"].to_numpy()
    by_op: dict[int, list[int]] = defaultdict(list)
    for r in kept:
        if op[r] >= 0:
            by_op[int(op[r])].append(int(r))
    for r in dropped:
        cands = sorted(by_op.get(int(op[r]), []), key=lambda c: ts[c])
        later = [c for c in cands if ts[c] >= ts[r]] or cands
        out[later[0]].append(int(r))
    return out


def _busy_during(ctx: AnalysisContext, row_lists: list[list[int] | None]) -> float:
    """GPU busy time (primary device) while the host sat in these sync calls."""
    dev = ctx.ledger.primary
    rows = np.array([r for rl in row_lists for r in (rl or [])], dtype=np.int64)
    if dev is None or not len(rows) or not len(dev.busy_intervals):
        return 0.0
    ts = ctx.model.host["ts"].to_numpy()[rows]
    end = ctx.model.host["end"].to_numpy()[rows]
    return float(overlap(dev.busy_intervals, ts, end).sum())


def sync_table(model: TraceModel) -> pd.DataFrame:
    """All blocking calls with their op chain (used by tests and the JSON's evidence)."""
    host = model.host
    names = host["name"].astype(str)
    rows = blocking_call_rows(model)
    return pd.DataFrame(
        {
            "row": rows,
            "api": names.to_numpy()[rows],
            "ts": host["ts"].to_numpy()[rows],
            "dur": host["dur"].to_numpy()[rows],
            "op": [", ".join(op_chain(model, int(r))[:3]) for r in rows],
        }
    )
