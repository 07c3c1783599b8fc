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

from tracelens.analyzers.base import Category, Finding, Metric, Site, severity_for
from tracelens.derive.context import AnalysisContext
from tracelens.derive.intervals import merge_intervals, overlap, total
from tracelens.domain import COMPILE_BOOKKEEPING, COMPILED_REGION, GRAPH_CALL_MARKERS, fmt_us
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
                f"graph breaks: {comp.graph_calls_per_step:.0f} compiled graphs per {ctx.unit} with eager {names} "
                "between them" + (f" (data-dependent: {', '.join(dd)})" if dd else "")
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


def analyze(ctx: AnalysisContext) -> list[Finding]:
    if ctx.ledger.primary is None:
        return []
    found = _compilation_finding(ctx, ctx.graph_launches)
    return [found] if found is not None else []
