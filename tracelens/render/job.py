"""The job report (many ranks): HTML (one self-contained file, a rank x step heat map in
inline SVG, no network), Markdown, JSON (the JobReport as-is: the contract in
README.md, "Many ranks") and the terminal summary.

Trace text (file names, finding titles quoting op names) goes through Jinja's
autoescaping in HTML, `md_cell` in Markdown and `plain` on the terminal.
"""

from __future__ import annotations

import jinja2
import msgspec
from markupsafe import Markup, escape

from tracelens.render import format as fmt
from tracelens.render.causes import CAUSE_COLOURS, CAUSE_LABELS
from tracelens.report.job_report import JobReport, RankRow

#: Ranks listed in the HTML/Markdown rank table (stragglers and the slowest first); the
#: JSON has every rank.
MAX_RANK_ROWS = 64
#: Heat map rows taller than this are capped; with many ranks rows shrink to fit
#: HEATMAP_MAX_PX, down to HEATMAP_MIN_ROW_PX (1024 ranks: a tall, thin picture).
HEATMAP_ROW_PX = 18.0
HEATMAP_MIN_ROW_PX = 2.0
HEATMAP_MAX_PX = 720.0
#: Steps shown as heat map columns (the JSON has every step).
MAX_HEATMAP_STEPS = 200
#: Terminal: stragglers and problems shown.
MAX_TERMINAL_ITEMS = 5


def _env(autoescape: bool) -> jinja2.Environment:
    """The single-trace report's environment (templates, filters) plus the job's own."""
    from tracelens.render.html import environment

    env = environment(autoescape)
    env.filters["md"] = md_cell
    env.filters["prose"] = md_prose
    env.filters["cause"] = lambda c: CAUSE_LABELS.get(c, c)
    env.globals["colours"] = CAUSE_COLOURS
    env.globals["labels"] = CAUSE_LABELS
    return env


#: Our own sentences (headline, advice) quote trace text too, but are longer than a cell.
MAX_MD_PROSE = 1500


def md_cell(text: object, limit: int | None = fmt.MAX_TEXT) -> str:
    """Trace text in a Markdown table cell or line: no pipes, newlines, HTML or links."""
    s = fmt.plain(text, limit=limit)
    for ch in ("\\", "|", "`", "*", "_", "[", "]", "<", ">", "#"):
        s = s.replace(ch, "\\" + ch)
    return s


def md_prose(text: object, limit: int = MAX_MD_PROSE) -> str:
    """One of our sentences (headline, advice, a problem) in Markdown: escaped as `md_cell`
    does, cut only at a word (issue 27: the advice read "num_wo…or")."""
    return md_cell(fmt.prose(text, limit), limit=None)


def shown_ranks(rep: JobReport) -> list[RankRow]:
    """The ranks worth a table row: stragglers first, then the slowest steps."""
    strag = [s.rank for s in rep.job.stragglers]
    order = sorted(rep.ranks, key=lambda r: (r.rank not in strag, strag.index(r.rank) if r.rank in strag else 0,
                                             -r.step_us, r.rank))  # fmt: skip
    return order[:MAX_RANK_ROWS]


