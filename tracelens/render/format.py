"""Number formatting shared by the text renderers."""

from __future__ import annotations

import math
import re

from tracelens.analyzers.base import Metric

#: Characters a terminal acts on rather than shows: C0 controls (ESC starts OSC 0 title,
#: OSC 52 clipboard and OSC 8 link sequences, CSI colours and cursor moves; CR and BS
#: overwrite what was printed), DEL, C1 controls (8-bit CSI/OSC), and the bidirectional
#: overrides and isolates that make text display in another order than it reads.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
#: Lone surrogates: undecodable bytes of a path (Python's surrogateescape) or a `\ud800`
#: escape in the JSON. No UTF-8 stream can carry them.
_SURROGATE = re.compile("[\ud800-\udfff]")
#: Trace text longer than this (a 30,000-character function name) is cut in the middle
#: wherever it is shown; real kernel names reach about 5,100 characters, and what matters
#: for recognising one is its start and end.
MAX_TEXT = 300


def plain(text: object, limit: int | None = MAX_TEXT) -> str:
    """Untrusted text (trace names, paths, messages quoting them) made safe to print on
    a terminal: control characters shown as `?`, lone surrogates (undecodable path
    bytes) as U+FFFD, and at most `limit` characters."""
    s = _SURROGATE.sub("\ufffd", str(text))
    s = _CONTROL.sub("?", s)
    return short(s, limit) if limit is not None else s


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
    keep = max(width - 1, 1)
    head = keep * 2 // 3
    return name[:head] + "…" + name[-(keep - head) :]


#: Why the roofline could not model a launching op's kernels, in the reader's terms.
UNCOVERED_REASONS = {
    "no_op": "no launching op in the trace: launched before the profiling window, or from a thread it did not record",
    "no_shapes": "no shapes recorded: profile with record_shapes=True",
    "no_model": "no FLOP/byte model for this op yet",
}
