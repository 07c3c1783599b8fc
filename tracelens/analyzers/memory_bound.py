"""memory_bound: question 3, is it moving far more data than it reuses?

From the roofline (tracelens.derive.roofline): the memory-bound kernels' time (the
ledger's busy-memory share: kernels overlapping on several streams count once), the
chains of back-to-back elementwise/norm passes a fusing compiler makes one (all but the
longest pass saved; tracelens.derive.fusion), copies and casts, and the other kernels'
distance to the bandwidth roof.
"""

from __future__ import annotations

from dataclasses import dataclass

from tracelens.analyzers.base import Category, Fact, Found, Place, kernel_places
from tracelens.derive.context import AnalysisContext
from tracelens.derive.fusion import FUSIBLE_FAMILIES, FusionChain
from tracelens.derive.kernel_models import L2_ROOF_NAME
from tracelens.derive.roofline import KernelRoof, Roofline, gain_to_roof
from tracelens.model.sources import user_source

MAX_SITES = 8
MAX_CHAINS = 8


@dataclass(frozen=True)
class MemoryFacts:
    elementwise_us: float  # of the memory-bound time, elementwise ops and copies
    chains: int  # occurrences of fusible chains
    #: fp32 memory-efficient attention spilling registers through L2 (None: no such kernel)
    spilling_us: float | None


def analyze(ctx: AnalysisContext) -> list[Found[MemoryFacts, FusionChain | KernelRoof]]:
    roof = ctx.roofline
    if roof.peaks is None or not roof.kernels:
        return []
    found = _memory_finding(ctx, roof)
    return [found] if found is not None else []


def _memory_finding(ctx: AnalysisContext, roof: Roofline) -> Found[MemoryFacts, FusionChain | KernelRoof] | None:
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
    chain_places: tuple[Place[FusionChain | KernelRoof], ...] = tuple(
        Place(
            count=c.count,
            time_us=c.time_us,
            facts=c,
            ops=c.ops,
            source=user_source(ctx.model, c.first_row),
            kernels=c.kernels,
            kind="fusion_chain",
        )
        for c in chains[:MAX_CHAINS]
    )
    spilling = [r for r in mem if r.roof_name == L2_ROOF_NAME]
    return Found(
        category=Category.MEMORY_BOUND,
        time_us=mem_time,
        expected_gain_us=gain,
        facts=MemoryFacts(
            ew_time, sum(c.count for c in chains), sum(r.bound_us for r in spilling) if spilling else None
        ),
        evidence=(
            Fact("memory_bound_us", mem_time, "us"),
            Fact("elementwise_copy_us", ew_time, "us"),
            Fact("fusible_chain_us", sum(c.time_us for c in chains), "us"),
            Fact("fusion_saved_us", chain_saved, "us"),
            Fact("copy_us", copy_time, "us"),
            Fact("copied_bytes", copy_bytes, "bytes"),
            Fact("bandwidth_roof", roof.peaks.bw, "bytes_per_s"),
            Fact("modelled_share", roof.coverage, "share"),
            Fact("compiled_us", sum(r.time_us for r in compiled), "us"),
        ),
        places=(chain_places + kernel_places(mem, MAX_SITES))[:MAX_SITES],
    )
