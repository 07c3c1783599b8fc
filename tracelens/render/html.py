"""HTML: one self-contained file (inline CSS, inline SVG, a few lines of inline JS; no
network requests), readable on a laptop and a phone.

All text from the trace (kernel and op names, file paths) goes through Jinja's
autoescaping; the SVG is built here from numbers only.
"""

from __future__ import annotations

import math
from pathlib import Path

import jinja2
from markupsafe import Markup, escape

from tracelens.render import format as fmt
from tracelens.render.causes import CAUSE_COLOURS, CAUSE_LABELS, CAUSE_SHORT
from tracelens.report import ClockTimeline, Report, RooflineSummary, Timeline

#: Minimum distance between step labels on the timeline.
STEP_LABEL_PX = 36
#: Per-step table rows shown in HTML (the JSON has every step).
MAX_STEP_ROWS = 200


def template_dir() -> Path:
    """templates/ inside the installed package (wheel), else the repository's top-level
    templates/ (editable install, source checkout)."""
    here = Path(__file__).resolve()
    for candidate in (here.parents[1] / "templates", here.parents[2] / "templates"):
        if (candidate / "report.html.j2").is_file():
            return candidate
    raise FileNotFoundError("tracelens templates not found (expected templates/report.html.j2)")


def environment(autoescape: bool) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(template_dir())),
        autoescape=autoescape,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters["us"] = fmt.us
    env.filters["pct"] = fmt.pct
    env.filters["nbytes"] = fmt.nbytes
    env.filters["metric"] = fmt.metric
    env.filters["short"] = fmt.short
    env.filters["waves_svg"] = waves_svg
    env.globals["uncovered_reasons"] = fmt.UNCOVERED_REASONS
    return env


def timeline_svg(tl: Timeline, width: int = 960, height: int = 150) -> Markup:
    """Stacked columns per time bin: busy at the bottom, idle causes above; host sync
    returns as ticks on top; steps as labelled boundaries."""
    n = len(next(iter(tl.by_cause.values()), ()))
    if n == 0 or tl.end_us <= tl.start_us:
        return Markup("")
    top_pad, axis = 18, 18
    plot_h = height - top_pad - axis
    bw = width / n
    parts: list[str] = [
        f'<svg class="timeline" viewBox="0 0 {width} {height}" preserveAspectRatio="none" role="img" '
        f'aria-label="GPU busy and idle over time">'
    ]
    order = list(CAUSE_COLOURS)
    series = tl.by_cause
    for i in range(n):
        y = float(top_pad + plot_h)
        x = i * bw
        for key in order:
            col = series.get(key, ())
            frac = float(col[i]) if i < len(col) else 0.0
            if frac <= 0:
                continue
            h = frac * plot_h
            y -= h
            parts.append(
                f'<rect x="{x:.2f}" y="{y:.2f}" width="{bw + 0.3:.2f}" height="{h:.2f}" fill="{CAUSE_COLOURS[key]}"/>'
            )
    span = tl.end_us - tl.start_us
    for t in tl.syncs:
        x = (t - tl.start_us) / span * width
        parts.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="2" y2="{top_pad - 4}" class="sync"/>')
    # Step boundaries: lines while they stay apart, labels at least STEP_LABEL_PX apart.
    last_label = -1e9
    draw_lines = len(tl.steps) <= width / 4
    for step, s0, _s1 in tl.steps:
        x = (s0 - tl.start_us) / span * width
        if draw_lines:
            parts.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top_pad}" y2="{top_pad + plot_h}" class="step"/>')
        if x - last_label >= STEP_LABEL_PX:
            parts.append(f'<text x="{x + 3:.1f}" y="{height - 5}" class="steplabel">#{int(step)}</text>')
            last_label = x
    if not tl.steps:
        for frac in (0.0, 0.25, 0.5, 0.75):
            x = frac * width
            parts.append(f'<text x="{x + 3:.1f}" y="{height - 5}" class="steplabel">{fmt.us(frac * span)}</text>')
    parts.append("</svg>")
    return Markup("".join(parts))


def clocks_svg(cl: ClockTimeline, width: int = 960, height: int = 120) -> Markup:
    """SM clock (of max), power (of the limit) and temperature (of 100 °C) over the same
    time axis as the timeline."""
    n = len(cl.sm_mhz)
    if n == 0:
        return Markup("")
    pad = 6
    plot_h = height - 2 * pad
    bw = width / n
    parts = [
        f'<svg class="timeline clocks" viewBox="0 0 {width} {height}" preserveAspectRatio="none" role="img" '
        f'aria-label="GPU clock, power and temperature over time">'
    ]
    for values, scale, colour in (
        (cl.sm_mhz, cl.max_sm_mhz, "#1f6feb"),
        (cl.power_w, cl.power_limit_w, "#d6453d"),
        (cl.temp_c, 100.0, "#b48ead"),
    ):
        if not values or not scale:
            continue
        pts = " ".join(
            f"{(i + 0.5) * bw:.1f},{pad + plot_h * (1 - min(max(float(v) / scale, 0.0), 1.05) / 1.05):.1f}"
            for i, v in enumerate(values)
            if v == v  # skip NaN
        )
        parts.append(f'<polyline points="{pts}" fill="none" stroke="{colour}" stroke-width="1.5"/>')
    y_full = pad + plot_h * (1 - 1 / 1.05)
    parts.append(f'<line x1="0" x2="{width}" y1="{y_full:.1f}" y2="{y_full:.1f}" class="step"/>')
    parts.append("</svg>")
    return Markup("".join(parts))


