"""Terminal: a short summary that fits the terminal's width (80 columns unless told
otherwise), long sentences wrapped at word boundaries with hanging indents, colour only
when asked for (the CLI asks on a terminal without NO_COLOR).

Every piece of text that can come from the trace or the command line is made `plain`
before it is laid out: no control characters (OSC/CSI sequences, CR, backspace) reach
the terminal, and no piece is longer than a few lines."""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import sys
import textwrap
from typing import TextIO

import typer

from tracelens.domain import category_label
from tracelens.render.causes import CAUSE_SHORT
from tracelens.render.format import analysed_us, in_unit, pct, plain, steps_phrase, us
from tracelens.report import Report, SnapshotReport

_STATUS_STYLE = {
    "yes": ("YES", "red"),
    "minor": ("minor", "yellow"),
    "no": ("no", "green"),
    "not_measurable": ("no data", "bright_black"),
    "not_built": ("not built", "bright_black"),
    "unknown": ("unknown", "bright_black"),
}
_SEVERITY_COLOUR = {"high": "red", "medium": "yellow", "low": "cyan", "info": "bright_black"}
_QUESTION_SHORT = {
    "host_waits": "Host waits on device / device on host?",
    "launch": "Kernel-launch overhead?",
    "memory": "Memory-bandwidth bound?",
    "shape_dynamism": "Shape dynamism?",
    "allocation": "Allocation?",
    "compute": "Raw compute, matmul shapes, clocks?",
}
MAX_FINDINGS = 5
#: Our own sentences (headline, advice, notes) may quote trace text; cap them too.
MAX_PROSE = 1_000
#: The width when the output is not a terminal (a file, a pipe, a CI log): the width
#: most terminals open at, and what a pasted summary should fit.
DEFAULT_WIDTH = 80
#: Narrower than this, hanging indents would leave no room for words.
MIN_WIDTH = 40
#: The longest line on a wide terminal: prose gets hard to read past this.
MAX_WIDTH = 120
#: Keeps a number with its unit (and a cause with its share) on one line: textwrap does
#: not break at U+00A0; it is turned back into a space after wrapping.
_NBSP = "\u00a0"
_NUMBER_UNIT = re.compile(r"(\d) (µs|ms|s|%|W|MHz|°C|B|KB|MB|GB|TB|TFLOP/s|GB/s)(?=[\s,.;:)]|$)")
#: The cost column of the question list: "635.8 ms/step (52%)".
COST_COLUMN = 19


def use_colour(stream: TextIO | None = None) -> bool:
    """Colour on a terminal, unless NO_COLOR is set (https://no-color.org: any non-empty
    value) or TERM is "dumb"."""
    stream = stream if stream is not None else sys.stdout
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("TERM") == "dumb":
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def terminal_width(stream: TextIO | None = None) -> int:
    """The width to lay the summary out at: the terminal's (COLUMNS wins, as everywhere),
    80 when the output is not a terminal, kept within MIN_WIDTH..MAX_WIDTH."""
    stream = stream if stream is not None else sys.stdout
    isatty = getattr(stream, "isatty", None)
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit():
        width = int(columns)
    elif isatty and isatty():
        width = shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns
    else:
        width = DEFAULT_WIDTH
    return max(MIN_WIDTH, min(width, MAX_WIDTH))


