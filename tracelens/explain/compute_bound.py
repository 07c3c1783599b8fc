"""The words of the compute_bound finding."""

from __future__ import annotations

from tracelens.analyzers.base import Found
from tracelens.analyzers.compute_bound import ComputeFacts
from tracelens.derive.kernel_models import legacy_coefficients
from tracelens.derive.roofline import KernelRoof
from tracelens.domain import fmt_us
from tracelens.explain.base import Words

LABELS = {
    "compute_bound_us": "compute-bound kernel time",
    "roof_share": "time-weighted share of the roof",
    "fp32_matmul_us": "fp32 matmul time",
    "bf16_peak": "peak used (bf16 FLOP/s)",
}


def kernel_text(r: KernelRoof) -> str:
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


def words(found: Found[ComputeFacts, KernelRoof], share: float) -> Words:
    f = found.facts
    advice = (
        "These kernels are limited by arithmetic: check their efficiency against the peak (the table), "
        "use bf16/fp16 (or fp8 where accuracy allows) so they run on tensor cores, and keep matmul shapes "
        "aligned and wave-friendly (the matmul findings)."
    )
    if f.issue_bound_us is not None:
        examples = " (GELU's erf, softmax's exp, layer norm's Welford division)" if f.special_functions else ""
        advice += (
            f" {fmt_us(f.issue_bound_us)} of them are elementwise/norm kernels that run out of "
            f"instruction issue, not FLOPs or bandwidth{examples}: fusing them into the neighbouring kernels "
            "(torch.compile, a fused epilogue) removes their separate passes; tensor cores do not help them."
        )
        if f.strided_us is not None:
            advice += (
                f" {fmt_us(f.strided_us)} of those run ATen's non-vectorised path because an operand is broadcast "
                "or strided (a transposed or sliced view), and most of their instructions compute offsets, one "
                "set per dimension that cannot be merged. Fusing is the fix there too; where one strided view "
                "feeds several ops, a single .contiguous() upstream moves them to the vectorised path."
            )
    if f.fp32_matmul_us:
        advice += (
            f" {fmt_us(f.fp32_matmul_us)} of fp32 matmuls run on CUDA cores: "
            "torch.backends.cuda.matmul.allow_tf32 = True (or torch.set_float32_matmul_precision('high')) "
            "moves them to tensor cores."
        )
    return Words(
        title=(
            f"{fmt_us(found.time_us)} ({share:.0%}) of the analysed time is in compute-bound kernels at "
            f"{f.roof_share:.0%} of their peak on average"
        ),
        advice=advice,
        gain_note=(
            "each compute-bound kernel's distance to its roof (kernels in a fusion chain are left to the "
            "memory finding), plus fp32 matmuls at the TF32 peak"
        ),
        labels=LABELS,
        places=[kernel_text(p.facts) for p in found.places],
    )
