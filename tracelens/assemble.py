"""Assemble a Report from a TraceModel: run the analyzers, rank, and build the tables.

This is the one place that sees both the model and the report; renderers get only the
Report.
"""

from __future__ import annotations

import datetime as _dt
import math
import os
import time
from collections import defaultdict

import numpy as np
import pandas as pd

from tracelens import __version__, explain
from tracelens.analyzers import run_all
from tracelens.assemble_inputs import graph_summary, serving_summary
from tracelens.assemble_snapshot import snapshot_of_trace
from tracelens.derive.clocks import nvml_gpu_meta
from tracelens.derive.context import AnalysisContext
from tracelens.derive.counters import KernelCounters, LaunchCounters
from tracelens.derive.devices import other_accelerator
from tracelens.derive.host_calls import one_per_call
from tracelens.derive.intervals import merge_intervals
from tracelens.derive.kernel_source import kernel_sources
from tracelens.derive.ledger import CAUSES, TIMELINE_BINS, DeviceLedger
from tracelens.derive.matmuls import MatmulRow
from tracelens.derive.roofline import ModelCheck, Roofline
from tracelens.derive.stream_busy import stream_busy_bins
from tracelens.domain import cut_name, gpu_not_recorded
from tracelens.explain.notes import down_sampled_words
from tracelens.explain.window import window_reason
from tracelens.model.peaks import infer_part
from tracelens.model.schema import Kind
from tracelens.model.sources import PySource, has_python_stacks, user_source, user_sources
from tracelens.model.trace import TraceModel
from tracelens.predict import attach as attach_predictions
from tracelens.ranking import questions, rank, settle, summary, trace_has_shapes
from tracelens.report import (
    SCHEMA_VERSION,
    ClockTimeline,
    CountersSummary,
    Finding,
    GpuTimeSummary,
    KernelRow,
    KernelSource,
    LedgerEntry,
    MeasuredKernel,
    MemoryTimeline,
    ModelCheckRow,
    OpRow,
    Report,
    RooflinePoint,
    RooflineSummary,
    SourceRow,
    StartupItem,
    StepRow,
    StreamBusy,
    Timeline,
    TimeSplit,
    TraceInfo,
    UncoveredOp,
    WindowInfo,
)
from tracelens.report.enums import ActivityKind

MAX_KERNEL_ROWS = 25
MAX_OP_ROWS = 25
MAX_SOURCE_ROWS = 20
MAX_MATMUL_ROWS = 40
MAX_SYNC_MARKS = 400
_KIND_NAMES: dict[int, ActivityKind] = {
    int(Kind.KERNEL): "kernel",
    int(Kind.MEMCPY): "memcpy",
    int(Kind.MEMSET): "memset",
}


def build_report(
    model: TraceModel,
    load_seconds: float = 0.0,
    *,
    user_window: tuple[float, float] | None = None,
    user_steps: tuple[int, int] | None = None,
    ctx: AnalysisContext | None = None,
) -> Report:
    t0 = time.perf_counter()
    if ctx is None:
        ctx = AnalysisContext(model, user_window=user_window, user_steps=user_steps)
    model = ctx.model  # with the user's own step marks, where it had no ProfilerStep
    ranked = rank(settle(ctx, attach_predictions(ctx, findings_of(ctx))))
    gpu_time = _gpu_time_summary(ctx)
    report = Report(
        schema_version=SCHEMA_VERSION,
        tool="tracelens",
        tool_version=__version__,
        generated_at=_dt.datetime.now(_dt.UTC).replace(microsecond=0).isoformat(),
        trace=_trace_info(model),
        summary=summary(ctx, ranked),
        window=_window_info(ctx),
        ledger=gpu_time.total.ledger,
        gpu_time=gpu_time,
        timeline=_timeline(ctx),
        clocks=_clocks(ctx),
        questions=questions(ctx, ranked),
        findings=tuple(ranked),
        kernels=_kernel_rows(ctx),
        ops=_op_rows(ctx),
        sources=_source_rows(ctx, ranked),
        roofline=_roofline(ctx),
        matmuls=tuple(replace_name(r) for r in sorted(ctx.matmuls, key=lambda r: -r.time_us)[:MAX_MATMUL_ROWS]),
        load_seconds=round(load_seconds, 3),
        analysis_seconds=0.0,
        memory=_memory(ctx),
        counters=_counters(ctx),
    )
    from dataclasses import replace

    names = [str(n) for n in _window_kernel_names(ctx)]
    report = replace(
        report,
        kernel_sources=tuple(
            KernelSource(
                kernel=cut_name(k.kernel),
                kind=k.kind,
                file=k.file,
                line=k.line,
                function=k.function,
                found=k.found,
                launched_from=k.launched_from,
                library=k.library,
            )
            for k in kernel_sources(model, names)
        ),
        graphs=graph_summary(ctx),
        serving=serving_summary(ctx),
    )
    if ctx.down_sampled is not None and (dev := ctx.ledger.primary) is not None:
        lost = dev.by_cause.get("unrecorded", 0.0)
        note = down_sampled_words(ctx.down_sampled, lost, dev.share("unrecorded"), ctx.per_unit)
        report = replace(report, summary=replace(report.summary, notes=(*report.summary.notes, note)))
    snap, snap_note = snapshot_of_trace(model.meta.path)
    if snap is not None or snap_note:
        notes = report.summary.notes + ((snap_note,) if snap_note else ())
        report = replace(report, snapshot=snap, summary=replace(report.summary, notes=notes))
    return replace(report, analysis_seconds=round(time.perf_counter() - t0, 3))


