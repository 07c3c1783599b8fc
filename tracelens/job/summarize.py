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
from tracelens.derive.context import AnalysisContext
from tracelens.derive.intervals import overlap
from tracelens.derive.ledger import CAUSES, DeviceLedger, cause_intervals
from tracelens.domain import DTYPE_BYTES, SYNC_APIS, is_collective_kernel, is_collective_wait_op
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

#: Collective kinds by name fragment (lower case, underscores removed), in match order.
_KIND_MARKERS = (
    ("allreduce", "all_reduce"),
    ("allgather", "all_gather"),
    ("reducescatter", "reduce_scatter"),
    ("alltoall", "all_to_all"),
    ("broadcast", "broadcast"),
    ("barrier", "barrier"),
    ("sendrecv", "send_recv"),
    ("send", "send_recv"),
    ("recv", "send_recv"),
    ("reduce", "reduce"),
)


def collective_kind(name: str) -> str:
    low = name.lower().replace("_", "")
    for marker, kind in _KIND_MARKERS:
        if marker in low:
            return kind
    return "other"


class _CommArgs(msgspec.Struct):
    """The record_param_comms / NCCL kernel args that identify a collective (torch 2.2+)."""

    external_id: int | None = msgspec.field(name="External id", default=None)
    correlation: int | None = None
    collective: str | None = msgspec.field(name="Collective name", default=None)
    pg_name: str | int | None = msgspec.field(name="Process Group Name", default=None)
    pg_desc: str | None = msgspec.field(name="Process Group Description", default=None)
    seq: int | str | None = msgspec.field(name="Seq", default=None)
    in_nelems: int | None = msgspec.field(name="In msg nelems", default=None)
    dtype: str | None = None


class _CommEvent(msgspec.Struct):
    name: str = ""
    args: _CommArgs | None = None


class _CommFile(msgspec.Struct):
    traceEvents: list[_CommEvent] | None = None


def _comm_args(path: str) -> tuple[dict[int, _CommArgs], dict[int, _CommArgs]]:
    """record_param_comms args by External id, and collective kernels' args by
    correlation. The loader does not keep these keys, so this reads the file once more,
    decoding only them."""
    from tracelens.model.loader import read_trace_bytes

    data, _ = read_trace_bytes(path)
    try:
        evs = msgspec.json.decode(data, type=_CommFile).traceEvents or []
    except (msgspec.MsgspecError, RecursionError):
        return {}, {}
    by_ext: dict[int, _CommArgs] = {}
    by_corr: dict[int, _CommArgs] = {}
    for e in evs:
        a = e.args
        if a is None or (a.collective is None and a.seq is None):
            continue
        if e.name == "record_param_comms" and a.external_id is not None:
            by_ext[a.external_id] = a
        elif a.correlation is not None:
            by_corr[a.correlation] = a
    return by_ext, by_corr


def _seq(a: _CommArgs | None) -> int:
    if a is None or a.seq is None:
        return -1
    try:
        return int(a.seq)
    except ValueError:
        return -1


def _arg_bytes(a: _CommArgs | None) -> int:
    if a is None or not a.in_nelems:
        return 0
    dtype = (a.dtype or "float").replace("torch.", "")
    return int(a.in_nelems) * DTYPE_BYTES.get(dtype, 4)


def _shape_bytes(model: TraceModel, row: int) -> int:
    """Bytes of a host op's first tensor input, from its recorded shape and dtype."""
    try:
        shapes = model.op_shapes(row)
    except (ValueError, TypeError):
        return 0
    dims = shapes.get("Input Dims") or []
    types = shapes.get("Input type") or []
    for i, d in enumerate(dims):
        t = str(types[i]) if i < len(types) else "float"
        if isinstance(d, list) and d and all(isinstance(x, int) for x in d):
            return int(np.prod(d)) * DTYPE_BYTES.get(t, 4)
        if isinstance(d, list) and d and isinstance(d[0], list):  # a TensorList: its dtype is per tensor
            return sum(int(np.prod(x)) for x in d if isinstance(x, list)) * 4
    return 0


