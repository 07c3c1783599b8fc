"""The memory snapshot report (`tracelens report snapshot.pickle`): HTML (one
self-contained file, inline SVG, no network), Markdown, JSON (the SnapshotReport as-is)
and the terminal summary. Frames and paths are trace text: Jinja's autoescape in HTML,
`md` in Markdown, `plain` on the terminal."""

from __future__ import annotations

import msgspec

from tracelens.render.format import fmt_bytes as nbytes
from tracelens.render.format import pct, plain, us
from tracelens.render.json import _encoder
from tracelens.report import SnapshotReport, SnapshotSummary

#: Source lines shown on the terminal (the other reports list MAX_SITES).
MAX_TERMINAL_SITES = 5


def render_snapshot_html(rep: SnapshotReport) -> str:
    from tracelens.render.html import environment

    return environment(autoescape=True).get_template("snapshot.html.j2").render(r=rep)


def render_snapshot_markdown(rep: SnapshotReport) -> str:
    from tracelens.render.html import environment
    from tracelens.render.markdown import fit_comment, md

    env = environment(autoescape=False)
    env.filters["md"] = md
    return fit_comment(env.get_template("snapshot.md.j2").render(r=rep))


def render_snapshot_json(rep: SnapshotReport) -> str:
    return msgspec.json.format(_encoder.encode(rep), indent=2).decode() + "\n"


def snapshot_lines(s: SnapshotSummary, width: int) -> list[tuple[str, str]]:
    """(lead, text) pairs of the snapshot's summary, shared by its own terminal summary
    and the trace report's line about a snapshot beside the trace."""
    head = f"peak {nbytes(s.peak_allocated)} allocated, {nbytes(s.peak_reserved)} reserved"
    if s.peak_at_us is not None:
        head += f" at {us(s.peak_at_us)}"
    if s.peak_phase:
        head += f" (in {plain(s.peak_phase)})"
    cats = ", ".join(f"{c.category} {nbytes(c.bytes)} ({pct(c.share)})" for c in s.categories[:6])
    out = [("Memory: ", head), ("Held by: ", cats)]
    for x in s.sites[:MAX_TERMINAL_SITES]:
        where = f"{plain(x.source.label)} {plain(x.source.function)}" if x.source else "(no Python frame)"
        if x.library:
            where += f" via {plain(x.library.label)}"
        out.append(("  ", f"{nbytes(x.bytes)} {x.category}: {where}"))
    return out


def render_snapshot_terminal(
    rep: SnapshotReport, outputs: list[str] | None = None, *, width: int = 80, colour: bool = False
) -> str:
    from tracelens.render.terminal import _Out

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
