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

from tracelens.analyzers.base import LOW_SHARE, Category, Finding, Metric, Site, severity_for
from tracelens.derive.context import AnalysisContext
from tracelens.derive.host_calls import one_per_call
from tracelens.derive.shapes import ShapeSite, describe_shapes
from tracelens.domain import fmt_us

MAX_SITES = 8


def analyze(ctx: AnalysisContext) -> list[Finding]:
    dev = ctx.ledger.primary
    if dev is None:
        return []
    found = _shape_finding(ctx, list(ctx.shape_sites), ctx.graph_launches)
    return [found] if found is not None else []


def _window_syncs(ctx: AnalysisContext) -> int:
    dev = ctx.ledger.primary
    rows = one_per_call(ctx.model, ctx.blocking_calls)
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