def _step_of(model: TraceModel, ts: np.ndarray) -> np.ndarray:
    """ProfilerStep number whose host span holds each time, -1 outside every step."""
    steps = model.steps
    out = np.full(len(ts), -1, dtype=np.int64)
    if not len(steps) or not len(ts):
        return out
    order = np.argsort(steps["cpu_ts"].to_numpy())
    start = steps["cpu_ts"].to_numpy()[order]
    end = np.fmax(steps["cpu_end"].to_numpy()[order], steps["gpu_end"].to_numpy()[order])
    num = steps["step"].to_numpy()[order]
    k = np.searchsorted(start, ts, side="right") - 1
    ok = k >= 0
    inside = np.zeros(len(ts), dtype=bool)
    inside[ok] = ts[ok] < end[k[ok]]
    out[inside] = num[k[inside]]
    return out


def _calls(model: TraceModel, path: str, device: int | None) -> list[dict[str, Any]]:
    """This rank's collectives, in time order: the collective kernels on its GPU (NCCL,
    RCCL: they start when the GPU reaches them and end when every rank's data arrived),
    and host collectives of gloo (its worker thread runs the whole exchange)."""
    backend = str((model.meta.metadata.get("distributedInfo") or {}).get("backend", "") or "")
    calls: list[dict[str, Any]] = []
    gpu = model.gpu
    kern = gpu[(gpu["kind"] == Kind.KERNEL) & (gpu["device"] == device)] if device is not None else gpu.iloc[0:0]
    kern = kern[name_matches(kern["name"], is_collective_kernel)] if len(kern) else kern
    host = model.host
    is_op = np.isin(host["kind"].to_numpy(), [int(Kind.CPU_OP), int(Kind.USER_ANNOTATION)])
    gloo = host[is_op & name_matches(host["name"], lambda n: n.startswith("gloo:"))]
    rpc = host[is_op & name_matches(host["name"], lambda n: n == "record_param_comms")]
    need_args = len(rpc) > 0 or len(kern) > 0
    by_ext, by_corr = _comm_args(path) if need_args and not is_url(path) else ({}, {})
    # The launching op of a kernel (same External id): its kind and message size.
    host_by_ext: dict[int, int] = {}
    if len(kern):
        ext = host["external_id"].to_numpy()
        comm_host = host.index[is_op & name_matches(host["name"], is_collective_wait_op)].to_numpy()
        for r in comm_host:
            if ext[r] >= 0:
                host_by_ext.setdefault(int(ext[r]), int(r))
    names = model.arrays
    h_ts, h_end, h_tid = host["ts"].to_numpy(), host["end"].to_numpy(), host["tid"].to_numpy()
    k_cols = {c: kern[c].to_numpy() for c in ("correlation", "external_id", "stream", "ts", "end")}
    k_names = [str(n) for n in kern["name"]]
    for i, kname in enumerate(k_names):
        corr, ext_id, stream = (int(k_cols[c][i]) for c in ("correlation", "external_id", "stream"))
        a = by_corr.get(corr) or by_ext.get(ext_id)
        hrow = host_by_ext.get(ext_id, -1)
        kind = collective_kind(a.collective) if a is not None and a.collective else collective_kind(kname)
        if kind == "send_recv" and hrow >= 0:
            kind = collective_kind(names.name(hrow))  # all_to_all runs as SendRecv kernels
        size = _arg_bytes(a) or (_shape_bytes(model, hrow) if hrow >= 0 else 0)
        # Without the args, a communicator is told apart by its stream (each process group
        # gets its own NCCL stream, created in the same order on every rank).
        group = str(a.pg_name) if a is not None and a.pg_name is not None else f"{backend or 'nccl'}:stream{stream}"
        calls.append(dict(kind=kind, group=group, seq=_seq(a), ts=float(k_cols["ts"][i]), end=float(k_cols["end"][i]),
                          bytes=size, source="kernel"))  # fmt: skip
    # gloo's thread runs the exchange as an op without shapes: its size is that of the
    # c10d op of the same kind that issued it, the latest one starting before it.
    issued: dict[str, tuple[list[float], list[int]]] = defaultdict(lambda: ([], []))
    if len(gloo):
        c10d = host[is_op & name_matches(host["name"], lambda n: n.startswith("c10d::"))]
        for r in c10d.index.to_numpy():
            t_list, b_list = issued[collective_kind(names.name(int(r)))]
            t_list.append(float(h_ts[r]))
            b_list.append(_shape_bytes(model, int(r)))
    # With a CUDA tensor, gloo's thread first waits for the device copy of the input
    # (a cudaStreamSynchronize inside the op): the rank arrives when that returns, with
    # its data, not when the op starts.
    calls_rt = host[(host["kind"] == Kind.RUNTIME) & name_matches(host["name"], SYNC_APIS.__contains__)]
    sync_tid, sync_ts, sync_end = (calls_rt[c].to_numpy() for c in ("tid", "ts", "end"))
    for r in gloo.index.to_numpy():
        nm = names.name(int(r))
        t_list, b_list = issued.get(collective_kind(nm), ([], []))
        start, stop, tid = float(h_ts[r]), float(h_end[r]), h_tid[r]
        k = int(np.searchsorted(np.array(t_list), start, side="right")) - 1
        size = b_list[k] if k >= 0 else 0
        inside = (sync_tid == tid) & (sync_ts >= start) & (sync_end <= stop)
        arrive = max(start, float(sync_end[inside].max())) if inside.any() else start
        calls.append(dict(kind=collective_kind(nm), group="gloo", seq=-1, ts=arrive, end=stop, bytes=size,
                          source="host"))  # fmt: skip
    if not calls:
        # Neither kernels nor gloo's thread: the outermost c10d ops the host blocked in.
        c10d = host[is_op & name_matches(host["name"], lambda n: n.startswith("c10d::"))]
        roots = c10d[c10d["op_root"].isin([-1]) | (c10d["op_root"].to_numpy() == c10d.index.to_numpy())]
        for r in roots.index.to_numpy():
            calls.append(dict(kind=collective_kind(names.name(int(r))), group=backend or "default", seq=-1,
                              ts=float(h_ts[r]), end=float(h_end[r]),
                              bytes=_shape_bytes(model, int(r)), source="host"))  # fmt: skip
    calls.sort(key=lambda c: c["ts"])
    return calls


