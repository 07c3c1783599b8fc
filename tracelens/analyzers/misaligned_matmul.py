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
from dataclasses import dataclass

from tracelens.analyzers.base import Category, Fact, Found, Place
from tracelens.derive.context import AnalysisContext
from tracelens.derive.matmuls import (
    ALIGN_BYTES,
    MatmulRow,
    gemm_from_name,
)
from tracelens.derive.roofline import KernelRoof
from tracelens.domain import SHORT_DTYPE_BYTES

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


@dataclass(frozen=True)
class FallbackKernel:
    """A GEMM kernel without shapes whose name says it was built for unaligned operands."""

    kernel: str  # its short id (cutlass_80_tensorop_s1688gemm_..._align1)
    dtype: str
    align_elements: int
    tile: str  # "MxN", "" when the name gives none
    pad_to: int  # elements the dimensions should be a multiple of


@dataclass(frozen=True)
class MisalignedShape:
    """One misaligned matmul shape, its speed against an aligned peer, and the padding."""

    row: MatmulRow
    pad_to: int  # elements the dimensions should be a multiple of
    peer_tflops: float | None  # the aligned peer's rate (None: no peer in the trace)
    slowdown: float
    pads: tuple[tuple[str, int], ...]  # (dim, padded value) for the misaligned dims


@dataclass(frozen=True)
class MisalignedFacts:
    shapes: int
    unshaped: int  # unaligned GEMM kernels without shapes
    measured: int  # shapes compared with an aligned peer
    total_us: float  # time in the misaligned matmuls


def analyze(ctx: AnalysisContext) -> list[Found[MisalignedFacts, FallbackKernel | MisalignedShape]]:
    attention = ctx.eager_attention_shapes  # SDPA replaces these: not a padding problem
    rows = [r for r in ctx.matmuls if (r.batch, r.m, r.n, r.k) not in attention]
    bad = [r for r in rows if not r.aligned]
    unshaped = _unshaped_fallbacks(ctx)
    if not bad and not unshaped:
        return []
    places: list[tuple[float, Place[FallbackKernel | MisalignedShape]]] = []
    total_time = total_lost = 0.0
    measured = 0
    for k in unshaped:
        gm = gemm_from_name(k.name)
        assert gm is not None
        lost = k.time_us * (1 - 1 / EXPECTED_SLOWDOWN)
        total_time += k.time_us
        total_lost += lost
        tile = f"{gm.tile.m}x{gm.tile.n}" if gm.tile else ""
        facts = FallbackKernel(
            _kernel_id(k.name), gm.dtype, gm.align_elements, tile, max(ALIGN_BYTES // gm.itemsize, 1)
        )
        places.append(
            (lost, Place(count=k.count, time_us=lost, facts=facts, kernels=(k.name,), kind="fallback_kernel"))
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
        dims = {d.dim for d in r.misaligned_dims}
        pads = tuple((dim, _padded(v, item)) for dim, v in (("M", r.m), ("N", r.n), ("K", r.k)) if dim in dims)
        shape = MisalignedShape(r, max(ALIGN_BYTES // item, 1), peer, slowdown, pads)
        places.append(
            (
                lost,
                Place(
                    count=r.calls,
                    time_us=lost,
                    facts=shape,
                    host_us=0.0,
                    ops=(r.op,),
                    kernels=(r.kernel,),
                    source=r.source,
                    kind="fallback_kernel" if r.fallback_kernel else "misaligned",
                ),
            )
        )
    places.sort(key=lambda x: -x[0])
    fallback = sum(1 for r in bad if r.fallback_kernel) + len(unshaped)
    return [
        Found(
            category=Category.MISALIGNED_MATMUL,
            time_us=total_lost,
            expected_gain_us=total_lost,
            facts=MisalignedFacts(len(bad), len(unshaped), measured, total_time),
            evidence=(
                Fact("misaligned_shapes", len(bad), "count"),
                Fact("unshaped_fallback_kernels", len(unshaped), "count"),
                Fact("fallback_kernels", fallback, "count"),
                Fact("misaligned_us", total_time, "us"),
                Fact("shapes_with_peer", measured, "count"),
            ),
            places=tuple(p for _, p in places[:MAX_SITES]),
        )
    ]
