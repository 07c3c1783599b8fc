"""misaligned_matmul: matmul shapes whose leading dimensions are not a multiple of 16
bytes, which sends cuBLAS to slow fallback kernels.

Under question 6 (raw compute). On the H200, bf16 products with K or N = 2047/4095
fell back to a Turing `cutlass_75_..._align1` kernel and ran 2.6-5x slower than the
aligned twin (gpu-trace-facts.md; sample_traces/gemm_misaligned shows 142-155 vs 735-825
TFLOP/s). The slowdown is measured against an aligned matmul of the same dtype and
similar size in the same trace where there is one, else the expected factor is used.
"""

from __future__ import annotations

import re

from tracelens.analyzers.base import Category, Finding, Metric, Site, severity_for
from tracelens.derive.context import AnalysisContext
from tracelens.derive.matmuls import (
    ALIGN_BYTES,
    MatmulRow,
    gemm_from_name,
)
from tracelens.derive.roofline import KernelRoof
from tracelens.domain import SHORT_DTYPE_BYTES, fmt_us

#: Used when the trace has no aligned peer to compare with: the low end of what the H200
#: measured (2.6-5x), so the gain is not overstated.
EXPECTED_SLOWDOWN = 2.6
#: An aligned peer has the same dtype and FLOPs within this factor.
PEER_FLOPS_RATIO = 4.0
PEER_K_RATIO = 2.0
#: The most a measured peer comparison may claim: the H200 sweep's worst fallback was
#: 5.8x; a larger ratio means the peer is not comparable.
MAX_SLOWDOWN = 6.0
MAX_SITES = 8


def _peer_rate(row: MatmulRow, rows: list[MatmulRow]) -> float | None:
    """TFLOP/s of the closest aligned matmul: same op and dtype, K within PEER_K_RATIO (K
    decides whether a product is memory- or compute-bound), FLOPs within PEER_FLOPS_RATIO."""
    flops = 2.0 * row.m * row.n * row.k * row.batch
    best = None
    for p in rows:
        if not p.aligned or p.op != row.op or p.dtype != row.dtype or p.tflops <= 0:
            continue
        if not (row.k / PEER_K_RATIO <= p.k <= row.k * PEER_K_RATIO):
            continue
        pf = 2.0 * p.m * p.n * p.k * p.batch
        if flops / PEER_FLOPS_RATIO <= pf <= flops * PEER_FLOPS_RATIO:
            gap = abs(pf - flops)
            if best is None or gap < best[0]:
                best = (gap, p.tflops)
    return best[1] if best else None


