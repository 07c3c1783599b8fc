"""Renderers of a DiffReport (`tracelens diff`): Markdown for a PR description or an
issue comment, self-contained HTML, JSON, and a terminal summary. Like the report
renderers they see only the finished DiffReport."""

from __future__ import annotations

import msgspec

from tracelens.render import format as fmt
from tracelens.render.causes import CAUSE_LABELS, CAUSE_SHORT
from tracelens.render.format import plain
from tracelens.render.html import environment
from tracelens.render.json import _enc_hook
from tracelens.render.markdown import fit_comment, md, md_lines
from tracelens.render.terminal import DEFAULT_WIDTH, _Out
from tracelens.report.diff_report import DiffReport

_encoder = msgspec.json.Encoder(enc_hook=_enc_hook)
#: Rows of the terminal's cause and change lists.
TERMINAL_ROWS = 6


def counter(value: float, unit: str) -> str:
    if unit == "share":
        return fmt.pct(value)
    if unit == "us":
        return fmt.us(value)
    return f"{value:,.1f}" if value != int(value) else f"{int(value):,}"


def _env(autoescape: bool) -> object:
    env = environment(autoescape=autoescape)
    env.filters["metric"] = counter
    if not autoescape:
        env.filters["md"] = md
        env.filters["md_lines"] = md_lines
    return env


def render_diff_markdown(d: DiffReport) -> str:
    env = _env(False)
    text = env.get_template("diff.md.j2").render(d=d, labels=CAUSE_LABELS)  # type: ignore[attr-defined]
    return fit_comment(str(text))


def render_diff_html(d: DiffReport) -> str:
    env = _env(True)
    return env.get_template("diff.html.j2").render(d=d, labels=CAUSE_LABELS)  # type: ignore[attr-defined,no-any-return]


def render_diff_json(d: DiffReport) -> str:
    return msgspec.json.format(_encoder.encode(d), indent=2).decode() + "\n"


def render_diff_terminal(
    d: DiffReport, outputs: list[str] | None = None, *, width: int = DEFAULT_WIDTH, colour: bool = False
) -> str:
    """The diff's summary, every line at most `width` columns, coloured only when asked."""
    v = d.verdict
    o = _Out(width, colour)
    verdict_colour = "bright_black" if v.within_noise else ("green" if v.change_us < 0 else "red")
    o.para(
        f"{plain(d.before.trace.file_name)} -> {plain(d.after.trace.file_name)}",
        lead="tracelens diff  ",
        lead_style={"bold": True},
        hang=2,
    )
    o.para(plain(v.text, 2000), body_style={"fg": verdict_colour, "bold": True}, hang=2)
    if v.prediction_text:
        o.para(plain(v.prediction_text, 2000), indent=2, lead="Prediction: ", lead_style={"bold": True})
    for n in d.notes:
        o.para(plain(n, 2000), indent=2, lead="Note: ", lead_style={"fg": "cyan"})
    o.blank()
    o.lines.append(o.style("Per step, by cause:", bold=True))
    names = {c.cause: CAUSE_SHORT.get(c.cause, c.cause) for c in d.causes[:TERMINAL_ROWS]}
    col = max((len(n) for n in names.values()), default=10)
    for c in d.causes[:TERMINAL_ROWS]:
        o.lines.append(
            f"  {names[c.cause]:{col}s} {fmt.us(c.before_us):>9s} -> {fmt.us(c.after_us):>9s}"
            f"  ({'+' if c.change_us > 0 else ''}{fmt.us(c.change_us)})"
        )
    if d.changes:
        o.lines.append(o.style("Largest changes:", bold=True))
        room = max(o.width - 2 - 9 - 7 - 24, 16)
        for ch in d.changes[:TERMINAL_ROWS]:
            o.lines.append(
                f"  {ch.status:8s} {ch.kind:6s} {plain(fmt.short_kernel(ch.name, room)):{room}s} "
                f"{fmt.us(ch.before_us)} -> {fmt.us(ch.after_us)}".rstrip()
            )
    if outputs:
        o.blank()
        o.para(", ".join(plain(x) for x in outputs), lead="Reports: ", hang=2)
    return o.text()
