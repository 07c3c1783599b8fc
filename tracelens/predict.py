"""Every finding's expected gain from the replay (issue 25): the window's dependency graph
(derive/graph.py) replayed with the transform of the finding's first fix
(derive/transforms/), against the graph replayed as measured. One place attaches the
gains, their ranges and the predicted step to the findings, before ranking.

This module sees the findings and the analyzers' own tables (which syncs, which chains,
which kernels), turns them into the transforms' plain targets (trace rows, intervals,
factors), and keeps the transforms free of analyzer code. A finding without a transform
keeps its analyzer's rule-of-thumb estimate, marked `basis: estimate`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from tracelens.analyzers.base import Category, Finding, Prediction
from tracelens.analyzers.context import AnalysisContext
from tracelens.derive.graph import DependencyGraph
from tracelens.derive.replay import Edit, combine, replay
from tracelens.derive.transforms import VARIANTS, Variant, add_host_time
from tracelens.derive.transforms import copies as t_copies
from tracelens.derive.transforms import fusion as t_fusion
from tracelens.derive.transforms import graphs as t_graphs
from tracelens.derive.transforms import host as t_host
from tracelens.derive.transforms import kernels as t_kernels
from tracelens.derive.transforms import loader as t_loader
from tracelens.derive.transforms import syncs as t_syncs
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


@dataclass(frozen=True)
class Outcome:
    """The replayed window with a set of fixes applied, per variant (µs over the window)."""

    span_us: dict[Variant, float]
    baseline_us: float
    n_steps: int  # the window's steps
    replayed_steps: int  # the steps the replay covered (derive: AnalysisContext.replay_span)

    def gain(self, v: Variant) -> float:
        """The fix's gain over the whole window (the replayed steps' gain per step, times
        the window's steps)."""
        return (self.baseline_us - self.span_us[v]) * self.n_steps / max(self.replayed_steps, 1)


# -- targets ------------------------------------------------------------------------------


def _span(ctx: AnalysisContext) -> tuple[float, float]:
    """The part of the window the replay covers (all of it, or its middle steps)."""
    if ctx.ledger.primary is None:
        return (0.0, 0.0)
    start, end, _, _ = ctx.replay_span
    g = ctx.graph
    # The graph's host side may begin before the window (a host that runs ahead).
    host_start = float(g.ts[g.kind == 0].min()) if g is not None and (g.kind == 0).any() else start
    return min(start, host_start), end


def _window_rows(ctx: AnalysisContext, rows: np.ndarray) -> np.ndarray:
    """The host rows inside the replayed span."""
    if ctx.ledger.primary is None or not len(rows):
        return rows[:0]
    lo, hi = _span(ctx)
    ts = ctx.model.host["ts"].to_numpy()[rows]
    return rows[(ts >= lo) & (ts < hi)]


def _intervals(ctx: AnalysisContext, rows: Iterable[int]) -> np.ndarray:
    host = ctx.model.host
    r = np.fromiter((int(x) for x in rows), dtype=np.int64)
    if not len(r):
        return np.empty((0, 2))
    return np.column_stack([host["ts"].to_numpy()[r], host["end"].to_numpy()[r]])


def _launched_by(ctx: AnalysisContext, op_rows: np.ndarray, kinds: Sequence[Kind] | None = None) -> list[np.ndarray]:
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


def _user_syncs(ctx: AnalysisContext) -> tuple[np.ndarray, list[str]]:
    """The window's blocking calls the host_sync finding counts, and each one's construct
    (worked out once per context: several plans ask)."""
    cached: tuple[np.ndarray, list[str]] | None = getattr(ctx, "_predict_user_syncs", None)
    if cached is None:
        cached = _find_user_syncs(ctx)
        ctx._predict_user_syncs = cached  # type: ignore[attr-defined]
    return cached


def _find_user_syncs(ctx: AnalysisContext) -> tuple[np.ndarray, list[str]]:
    from tracelens.analyzers.host_sync import _is_profiler_sync, _memcpys_by_op, classify
    from tracelens.derive.ledger import blocking_call_rows
    from tracelens.model.sources import op_chain

    model = ctx.model
    rows = _window_rows(ctx, blocking_call_rows(model))
    launches = model.gpu["launch"].to_numpy()
    launched = launches[launches >= 0]
    last = float(model.host["ts"].to_numpy()[launched].max()) if len(launched) else np.inf
    memcpys = _memcpys_by_op(model)
    op_col = model.host["op"].to_numpy()
    keep, constructs = [], []
    for r in rows.tolist():
        if _is_profiler_sync(model, r, last):
            continue
        keep.append(r)
        constructs.append(classify(op_chain(model, r), memcpys.get(int(op_col[r]), []), model.arrays.name(r)).id)
    return np.array(keep, dtype=np.int64), constructs


