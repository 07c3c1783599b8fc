"""compute_bound: question 6, is it really compute-bound?

From the roofline (tracelens.derive.roofline): the compute-bound kernels' time (the
ledger's busy-compute share) at their share of the roof, each one's distance to the
ceiling it can sustain, fp32 matmuls on CUDA cores where TF32 would run on tensor cores,
and the elementwise/norm kernels that run out of instruction issue. The misaligned,
wave and clock findings refine it (they come first in the diagnostic order).
"""

from __future__ import annotations

from collections import defaultdict

from tracelens.analyzers.base import Category, Finding, Metric, Site, kernel_sites, severity_for
from tracelens.derive.context import AnalysisContext
from tracelens.derive.kernel_models import legacy_coefficients
from tracelens.derive.roofline import KernelRoof, Roofline, gain_to_roof
from tracelens.domain import fmt_us
from tracelens.model.peaks import FFMA_MARKERS, UNIT_NAMES

MAX_SITES = 8


def analyze(ctx: AnalysisContext) -> list[Finding]:
    roof = ctx.roofline
    if roof.peaks is None or not roof.kernels:
        return []
    found = _compute_finding(ctx, roof)
    if found is not None:
        return [found]
    fp32 = _fp32_without_model(roof)
    return [_fp32_finding(ctx, roof, *fp32)] if fp32 is not None else []


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
    # On a GPU with fp16 tensor cores but neither TF32 nor bf16 (V100, T4), fp32 matmuls
    # and convolutions move to the tensor cores only with AMP in fp16: the same estimate
    # as the by-name fp32 finding below (an estimate, said so), where it is more than the
    # distance to the fp32 roof.
    if _amp_only(roof):
        amp = [r for r in comp if r.tensor_core and r.unit == "fp32" and r.dtype == "fp32"]
        amp_gain = AMP_MATMUL_SAVING * sum(r.bound_us for r in amp)
        if amp_gain > sum(gain_to_roof(r) for r in amp):
            fp32_mm, fp32_gain = amp, amp_gain
            fp32_time = sum(r.bound_us for r in amp)
    eff = sum(r.bound_us * r.roof_share for r in comp) / comp_time
    # A kernel in a fusion chain is the memory finding's to gain from (fusing removes
    # its pass): counting its distance to the roof here too would count it twice.
    in_chains = {name for c in roof.chains for name in c.kernels}
    gain = fp32_gain + sum(gain_to_roof(r) for r in comp if r not in fp32_mm and r.name not in in_chains)
    share = ctx.share(comp_time)
    unit, advice = _precision_advice(roof, comp)
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
    if fp32_time and not tf32:
        advice += (
            f" {fmt_us(fp32_time)} of it is fp32 matmuls and convolutions: with AMP in fp16 "
            "they run on this GPU's tensor cores (mixed-precision training on V100 is reported 2-3x faster end to "
            "end); the gain is an estimate of half their time."
        )
    elif fp32_time:
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
            + (
                f", {fmt_us(fp32_time)} of them fp32 matmuls and convolutions on a {roof.peaks.name}, whose fp16 "
                "tensor cores (AMP) they do not use"
                if fp32_time and not tf32
                else ""
            )
        ),
        time_us=comp_time,
        share=share,
        advice=advice,
        expected_gain_us=gain,
        gain_note=(
            "each compute-bound kernel's distance to its roof (kernels in a fusion chain are left to the "
            "memory finding), plus fp32 matmuls "
            + (
                f"and convolutions under AMP fp16 (an estimate: {AMP_MATMUL_SAVING:.0%} of their time)"
                if fp32_time and not tf32
                else "at the TF32 peak"
            )
        ),
        evidence=(
            Metric("compute-bound kernel time", comp_time, "us"),
            Metric("time-weighted share of the roof", eff, "share"),
            Metric("fp32 matmul time", fp32_time, "us"),
            Metric(f"peak used ({UNIT_NAMES.get(unit, unit)}, FLOP/s)", roof.peaks.unit_peak(unit), "number"),
        ),
        sites=kernel_sites(comp, _compute_site, MAX_SITES),
    )


def _precision_advice(roof: Roofline, comp: list[KernelRoof]) -> tuple[str, str]:
    """The unit most compute-bound time is judged by, and the advice fitted to the kernels'
    precision (issue 34 §5): lower precision only for time that is not already in it."""
    assert roof.peaks is not None
    by_unit: dict[str, float] = defaultdict(float)
    for r in comp:
        by_unit[r.unit] += r.bound_us
    unit = max(by_unit, key=lambda u: by_unit[u])
    wide = sum(t for u, t in by_unit.items() if u in ("fp32", "tf32", "tf32x3"))
    low = sum(t for u, t in by_unit.items() if u in ("bf16", "fp16", "fp8", "int8"))
    no_tf32_bf16 = not roof.peaks.flops.get("tf32") and not roof.peaks.flops.get("bf16")
    if wide >= low:
        lower = (
            "autocast to fp16 (torch.autocast('cuda', dtype=torch.float16) with a GradScaler in training): this "
            "GPU has fp16 tensor cores but neither TF32 nor bf16"
            if no_tf32_bf16
            else "use bf16/fp16 (or fp8 where accuracy allows) so they run on tensor cores"
        )
        return unit, (
            f"These kernels are limited by arithmetic, {fmt_us(wide)} of them in fp32/TF32: check their "
            f"efficiency against the peak (the table), {lower}, and keep matmul shapes aligned and "
            "wave-friendly (the matmul findings)."
        )
    return unit, (
        f"These kernels are limited by arithmetic and already run in reduced precision on tensor cores "
        f"({fmt_us(low)} of them): what is left is their efficiency against the peak (the table), matmul "
        "shapes aligned and wave-friendly (the matmul findings), and clocks"
        + (" (fp8 where accuracy allows and this GPU has it)" if roof.peaks.flops.get("fp8") else "")
        + "."
    )


