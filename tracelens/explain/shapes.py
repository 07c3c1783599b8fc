"""The words for how an op site's shapes vary (tracelens.derive.shapes.ShapeVariation)."""

from __future__ import annotations

from tracelens.derive.shapes import ShapeVariation

#: Distinct shapes shown before "; ..." where no single dim moves.
SHOWN = 3


def describe(v: ShapeVariation) -> str:
    """ "dim 2 of [8, 8, N, 64] takes 10 values (64..512)", "dim 2 of input 2 [...]", or a
    few shapes ("3 input shapes (input 2: [1, 2]; [3]; [4, 5])")."""
    if not v.varying_input:
        return f"{v.count} input shapes"
    label = f"input {v.arg + 1}" if v.arg is not None else ""
    if v.dim is not None:
        pattern = ", ".join("N" if k == v.dim else str(x) for k, x in enumerate(v.pattern))
        of = f"{label} [{pattern}]" if label else f"[{pattern}]"
        return f"dim {v.dim} of {of} takes {len(v.values)} values ({v.values[0]}..{v.values[-1]})"
    shown = "; ".join(str(list(d)) for d in v.examples)
    lead = f"{label}: " if label else ""
    return f"{v.count} input shapes ({lead}{shown}{'; ...' if v.count > SHOWN else ''})"
