"""Start-up: everything from the trace's first event to the window's start, split by what
the host was doing (CUDA context creation, lazy loading, allocation, compile, autotune,
data creation, model building, other); where kinds overlap the more specific one takes
the time, so the parts add up to the start-up. And the window itself, made once its
bounds are known (`_make`): aligned to when the GPU begins its first step.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracelens.derive.window.spans import StartupPart, StepSpan, Window, WindowChoice, _merge
from tracelens.domain import ALLOC_APIS, PROFILER_STEP_RE, STARTUP_COMPILE_MARKERS
from tracelens.model.schema import Kind
from tracelens.model.trace import TraceModel
from tracelens.report.enums import STARTUP_KINDS as _STARTUP_KINDS
from tracelens.report.enums import WindowSource

#: An op call this many times slower than the median of its later calls (and longer than
#: FIRST_CALL_MIN_US) is first-call work: cuDNN benchmark mode, cuBLASLt heuristics,
#: lazy initialisation inside the op.
FIRST_CALL_RATIO = 10.0


FIRST_CALL_MIN_US = 1_000.0


#: A cudaFree this long is `cudaFree(0)` creating the CUDA context, not a free.
CUDA_INIT_FREE_MIN_US = 10_000.0


#: A window that starts this much later than its first step's host start, because the
#: GPU was still running work queued before it, says so in its reason (`Window.queued_us`).
QUEUED_NOTE_MIN_US = 100.0


#: Names of the startup detail.
DETAIL_TOP = 3


STARTUP_KINDS = _STARTUP_KINDS  # the contract's kinds (tracelens.report.enums)


#: Where kinds overlap, the earlier one in this list takes the time (the more specific:
#: a cudaMalloc inside a compiled region is allocation, a conv's autotune inside
#: torch.compile is autotune; weights created in a module's __init__ are model building).
_PRIORITY = (
    "cuda_init",
    "lazy_loading",
    "allocation",
    "autotune",
    "compile",
    "model_building",
    "data_creation",
    "other",
)


_CUDA_INIT_CALLS = frozenset(
    {
        "cudaGetDeviceCount",
        "cuInit",
        "cuDevicePrimaryCtxRetain",
        "cuDevicePrimaryCtxReset",
        "cuCtxCreate",
        "cudaSetDevice",
        "cudaDeviceGetStreamPriorityRange",  # torch's lazy_init: the first call creates the context
        "hipInit",
        "hipGetDeviceCount",
        "hipSetDevice",
        "hipDeviceGetStreamPriorityRange",
    }
)


_LAZY_PREFIXES = ("cuModuleLoad", "cuModuleGetFunction", "cuLibrary", "cudaGetFuncBySymbol", "hipModuleLoad")


_LAZY_OVERHEAD = ("Lazy Function Loading",)


_AUTOTUNE_MARKERS = ("cudnnFind", "cudnnGet", "autotune", "Autotune", "benchmark_", "select_algorithm")


_DATA_OPS = frozenset(
    {
        "aten::randn",
        "aten::rand",
        "aten::randint",
        "aten::randperm",
        "aten::normal_",
        "aten::uniform_",
        "aten::empty",
        "aten::empty_strided",
        "aten::zeros",
        "aten::ones",
        "aten::full",
        "aten::arange",
        "aten::tensor",
        "aten::copy_",
        "aten::to",
        "aten::_to_copy",
        "aten::lift_fresh",
        "aten::from_file",
    }
)


_MODEL_FRAME_RE = re.compile(
    r"torch/nn/modules/.*: __init__|from_config|from_pretrained|_init_weights|init_weights|post_init"
    r"|torch/nn/init\.py|load_state_dict|: _apply$|: to$"
)


#: Op names whose slow first call is algorithm search (cuDNN benchmark mode, cuBLASLt).
_AUTOTUNE_FIRST_CALL = ("conv", "cudnn", "miopen", "mm", "linear", "matmul", "gemm", "bmm")


_STEP_NAME = PROFILER_STEP_RE


def _make(
    model: TraceModel,
    t0: float,
    start: float,
    end: float,
    source: WindowSource,
    steps: tuple[StepSpan, ...],
    excluded: tuple[StepSpan, ...],
    why: WindowChoice,
) -> Window:
    queued_us = 0.0
    if source in ("steps", "detected") and steps:
        queued_end = _after_queued_work(model, start, end)
        if queued_end >= end:
            # The work queued before the steps runs past their end (a lone step whose own
            # launches are not linked: fuzz seed 2912 case 1249): starting after it would
            # leave an empty window, "0.0 µs analysed". The steps are analysed as marked.
            queued_end = start
        # The GPU trails the host: when the first step begins on the host, the GPU is
        # still running work queued before it (warm-up steps). That work is not the
        # window's; the window starts when it is done (and the reason says so).
        if queued_end - start >= QUEUED_NOTE_MIN_US:
            queued_us = queued_end - start
        start = max(start, queued_end)
        steps = _gpu_aligned(model, steps, start, end)
    startup_us = max(start - t0, 0.0)
    parts = _startup_parts(model, t0, start, end) if startup_us > 0 else ()
    return Window(start, end, source, steps, excluded, startup_us, parts, why, queued_us)


def _gpu_aligned(model: TraceModel, steps: tuple[StepSpan, ...], start: float, end: float) -> tuple[StepSpan, ...]:
    """Steps as the GPU lives them: a step begins when the host has begun it and the GPU
    has finished the work launched before it (or has started the step's own work, if that
    comes first on another stream). In a loop whose GPU trails the host the host spans say
    little about the steps; in a host-bound loop nothing moves. The steps stay contiguous
    and inside [start, end]."""
    act = model.gpu_activity()
    if act.empty or not len(model.host) or len(steps) < 1:
        return steps
    launch = act["launch"].to_numpy()
    ok = launch >= 0
    if not ok.any():  # no launch records: nothing to align the steps with
        return steps
    launched_at = model.host["ts"].to_numpy()[launch[ok]]
    a_ts, a_end = act["ts"].to_numpy()[ok], act["end"].to_numpy()[ok]
    order = np.argsort(launched_at, kind="stable")
    launched_at, a_ts, a_end = launched_at[order], a_ts[order], a_end[order]
    prefix_end = np.maximum.accumulate(a_end) if len(a_end) else a_end
    host_start = np.array([s.start_us for s in steps])
    # The GPU's end of everything launched before each step began on the host.
    k = np.searchsorted(launched_at, host_start, side="left")
    spill = np.where(k > 0, prefix_end[np.clip(k - 1, 0, None)], -np.inf)
    # The first activity each step launched (on any stream).
    which = np.searchsorted(host_start, launched_at, side="right") - 1
    first = np.full(len(steps), np.inf)
    sel = which >= 0
    np.minimum.at(first, which[sel], a_ts[sel])
    begin = np.maximum(host_start, np.minimum(spill, first))
    begin[0] = max(begin[0], start)
    begin = np.maximum.accumulate(np.minimum(begin, end))
    ends = np.concatenate([begin[1:], [max(steps[-1].end_us, begin[-1])]])
    ends[-1] = min(max(ends[-1], begin[-1]), end)
    return tuple(StepSpan(s.index, float(b), float(e), s.warmup) for s, b, e in zip(steps, begin, ends, strict=True))


def _after_queued_work(model: TraceModel, start: float, end: float) -> float:
    """When the GPU is done with the work launched before `start` (start itself when none
    runs past it): the earlier of that and the first activity launched inside the window."""
    act = model.gpu_activity()
    if act.empty or not len(model.host):
        return start
    launch = act["launch"].to_numpy()
    host_ts = model.host["ts"].to_numpy()
    launched_at = np.where(launch >= 0, host_ts[np.clip(launch, 0, None)], np.nan)
    a_ts = act["ts"].to_numpy()
    a_end = act["end"].to_numpy()
    inside = (launched_at >= start) & (launched_at < end)
    first_inside = float(a_ts[inside].min()) if inside.any() else float("inf")
    # Work launched before the window, or before the profiler started (no launch record)
    # and running ahead of the window's first launched work. With no launch linked in
    # the window (kernels without a usable correlation id) an unlinked kernel is judged by
    # its own start: else every kernel was "queued before" and the window came out empty.
    unlinked_before = a_ts < (first_inside if inside.any() else start)
    before = (launched_at < start) | ((launch < 0) & unlinked_before)
    spill = before & (a_end > start)
    if not spill.any():
        return start
    return max(start, min(float(a_end[spill].max()), first_inside))


@dataclass(frozen=True)
class _Classified:
    intervals: dict[str, np.ndarray]  # kind -> (n, 2) clipped, merged intervals
    counts: dict[str, int]
    names: dict[str, dict[str, float]]  # kind -> name -> clipped µs


def _startup_parts(model: TraceModel, t0: float, start: float, end: float) -> tuple[StartupPart, ...]:
    """Host time from t0 to `start`, one part per kind, adding up to start - t0."""
    cls = _classify_host(model, t0, start, start, end)
    owned = _resolve_priority(cls.intervals, t0, start)
    total = start - t0
    parts = []
    for what in STARTUP_KINDS:
        t = owned.get(what, 0.0)
        if what == "other":
            t = max(total - sum(v for k, v in owned.items() if k != "other"), 0.0)
        count = cls.counts.get(what, 0)
        if t <= 0 and count == 0:
            continue
        top = sorted(cls.names.get(what, {}).items(), key=lambda kv: -kv[1])[:DETAIL_TOP]
        detail = ", ".join(name for name, _ in top)
        if what == "other" and not detail:
            detail = "host work and idle time of no known start-up kind"
        parts.append(StartupPart(what, t, count, detail))
    return tuple(parts)


def _classify_host(model: TraceModel, lo: float, hi: float, ref_lo: float, ref_hi: float) -> _Classified:
    """Host events overlapping [lo, hi) by start-up kind; `first_call` marks op calls
    FIRST_CALL_RATIO times slower than the median of their calls in [ref_lo, ref_hi)."""
    host = model.host
    empty = _Classified({}, {}, {})
    if host.empty or hi <= lo:
        return empty
    ts = host["ts"].to_numpy(dtype=np.float64)
    end = host["end"].to_numpy(dtype=np.float64)
    rows = np.flatnonzero((end > lo) & (ts < hi))
    if not len(rows):
        return empty
    names = host["name"]
    cats = [str(c) for c in names.cat.categories]
    kind_col = host["kind"].to_numpy()
    codes = names.cat.codes.to_numpy()
    r_codes = codes[rows]
    r_kind = kind_col[rows]
    labels = _labels(cats, r_codes, r_kind)
    r_ts, r_end = ts[rows], end[rows]
    # cudaFree(0) creating the context vs a free
    is_free = labels == "allocation"
    if is_free.any():
        free_code = {i for i, c in enumerate(cats) if c in ("cudaFree", "hipFree")}
        long_free = is_free & np.isin(r_codes, list(free_code)) & ((r_end - r_ts) >= CUDA_INIT_FREE_MIN_US)
        labels[long_free] = "cuda_init"
    # first calls: op calls much slower than their later calls
    ref = np.flatnonzero((ts >= ref_lo) & (end <= ref_hi) & (kind_col == Kind.CPU_OP))
    if len(ref):
        med = pd.Series(end[ref] - ts[ref]).groupby(codes[ref]).median()
        ops = np.flatnonzero((r_kind == Kind.CPU_OP) & ((r_end - r_ts) >= FIRST_CALL_MIN_US))
        if len(ops):
            m = med.reindex(r_codes[ops]).to_numpy()
            slow = ops[np.isfinite(m) & ((r_end[ops] - r_ts[ops]) >= FIRST_CALL_RATIO * np.nan_to_num(m))]
            for i in slow:
                name = cats[int(r_codes[i])].lower()
                if labels[i] == "":  # a slow first aten::to is still data creation
                    labels[i] = "autotune" if any(t in name for t in _AUTOTUNE_FIRST_CALL) else "first_call"
    out_iv: dict[str, np.ndarray] = {}
    counts: dict[str, int] = {}
    per_name: dict[str, dict[str, float]] = {}
    lo_c, hi_c = np.maximum(r_ts, lo), np.minimum(r_end, hi)
    for what in {str(x) for x in labels if x}:
        sel = labels == what
        iv = np.column_stack([lo_c[sel], hi_c[sel]])
        out_iv[what] = _merge(iv)
        counts[what] = int(sel.sum())
        durs = pd.Series(hi_c[sel] - lo_c[sel]).groupby(r_codes[sel]).sum()
        per_name[what] = {cats[int(c)]: float(v) for c, v in zip(durs.index.to_numpy(), durs.to_numpy(), strict=True)}
    # first-call work outside the known kinds is reported as "other" in the start-up
    if "first_call" in out_iv:
        counts["other"] = counts.get("other", 0) + counts["first_call"]
        per_name.setdefault("other", {}).update({f"first call of {k}": v for k, v in per_name["first_call"].items()})
    return _Classified(out_iv, counts, per_name)


def _labels(cats: list[str], codes: np.ndarray, kinds: np.ndarray) -> np.ndarray:
    """Start-up kind of each row ("" for none), evaluated once per distinct (name, Kind)."""
    key = codes.astype(np.int64) * _KIND_SPAN + kinds.astype(np.int64)
    uniq, inverse = np.unique(key, return_inverse=True)
    per_key = np.array(
        [_kind_of(cats[int(k) // _KIND_SPAN], int(k) % _KIND_SPAN) if k >= 0 else "" for k in uniq], dtype=object
    )
    out: np.ndarray = per_key[inverse.ravel()] if len(uniq) else np.empty(0, dtype=object)
    return out


#: Kind values are below this (see schema.Kind), so name code * _KIND_SPAN + Kind is unique.
_KIND_SPAN = 64


def _kind_of(name: str, kind: int) -> str:
    """The start-up kind of one host event by its name and Kind ("" for none)."""
    if kind in (Kind.RUNTIME, Kind.DRIVER):
        if name in _CUDA_INIT_CALLS or name.startswith("cuDevicePrimaryCtx"):
            return "cuda_init"
        if name.startswith(_LAZY_PREFIXES):
            return "lazy_loading"
        if name in ALLOC_APIS:
            return "allocation"
        if any(m in name for m in _AUTOTUNE_MARKERS):
            return "autotune"
        return ""
    if kind == Kind.OVERHEAD:
        return "lazy_loading" if name.startswith(_LAZY_OVERHEAD) else ""
    if kind in (Kind.CPU_OP, Kind.USER_ANNOTATION, Kind.PYTHON):
        if kind == Kind.USER_ANNOTATION and _STEP_NAME.match(name):
            return ""
        if any(m in name for m in STARTUP_COMPILE_MARKERS):
            return "compile"
        if any(m in name for m in _AUTOTUNE_MARKERS):
            return "autotune"
        if kind == Kind.PYTHON and _MODEL_FRAME_RE.search(name):
            return "model_building"
        if kind == Kind.CPU_OP and name in _DATA_OPS:
            return "data_creation"
    return ""


_PRIORITY_INDEX = {k: i for i, k in enumerate((*_PRIORITY, "first_call"))}


def _resolve_priority(intervals: dict[str, np.ndarray], lo: float, hi: float) -> dict[str, float]:
    """Wall time each kind owns in [lo, hi) when overlaps go to the higher priority."""
    kinds = sorted(intervals, key=lambda k: _PRIORITY_INDEX.get(k, len(_PRIORITY_INDEX)))
    if not kinds:
        return {}
    edges = np.unique(np.concatenate([[lo, hi], *[iv.ravel() for iv in intervals.values()]]))
    edges = edges[(edges >= lo) & (edges <= hi)]
    if len(edges) < 2:
        return {}
    mids = (edges[:-1] + edges[1:]) / 2
    widths = np.diff(edges)
    owner = np.full(len(mids), -1)
    for i, what in enumerate(kinds):
        iv = intervals[what]
        j = np.searchsorted(iv[:, 0], mids, side="right") - 1
        inside = (j >= 0) & (mids < iv[np.clip(j, 0, None), 1])
        owner[(owner < 0) & inside] = i
    out: dict[str, float] = {}
    for i, what in enumerate(kinds):
        key = "other" if what == "first_call" else what
        out[key] = out.get(key, 0.0) + float(widths[owner == i].sum())
    return out
