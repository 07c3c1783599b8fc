"""Plans for the fixes that change host work: syncs, CUDA graphs, pinned copies, DataLoader
workers, static shapes, recompiles, allocator calls, collectives (issue 25)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracelens.derive.context import AnalysisContext
from tracelens.derive.graph import DependencyGraph
from tracelens.derive.replay import Edit
from tracelens.derive.transforms import Variant, add_host_time
from tracelens.derive.transforms import collectives as t_collectives
from tracelens.derive.transforms import copies as t_copies
from tracelens.derive.transforms import graphs as t_graphs
from tracelens.derive.transforms import host as t_host
from tracelens.derive.transforms import kernels as t_kernels
from tracelens.derive.transforms import loader as t_loader
from tracelens.derive.transforms import syncs as t_syncs
from tracelens.domain import fmt_us
from tracelens.model.schema import Kind
from tracelens.model.trace import name_matches
from tracelens.predict.targets import (
    Plan,
    alloc_rows,
    first_dims,
    graph_of,
    intervals,
    launched_by,
    loader_intervals,
    numel,
    op_intervals,
    pageable_uploads,
    span,
    step_spans,
    user_syncs,
    window_rows,
    worker_loader_intervals,
)
from tracelens.report.enums import Category
from tracelens.report.findings import Finding


def sync_plan(ctx: AnalysisContext) -> Plan | None:
    rows, constructs = user_syncs(ctx)
    if not len(rows):
        return None
    root = ctx.model.host["op_root"].to_numpy()[rows]
    op_rows = np.where(root >= 0, root, rows)
    op_iv = intervals(ctx, op_rows.tolist())
    copies = launched_by(ctx, op_rows, (Kind.MEMCPY,))
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
        n_in = numel(ctx, op)
        if n_in <= 0:
            continue
        later = sync_ts[sync_ts > ts[r]]
        stop = float(later[0]) if len(later) else np.inf
        i = int(np.searchsorted(ts[tops], end[op], side="left"))
        j = int(np.searchsorted(ts[tops], stop, side="left"))
        cand = tops[i:j]
        cand = cand[tid[cand] == tid[op]]
        for o in cand.tolist():
            m = numel(ctx, o)
            if 0 < m < n_in:
                launched = launched_by(ctx, np.array([o]), (Kind.KERNEL,))[0]
                out_rows.append(launched)
                out_f.append(np.full(len(launched), n_in / m))
    if not out_rows:
        return np.empty(0, np.int64), np.empty(0)
    return np.concatenate(out_rows), np.concatenate(out_f)


def graph_plan(ctx: AnalysisContext, present: set[Category]) -> Plan | None:
    steps = step_spans(ctx)
    if not steps:
        return None
    op_iv = op_intervals(ctx)
    blocked: list[Category] = []
    sync_rows, _ = user_syncs(ctx)
    if len(sync_rows) and Category.HOST_SYNC in present:
        blocked.append(Category.HOST_SYNC)
    if len(alloc_rows(ctx)) and Category.ALLOCATION in present:
        blocked.append(Category.ALLOCATION)
    if Category.SHAPE_DYNAMISM in present:
        blocked.append(Category.SHAPE_DYNAMISM)
    if Category.COMPILATION in present:
        # A loop that recompiles changes its graphs: captured, every new shape re-records.
        blocked.append(Category.COMPILATION)

    def apply(edit: Edit, v: Variant) -> None:
        t_graphs.apply(graph_of(ctx), edit, v, steps, op_iv)

    return Plan(
        "cuda_graph",
        "each step's launches replaced by one cudaGraphLaunch (1.39 µs of host time a kernel under the profiler); "
        "the kernels run back to back 0.26 µs apart (as measured on an H200, whatever this trace's GPU)",
        apply,
        tuple(blocked),
    )


def pinned_plan(ctx: AnalysisContext) -> Plan | None:
    calls, copies, nbytes, rate = pageable_uploads(ctx)
    if not len(calls):
        return None

    g = graph_of(ctx)
    call_ts = g.ts[g.node_of_host_rows(calls)] if len(calls) else np.empty(0)
    # The work after a step's first pageable copy (the forward it feeds), not the batch
    # building before it (host_bound_pageable's numpy make_batch stays as measured).
    copied = []
    for s in step_spans(ctx):
        inside = call_ts[(call_ts >= s[0]) & (call_ts < s[1])]
        if len(inside):
            copied.append((float(inside.min()), float(s[1])))
    shares = (t_host.PAGEABLE_WARM_SHARE, t_host.PAGEABLE_WARM_SHARE_HIGH)

    def apply(edit: Edit, v: Variant) -> None:
        t_copies.apply(g, edit, v, calls, copies, np.clip(nbytes, 0, None), rate)
        t_host.warm_host(g, edit, v, np.array(copied, dtype=np.float64), shares)

    return Plan(
        "pinned_async_copy",
        "host-to-device copies from pinned memory with non_blocking=True: the call returns at once, the copy runs at "
        "the pinned rate (55 GB/s as measured on an H200) while the host launches on, and the host's work after it "
        "runs at the speed measured after a pinned copy (its caches no longer flushed by the staging copy)",
        apply,
    )


def _uploads(ctx: AnalysisContext) -> pd.DataFrame:
    """The batches' host-to-device copies: the uploads launched in the replayed span."""
    gpu = ctx.model.gpu
    lo, hi = span(ctx)
    mc = gpu[(gpu["kind"] == int(Kind.MEMCPY)) & (gpu["launch"] >= 0)]
    mc = mc[(mc["ts"] >= lo) & (mc["ts"] < hi)]
    return mc[mc["name"].astype(str).str.contains("HtoD")]


