"""The words of the wave_quantization finding."""

from __future__ import annotations

from tracelens.analyzers.base import Found
from tracelens.analyzers.wave_quantization import FullWaveShape, WaveFacts, WaveShapeFacts
from tracelens.domain import PerUnit, pct, per_unit
from tracelens.explain.base import Words

LABELS = {
    "shapes_judged": "matmul shapes judged (at least one full wave)",
    "shapes_flagged": "shapes flagged",
    "sms": "SMs",
}


def _full(s: FullWaveShape) -> str:
    return f"{s.dim}={s.value} ({s.waves} waves, {'less time' if s.smaller else 'same time, more work'})"


def _place(p: WaveShapeFacts) -> str:
    r = p.row
    hint = ", ".join(_full(s) for s in p.nearest)
    return (
        f"{r.op} {r.batch}x{r.m}x{r.n}x{r.k} {r.dtype}: tile {r.tile or '(from grid)'}, {r.tiles} tiles on "
        f"{r.slots} slots = {r.waves:.2f} waves, last wave {pct(r.last_wave_fill)} full, efficiency "
        f"{pct(r.wave_efficiency)}" + (f"; nearest full-wave shapes: {hint}" if hint else "")
    )


def words(found: Found[WaveFacts, WaveShapeFacts], share: float, unit: PerUnit) -> Words:
    f = found.facts
    n, worst = f.shapes, f.worst
    title = (
        f"{n} matmul shape{'s' if n > 1 else ''} end{'' if n > 1 else 's'} "
        "on a mostly empty wave of tiles "
        f"(worst: {worst.m}x{worst.n}x{worst.k}, {pct(worst.wave_efficiency)} efficient); about "
        f"{per_unit(found.time_us, unit)} wasted"
    )
    return Words(
        title=title,
        advice=(
            "Choose sizes whose output tiles fill whole waves: adjust the batch x sequence (M) or the feature "
            "size (N) to the nearest full-wave shape listed, or fold work together (larger batch, fused "
            "projections such as one QKV matmul) so the partial wave is a small part of the total. "
            "torch.compile's max-autotune can also pick a tile that divides the shape better."
        ),
        gain_note="the flagged shapes' time x (1 - wave efficiency), reached when the last wave is full",
        labels=LABELS,
        places=[_place(p.facts) for p in found.places],
    )
