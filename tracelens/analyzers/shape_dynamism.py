"""shape_dynamism and compilation: question 4, do changing shapes defeat compilation,
CUDA graphs or the allocator?

`shape_dynamism`: per op site (the outermost op and the user's source line), the
distinct input shapes across the window's steps. A shape the program has not used
before makes the libraries plan again: cuDNN builds an execution plan for each new
attention shape (37-65 ms of host time per new sequence length on the H200 samples,
0.07-0.24 ms for a repeat), cuBLAS picks a kernel per GEMM shape, the caching allocator
finds no block of that size. The cost is the GPU idle while the host sits in such a
first call, beyond what a repeat of the op costs: host-bound time (the finding refines
host_bound). Changing shapes also mean no CUDA-graph capture and recompiles under
torch.compile: the advice says so.

`compilation`: torch.compile's compiled regions (`Torch-Compiled Region: G/N`: frame G,
N-th compile of it), recompilations (a new N inside the window), compile time inside
the window (the ledger's `compilation` cause: the GPU idles while Dynamo and Inductor
run), and graph breaks (eager ops run inside a region but outside its compiled graphs:
the data-dependent ones, `x[mask]`/nonzero/.item(), are what keeps the graphs apart;
their wait is the host_sync finding's time, named here and not counted again). CUDA
graph replays (`cudaGraphLaunch`) are recognised: no advice to capture what is already
captured.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field

import msgspec
import numpy as np

from tracelens.analyzers.base import LOW_SHARE, Category, Finding, Metric, Site, severity_for
from tracelens.analyzers.context import AnalysisContext
from tracelens.derive.ledger import blocking_call_rows, merge_intervals, overlap, total
from tracelens.domain import ALLOC_APIS, COMPILED_REGION, GRAPH_LAUNCH_APIS, fmt_us
from tracelens.model.schema import Kind
from tracelens.model.sources import PySource, user_source
from tracelens.model.trace import TraceModel, name_matches

MAX_SITES = 8
#: Outermost ops looked at for shapes (a record_shapes trace of a big model has
#: hundreds of thousands; the window's first ones tell the story).
MAX_OP_ROWS = 200_000
#: A first call with a new shape that costs this much more host time than a repeat of
#: the op is planning for the shape (cuDNN's plan build, cuBLAS's heuristics), not
#: dispatch jitter: one eager op's dispatch is 5-30 µs.
NEW_SHAPE_MIN_EXCESS_US = 500.0
#: An op site "changes shape" when it shows at least this many distinct input shapes
#: inside the window.
MIN_DISTINCT_SHAPES = 2

#: Names of the rows torch.compile adds around compiled code (bookkeeping, not eager ops).
GRAPH_CALL_MARKERS = ("## Call CompiledFxGraph", "CompiledFunction", "## Call CompiledFunction")
COMPILE_BOOKKEEPING = (
    COMPILED_REGION,
    "TorchDynamo Cache Lookup",
    "Pregraph bytecode",
    "AOTDispatcher",
    "## ",
    "CompiledFunction",
)
#: One compile of a frame: the ranges Dynamo opens for it (no-stack traces), or its
#: Python frame (with_stack traces).
COMPILE_START_MARKERS = ("_compile.compile_inner (dynamo_timed)", "torch/_dynamo/convert_frame.py")
COMPILE_START_FUNCS = ("_compile", "compile_inner")
#: Dynamo's default recompile limit: after 8 compiles of one frame it runs it eagerly.
RECOMPILE_LIMIT = 8
#: Ops whose output shape depends on the data: Dynamo cannot trace through them (a graph
#: break) and they wait for the GPU (a host sync).
DATA_DEPENDENT_OPS = (
    "aten::nonzero",
    "aten::masked_select",
    "aten::unique",
    "aten::_unique2",
    "aten::unique_consecutive",
    "aten::item",
    "aten::_local_scalar_dense",
    "aten::repeat_interleave",
    "aten::is_nonzero",
)
_REGION_RE = re.compile(re.escape(COMPILED_REGION) + r": (\d+)/(\d+)")


@dataclass
class ShapeSite:
    """One op site whose input shapes change inside the window."""

    op: str
    source: PySource | None
    shapes: list[bytes] = field(default_factory=list)  # raw Input Dims per call in the window
    steps: set[int] = field(default_factory=set)
    calls: int = 0
    new_calls: int = 0  # calls with a shape the trace had not shown before
    new_steps: set[int] = field(default_factory=set)  # the steps those calls are in
    excess_us: float = 0.0  # host time of new-shape calls beyond a repeat's
    idle_us: float = 0.0  # GPU idle (host-bound) while the host was in those calls
    alloc_calls: int = 0

    @property
    def distinct(self) -> int:
        return len(set(self.shapes))


def analyze(ctx: AnalysisContext) -> list[Finding]:
    dev = ctx.ledger.primary
    if dev is None:
        return []
    out: list[Finding] = []
    sites = shape_sites(ctx)
    graphs = _graph_launches(ctx)
    shape_f = _shape_finding(ctx, sites, graphs)
    if shape_f is not None:
        out.append(shape_f)
    comp_f = _compilation_finding(ctx, graphs)
    if comp_f is not None:
        out.append(comp_f)
    return out


# -- shape sites --------------------------------------------------------------------------


def _step_of(ctx: AnalysisContext, ts: np.ndarray) -> np.ndarray:
    spans = sorted(ctx.window.steps, key=lambda s: s.start_us)
    if not spans:
        return np.zeros(len(ts), dtype=np.int64)
    starts = np.array([s.start_us for s in spans])
    k = np.clip(np.searchsorted(starts, ts, side="right") - 1, 0, None)
    return np.array([spans[int(i)].index for i in k], dtype=np.int64)


def shape_sites(ctx: AnalysisContext) -> list[ShapeSite]:
    """Op sites whose input shapes change inside the window, most costly first."""
    key = ("shape_sites", ctx.window.start_us, ctx.window.end_us)
    memo = ctx.model.memo
    if key in memo:
        return list(memo[key])
    sites = _shape_sites(ctx)
    memo[key] = sites
    return list(sites)


def _shape_sites(ctx: AnalysisContext) -> list[ShapeSite]:
    model = ctx.model
    dev = ctx.ledger.primary
    if dev is None:
        return []
    host = model.host
    kind = host["kind"].to_numpy()
    rows_all = np.arange(len(host))
    root = host["op_root"].to_numpy()
    is_op = (kind == int(Kind.CPU_OP)) & (root == rows_all)
    is_op &= ~name_matches(host["name"], lambda n: n.startswith(COMPILE_BOOKKEEPING))
    rows = np.flatnonzero(is_op)[:MAX_OP_ROWS]
    if not len(rows):
        return []
    shapes_col = host["shapes"].to_numpy()
    ts = host["ts"].to_numpy()
    dur = host["dur"].to_numpy()
    names = model.arrays
    w0, w1 = dev.window_start, dev.window_end
    # Every outermost op in time order: a shape is new for an op name the first time the
    # trace shows it (warm-up included, so the window's repeats are repeats).
    order = rows[np.argsort(ts[rows], kind="stable")]
    calls = _shape_calls(shapes_col[order], names.name_codes[order])
    if calls is None:
        return []
    keep, dims_code, dims_list, new_all = calls
    order, codes = order[keep], names.name_codes[order][keep].astype(np.int64)
    t_all = ts[order]
    in_window = (w0 <= t_all) & (t_all < w1)
    if not bool(in_window.any()):
        return []
    # Names with MIN_DISTINCT_SHAPES or more distinct dims among the window's calls.
    n_dims = len(dims_list)
    pairs = np.unique(codes[in_window] * n_dims + dims_code[in_window])
    per_code = np.bincount(pairs // n_dims)
    table = names.name_table
    vary_code = np.zeros(len(table), dtype=bool)
    vary_code[: len(per_code)] = per_code >= MIN_DISTINCT_SHAPES
    varying = {table[c] for c in np.flatnonzero(vary_code).tolist()}
    if not varying:
        return []
    of_varying = vary_code[codes]
    repeat_durs: dict[str, list[float]] = defaultdict(list)
    repeats = ~new_all & of_varying
    for code, d in zip(codes[repeats].tolist(), dur[order[repeats]].tolist(), strict=True):
        repeat_durs[table[code]].append(float(d))
    # The window's calls of the varying names, in time order.
    picked_at = in_window & of_varying
    picked = [
        (r, table[code], dims_list[k], bool(nw))
        for r, code, k, nw in zip(
            order[picked_at].tolist(),
            codes[picked_at].tolist(),
            dims_code[picked_at].tolist(),
            new_all[picked_at].tolist(),
            strict=True,
        )
    ]
    baseline = {
        n: float(np.median(repeat_durs[n])) if repeat_durs[n] else min(dur[r] for r, m, _, _ in picked if m == n)
        for n in varying
    }
    gaps = dev.gaps[dev.gaps["cause"] == "host_bound"]
    gap_iv = gaps[["start", "end"]].to_numpy() if len(gaps) else np.empty((0, 2))
    alloc_rows = np.flatnonzero(
        np.isin(kind, [int(Kind.RUNTIME), int(Kind.DRIVER)]) & name_matches(host["name"], ALLOC_APIS.__contains__)
    )
    alloc_by_root: dict[int, int] = defaultdict(int)
    for a in root[alloc_rows].tolist():
        if a >= 0:
            alloc_by_root[a] += 1
    picked_rows = np.array([r for r, _, _, _ in picked], dtype=np.int64)
    steps = _step_of(ctx, ts[picked_rows])
    sites: dict[tuple[str, str], ShapeSite] = {}
    for (r, name, dims, new), step in zip(picked, steps.tolist(), strict=True):
        src = user_source(model, r)
        site_key = (name, src.label if src else "")
        site = sites.get(site_key)
        if site is None:
            site = sites[site_key] = ShapeSite(name, src)
        site.shapes.append(dims)
        site.steps.add(int(step))
        site.calls += 1
        site.alloc_calls += alloc_by_root.get(r, 0)
        if new:
            site.new_calls += 1
            site.new_steps.add(int(step))
            excess = float(dur[r]) - baseline[name]
            if excess >= NEW_SHAPE_MIN_EXCESS_US:
                site.excess_us += excess
                idle = float(overlap(gap_iv, np.array([ts[r]]), np.array([ts[r] + dur[r]]))[0]) if len(gap_iv) else 0.0
                site.idle_us += min(idle, excess)
    # A site whose shapes are new only in the window's first step calls the op with the
    # same few shapes every step (a 2021 ResNet trace: images and labels copied by one
    # `.to(device)` line, [32, 3, 224, 224] and [32]): nothing changes from step to step.
    # With one step (or none) there is nothing to compare, so every varying site counts.
    first = int(steps.min()) if len(steps) else 0
    several = len({int(s) for s in steps}) > 1
    out = [
        s for s in sites.values() if s.distinct >= MIN_DISTINCT_SHAPES and (not several or s.new_steps - {first})
    ]
    out.sort(key=lambda s: (s.idle_us, s.distinct, s.calls), reverse=True)
    return out


def _shape_calls(
    records: np.ndarray, codes: np.ndarray
) -> tuple[np.ndarray, np.ndarray, list[bytes], np.ndarray] | None:
    """For ops in time order (their shape-args records and name codes): which have input
    dims (keep), each kept op's dims as an index into the distinct dims (dims_code, dims),
    and whether it is the first op of its name with those dims (new). None when no op has
    dims. The loader shares one record among the ops with the same shape args, so dims
    are read once per record (found by identity), not once per op."""
    if not len(records):
        return None
    ids = np.fromiter(map(id, records), dtype=np.uint64, count=len(records))
    uniq, first, inverse = np.unique(ids, return_index=True, return_inverse=True)
    index: dict[bytes, int] = {}
    rec_dims = np.full(len(uniq), -1, dtype=np.int64)
    for i, at in enumerate(first.tolist()):
        args = records[at]
        if args is None:
            continue
        dims = bytes(args.input_dims) or bytes(args.input_dims_2021)
        if dims and dims != b"[]":
            rec_dims[i] = index.setdefault(dims, len(index))
    per_op = rec_dims[inverse.reshape(-1)]
    keep = per_op >= 0
    if not bool(keep.any()):
        return None
    dims_code = per_op[keep]
    key = codes[keep].astype(np.int64) * len(index) + dims_code
    new = np.zeros(len(key), dtype=bool)
    new[np.unique(key, return_index=True)[1]] = True  # the first op of each (name, dims)
    return keep, dims_code, list(index), new


def _tensor_dims(raw: bytes) -> list[tuple[int, ...] | None]:
    """Each input's dims (None for an input that is not a tensor)."""
    try:
        dims = msgspec.json.decode(raw)
    except msgspec.DecodeError:
        return []
    return [
        tuple(d) if isinstance(d, list) and d and all(isinstance(x, int) for x in d) else None
        for d in (dims if isinstance(dims, list) else [])
    ]


