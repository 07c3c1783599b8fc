"""compute_bound: question 6, is it really compute-bound?

From the roofline (tracelens.derive.roofline): the compute-bound kernels' time (the
ledger's busy-compute share) at their share of the roof, each one's distance to the
ceiling it can sustain, fp32 matmuls on CUDA cores where TF32 would run on tensor cores,
and the elementwise/norm kernels that run out of instruction issue. The misaligned,
wave and clock findings refine it (they come first in the diagnostic order).
"""

from __future__ import annotations

from tracelens.analyzers.base import Category, Finding, Metric, kernel_sites, severity_for
from tracelens.derive.context import AnalysisContext
from tracelens.derive.kernel_models import legacy_coefficients
from tracelens.derive.roofline import KernelRoof, Roofline, gain_to_roof
from tracelens.domain import fmt_us

MAX_SITES = 8


def analyze(ctx: AnalysisContext) -> list[Finding]:
    roof = ctx.roofline
    if roof.peaks is None or not roof.kernels:
        return []
    found = _compute_finding(ctx, roof)
    return [found] if found is not None else []


def _compute_finding(ctx: AnalysisContext, roof: Roofline) -> Finding | None:
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
    share = ctx.share(comp_time)
    advice = (
        "These kernels are limited by arithmetic: check their efficiency against the peak (the table), "
        "use bf16/fp16 (or fp8 where accuracy allows) so they run on tensor cores, and keep matmul shapes "
        "aligned and wave-friendly (the matmul findings)."
    )
    issue_bound = [r for r in comp if r.unit == "issue"]
    if issue_bound:
        # The non-vectorised path's count grows by 12-14 instructions an element for
        # every dimension it cannot merge (LEGACY_INSTRUCTIONS): there the layout is the cost.
        strided = [r for r in issue_bound if legacy_coefficients(r.name) is not None]
        strided_us = sum(r.bound_us for r in strided)
        examples = (
            " (GELU's erf, softmax's exp, layer norm's Welford division)" if len(strided) < len(issue_bound) else ""
        )
        advice += (
            f" {fmt_us(sum(r.bound_us for r in issue_bound))} of them are elementwise/norm kernels that run out of "
            f"instruction issue, not FLOPs or bandwidth{examples}: fusing them into the neighbouring kernels "
            "(torch.compile, a fused epilogue) removes their separate passes; tensor cores do not help them."
        )
        if strided:
            advice += (
                f" {fmt_us(strided_us)} of those run ATen's non-vectorised path because an operand is broadcast "
                "or strided (a transposed or sliced view), and most of their instructions compute offsets, one "
                "set per dimension that cannot be merged. Fusing is the fix there too; where one strided view "
                "feeds several ops, a single .contiguous() upstream moves them to the vectorised path."
            )
    if fp32_time:
        advice += (
            f" {fmt_us(fp32_time)} of fp32 matmuls run on CUDA cores: "
            "torch.backends.cuda.matmul.allow_tf32 = True (or torch.set_float32_matmul_precision('high')) "
            "moves them to tensor cores."
        )
    return Finding(
        category=Category.COMPUTE_BOUND,
        severity=severity_for(ctx.share(gain)),
        title=(
            f"{fmt_us(comp_time)} ({share:.0%}) of the profiled time is in compute-bound kernels at "
            f"{eff:.0%} of their peak on average"
        ),
        time_us=comp_time,
        share=share,
        advice=advice,
        expected_gain_us=gain,
        gain_note=(
            "each compute-bound kernel's distance to its roof (kernels in a fusion chain are left to the "
            "memory finding), plus fp32 matmuls at the TF32 peak"
        ),
        evidence=(
            Metric("compute-bound kernel time", comp_time, "us"),
            Metric("time-weighted share of the roof", eff, "share"),
            Metric("fp32 matmul time", fp32_time, "us"),
            Metric("peak used (bf16 FLOP/s)", roof.peaks.peak("bf16", True), "number"),
        ),
        sites=kernel_sites(comp, _compute_site, MAX_SITES),
    )


def _compute_site(r: KernelRoof) -> str:
    if r.unit == "issue":
        # Instruction-bound: the FLOP count says little (erf, exp, conversions are not FLOPs).
        return (
            f"{r.family or 'kernel'} {r.dtype}: instruction-bound, {r.instructions / (r.time_us * 1e-6) / 1e12:.1f} T "
            f"instructions/s ({r.roof_share:.0%} of the issue roof)"
            + ("; non-vectorised: a broadcast or strided operand" if legacy_coefficients(r.name) is not None else "")
        )
    return (
        f"{r.family or 'kernel'} {r.dtype}: {r.flops_per_s / 1e12:.0f} TFLOP/s "
        f"({r.roof_share:.0%} of the roof), {r.intensity:.0f} FLOP/B"
    )