def findings_of(ctx: AnalysisContext) -> list[Finding]:
    """Every analyzer's findings, with their words (tracelens.explain), not yet fitted
    to the ledger (ranking.settle does that)."""
    return explain.findings(run_all(ctx), ctx.share, ctx.per_unit)


def _trace_info(model: TraceModel) -> TraceInfo:
    meta = model.meta
    dev = meta.primary_device
    cc = f"{dev.compute_capability[0]}.{dev.compute_capability[1]}" if dev and dev.compute_capability else ""
    acc = other_accelerator(model)
    accelerator = acc.label if acc is not None and not meta.active_devices else ""
    if accelerator:
        dev = None  # its deviceProperties describe the accelerator, not a GPU
    return TraceInfo(
        path=meta.path,
        file_name=os.path.basename(meta.path),
        file_bytes=meta.file_bytes,
        json_bytes=meta.json_bytes,
        n_events=meta.n_events,
        vintage=meta.vintage,
        vendor=meta.vendor,
        gpu_name=dev.name
        if dev
        else (
            f"no GPU ({acc.kind} trace)"
            if acc is not None and accelerator
            else gpu_not_recorded(meta.vendor)
            if meta.active_devices
            else "no GPU (CPU-only trace)"
        ),
        gpu_count=len(meta.active_devices),
        compute_capability=cc,
        num_sms=dev.num_sms if dev else None,
        versions=dict(meta.versions),
        rank=meta.rank,
        world_size=meta.world_size,
        span_us=model.span_us,
        steps=tuple(int(s) for s in model.steps["step"]),
        has_shapes=trace_has_shapes(model),
        has_python_stacks=has_python_stacks(model),
        has_memory_events=len(model.memory) > 0,
        has_clock_samples=len(model.counters) > 0,
        notes=meta.notes + _device_notes(model),
        accelerator=accelerator,
    )


def _device_notes(model: TraceModel) -> tuple[str, ...]:
    """How the kernels' GPU was identified, when not plainly by its id and name."""
    meta = model.meta
    out = [meta.device_note] if meta.device_note else []
    dev = meta.primary_device
    if dev is not None and meta.active_devices:
        dev = meta.device(meta.active_devices[0]) or dev
        part = infer_part(dev.name, dev.compute_capability, dev.num_sms, dev.total_memory_bytes)
        if part is not None:
            cc = f"{dev.compute_capability[0]}.{dev.compute_capability[1]}" if dev.compute_capability else "?"
            out.append(
                f"The trace names its GPU {dev.name!r}; from its architecture ({cc}, {dev.num_sms} SMs/CUs) it is "
                f"taken to be an {part}, whose peaks are used."
            )
    return tuple(out)


