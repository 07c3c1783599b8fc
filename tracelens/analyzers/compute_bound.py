"""compute_bound: question 6, is it really compute-bound?

From the roofline (tracelens.derive.roofline): the compute-bound kernels' time (the
ledger's busy-compute share) at their share of the roof, each one's distance to the
ceiling it can sustain, fp32 matmuls on CUDA cores where TF32 would run on tensor cores,
and the elementwise/norm kernels that run out of instruction issue. The misaligned,
wave and clock findings refine it (they come first in the diagnostic order).
"""

from __future__ import annotations

from dataclasses import dataclass

from tracelens.analyzers.base import Category, Fact, Found, kernel_places
from tracelens.derive.context import AnalysisContext
from tracelens.derive.kernel_models import legacy_coefficients
from tracelens.derive.roofline import KernelRoof, Roofline, gain_to_roof

MAX_SITES = 8


@dataclass(frozen=True)
class ComputeFacts:
    roof_share: float  # time-weighted share of the roof
    fp32_matmul_us: float  # fp32 matmuls on CUDA cores where the GPU has TF32
    #: Elementwise/norm kernels out of instruction issue (None: none), and of those the
    #: ones on ATen's non-vectorised path (a broadcast or strided operand).
    issue_bound_us: float | None
    strided_us: float | None
    #: Whether some issue-bound kernels are not strided ones (erf, exp, Welford division).
    special_functions: bool


def analyze(ctx: AnalysisContext) -> list[Found[ComputeFacts, KernelRoof]]:
    roof = ctx.roofline
    if roof.peaks is None or not roof.kernels:
        return []
    found = _compute_finding(ctx, roof)
    return [found] if found is not None else []


def _compute_finding(ctx: AnalysisContext, roof: Roofline) -> Found[ComputeFacts, KernelRoof] | None:
    """The compute-bound kernels: distance to their roofs, fp32 matmuls off tensor cores,
    instruction-bound elementwise kernels."""
    assert roof.peaks is not None
    comp = [r for r in roof.kernels if r.bound == "compute"]
    comp_time = ctx.ledger.capped("gpu_busy_compute", sum(r.bound_us for r in comp))
    if comp_time <= 0:
        return None
    tf32 = roof.peaks.flops.get("tf32", 0.0)
    # fp32 matmuls and convolutions on CUDA cores, on a GPU that has TF32 (not V100/T4).
    fp32_mm = [r for r in comp if r.tensor_core and r.unit == "fp32" and r.dtype == "fp32"] if tf32 else []
    fp32_time = sum(r.bound_us for r in fp32_mm)
    fp32_gain = fp32_time * (1 - roof.peaks.flops.get("fp32", 0.0) / tf32) if tf32 else 0.0
    eff = sum(r.bound_us * r.roof_share for r in comp) / comp_time
    # A kernel in a fusion chain is the memory finding's to gain from (fusing removes
    # its pass): counting its distance to the roof here too would count it twice.
    in_chains = {name for c in roof.chains for name in c.kernels}
    gain = fp32_gain + sum(gain_to_roof(r) for r in comp if r not in fp32_mm and r.name not in in_chains)
    issue_bound = [r for r in comp if r.unit == "issue"]
    # The non-vectorised path's count grows by 12-14 instructions an element for every
    # dimension it cannot merge (LEGACY_INSTRUCTIONS): there the layout is the cost.
    strided = [r for r in issue_bound if legacy_coefficients(r.name) is not None]
    facts = ComputeFacts(
        roof_share=eff,
        fp32_matmul_us=fp32_time,
        issue_bound_us=sum(r.bound_us for r in issue_bound) if issue_bound else None,
        strided_us=sum(r.bound_us for r in strided) if strided else None,
        special_functions=len(strided) < len(issue_bound),
    )
    return Found(
        category=Category.COMPUTE_BOUND,
        time_us=comp_time,
        expected_gain_us=gain,
        facts=facts,
        evidence=(
            Fact("compute_bound_us", comp_time, "us"),
            Fact("roof_share", eff, "share"),
            Fact("fp32_matmul_us", fp32_time, "us"),
            Fact("bf16_peak", roof.peaks.peak("bf16", True), "number"),
        ),
        places=kernel_places(comp, MAX_SITES),
    )
