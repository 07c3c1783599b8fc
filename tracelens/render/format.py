"""Number formatting shared by the text renderers."""

from __future__ import annotations

import math

from tracelens.analyzers.base import Metric


def us(value: float) -> str:
    """A duration in µs as a short human string."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    v = float(value)
    if abs(v) >= 1e6:
        return f"{v / 1e6:.2f} s"
    if abs(v) >= 1e3:
        return f"{v / 1e3:.1f} ms"
    if abs(v) >= 10:
        return f"{v:.0f} µs"
    return f"{v:.1f} µs"


def pct(share: float) -> str:
    if share is None or (isinstance(share, float) and math.isnan(share)):
        return "n/a"
    s = float(share) * 100
    if s >= 10 or s == 0:
        return f"{s:.0f}%"
    if s >= 1:
        return f"{s:.1f}%"
    return f"{s:.2f}%"


def nbytes(value: float) -> str:
    v = float(value)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(v) < 1000 or unit == "TB":
            return f"{v:.0f} {unit}" if unit == "B" else f"{v:.1f} {unit}"
        v /= 1000
    return f"{v:.1f} TB"


def metric(m: Metric) -> str:
    v = m.value
    if isinstance(v, str):
        return v
    if m.unit == "us":
        return us(float(v))
    if m.unit == "share":
        return pct(float(v))
    if m.unit == "bytes":
        return nbytes(float(v))
    if m.unit == "per_s":
        return f"{float(v):,.0f}/s"
    if m.unit == "count":
        return f"{int(v):,}"
    if m.unit == "number":
        f = float(v)
        return "n/a" if math.isnan(f) else (f"{f:,.0f}" if abs(f) >= 100 else f"{f:.3g}")
    if isinstance(v, float):
        return f"{v:,.3g}"
    return str(v)


def short(name: str, width: int = 90) -> str:
    """Shorten a long (C++ template) kernel name, keeping its start and end."""
    if len(name) <= width:
        return name
    keep = width - 1
    head = keep * 2 // 3
    return name[:head] + "…" + name[-(keep - head) :]


#: Why the roofline could not model a launching op's kernels, in the reader's terms.
UNCOVERED_REASONS = {
    "no_op": "no launching op in the trace: launched before the profiling window, or from a thread it did not record",
    "no_shapes": "no shapes recorded: profile with record_shapes=True",
    "no_model": "no FLOP/byte model for this op yet",
}
