"""memory_bound: question 3, is it moving far more data than it reuses?

From the roofline (tracelens.derive.roofline): the memory-bound kernels' time (the
ledger's busy-memory share: kernels overlapping on several streams count once), the
chains of back-to-back elementwise/norm passes a fusing compiler makes one (all but the
longest pass saved; tracelens.derive.fusion), copies and casts, and the other kernels'
distance to the bandwidth roof.
"""

from __future__ import annotations

from tracelens.analyzers.base import Category, Finding, Metric, Site, kernel_sites, severity_for
from tracelens.derive.context import AnalysisContext
from tracelens.derive.fusion import FUSIBLE_FAMILIES
from tracelens.derive.kernel_models import L2_ROOF_NAME
from tracelens.derive.roofline import KernelRoof, Roofline, gain_to_roof
from tracelens.domain import fmt_us
from tracelens.model.sources import user_source

MAX_SITES = 8
MAX_CHAINS = 8


def analyze(ctx: AnalysisContext) -> list[Finding]:
    roof = ctx.roofline
    if roof.peaks is None or not roof.kernels:
        return []
    found = _memory_finding(ctx, roof)
    return [found] if found is not None else []


def _memory_finding(ctx: AnalysisContext, roof: Roofline) -> Finding | None:
    """The memory-bound kernels: fusible chains, copies and casts, distance to the bandwidth roof."""
    assert roof.peaks is not None
    mem = [r for r in roof.kernels if r.bound == "memory"]
    # The ledger's share of the window: kernels overlapping on several streams count once.
    mem_time = ctx.ledger.capped("gpu_busy_memory", sum(r.bound_us for r in mem))
    if mem_time <= 0:
        return None
    elementwise = [r for r in mem if r.family in ("elementwise", "copy")]
    compiled = [r for r in mem if r.family == "compiled"]
    ew_time = sum(r.bound_us for r in elementwise)
    copies = [r for r in mem if r.family == "copy"]
    copy_time = sum(r.bound_us for r in copies)
    copy_bytes = sum(r.bytes for r in copies)
    # A chain of n passes fused makes about one: it saves all but its longest kernel.
    # Other memory-bound kernels can at best reach the bandwidth roof.
    chains = roof.chains
    chain_saved = sum(c.saved_us for c in chains)
    gain = chain_saved + sum(gain_to_roof(r) for r in mem if r.family not in FUSIBLE_FAMILIES)
    share = ctx.share(mem_time)
    chain_sites = tuple(
        Site(
            description=(
                f"{len(c.ops)} passes back to back: {' > '.join(op.split('::')[-1] for op in c.ops[:6])}"
                f"{' > ...' if len(c.ops) > 6 else ''}; "
                f"fused, about one pass ({fmt_us(c.saved_us)} saved)"
            ),
            count=c.count,
            time_us=c.time_us,
            ops=c.ops,
            source=user_source(ctx.model, c.first_row),
            kernels=c.kernels,
            kind="fusion_chain",
        )
        for c in chains[:MAX_CHAINS]
    )
    roof_sites = kernel_sites(mem, _memory_site, MAX_SITES)
    spilling = [r for r in mem if r.roof_name == L2_ROOF_NAME]
    return Finding(
        category=Category.MEMORY_BOUND,
        severity=severity_for(ctx.share(gain)),
        title=(
            f"{fmt_us(mem_time)} ({share:.0%}) of the profiled time is in memory-bound kernels; "
            f"{sum(c.count for c in chains)} chains of back-to-back elementwise/norm passes could fuse"
            if chains
            else f"{fmt_us(mem_time)} ({share:.0%}) of the profiled time is in memory-bound kernels, "
            f"{fmt_us(ew_time)} of it elementwise ops and copies"
        ),
        time_us=mem_time,
        share=share,
        advice=(
            "These kernels wait on memory, not arithmetic: fuse chains of elementwise ops so data "
            "makes one round trip instead of one per op (torch.compile does this; the chains are listed "
            "with their source), avoid copies and casts (.contiguous(), .to(dtype) inside the step), keep "
            "activations in bf16, and reuse buffers in place where autograd allows."
            + (
                f" {fmt_us(sum(r.bound_us for r in spilling))} is fp32 memory-efficient attention spilling "
                "registers: its spills fill the L2 port while DRAM idles. Run attention in bf16/fp16 "
                "(torch.autocast), where SDPA picks the flash or cuDNN kernels, which keep their tiles on chip."
                if spilling
                else ""
            )
        ),
        expected_gain_us=gain,
        gain_note=(
            "each chain of back-to-back passes fused into one (all but its longest kernel saved; on the "
            "H200 eager-vs-compiled case this over-estimated the saving by 11%) plus the other "
            "memory-bound kernels' distance to the bandwidth roof"
        ),
        evidence=(
            Metric("memory-bound kernel time", mem_time, "us"),
            Metric("elementwise and copy kernels", ew_time, "us"),
            Metric("time in fusible chains", sum(c.time_us for c in chains), "us"),
            Metric("saved by fusing the chains (estimate)", chain_saved, "us"),
            Metric("copies and casts", copy_time, "us"),
            Metric("bytes copied or cast", copy_bytes, "bytes"),
            Metric("bandwidth roof (bytes/s)", roof.peaks.bw, "bytes_per_s"),
            Metric("modelled share of kernel time", roof.coverage, "share"),
            Metric(
                "compiled (Triton) kernels, modelled from their buffers (FLOPs a guess)",
                sum(r.time_us for r in compiled),
                "us",
            ),
        ),
        sites=(chain_sites + roof_sites)[:MAX_SITES],
    )


def _memory_site(r: KernelRoof) -> str:
    if r.roof_name == L2_ROOF_NAME:
        return (
            f"{r.family or 'kernel'} {r.dtype}: register spills through L2 at {r.l2_share:.0%} of the L2 write port; "
            f"DRAM {r.bytes_per_s / 1e9:.0f} GB/s"
        )
    return (
        f"{r.family or 'kernel'}: {r.bytes_per_s / 1e9:.0f} GB/s "
        f"({r.roof_share:.0%} of the roof), {r.intensity:.2f} FLOP/B"
    )