def _sync_plan(ctx: AnalysisContext) -> Plan | None:
    rows, constructs = _user_syncs(ctx)
    if not len(rows):
        return None
    root = ctx.model.host["op_root"].to_numpy()[rows]
    op_rows = np.where(root >= 0, root, rows)
    op_iv = _intervals(ctx, op_rows.tolist())
    copies = _launched_by(ctx, op_rows, (Kind.MEMCPY,))
    k_rows, k_f = _compacted_consumers(ctx, rows, constructs, op_rows)

    def apply(edit: Edit, v: Variant) -> None:
        g = graph_of(ctx)
        t_syncs.apply(g, edit, v, rows.tolist(), constructs, op_iv, copies)
        if v != Variant.HIGH and len(k_rows):
            t_kernels.scale(g, edit, k_rows, k_f)

    return Plan(
        "remove_host_syncs",
        "the syncs stop waiting for the GPU (scalars read on the device or after the loop, masks instead of x[mask]); "
        "the host launches on while the GPU runs",
        apply,
    )


def _numel(ctx: AnalysisContext, row: int) -> int:
    d = _first_dims(ctx, row)
    return int(np.prod(d)) if d else 0


def _compacted_consumers(
    ctx: AnalysisContext, rows: np.ndarray, constructs: list[str], op_rows: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Kernels that a static-shape rewrite of `x[mask]` runs on every element: the ops
    after a data-dependent op, up to the next sync on its thread, whose input is smaller
    than the op's (the compacted tensor), scaled by the ratio (N / C). What the mask
    computation costs beyond that (a where, a count) is the rewrite's choice and not
    modelled (H200 sync pair: +553 µs a step measured, +190 µs of it these kernels)."""
    host = ctx.model.host
    ts = host["ts"].to_numpy()
    end = host["end"].to_numpy()
    tid = host["tid"].to_numpy()
    kind = host["kind"].to_numpy()
    root = host["op_root"].to_numpy()
    tops = np.flatnonzero((kind == int(Kind.CPU_OP)) & (root == np.arange(len(host))))
    tops = tops[np.argsort(ts[tops], kind="stable")]
    sync_ts = np.sort(ts[rows])
    out_rows: list[np.ndarray] = []
    out_f: list[np.ndarray] = []
    for r, c, op in zip(rows.tolist(), constructs, op_rows.tolist(), strict=True):
        if c != "data_dependent_shape":
            continue
        n_in = _numel(ctx, op)
        if n_in <= 0:
            continue
        later = sync_ts[sync_ts > ts[r]]
        stop = float(later[0]) if len(later) else np.inf
        i = int(np.searchsorted(ts[tops], end[op], side="left"))
        j = int(np.searchsorted(ts[tops], stop, side="left"))
        cand = tops[i:j]
        cand = cand[tid[cand] == tid[op]]
        for o in cand.tolist():
            m = _numel(ctx, o)
            if 0 < m < n_in:
                launched = _launched_by(ctx, np.array([o]), (Kind.KERNEL,))[0]
                out_rows.append(launched)
                out_f.append(np.full(len(launched), n_in / m))
    if not out_rows:
        return np.empty(0, np.int64), np.empty(0)
    return np.concatenate(out_rows), np.concatenate(out_f)


def _step_spans(ctx: AnalysisContext) -> list[tuple[float, float]]:
    w = ctx.window
    if w.steps:
        return [(s.start_us, s.end_us) for s in w.steps]
    dev = ctx.ledger.primary
    return [(dev.window_start, dev.window_end)] if dev is not None else []


def _op_intervals(ctx: AnalysisContext) -> np.ndarray:
    host = ctx.model.host
    kind = host["kind"].to_numpy()
    root = host["op_root"].to_numpy()
    rows = np.flatnonzero((kind == int(Kind.CPU_OP)) & (root == np.arange(len(host))))
    return _intervals(ctx, _window_rows(ctx, rows).tolist())


def _alloc_rows(ctx: AnalysisContext) -> np.ndarray:
    from tracelens.domain import ALLOC_APIS

    host = ctx.model.host
    is_call = np.isin(host["kind"].to_numpy(), [int(Kind.RUNTIME), int(Kind.DRIVER)])
    return _window_rows(ctx, np.flatnonzero(is_call & name_matches(host["name"], ALLOC_APIS.__contains__)))


def _graph_plan(ctx: AnalysisContext, present: set[Category]) -> Plan | None:
    steps = _step_spans(ctx)
    if not steps:
        return None
    op_iv = _op_intervals(ctx)
    blocked: list[Category] = []
    sync_rows, _ = _user_syncs(ctx)
    if len(sync_rows):
        blocked.append(Category.HOST_SYNC)
    if len(_alloc_rows(ctx)) and Category.ALLOCATION in present:
        blocked.append(Category.ALLOCATION)
    if Category.SHAPE_DYNAMISM in present:
        blocked.append(Category.SHAPE_DYNAMISM)

    def apply(edit: Edit, v: Variant) -> None:
        t_graphs.apply(graph_of(ctx), edit, v, steps, op_iv)

    return Plan(
        "cuda_graph",
        "each step's launches replaced by one cudaGraphLaunch (1.39 µs of host time a kernel under the profiler); "
        "the kernels run back to back 0.26 µs apart (H200)",
        apply,
        tuple(blocked),
    )


def _fusion_plan(ctx: AnalysisContext) -> Plan | None:
    from tracelens.analyzers.roofline import for_context

    roof = for_context(ctx)
    if not roof.chains or roof.peaks is None:
        return None
    bound = {k.name: k.bound for k in roof.kernels}
    gpu = ctx.model.gpu
    codes = gpu["name"].cat.codes.to_numpy()
    compute_code = np.array([bound.get(str(c)) == "compute" for c in gpu["name"].cat.categories], dtype=bool)
    dur = gpu["dur"].to_numpy(dtype=np.float64).tolist()
    launch = gpu["launch"].to_numpy().tolist()
    root = ctx.model.host["op_root"].to_numpy().tolist()
    h_ts = ctx.model.host["ts"].to_numpy()
    h_end = ctx.model.host["end"].to_numpy()
    groups, pass_info, removed_iv = [], [], []
    g = ctx.graph
    in_graph = np.zeros(len(gpu), dtype=bool)
    if g is not None:
        in_graph[g.row[g.kind == 1]] = True
    for c in roof.chains:
        for passes, pbytes in zip(c.occurrences, c.occurrence_bytes, strict=True):
            if not in_graph[passes[0][0]]:
                continue
            rows = np.array([r for p in passes for r in p], dtype=np.int64)
            groups.append(rows)
            pass_us = [float(sum(dur[r] for r in p)) for p in passes]
            compute = [bool(compute_code[codes[list(p)]].any()) for p in passes]
            pass_info.append((pass_us, pbytes, compute))
            later = np.array([root[launch[p[0]]] for p in passes[1:] if launch[p[0]] >= 0], dtype=np.int64)
            later = later[later >= 0]
            removed_iv.append(np.column_stack([h_ts[later], h_end[later]]))
    bw = roof.peaks.bw
    sheet = roof.peaks.bandwidth

    def apply(edit: Edit, v: Variant) -> None:
        fused = [t_fusion.fused_time_us(v, us, b, cb, bw, sheet) for us, b, cb in pass_info]
        t_fusion.apply(graph_of(ctx), edit, groups, fused, removed_iv)

    return Plan(
        "fuse_chains",
        "each chain of back-to-back elementwise passes fused into one kernel (one round trip of its largest pass, or "
        "its arithmetic if longer), its other ops no longer dispatched",
        apply,
    )


def _sdpa_plan(ctx: AnalysisContext) -> Plan | None:
    from tracelens.analyzers.roofline import eager_attention, for_context

    roof = for_context(ctx)
    calls = eager_attention(ctx.model, roof.peaks, roof.window)
    if not calls:
        return None
    groups, fused, removed_iv = [], [], []
    for c in calls:
        launched = _launched_by(ctx, np.array(c.rows, dtype=np.int64), (Kind.KERNEL,))
        rows = np.concatenate(launched) if launched else np.empty(0, np.int64)
        if not len(rows):
            continue
        groups.append(np.sort(rows))
        fused.append(float(c.sdpa_us))
        removed_iv.append(_intervals(ctx, list(c.rows)[1:]))
    if not groups:
        return None

    def apply(edit: Edit, v: Variant) -> None:
        scale = {Variant.LOW: 1.5, Variant.HIGH: 0.75}.get(v, 1.0)
        t_fusion.apply(graph_of(ctx), edit, groups, [f * scale for f in fused], removed_iv)

    return Plan(
        "sdpa",
        "each eager attention's kernels replaced by one scaled_dot_product_attention kernel at the roofline's "
        "estimate, its other ops no longer dispatched (the SDPA op still launches)",
        apply,
    )


def _kernel_factor_plan(
    ctx: AnalysisContext,
    fix: str,
    model_text: str,
    factor_of: dict[str, float] | dict[Variant, dict[str, float]],
    spread: tuple[float, float] = (1.0, 1.0),
) -> Plan | None:
    """Kernels by name sped up by a factor: one table for all variants (LOW/HIGH move the
    saved part by `spread`), or one table per variant."""
    tables: dict[Variant, dict[str, float]]
    if factor_of and all(isinstance(k, Variant) for k in factor_of):
        tables = factor_of  # type: ignore[assignment]
    else:
        flat: dict[str, float] = factor_of  # type: ignore[assignment]
        tables = {
            v: {
                n: 1.0 - (1.0 - f) * {Variant.LOW: spread[0], Variant.HIGH: spread[1]}.get(v, 1.0)
                for n, f in flat.items()
            }
            for v in VARIANTS
        }
    if not any(tables.values()):
        return None
    gpu = ctx.model.gpu
    codes = gpu["name"].cat.codes.to_numpy()
    cats = [str(c) for c in gpu["name"].cat.categories]
    per_variant = {}
    for v, table in tables.items():
        per_code = np.ones(len(cats))
        for i, c in enumerate(cats):
            if c in table:
                per_code[i] = table[c]
        per_variant[v] = per_code
    touched = np.zeros(len(cats), dtype=bool)
    for per_code in per_variant.values():
        touched |= per_code < 1.0
    rows = np.flatnonzero(touched[codes])

    def apply(edit: Edit, v: Variant) -> None:
        t_kernels.apply(graph_of(ctx), edit, rows, per_variant[v][codes[rows]])

    return Plan(fix, model_text, apply)


def _roof_factors(ctx: AnalysisContext, bound: str) -> dict[str, float]:
    """Per kernel name of that bound, its time at the sustained roof over its time now;
    kernels in a fusion chain are the fusion's to gain from (as in the analyzer)."""
    from tracelens.analyzers.roofline import FUSIBLE_FAMILIES, _gain_to_roof, for_context

    roof = for_context(ctx)
    in_chains = {name for c in roof.chains for name in c.kernels}
    out = {}
    for r in roof.kernels:
        if r.name in in_chains or (bound == "memory" and r.family in FUSIBLE_FAMILIES and roof.chains):
            continue
        if r.bound == bound and r.bound_us > 0:
            g = _gain_to_roof(r)
            if g > 0:
                out[r.name] = max(1.0 - g / r.time_us, 0.0)
    return out


def _site_factors(ctx: AnalysisContext, f: Finding) -> dict[str, float]:
    """Per kernel name, 1 - (the time a site says it loses) / (the name's time in the window)."""
    dev = ctx.ledger.primary
    if dev is None:
        return {}
    act = ctx.model.gpu_activity()
    act = act[(act["ts"] >= dev.window_start) & (act["ts"] < dev.window_end)]
    total = act.groupby(act["name"].astype(str))["dur"].sum().to_dict()
    out: dict[str, float] = {}
    for s in f.sites:
        for k in s.kernels[:1]:
            t = float(total.get(k, 0.0))
            if t > 0:
                out[k] = max(out.get(k, 1.0) - s.time_us / t, 0.05)
    return out


#: An aligned bf16/fp16 matmul runs at about this share of the sustained ceiling measured on
#: the GPU (H200 sweep, sample_traces/matmul_sweep: 744-827 of 790 TFLOP/s).
ALIGNED_SHARE_OF_CEILING = 0.95


def _misaligned_factors(ctx: AnalysisContext) -> dict[Variant, dict[str, float]]:
    """Per misaligned kernel, its time aligned over its time now: at an aligned peer's rate
    in this trace, else at ALIGNED_SHARE_OF_CEILING of the GPU's sustained matmul rate
    (LOW: the analyzer's conservative EXPECTED_SLOWDOWN; HIGH: the ceiling itself)."""
    from tracelens.analyzers.matmul_shapes import cached_matmul_rows
    from tracelens.analyzers.misaligned_matmul import EXPECTED_SLOWDOWN, MAX_SLOWDOWN, _peer_rate
    from tracelens.analyzers.roofline import eager_attention_shapes, for_context

    attention = eager_attention_shapes(ctx)
    roofs = {k.name: k for k in for_context(ctx).kernels}
    rows = [r for r in cached_matmul_rows(ctx.model) if (r.batch, r.m, r.n, r.k) not in attention]
    out: dict[Variant, dict[str, float]] = {v: {} for v in VARIANTS}
    for r in rows:
        if r.aligned or r.tflops <= 0:
            continue
        peer = _peer_rate(r, rows)
        k = roofs.get(r.kernel)
        ceiling = (min(k.measured_ceiling, k.roof_value) if k is not None and k.measured_ceiling > 0 else
                   (k.roof_value if k is not None else 0.0)) / 1e12  # fmt: skip
        nominal = peer if peer else ALIGNED_SHARE_OF_CEILING * ceiling if ceiling else r.tflops * EXPECTED_SLOWDOWN
        high = max(nominal, ceiling) if ceiling else nominal
        for v, rate in ((Variant.LOW, r.tflops * EXPECTED_SLOWDOWN), (Variant.NOMINAL, nominal), (Variant.HIGH, high)):
            slowdown = min(max(rate / r.tflops, 1.0), MAX_SLOWDOWN)
            out[v][r.kernel] = min(out[v].get(r.kernel, 1.0), 1.0 / slowdown)
    return out


def _loader_intervals(ctx: AnalysisContext) -> np.ndarray:
    host = ctx.model.host
    single = name_matches(
        host["name"],
        lambda n: (
            "_SingleProcessDataLoaderIter.__next__" in n
            or n.endswith("dataloader.py(732): __next__")
            or ("DataLoader" in n and "__next__" in n and "MultiProcessing" not in n)
        ),
    )
    rows = _window_rows(ctx, np.flatnonzero(single))
    if not len(rows):
        return np.empty((0, 2))
    iv = _intervals(ctx, rows.tolist())
    return iv[np.argsort(iv[:, 0])]


def _pageable_uploads(ctx: AnalysisContext) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
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


def _pinned_plan(ctx: AnalysisContext) -> Plan | None:
    calls, copies, nbytes, rate = _pageable_uploads(ctx)
    if not len(calls):
        return None

    def apply(edit: Edit, v: Variant) -> None:
        t_copies.apply(graph_of(ctx), edit, v, calls, copies, np.clip(nbytes, 0, None), rate)

    return Plan(
        "pinned_async_copy",
        "host-to-device copies from pinned memory with non_blocking=True: the call returns at once, the copy runs at "
        "the pinned rate (55 GB/s on the H200) while the host launches on",
        apply,
    )


def _loader_plan(ctx: AnalysisContext) -> Plan | None:
    iv = _loader_intervals(ctx)
    if not len(iv):
        return None
    # The batches' host-to-device copies: the uploads launched in the replayed span.
    gpu = ctx.model.gpu
    lo, hi = _span(ctx)
    mc = gpu[(gpu["kind"] == int(Kind.MEMCPY)) & (gpu["launch"] >= 0)]
    mc = mc[(mc["ts"] >= lo) & (mc["ts"] < hi)]
    up = mc[mc["name"].astype(str).str.contains("HtoD")]
    rows = up.index.to_numpy()
    batch = float(np.clip(up["bytes"].to_numpy(dtype=np.float64), 0, None).sum()) / max(len(iv), 1)

    def apply(edit: Edit, v: Variant) -> None:
        t_loader.apply(graph_of(ctx), edit, v, iv, batch, rows)

    return Plan(
        "dataloader_workers",
        "batches built by 4 DataLoader workers: the training thread only receives them (175 µs a MB under the "
        "profiler), and the step is at least the loading time over the workers",
        apply,
    )


def _shape_plan(ctx: AnalysisContext) -> Plan | None:
    from tracelens.analyzers.shape_dynamism import shape_sites

    sites = [s for s in shape_sites(ctx) if s.excess]
    host = ctx.model.host
    ts = host["ts"].to_numpy()
    end = host["end"].to_numpy()
    # With one shape every call is a warm repeat: each call of a site with new-shape cost
    # takes its op's warm time (the 10th percentile of its calls in the window; the
    # median repeat of a ragged loop still runs cold, after the planning has evicted the
    # host's caches: H200 ragged pair, linear 50 µs median vs 33 µs padded).
    by_op: dict[str, list[int]] = {}
    for st in sites:
        by_op.setdefault(st.op, []).extend(st.rows)
    iv: list[tuple[float, float]] = []
    for rows in by_op.values():
        r = np.array(rows, dtype=np.int64)
        d = end[r] - ts[r]
        warm = float(np.percentile(d, WARM_CALL_PERCENTILE))
        slow = d > warm
        iv.extend(zip((ts[r] + warm)[slow].tolist(), end[r][slow].tolist(), strict=True))
    if not iv:
        return None
    # Padding every call to the largest shape makes its kernels bigger: by the size of the
    # dimension that varies (attention kernels by its square).
    rows_f: dict[int, float] = {}
    for s in sites:
        dims = [_first_dims(ctx, r) for r in s.rows]
        sizes = [d for d in dims if d]
        if not sizes:
            continue
        nd = {len(d) for d in sizes}
        if len(nd) != 1:
            continue
        moving = [i for i in range(nd.pop()) if len({d[i] for d in sizes}) > 1]
        if len(moving) != 1:
            continue
        top = max(d[moving[0]] for d in sizes)
        power = 2.0 if "attention" in s.op or "sdpa" in s.op or "flash" in s.op else 1.0
        for row, dd in zip(s.rows, dims, strict=True):
            if dd and dd[moving[0]] > 0:
                rows_f[row] = (top / dd[moving[0]]) ** power
    ops = np.array(list(rows_f), dtype=np.int64)
    launched = _launched_by(ctx, ops, (Kind.KERNEL,)) if len(ops) else []
    k_rows = np.concatenate(launched) if launched else np.empty(0, np.int64)
    k_f = (
        np.concatenate([np.full(len(x), rows_f[int(o)]) for o, x in zip(ops, launched, strict=True)])
        if launched
        else np.empty(0)
    )
    intervals = np.array(iv, dtype=np.float64)

    def apply(edit: Edit, v: Variant) -> None:
        scale = {Variant.LOW: 1.1, Variant.HIGH: 0.0}.get(v, 1.0)
        factors = 1.0 + (k_f - 1.0) * scale
        t_host.apply(graph_of(ctx), edit, v, intervals, low_share=0.95, kernel_rows=k_rows, kernel_factors=factors)

    return Plan(
        "static_shapes",
        "one shape for every step (padded to the largest): no new cuDNN/cuBLAS plans in the loop, the padded kernels "
        "as much longer as the padding",
        apply,
    )


#: The percentile of an op's calls that stands for a warm repeat (see _shape_plan).
WARM_CALL_PERCENTILE = 10


def _first_dims(ctx: AnalysisContext, row: int) -> tuple[int, ...] | None:
    d = ctx.model.op_shapes(row).get("Input Dims")
    if isinstance(d, list) and d and isinstance(d[0], list) and all(isinstance(x, int) for x in d[0]):
        return tuple(d[0])
    return None


def _compile_plan(ctx: AnalysisContext) -> Plan | None:
    from tracelens.domain import COMPILER_EXCLUDE, COMPILER_MARKERS

    host = ctx.model.host
    hit = name_matches(
        host["name"], lambda n: any(m in n for m in COMPILER_MARKERS) and not any(x in n for x in COMPILER_EXCLUDE)
    )
    rows = _window_rows(ctx, np.flatnonzero(hit))
    if not len(rows):
        return None
    iv = _intervals(ctx, rows.tolist())

    def apply(edit: Edit, v: Variant) -> None:
        t_host.apply(graph_of(ctx), edit, v, iv, low_share=0.9)

    return Plan(
        "no_recompiles", "torch.compile no longer compiles inside the loop (one shape, compiled in the warm-up)", apply
    )


#: Extra ops a preallocated cache's in-place write dispatches for each cat it replaces
#: (`cache[:, :, pos] = new`: a slice and a copy_; the kv pair on the H200 took
#: 0.8 ms more host time for 16 writes a step, about 2-3 ops of its median 16 µs each).
INPLACE_WRITE_OPS = 2


def _allocation_plan(ctx: AnalysisContext) -> Plan | None:
    from tracelens.analyzers.allocation import CAT_OPS, cat_growth

    rows = _alloc_rows(ctx)
    iv = _intervals(ctx, rows.tolist())
    # empty_cache(): its Python frame's time goes too.
    host = ctx.model.host
    ec = _window_rows(ctx, np.flatnonzero(name_matches(host["name"], lambda n: n.endswith(": empty_cache"))))
    if len(ec):
        iv = np.concatenate([iv, _intervals(ctx, ec.tolist())])
    growth = cat_growth(ctx)
    k_rows = np.empty(0, np.int64)
    k_f = np.empty(0)
    dev = ctx.ledger.primary
    if growth and dev is not None:
        # The window's kernels launched by cat ops (their host side may precede the window).
        gpu = ctx.model.gpu
        launch = gpu["launch"].to_numpy()
        g_ts = gpu["ts"].to_numpy()
        ok = (
            (launch >= 0)
            & (g_ts >= dev.window_start)
            & (g_ts < dev.window_end)
            & (gpu["kind"].to_numpy() == int(Kind.KERNEL))
        )
        op = np.full(len(gpu), -1, dtype=np.int64)
        op[ok] = ctx.model.arrays.op[launch[ok]]
        is_cat = np.zeros(len(gpu), dtype=bool)
        is_cat[ok] = op[ok] >= 0
        is_cat[is_cat] = name_matches(host["name"].iloc[op[is_cat]], CAT_OPS.__contains__)
        k_rows = np.flatnonzero(is_cat)
        cat_ops = np.unique(op[k_rows]) if len(k_rows) else np.empty(0, np.int64)
        cat_threads = list(
            zip(host["pid"].to_numpy()[cat_ops].tolist(), host["tid"].to_numpy()[cat_ops].tolist(), strict=True)
        )
        cat_ends = host["end"].to_numpy()[cat_ops]
        kind = host["kind"].to_numpy()
        root = host["op_root"].to_numpy()
        # The median op's host time, over the ops that ran the window's work (the host may
        # be ahead of the window: those ops ran before it).
        tops = np.flatnonzero((kind == int(Kind.CPU_OP)) & (root == np.arange(len(host))))
        g = ctx.graph
        if g is not None and (g.kind == 0).any():
            t_lo, t_hi = float(g.ts[g.kind == 0].min()), float(g.end[g.kind == 0].max())
            h_ts = host["ts"].to_numpy()[tops]
            tops = tops[(h_ts >= t_lo) & (h_ts < t_hi)]
        op_us = float(np.median(host["dur"].to_numpy()[tops])) if len(tops) else 0.0
        copied = sum(g.copied_bytes for g in growth)
        recopied = sum(g.recopied_bytes for g in growth)
        k_f = np.full(len(k_rows), max(1.0 - recopied / copied, 0.0) if copied else 1.0)
    if not len(iv) and not len(k_rows):
        return None
    if not growth:
        cat_ops, cat_threads, cat_ends, op_us = np.empty(0, np.int64), [], np.empty(0), 0.0

    def apply(edit: Edit, v: Variant) -> None:
        g = graph_of(ctx)
        t_host.apply(g, edit, v, iv, low_share=0.5, kernel_rows=k_rows, kernel_factors=k_f)
        # Writing the new slice in place dispatches more ops than the cat did (a slice and
        # a copy_ for each write: H200 kv pair, +0.8 ms of host a 16-write step).
        ops = {Variant.LOW: INPLACE_WRITE_OPS + 1, Variant.HIGH: INPLACE_WRITE_OPS - 1}.get(v, INPLACE_WRITE_OPS)
        if len(cat_ops) and op_us > 0:
            add_host_time(g, edit, cat_threads, cat_ends, ops * op_us)

    return Plan(
        "remove_allocator_calls",
        "the caching allocator serves every allocation (no empty_cache(), one buffer size, a preallocated cache "
        "written in place): the allocator calls and their device syncs go, a growing cat copies only the new slice",
        apply,
    )


def _comm_plan(ctx: AnalysisContext, f: Finding) -> Plan | None:
    from tracelens.analyzers.communication import GLOO_ALGBW_BYTES_PER_S, _message_bytes
    from tracelens.domain import is_collective_kernel

    host = ctx.model.host
    kind = host["kind"].to_numpy()
    gloo = _window_rows(
        ctx, np.flatnonzero((kind == int(Kind.CPU_OP)) & name_matches(host["name"], lambda n: n.startswith("gloo:")))
    )
    if len(gloo) and len(ctx.model.gpu_activity()):
        # gloo moves CUDA tensors through the host; NCCL at NVLink/PCIe rates takes a
        # fraction of that. The transport part of each call is its bytes at gloo's rate
        # (capped by its duration); the rest is waiting for a slower rank, which NCCL
        # does not remove.
        ts, end = host["ts"].to_numpy(), host["end"].to_numpy()
        sizes, last = [], 0
        for r in gloo.tolist():
            b = _message_bytes(ctx, int(host["op_root"].to_numpy()[r])) or _message_bytes(ctx, r) or last
            last = b or last
            sizes.append(b)
        need = np.array([s / GLOO_ALGBW_BYTES_PER_S * 1e6 for s in sizes])
        fastest = float(np.min(end[gloo] - ts[gloo]))
        need = np.where(need > 0, np.minimum(need, end[gloo] - ts[gloo]), fastest)
        iv = np.column_stack([end[gloo] - need, end[gloo]])

        def apply(edit: Edit, v: Variant) -> None:
            t_host.apply(graph_of(ctx), edit, v, iv, low_share=0.5)

        return Plan(
            "nccl_backend",
            "collectives on NCCL instead of gloo: the transport through the host (the bytes at gloo's 0.5 GB/s) goes; "
            "waiting for a slower rank stays",
            apply,
            part="the transport part of the collectives; the rest of their time is waiting for another rank",
        )
    gpu = ctx.model.gpu
    rows = np.flatnonzero(name_matches(gpu["name"], is_collective_kernel))
    if not len(rows):
        return None

    def apply_k(edit: Edit, v: Variant) -> None:
        # Overlapped, a collective costs the step only what no other work hides: HIGH
        # hides all of it, NOMINAL half, LOW a quarter.
        f_ = {Variant.LOW: 0.75, Variant.HIGH: 0.0}.get(v, 0.5)
        t_kernels.apply(graph_of(ctx), edit, rows, np.full(len(rows), f_))

    return Plan(
        "overlap_collectives",
        "collectives overlapped with compute (DDP buckets, async_op): half of their kernel time hidden",
        apply_k,
    )


def _host_bound_plan(ctx: AnalysisContext, f: Finding, present: set[Category]) -> Plan | None:
    """host_bound's first fix follows its advice: DataLoader workers, pinned copies, or a
    CUDA graph for per-op dispatch; other host work has no transform."""
    loader = next((m.value for m in f.evidence if m.label == "of it in data loading ops"), 0.0)
    if isinstance(loader, (int, float)) and loader > 0.2 * f.time_us:
        p = _loader_plan(ctx)
        if p is not None:
            return p
    copy_host = next((m.value for m in f.evidence if m.label == "host time in pageable copy calls"), 0.0)
    if isinstance(copy_host, (int, float)) and copy_host > 0.05 * f.time_us:
        p = _pinned_plan(ctx)
        if p is not None:
            return p
    if "dispatching ops one by one" in f.advice:
        return _graph_plan(ctx, present)
    return None


def plan_for(ctx: AnalysisContext, f: Finding, present: set[Category]) -> Plan | None:
    c = f.category
    if c == Category.HOST_SYNC:
        return _sync_plan(ctx)
    if c == Category.LAUNCH_OVERHEAD:
        return _graph_plan(ctx, present)
    if c == Category.MEMORY_BOUND:
        at_roof = _roof_factors(ctx, "memory")
        text = "memory-bound kernels at the bandwidth this GPU sustains"
        return _fusion_plan(ctx) or _kernel_factor_plan(ctx, "memory_at_roof", text, at_roof, (0.5, 1.0))
    if c == Category.EAGER_ATTENTION:
        return _sdpa_plan(ctx)
    if c == Category.MISALIGNED_MATMUL:
        return _kernel_factor_plan(
            ctx, "aligned_matmul", "misaligned matmuls at the rate of an aligned peer in the trace, else at 95% of the "
            "GPU's sustained matmul rate", _misaligned_factors(ctx),
        )  # fmt: skip
    if c == Category.COMPUTE_BOUND:
        text = "compute-bound kernels at the rate this GPU sustains"
        return _kernel_factor_plan(ctx, "compute_at_roof", text, _roof_factors(ctx, "compute"), (0.5, 1.0))
    if c in (Category.WAVE_QUANTIZATION, Category.POWER_THROTTLE):
        fix = "full_waves" if c == Category.WAVE_QUANTIZATION else "full_clocks"
        return _kernel_factor_plan(
            ctx, fix, "the listed kernels at the finding's estimate", _site_factors(ctx, f), (0.5, 1.0)
        )
    if c == Category.ALLOCATION:
        return _allocation_plan(ctx)
    if c == Category.SHAPE_DYNAMISM:
        return _shape_plan(ctx)
    if c == Category.COMPILATION:
        return _compile_plan(ctx)
    if c == Category.HOST_BOUND:
        return _host_bound_plan(ctx, f, present)
    if c == Category.COMMUNICATION:
        return _comm_plan(ctx, f)
    return None


# -- what a fix leaves in a trace ---------------------------------------------------------


def signature(ctx: AnalysisContext, fix: str) -> float | None:
    """How much of what the fix removes a trace still holds, per step (None: the fix has
    no such count): kernel launch calls not in a CUDA graph, pageable uploads, user syncs,
    batches built on the training thread, allocator calls. `tracelens diff` takes a fix as
    applied only where this fell by half."""
    n = max(ctx.n_steps, 1)
    host = ctx.model.host
    if fix == "cuda_graph":
        # The window's kernels that a launch of their own started (by the GPU's times: the
        # host may be ahead of the window).
        dev = ctx.ledger.primary
        k = ctx.model.kernels()
        if dev is not None:
            k = k[(k["ts"] >= dev.window_start) & (k["ts"] < dev.window_end)]
        launch = k["launch"].to_numpy()
        by_graph = np.zeros(len(k), dtype=bool)
        ok = launch >= 0
        if ok.any():
            graph_call = name_matches(host["name"], lambda x: "GraphLaunch" in x)
            by_graph[ok] = graph_call[launch[ok]]
        return float((~by_graph).sum()) / n
    if fix == "pinned_async_copy":
        return len(_pageable_uploads(ctx)[0]) / n
    if fix == "remove_host_syncs":
        return len(_user_syncs(ctx)[0]) / n
    if fix == "dataloader_workers":
        return len(_loader_intervals(ctx)) / n
    if fix == "remove_allocator_calls":
        from tracelens.analyzers.allocation import cat_growth

        return (len(_alloc_rows(ctx)) + sum(g.calls for g in cat_growth(ctx))) / n
    return None


# -- replay -------------------------------------------------------------------------------


def graph_of(ctx: AnalysisContext) -> DependencyGraph:
    g = ctx.graph
    assert g is not None
    return g


#: Fixes from the most specific to the most general: in a joint prediction a node belongs
#: to the first fix that changes it (derive/replay.py, combine).
FIX_ORDER = (
    "sdpa", "aligned_matmul", "static_shapes", "remove_allocator_calls", "remove_host_syncs", "pinned_async_copy",
    "dataloader_workers", "no_recompiles", "nccl_backend", "cuda_graph", "fuse_chains", "memory_at_roof",
    "compute_at_roof", "full_waves", "full_clocks", "overlap_collectives",
)  # fmt: skip


def outcome(ctx: AnalysisContext, plans: Sequence[Plan]) -> Outcome | None:
    """The window replayed with all `plans` applied, per variant."""
    g = ctx.graph
    if g is None:
        return None
    rank_of = {f: i for i, f in enumerate(FIX_ORDER)}
    plans = sorted(plans, key=lambda p: rank_of.get(p.fix, len(FIX_ORDER)))
    base = ctx.replayed
    spans = {}
    for v in VARIANTS:
        edits = []
        for p in plans:
            edit = Edit.of(g)
            p.apply(edit, v)
            edits.append(edit)
        spans[v] = replay(g, combine(g, edits)).steady_span_us
    return Outcome(spans, base, ctx.n_steps, ctx.replay_span[3])


def attach(ctx: AnalysisContext, findings: list[Finding]) -> list[Finding]:
    """The findings with their gains from the replay (or their estimate, marked so)."""
    present = {f.category for f in findings}
    step = ctx.window_us / max(ctx.n_steps, 1)
    plans: dict[Category, Plan] = {}
    for f in findings:
        try:
            p = plan_for(ctx, f, present) if ctx.graph is not None else None
        except (ValueError, IndexError, KeyError):  # a target the trace cannot resolve: keep the estimate
            p = None
        if p is not None:
            plans[f.category] = p
    out = []
    for f in findings:
        p = plans.get(f.category)
        res = None
        if p is not None:
            chain = [plans[b] for b in p.blocked_by if b in plans] + [p]
            res = outcome(ctx, chain)
        if p is None or res is None:
            pred = Prediction(
                fix="estimate", basis="estimate", model=f.gain_note, step_us=step,
                predicted_step_us=max(step - f.expected_gain_us / max(ctx.n_steps, 1), 0.0),
                gain_us=f.expected_gain_us / max(ctx.n_steps, 1), gain_low_us=f.expected_gain_us / max(ctx.n_steps, 1),
                gain_high_us=f.expected_gain_us / max(ctx.n_steps, 1),
            )  # fmt: skip
            out.append(
                replace(
                    f,
                    expected_gain_low_us=f.expected_gain_us,
                    expected_gain_high_us=f.expected_gain_us,
                    prediction=pred,
                )
            )
            continue
        n = max(ctx.n_steps, 1)
        gains = sorted(max(res.gain(v), 0.0) for v in VARIANTS)
        nominal = min(max(res.gain(Variant.NOMINAL), gains[0]), gains[-1])
        pred = Prediction(
            fix=p.fix,
            basis="replay",
            model=p.model,
            step_us=step,
            predicted_step_us=max(step - nominal / n, 0.0),
            gain_us=nominal / n,
            gain_low_us=gains[0] / n,
            gain_high_us=gains[-1] / n,
            blocked_by=",".join(b.value for b in p.blocked_by),
            part=p.part,
        )
        out.append(
            replace(
                f,
                expected_gain_us=nominal,
                expected_gain_low_us=gains[0],
                expected_gain_high_us=gains[-1],
                gain_note=f"replayed: {p.model}",
                prediction=pred,
            )
        )
    return out


def joint(ctx: AnalysisContext, findings: Sequence[Finding]) -> Outcome | None:
    """The window replayed with the first fixes of all `findings` applied together."""
    present = {f.category for f in findings}
    plans = []
    for f in findings:
        p = plan_for(ctx, f, present) if ctx.graph is not None else None
        if p is not None:
            plans.append(p)
    return outcome(ctx, plans) if plans else None