def _upload_bytes(ctx: AnalysisContext) -> float:
    return float(np.clip(_uploads(ctx)["bytes"].to_numpy(dtype=np.float64), 0, None).sum())


def loader_plan(ctx: AnalysisContext) -> Plan | None:
    iv = loader_intervals(ctx)
    if not len(iv):
        return None
    up = _uploads(ctx)
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


def workers_plan(ctx: AnalysisContext) -> Plan | None:
    """The loader already has workers that do not keep up: the wait in its `__next__`
    goes (derive/transforms/loader.py, keep_up)."""
    iv = worker_loader_intervals(ctx)
    if not len(iv):
        return None
    dur = iv[:, 1] - iv[:, 0]
    # Receiving a ready batch: what the calls that found one took, but never more than the
    # loader transform's measured cost of receiving the batch's bytes from a worker (where
    # every call waited: the H200 `workers` pair, num_workers=1, the shortest of its 6 calls
    # 7.75 ms; 1.43-2.51 ms with 6 workers, the model 1.82 ms for its 9.8 MB).
    nbytes = _upload_bytes(ctx) / max(len(iv), 1)
    ipc = t_loader.IPC_BASE_US + t_loader.IPC_US_PER_MB * nbytes / 1e6
    ready = min(float(np.percentile(dur, t_loader.READY_PERCENTILE)), ipc)
    receive = {Variant.LOW: 1.5 * ready, Variant.HIGH: min(float(dur.min()), ready)}
    span_us = float(ctx.replayed)

    def apply(edit: Edit, v: Variant) -> None:
        t_loader.keep_up(graph_of(ctx), edit, v, iv, receive.get(v, ready), span_us)

    return Plan(
        "dataloader_keeps_up",
        f"the DataLoader's workers keep up (more of them, persistent_workers, prefetch_factor, pin_memory): each "
        f"__next__ takes what receiving a ready batch took in this trace ({fmt_us(ready)}), the wait beyond it goes",
        apply,
    )


