"""The words of the misaligned_matmul finding."""

from __future__ import annotations

from tracelens.analyzers.base import Found
from tracelens.analyzers.misaligned_matmul import EXPECTED_SLOWDOWN, FallbackKernel, MisalignedFacts, MisalignedShape
from tracelens.domain import PerUnit, per_unit
from tracelens.explain.base import Words
from tracelens.explain.matmuls import misaligned_text

LABELS = {
    "misaligned_shapes": "misaligned shapes",
    "unshaped_fallback_kernels": "unaligned GEMM kernels without shapes (from their names)",
    "fallback_kernels": "of them on a fallback kernel (align1 / older architecture)",
    "misaligned_us": "time in misaligned matmuls",
    "shapes_with_peer": "shapes compared with an aligned peer",
}


def fallback_text(k: FallbackKernel) -> str:
    tile = f", tile {k.tile}" if k.tile else ""
    plural = "s" if k.align_elements > 1 else ""
    return (
        f"{k.kernel}: a {'TF32' if k.dtype == 'fp32' else k.dtype} GEMM kernel built "
        f"for operands aligned to {k.align_elements} element{plural}{tile} "
        "(from its name; the trace records no shapes for it: a CUDA-graph replay or a compiled "
        f"region); expected about {EXPECTED_SLOWDOWN}x slower than aligned; pad the matmul's "
        f"dimensions to a multiple of {k.pad_to}"
    )


def shape_text(s: MisalignedShape) -> str:
    r = s.row
    pad = ("pad to " + ", ".join(f"{dim}={v}" for dim, v in s.pads)) if s.pads else "pad the leading dimension"
    how = (
        f"{s.slowdown:.1f}x slower than an aligned peer ({s.peer_tflops:.0f} TFLOP/s)"
        if s.peer_tflops
        else (f"expected about {EXPECTED_SLOWDOWN}x slower (no aligned peer in the trace)")
    )
    return (
        f"{r.op} {r.batch}x{r.m}x{r.n}x{r.k} {r.dtype} ({r.layout}): "
        f"{'; '.join(misaligned_text(d) for d in r.misaligned_dims)} not a multiple of {s.pad_to}; "
        f"{r.tflops:.0f} TFLOP/s, {how}; {pad}"
    )


def words(found: Found[MisalignedFacts, FallbackKernel | MisalignedShape], share: float, unit: PerUnit) -> Words:
    f = found.facts
    many = f.shapes + f.unshaped > 1
    what = f"{f.shapes} matmul shape{'s' if f.shapes > 1 else ''}" if f.shapes else ""
    if f.unshaped:
        n = f.unshaped
        what += f"{' and ' if what else ''}{n} unaligned GEMM kernel{'s' if n > 1 else ''} without shapes"
    title = (
        f"{what} with a dimension not a multiple of 16 bytes "
        f"take{'' if many else 's'} {per_unit(f.total_us, unit)}; aligned, {'they' if many else 'it'} would save about "
        f"{per_unit(found.time_us, unit)}"
    )
    return Words(
        title=title,
        advice=(
            "Pad the misaligned dimension to a multiple of 8 elements (bf16/fp16; 4 for fp32, 16 for fp8): pad the "
            "sequence or feature dimension of the inputs (F.pad, or size vocabularies/hidden sizes to a multiple "
            "of 64), and slice the result back if needed. torch.compile (Inductor) pads such matmul operands "
            "itself when it compiles the graph (shape_padding, on by default) - use it where the shapes are static."
        ),
        gain_note=(
            "the misaligned calls' time x (1 - 1/slowdown), with the slowdown measured against an aligned "
            f"matmul of the same dtype in this trace where one exists ({f.measured} of {f.shapes} shapes), else "
            f"{EXPECTED_SLOWDOWN}x (the low end measured on an H200)"
        ),
        labels=LABELS,
        places=[
            fallback_text(p.facts) if isinstance(p.facts, FallbackKernel) else shape_text(p.facts) for p in found.places
        ],
    )