class _Out:
    """Lines laid out at one width, styled only when colour is on."""

    def __init__(self, width: int, colour: bool) -> None:
        self.width = max(width, MIN_WIDTH)
        self.colour = colour
        self.lines: list[str] = []

    def style(self, text: str, **kw: object) -> str:
        return typer.style(text, **kw) if self.colour else text  # type: ignore[arg-type]

    def blank(self) -> None:
        if self.lines and self.lines[-1] != "":
            self.lines.append("")

    def para(
        self,
        text: str,
        indent: int = 0,
        hang: int | None = None,
        lead: str = "",
        lead_style: dict[str, object] | None = None,
        body_style: dict[str, object] | None = None,
    ) -> None:
        """`lead` then `text`, wrapped at words to the width; the first line starts at
        `indent`, the others at `hang` (default: under the text after the lead). Line
        breaks the text already has are kept (advice comes as separate sentences)."""
        text = _NUMBER_UNIT.sub("\\1" + _NBSP + "\\2", text)
        first = " " * (indent + len(lead))
        rest = " " * (indent + len(lead) if hang is None else hang)
        out: list[str] = []
        for n, chunk in enumerate(text.split("\n")):
            out += textwrap.wrap(
                chunk,
                width=self.width,
                initial_indent=first if n == 0 else rest,
                subsequent_indent=rest,
                break_long_words=True,
                break_on_hyphens=False,
            ) or ([first.rstrip()] if n == 0 else [])
        for i, line in enumerate(out):
            line = line.replace(_NBSP, " ")
            pad = len(line) - len(line.lstrip(" "))
            body = self.style(line[pad:], **body_style) if body_style and line[pad:] else line[pad:]
            if i == 0 and lead:
                self.lines.append((" " * indent + self.style(lead, **(lead_style or {})) + body).rstrip())
            else:
                self.lines.append(line[:pad] + body)

    def text(self) -> str:
        while self.lines and self.lines[-1] == "":
            self.lines.pop()
        return "\n".join(self.lines) + "\n"


def _plain_text(report: Report) -> Report:
    """The report with every text field the summary prints made plain (names, paths,
    sentences quoting them); numbers and our own labels are left as they are."""
    t, s = report.trace, report.summary
    return dataclasses.replace(
        report,
        trace=dataclasses.replace(t, file_name=plain(t.file_name), gpu_name=plain(t.gpu_name)),
        summary=dataclasses.replace(
            s,
            headline=plain(s.headline, MAX_PROSE),
            primary_advice="\n".join(plain(line, MAX_PROSE) for line in s.primary_advice.split("\n")),
            notes=tuple(plain(n, MAX_PROSE) for n in s.notes),
        ),
        # A title is our sentence quoting trace text: capped as prose, so the cut never
        # lands in the middle of the op and source it names.
        findings=tuple(dataclasses.replace(f, title=plain(f.title, MAX_PROSE)) for f in report.findings),
    )