def shape_plan(ctx: AnalysisContext) -> Plan | None:
    sites = [s for s in ctx.shape_sites if s.excess]
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
        dims = [first_dims(ctx, r) for r in s.rows]
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
    launched = launched_by(ctx, ops, (Kind.KERNEL,)) if len(ops) else []
    k_rows = np.concatenate(launched) if launched else np.empty(0, np.int64)
    k_f = (
        np.concatenate([np.full(len(x), rows_f[int(o)]) for o, x in zip(ops, launched, strict=True)])
        if launched
        else np.empty(0)
    )
    intervals = np.array(iv, dtype=np.float64)
    planned = [s for s in step_spans(ctx) if ((intervals[:, 0] < s[1]) & (intervals[:, 1] > s[0])).any()]

    def apply(edit: Edit, v: Variant) -> None:
        scale = {Variant.LOW: 1.1, Variant.HIGH: 0.0}.get(v, 1.0)
        factors = 1.0 + (k_f - 1.0) * scale
        t_host.apply(graph_of(ctx), edit, v, intervals, low_share=0.95, kernel_rows=k_rows, kernel_factors=factors)
        t_host.warm_host(graph_of(ctx), edit, v, np.array(planned, dtype=np.float64))

    return Plan(
        "static_shapes",
        "one shape for every step (padded to the largest): no new cuDNN/cuBLAS plans in the loop, the padded kernels "
        "as much longer as the padding",
        apply,
    )


#: The percentile of an op's calls that stands for a warm repeat (see shape_plan).
WARM_CALL_PERCENTILE = 10


def compile_plan(ctx: AnalysisContext) -> Plan | None:
    from tracelens.domain import COMPILER_EXCLUDE, COMPILER_MARKERS

    host = ctx.model.host
    hit = name_matches(
        host["name"], lambda n: any(m in n for m in COMPILER_MARKERS) and not any(x in n for x in COMPILER_EXCLUDE)
    )
    rows = window_rows(ctx, np.flatnonzero(hit))
    if not len(rows):
        return None
    iv = intervals(ctx, rows.tolist())

    def apply(edit: Edit, v: Variant) -> None:
        g = graph_of(ctx)
        t_host.apply(g, edit, v, iv, low_share=0.9)
        # The compiler's own GPU work (Inductor benchmarking its kernels, the cache fills
        # between runs) goes with the compile, except at the LOW end (a compile still
        # happens once in the window): dyn_recompile launched 3,344 of its 3,384 kernels
        # (26.8 ms, 13.4 ms a step) from inside its compile ranges.
        if v != Variant.LOW:
            t_host.remove_launched_inside(g, edit, iv)

    return Plan(
        "no_recompiles", "torch.compile no longer compiles inside the loop (one shape, compiled in the warm-up)", apply
    )


#: Extra ops a preallocated cache's in-place write dispatches for each cat it replaces
#: (`cache[:, :, pos] = new`: a slice and a copy_; the kv pair on the H200 took
#: 0.8 ms more host time for 16 writes a step, about 2-3 ops of its median 16 µs each).
INPLACE_WRITE_OPS = 2


def allocation_plan(ctx: AnalysisContext) -> Plan | None:
    from tracelens.analyzers.allocation import CAT_OPS, cat_growth

    rows = alloc_rows(ctx)
    iv = intervals(ctx, rows.tolist())
    # empty_cache(): its Python frame's time goes too.
    host = ctx.model.host
    ec = window_rows(ctx, np.flatnonzero(name_matches(host["name"], lambda n: n.endswith(": empty_cache"))))
    if len(ec):
        iv = np.concatenate([iv, intervals(ctx, ec.tolist())])
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
    warmed = _after_first_free(ctx, rows)

    def apply(edit: Edit, v: Variant) -> None:
        g = graph_of(ctx)
        t_host.apply(g, edit, v, iv, low_share=0.5, kernel_rows=k_rows, kernel_factors=k_f)
        t_host.warm_host(g, edit, v, warmed, (t_host.FREE_WARM_SHARE, t_host.FREE_WARM_SHARE_HIGH))
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