def _split(window: float, busy: float, by_cause: dict[str, float]) -> TimeSplit:
    # A cause's share is capped at 1: at timestamps near 1e15 µs (the fuzz's "times big",
    # seed 29 case 2373) the float sums of intervals overshoot their window by ~1e-9.
    return TimeSplit(
        window_us=window,
        busy_us=busy,
        idle_us=max(window - busy, 0.0),
        ledger=tuple(
            LedgerEntry(c, v, min(v / window, 1.0) if window > 0 else 0.0)
            for c in CAUSES
            for v in (float(by_cause.get(c, 0.0)),)
        ),
    )


def _dev_split(dev: DeviceLedger) -> TimeSplit:
    return _split(dev.window_us, dev.busy_us, dev.by_cause)


def _window_info(ctx: AnalysisContext) -> WindowInfo:
    w = ctx.window
    return WindowInfo(
        start_us=w.start_us,
        end_us=w.end_us,
        source=w.source,
        steps=len(w.steps),
        startup_us=w.startup_us,
        reason=window_reason(w),
        excluded_steps=tuple(s.index for s in w.excluded_steps),
        startup=tuple(StartupItem(p.what, p.time_us, p.count, cut_name(p.detail)) for p in w.startup),
    )


def _gpu_time_summary(ctx: AnalysisContext) -> GpuTimeSummary:
    gt = ctx.ledger
    dev = gt.primary
    if dev is None:
        empty = _split(0.0, 0.0, {})
        return GpuTimeSummary(None, False, ctx.window.start_us, ctx.window.end_us, empty, ())
    steps = tuple(
        StepRow(step=s.step, start_us=s.start, split=_split(s.span_us, s.busy_us, s.by_cause)) for s in gt.steps
    )
    others = tuple((d.device, _dev_split(d)) for d in gt.devices[1:])
    return GpuTimeSummary(
        device=dev.device,
        windowed_by_steps=gt.windowed_by_steps,
        window_start_us=dev.window_start,
        window_end_us=dev.window_end,
        total=_dev_split(dev),
        steps=steps,
        other_devices=others,
        comm_us=dev.comm_us,
        comm_overlapped_us=dev.comm_overlapped_us,
        launch_regions=len(dev.regions),
    )


def _timeline(ctx: AnalysisContext) -> Timeline | None:
    tl = ctx.ledger.timeline
    dev = ctx.ledger.primary
    if tl is None or dev is None:
        return None
    host = ctx.model.host
    rows = one_per_call(ctx.model, ctx.blocking_calls)
    # A tick marks where a sync returns, so the return must lie in the drawn span (one
    # that begins in the window may return after it: roofline_cases' last one, 1.5x past).
    ends = host["end"].to_numpy()[rows]
    marks = ends[(ends >= tl.start) & (ends <= tl.end)]
    bins = len(next(iter(tl.by_cause.values()), ()))
    counts = np.histogram(marks, bins=bins, range=(tl.start, tl.end))[0] if bins and tl.end > tl.start else np.zeros(0)
    if len(marks) > MAX_SYNC_MARKS:
        marks = np.sort(marks)[np.linspace(0, len(marks) - 1, MAX_SYNC_MARKS).astype(int)]
    steps = tuple((int(s.step), float(s.start), float(s.end)) for s in ctx.ledger.steps)
    return Timeline(
        start_us=tl.start,
        end_us=tl.end,
        by_cause={c: tuple(np.round(tl.by_cause[c], 4).tolist()) for c in CAUSES},
        syncs=tuple(float(m) for m in np.sort(marks)),
        steps=steps,
        sync_counts=tuple(int(c) for c in counts),
        streams=tuple(
            StreamBusy(
                label=f"stream {s}" if s is not None else "other streams",
                stream=s,
                busy_us=tuple(np.round(b, 3).tolist()),
            )
            for s, b in stream_busy_bins(ctx.model, dev)
        ),
    )