def describe_shapes(shapes: list[bytes]) -> str:
    """ "dim 2 of [8, 8, N, 64] takes 10 values (64..512)", naming the input that varies
    (attention's query can stay [8, 16, 1, 64] while its key grows), or a few shapes."""
    sets = [d for d in (_tensor_dims(s) for s in dict.fromkeys(shapes)) if any(x is not None for x in d)]
    if not sets:
        return f"{len(set(shapes))} input shapes"
    width = max(len(d) for d in sets)
    # The tensor input taking the most distinct dims is the one to show (in a decode
    # step the query goes 32 -> 1 once while the key grows every step); the first on ties.
    varying = [
        i
        for i in range(width)
        if all(i < len(d) and d[i] is not None for d in sets) and len({d[i] for d in sets}) > 1
    ]
    arg = max(varying, key=lambda i: len({d[i] for d in sets}), default=None)
    if arg is None:
        return f"{len(set(shapes))} input shapes"
    dims = [t for d in sets if (t := d[arg]) is not None]
    label = f"input {arg + 1}" if width > 1 and arg > 0 else ""
    if len({len(d) for d in dims}) == 1:
        moving = [j for j in range(len(dims[0])) if len({d[j] for d in dims}) > 1]
        if len(moving) == 1:
            j = moving[0]
            vals = sorted({d[j] for d in dims})
            pattern = ", ".join("N" if k == j else str(x) for k, x in enumerate(dims[0]))
            of = f"{label} [{pattern}]" if label else f"[{pattern}]"
            return f"dim {j} of {of} takes {len(vals)} values ({vals[0]}..{vals[-1]})"
    distinct = list(dict.fromkeys(dims))
    shown = "; ".join(str(list(d)) for d in distinct[:3])
    lead = f"{label}: " if label else ""
    return f"{len(distinct)} input shapes ({lead}{shown}{'; ...' if len(distinct) > 3 else ''})"


