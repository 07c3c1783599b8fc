"""The replay's targets (issue 25): the trace rows, intervals and kernels a fix changes,
worked out from the window and the analyzers' tables, and the Plan a finding's first fix
becomes (tracelens/predict/__init__.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from tracelens.analyzers.base import Category
from tracelens.derive.context import AnalysisContext
from tracelens.derive.graph import DependencyGraph
from tracelens.derive.replay import Edit
from tracelens.derive.transforms import Variant
from tracelens.model.schema import Kind
from tracelens.model.trace import name_matches

Apply = Callable[[Edit, Variant], None]


@dataclass(frozen=True)
class Plan:
    """A finding's first fix as a transform: what it is, how to apply it, what blocks it."""

    fix: str
    model: str
    apply: Apply
    blocked_by: tuple[Category, ...] = ()
    part: str = ""


def span(ctx: AnalysisContext) -> tuple[float, float]:
    """The part of the window the replay covers (all of it, or its middle steps)."""
    if ctx.ledger.primary is None:
        return (0.0, 0.0)
    start, end, _, _ = ctx.replay_span
    g = ctx.graph
    # The graph's host side may begin before the window (a host that runs ahead).
    host_start = float(g.ts[g.kind == 0].min()) if g is not None and (g.kind == 0).any() else start
    return min(start, host_start), end


def window_rows(ctx: AnalysisContext, rows: np.ndarray) -> np.ndarray:
    """The host rows inside the replayed span."""
    if ctx.ledger.primary is None or not len(rows):
        return rows[:0]
    lo, hi = span(ctx)
    ts = ctx.model.host["ts"].to_numpy()[rows]
    return rows[(ts >= lo) & (ts < hi)]


def intervals(ctx: AnalysisContext, rows: Iterable[int]) -> np.ndarray:
    host = ctx.model.host
    r = np.fromiter((int(x) for x in rows), dtype=np.int64)
    if not len(r):
        return np.empty((0, 2))
    return np.column_stack([host["ts"].to_numpy()[r], host["end"].to_numpy()[r]])


def launched_by(ctx: AnalysisContext, op_rows: np.ndarray, kinds: Sequence[Kind] | None = None) -> list[np.ndarray]:
    """Per op row, the model.gpu rows of the activities launched inside it (by op_root)."""
    gpu = ctx.model.gpu
    launch = gpu["launch"].to_numpy()
    ok = launch >= 0
    if kinds is not None:
        ok &= np.isin(gpu["kind"].to_numpy(), [int(k) for k in kinds])
    root = np.full(len(gpu), -1, dtype=np.int64)
    root[ok] = ctx.model.host["op_root"].to_numpy()[launch[ok]]
    order = np.argsort(root, kind="stable")
    sorted_root = root[order]
    out = []
    for r in np.asarray(op_rows, dtype=np.int64).tolist():
        lo, hi = np.searchsorted(sorted_root, r, side="left"), np.searchsorted(sorted_root, r, side="right")
        out.append(np.sort(order[lo:hi]))
    return out


def user_syncs(ctx: AnalysisContext) -> tuple[np.ndarray, list[str]]:
    """The window's blocking calls the host_sync finding counts, and each one's construct
    (worked out once per context: several plans ask)."""
    cached: tuple[np.ndarray, list[str]] | None = getattr(ctx, "_predict_user_syncs", None)
    if cached is None:
        cached = _find_user_syncs(ctx)
        ctx._predict_user_syncs = cached  # type: ignore[attr-defined]
    return cached


def _find_user_syncs(ctx: AnalysisContext) -> tuple[np.ndarray, list[str]]:
    from tracelens.analyzers.host_sync import _memcpys_by_op, classify
    from tracelens.derive.host_calls import is_profiler_sync
    from tracelens.model.sources import op_chain

    model = ctx.model
    rows = window_rows(ctx, ctx.blocking_calls)
    launches = model.gpu["launch"].to_numpy()
    launched = launches[launches >= 0]
    last = float(model.host["ts"].to_numpy()[launched].max()) if len(launched) else np.inf
    memcpys = _memcpys_by_op(model)
    op_col = model.host["op"].to_numpy()
    keep: list[int] = []
    constructs: list[str] = []
    for r in rows.tolist():
        if is_profiler_sync(model, r, last):
            continue
        keep.append(r)
        constructs.append(classify(op_chain(model, r), memcpys.get(int(op_col[r]), []), model.arrays.name(r)))
    return np.array(keep, dtype=np.int64), constructs