def _clocks(ctx: AnalysisContext) -> ClockTimeline | None:
    dev = ctx.ledger.primary
    if dev is None or ctx.model.counters.empty:
        return None
    tracks = ctx.clock_tracks
    sm = tracks.get("SM clock (MHz)")
    if sm is None or not len(sm.ts):
        return None
    edges = np.linspace(dev.window_start, dev.window_end, TIMELINE_BINS + 1)
    centres = (edges[:-1] + edges[1:]) / 2

    def series(name: str) -> tuple[float, ...]:
        tr = tracks.get(name)
        if tr is None or not len(tr.ts):
            return ()
        return tuple(np.round(tr.at(centres), 1).tolist())

    meta = nvml_gpu_meta(ctx.model, dev.device)
    power = series("power (W)")
    limit = meta.get("power_limit_w") or (max(power) if power else 0.0)
    return ClockTimeline(
        start_us=dev.window_start,
        end_us=dev.window_end,
        sm_mhz=series("SM clock (MHz)"),
        power_w=power,
        temp_c=series("temperature (C)"),
        max_sm_mhz=float(meta.get("max_sm_mhz") or np.nanmax(sm.values)),
        power_limit_w=float(limit),
    )


def _memory(ctx: AnalysisContext) -> MemoryTimeline | None:
    m = ctx.memory_profile
    if m is None:
        return None
    return MemoryTimeline(
        start_us=m.start_us, end_us=m.end_us, ts=m.series_ts, allocated=m.series_allocated,
        reserved=m.series_reserved, relative=m.relative, peak_allocated=m.peak_allocated,
        peak_reserved=m.peak_reserved, allocated_per_step=m.allocated_per_step, freed_per_step=m.freed_per_step,
        fragmentation_at_peak=m.fragmentation_at_peak, top_ops=tuple((cut_name(op), b) for op, b, _, _ in m.top_ops),
    )  # fmt: skip


MAX_ROOFLINE_POINTS = 60
#: Kernel names listed with their counters, and model checks shown.
MAX_COUNTER_ROWS = 40


def _known(value: float | None) -> float | None:
    """A count as the contract carries it: None when not counted (NaN or None here)."""
    return float(value) if value is not None and math.isfinite(value) else None


def _ratio(a: float | None, b: float | None) -> float | None:
    a, b = _known(a), _known(b)
    return a / b if a is not None and b is not None and b > 0 else None


def _counters(ctx: AnalysisContext) -> CountersSummary | None:
    kc = ctx.kernel_counters
    if kc is None:
        return None
    model = ctx.model
    if kc.timeline:
        roof = ctx.roofline
        rows, checks = _measured_rows(ctx, kc, roof), roof.checks
        share = roof.measured_us / roof.total_us if roof.total_us > 0 else 0.0
    else:
        rows, checks, share = _unplaced_rows(model, kc), (), 0.0
    return CountersSummary(
        source=kc.source,
        tool=kc.tool,
        timeline=kc.timeline,
        counted_steps=kc.steps,
        records=len(kc.launches),
        paired=kc.paired,
        measured_share=share,
        cache_control=kc.cache_control,
        kernels=rows[:MAX_COUNTER_ROWS],
        checks=tuple(_check_row(c) for c in checks[:MAX_COUNTER_ROWS]),
        notes=kc.notes,
    )


def _check_row(c: ModelCheck) -> ModelCheckRow:
    return ModelCheckRow(
        name=cut_name(c.name),
        op=c.op,
        launches=c.launches,
        model_flops=c.model_flops,
        counted_flops=_known(c.measured_flops),
        model_bytes=c.model_bytes,
        counted_dram_bytes=_known(c.measured_bytes),
        model_to_counted_flops=_ratio(c.model_flops, c.measured_flops),
        model_to_counted_bytes=_ratio(c.model_bytes, c.measured_bytes),
    )


def _op_name(model: TraceModel, op_row: int) -> str:
    return model.arrays.name(op_row) if op_row >= 0 else ""


def _per_launch_precision(launches: list[LaunchCounters]) -> dict[str, float]:
    out: dict[str, float] = defaultdict(float)
    for lc in launches:
        for prec, v in lc.flops_by_precision.items():
            if v > 0:
                out[prec] += v / len(launches)
    return dict(out)