def _graph_launches(ctx: AnalysisContext) -> int:
    dev = ctx.ledger.primary
    host = ctx.model.host
    if dev is None or not len(host):
        return 0
    kind = host["kind"].to_numpy()
    ts = host["ts"].to_numpy()
    sel = np.isin(kind, [int(Kind.RUNTIME), int(Kind.DRIVER)]) & name_matches(
        host["name"], GRAPH_LAUNCH_APIS.__contains__
    )
    return int((sel & (ts >= dev.window_start) & (ts < dev.window_end)).sum())


def _window_syncs(ctx: AnalysisContext) -> int:
    dev = ctx.ledger.primary
    rows = blocking_call_rows(ctx.model)
    if dev is None or not len(rows):
        return 0
    ts = ctx.model.host["ts"].to_numpy()[rows]
    return int(((ts >= dev.window_start) & (ts < dev.window_end)).sum())


def _shape_finding(ctx: AnalysisContext, sites: list[ShapeSite], graphs: int) -> Finding | None:
    dev = ctx.ledger.primary
    sites = [s for s in sites if s.idle_us > 0]
    # Under half a percent of the window is noise next to step-to-step variation (one
    # late batch of another size): no finding.
    if dev is None or not sites or ctx.share(sum(s.idle_us for s in sites)) < LOW_SHARE:
        # Shapes that vary at no measured cost (the inputs being built, a padded batch)
        # are no finding: the allocation finding names them where they cost allocator calls.
        return None
    idle = sum(s.idle_us for s in sites)
    excess = sum(s.excess_us for s in sites)
    n_steps = ctx.n_steps
    top = sites[0]
    costly = [s for s in sites if s.idle_us > 0]
    share = ctx.share(idle)
    where = top.source.where if top.source else ""
    if costly:
        title = (
            f"Input shapes change from step to step at {len(sites)} op site(s); the first call with each new "
            f"shape costs the host {fmt_us(excess)} beyond a repeat, and the GPU idles {fmt_us(idle)} "
            f"({share:.0%} of the window) meanwhile, most in {top.op} {where} ({describe_shapes(top.shapes)})"
        )
    else:
        title = (
            f"Input shapes change inside the window at {len(sites)} op site(s) ({top.op} {where}: "
            f"{describe_shapes(top.shapes)}); no new-shape cost measured"
        )
    advice = [
        "Pad the varying dimension to a few bucket sizes (e.g. multiples of 64 or powers of two): every shape is "
        "then planned once, in the warm-up, and reused.",
    ]
    if costly:
        advice.append(
            f"Each new shape makes the library plan again ({top.op}: cuDNN builds an execution plan per attention "
            "shape); with a handful of buckets that cost is paid once per bucket. Where the key/value length grows "
            "(a decode loop), attend over the whole preallocated cache with a mask (one shape), or grow it in "
            "buckets."
            if "attention" in top.op
            else f"Each new shape makes {top.op} plan again (kernel selection per shape); with a handful of "
            "buckets that cost is paid once per bucket."
        )
    if graphs:
        advice.append(f"The step already replays CUDA graphs ({graphs:,} cudaGraphLaunch calls).")
    else:
        blockers = [f"{len(sites)} op site(s) change shape"]
        syncs = _window_syncs(ctx)
        if syncs:
            blockers.append(f"{syncs:,} host syncs")
        allocs = sum(s.alloc_calls for s in sites)
        if allocs:
            blockers.append(f"{allocs:,} allocator calls at these sites")
        advice.append(
            "CUDA graphs cannot capture this step as it is (" + ", ".join(blockers) + "): a graph replays fixed "
            "shapes and addresses. With bucketed shapes, capture one graph per bucket "
            "(torch.compile(mode='reduce-overhead') does this)."
        )
    advice.append(
        "Under torch.compile, varying shapes recompile: use dynamic=True or torch._dynamo.mark_dynamic(x, dim) for "
        "the varying dimension, or the same buckets."
    )
    out_sites = tuple(
        Site(
            description=f"{s.op}: {describe_shapes(s.shapes)} over {len(s.steps)} step(s)",
            count=s.calls,
            time_us=s.idle_us,
            host_us=s.excess_us,
            ops=(s.op,),
            source=s.source,
            steps=tuple(sorted(s.steps)),
            kind="new_shape_planning" if s.idle_us > 0 else "varying_shape",
        )
        for s in sites[:MAX_SITES]
    )
    return Finding(
        category=Category.SHAPE_DYNAMISM,
        severity=severity_for(share),
        title=title,
        time_us=idle,
        share=share,
        advice="\n".join(advice),
        expected_gain_us=idle,
        gain_note="the GPU idle while the host sits in first calls with new shapes, beyond a repeat's host time: "
        "gone when every shape was seen in the warm-up",
        evidence=(
            Metric("op sites whose shapes change", len(sites), "count"),
            Metric("distinct shapes at the top site", top.distinct, "count"),
            Metric("calls with a new shape", sum(s.new_calls for s in sites), "count"),
            Metric("host time of new shapes beyond a repeat", excess, "us"),
            Metric("GPU idle in them", idle, "us"),
            Metric("steps in the window", n_steps, "count"),
        ),
        sites=out_sites,
        sources=tuple(dict.fromkeys(s.source for s in out_sites if s.source is not None)),
        device=dev.device,
        tags=("cuda_graphs",) if graphs else (),
    )


