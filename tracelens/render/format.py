"""Number formatting shared by the text renderers."""

from __future__ import annotations

import math
import re
from typing import Any

from tracelens.domain import KERNEL_NAME_CHARS as KERNEL_NAME_CHARS
from tracelens.domain import PerUnit, cut_middle, fmt_us, per_unit
from tracelens.domain import demangle as demangle
from tracelens.domain import fmt_bytes as fmt_bytes
from tracelens.domain import pct as pct
from tracelens.domain import short_kernel as short_kernel
from tracelens.report.findings import Metric

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


def prose(text: object, limit: int = 1500) -> str:
    """Our own sentence (a headline, an advice, a note quoting trace names) made safe to
    print as `plain` does, and never cut inside a word: past `limit` characters it ends at
    the last space before it, with `…`. (`plain` cuts names in the middle, which keeps a
    kernel's start and end but reads as "num_wo…or" in a sentence.)"""
    s = plain(text, limit=None)
    if len(s) <= limit:
        return s
    head = s[: max(limit - 1, 1)]
    space = head.rfind(" ")
    if space > limit // 2:
        head = head[:space]
    return head.rstrip(" ,;:(") + "…"


def analysed_us(report: Any) -> float:
    """The time a report analysed: its GPU ledger's window, or, in a trace with no GPU
    activity (a CPU-only capture), the window itself: a 20 ms window is not "0.0 µs
    analysed"."""
    g = report.gpu_time.total.window_us
    return float(g) if g > 0 else max(float(report.window.end_us - report.window.start_us), 0.0)


def us(value: float) -> str:
    """A duration in µs as a short human string."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    return fmt_us(float(value), fine=True)


def report_unit(report: Any) -> PerUnit:
    """The report's one unit with the window's count of them (issue 27)."""
    return PerUnit(report.window.steps, report.summary.unit)


def in_unit(total_us: float, report: Any, label: bool = True, short: bool = False) -> str:
    """A window total as every renderer shows one (a finding's cost and expected gain, an
    answer's time, the ledger's column): "166 µs per step" where the report counts several
    steps, the total where its unit is the window; `label=False` leaves " per step" off (a
    range's ends, a column headed "per step"); `short`: "166 µs/step" (a legend, a terminal
    column). The JSON keeps the window totals."""
    if total_us is None or (isinstance(total_us, float) and math.isnan(total_us)):
        return "n/a"
    return per_unit(float(total_us), report_unit(report), label=label, fine=True, short=short)


#: Evidence numbers from here up are written with an SI prefix ("989 T"), not as
#: "989,000,000,000,000", which nobody reads at a glance.
LARGE_NUMBER = 1e7


def si_number(value: float) -> str:
    """989e12 -> '989 T', 1.5e9 -> '1.5 G'."""
    for factor, suffix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            v = value / factor
            return f"{v:.3g} {suffix}"
    return f"{value:g}"


def flop_count(value: float) -> str:
    """A FLOP count: 1.1e12 -> '1.10 TFLOP'; NaN (not counted) -> 'n/a'."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    v = float(value)
    for factor, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= factor:
            return f"{v / factor:.3g} {prefix}FLOP"
    return f"{v:.0f} FLOP"


def ratio(value: float) -> str:
    """A model/measured ratio: 1.06 -> '1.06x'; NaN -> 'n/a'."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    return f"{float(value):.3g}x"


def precisions(by: dict[str, float]) -> str:
    """FLOPs by precision as shares, largest first: 'tensor bf16 99%, fp32 1%'."""
    total = sum(v for v in by.values() if v > 0)
    if total <= 0:
        return "none"
    parts = sorted(((v / total, k) for k, v in by.items() if v > 0), reverse=True)
    return ", ".join(f"{k} {pct(sh)}" for sh, k in parts[:3])


def metric(m: Metric, report: Any = None) -> str:
    """One evidence value as the report shows it: a duration that is a window total in the
    report's unit (`in_unit`) where the report is given, a median or a longest as it is."""
    v = m.value
    if isinstance(v, str):
        return v
    if m.unit == "us":
        return in_unit(float(v), report) if m.total and report is not None else us(float(v))
    if m.unit == "share":
        return pct(float(v))
    if m.unit == "bytes":
        return fmt_bytes(float(v))
    if m.unit == "per_s":
        f = float(v)
        return f"{si_number(f)}/s" if abs(f) >= LARGE_NUMBER else f"{f:,.0f}/s"
    if m.unit == "count":
        return f"{int(v):,}"
    if m.unit == "number":
        f = float(v)
        if math.isnan(f):
            return "n/a"
        if abs(f) >= LARGE_NUMBER:
            return si_number(f)
        return f"{f:,.0f}" if abs(f) >= 100 else f"{f:.3g}"
    if isinstance(v, float):
        return si_number(v) if abs(v) >= LARGE_NUMBER else f"{v:,.3g}"
    return str(v)


