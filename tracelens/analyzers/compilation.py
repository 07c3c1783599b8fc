"""compilation: question 4 for torch.compile and CUDA graphs.

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
from dataclasses import dataclass

import numpy as np

from tracelens.analyzers.base import Category, Fact, Found, Place
from tracelens.derive.context import AnalysisContext
from tracelens.derive.intervals import merge_intervals, overlap, total
from tracelens.domain import COMPILE_BOOKKEEPING, COMPILED_REGION, GRAPH_CALL_MARKERS
from tracelens.model.schema import Kind
from tracelens.model.sources import user_source
from tracelens.model.trace import TraceModel, name_matches

#: One compile of a frame: the ranges Dynamo opens for it (no-stack traces), or its
#: Python frame (with_stack traces).
MAX_SITES = 8
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
    gaps = dev.gaps_of("host_sync")
    if gaps.empty:
        return 0.0
    roots = set(rows)
    sync_rows = gaps["sync_row"].to_numpy()
    mine = np.array([s >= 0 and _inside(ctx.model, int(s), roots) for s in sync_rows], dtype=bool)
    return float((gaps["end"].to_numpy() - gaps["start"].to_numpy())[mine].sum())


@dataclass(frozen=True)
class CompileFacts:
    compiled: bool  # torch.compile's regions, compiled-graph calls or Triton kernels seen
    frames: int  # compiled frames
    graph_calls_per_step: float
    unit: str  # the report's unit (AnalysisContext.unit)
    recompiles: tuple[tuple[int, int], ...]  # (frame, compile) first seen inside the window
    recompiled_frames: tuple[int, ...]
    max_compile: int  # the highest compile index N of any frame (its compile #N+1)
    compiles: int  # compiles started inside the window
    triton_kernels: int
    breaks: tuple[str, ...]  # eager ops between compiled graphs, the most frequent first
    data_dependent: tuple[str, ...]  # those with data-dependent output shapes
    break_sync_idle_us: float  # GPU idle at their host syncs (the host_sync finding's time)
    graph_launches: int  # cudaGraphLaunch calls in the window


@dataclass(frozen=True)
class CompileSite:
    """A recompile (`frame`, `compile`) or a graph break's eager op (`op`)."""

    frame: int = -1
    compile: int = -1
    op: str = ""


def analyze(ctx: AnalysisContext) -> list[Found[CompileFacts, CompileSite]]:
    dev = ctx.ledger.primary
    if dev is None:
        return []
    graphs = ctx.graph_launches
    comp = _compiled(ctx)
    if comp is None and not graphs:
        return []
    idle = dev.by_cause.get("compilation", 0.0)
    evidence: list[Fact] = []
    places: list[Place[CompileSite]] = []
    tags: list[str] = []
    frames: set[int] = set()
    new: list[tuple[int, int]] = []
    max_n = 0
    breaks: dict[str, list[int]] = {}
    dd: list[str] = []
    linked = 0.0
    if comp is not None:
        tags.append("compiled")
        frames = {g for g, _ in comp.regions} | {g for g, _ in comp.before}
        new = sorted(k for k in comp.regions if k not in comp.before and k[1] > 0)
        max_n = max((n for _, n in list(comp.regions) + list(comp.before)), default=0)
        evidence += [
            Fact("compiled_frames", len(frames), "count"),
            Fact("graph_calls_per_step", round(comp.graph_calls_per_step, 2), "number"),
            Fact("recompiles", len(new), "count"),
            Fact("compiles", comp.compiles, "count"),
            Fact("compile_host_us", comp.compile_host_us, "us"),
            Fact("idle_us", idle, "us"),
            Fact("triton_kernels", comp.triton_kernels, "count"),
        ]
        if new or comp.compiles:
            places += [
                Place(count=comp.regions[(g, n)], time_us=0.0, facts=CompileSite(g, n), kind="recompile")
                for g, n in new[:MAX_SITES]
            ]
        if comp.eager and comp.graph_calls_per_step > 1:
            breaks = comp.eager
            dd = [n for n, rows in breaks.items() if _data_dependent(ctx.model, rows)]
            linked = _sync_idle_in(ctx, [r for rows in breaks.values() for r in rows])
            evidence.append(Fact("break_sync_idle_us", linked, "us"))
            for op_name, rows in sorted(breaks.items(), key=lambda kv: -len(kv[1]))[:MAX_SITES]:
                places.append(
                    Place(count=len(rows), time_us=_sync_idle_in(ctx, rows), facts=CompileSite(op=op_name),
                          ops=(op_name,), source=user_source(ctx.model, rows[0]),
                          kind="graph_break_data_dependent" if op_name in dd else "graph_break")
                )  # fmt: skip
            tags.append("graph_breaks")
    if graphs:
        tags.append("cuda_graphs")
        evidence.append(Fact("graph_launches", graphs, "count"))
    facts = CompileFacts(
        compiled=comp is not None,
        frames=len(frames),
        graph_calls_per_step=comp.graph_calls_per_step if comp else 0.0,
        unit=ctx.unit,
        recompiles=tuple(new),
        recompiled_frames=tuple(sorted({g for g, _ in new})),
        max_compile=max_n,
        compiles=comp.compiles if comp else 0,
        triton_kernels=comp.triton_kernels if comp else 0,
        breaks=tuple(sorted(breaks, key=lambda n: -len(breaks[n]))),
        data_dependent=tuple(dd),
        break_sync_idle_us=linked,
        graph_launches=graphs,
    )
    return [
        Found(
            category=Category.COMPILATION,
            time_us=idle,
            expected_gain_us=idle,
            facts=facts,
            evidence=tuple(evidence),
            places=tuple(places),
            sources=tuple(dict.fromkeys(p.source for p in places if p.source is not None)),
            device=dev.device,
            tags=tuple(tags),
        )
    ]
