"""The memory snapshot report (`tracelens report snapshot.pickle`): HTML (one
self-contained file, inline SVG, no network), Markdown, JSON (the SnapshotReport as-is)
and the terminal summary's lines (render.terminal lays them out). Frames and paths are
trace text: Jinja's autoescape in HTML, `md` in Markdown, `plain` on the terminal."""

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
