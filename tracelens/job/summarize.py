"""The per-rank map: one trace through the single-trace pipeline (load, AnalysisContext,
ledger, findings), reduced to a RankSummary of a few kB. This is what runs on a Dask
worker: it takes a RankInput, returns a RankSummary or a RankFailure (never raises),
and keeps nothing of the trace once it returns.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from tracelens.analyzers.base import Category
from tracelens.assemble import findings_of
from tracelens.derive.collectives import Call, collective_kind
from tracelens.derive.context import AnalysisContext
from tracelens.derive.intervals import overlap
from tracelens.derive.ledger import CAUSES, DeviceLedger, cause_intervals
from tracelens.domain import SYNC_APIS
from tracelens.job.discover import is_url
from tracelens.job.model import Collective, RankFailure, RankInput, RankSummary
from tracelens.model.schema import Kind
from tracelens.model.trace import TraceModel, name_matches
from tracelens.ranking import rank, settle
from tracelens.report.job_report import FindingBrief, LedgerShare, StepTime

#: Findings kept per rank (the job report shows the top ones; the per-rank report has all).
MAX_FINDINGS = 5
#: A finding's advice is cut to this in the summary (the per-rank report has it whole).
MAX_ADVICE_CHARS = 600

__all__ = ["collective_kind", "summarize"]

#: Per-step event counts kept for the profiler-overhead estimate (job/overhead.py).
_COUNTED_KINDS = {"python": int(Kind.PYTHON), "ops": int(Kind.CPU_OP)}


def _step_index(spans: list[tuple[int, float, float]], ts: np.ndarray) -> np.ndarray:
    """The number of the analysed step (the window's own spans, the same ones the
    summary's step times come from) holding each time; -1 outside every one."""
    out = np.full(len(ts), -1, dtype=np.int64)
    if not spans or not len(ts):
        return out
    spans = sorted(spans, key=lambda s: s[1])
    start = np.array([s[1] for s in spans])
    end = np.array([s[2] for s in spans])
    num = np.array([s[0] for s in spans])
    k = np.searchsorted(start, ts, side="right") - 1
    ok = k >= 0
    inside = np.zeros(len(ts), dtype=bool)
    inside[ok] = ts[ok] < end[k[ok]]
    out[inside] = num[k[inside]]
    return out


def _arrivals(model: TraceModel, calls: list[Call]) -> np.ndarray:
    """When this rank reached each call with its data: its kernel's start (NCCL, RCCL), or
    for gloo the moment its worker thread could exchange. With a CUDA tensor gloo's thread
    first waits for the device copy of the input (a cudaStreamSynchronize inside the op):
    the rank arrives when that returns."""
    out = np.array([c.start for c in calls], dtype=float)
    gloo = [i for i, c in enumerate(calls) if not c.kernels and c.exchange >= 0]
    if not gloo:
        return out
    host = model.host
    sync = (host["kind"].to_numpy() == int(Kind.RUNTIME)) & name_matches(host["name"], SYNC_APIS.__contains__)
    tid, ts, end = (host[c].to_numpy()[sync] for c in ("tid", "ts", "end"))
    all_tid = host["tid"].to_numpy()
    for i in gloo:
        c = calls[i]
        inside = (tid == all_tid[c.exchange]) & (ts >= c.exchange_ts) & (end <= c.exchange_end)
        if inside.any():
            out[i] = max(c.exchange_ts, float(end[inside].max()))
    return out


def _collectives(model: TraceModel, ctx: AnalysisContext) -> list[Collective]:
    dev = ctx.ledger.primary
    calls = [c for c in ctx.collectives.calls if c.device in (-1, ctx.device if ctx.device is not None else -1)]
    if not calls:
        return []
    arrive = _arrivals(model, calls)
    end = np.array([c.end for c in calls])
    spans = [(s.index, s.start_us, s.end_us) for s in ctx.window.steps if not s.warmup]
    if not spans:  # no steps: the window is one span
        spans = [(0, ctx.window.start_us, ctx.window.end_us)]
    steps = _step_index(spans, arrive)
    if dev is not None:
        exposed = overlap(cause_intervals(dev, "communication"), arrive, end)
    else:
        exposed = _host_exposed(ctx, calls, arrive, end)
    before, before_host, hot = _before(model, dev, calls, arrive, end, ctx)
    order: dict[tuple[str, str], int] = defaultdict(int)
    out = []
    for i, c in enumerate(calls):
        key = (c.group, c.kind)
        out.append(
            Collective(
                kind=c.kind, group=c.group, seq=c.seq, order=order[key], step=int(steps[i]),
                start_us=float(arrive[i]), end_us=float(end[i]), bytes=int(c.nbytes), source=c.source,
                exposed_us=float(exposed[i]), before=before[i], before_host=before_host[i],
                group_size=c.group_size or 0, size_source=c.size_source, backend=c.backend, hot_frame=hot[i],
            )
        )  # fmt: skip
        order[key] += 1
    return out


def _host_exposed(ctx: AnalysisContext, calls: list[Call], arrive: np.ndarray, end: np.ndarray) -> np.ndarray:
    """A CPU-only rank's exposed communication: the part of each call during which its
    launching thread ran no torch op (it waited for the exchange instead of working)."""
    out = np.zeros(len(calls))
    for i, c in enumerate(calls):
        if c.tid < 0:
            out[i] = max(end[i] - arrive[i], 0.0)
            continue
        busy = ctx.thread_time(c.tid).ops
        span = max(end[i] - arrive[i], 0.0)
        out[i] = span - float(overlap(busy, arrive[i : i + 1], end[i : i + 1])[0]) if len(busy) else span
    return out


def _before(
    model: TraceModel,
    dev: DeviceLedger | None,
    calls: list[Call],
    arrive: np.ndarray,
    end: np.ndarray,
    ctx: AnalysisContext,
) -> tuple[list[dict[str, float]], list[dict[str, float]], list[str]]:
    """What this rank did between the end of its previous collective (or the window's
    start) and each arrival: the ledger's causes on its GPU, and its launching thread's
    host time (ops, data loading, Python outside ops), with the Python frame holding most
    of the latter when the trace has stacks."""
    lo_w = dev.window_start if dev is not None else ctx.window.start_us
    hi_w = dev.window_end if dev is not None else ctx.window.end_us
    prev_end = np.concatenate([[lo_w], np.maximum.accumulate(end)[:-1]])
    lo = np.clip(np.maximum(prev_end, lo_w), None, hi_w)
    hi = np.maximum(np.clip(arrive, lo_w, hi_w), lo)
    before: list[dict[str, float]] = [{} for _ in calls]
    if dev is not None:
        per = {c: overlap(cause_intervals(dev, c), lo, hi) for c in CAUSES}
        before = [{c: round(float(per[c][i]), 3) for c in CAUSES if per[c][i] > 0} for i in range(len(calls))]
    before_host: list[dict[str, float]] = [{} for _ in calls]
    hot = ["" for _ in calls]
    # The loop's own thread says why the rank is late, whichever thread issued the call.
    main = ctx.main_thread
    by_tid: dict[int, list[int]] = defaultdict(list)
    for i, c in enumerate(calls):
        tid = main if main is not None else c.tid
        if tid >= 0:
            by_tid[tid].append(i)
    for tid, idx in by_tid.items():
        tt = ctx.thread_time(tid)
        ix = np.array(idx)
        split = tt.split(lo[ix], hi[ix])
        for j, i in enumerate(idx):
            before_host[i] = {k: round(float(v[j]), 3) for k, v in split.items() if v[j] > 0}
            if tt.frames and split["host_python"][j] > 0:
                hot[i] = tt.hot_frame(lo[i : i + 1], hi[i : i + 1])[0]
    return before, before_host, hot


def _event_counts(model: TraceModel, ctx: AnalysisContext) -> dict[str, float]:
    """Python frames and ops recorded per analysed step (what the profiler itself costs
    this rank grows with them: job/overhead.py)."""
    lo, hi = ctx.window.start_us, ctx.window.end_us
    host = model.host
    ts = host["ts"].to_numpy()
    inside = (ts >= lo) & (ts < hi)
    kind = host["kind"].to_numpy()
    n = max(ctx.n_steps, 1)
    return {k: round(float(np.count_nonzero(inside & (kind == v))) / n, 1) for k, v in _COUNTED_KINDS.items()}


def _steps(ctx: AnalysisContext, model: TraceModel) -> list[StepTime]:
    led = ctx.ledger
    if led.primary is not None and led.steps:
        return [StepTime(step=s.step, start_us=s.start, span_us=s.span_us) for s in led.steps]
    # No GPU in the trace (a CPU-only run): the window's steps on the host.
    return [StepTime(step=s.index, start_us=s.start_us, span_us=s.dur_us) for s in ctx.window.steps]


def _write_reports(
    model: TraceModel, ctx: AnalysisContext, out_dir: str, stem: str, trace: str, redact: bool
) -> list[str]:
    from tracelens.assemble import build_report
    from tracelens.output import write_report
    from tracelens.redact import Redactor
    from tracelens.render import render_html, render_json, render_markdown

    rep = build_report(model, ctx=ctx)
    base = Path(out_dir)
    # The rank's own trace metadata names its host; the raw top-level fields are not
    # read again here (the job report's --redact covers this machine, homes and paths).
    scrub = Redactor.for_trace([trace], [model.meta.metadata], (), [out_dir]).text if redact else None
    written = []
    for suffix, fn in ((".html", render_html), (".md", render_markdown), (".json", render_json)):
        text = fn(rep)  # type: ignore[operator]
        written.append(str(write_report(base / f"{stem}{suffix}", scrub(text) if scrub else text)))
    return written


def _local_copy(path: str) -> tuple[str, str | None]:
    """A local path for an fsspec URL (downloaded to a temp file), else the path."""
    if not is_url(path):
        return path, None
    import fsspec

    suffix = ".json.gz" if path.endswith(".gz") else ".json"
    fd, tmp = tempfile.mkstemp(suffix=suffix, prefix="tracelens-rank-")
    with os.fdopen(fd, "wb") as dst, fsspec.open(path, "rb") as src:
        while chunk := src.read(1 << 22):
            dst.write(chunk)
    return tmp, tmp


def summarize(item: RankInput, per_rank_dir: str | None = None, redact: bool = False) -> RankSummary | RankFailure:
    """Run the single-trace pipeline on one rank and keep its summary. Never raises: a
    rank that cannot be read comes back as a RankFailure with the one-line reason."""
    from tracelens.errors import TracelensError
    from tracelens.model import load_trace

    tmp: str | None = None
    try:
        local, tmp = _local_copy(item.path)
        t0 = time.perf_counter()
        model = load_trace(local)
        t1 = time.perf_counter()
        ctx = AnalysisContext(model)
        findings = rank(settle(ctx, findings_of(ctx)))
        summary = _summary(item, model, ctx, findings, local)
        files: list[str] = []
        if per_rank_dir is not None:
            stem = (
                f"rank{summary.rank}"
                if summary.rank is not None
                else re.sub(r"\.json(\.gz)?$", "", Path(item.path).name)
            )
            files = _write_reports(model, ctx, per_rank_dir, stem, item.path, redact)
        t2 = time.perf_counter()
        return msgspec.structs.replace(summary, load_seconds=round(t1 - t0, 3), analysis_seconds=round(t2 - t1, 3),
                                       report_files=files)  # fmt: skip
    except TracelensError as exc:
        return RankFailure(file=item.path, name_rank=item.name_rank, error=str(exc))
    except MemoryError:
        return RankFailure(file=item.path, name_rank=item.name_rank, error="out of memory (the worker's limit)")
    except Exception as exc:  # a bug on one rank's trace must not lose the other ranks
        return RankFailure(
            file=item.path, name_rank=item.name_rank, error=f"internal error: {type(exc).__name__}: {exc}"
        )
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def _run_token(model: TraceModel) -> str:
    """The torchrun run token `tracelens capture` wrote (capture/ranks.py), else ""."""
    cap = model.meta.metadata.get("tracelens")
    run = cap.get("run") if isinstance(cap, dict) else None
    token = run.get("token") if isinstance(run, dict) else None
    return str(token) if isinstance(token, str) else ""


def _summary(item: RankInput, model: TraceModel, ctx: AnalysisContext, findings: list[Any], local: str) -> RankSummary:
    meta = model.meta
    dist = meta.metadata.get("distributedInfo")
    dist = dist if isinstance(dist, dict) else {}
    if meta.rank is not None:
        rank_no, source = meta.rank, "distributedInfo"
    elif item.name_rank is not None:
        rank_no, source = item.name_rank, "file name"
    else:
        rank_no, source = None, "none"
    dev = ctx.ledger.primary
    window_us = dev.window_us if dev is not None else 0.0
    ledger = (
        [LedgerShare(cause=c, time_us=round(v, 3), share=round(v / window_us, 5) if window_us > 0 else 0.0)
         for c in CAUSES if (v := dev.by_cause.get(c, 0.0)) > 0]
        if dev is not None else []
    )  # fmt: skip
    briefs = [
        FindingBrief(category=f.category, severity=f.severity, title=f.title, time_us=round(f.time_us, 3),
                     share=round(f.share, 5), advice=f.advice[:MAX_ADVICE_CHARS])
        for f in findings if f.parent is None
    ][:MAX_FINDINGS]  # fmt: skip
    gpu = meta.primary_device
    host_name = meta.metadata.get("host_name")
    program = _program(model)
    return RankSummary(
        file=item.path,
        rank=rank_no,
        rank_source=source,
        world_size=meta.world_size,
        backend=str(dist.get("backend", "") or ""),
        host_name=str(host_name) if isinstance(host_name, str) else "",
        gpu_name=gpu.name if gpu is not None else "",
        origin_us=meta.origin_us,
        window_start_us=dev.window_start if dev is not None else ctx.window.start_us,
        window_end_us=dev.window_end if dev is not None else ctx.window.end_us,
        n_steps=ctx.n_steps,
        steps=_steps(ctx, model),
        ledger=ledger,
        findings=briefs,
        collectives=_collectives(model, ctx),
        step_source=ctx.window.source,
        events_per_step=_event_counts(model, ctx),
        with_stack=bool(len(model.host) and (model.host["kind"] == int(Kind.PYTHON)).any()),
        run_token=_run_token(model),
        throttled=any(f.category == Category.POWER_THROTTLE for f in findings),
        load_seconds=0.0,
        analysis_seconds=0.0,
        notes=list(meta.notes),
        program_kernels=program[0],
        program_ops=program[1],
    )


#: Kernels and ops kept per rank for the program check: enough to cover a training
#: step's work, few enough to keep a summary a few kB.
PROGRAM_TOP = 40


def _program(model: TraceModel) -> tuple[dict[str, float], dict[str, float]]:
    from tracelens.derive.compare import program_signature

    sig = program_signature(model)

    def top(d: dict[str, float]) -> dict[str, float]:
        total = sum(d.values())
        if total <= 0:
            return {}
        best = sorted(d.items(), key=lambda kv: -kv[1])[:PROGRAM_TOP]
        return {k[:200]: round(v / total, 5) for k, v in best}

    return top(sig.kernels), top(sig.op_shapes)
