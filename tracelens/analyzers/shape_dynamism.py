"""shape_dynamism: question 4, do changing shapes defeat compilation,
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

The sites themselves are derived data (tracelens.derive.shapes); torch.compile's own
regions, recompiles and graph breaks are tracelens.analyzers.compilation's.
"""

from __future__ import annotations

from dataclasses import dataclass

from tracelens.analyzers.base import LOW_SHARE, Category, Fact, Found, Place
from tracelens.derive.context import AnalysisContext
from tracelens.derive.host_calls import one_per_call
from tracelens.derive.shapes import ShapeSite, ShapeVariation, shape_variation

MAX_SITES = 8


@dataclass(frozen=True)
class ShapeFacts:
    sites: int  # op sites whose shapes change at a cost
    top_op: str
    top: ShapeVariation
    excess_us: float  # host time of new shapes beyond a repeat
    graph_launches: int  # cudaGraphLaunch calls in the window (0: no CUDA graphs)
    syncs: int  # host syncs in the window (what keeps CUDA graphs from capturing the step)
    alloc_calls: int  # allocator calls at these sites


@dataclass(frozen=True)
class ShapeSiteFacts:
    op: str
    variation: ShapeVariation
    steps: int


def analyze(ctx: AnalysisContext) -> list[Found[ShapeFacts, ShapeSiteFacts]]:
    dev = ctx.ledger.primary
    # Shapes that vary at no measured cost (the inputs being built, a padded batch) are no
    # finding: the allocation finding names them where they cost allocator calls.
    sites = [s for s in ctx.shape_sites if s.idle_us > 0]
    # Under half a percent of the window is noise next to step-to-step variation (one
    # late batch of another size): no finding.
    if dev is None or not sites or ctx.share(sum(s.idle_us for s in sites)) < LOW_SHARE:
        return []
    idle = sum(s.idle_us for s in sites)
    excess = sum(s.excess_us for s in sites)
    graphs = ctx.graph_launches
    top = sites[0]
    facts = ShapeFacts(
        sites=len(sites),
        top_op=top.op,
        top=shape_variation(top.shapes),
        excess_us=excess,
        graph_launches=graphs,
        syncs=0 if graphs else _window_syncs(ctx),
        alloc_calls=sum(s.alloc_calls for s in sites),
    )
    places = tuple(_place(s) for s in sites[:MAX_SITES])
    return [
        Found(
            category=Category.SHAPE_DYNAMISM,
            time_us=idle,
            expected_gain_us=idle,
            facts=facts,
            evidence=(
                Fact("sites", len(sites), "count"),
                Fact("top_site_shapes", top.distinct, "count"),
                Fact("new_shape_calls", sum(s.new_calls for s in sites), "count"),
                Fact("new_shape_excess_us", excess, "us"),
                Fact("idle_us", idle, "us"),
                Fact("steps", ctx.n_steps, "count"),
            ),
            places=places,
            sources=tuple(dict.fromkeys(p.source for p in places if p.source is not None)),
            device=dev.device,
            tags=("cuda_graphs",) if graphs else (),
        )
    ]


def _place(s: ShapeSite) -> Place[ShapeSiteFacts]:
    return Place(
        count=s.calls,
        time_us=s.idle_us,
        facts=ShapeSiteFacts(s.op, shape_variation(s.shapes), len(s.steps)),
        host_us=s.excess_us,
        ops=(s.op,),
        source=s.source,
        steps=tuple(sorted(s.steps)),
        kind="new_shape_planning",
    )


def _window_syncs(ctx: AnalysisContext) -> int:
    dev = ctx.ledger.primary
    rows = one_per_call(ctx.model, ctx.blocking_calls)
    if dev is None or not len(rows):
        return 0
    ts = ctx.model.host["ts"].to_numpy()[rows]
    return int(((ts >= dev.window_start) & (ts < dev.window_end)).sum())