# -- torch.compile ----------------------------------------------------------------------------


@dataclass
class _Compiled:
    regions: dict[tuple[int, int], int]  # (frame, compile) -> calls in the window
    before: set[tuple[int, int]]  # (frame, compile) seen before the window
    compiles: int  # compiles started inside the window
    compile_host_us: float  # host time inside compiles in the window
    graph_calls_per_step: float
    eager: dict[str, list[int]]  # eager op name inside a region but outside its graphs -> rows
    triton_kernels: int


def _compiled(ctx: AnalysisContext) -> _Compiled | None:
    model = ctx.model
    dev = ctx.ledger.primary
    host = model.host
    if dev is None or not len(host):
        return None
    w0, w1 = dev.window_start, dev.window_end
    kind = host["kind"].to_numpy()
    ts = host["ts"].to_numpy()
    end = host["end"].to_numpy()
    names = host["name"]
    arrays = model.arrays
    region = name_matches(names, lambda n: n.startswith(COMPILED_REGION)) & (kind == int(Kind.CPU_OP))
    graph_call = name_matches(names, lambda n: n.startswith(GRAPH_CALL_MARKERS))
    k = model.kernels()
    in_win_k = (k["ts"] >= w0) & (k["ts"] < w1)
    triton = int(name_matches(k["name"], lambda n: n.startswith(("triton_", "triton__")))[in_win_k.to_numpy()].sum())
    if not region.any() and not graph_call.any() and not triton:
        return None
    regions: dict[tuple[int, int], int] = defaultdict(int)
    before: set[tuple[int, int]] = set()
    for r in np.flatnonzero(region):
        m = _REGION_RE.match(arrays.name(int(r)))
        if not m:
            continue
        key = (int(m.group(1)), int(m.group(2)))
        if ts[r] < w0:
            before.add(key)
        elif ts[r] < w1:
            regions[key] += 1
    starts = name_matches(
        names,
        lambda n: (
            n.startswith(COMPILE_START_MARKERS[0])
            or (n.startswith(COMPILE_START_MARKERS[1]) and n.rsplit(": ", 1)[-1] in COMPILE_START_FUNCS)
        ),
    ) & np.isin(kind, [int(Kind.CPU_OP), int(Kind.USER_ANNOTATION), int(Kind.PYTHON)])
    in_win = (ts >= w0) & (ts < w1)
    srows = np.flatnonzero(starts & in_win)
    compile_iv = merge_intervals(ts[srows], np.minimum(end[srows], w1)) if len(srows) else np.empty((0, 2))
    calls_in = np.flatnonzero(graph_call & in_win & (kind != int(Kind.GPU_ANNOTATION)))
    # Eager ops that ran inside a compiled region but outside any compiled graph: the
    # graph breaks' eager part (the outermost such op of each run).
    eager: dict[str, list[int]] = defaultdict(list)
    ops = np.flatnonzero((kind == int(Kind.CPU_OP)) & in_win & ~region & ~graph_call)
    bookkeeping = name_matches(names, lambda n: n.startswith(COMPILE_BOOKKEEPING) or n.endswith("(dynamo_timed)"))
    in_compile = overlap(compile_iv, ts[ops], end[ops]) > 0 if len(compile_iv) else np.zeros(len(ops), dtype=bool)
    for r, compiling in zip(ops, in_compile, strict=True):
        if compiling or bookkeeping[r]:
            continue
        parent = int(arrays.parent[r])
        if parent < 0 or not region[parent]:
            continue  # only ops whose direct enclosing range is the region itself
        eager[arrays.name(int(r))].append(int(r))
    return _Compiled(
        regions=dict(regions),
        before=before,
        compiles=len(srows),
        compile_host_us=total(compile_iv),
        graph_calls_per_step=len(calls_in) / ctx.n_steps,
        eager=dict(eager),
        triton_kernels=triton,
    )