#: Kernel-name fragments that say a matmul or convolution (cuBLAS, cuDNN, CUTLASS).
MATMUL_CONV_MARKERS = ("gemm", "scudnn", "dgrad", "wgrad", "fprop", "implicit", "winograd", "conv")
#: What AMP's fp16 tensor cores save on a V100/T4-class GPU's fp32 matmuls and
#: convolutions, as a share of their time: a rule-of-thumb estimate (NVIDIA's
#: mixed-precision training guide reports 2-3x end to end for convolutional networks on
#: V100; half the kernel time is the low end), until a replay model gives it.
AMP_MATMUL_SAVING = 0.5


def _amp_only(roof: Roofline) -> bool:
    """Whether the GPU has fp16 tensor cores but neither TF32 nor bf16 (V100, T4)."""
    peaks = roof.peaks
    return (
        peaks is not None
        and not peaks.flops.get("tf32")
        and not peaks.flops.get("bf16")
        and bool(peaks.flops.get("fp16"))
    )


def _says_fp32(name: str) -> bool:
    low = name.lower()
    return any(m in low for m in FFMA_MARKERS) or "<float" in name or "_f32" in low


def _fp32_without_model(roof: Roofline) -> tuple[list[KernelRoof], float, float] | None:
    """fp32 kernels (by name) that no shape model covers, on a GPU with fp16 tensor cores but
    neither TF32 nor bf16 (V100, T4): (kernels, their time, matmul/conv time), or None."""
    if not _amp_only(roof):
        return None
    ks = [k for k in roof.kernels if k.bound == "unknown" and _says_fp32(k.name)]
    total = sum(k.time_us for k in ks)
    mm = sum(k.time_us for k in ks if any(m in k.name.lower() for m in MATMUL_CONV_MARKERS))
    return (ks, total, mm) if mm > 0 else None


def _fp32_finding(ctx: AnalysisContext, roof: Roofline, ks: list[KernelRoof], total: float, mm: float) -> Finding:
    """The V100 lever (issue 24 §7): kernel names say fp32 where shapes are missing."""
    assert roof.peaks is not None
    total = ctx.ledger.capped("gpu_busy_unknown", total)
    share = ctx.share(total)
    ratio = roof.peaks.flops["fp16"] / roof.peaks.flops.get("fp32", roof.peaks.flops["fp16"])
    gain = min(AMP_MATMUL_SAVING * mm, total)
    top = sorted(ks, key=lambda k: -k.time_us)
    example = next(k for k in top if any(m in k.name.lower() for m in MATMUL_CONV_MARKERS))
    return Finding(
        category=Category.COMPUTE_BOUND,
        severity=severity_for(ctx.share(gain)),
        title=(
            f"{fmt_us(total)} ({share:.0%}) of the profiled time is in fp32 kernels ({fmt_us(mm)} of matmuls and "
            f"convolutions such as {_short(example.name)}) on a {roof.peaks.name}, whose fp16 tensor cores run "
            f"{ratio:.0f}x its fp32 rate"
        ),
        time_us=total,
        share=share,
        advice=(
            "No shape model covers these kernels (record_shapes was off), but their names say fp32 (sgemm, "
            "scudnn, <float> templates). This GPU has fp16 tensor cores and neither TF32 nor bf16: train with "
            "automatic mixed precision in fp16 (torch.autocast('cuda', dtype=torch.float16) around the forward "
            "and loss, a torch.cuda.amp.GradScaler for the backward), with channels_last for convolutions."
        ),
        expected_gain_us=gain,
        gain_note=(
            f"an estimate: {AMP_MATMUL_SAVING:.0%} of the fp32 matmul/convolution time (mixed-precision training "
            "on V100 is reported 2-3x faster end to end); no replay model yet"
        ),
        evidence=(
            Metric("fp32 kernel time (by kernel name)", total, "us"),
            Metric("of it matmuls and convolutions", mm, "us"),
            Metric("fp16 tensor-core peak / fp32 peak", round(ratio, 1), "number"),
        ),
        sites=tuple(
            Site(description=_short(k.name), count=k.count, time_us=k.time_us, kernels=(k.name,)) for k in top[:8]
        ),
        tags=("fp32", "amp_fp16"),
    )


def _short(name: str) -> str:
    return name if len(name) <= 60 else name[:59] + "…"


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