def _after_first_free(ctx: AnalysisContext, rows: np.ndarray) -> np.ndarray:
    """From each step's first cudaFree (a wait for the device) to the end of the next step
    (empty_cache() at a step's end slows the next one's work): the host's work there runs
    at FREE_WARM_SHARE of its time once the frees go."""
    from tracelens.domain import FREE_APIS

    host = ctx.model.host
    frees = rows[name_matches(host["name"].iloc[rows], FREE_APIS.__contains__)] if len(rows) else rows
    if not len(frees):
        return np.empty((0, 2))
    g = graph_of(ctx)
    ts = g.ts[g.node_of_host_rows(frees)]
    steps = step_spans(ctx)
    spans = []
    for i, (lo, hi) in enumerate(steps):
        inside = ts[(ts >= lo) & (ts < hi)]
        if len(inside):
            spans.append((float(inside.min()), float(steps[min(i + 1, len(steps) - 1)][1])))
    return np.array(spans, dtype=np.float64).reshape(-1, 2)


#: The overlap transform models a finding whose time is at least this share collective
#: kernels on the replayed GPU.
COLLECTIVE_KERNEL_SHARE = 0.2


def _fact(f: Finding, key: str) -> float:
    v = next((m.value for m in f.evidence if m.id == key), 0.0)
    return float(v) if isinstance(v, (int, float)) else 0.0


def _straggler_first(f: Finding) -> bool:
    """The communication advice leads with the straggler: waiting for another rank is over
    a fifth of the idle inside collectives (explain/communication.py's rule)."""
    return _fact(f, "waiting_for_ranks_us") > 0.2 * max(_fact(f, "idle_in_collectives_us"), 1.0)


def estimate_part(f: Finding) -> str:
    """Which part of a finding an estimated gain is, where it is not what every fix the
    advice gives would save (issue 34 §4): gloo's wait for a slower rank, which the
    straggler's fix removes and NCCL does not."""
    if f.category == Category.COMMUNICATION and _straggler_first(f) and "NCCL backend" in f.advice:
        return (
            "the wait for a slower rank (gloo's exchange beyond what its data needs); the transport through the "
            "host that NCCL removes is not in it"
        )
    return ""


