"""Standalone SVG pictures written beside the Markdown (issue 27): the ledger bar and the
headline chart (the timeline by cause, with the SM clock under it where NVML samples
were recorded), ready to drag into a GitHub issue comment, which shows them as images.

Each file is one self-contained SVG document: no scripts, no links, no fonts or images
to fetch, our own numbers and labels; the one piece of trace text (the file name in the
title) is XML-escaped.
"""

from __future__ import annotations

import math
from pathlib import Path

from tracelens.render import format as fmt
from tracelens.render.causes import CAUSE_COLOURS, CAUSE_LABELS
from tracelens.render.html import THROTTLE_SHARE, _clock_range, _throttled, busy_columns, nice_step
from tracelens.report import Report

#: Width of every picture in px: a GitHub comment column shows about 830 px.
WIDTH = 800
#: Side margin, px.
PAD = 12
#: Columns drawn in the timeline picture: the report's 480 bins averaged in groups (an
#: 800 px image shows 2 px per column; the file stays about 60-120 kB).
MAX_COLUMNS = 240
#: A 12 px sans-serif character is about this wide on average (used to wrap the legend).
CHAR_PX = 6.8
#: What each picture is called beside the Markdown: reports/x.md -> reports/x.ledger.svg.
SUFFIXES = {"ledger": ".ledger.svg", "timeline": ".timeline.svg"}


def x(text: object) -> str:
    """Text for an SVG element or attribute (quotes included), control characters dropped."""
    s = "".join(ch for ch in str(text) if ch >= " " or ch == "\t")
    # What xml.sax.saxutils.escape(s, {'"': "&quot;", "'": "&apos;"}) does, in its order;
    # importing it imports urllib.request, http.client and ssl: 18 ms of every report's
    # start-up on the development machine (issue 30).
    return (
        s.replace("&", "&amp;").replace(">", "&gt;").replace("<", "&lt;").replace('"', "&quot;").replace("'", "&apos;")
    )


def _doc(height: float, body: list[str], label: str) -> str:
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height:.0f}" '
        f'viewBox="0 0 {WIDTH} {height:.0f}" role="img" aria-label="{x(label)}" '
        'font-family="-apple-system, Segoe UI, Helvetica, Arial, sans-serif" font-size="12">\n'
        f'<rect width="{WIDTH}" height="{height:.0f}" fill="#ffffff" stroke="#d0d7de"/>\n'
        + "\n".join(body)
        + "\n</svg>\n"
    )


def _legend(items: list[tuple[str, str]], top: float) -> tuple[list[str], float]:
    """Colour keys wrapped into rows across the width; returns the elements and the y below."""
    out, cx, cy = [], float(PAD), top
    for colour, text in items:
        w = 16 + len(text) * CHAR_PX + 14
        if cx + w > WIDTH - PAD and cx > PAD:
            cx, cy = float(PAD), cy + 18
        out.append(f'<rect x="{cx:.1f}" y="{cy - 9:.1f}" width="11" height="11" rx="2" fill="{colour}"/>')
        out.append(f'<text x="{cx + 16:.1f}" y="{cy:.1f}" fill="#1f2328">{x(text)}</text>')
        cx += w
    return out, cy + 12


def _title(report: Report, what: str) -> str:
    return f"tracelens · {report.trace.file_name} · {what}"