def _collectives(model: TraceModel, path: str, ctx: AnalysisContext) -> list[Collective]:
    dev = ctx.ledger.primary
    calls = _calls(model, path, ctx.device)
    if not calls:
        return []
    ts = np.array([c["ts"] for c in calls])
    end = np.array([c["end"] for c in calls])
    steps = _step_of(model, ts)
    comm_iv = cause_intervals(dev, "communication") if dev is not None else np.empty((0, 2))
    exposed = overlap(comm_iv, ts, end) if dev is not None else np.maximum(end - ts, 0.0)
    before = _before(dev, ts, end, ctx)
    order: dict[tuple[str, str], int] = defaultdict(int)
    out = []
    for i, c in enumerate(calls):
        key = (c["group"], c["kind"])
        out.append(
            Collective(
                kind=c["kind"], group=c["group"], seq=int(c["seq"]), order=order[key], step=int(steps[i]),
                start_us=float(ts[i]), end_us=float(end[i]), bytes=int(c["bytes"]), source=c["source"],
                exposed_us=float(exposed[i]), before=before[i],
            )
        )  # fmt: skip
        order[key] += 1
    return out


def _before(dev: DeviceLedger | None, ts: np.ndarray, end: np.ndarray, ctx: AnalysisContext) -> list[dict[str, float]]:
    """The ledger's causes between the end of the previous collective (or the window's
    start) and each collective's start: what this rank did before it arrived."""
    if dev is None:
        return [{} for _ in ts]
    prev_end = np.concatenate([[dev.window_start], np.maximum.accumulate(end)[:-1]])
    lo = np.clip(np.maximum(prev_end, dev.window_start), None, dev.window_end)
    hi = np.clip(ts, dev.window_start, dev.window_end)
    hi = np.maximum(hi, lo)
    per = {c: overlap(cause_intervals(dev, c), lo, hi) for c in CAUSES}
    return [{c: round(float(per[c][i]), 3) for c in CAUSES if per[c][i] > 0} for i in range(len(ts))]


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
        collectives=_collectives(model, local, ctx),
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
