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

import numpy as np
import pandas as pd

from tracelens.analyzers.base import Category, Finding, Metric, Site, severity_for
from tracelens.derive.context import AnalysisContext
from tracelens.derive.host_calls import blocking_call_rows, is_profiler_sync, one_per_call
from tracelens.derive.intervals import overlap
from tracelens.domain import fmt_us
from tracelens.model.schema import Kind
from tracelens.model.sources import (
    PySource,
    op_chain,
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


@dataclass(frozen=True)
class SyncConstruct:
    """A kind of Python code that syncs, recognised from the ops around the sync."""

    id: str
    description: str
    advice: str


_DATA_DEPENDENT = SyncConstruct(
    "data_dependent_shape",
    "an op whose output size depends on tensor values (x[mask], nonzero, unique, masked_select)",
    "Keep shapes static: compute on every element and mask (torch.where(mask, x, 0), x * mask) "
    "instead of compacting with x[mask]; where compaction is needed, build destination indices "
    "on the device with a cumsum over the mask and scatter, or give the size up front "
    "(torch.nonzero_static, repeat_interleave(output_size=...)).",
)
_ITEM = SyncConstruct(
    "item",
    "a scalar read of a device tensor (.item(), float(t), int(t), a Python branch on a tensor value)",
    "Keep scalars on the device: accumulate (total += loss.detach()) and read once every N steps "
    "or after the loop; replace Python branches on tensor values with torch.where, masking, or "
    "torch.cond under torch.compile.",
)
_BRANCH = SyncConstruct(
    "branch",
    "a Python truth test of a tensor (if t:, while t, bool(t), t.any() in a condition)",
    "Replace the Python branch with tensor ops (torch.where, masking) or torch.cond, or move the "
    "check off the hot path (every N steps).",
)
_D2H = SyncConstruct(
    "device_to_host_copy",
    "a blocking device-to-host copy (.cpu(), .tolist(), .numpy(), .to('cpu'), print(t))",
    "Copy asynchronously into pinned memory (x.to('cpu', non_blocking=True) into a pinned "
    "buffer, then wait on a CUDA event only when the values are needed), batch small copies "
    "into one, or keep the computation on the GPU.",
)
_H2D = SyncConstruct(
    "host_to_device_copy",
    "a blocking host-to-device copy (.to('cuda') or torch.tensor(..., device='cuda') from pageable memory)",
    "Pin the source (DataLoader(pin_memory=True) or t.pin_memory()) and copy with "
    "non_blocking=True so the host does not wait for the copy.",
)
_EXPLICIT = SyncConstruct(
    "explicit_synchronize",
    "an explicit synchronize (torch.cuda.synchronize(), stream/event synchronize)",
    "Remove synchronize calls from the hot loop; keep them at measurement boundaries only, and "
    "time with CUDA events (torch.cuda.Event(enable_timing=True)).",
)
_OTHER = SyncConstruct(
    "other",
    "a blocking call inside a library op",
    "Find why the op needs a device result on the host (the sources below) and keep that value "
    "on the device, or move the call off the hot path.",
)

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
        return _DATA_DEPENDENT
    if "aten::is_nonzero" in ops:
        return _BRANCH
    if "aten::item" in ops or "aten::_local_scalar_dense" in ops:
        return _ITEM
    if any(op in _COPY_OPS for op in ops):
        if any("HtoD" in m for m in memcpy_names) and not any("DtoH" in m for m in memcpy_names):
            return _H2D
        return _D2H
    if not ops or api in ("cudaDeviceSynchronize", "hipDeviceSynchronize", "cudaEventSynchronize"):
        return _EXPLICIT
    return _OTHER


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


def analyze(ctx: AnalysisContext) -> list[Finding]:
    model = ctx.model
    host = model.host
    sync_rows = blocking_call_rows(model)
    if not len(sync_rows):
        return []
    launches = model.gpu["launch"].to_numpy()
    launched = launches[launches >= 0]
    last_launch_ts = float(host["ts"].to_numpy()[launched].max()) if len(launched) else np.inf

    # GPU idle attributed to each sync, over all devices.
    # and the host-bound idle that followed it (the host did other work after the sync
    # returned; counted under host_bound, reported here as context).
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

    window = ctx.ledger.primary
    w0 = window.window_start if window else -np.inf
    w1 = window.window_end if window else np.inf
    memcpys = _memcpys_by_op(model)
    ts = host["ts"].to_numpy()
    dur = host["dur"].to_numpy()
    steps = host["step"].to_numpy()
    op_col = host["op"].to_numpy()

    @dataclass
    class _Group:
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

    groups: dict[tuple[str, str, tuple[str, ...], str], _Group] = {}
    profiler_syncs = 0
    # One host wait per logical call: a pageable .tolist() is a copy and a synchronize
    # inside one op; both calls' host time and idle go to the call, counted once.
    calls = _calls_of(model, sync_rows)
    for row, parts in calls.items():
        if not any(w0 - 1 <= ts[r] <= w1 + 1 or idle_by_sync.get(r, 0.0) > 0.0 for r in parts):
            continue
        if is_profiler_sync(model, row, last_launch_ts):
            profiler_syncs += 1
            continue
        api = model.arrays.name(row)
        ops = op_chain(model, row)
        construct = classify(ops, memcpys.get(int(op_col[row]), []), api)
        src = user_source(model, row)
        call = python_call(model, row)
        if not call and "aten::index" in ops and construct is _DATA_DEPENDENT:
            call = "tensor[bool_mask]"
        key = (construct.id, api, tuple(ops[:3]), (src.label if src else "") + call)
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

    if not groups:
        return []
    ranked = sorted(groups.values(), key=lambda g: (g.idle_us, g.host_us), reverse=True)
    count = sum(g.count for g in ranked)
    host_us = sum(g.host_us for g in ranked)
    idle_us = sum(g.idle_us for g in ranked)
    tail_us = sum(g.tail_us for g in ranked)
    # The blocking pageable copies' own transfer time: the host waits for the copy itself
    # (a 256 MB .cpu() at 0.9 GB/s is most of a step, with the GPU busy copying).
    copy_us, copy_bytes = _pageable_copies(ctx, [r for g in ranked for r in (g.rows or [])])
    copy_gain = 0.0
    if copy_us >= SLOW_COPY_MIN_SHARE * ctx.window_us:
        copy_gain = max(copy_us - copy_bytes / PINNED_COPY_BYTES_PER_S * 1e6, 0.0)
    else:
        copy_us = 0.0
    share = ctx.share(idle_us + copy_us)
    sites = tuple(
        Site(
            description=_site_description(g),
            count=g.count,
            time_us=g.idle_us,
            host_us=g.host_us,
            ops=g.ops,
            api=g.api,
            source=g.source,
            stack=g.stack,
            steps=tuple(sorted(g.steps or ())),
            kind=g.construct.id,
            advice=g.construct.advice,
        )
        for g in ranked[:MAX_SITES]
    )
    # Constructs in order of the idle they cause; the advice follows the same order.
    constructs: dict[str, SyncConstruct] = {}
    for g in ranked:
        constructs.setdefault(g.construct.id, g.construct)
    python_calls = list(dict.fromkeys(g.call or g.construct.id.replace("_", " ") for g in ranked))
    sources = tuple(dict.fromkeys(g.source for g in ranked if g.source is not None))[:MAX_SITES]
    where = f" {sources[0].where}" if sources else ""
    what = ", ".join(python_calls[:3]) + (", …" if len(python_calls) > 3 else "")
    busy_during = _busy_during(ctx, [g.rows for g in ranked])
    # (the GPU is busy during a slow blocking copy because it is copying: that is the cost)
    busy_anyway = idle_us < BUSY_ANYWAY_IDLE_RATIO * host_us and busy_during >= 0.5 * host_us and copy_us == 0
    if busy_anyway:
        title = (
            f"{count} host syncs ({what}){where}: the host waits {fmt_us(host_us)} while the GPU stays busy "
            f"({fmt_us(idle_us)} idle after them)"
        )
        lead = (
            "These syncs return while the GPU still has queued work, so they cost little now; they become "
            "expensive as soon as the GPU gets faster than the host. "
        )
    else:
        title = (
            f"{count} host syncs ({what}){where} leave the GPU idle {fmt_us(idle_us)}; the host waits {fmt_us(host_us)}"
        )
        lead = ""
    if copy_us > 0:
        rate = copy_bytes / (copy_us / 1e6) if copy_us > 0 else 0.0
        title += (
            f"; {fmt_us(copy_us)} of the wait is their device-to-host copies to pageable memory "
            f"({copy_bytes / 1e6:,.0f} MB at {rate / 1e9:.1f} GB/s)"
        )
        lead = (
            f"The copies themselves take {fmt_us(copy_us)}: copy into a pinned buffer allocated once "
            "(torch.empty(..., pin_memory=True), then buf.copy_(t, non_blocking=True) and an event wait), which runs "
            "at the link's rate, and copy only what the host needs (the argmax ids, not the logits). " + lead
        )
    # One line per construct, most costly first (renderers keep the line breaks).
    advice = lead + "\n".join(
        f"• {c.description[0].upper()}{c.description[1:]}: {c.advice}" for c in constructs.values()
    )
    return [
        Finding(
            category=Category.HOST_SYNC,
            severity=severity_for(share),
            title=title,
            time_us=idle_us + copy_us,
            share=share,
            advice=advice,
            expected_gain_us=idle_us + copy_gain,
            gain_note=(
                "up to the GPU idle that follows these syncs; the host time blocked inside them "
                "overlaps GPU work and is not saved"
            ),
            evidence=(
                Metric("sync calls", count, "count"),
                Metric("host blocked in the calls", host_us, "us"),
                Metric("GPU busy while the host was blocked", busy_during, "us"),
                Metric("GPU idle after them (sync return + queue refill)", idle_us, "us"),
                Metric("GPU idle while the host worked after them (counted under host_bound)", tail_us, "us"),
                Metric("constructs", ", ".join(constructs)),
                Metric("runtime calls", ", ".join(sorted({g.api for g in ranked}))),
                Metric("profiler's own syncs ignored", profiler_syncs, "count"),
            ),
            sites=sites,
            sources=sources,
            tags=tuple(constructs),
        )
    ]


def _pageable_copies(ctx: AnalysisContext, rows: list[int]) -> tuple[float, float]:
    """GPU time (primary device, inside the window) and bytes of the pageable memcpys
    that these blocking calls launched."""
    dev = ctx.ledger.primary
    if dev is None or not rows:
        return 0.0, 0.0
    gpu = ctx.model.gpu
    mc = gpu[(gpu["kind"] == Kind.MEMCPY).to_numpy() & np.isin(gpu["launch"].to_numpy(), rows)]
    mc = mc[(mc["device"] == dev.device) & (mc["ts"] < dev.window_end) & (mc["end"] > dev.window_start)]
    mc = mc[name_matches(mc["name"], lambda n: "Pageable" in n)] if len(mc) else mc
    if not len(mc):
        return 0.0, 0.0
    ts = np.clip(mc["ts"].to_numpy(), dev.window_start, dev.window_end)
    end = np.clip(mc["end"].to_numpy(), dev.window_start, dev.window_end)
    return float((end - ts).sum()), float(mc["bytes"].clip(lower=0).sum())


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


def _site_description(g: object) -> str:
    ops = getattr(g, "ops", ())
    api = getattr(g, "api", "")
    call = getattr(g, "call", "")
    construct = getattr(g, "construct", None)
    label = construct.id.replace("_", " ") if construct is not None else ""
    chain = " > ".join(reversed(ops[:3])) if ops else "(no enclosing op)"
    head = f"{call} ({label})" if call else label
    return f"{head}: {chain} > {api}"


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