def _padded(value: int, itemsize: int) -> int:
    align = max(ALIGN_BYTES // itemsize, 1)
    return -(-value // align) * align


#: Unshaped fallback kernels worth listing: at least this share of the profiled window.
MIN_UNSHAPED_SHARE = 0.002


def _kernel_id(name: str) -> str:
    """cutlass_80_tensorop_s1688gemm_256x64_16x4_tn_align1 out of its `void cutlass::Kernel<...>(...)`."""
    m = re.search(r"(?:cutlass|sm\d+_xmma|ampere|volta|turing)_\w+", name)
    return m.group(0) if m else name[:90]


def _unshaped_fallbacks(ctx: AnalysisContext) -> list[KernelRoof]:
    """GEMM kernels with no shapes recorded whose names say they were built for unaligned
    operands (`..._align1`): HTA's rank0 spends 117 ms in TF32 ones replayed under compiled
    autograd functions."""
    return [
        k
        for k in ctx.roofline.kernels
        if k.flops == 0 and k.family == "matmul" and ctx.share(k.time_us) >= MIN_UNSHAPED_SHARE
        for gm in (gemm_from_name(k.name),)
        if gm is not None and gm.misaligned
    ]


def analyze(ctx: AnalysisContext) -> list[Finding]:
    attention = ctx.eager_attention_shapes  # SDPA replaces these: not a padding problem
    rows = [r for r in ctx.matmuls if (r.batch, r.m, r.n, r.k) not in attention]
    bad = [r for r in rows if not r.aligned]
    unshaped = _unshaped_fallbacks(ctx)
    if not bad and not unshaped:
        return []
    sites = []
    total_time = total_lost = 0.0
    measured = 0
    for k in unshaped:
        gm = gemm_from_name(k.name)
        assert gm is not None
        lost = k.time_us * (1 - 1 / EXPECTED_SLOWDOWN)
        total_time += k.time_us
        total_lost += lost
        tile = f", tile {gm.tile.m}x{gm.tile.n}" if gm.tile else ""
        plural = "s" if gm.align_elements > 1 else ""
        sites.append(
            (
                lost,
                Site(
                    description=(
                        f"{_kernel_id(k.name)}: a {'TF32' if gm.dtype == 'fp32' else gm.dtype} GEMM kernel built "
                        f"for operands aligned to {gm.align_elements} element{plural}{tile} "
                        "(from its name; the trace records no shapes for it: a CUDA-graph replay or a compiled "
                        f"region); expected about {EXPECTED_SLOWDOWN}x slower than aligned; pad the matmul's "
                        f"dimensions to a multiple of {max(ALIGN_BYTES // gm.itemsize, 1)}"
                    ),
                    count=k.count,
                    time_us=lost,
                    kernels=(k.name,),
                    kind="fallback_kernel",
                ),
            )
        )
    for r in bad:
        peer = _peer_rate(r, rows)
        slowdown = peer / r.tflops if peer and r.tflops > 0 else EXPECTED_SLOWDOWN
        slowdown = min(max(slowdown, 1.0), MAX_SLOWDOWN)
        measured += peer is not None
        lost = r.time_us * (1 - 1 / slowdown)
        total_time += r.time_us
        total_lost += lost
        item = SHORT_DTYPE_BYTES.get(r.dtype, 2)
        pads = [
            f"{dim}={_padded(v, item)}"
            for dim, v in (("M", r.m), ("N", r.n), ("K", r.k))
            if any(f"({dim})" in d or (d.endswith(f"N {r.n}") and dim == "N") for d in r.misaligned)
        ]
        pad = ("pad to " + ", ".join(pads)) if pads else "pad the leading dimension"
        how = (
            f"{slowdown:.1f}x slower than an aligned peer ({peer:.0f} TFLOP/s)"
            if peer
            else (f"expected about {EXPECTED_SLOWDOWN}x slower (no aligned peer in the trace)")
        )
        sites.append(
            (
                lost,
                Site(
                    description=(
                        f"{r.op} {r.batch}x{r.m}x{r.n}x{r.k} {r.dtype} ({r.layout}): "
                        f"{'; '.join(r.misaligned)} not a multiple of {max(ALIGN_BYTES // item, 1)}; "
                        f"{r.tflops:.0f} TFLOP/s, {how}; {pad}"
                    ),
                    count=r.calls,
                    time_us=lost,
                    host_us=0.0,
                    ops=(r.op,),
                    kernels=(r.kernel,),
                    source=r.source,
                    kind="fallback_kernel" if r.fallback_kernel else "misaligned",
                ),
            )
        )
    sites.sort(key=lambda x: -x[0])
    share = ctx.share(total_lost)
    fallback = sum(1 for r in bad if r.fallback_kernel) + len(unshaped)
    many = len(bad) + len(unshaped) > 1
    what = f"{len(bad)} matmul shape{'s' if len(bad) > 1 else ''}" if bad else ""
    if unshaped:
        n = len(unshaped)
        what += f"{' and ' if what else ''}{n} unaligned GEMM kernel{'s' if n > 1 else ''} without shapes"
    title = (
        f"{what} with a dimension not a multiple of 16 bytes "
        f"take{'' if many else 's'} {fmt_us(total_time)}; aligned, {'they' if many else 'it'} would save about "
        f"{fmt_us(total_lost)}"
    )
    advice = (
        "Pad the misaligned dimension to a multiple of 8 elements (bf16/fp16; 4 for fp32, 16 for fp8): pad the "
        "sequence or feature dimension of the inputs (F.pad, or size vocabularies/hidden sizes to a multiple "
        "of 64), and slice the result back if needed. torch.compile (Inductor) pads such matmul operands "
        "itself when it compiles the graph (shape_padding, on by default) - use it where the shapes are static."
    )
    return [
        Finding(
            category=Category.MISALIGNED_MATMUL,
            severity=severity_for(share),
            title=title,
            time_us=total_lost,
            share=share,
            advice=advice,
            expected_gain_us=total_lost,
            gain_note=(
                "the misaligned calls' time x (1 - 1/slowdown), with the slowdown measured against an aligned "
                f"matmul of the same dtype in this trace where one exists ({measured} of {len(bad)} shapes), else "
                f"{EXPECTED_SLOWDOWN}x (the low end measured on an H200)"
            ),
            evidence=(
                Metric("misaligned shapes", len(bad), "count"),
                Metric("unaligned GEMM kernels without shapes (from their names)", len(unshaped), "count"),
                Metric("of them on a fallback kernel (align1 / older architecture)", fallback, "count"),
                Metric("time in misaligned matmuls", total_time, "us"),
                Metric("shapes compared with an aligned peer", measured, "count"),
            ),
            sites=tuple(s for _, s in sites[:MAX_SITES]),
        )
    ]