def numel(ctx: AnalysisContext, row: int) -> int:
    d = first_dims(ctx, row)
    return int(np.prod(d)) if d else 0


def first_dims(ctx: AnalysisContext, row: int) -> tuple[int, ...] | None:
    d = ctx.model.op_shapes(row).get("Input Dims")
    if isinstance(d, list) and d and isinstance(d[0], list) and all(isinstance(x, int) for x in d[0]):
        return tuple(d[0])
    return None


def step_spans(ctx: AnalysisContext) -> list[tuple[float, float]]:
    w = ctx.window
    if w.steps:
        return [(s.start_us, s.end_us) for s in w.steps]
    dev = ctx.ledger.primary
    return [(dev.window_start, dev.window_end)] if dev is not None else []


def op_intervals(ctx: AnalysisContext) -> np.ndarray:
    host = ctx.model.host
    kind = host["kind"].to_numpy()
    root = host["op_root"].to_numpy()
    rows = np.flatnonzero((kind == int(Kind.CPU_OP)) & (root == np.arange(len(host))))
    return intervals(ctx, window_rows(ctx, rows).tolist())


def alloc_rows(ctx: AnalysisContext) -> np.ndarray:
    from tracelens.domain import ALLOC_APIS

    host = ctx.model.host
    is_call = np.isin(host["kind"].to_numpy(), [int(Kind.RUNTIME), int(Kind.DRIVER)])
    return window_rows(ctx, np.flatnonzero(is_call & name_matches(host["name"], ALLOC_APIS.__contains__)))


def loader_intervals(ctx: AnalysisContext) -> np.ndarray:
    host = ctx.model.host
    single = name_matches(
        host["name"],
        lambda n: (
            "_SingleProcessDataLoaderIter.__next__" in n
            or n.endswith("dataloader.py(732): __next__")
            or ("DataLoader" in n and "__next__" in n and "MultiProcessing" not in n)
        ),
    )
    rows = window_rows(ctx, np.flatnonzero(single))
    if not len(rows):
        return np.empty((0, 2))
    iv = intervals(ctx, rows.tolist())
    return iv[np.argsort(iv[:, 0])]


def worker_loader_intervals(ctx: AnalysisContext) -> np.ndarray:
    """(start, end) of each `__next__` of a DataLoader with worker processes
    (`_MultiProcessingDataLoaderIter`) in the replayed span, in time order."""
    host = ctx.model.host
    rows = window_rows(
        ctx, np.flatnonzero(name_matches(host["name"], lambda n: "_MultiProcessingDataLoaderIter.__next__" in n))
    )
    if not len(rows):
        return np.empty((0, 2))
    iv = intervals(ctx, rows.tolist())
    return iv[np.argsort(iv[:, 0])]


def pageable_uploads(ctx: AnalysisContext) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    gpu = ctx.model.gpu
    mc = gpu[(gpu["kind"] == int(Kind.MEMCPY)) & (gpu["launch"] >= 0)]
    dev = ctx.ledger.primary
    if dev is not None:
        mc = mc[(mc["ts"] >= dev.window_start) & (mc["ts"] < dev.window_end)]
    names = mc["name"].astype(str)
    up = mc[names.str.contains("HtoD") & names.str.contains("Pageable")]
    pinned = mc[names.str.contains("HtoD") & names.str.contains("Pinned")]
    rate = 0.0
    if len(pinned):
        b = pinned["bytes"].to_numpy(dtype=np.float64)
        d = pinned["dur"].to_numpy(dtype=np.float64)
        ok = (b > 1e6) & (d > 0)
        rate = float(np.median(b[ok] / d[ok])) * 1e6 if ok.any() else 0.0
    return up["launch"].to_numpy(), up.index.to_numpy(), up["bytes"].to_numpy(dtype=np.float64), rate


def graph_of(ctx: AnalysisContext) -> DependencyGraph:
    g = ctx.graph
    assert g is not None
    return g