def ledger_svg(report: Report) -> str | None:
    """The window by cause as one bar, each cause's share and time in the legend."""
    g = report.gpu_time.total
    entries = [e for e in g.ledger if e.time_us > 0]
    if g.window_us <= 0 or not entries:
        return None
    title = _title(report, "where the time goes")
    body = [f'<text x="{PAD}" y="20" font-weight="600" fill="#1f2328">{x(title)}</text>']
    bx, bw, by, bh = PAD, WIDTH - 2 * PAD, 30, 26
    cursor = float(bx)
    for e in entries:
        w = bw * e.share
        body.append(
            f'<rect x="{cursor:.2f}" y="{by}" width="{max(w, 0.0):.2f}" height="{bh}" '
            f'fill="{CAUSE_COLOURS.get(e.cause, "#9aa3ad")}"><title>{x(CAUSE_LABELS.get(e.cause, e.cause))}: '
            f"{x(fmt.us(e.time_us))} ({x(fmt.pct(e.share))})</title></rect>"
        )
        cursor += w
    body.append(f'<rect x="{bx}" y="{by}" width="{bw}" height="{bh}" fill="none" stroke="#d0d7de"/>')
    per = fmt.report_unit(report).splits
    items = []
    for e in entries:
        label = f"{CAUSE_LABELS.get(e.cause, e.cause)} {fmt.pct(e.share)} ({fmt.us(e.time_us)}"
        label += f", {fmt.in_unit(e.time_us, report, short=True)})" if per else ")"
        items.append((CAUSE_COLOURS.get(e.cause, "#9aa3ad"), label))
    legend, bottom = _legend(items, by + bh + 22)
    body.extend(legend)
    foot = f"{fmt.us(g.window_us)} analysed; every microsecond has one cause, the causes add up to 100%"
    body.append(f'<text x="{PAD}" y="{bottom + 8:.1f}" fill="#59636e" font-size="11">{x(foot)}</text>')
    return _doc(bottom + 18, body, title)


def _grouped(values: list[float], k: int) -> list[float]:
    return [sum(values[i : i + k]) / len(values[i : i + k]) for i in range(0, len(values), k)]


def timeline_svg(report: Report) -> str | None:
    """The timeline by cause (the HTML's 'Over time' chart) with a time axis and legend;
    under it the SM clock with its maximum dashed and the throttled-while-busy stretches
    shaded, where the trace has NVML samples."""
    tl = report.timeline
    n = len(next(iter(tl.by_cause.values()), ())) if tl else 0
    if tl is None or n == 0 or tl.end_us <= tl.start_us:
        return None
    k = max(math.ceil(n / MAX_COLUMNS), 1)
    cols = {c: _grouped([float(v) for v in vals], k) for c, vals in tl.by_cause.items() if any(vals)}
    m = math.ceil(n / k)
    title = _title(report, "GPU time by cause over the window")
    body = [f'<text x="{PAD}" y="20" font-weight="600" fill="#1f2328">{x(title)}</text>']
    left, right, top, plot_h = PAD + 40, WIDTH - PAD, 32, 110
    pw = right - left
    cw = pw / m
    body.append(f'<text x="{left - 6}" y="{top + 9}" text-anchor="end" fill="#59636e" font-size="11">100%</text>')
    body.append(f'<text x="{left - 6}" y="{top + plot_h}" text-anchor="end" fill="#59636e" font-size="11">0</text>')
    for i in range(m):
        y = float(top + plot_h)
        for cause in CAUSE_COLOURS:
            col = cols.get(cause)
            if not col or i >= len(col) or col[i] <= 0:
                continue
            h = col[i] * plot_h
            y -= h
            body.append(
                f'<rect x="{left + i * cw:.2f}" y="{y:.2f}" width="{cw + 0.3:.2f}" height="{h:.2f}" '
                f'fill="{CAUSE_COLOURS[cause]}"/>'
            )
    span = tl.end_us - tl.start_us
    if 1 < len(tl.steps) <= pw / 6:
        for _st, s0, _s1 in tl.steps:
            sx = left + (s0 - tl.start_us) / span * pw
            body.append(
                f'<line x1="{sx:.1f}" x2="{sx:.1f}" y1="{top}" y2="{top + plot_h}" stroke="#1f2328" '
                'stroke-dasharray="3 3" opacity="0.45"/>'
            )
    body.append(f'<rect x="{left}" y="{top}" width="{pw}" height="{plot_h}" fill="none" stroke="#d0d7de"/>')
    y_axis = top + plot_h
    body.extend(_time_ticks(span, left, pw, y_axis))
    cursor = float(y_axis + 34)
    clock = _clock_strip(report, left, pw, cursor)
    if clock:
        body.extend(clock[0])
        cursor = clock[1]
    shown = [c for c in CAUSE_COLOURS if c in cols]
    legend, bottom = _legend([(CAUSE_COLOURS[c], CAUSE_LABELS.get(c, c)) for c in shown], cursor + 8)
    body.extend(legend)
    return _doc(bottom + 6, body, title)