def comm_plan(ctx: AnalysisContext, f: Finding) -> Plan | None:
    from tracelens.analyzers.communication import GLOO_ALGBW_BYTES_PER_S
    from tracelens.domain import is_collective_kernel

    host = ctx.model.host
    kind = host["kind"].to_numpy()
    # gloo's calls: a CPU op in some profilers, a record_function range in others (the H200
    # ranks_* captures, torch 2.11: `gloo:all_reduce` as a user annotation).
    is_op = np.isin(kind, [int(Kind.CPU_OP), int(Kind.USER_ANNOTATION)])
    gloo = window_rows(ctx, np.flatnonzero(is_op & name_matches(host["name"], lambda n: n.startswith("gloo:"))))
    # The advice leads with the straggler when waiting for another rank is over a fifth of
    # the idle inside collectives (explain/communication.py): NCCL is not its first fix
    # there, and the analyzer's estimate of that wait stays (plain_gloo_wait: 153 ms of
    # 228 ms is the wait, 84 ms the transport NCCL would remove).
    straggler_first = _straggler_first(f)
    if len(gloo) and len(ctx.model.gpu_activity()) and not straggler_first:
        # gloo moves CUDA tensors through the host; NCCL at NVLink/PCIe rates takes a
        # fraction of that. The transport part of each call is its bytes at gloo's rate
        # (capped by its duration); the rest is waiting for a slower rank, which NCCL
        # does not remove.
        ts, end = host["ts"].to_numpy(), host["end"].to_numpy()
        # Each call's message size as derive/collectives.py found it (nccl-tests' S), by
        # the host rows of its op and of gloo's exchange.
        call_bytes: dict[int, int] = {}
        for c in ctx.collectives.calls:
            for row in (c.root, c.exchange):
                if row >= 0 and c.nbytes:
                    call_bytes[row] = c.nbytes
        op_root = host["op_root"].to_numpy()
        sizes, last = [], 0
        for r in gloo.tolist():
            b = call_bytes.get(int(op_root[r])) or call_bytes.get(r) or last
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
    g = graph_of(ctx)
    nodes = g.node_of_gpu_rows(rows)
    in_graph = float((g.end - g.ts)[nodes[nodes >= 0]].sum()) * ctx.n_steps / max(ctx.replay_span[3], 1)
    if in_graph < COLLECTIVE_KERNEL_SHARE * f.time_us:
        # The finding's time is not in collective kernels here (waiting for another rank,
        # a CPU backend): overlapping kernels is not its fix; the analyzer's estimate stays.
        return None
    coll, exposed, share = overlap_targets(ctx, g, nodes[nodes >= 0])
    if not len(coll) or share <= 0:
        return None
    why = overlap_blocked(g, coll, exposed, share)

    def apply_k(edit: Edit, v: Variant) -> None:
        t_collectives.hide(graph_of(ctx), edit, v, coll, exposed, share)

    return Plan(
        "overlap_collectives",
        f"collectives overlapped with compute (DDP buckets, async_op): {share:.0%} of their exposed kernel time "
        f"hidden, as much as the compute of each step that overlaps no collective can cover{why}",
        apply_k,
    )


