"""The words of the shape_dynamism finding."""

from __future__ import annotations

from tracelens.analyzers.base import Found
from tracelens.analyzers.shape_dynamism import ShapeFacts, ShapeSiteFacts
from tracelens.domain import PerUnit, pct, per_unit
from tracelens.explain.base import Words, where
from tracelens.explain.shapes import describe

LABELS = {
    "sites": "op sites whose shapes change",
    "top_site_shapes": "distinct shapes at the top site",
    "new_shape_calls": "calls with a new shape",
    "new_shape_excess_us": "host time of new shapes beyond a repeat",
    "idle_us": "GPU idle in them",
    "steps": "steps in the window",
}


def _advice(f: ShapeFacts) -> str:
    advice = [
        "Pad the varying dimension to a few bucket sizes (e.g. multiples of 64 or powers of two): every shape is "
        "then planned once, in the warm-up, and reused.",
        f"Each new shape makes the library plan again ({f.top_op}: cuDNN builds an execution plan per attention "
        "shape); with a handful of buckets that cost is paid once per bucket. Where the key/value length grows "
        "(a decode loop), attend over the whole preallocated cache with a mask (one shape), or grow it in "
        "buckets."
        if "attention" in f.top_op
        else f"Each new shape makes {f.top_op} plan again (kernel selection per shape); with a handful of "
        "buckets that cost is paid once per bucket.",
    ]
    if f.graph_launches:
        advice.append(f"The step already replays CUDA graphs ({f.graph_launches:,} cudaGraphLaunch calls).")
    else:
        blockers = [f"{f.sites} op site(s) change shape"]
        if f.syncs:
            blockers.append(f"{f.syncs:,} host syncs")
        if f.alloc_calls:
            blockers.append(f"{f.alloc_calls:,} allocator calls at these sites")
        advice.append(
            "CUDA graphs cannot capture this step as it is (" + ", ".join(blockers) + "): a graph replays fixed "
            "shapes and addresses. With bucketed shapes, capture one graph per bucket "
            "(torch.compile(mode='reduce-overhead') does this)."
        )
    advice.append(
        "Under torch.compile, varying shapes recompile: use dynamic=True or torch._dynamo.mark_dynamic(x, dim) for "
        "the varying dimension, or the same buckets."
    )
    return "\n".join(advice)


def words(found: Found[ShapeFacts, ShapeSiteFacts], share: float, unit: PerUnit) -> Words:
    f = found.facts
    top = found.places[0]
    at = where(top.source) if top.source else ""
    return Words(
        title=(
            f"Input shapes change from step to step at {f.sites} op site(s); the first call with each new "
            f"shape costs the host {per_unit(f.excess_us, unit)} beyond a repeat, and the GPU idles "
            f"{per_unit(found.time_us, unit)} "
            f"({pct(share)} of the analysed time) meanwhile, most in {f.top_op} {at} ({describe(f.top)})"
        ),
        advice=_advice(f),
        gain_note="the GPU idle while the host sits in first calls with new shapes, beyond a repeat's host time: "
        "gone when every shape was seen in the warm-up",
        labels=LABELS,
        places=[f"{p.facts.op}: {describe(p.facts.variation)} over {p.facts.steps} step(s)" for p in found.places],
    )