def waves_svg(waves: float, width: int = 120, height: int = 14) -> Markup:
    """Boxes for the waves of a matmul: full ones solid, the last one filled to its share."""
    if waves <= 0:
        return Markup("")
    n = min(math.ceil(waves), 12)
    box = width / n
    parts = [f'<svg class="waves" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img">']
    for i in range(n):
        fill = 1.0 if i < n - 1 or waves >= n else waves - (n - 1)
        parts.append(
            f'<rect x="{i * box + 1:.1f}" y="1" width="{box - 2:.1f}" height="{height - 2}" fill="none" '
            f'stroke="#9aa3ad"/><rect x="{i * box + 1:.1f}" y="1" width="{(box - 2) * fill:.1f}" '
            f'height="{height - 2}" fill="{"#2e9e5b" if fill >= 0.97 else "#f08c2e"}"/>'
        )
    parts.append("</svg>")
    return Markup("".join(parts))


BOUND_COLOURS = {"compute": "#1f6feb", "memory": "#f08c2e", "latency": "#9aa3ad"}


def roofline_svg(rf: RooflineSummary, width: int = 640, height: int = 360) -> Markup:
    """Log-log roofline: arithmetic intensity (FLOP/byte) against achieved FLOP/s, one
    point per kernel sized by its time, the device's roofs drawn."""
    if not rf.points or rf.bandwidth <= 0 or not rf.peak_flops:
        return Markup("")
    left, bottom, top, right = 56, 34, 10, 10
    x0, x1 = -2.0, 4.0  # log10 FLOP/byte
    peak_max = max(rf.peak_flops.values())
    y1 = math.log10(peak_max * 2)
    y0 = y1 - 6
    pw, ph = width - left - right, height - top - bottom

    def px(ai: float) -> float:
        return left + (min(max(math.log10(max(ai, 1e-9)), x0), x1) - x0) / (x1 - x0) * pw

    def py(f: float) -> float:
        return top + ph - (min(max(math.log10(max(f, 1.0)), y0), y1) - y0) / (y1 - y0) * ph

    parts = [f'<svg class="roofline" viewBox="0 0 {width} {height}" role="img" aria-label="roofline chart">']
    for e in range(int(x0), int(x1) + 1):
        x = px(10.0**e)
        parts.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top}" y2="{top + ph}" class="grid"/>')
        parts.append(f'<text x="{x:.1f}" y="{height - 18}" class="axis" text-anchor="middle">1e{e}</text>')
    for e in range(math.ceil(y0), int(y1) + 1):
        y = py(10.0**e)
        parts.append(f'<line x1="{left}" x2="{left + pw}" y1="{y:.1f}" y2="{y:.1f}" class="grid"/>')
        parts.append(f'<text x="{left - 4}" y="{y + 3:.1f}" class="axis" text-anchor="end">1e{e}</text>')
    for dtype, peak in sorted(rf.peak_flops.items(), key=lambda kv: kv[1]):
        ridge = peak / rf.bandwidth
        pts = [(10.0**x0, 10.0**x0 * rf.bandwidth), (ridge, peak), (10.0**x1, peak)]
        d = " ".join(f"{px(a):.1f},{py(f):.1f}" for a, f in pts)
        parts.append(f'<polyline points="{d}" class="roof"/>')
        parts.append(f'<text x="{left + pw - 2}" y="{py(peak) - 3:.1f}" class="axis" text-anchor="end">{dtype}</text>')
    total = sum(p.time_us for p in rf.points) or 1.0
    for p in sorted(rf.points, key=lambda p: -p.time_us):
        r = 2.5 + 14 * math.sqrt(p.time_us / total)
        colour = BOUND_COLOURS.get(p.bound, "#9aa3ad")
        parts.append(
            f'<circle cx="{px(p.intensity):.1f}" cy="{py(p.flops_per_s):.1f}" r="{r:.1f}" fill="{colour}" '
            f'fill-opacity="0.55" stroke="{colour}"><title>{escape(p.name[:200])}: '
            f"{p.flops_per_s / 1e12:.1f} TFLOP/s, {p.intensity:.2f} FLOP/B, {p.bound}</title></circle>"
        )
    parts.append(f'<text x="{left + pw / 2}" y="{height - 3}" class="axis" text-anchor="middle">FLOP per byte</text>')
    parts.append(f'<text x="12" y="{top + ph / 2}" class="axis" transform="rotate(-90 12 {top + ph / 2})" '
                 'text-anchor="middle">FLOP/s</text>')  # fmt: skip
    parts.append("</svg>")
    return Markup("".join(parts))


def render_html(report: Report) -> str:
    env = environment(autoescape=True)
    template = env.get_template("report.html.j2")
    svg = timeline_svg(report.timeline) if report.timeline else Markup("")
    clocks = clocks_svg(report.clocks) if report.clocks else Markup("")
    return template.render(
        r=report,
        timeline_svg=svg,
        clocks_svg=clocks,
        roofline_svg=roofline_svg(report.roofline) if report.roofline else Markup(""),
        bound_colours=BOUND_COLOURS,
        colours=CAUSE_COLOURS,
        labels=CAUSE_LABELS,
        short_labels=CAUSE_SHORT,
        max_step_rows=MAX_STEP_ROWS,
    )