def _inside(model: TraceModel, row: int, roots: set[int]) -> bool:
    return any(r in roots for r in model.host_chain(row))


def _data_dependent(model: TraceModel, rows: list[int]) -> bool:
    """Whether these eager ops (or ops inside them) have data-dependent output shapes."""
    roots = set(rows)
    host = model.host
    lo = float(host["ts"].to_numpy()[rows].min())
    hi = float(host["end"].to_numpy()[rows].max())
    ts = host["ts"].to_numpy()
    cand = np.flatnonzero(
        name_matches(host["name"], lambda n: n.startswith(DATA_DEPENDENT_OPS)) & (ts >= lo) & (ts <= hi)
    )
    return any(_inside(model, int(r), roots) for r in cand)


def _sync_idle_in(ctx: AnalysisContext, rows: list[int]) -> float:
    """GPU idle the ledger gives host_sync for syncs made inside these ops."""
    dev = ctx.ledger.primary
    if dev is None or not rows:
        return 0.0
    gaps = dev.gaps[dev.gaps["cause"] == "host_sync"]
    if gaps.empty:
        return 0.0
    roots = set(rows)
    sync_rows = gaps["sync_row"].to_numpy()
    mine = np.array([s >= 0 and _inside(ctx.model, int(s), roots) for s in sync_rows], dtype=bool)
    return float((gaps["end"].to_numpy() - gaps["start"].to_numpy())[mine].sum())


