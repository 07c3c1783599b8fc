"""eager_attention: question 3, attention written as matmul > softmax > matmul.

It writes and reads the [Lq x Lk] score matrix (several times) where a fused
scaled_dot_product_attention kernel keeps it on chip; the calls are found by
tracelens.derive.eager_attention, with the time SDPA would take.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from tracelens.analyzers.base import Category, Fact, Found, Place
from tracelens.derive.context import AnalysisContext
from tracelens.derive.eager_attention import EagerAttention
from tracelens.model.sources import user_source

MAX_SITES = 8


@dataclass(frozen=True)
class AttentionFacts:
    calls: int
    sdpa_us: float  # the same calls as scaled_dot_product_attention, estimated


@dataclass(frozen=True)
class AttentionShape:
    """One shape of eager attention: batch x heads, queries, keys, head dim, dtype."""

    batch: int
    queries: int
    keys: int
    head_dim: int
    dtype: str
    ops: tuple[str, ...]
    eager_us: float  # a call, eager
    sdpa_us: float  # a call, with SDPA (estimated)


def analyze(ctx: AnalysisContext) -> list[Found[AttentionFacts, AttentionShape]]:
    roof = ctx.roofline
    if roof.peaks is None or not roof.kernels:
        return []
    calls = ctx.eager_attention
    if not calls:
        return []
    total = sum(c.time_us for c in calls)
    sdpa = sum(c.sdpa_us for c in calls)
    groups: dict[tuple[int, int, int, int, str], list[EagerAttention]] = defaultdict(list)
    for c in calls:
        groups[(c.batch, c.queries, c.keys, c.head_dim, c.dtype)].append(c)
    places = []
    for (b, lq, lk, d, dtype), cs in sorted(groups.items(), key=lambda kv: -sum(c.time_us for c in kv[1])):
        t = sum(c.time_us for c in cs)
        ops = tuple(dict.fromkeys(ctx.model.arrays.name(r) for r in cs[0].rows))
        shape = AttentionShape(b, lq, lk, d, dtype, ops, t / len(cs), sum(c.sdpa_us for c in cs) / len(cs))
        places.append(
            Place(
                count=len(cs),
                time_us=t,
                facts=shape,
                ops=ops,
                source=user_source(ctx.model, cs[0].rows[0]),
                kind="eager_attention",
            )
        )
    return [
        Found(
            category=Category.EAGER_ATTENTION,
            time_us=total,
            expected_gain_us=total - sdpa,
            facts=AttentionFacts(len(calls), sdpa),
            evidence=(
                Fact("eager_attention_calls", len(calls), "count"),
                Fact("eager_attention_us", total, "us"),
                Fact("sdpa_us", sdpa, "us"),
            ),
            places=tuple(places[:MAX_SITES]),
        )
    ]