def heatmap_svg(rep: JobReport, late: bool = False) -> Markup:
    """Rank x step: each cell's colour is the step's time against the job's median step
    (pale: faster, dark red: slower), or with `late` how much later than the first rank
    the rank reached the step's collectives (white: first, dark red: half a step and
    more); stragglers' rows are marked."""
    steps = sorted({st.step for r in rep.ranks for st in (r.late_by_step if late else r.steps)})
    steps = steps[:MAX_HEATMAP_STEPS]
    if not rep.ranks or not steps:
        return Markup("")
    n = len(rep.ranks)
    row = max(HEATMAP_MIN_ROW_PX, min(HEATMAP_ROW_PX, HEATMAP_MAX_PX / n))
    label_w = 64.0 if row >= 10 else 8.0
    col = max(6.0, min(40.0, 640.0 / len(steps)))
    top = 16.0
    width = label_w + col * len(steps) + 4
    height = top + row * n + 4
    med = rep.job.step_us or 1.0
    strag = {s.rank for s in rep.job.stragglers}
    parts = [
        f'<svg class="heat" viewBox="0 0 {width:.0f} {height:.0f}" role="img" aria-label="step time per rank and step">'
    ]
    for j, step in enumerate(steps):
        if len(steps) <= 40 or j % max(len(steps) // 20, 1) == 0:
            parts.append(
                f'<text x="{label_w + j * col + col / 2:.1f}" y="11" class="lab" text-anchor="middle">{step}</text>'
            )
    for i, r in enumerate(rep.ranks):
        y = top + i * row
        by_step = {st.step: st.late_us for st in r.late_by_step} if late else {st.step: st.span_us for st in r.steps}
        if row >= 10:
            mark = " ◀" if r.rank in strag else ""
            parts.append(f'<text x="{label_w - 4:.0f}" y="{y + row * 0.72:.1f}" class="lab" text-anchor="end">'
                         f"rank {r.rank}{mark}</text>")  # fmt: skip
        elif r.rank in strag:
            parts.append(f'<rect x="0" y="{y:.1f}" width="{label_w - 2:.0f}" height="{row:.1f}" fill="#c9372c"/>')
        for j, step in enumerate(steps):
            span = by_step.get(step)
            if span is None:
                continue
            rel = span / med
            fill = _heat(1.0 + rel) if late else _heat(rel)
            what = "later than the first rank" if late else f"({rel:.2f}x the median step)"
            parts.append(
                f'<rect x="{label_w + j * col:.1f}" y="{y:.1f}" width="{col - 1:.1f}" height="{max(row - 1, 1):.1f}" '
                f'fill="{fill}"><title>rank {r.rank}, step {step}: {escape(fmt.us(span))} {what}</title></rect>'
            )
    parts.append("</svg>")
    return Markup("".join(parts))


def _heat(rel: float) -> str:
    """0.8x the median step and faster: pale blue; the median: pale; 1.5x and over: dark red."""
    t = max(-1.0, min(1.0, (rel - 1.0) / 0.5 if rel >= 1 else (rel - 1.0) / 0.2))
    if t >= 0:
        r, g, b = 250 - 49 * t, 240 - 185 * t, 230 - 186 * t
    else:
        r, g, b = 250 + 130 * t, 240 + 40 * t, 230 + 10 * t
    return f"rgb({r:.0f},{g:.0f},{b:.0f})"


def ledger_bar(row: RankRow) -> Markup:
    parts = []
    for e in row.ledger:
        if e.share <= 0:
            continue
        colour = CAUSE_COLOURS.get(e.cause, "#999")
        label = escape(f"{CAUSE_LABELS.get(e.cause, e.cause)}: {fmt.pct(e.share)}")
        parts.append(f'<span style="width:{e.share * 100:.2f}%;background:{colour}" title="{label}"></span>')
    return Markup('<div class="bar">' + "".join(parts) + "</div>")


def render_job_html(rep: JobReport) -> str:
    env = _env(autoescape=True)
    env.globals["ledger_bar"] = ledger_bar
    return env.get_template("job.html.j2").render(
        r=rep, heatmap=heatmap_svg(rep), lateness=heatmap_svg(rep, late=True), shown=shown_ranks(rep)
    )


def render_job_markdown(rep: JobReport) -> str:
    return _env(autoescape=False).get_template("job.md.j2").render(r=rep, shown=shown_ranks(rep))


def render_job_json(rep: JobReport) -> str:
    return msgspec.json.format(msgspec.json.encode(rep), indent=2).decode() + "\n"


def render_job_terminal(
    rep: JobReport, written: list[str], *, width: int = 80, colour: bool = False, verbose: bool = False
) -> str:
    """The job's summary, every line wrapped at `width` with hanging indents (trace text
    stripped of control characters), coloured only when `colour`. How the ranks were read
    (the scheduler) only when `verbose`: it is the tool's business, not the job's (issue 27)."""
    from tracelens.render.terminal import _Out

    o = _Out(width, colour)
    j = rep.job
    of = f" of {j.world_size}" if j.world_size and j.world_size != j.ranks else ""
    backend = f", {j.backend}" if j.backend else ""
    o.para(f": {j.ranks} ranks{of}{backend}, {j.steps} steps, median step {fmt.us(j.step_us)}",
           lead="tracelens job report", lead_style={"bold": True}, hang=2)  # fmt: skip
    o.blank()
    o.para(fmt.prose(j.headline, limit=1000), body_style={"bold": True})
    for s in j.stragglers[:MAX_TERMINAL_ITEMS]:
        o.para(
            f"last at {s.late_share:.0%} of collectives, costs the job {fmt.us(s.cost_us)} per step, reason: "
            f"{fmt.prose(s.reason_label or s.reason, limit=300)}",
            indent=2, lead=f"rank {s.rank}: ", hang=4,
        )  # fmt: skip
        o.para(fmt.prose(s.advice, limit=800), indent=4)
    for c in rep.collectives[:MAX_TERMINAL_ITEMS]:
        bw = f", bus {c.busbw_gbps:.2f} GB/s" if c.busbw_gbps else ""
        size = f", {fmt.fmt_bytes(c.bytes)} each" if c.bytes else ""
        o.para(f"{c.count} calls{size}, median skew {fmt.us(c.median_skew_us)}{bw}, exposed "
               f"{fmt.us(c.exposed_us)} per step", indent=2,
               lead=f"{fmt.plain(c.kind)} on {fmt.plain(c.group, limit=60)}: ", hang=4)  # fmt: skip
    o.para(fmt.prose(j.alignment, limit=600), indent=2, lead="clocks: ", hang=4)
    for p in j.problems[:MAX_TERMINAL_ITEMS]:
        o.para(fmt.prose(p, limit=400), indent=2, lead="! ", lead_style={"fg": "yellow"}, hang=4)
    if len(j.problems) > MAX_TERMINAL_ITEMS:
        o.para(f"and {len(j.problems) - MAX_TERMINAL_ITEMS} more problems (see the report)", indent=2, lead="! ")
    # Sorted by what is printed: how late each rank reaches its collectives.
    latest = sorted(rep.ranks, key=lambda r: (-r.late_us, r.rank))[:3]
    if latest and any(r.late_us > 0 for r in latest):
        o.para(", ".join(f"rank {r.rank} {fmt.us(r.late_us)} after the first ({_cause_words(r)})" for r in latest)
               + " per step", indent=2, lead="latest to arrive: ", hang=4)  # fmt: skip
    if verbose:
        o.para(f"read in {rep.map_seconds:.1f} s by {fmt.plain(rep.scheduler, limit=200)}", indent=2)
    for w in written:
        o.para(fmt.plain(w, limit=400), indent=2, lead="wrote ", hang=4)
    return o.text()


def _cause_words(r: RankRow) -> str:
    """A rank's top cause (besides communication) in plain words."""
    cause = r.cause or _top(r)
    return CAUSE_LABELS.get(cause) or r.cause_label or cause


def _top(r: RankRow) -> str:
    return max(r.ledger, key=lambda e: e.time_us).cause if r.ledger else "n/a"