def _mean(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


def _measured_rows(ctx: AnalysisContext, kc: KernelCounters, roof: Roofline) -> tuple[MeasuredKernel, ...]:
    """Kernel names with counters on the timeline: totals in the window, rates and bound."""
    model = ctx.model
    gpu_names = model.gpu["name"]
    by_name: dict[str, list[int]] = defaultdict(list)
    for i, row in enumerate(kc.record_kernel.tolist()):
        if row >= 0:
            by_name[str(gpu_names.loc[row])].append(i)
    out = []
    for r in roof.kernels:
        if r.measured_launches <= 0:
            continue
        recs = [kc.launches[i] for i in by_name.get(r.name, [])]
        ops = [int(kc.record_op[i]) for i in by_name.get(r.name, [])]
        flops_ok = all(lc.flops is not None for lc in recs)
        bytes_ok = all(lc.dram_bytes is not None for lc in recs)
        instr_ok = all(lc.thread_instructions is not None for lc in recs)
        out.append(
            MeasuredKernel(
                name=cut_name(r.name),
                op=_op_name(model, ops[0]) if ops else "",
                launches=r.measured_launches,
                measured=len(recs),
                counted_flops=r.flops if flops_ok else None,
                flops_by_precision=_per_launch_precision(recs),
                counted_dram_bytes=r.bytes if bytes_ok else None,
                counted_instructions=r.instructions if instr_ok else None,
                counted_intensity=_known(r.intensity) if flops_ok and bytes_ok and r.bytes > 0 else None,
                timeline_us=r.time_us,
                counted_flops_per_s=r.flops_per_s if flops_ok else None,
                counted_bytes_per_s=r.bytes_per_s if bytes_ok else None,
                of_compute_roof=_known(r.compute_share),
                of_dram_roof=_known(r.memory_share),
                bound=r.bound,
                roof=r.roof_name,
                replay_us=_mean([lc.replay_us for lc in recs]),
            )
        )
    return tuple(out)


def _unplaced_rows(model: TraceModel, kc: KernelCounters) -> tuple[MeasuredKernel, ...]:
    """Counters without a timeline (CUPTI profiler mode): per kernel name and launching op,
    totals over its launches; no times, so no rates or bound."""
    groups: dict[tuple[str, str], list[LaunchCounters]] = defaultdict(list)
    for i, lc in enumerate(kc.launches):
        groups[(lc.name, _op_name(model, int(kc.record_op[i])))].append(lc)

    def total(values: list[float | None]) -> float | None:
        return float(sum(v for v in values if v is not None)) if all(v is not None for v in values) else None

    out = []
    for (name, op), recs in groups.items():
        flops = total([lc.flops for lc in recs])
        nbytes = total([lc.dram_bytes for lc in recs])
        out.append(
            MeasuredKernel(
                name=cut_name(name),
                op=op,
                launches=len(recs),
                measured=len(recs),
                counted_flops=flops,
                flops_by_precision=_per_launch_precision(recs),
                counted_dram_bytes=nbytes,
                counted_instructions=total([lc.thread_instructions for lc in recs]),
                counted_intensity=_ratio(flops, nbytes),
                timeline_us=None,
                counted_flops_per_s=None,
                counted_bytes_per_s=None,
                of_compute_roof=None,
                of_dram_roof=None,
                bound="unknown",
                replay_us=_mean([lc.replay_us for lc in recs]),
            )
        )
    out.sort(key=lambda m: -(m.counted_flops or 0.0))
    return tuple(out)


def _roofline(ctx: AnalysisContext) -> RooflineSummary | None:
    roof = ctx.roofline
    if roof.peaks is None:
        return None
    p = roof.peaks
    points = tuple(
        RooflinePoint(
            name=cut_name(k.name), time_us=k.time_us, intensity=k.intensity, flops_per_s=k.flops_per_s,
            bytes_per_s=k.bytes_per_s, roof_share=k.roof_share, bound=k.bound, family=k.family, dtype=k.dtype,
            roof=k.roof_name, roof_value=k.roof_value,
        )
        for k in roof.kernels
        if k.bound in ("memory", "compute", "latency") and k.flops > 0
    )[:MAX_ROOFLINE_POINTS]  # fmt: skip
    # The roofs the kernels were judged against (datasheet), one line per unit that was used.
    units_order = ("fp32", "tf32x3", "tf32", "bf16", "fp16", "fp8", "int8")
    units = {k.unit for k in roof.kernels if k.unit} | {"fp32"}
    used: dict[str, float] = {u: p.unit_peak(u) for u in units_order if u in units and p.unit_peak(u) > 0}
    return RooflineSummary(
        device=p.name,
        source=p.source + (" (measured here: " + ", ".join(sorted(p.measured)) + ")" if p.measured else ""),
        peak_flops=used, bandwidth=p.bw, datasheet_bandwidth=p.bandwidth, coverage=roof.coverage,
        measured=dict(p.measured),
        communication_us=roof.communication_us, model_errors=roof.model_errors, points=points,
        classified=roof.classified, estimated_share=roof.estimated_us / roof.total_us if roof.total_us else 0.0,
        uncovered=tuple(
            UncoveredOp(cut_name(u.op), u.reason, u.time_us, u.time_us / roof.total_us if roof.total_us > 0 else 0.0)
            for u in roof.unmodelled
        ),
    )  # fmt: skip


def _window_kernel_names(ctx: AnalysisContext) -> list[str]:
    """The uncut names of the kernels the report lists (its kernel rows' order)."""
    act = ctx.window_activity
    if act.empty:
        return []
    act = act[act["kind"] == int(Kind.KERNEL)]
    g = act.groupby("name", observed=True)["dur"].sum().sort_values(ascending=False).head(MAX_KERNEL_ROWS)
    return [str(n) for n in g.index]


def _kernel_rows(ctx: AnalysisContext) -> tuple[KernelRow, ...]:
    act = ctx.window_activity
    if act.empty:
        return ()
    busy = ctx.ledger.primary.busy_us if ctx.ledger.primary else 1.0
    g = act.groupby("name", observed=True).agg(count=("dur", "size"), total=("dur", "sum"), kind=("kind", "first"))
    g = g.sort_values("total", ascending=False).head(MAX_KERNEL_ROWS)
    roofs = {k.name: k for k in ctx.roofline.kernels}
    bounds = {name: k.bound for name, k in roofs.items()}
    own_busy = _OwnBusy(act, ctx)
    return tuple(
        KernelRow(
            name=cut_name(str(name)),
            count=int(row["count"]),
            total_us=float(row["total"]),
            mean_us=float(row["total"]) / max(int(row["count"]), 1),
            share=own_busy(str(name)) / busy if busy else 0.0,
            kind=_KIND_NAMES.get(int(row["kind"]), "other"),
            bound=bounds.get(str(name), "unknown") if int(row["kind"]) == int(Kind.KERNEL) else "memory",
            roof=r.roof_name if r else "",
            roof_value=r.roof_value if r else 0.0,
            roof_share=r.roof_share if r and r.bound != "unknown" else 0.0,
            measured_ceiling=r.measured_ceiling if r else 0.0,
            latency_us=r.latency_us if r and r.bound in ("memory", "compute") else 0.0,
        )
        for name, row in g.iterrows()
        for r in (roofs.get(str(name)),)
    )


class _OwnBusy:
    """The time a kernel name keeps the GPU busy inside the window: the union of its
    events, clipped to the window, so events that overlap (two streams, a repeated event)
    or run past the window count once and its share of busy stays <= 1. The activity's
    columns are read once, and a name's events picked by its code (not a DataFrame
    filtered per name)."""

    def __init__(self, act: pd.DataFrame, ctx: AnalysisContext) -> None:
        dev = ctx.ledger.primary
        self._lo, self._hi = (dev.window_start, dev.window_end) if dev is not None else (-np.inf, np.inf)
        self._codes = act["name"].cat.codes.to_numpy()
        self._code_of = {str(c): i for i, c in enumerate(act["name"].cat.categories)}
        self._ts = act["ts"].to_numpy()
        self._end = act["end"].to_numpy()

    def __call__(self, name: str) -> float:
        mine = self._codes == self._code_of.get(name, -2)
        lo, hi = self._lo, self._hi
        iv = merge_intervals(np.clip(self._ts[mine], lo, hi), np.clip(self._end[mine], lo, hi))
        return float((iv[:, 1] - iv[:, 0]).sum()) if len(iv) else 0.0


def replace_name(row: MatmulRow) -> MatmulRow:
    from dataclasses import replace

    return replace(explain.matmuls.worded(row), kernel=cut_name(row.kernel))


class _SourceCache:
    def __init__(self, model: TraceModel) -> None:
        self.model = model
        self.cache: dict[int, PySource | None] = {}

    def __call__(self, row: int) -> PySource | None:
        if row not in self.cache:
            self.cache[row] = user_source(self.model, row)
        return self.cache[row]


def _op_rows(ctx: AnalysisContext) -> tuple[OpRow, ...]:
    model = ctx.model
    act = ctx.window_activity
    host = model.host
    launch = act["launch"].to_numpy()
    ok = launch >= 0
    if not ok.any():
        return ()
    root = act["op_root"].to_numpy()[ok]
    # Ops and kernels by their name codes, not their strings: both name columns' categories
    # are sorted, so the groups come out in the same order as by name, with the same sums
    # (pandas factorizing 45k strings per groupby was most of this table's time).
    frame = pd.DataFrame(
        {"root": root, "dur": act["dur"].to_numpy()[ok], "kernel": act["name"].cat.codes.to_numpy()[ok]}
    )
    frame = frame[frame["root"] >= 0]
    if frame.empty:
        return ()
    frame["op"] = model.arrays.name_codes[frame["root"].to_numpy()]
    per_op = frame.groupby("op").agg(gpu=("dur", "sum"), kernels=("dur", "size"), calls=("root", "nunique"))
    by_kernel = frame.groupby(["op", "kernel"])["dur"].sum().reset_index().sort_values("dur", ascending=False)
    top_kernel = by_kernel.drop_duplicates("op").set_index("op")["kernel"]
    first_row = frame.groupby("op")["root"].first()
    dur = host["dur"].to_numpy()
    host_by_op = frame.drop_duplicates("root").groupby("op")["root"].apply(lambda r: float(dur[r.to_numpy()].sum()))
    sources = _SourceCache(model)
    per_op = per_op.sort_values("gpu", ascending=False).head(MAX_OP_ROWS)
    op_names = model.arrays.name_table
    kernel_names = act["name"].cat.categories
    columns = (per_op.index.tolist(), per_op["gpu"].tolist(), per_op["kernels"].tolist(), per_op["calls"].tolist())
    return tuple(
        OpRow(
            name=op_names[op],
            count=int(calls),
            gpu_us=float(gpu),
            host_us=float(host_by_op.get(op, 0.0)),
            kernels=int(kernels),
            top_kernel=cut_name(str(kernel_names[int(top_kernel[op])])) if op in top_kernel.index else "",
            source=sources(int(first_row.loc[op])),
        )
        for op, gpu, kernels, calls in zip(*columns, strict=True)
    )


def _source_rows(ctx: AnalysisContext, findings: list) -> tuple[SourceRow, ...]:  # type: ignore[type-arg]
    model = ctx.model
    act = ctx.window_activity
    launch = act["launch"].to_numpy()
    ok = launch >= 0
    gpu_by: dict[PySource, list[float]] = defaultdict(lambda: [0.0, 0.0])
    if ok.any():
        root = act["range_root"].to_numpy()[ok]
        anchor = np.where(root >= 0, root, launch[ok])
        durs = act["dur"].to_numpy()[ok]
        frame = pd.DataFrame({"anchor": anchor, "dur": durs}).groupby("anchor")["dur"].agg(["sum", "size"])
        # Plain lists: a numpy row and its scalars per anchor cost more than the lookups.
        # Each source object's entry is looked up (hashed) once, not once per anchor.
        entries: dict[int, list[float]] = {}
        anchors = frame.index.to_numpy()
        for src, total, n in zip(
            user_sources(model, anchors), frame["sum"].tolist(), frame["size"].tolist(), strict=True
        ):
            if src is not None:
                entry = entries.get(id(src))
                if entry is None:
                    entry = entries[id(src)] = gpu_by[src]
                entry[0] += float(total)
                entry[1] += float(n)
    cost_by: dict[PySource, float] = defaultdict(float)
    for f in findings:
        for site in f.sites:
            if site.source is not None:
                cost_by[site.source] += site.time_us
    keys = set(gpu_by) | set(cost_by)
    rows = [
        SourceRow(
            source=k,
            gpu_us=gpu_by[k][0] if k in gpu_by else 0.0,
            kernels=int(gpu_by[k][1]) if k in gpu_by else 0,
            cost_us=cost_by.get(k, 0.0),
        )
        for k in keys
    ]
    rows.sort(key=lambda r: (r.cost_us, r.gpu_us), reverse=True)
    return tuple(rows[:MAX_SOURCE_ROWS])