def _compilation_finding(ctx: AnalysisContext, graphs: int) -> Finding | None:
    dev = ctx.ledger.primary
    comp = _compiled(ctx)
    if dev is None or (comp is None and not graphs):
        return None
    idle = dev.by_cause.get("compilation", 0.0)
    share = ctx.share(idle)
    advice: list[str] = []
    evidence: list[Metric] = []
    sites: list[Site] = []
    tags: list[str] = []
    title_parts: list[str] = []
    if comp is not None:
        tags.append("compiled")
        frames = {g for g, _ in comp.regions} | {g for g, _ in comp.before}
        new = sorted(k for k in comp.regions if k not in comp.before and k[1] > 0)
        recompiled = sorted({g for g, _ in new})
        max_n = max((n for _, n in list(comp.regions) + list(comp.before)), default=0)
        evidence += [
            Metric("compiled frames", len(frames), "count"),
            Metric("compiled-graph calls per step", round(comp.graph_calls_per_step, 2), "number"),
            Metric("recompilations in the window", len(new), "count"),
            Metric("compiles started in the window", comp.compiles, "count"),
            Metric("host time compiling in the window", comp.compile_host_us, "us"),
            Metric("GPU idle while compiling", idle, "us"),
            Metric("Triton kernels in the window", comp.triton_kernels, "count"),
        ]
        if new or comp.compiles:
            n_rec = max(len(new), comp.compiles)
            title_parts.append(
                f"torch.compile recompiles {n_rec} time(s) inside the window"
                + (f" (frame {', '.join(map(str, recompiled))} reaches compile #{max_n})" if recompiled else "")
                + f": the GPU idles {fmt_us(idle)} ({share:.0%} of the window) while Dynamo and Inductor run"
            )
            advice.append(
                "A guard fails every step (usually a new input shape under dynamic=False): mark the varying "
                "dimension dynamic (torch.compile(dynamic=True) or torch._dynamo.mark_dynamic(x, dim)), or pad "
                "inputs to a few bucket sizes so each compiles once in the warm-up. TORCH_LOGS=recompiles names "
                "the failing guard."
            )
            if max_n + 1 >= RECOMPILE_LIMIT:
                advice.append(
                    f"Frame recompiles reach Dynamo's limit ({RECOMPILE_LIMIT}, "
                    "torch._dynamo.config.recompile_limit): after it the frame runs eagerly, uncompiled."
                )
            for g, n in new[:MAX_SITES]:
                sites.append(
                    Site(description=f"Torch-Compiled Region: {g}/{n} (compile #{n + 1} of frame {g})",
                         count=comp.regions[(g, n)], time_us=0.0, kind="recompile")
                )  # fmt: skip
        breaks = {n: rows for n, rows in comp.eager.items()}
        if breaks and comp.graph_calls_per_step > 1:
            dd = [n for n, rows in breaks.items() if _data_dependent(ctx.model, rows)]
            all_rows = [r for rows in breaks.values() for r in rows]
            linked = _sync_idle_in(ctx, all_rows)
            names = ", ".join(sorted(breaks, key=lambda n: -len(breaks[n]))[:4])
            title_parts.append(
                f"graph breaks: {comp.graph_calls_per_step:.0f} compiled graphs per step with eager {names} between "
                "them" + (f" (data-dependent: {', '.join(dd)})" if dd else "")
            )
            evidence.append(Metric("GPU idle at the breaks' host syncs (host_sync finding's time)", linked, "us"))
            advice.append(
                "Eager ops split the compiled graph: "
                + (
                    f"{', '.join(dd)} has a data-dependent output shape (x[mask], nonzero, .item()), which Dynamo "
                    "cannot trace and which waits for the GPU"
                    + (f" ({fmt_us(linked)} of GPU idle, counted in the host_sync finding)" if linked else "")
                    + ". Keep shapes static (torch.where(mask, x, 0) and a masked reduction instead of x[mask]), "
                    "or set torch._dynamo.config.capture_dynamic_output_shape_ops = True."
                    if dd
                    else "fix the graph break (TORCH_LOGS=graph_breaks names it) so the step is one graph."
                )
            )
            for op_name, rows in sorted(breaks.items(), key=lambda kv: -len(kv[1]))[:MAX_SITES]:
                src = user_source(ctx.model, rows[0])
                sites.append(
                    Site(description=f"eager {op_name} between compiled graphs", count=len(rows),
                         time_us=_sync_idle_in(ctx, rows), ops=(op_name,), source=src,
                         kind="graph_break_data_dependent" if op_name in dd else "graph_break")
                )  # fmt: skip
            tags.append("graph_breaks")
        if not title_parts:
            title_parts.append(
                f"Compiled with torch.compile ({len(frames)} frame(s), {comp.graph_calls_per_step:.0f} compiled "
                "graph call(s) per step): no recompiles or graph breaks inside the window"
                if frames
                else f"Compiled code ({comp.triton_kernels:,} Triton kernels in the window): no compile inside it"
            )
    if graphs:
        tags.append("cuda_graphs")
        evidence.append(Metric("cudaGraphLaunch calls in the window", graphs, "count"))
        title_parts.append(f"the step replays CUDA graphs ({graphs:,} cudaGraphLaunch calls)")
        advice.append("The step already replays CUDA graphs: nothing to capture again.")
    title = "; ".join(title_parts)
    if not title.startswith("torch"):
        title = title[0].upper() + title[1:]
    return Finding(
        category=Category.COMPILATION,
        severity=severity_for(share),
        title=title,
        time_us=idle,
        share=share,
        advice="\n".join(advice) if advice else "Nothing to change here: the compiled step runs without recompiling.",
        expected_gain_us=idle,
        gain_note="the GPU idle while torch.compile compiles inside the window: gone when every shape compiles "
        "once, in the warm-up",
        evidence=tuple(evidence),
        sites=tuple(sites),
        sources=tuple(dict.fromkeys(s.source for s in sites if s.source is not None)),
        device=dev.device,
        tags=tuple(tags),
    )