def _time_ticks(span: float, left: float, pw: float, y: float) -> list[str]:
    step = nice_step(span, 6)
    out, t = [], 0.0
    while t <= span * (1 + 1e-9):
        tx = left + t / span * pw
        if t / span <= 0.93:
            out.append(f'<line x1="{tx:.1f}" x2="{tx:.1f}" y1="{y}" y2="{y + 4}" stroke="#59636e"/>')
            out.append(
                f'<text x="{tx + 2:.1f}" y="{y + 16}" fill="#59636e" font-size="11">{x(fmt.us(t) if t else "0")}</text>'
            )
        t += step
    out.append(
        f'<text x="{left + pw / 2:.1f}" y="{y + 28}" text-anchor="middle" fill="#59636e" font-size="11">'
        "time from the start of the analysed window</text>"
    )
    return out


def _clock_strip(report: Report, left: float, pw: float, top: float) -> tuple[list[str], float] | None:
    """The SM clock under the timeline, its y range fitted to the data (html._clock_range)."""
    cl = report.clocks
    if cl is None or not cl.sm_mhz or cl.end_us <= cl.start_us:
        return None
    vals = [float(v) for v in cl.sm_mhz]
    finite = [v for v in vals if v == v]
    if not finite:
        return None
    n = len(vals)
    bottom, topv = _clock_range(finite, cl.max_sm_mhz, 200.0)
    h = 56.0
    busy = busy_columns(report.timeline)
    runs = _throttled(cl, busy if busy is not None and len(busy) == n else None)

    def fy(v: float) -> float:
        return top + 18 + h * (1 - min(max((v - bottom) / (topv - bottom), 0.0), 1.0))

    label = f"SM clock {min(finite):,.0f}–{max(finite):,.0f} MHz"
    if cl.max_sm_mhz:
        label += f" · max {cl.max_sm_mhz:,.0f} MHz (dashed)"
    if runs:
        label += f" · shaded: busy below {THROTTLE_SHARE:.0%} of the max clock"
    out = [f'<text x="{PAD}" y="{top + 10}" fill="#1f2328">{x(label)}</text>']
    cw = pw / n
    for i, j in runs:
        out.append(
            f'<rect x="{left + i * cw:.2f}" y="{top + 18}" width="{(j - i) * cw:.2f}" height="{h}" '
            'fill="#d6453d" opacity="0.14"/>'
        )
    if cl.max_sm_mhz:
        ry = fy(cl.max_sm_mhz)
        out.append(
            f'<line x1="{left}" x2="{left + pw}" y1="{ry:.1f}" y2="{ry:.1f}" stroke="#1f2328" '
            'stroke-dasharray="4 3" opacity="0.5"/>'
        )
    pts = " ".join(f"{left + (i + 0.5) * cw:.1f},{fy(v):.1f}" for i, v in enumerate(vals) if v == v)
    out.append(f'<polyline points="{pts}" fill="none" stroke="#1f6feb" stroke-width="1.5"/>')
    out.append(f'<rect x="{left}" y="{top + 18}" width="{pw}" height="{h}" fill="none" stroke="#d0d7de"/>')
    for v, yy in ((topv, top + 18 + 9), (bottom, top + 18 + h)):
        out.append(f'<text x="{left - 6}" y="{yy:.1f}" text-anchor="end" fill="#59636e" font-size="11">{v:,.0f}</text>')
    return out, top + 18 + h + 22


def chart_files(markdown_path: Path) -> dict[str, Path]:
    """Where each picture goes beside the Markdown: reports/x.md -> reports/x.ledger.svg."""
    stem = markdown_path.name[:-3] if markdown_path.name.endswith(".md") else markdown_path.name
    return {kind: markdown_path.with_name(stem + suffix) for kind, suffix in SUFFIXES.items()}


def render_charts(report: Report) -> dict[str, str]:
    """The pictures this report has (a trace without GPU time has none), by kind."""
    out = {}
    for kind, render in (("ledger", ledger_svg), ("timeline", timeline_svg)):
        svg = render(report)
        if svg is not None:
            out[kind] = svg
    return out
