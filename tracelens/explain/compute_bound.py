"""The words of the compute_bound finding."""

from __future__ import annotations

from tracelens.analyzers.base import Found, Place
from tracelens.analyzers.compute_bound import AMP_MATMUL_SAVING, ComputeFacts, Fp32Facts
from tracelens.derive.roofline import KernelRoof
from tracelens.domain import PerUnit, pct, per_unit
from tracelens.explain.base import Words, led_by, top_place, where
from tracelens.model.peaks import UNIT_NAMES

LABELS = {
    "compute_bound_us": "compute-bound kernel time",
    "roof_share": "time-weighted share of the roof",
    "fp32_matmul_us": "fp32 matmul time",
    "fp32_kernel_us": "fp32 kernel time (by kernel name)",
    "fp32_matmul_conv_us": "of it matmuls and convolutions",
    "fp16_over_fp32_peak": "fp16 tensor-core peak / fp32 peak",
}


def kernel_text(r: KernelRoof, non_vectorised: frozenset[str] = frozenset()) -> str:
    if r.unit == "issue":
        # Instruction-bound: the FLOP count says little (erf, exp, conversions are not FLOPs).
        return (
            f"{r.family or 'kernel'} {r.dtype}: instruction-bound, {r.instructions / (r.time_us * 1e-6) / 1e12:.1f} T "
            f"instructions/s ({pct(r.roof_share)} of the issue roof)"
            + ("; non-vectorised: a broadcast or strided operand" if r.name in non_vectorised else "")
        )
    return (
        f"{r.family or 'kernel'} {r.dtype}: {r.flops_per_s / 1e12:.0f} TFLOP/s "
        f"({pct(r.roof_share)} of the roof), {r.intensity:.0f} FLOP/B"
    )


def _precision_advice(f: ComputeFacts, unit: PerUnit) -> str:
    """The advice fitted to the kernels' precision (issue 34 §5): lower precision only for
    time that is not already in it."""
    if f.wide_us >= f.low_us:
        lower = (
            "autocast to fp16 (torch.autocast('cuda', dtype=torch.float16) with a GradScaler in training): this "
            "GPU has fp16 tensor cores but neither TF32 nor bf16"
            if f.no_tf32_bf16
            else "use bf16/fp16 (or fp8 where accuracy allows) so they run on tensor cores"
        )
        return (
            f"These kernels are limited by arithmetic, {per_unit(f.wide_us, unit)} of them in fp32/TF32: check their "
            f"efficiency against the peak (the table), {lower}, and keep matmul shapes aligned and "
            "wave-friendly (the matmul findings)."
        )
    return (
        f"These kernels are limited by arithmetic and already run in reduced precision on tensor cores "
        f"({per_unit(f.low_us, unit)} of them): what is left is their efficiency against the peak (the table), matmul "
        "shapes aligned and wave-friendly (the matmul findings), and clocks"
        + (" (fp8 where accuracy allows and this GPU has it)" if f.has_fp8 else "")
        + "."
    )


def _kernel_first(top: Place[KernelRoof] | None, unit: PerUnit) -> str:
    """Where to start (issue 27, as the launch finding's site): the kernel with the most
    compute-bound time, the op that launches it and its source line, and how far it is from
    its roof; "" where there is no kernel."""
    if top is None:
        return ""
    k = top.facts
    op = top.ops[0] if top.ops else ""
    at = where(top.source) if top.source is not None else ""
    origin = ", ".join(x for x in (op, at) if x)
    roof = f" ({k.roof_name})" if k.roof_name else ""
    return (
        f"The largest is {_short(k.name)}{f' ({origin})' if origin else ''}: {per_unit(top.time_us, unit)} at "
        f"{pct(k.roof_share)} of its roof{roof}."
    )


def _short(name: str, limit: int = 60) -> str:
    return name if len(name) <= limit else name[: limit - 1] + "…"


