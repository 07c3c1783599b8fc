"""wave_quantization: matmuls whose last wave of output tiles leaves most SMs idle.

Under question 6 (raw compute). A matmul's output is cut into tiles (the tile size is in
the kernel's name: nvjet_sm90_tst_256x128_..., cutlass_..._256x128_..., tilesize128x128x64);
the GPU runs as many tiles at once as it has slots (SMs x CTAs per SM, or the persistent
kernel's grid). With 133 tiles on 132 SMs the second wave runs 1 tile: half the time for
1/133 of the work (the seed's 1792 vs 1793 on an A100's 108 SMs).

Efficiency = tiles / (rounds x slots), slots = SMs x CTAs/SM the kernel can hold (not
the launch grid: Hopper's persistent cuBLAS kernels launch one CTA per SM or fewer and
loop), rounds = ceil(tiles / CTAs running at once). Cost = the shape's time x
(1 - efficiency). Shapes from half a wave up are judged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tracelens.analyzers.base import Category, Fact, Found, Place
from tracelens.derive.context import AnalysisContext
from tracelens.derive.matmuls import MatmulRow, Tile, tiles_for, waves_of

#: Flag shapes whose waves are less than this full on average.
FLAG_EFFICIENCY = 0.85
#: ... and whose wasted time is at least this share of the profiled window (the issue:
#: "don't flag what costs little").
MIN_SHARE = 0.002
#: How far to look for a neighbouring shape that fills its waves, in steps of 8.
SEARCH_STEPS = 64
MAX_SITES = 8
#: Shapes down to half a wave are judged: a 1792^2 GEMM's 98 tiles on 132 SMs leave 26% of
#: the GPU idle exactly as a partial second wave does. Below half a wave the matmul is too
#: small to fill the GPU whatever its exact size: a parallelism problem (batch more work),
#: not quantization a nudge of the shape fixes.
MIN_WAVES_JUDGED = 0.5


@dataclass(frozen=True)
class FullWaveShape:
    """A neighbouring shape that wastes no partial wave: M or N changed to `value`."""

    dim: str  # "M" or "N"
    value: int
    waves: int
    smaller: bool  # one wave fewer (less time); else the same waves with more work


@dataclass(frozen=True)
class WaveFacts:
    shapes: int  # flagged
    worst: MatmulRow


@dataclass(frozen=True)
class WaveShapeFacts:
    row: MatmulRow
    nearest: tuple[FullWaveShape, ...]


def nearest_full(row: MatmulRow) -> list[FullWaveShape]:
    """Neighbouring shapes (M or N changed in steps of 8) that waste no partial wave:
    smaller ones that drop it (one wave fewer: less time) and larger ones that fill it
    (the same number of waves: more work in the same time)."""
    if not row.tile or not row.slots or row.waves <= 0:
        return []
    tm, tn = (int(x) for x in row.tile.split("x"))
    tile = Tile(tm, tn, "name")
    waves_now = math.ceil(row.waves)

    def waves(m: int, n: int) -> tuple[float, float]:
        w, _, e = waves_of(tiles_for(m, n, row.batch, tile, -1, True), row.slots)
        return w, e

    out = []
    for dim in ("M", "N"):
        base = row.m if dim == "M" else row.n
        for direction in (-1, 1):
            for step in range(1, SEARCH_STEPS + 1):
                cand = (base // 8 - step) * 8 if direction < 0 else (math.ceil(base / 8) + step) * 8
                if cand <= 0:
                    break
                w, e = waves(cand, row.n) if dim == "M" else waves(row.m, cand)
                full = e >= 0.97
                if direction < 0 and full and math.ceil(w - 1e-9) < waves_now:
                    out.append(FullWaveShape(dim, cand, round(w), smaller=True))
                    break
                if direction > 0 and full and math.ceil(w - 1e-9) == waves_now:
                    out.append(FullWaveShape(dim, cand, round(w), smaller=False))
                    break
                if direction > 0 and math.ceil(w - 1e-9) > waves_now:
                    break
    return out


def analyze(ctx: AnalysisContext) -> list[Found[WaveFacts, WaveShapeFacts]]:
    attention = ctx.eager_attention_shapes  # SDPA replaces these matmuls
    rows = [r for r in ctx.matmuls if (r.batch, r.m, r.n, r.k) not in attention]
    judged = [r for r in rows if r.waves >= MIN_WAVES_JUDGED and r.slots > 0]
    flagged = []
    for r in judged:
        waste = r.time_us * (1 - r.wave_efficiency)
        if r.wave_efficiency < FLAG_EFFICIENCY and ctx.share(waste) >= MIN_SHARE:
            flagged.append((waste, r))
    if not flagged:
        return []
    flagged.sort(key=lambda x: -x[0])
    total = sum(w for w, _ in flagged)
    places = tuple(
        Place(
            count=r.calls,
            time_us=waste,
            facts=WaveShapeFacts(r, tuple(nearest_full(r))),
            ops=(r.op,),
            kernels=(r.kernel,),
            source=r.source,
        )
        for waste, r in flagged[:MAX_SITES]
    )
    worst = flagged[0][1]
    return [
        Found(
            category=Category.WAVE_QUANTIZATION,
            time_us=total,
            expected_gain_us=total,
            facts=WaveFacts(len(flagged), worst),
            evidence=(
                Fact("shapes_judged", len(judged), "count"),
                Fact("shapes_flagged", len(flagged), "count"),
                Fact("sms", worst.sms, "count"),
            ),
            places=places,
        )
    ]