def render_terminal(
    report: Report, outputs: list[str] | None = None, *, width: int = DEFAULT_WIDTH, colour: bool = False
) -> str:
    """The summary, every line at most `width` columns (a word longer than the width,
    such as a path, is broken)."""
    from tracelens.render.html import device_label

    report, outputs = _plain_text(report), [plain(o) for o in outputs or ()]
    o = _Out(width, colour)
    t = report.trace
    gt = report.gpu_time.total
    w = report.window
    steps = steps_phrase(report) if w.steps else "no steps found"
    o.para(t.file_name, lead="tracelens  ", lead_style={"bold": True}, hang=2)
    o.para(f"{plain(device_label(report))} · {steps} · {us(analysed_us(report))} analysed", indent=0, hang=2)
    if gt.window_us > 0:
        parts = [f"{CAUSE_SHORT[e.cause]}{_NBSP}{pct(e.share)}" for e in gt.ledger if e.share >= 0.005]
        o.para(
            f"GPU busy {pct(gt.busy_us / gt.window_us)}, idle {pct(gt.idle_us / gt.window_us)}: " + " · ".join(parts),
            hang=2,
        )
    o.blank()
    s = report.summary
    if s.primary:
        o.para(
            category_label(s.primary),
            lead="Primary bottleneck: ",
            lead_style={"bold": True},
            body_style={"fg": "red", "bold": True},
        )
        o.para(s.headline, indent=2)
        o.para(s.primary_advice, indent=2, lead="Fix: ", lead_style={"bold": True})
    else:
        o.para(s.headline, lead="No primary bottleneck: ", lead_style={"bold": True}, hang=2)
    for note in s.notes:
        o.para(note, indent=2, lead="Note: ", lead_style={"fg": "cyan"})
    o.blank()
    o.lines.append(o.style("In diagnostic order:", bold=True))
    longest = max((len(_QUESTION_SHORT.get(q.id, q.question)) for q in report.questions), default=0)
    room = max(min(longest, o.width - 5 - 1 - 9 - 1 - COST_COLUMN), 10)  # "  N. " question status cost
    for q in report.questions:
        label, colour_name = _STATUS_STYLE.get(q.status, (q.status, "white"))
        cost = f" {in_unit(q.time_us, report, short=True)}" if q.status in ("yes", "minor") else ""
        if cost and 5 + room + 1 + 9 + len(cost) + len(pct(q.share)) + 3 <= o.width:
            cost += f" ({pct(q.share)})"  # the share where the line has room for it
        question = _QUESTION_SHORT.get(q.id, q.question)
        if len(question) > room:
            question = question[: room - 1] + "…"
        status = o.style(label, fg=colour_name) + (" " * (9 - len(label)) + cost if cost else "")
        o.lines.append(f"  {q.number}. {question:{room}s} {status}")
    if report.findings:
        o.blank()
        o.lines.append(o.style("Findings:", bold=True))
        # The primary finding first, marked (issue 27); the rest in diagnostic order.
        primary = [f for f in report.findings if s.primary and f.category.value == s.primary][:1]
        for f in [*primary, *(f for f in report.findings if f not in primary)][:MAX_FINDINGS]:
            sev = f"[{f.severity.value}]"
            indent = 4 if f.parent and f not in primary else 2
            lead = ("↳ " if f.parent and f not in primary else "") + ("* primary " if f in primary else "") + sev + " "
            o.para(
                f"{category_label(f.category)}: {f.title}",
                indent=indent,
                lead=lead,
                lead_style={"fg": _SEVERITY_COLOUR.get(f.severity.value, "white")},
            )
        if len(report.findings) > MAX_FINDINGS:
            o.para(f"… {len(report.findings) - MAX_FINDINGS} more in the full report", indent=2)
    if report.graphs is not None:
        g = report.graphs
        how = []
        if g.annotated_share:
            how.append(f"{pct(g.annotated_share)} annotated")
        if g.captured_share:
            how.append(f"{pct(g.captured_share)} matched to capture traces")
        o.blank()
        o.para(
            f"{g.replays} replays, {pct(g.replayed_share)} of busy time"
            + (f" ({', '.join(how)})" if how else " (no capture information)")
            + f"; the roofline models {pct(g.modelled_share)} of it",
            lead="CUDA graphs: ",
            lead_style={"bold": True},
            hang=2,
        )
    if report.serving is not None:
        sv = report.serving
        text = f"{sv.steps} {plain(sv.framework)} steps, {sv.with_sizes} with attention sizes"
        if sv.attention_us:
            text += f"; attention {us(sv.attention_us)}, {pct(sv.attention_modelled_share)} with a roofline"
        if sv.cache_use:
            text += f"; the requests hold {pct(sv.cache_use)} of the cache attention reads"
        o.para(text, lead="Serving: ", lead_style={"bold": True}, hang=2)
    if report.snapshot is not None:
        from tracelens.render.snapshot import snapshot_lines

        o.blank()
        for lead, text in snapshot_lines(report.snapshot, o.width)[:3]:
            o.para(text, lead=lead, lead_style={"bold": True} if lead.strip() else None, hang=len(lead) or 4)
    if outputs:
        o.blank()
        o.para(", ".join(outputs), lead="Reports: ", hang=2)
    return o.text()


def render_snapshot_terminal(
    rep: SnapshotReport, outputs: list[str] | None = None, *, width: int = 80, colour: bool = False
) -> str:
    from tracelens.render.snapshot import snapshot_lines

    s = rep.snapshot
    o = _Out(width, colour)
    o.para(plain(s.file_name), lead="tracelens  ", lead_style={"bold": True}, hang=2)
    hist = f"{s.entries} allocator events" if s.recorded else "no allocation history (state at snapshot time)"
    o.para(f"memory snapshot · device {s.device} · {hist}" + (f" over {us(s.span_us)}" if s.span_us else ""), hang=2)
    o.blank()
    for lead, text in snapshot_lines(s, width):
        o.para(text, lead=lead, lead_style={"bold": True} if lead.strip() else None, hang=len(lead) or 4)
    for a in s.advice:
        o.blank()
        o.para(plain(a, 600), lead="Advice: ", lead_style={"fg": "cyan"}, hang=2)
    for n in s.notes:
        o.para(plain(n, 600), indent=2, lead="Note: ", lead_style={"fg": "cyan"})
    if outputs:
        o.blank()
        o.para(", ".join(plain(x) for x in outputs), lead="Reports: ", hang=2)
    return o.text()