def _fp32_words(found: Found[Fp32Facts, KernelRoof], share: float, unit: PerUnit) -> Words:
    f = found.facts
    return Words(
        title=(
            f"{per_unit(found.time_us, unit)} ({pct(share)} of the analysed time) is in fp32 kernels "
            f"({per_unit(f.matmul_us, unit)} "
            f"of matmuls and convolutions such as {_short(f.example, 40)}) on a {f.gpu}, whose fp16 tensor cores run "
            f"{f.fp16_ratio:.0f}x its fp32 rate"
        ),
        advice=(
            "No shape model covers these kernels (record_shapes was off), but their names say fp32 (sgemm, "
            "scudnn, <float> templates). This GPU has fp16 tensor cores and neither TF32 nor bf16: train with "
            "automatic mixed precision in fp16 (torch.autocast('cuda', dtype=torch.float16) around the forward "
            "and loss, a torch.cuda.amp.GradScaler for the backward), with channels_last for convolutions."
        ),
        gain_note=(
            f"an estimate: {pct(AMP_MATMUL_SAVING)} of the fp32 matmul/convolution time (mixed-precision training "
            "on V100 is reported 2-3x faster end to end); no replay model yet"
        ),
        labels=LABELS,
        places=[_short(p.facts.name) for p in found.places],
    )


def words(found: Found[ComputeFacts, KernelRoof] | Found[Fp32Facts, KernelRoof], share: float, unit: PerUnit) -> Words:
    if isinstance(found.facts, Fp32Facts):
        return _fp32_words(found, share, unit)  # type: ignore[arg-type]
    return _compute_words(found, share, unit)  # type: ignore[arg-type]


def _compute_words(found: Found[ComputeFacts, KernelRoof], share: float, unit: PerUnit) -> Words:
    f = found.facts
    advice = _precision_advice(f, unit)
    if f.issue_bound_us is not None:
        examples = " (GELU's erf, softmax's exp, layer norm's Welford division)" if f.special_functions else ""
        advice += (
            f" {per_unit(f.issue_bound_us, unit)} of them are elementwise/norm kernels that run out of "
            f"instruction issue, not FLOPs or bandwidth{examples}: fusing them into the neighbouring kernels "
            "(torch.compile, a fused epilogue) removes their separate passes; tensor cores do not help them."
        )
        if f.strided_us is not None:
            advice += (
                f" {per_unit(f.strided_us, unit)} of those run ATen's non-vectorised path because an operand is "
                "broadcast or strided (a transposed or sliced view), and most of their instructions compute "
                "offsets, one set per dimension that cannot be merged. Fusing is the fix there too; where one "
                "strided view feeds several ops, a single .contiguous() upstream moves them to the vectorised path."
            )
    # Where to start goes before the general advice, after the TF32 flag (below) where
    # there is one: the flag is the concrete fix.
    advice = led_by(_kernel_first(top_place(found), unit), advice)
    if f.fp32_matmul_us and f.amp_fp16:
        advice += (
            f" {per_unit(f.fp32_matmul_us, unit)} of it is fp32 matmuls and convolutions: with AMP in fp16 "
            "they run on this GPU's tensor cores (mixed-precision training on V100 is reported 2-3x faster end to "
            "end); the gain is an estimate of half their time."
        )
    elif f.fp32_matmul_us:
        advice = (
            f"{per_unit(f.fp32_matmul_us, unit)} of fp32 matmuls run on CUDA cores: "
            "torch.backends.cuda.matmul.allow_tf32 = True (or torch.set_float32_matmul_precision('high')) "
            "moves them to tensor cores. " + advice
        )
    return Words(
        title=(
            f"{per_unit(found.time_us, unit)} ({pct(share)} of the analysed time) is in compute-bound kernels at "
            f"{pct(f.roof_share)} of their peak on average"
            + (
                f", {per_unit(f.fp32_matmul_us, unit)} of them fp32 matmuls and convolutions on a {f.gpu}, whose fp16 "
                "tensor cores (AMP) they do not use"
                if f.fp32_matmul_us and f.amp_fp16
                else ""
            )
        ),
        advice=advice,
        gain_note=(
            "each compute-bound kernel's distance to its roof (kernels in a fusion chain are left to the "
            "memory finding), plus fp32 matmuls "
            + (
                f"and convolutions under AMP fp16 (an estimate: {pct(AMP_MATMUL_SAVING)} of their time)"
                if f.fp32_matmul_us and f.amp_fp16
                else "at the TF32 peak"
            )
        ),
        labels={**LABELS, "peak_used": f"peak used ({UNIT_NAMES.get(f.unit, f.unit)}, FLOP/s)"},
        places=[kernel_text(p.facts, f.non_vectorised) for p in found.places],
    )
