"""compute_bound: question 6, is it really compute-bound?

From the roofline (tracelens.derive.roofline): the compute-bound kernels' time (the
ledger's busy-compute share) at their share of the roof, each one's distance to the
ceiling it can sustain, fp32 matmuls on CUDA cores where TF32 would run on tensor cores,
and the elementwise/norm kernels that run out of instruction issue. The misaligned,
wave and clock findings refine it (they come first in the diagnostic order).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from tracelens.analyzers.base import Category, Fact, Found, Place, kernel_places
from tracelens.derive.context import AnalysisContext
from tracelens.derive.kernel_models import legacy_coefficients
from tracelens.derive.roofline import KernelRoof, Roofline, gain_to_roof
from tracelens.model.peaks import FFMA_MARKERS

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
    #: The kernels' precision (issue 34 §5): the unit most compute-bound time is judged
    #: by, the time in fp32/TF32 and in reduced precision, and what the GPU has.
    unit: str = "bf16"
    wide_us: float = 0.0
    low_us: float = 0.0
    no_tf32_bf16: bool = False  # fp16 tensor cores only (V100, T4)
    has_fp8: bool = False
    #: fp32_matmul_us is fp32 matmuls and convolutions gaining AMP's fp16 estimate on a GPU
    #: with fp16 tensor cores but neither TF32 nor bf16 (issue 24 §7), not TF32's.
    amp_fp16: bool = False
    gpu: str = ""  # the peaks' name
    #: The issue-bound kernels on ATen's non-vectorised path, by name (their sites say so).
    non_vectorised: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Fp32Facts:
    """fp32 kernels no shape model covers, on a GPU with fp16 tensor cores but neither TF32
    nor bf16 (the V100 AMP lever, issue 24 §7)."""

    gpu: str  # the peaks' name
    matmul_us: float  # of them matmuls and convolutions
    fp16_ratio: float  # fp16 tensor-core peak / fp32 peak
    example: str  # the costliest matmul/convolution kernel


def analyze(ctx: AnalysisContext) -> list[Found[ComputeFacts, KernelRoof] | Found[Fp32Facts, KernelRoof]]:
    roof = ctx.roofline
    if roof.peaks is None or not roof.kernels:
        return []
    found = _compute_finding(ctx, roof)
    if found is not None:
        return [found]
    fp32 = _fp32_without_model(roof)
    return [_fp32_finding(ctx, roof, *fp32)] if fp32 is not None else []


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
    # On a GPU with fp16 tensor cores but neither TF32 nor bf16 (V100, T4), fp32 matmuls
    # and convolutions move to the tensor cores only with AMP in fp16: the same estimate
    # as the by-name fp32 finding below (an estimate, said so), where it is more than the
    # distance to the fp32 roof.
    amp_fp16 = False
    if _amp_only(roof):
        amp = [r for r in comp if r.tensor_core and r.unit == "fp32" and r.dtype == "fp32"]
        amp_gain = AMP_MATMUL_SAVING * sum(r.bound_us for r in amp)
        if amp_gain > sum(gain_to_roof(r) for r in amp):
            fp32_mm, fp32_gain, amp_fp16 = amp, amp_gain, True
            fp32_time = sum(r.bound_us for r in amp)
    eff = sum(r.bound_us * r.roof_share for r in comp) / comp_time
    # A kernel in a fusion chain is the memory finding's to gain from (fusing removes
    # its pass): counting its distance to the roof here too would count it twice.
    in_chains = {name for c in roof.chains for name in c.kernels}
    gain = fp32_gain + sum(gain_to_roof(r) for r in comp if r not in fp32_mm and r.name not in in_chains)
    issue_bound = [r for r in comp if r.unit == "issue"]
    # The non-vectorised path's count grows by 12-14 instructions an element for every
    # dimension it cannot merge (LEGACY_INSTRUCTIONS): there the layout is the cost.
    strided = [r for r in issue_bound if legacy_coefficients(r.name) is not None]
    by_unit: dict[str, float] = defaultdict(float)
    for r in comp:
        by_unit[r.unit] += r.bound_us
    unit = max(by_unit, key=lambda u: by_unit[u])
    facts = ComputeFacts(
        roof_share=eff,
        fp32_matmul_us=fp32_time,
        issue_bound_us=sum(r.bound_us for r in issue_bound) if issue_bound else None,
        strided_us=sum(r.bound_us for r in strided) if strided else None,
        special_functions=len(strided) < len(issue_bound),
        unit=unit,
        wide_us=sum(t for u, t in by_unit.items() if u in ("fp32", "tf32", "tf32x3")),
        low_us=sum(t for u, t in by_unit.items() if u in ("bf16", "fp16", "fp8", "int8")),
        no_tf32_bf16=not roof.peaks.flops.get("tf32") and not roof.peaks.flops.get("bf16"),
        has_fp8=bool(roof.peaks.flops.get("fp8")),
        amp_fp16=amp_fp16,
        gpu=roof.peaks.name,
        non_vectorised=frozenset(r.name for r in strided),
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
            Fact("peak_used", roof.peaks.unit_peak(unit), "number"),
        ),
        places=kernel_places(comp, MAX_SITES),
    )


#: Kernel-name fragments that say a matmul or convolution (cuBLAS, cuDNN, CUTLASS).
MATMUL_CONV_MARKERS = ("gemm", "scudnn", "dgrad", "wgrad", "fprop", "implicit", "winograd", "conv")
#: What AMP's fp16 tensor cores save on a V100/T4-class GPU's fp32 matmuls and
#: convolutions, as a share of their time: a rule-of-thumb estimate (NVIDIA's
#: mixed-precision training guide reports 2-3x end to end for convolutional networks on
#: V100; half the kernel time is the low end), until a replay model gives it.
AMP_MATMUL_SAVING = 0.5
MAX_FP32_SITES = 8


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


def _fp32_finding(
    ctx: AnalysisContext, roof: Roofline, ks: list[KernelRoof], total: float, mm: float
) -> Found[Fp32Facts, KernelRoof]:
    """The V100 lever (issue 24 §7): kernel names say fp32 where shapes are missing."""
    assert roof.peaks is not None
    total = ctx.ledger.capped("gpu_busy_unknown", total)
    ratio = roof.peaks.flops["fp16"] / roof.peaks.flops.get("fp32", roof.peaks.flops["fp16"])
    top = sorted(ks, key=lambda k: -k.time_us)
    example = next(k for k in top if any(m in k.name.lower() for m in MATMUL_CONV_MARKERS))
    return Found(
        category=Category.COMPUTE_BOUND,
        time_us=total,
        expected_gain_us=min(AMP_MATMUL_SAVING * mm, total),
        facts=Fp32Facts(roof.peaks.name, mm, ratio, example.name),
        evidence=(
            Fact("fp32_kernel_us", total, "us"),
            Fact("fp32_matmul_conv_us", mm, "us"),
            Fact("fp16_over_fp32_peak", round(ratio, 1), "number"),
        ),
        places=tuple(Place(count=k.count, time_us=k.time_us, facts=k, kernels=(k.name,)) for k in top[:MAX_FP32_SITES]),
        tags=("fp32", "amp_fp16"),
    )