def overlap_targets(ctx: AnalysisContext, g: DependencyGraph, coll: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """The collective kernels' nodes, each one's exposed µs (no other GPU work of the device
    overlaps it) and the share of the exposed time the steps' free compute can hide
    (derive/transforms/collectives.py)."""
    from tracelens.derive.graph import GPU
    from tracelens.derive.transforms import covered, intersect, merged

    gpu_nodes = np.flatnonzero(g.kind == GPU)
    other = np.setdiff1d(gpu_nodes, coll)
    busy = merged(np.column_stack([g.ts[other], g.end[other]]))
    c_iv = merged(np.column_stack([g.ts[coll], g.end[coll]]))
    exposed = (g.end[coll] - g.ts[coll]) - covered(busy, g.ts[coll], g.end[coll])
    exposed = np.clip(exposed, 0.0, None)
    total = float(exposed.sum())
    if total <= 0:
        return coll, exposed, 0.0
    both = intersect(busy, c_iv)
    hidden = 0.0
    steps = step_spans(ctx) or [(float(g.ts.min()), float(g.end.max()))]
    for s0, s1 in steps:
        mine = (g.ts[coll] >= s0) & (g.ts[coll] < s1)
        e_s = float(exposed[mine].sum())
        if e_s <= 0:
            continue
        a, b = np.array([s0]), np.array([s1])
        free = float(covered(busy, a, b)[0] - covered(both, a, b)[0])
        hidden += min(e_s, max(free, 0.0))
    return coll, exposed, min(hidden / total, 1.0)


def host_share_of_critical_path(g: DependencyGraph, edit: Edit, r: object) -> float:
    """The share of the replay's critical path (back from the node that ends last) spent
    on host chains: each node's start is bound by its chain predecessor or an edge, its end
    by its own time or a wait."""
    from tracelens.derive.graph import END_END, END_START, HOST

    start, end = r.start, r.end  # type: ignore[attr-defined]
    assert edit.gap is not None and edit.dur is not None
    alive = edit.e_alive if edit.e_alive is not None else np.ones(len(g.e_src), dtype=bool)
    order = np.argsort(g.e_dst, kind="stable")
    dst_sorted = g.e_dst[order]
    ends = g.counted & ((g.kind != HOST) | g.chain_paces[g.chain])
    v = int(np.argmax(np.where(ends, end, -np.inf)))
    host_us = total = 0.0
    for _ in range(g.n):
        lo, hi = np.searchsorted(dst_sorted, v, "left"), np.searchsorted(dst_sorted, v, "right")
        ins = order[lo:hi]
        ins = ins[alive[ins]]
        nxt = -1
        waits = ins[g.e_type[ins] == END_END]
        if len(waits) and end[v] > start[v] + edit.dur[v] + 1.0:
            t = end[g.e_src[waits]] + g.e_delay[waits]
            k = int(np.argmax(t))
            if abs(t[k] - end[v]) < 1.0:
                nxt = int(g.e_src[waits][k])
        span = end[v] - start[v] if nxt < 0 else 0.0
        if nxt < 0:
            c = int(g.chain[v])
            if v > g.chain_first[c] and abs(end[v - 1] + edit.gap[v] - start[v]) < 1.0:
                nxt = v - 1
                span = end[v] - end[v - 1]
            for i in ins[g.e_type[ins] != END_END].tolist():
                u = int(g.e_src[i])
                t = (end[u] if g.e_type[i] == END_START else start[u]) + g.e_delay[i]
                if abs(t - start[v]) < 1.0:
                    nxt, span = u, end[v] - t + g.e_delay[i]
                    break
        total += max(span, 0.0)
        if g.kind[v] == HOST:
            host_us += max(span, 0.0)
        if nxt < 0:
            break
        v = nxt
    return host_us / total if total > 0 else 0.0


#: A replay that hides every hideable exposed microsecond and gains under this share of
#: them says why in the finding: what the work after the collectives waits for instead.
OVERLAP_GAIN_SHARE = 0.5


def overlap_blocked(g: DependencyGraph, coll: np.ndarray, exposed: np.ndarray, share: float) -> str:
    """Why hiding the collectives buys the step little, from the replay with all of the
    hideable time hidden ("" when it buys at least OVERLAP_GAIN_SHARE of it)."""
    from tracelens.derive.replay import replay

    base = replay(g)
    edit = Edit.of(g)
    t_collectives.hide(g, edit, Variant.HIGH, coll, exposed, share)
    after = replay(g, edit)
    hidden = share * float(exposed.sum())
    gain = base.steady_span_us - after.steady_span_us
    if hidden <= 0 or gain >= OVERLAP_GAIN_SHARE * hidden:
        return ""
    on_host = host_share_of_critical_path(g, edit, after)
    text = (
        f"; the replay gains only {fmt_us(gain)} of the {fmt_us(hidden)} hidden in the replayed steps: the work after "
        "the collectives does not start earlier"
    )
    if on_host >= 0.5:
        text += (
            f": {on_host:.0%} of the replayed steps' critical path is host work (the threads launching the kernels), "
            "so the host's launches (kernel-launch overhead and host-bound idle), not the collectives, set the "
            "step's pace"
        )
    return text


def host_bound_plan(ctx: AnalysisContext, f: Finding, present: set[Category]) -> Plan | None:
    """host_bound's first fix follows its advice: DataLoader workers, pinned copies, or a
    CUDA graph for per-op dispatch; other host work has no transform."""
    loader = next((m.value for m in f.evidence if m.label == "of it in data loading ops"), 0.0)
    if isinstance(loader, (int, float)) and loader > 0.2 * f.time_us:
        p = loader_plan(ctx) or workers_plan(ctx)
        if p is not None:
            return p
    copy_host = next((m.value for m in f.evidence if m.label == "host time in pageable copy calls"), 0.0)
    if isinstance(copy_host, (int, float)) and copy_host > 0.05 * f.time_us:
        p = pinned_plan(ctx)
        if p is not None:
            return p
    if "dispatching ops one by one" in f.advice:
        return graph_plan(ctx, present)
    return None