#: A note longer than this shows its first sentence and folds the rest (issue 27: the
#: down-sampled note is 760 characters, ~14 lines on a phone, above the timeline).
NOTE_FOLD_CHARS = 240
_SENTENCE_END = re.compile(r"(?<=\.)\s+(?=[A-Z])")


def note_parts(note: str) -> tuple[str, str]:
    """A note as shown and as folded: the first sentence and the rest ("" when short)."""
    if len(note) <= NOTE_FOLD_CHARS:
        return note, ""
    cut = _SENTENCE_END.search(note)
    if cut is None or cut.start() > NOTE_FOLD_CHARS:
        return note, ""
    return note[: cut.start()], note[cut.end() :]


def short(name: str, width: int = 90) -> str:
    """Shorten a long (C++ template) kernel name, keeping its start and end."""
    return cut_middle(name, width)


#: Why the roofline could not model a launching op's kernels, in the reader's terms.
UNCOVERED_REASONS = {
    "no_op": "no launching op in the trace: launched before the profiling window, or from a thread it did not record",
    "no_shapes": "no shapes recorded: profile with record_shapes=True",
    # The trace has shapes, only not for this op (a CUDA-graph replay, a compiled region):
    # "profile with record_shapes=True" would be wrong on its face.
    "no_shapes_here": "no shapes recorded for this op (the trace has them for other ops: a graph replay or a "
    "compiled region records none)",
    "no_model": "no FLOP/byte model for this op yet",
    # cudaGraphLaunch replays kernels recorded at capture time; their ops (and shapes)
    # ran then, not in the replay.
    "graph_replay": "replayed from a CUDA graph: the trace has no op shapes for its kernels",
}


#: The versions CUDA writes as one integer, 1000 * major + 10 * minor (13000 is 13.0,
#: 12040 is 12.4): shown as the release a reader knows.
CUDA_INT_VERSIONS = frozenset({"cuda_driver_version", "cuda_runtime_version"})


def shown_versions(versions: dict[str, str]) -> list[tuple[str, str]]:
    """The trace's version rows as a report shows them, sorted: empty ones left out (a
    CUDA trace's `hip_version` is ""), CUDA's integer versions as major.minor."""
    out = []
    for key, value in sorted(versions.items()):
        text = str(value).strip()
        if not text:
            continue
        if key in CUDA_INT_VERSIONS and text.isdigit() and int(text) >= 1000:
            n = int(text)
            text = f"{n // 1000}.{(n % 1000) // 10}"
        out.append((key, text))
    return out


def steps_phrase(report: Any) -> str:
    """The window's steps in the report's one unit: "10 steps", "53 detected iterations",
    "1 call", "one sweep of 53 calls" (a range per configuration: no step repeats)."""
    n, unit = report.window.steps, report.summary.unit
    if unit == "sweep":
        return f"one sweep of {plural(n, 'call')}"
    if unit == "call":
        return plural(n, "call")
    return plural(n, "detected iteration" if report.window.source == "detected" else "step")


def plural(n: int, word: str, many: str | None = None) -> str:
    """`1 step`, `2 steps`: a count with its noun in agreement."""
    return f"{n:,} {word if n == 1 else (many or word + 's')}"
