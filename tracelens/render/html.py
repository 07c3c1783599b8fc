"""HTML: one self-contained file (inline CSS, inline SVG, a few lines of inline JS; no
network requests), readable on a laptop and a phone.

All text from the trace (kernel and op names, file paths) goes through Jinja's
autoescaping; the SVG is built here from numbers only.
"""

from __future__ import annotations

import bisect
import json
import math
from pathlib import Path
from typing import TYPE_CHECKING

from markupsafe import Markup, escape

from tracelens.domain import GPU_NOT_RECORDED, category_label, fix_label, gain_error
from tracelens.render import format as fmt
from tracelens.render.causes import CAUSE_COLOURS, CAUSE_LABELS, CAUSE_SHORT, SNAPSHOT_COLOURS
from tracelens.render.streams import stream_bars, stream_control
from tracelens.report import ClockTimeline, Finding, Report, RooflineSummary, Timeline

if TYPE_CHECKING:  # imported when a template is first rendered: 13 ms of a --json report's start-up
    import jinja2

#: Time-axis ticks per chart: about five labels of "12.5 ms" fit a 390 px phone.
TIME_TICKS = 5
#: No tick label starts right of this (% of the width): it would run off the chart.
LAST_TICK_PCT = 90.0
#: The full kernel name behind the tap: real names reach about 5,100 characters; past
#: this the middle is cut (the JSON has the name as the trace gives it).
FULL_NAME_CHARS = 1200
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


#: Compiled templates are kept between runs (jinja's bytecode cache): compiling
#: report.html.j2 and report.md.j2 took 70-100 ms of every report on the development
#: machine, loading them back under 1 ms. An entry is keyed by the template's name, path
#: and source checksum (jinja's own key), and here also by the settings that change the
#: compiled code and by jinja's version, so a stale entry is never used.
_CACHE_PATTERN = "__tracelens_{jinja}_{autoescape}_%s.cache"
#: Where they go: None is jinja's default (tests point it elsewhere).
TEMPLATE_CACHE_DIR: str | None = None


def _bytecode_cache(autoescape: bool) -> jinja2.BytecodeCache | None:
    """jinja's file cache in its per-user directory under the system's temp directory
    (created 0700 and checked to be this user's); None where that cannot be had (a
    read-only or shared temp directory): then templates are compiled each time."""
    import jinja2

    pattern = _CACHE_PATTERN.format(jinja=jinja2.__version__, autoescape=int(autoescape))
    try:
        return jinja2.FileSystemBytecodeCache(TEMPLATE_CACHE_DIR, pattern)
    except (OSError, RuntimeError):
        return None


def environment(autoescape: bool) -> jinja2.Environment:
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(template_dir())),
        bytecode_cache=_bytecode_cache(autoescape),
        autoescape=autoescape,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters["us"] = fmt.us
    env.filters["category"] = category_label
    env.filters["blockers"] = blockers
    env.filters["in_unit"] = fmt.in_unit
    env.filters["gain_range"] = gain_range
    env.filters["advice_parts"] = advice_parts
    env.filters["note_parts"] = fmt.note_parts
    env.filters["gain_error"] = gain_error
    env.filters["fix_label"] = fix_label
    env.filters["versions"] = fmt.shown_versions
    env.filters["pct"] = fmt.pct
    env.filters["nbytes"] = fmt.fmt_bytes
    env.filters["metric"] = fmt.metric
    env.filters["short"] = fmt.short
    env.filters["short_kernel"] = fmt.short_kernel
    env.filters["waves_svg"] = waves_svg
    env.filters["plural"] = fmt.plural
    env.filters["steps_phrase"] = fmt.steps_phrase
    env.filters["kname"] = kernel_name
    env.filters["counted"] = counted
    env.filters["flops"] = fmt.flop_count
    env.filters["ratio"] = fmt.ratio
    env.filters["precisions"] = fmt.precisions
    env.globals["uncovered_reasons"] = fmt.UNCOVERED_REASONS
    env.globals["snapshot_colours"] = SNAPSHOT_COLOURS
    env.globals["time_axis"] = lambda span_us: Markup(_time_axis(span_us))
    env.globals["max_sync_ticks"] = MAX_SYNC_TICKS
    return env


def nice_step(span: float, ticks: int) -> float:
    """A 1-2-2.5-5 step that cuts `span` into at most about `ticks` intervals."""
    if span <= 0:
        return 1.0
    raw = span / max(ticks, 1)
    mag = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 2.5, 5, 10):
        if m * mag >= raw:
            return float(m * mag)
    return float(10 * mag)


def _tips(tips: list[str]) -> Markup:
    """Per-column values for the tap/hover read-out, as JSON inside the page (our own
    numbers and labels only; `</` is escaped so the text cannot close the tag)."""
    text = json.dumps(tips, ensure_ascii=True).replace("</", "<\\/")
    return Markup(f'<script type="application/json" class="tips">{text}</script>')


def _time_axis(span_us: float, label: str = "time from the start of the analysed window") -> str:
    """HTML tick labels under a chart, placed in % of its width so they keep their size
    on any screen (SVG text scaled with a 960-unit-wide chart shrinks to 4 px on a phone)."""
    step = nice_step(span_us, TIME_TICKS)
    parts = ['<div class="xaxis" aria-hidden="true">']
    t = 0.0
    while t <= span_us * (1 + 1e-9):
        frac = t / span_us * 100
        if frac <= LAST_TICK_PCT:
            parts.append(f'<span style="left:{frac:.2f}%">{escape(fmt.us(t)) if t > 0 else "0"}</span>')
        t += step
    parts.append(f'</div><div class="axistitle">{escape(label)}</div>')
    return "".join(parts)


def timeline_svg(tl: Timeline, width: int = 960, height: int = 120) -> Markup:
    """Stacked columns per time bin: busy at the bottom, idle causes above; host sync
    returns as ticks on top; step boundaries dashed. Below it a time axis in HTML; a tap
    (or hover) on a column shows its causes."""
    n = len(next(iter(tl.by_cause.values()), ()))
    if n == 0 or tl.end_us <= tl.start_us:
        return Markup("")
    top_pad = 14  # room for the sync ticks (or count bars) above the columns
    plot_h = height - top_pad
    bw = width / n
    span = tl.end_us - tl.start_us
    parts: list[str] = [
        f'<figure class="chart" data-kind="columns" data-width="{width}" data-height="{height}">',
        _zoom_controls(tl),
        stream_control(tl),
        f'<svg class="timeline" viewBox="0 0 {width} {height}" preserveAspectRatio="none" role="img" '
        f'aria-label="GPU busy and idle over time, by cause">',
    ]
    order = list(CAUSE_COLOURS)
    series = tl.by_cause
    tips: list[str] = []
    step_at = [(int(st), s0, s1) for st, s0, s1 in tl.steps]
    for i in range(n):
        y = float(top_pad + plot_h)
        x = i * bw
        shares: list[tuple[str, float]] = []
        for key in order:
            col = series.get(key, ())
            frac = float(col[i]) if i < len(col) else 0.0
            if frac <= 0:
                continue
            shares.append((key, frac))
            h = frac * plot_h
            y -= h
            parts.append(
                f'<rect x="{x:.2f}" y="{y:.2f}" width="{bw + 0.3:.2f}" height="{h:.2f}" fill="{CAUSE_COLOURS[key]}"/>'
            )
        t0, t1 = i * span / n, (i + 1) * span / n
        mid = tl.start_us + (t0 + t1) / 2
        step = next((st for st, s0, s1 in step_at if s0 <= mid < s1), None)
        body = ", ".join(f"{CAUSE_LABELS[k]} {fmt.pct(f)}" for k, f in sorted(shares, key=lambda kv: -kv[1])[:4])
        tips.append(f"{fmt.us(t0)}–{fmt.us(t1)}{f' (step #{step})' if step is not None else ''}: {body or 'no data'}")
    parts.extend(stream_bars(tl, bw, top_pad, plot_h, n))
    parts.extend(_sync_marks(tl, width, top_pad - 2, n, tips))
    if len(tl.steps) <= width / 4:
        for _step, s0, _s1 in tl.steps:
            x = (s0 - tl.start_us) / span * width
            parts.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top_pad}" y2="{height}" class="step"/>')
    parts.append("</svg>")
    parts.append(_time_axis(span))
    parts.append(_tips(tips))
    parts.append("</figure>")
    return Markup("".join(parts))


def _zoom_controls(tl: Timeline) -> str:
    """A step-range zoom for the timeline (plain inline JS in _page.js.j2 reads the steps'
    spans from the JSON beside it): two number fields and two buttons, usable by touch and
    by keyboard (Enter in a field zooms); nothing where the window has under two steps."""
    steps = sorted(tl.steps)
    span = tl.end_us - tl.start_us
    if len(steps) < 2 or span <= 0:
        return ""
    lo, hi = steps[0][0], steps[-1][0]
    # Each step as [number, start, end] in fractions of the drawn span (our numbers only).
    data = [[int(st), round((s0 - tl.start_us) / span, 6), round((s1 - tl.start_us) / span, 6)] for st, s0, s1 in steps]
    return (
        '<div class="zoom" role="group" aria-label="zoom the timeline to a range of steps">'
        f'<label>steps <input type="number" class="z-from" min="{lo}" max="{hi}" value="{lo}" '
        'inputmode="numeric"></label> '
        f'<label>to <input type="number" class="z-to" min="{lo}" max="{hi}" value="{hi}" inputmode="numeric"></label> '
        '<button type="button" class="z-go">Zoom</button> <button type="button" class="z-reset">All steps</button> '
        '<span class="z-note" aria-live="polite"></span>'
        f'<script type="application/json" class="zsteps">{json.dumps(data)}</script></div>'
    )


#: More host sync returns than this in a timeline are drawn as counts (per step, else per
#: column), not one tick each: 991 steps of syncs made one solid band (issue 27).
MAX_SYNC_TICKS = 120


#: At most this many count bars when the syncs are counted per group of columns.
MAX_SYNC_GROUPS = 120
#: Syncs are counted per step when there are at least this many steps (and bars stay 3
#: units wide); a few long steps get groups of columns, which keep the time detail.
MIN_STEP_GROUPS = 30


def _sync_marks(tl: Timeline, width: int, tick_h: float, n: int, tips: list[str]) -> list[str]:
    """The host sync returns above the timeline: a tick each when they are few; else a bar
    per step (or per group of columns) as tall as its count of syncs, which its tooltip and
    every column's read-out say."""
    span = tl.end_us - tl.start_us
    if span <= 0 or n <= 0:
        return []
    syncs = sorted(tl.syncs)
    if len(tl.sync_counts) == n:
        counts = [int(c) for c in tl.sync_counts]
    else:  # a report from before sync_counts: count the marks it has
        counts = [0] * n
        for t in syncs:
            counts[min(max(int((t - tl.start_us) / span * n), 0), n - 1)] += 1
    total = sum(counts)
    if not total:
        return []
    for i, c in enumerate(counts):
        if c and i < len(tips):
            tips[i] += f"; {fmt.plural(c, 'host sync return')}"
    exact = len(syncs) == total  # every sync is in `syncs`, not a sample of them
    if total <= MAX_SYNC_TICKS and exact:
        out = []
        for t in syncs:
            x = (t - tl.start_us) / span * width
            out.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="0" y2="{tick_h}" class="sync"/>')
        return out
    steps = sorted((st, s0, s1) for st, s0, s1 in tl.steps)
    groups: list[tuple[float, float, int, str]] = []
    if exact and MIN_STEP_GROUPS <= len(steps) <= width / 3:
        for st, s0, s1 in steps:
            c = bisect.bisect_left(syncs, s1) - bisect.bisect_left(syncs, s0)
            groups.append((s0, s1, c, f"step #{st}"))
    else:
        k = max(math.ceil(n / MAX_SYNC_GROUPS), 1)
        for i in range(0, n, k):
            t0, t1 = i * span / n, min(i + k, n) * span / n
            groups.append((tl.start_us + t0, tl.start_us + t1, sum(counts[i : i + k]), f"{fmt.us(t0)}–{fmt.us(t1)}"))
    most = max(c for *_, c, _w in groups) if groups else 0
    out = []
    for s0, s1, c, where in groups:
        if c <= 0 or most <= 0:
            continue
        x0 = max((s0 - tl.start_us) / span * width, 0.0)
        x1 = min((s1 - tl.start_us) / span * width, float(width))
        w = max(x1 - x0 - (1.0 if x1 - x0 > 3 else 0.0), 0.6)
        h = max(tick_h * c / most, 1.5)
        out.append(
            f'<rect x="{x0:.2f}" y="{tick_h - h:.2f}" width="{w:.2f}" height="{h:.2f}" class="syncs">'
            f"<title>{escape(fmt.plural(c, 'host sync return'))} in {escape(where)}</title></rect>"
        )
    return out


#: A busy column whose SM clock is this much below the GPU's maximum is shaded as
#: throttled in the clock chart (NVML reports the clock the GPU ran at; idle columns
#: clock down by design and are not shaded).
THROTTLE_SHARE = 0.95
#: A column counts as busy when the GPU ran kernels in at least this share of it.
BUSY_SHARE = 0.5


def _clock_range(values: list[float], ref: float, min_span: float = 0.0) -> tuple[float, float]:
    """The y range of one NVML chart: the data and its reference line with a margin, on
    round numbers, so a 1,633 vs 1,980 MHz throttle fills the chart instead of its top 17%
    above a zero baseline. Starts at 0 when the data come near it anyway."""
    lo, hi = min(values), max(values)
    if ref > 0:
        lo, hi = min(lo, ref), max(hi, ref)
    if hi - lo < min_span:  # centred in the least span
        mid = (hi + lo) / 2
        lo, hi = mid - min_span / 2, mid + min_span / 2
    spread = hi - lo
    if spread <= 0:
        spread = abs(hi) * 0.1 or 1.0
    step = nice_step(spread, 4)
    bottom = math.floor((lo - spread * 0.1) / step) * step
    top = math.ceil((hi + spread * 0.1) / step) * step
    if bottom <= spread * 0.5:
        bottom = 0.0
    return max(bottom, 0.0), top if top > bottom else bottom + 1.0


def _throttled(cl: ClockTimeline, busy: list[float] | None) -> list[tuple[int, int]]:
    """Runs of columns [i, j) where the GPU was busy below THROTTLE_SHARE of its max clock."""
    if cl.max_sm_mhz <= 0 or busy is None:
        return []
    n = len(cl.sm_mhz)
    low = [
        cl.sm_mhz[i] == cl.sm_mhz[i] and cl.sm_mhz[i] < THROTTLE_SHARE * cl.max_sm_mhz
        and i < len(busy) and busy[i] >= BUSY_SHARE
        for i in range(n)
    ]  # fmt: skip
    runs, i = [], 0
    while i < n:
        if low[i]:
            j = i
            while j < n and low[j]:
                j += 1
            runs.append((i, j))
            i = j
        else:
            i += 1
    return runs


def busy_columns(tl: Timeline | None) -> list[float] | None:
    """Each timeline column's busy share (the gpu_busy_* causes), for the clock chart."""
    if tl is None:
        return None
    n = len(next(iter(tl.by_cause.values()), ()))
    return [sum(float(v[i]) for k, v in tl.by_cause.items() if k.startswith("gpu_busy") and i < len(v))
            for i in range(n)]  # fmt: skip


def clocks_svg(cl: ClockTimeline, width: int = 960, height: int = 56, busy: list[float] | None = None) -> Markup:
    """SM clock (MHz), power (W) and temperature (°C) as three small charts, each with its
    own labelled axis, over the timeline's time axis; a tap shows the three values."""
    n = len(cl.sm_mhz)
    if n == 0 or cl.end_us <= cl.start_us:
        return Markup("")
    bw = width / n
    rows = [
        ("SM clock", "MHz", cl.sm_mhz, cl.max_sm_mhz, "#1f6feb", "max"),
        ("power", "W", cl.power_w, cl.power_limit_w, "#d6453d", "limit"),
        ("temperature", "°C", cl.temp_c, 0.0, "#b48ead", ""),
    ]
    # The least span a chart shows, so a steady 39-41 °C does not fill it as a swing would.
    min_span = {"SM clock": 200.0, "power": 100.0, "temperature": 10.0}
    parts = ['<figure class="chart clocks" data-kind="columns">']
    # Shade the same stretches in every chart: the power and temperature beside the drop.
    runs = _throttled(cl, busy if busy is not None and len(busy) == n else None)
    for label, unit, values, ref, colour, ref_name in rows:
        finite = [float(v) for v in values if v == v]
        if not finite:
            continue
        bottom, top = _clock_range(finite, ref, min_span.get(label, 0.0))
        pad = 3

        def y(v: float, top: float = top, bottom: float = bottom, pad: int = pad) -> float:
            return pad + (height - 2 * pad) * (1 - min(max((v - bottom) / (top - bottom), 0.0), 1.0))

        pts = " ".join(f"{(i + 0.5) * bw:.1f},{y(float(v)):.1f}" for i, v in enumerate(values) if v == v)
        ref_txt = f" · {ref_name} {ref:,.0f} {unit} (dashed)" if ref else ""
        shaded = " · throttled while busy: shaded" if runs and label == "SM clock" else ""
        parts.append(
            f'<div class="strip"><div class="striplabel"><b style="color:{colour}">{label}</b> '
            f"{min(finite):,.0f}–{max(finite):,.0f} {unit}{ref_txt}{shaded}</div>"
            f'<div class="stripplot"><span class="ytick top">{top:,.0f}</span>'
            f'<span class="ytick bottom">{bottom:,.0f}</span>'
            f'<svg viewBox="0 0 {width} {height}" preserveAspectRatio="none" role="img" '
            f'aria-label="{label} in {unit} over time, {bottom:,.0f} to {top:,.0f} {unit}">'
        )
        for i, j in runs:
            x0, w = i * bw, (j - i) * bw
            parts.append(f'<rect x="{x0:.2f}" y="0" width="{w:.2f}" height="{height}" class="throttled"/>')
        if ref:
            parts.append(f'<line x1="0" x2="{width}" y1="{y(ref):.1f}" y2="{y(ref):.1f}" class="ref"/>')
        parts.append(
            f'<polyline points="{pts}" fill="none" stroke="{colour}" stroke-width="1.5" '
            'vector-effect="non-scaling-stroke"/></svg></div></div>'
        )
    span = cl.end_us - cl.start_us
    tips = []
    for i in range(n):
        vals = []
        for label, unit, values, *_ in rows:
            if i < len(values) and values[i] == values[i]:
                vals.append(f"{label} {float(values[i]):,.0f} {unit}")
        hot = any(a <= i < b for a, b in runs)
        tips.append(f"{fmt.us((i + 0.5) * span / n)}: " + (", ".join(vals) or "no sample")
                    + ("; busy below 95% of the max clock" if hot else ""))  # fmt: skip
    parts.append(_time_axis(span))
    parts.append(_tips(tips))
    parts.append("</figure>")
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
#: Roof labels closer than this (in % of the plot's height) are moved apart: at 390 px the
#: plot is about 230 px tall, and a label line is about 15 px.
ROOF_LABEL_GAP_PCT = 8.0


#: A right-aligned roof label reaches this far left (% of the plot's width) on a 390 px
#: phone: "bf16 989 TFLOP/s" is about 110 px of a 330 px plot.
ROOF_LABEL_REACH_PCT = 40.0
#: A label line's height in % of the plot's height on that phone (15 of ~200 px).
ROOF_LABEL_LINE_PCT = 7.5


def place_roof_labels(
    labels: list[tuple[float, str]], dots: list[tuple[float, float, float]]
) -> list[tuple[float, str]]:
    """Each roof label's top (in % of the plot's height), just above its roof where that
    is free: never within ROOF_LABEL_GAP_PCT of another label, and never over a point in
    the right ROOF_LABEL_REACH_PCT of the plot, where the label sits (else the nearest free
    slot up or down; a crowded plot keeps the first candidate, whose point still answers a
    tap through the label)."""
    near = [(y, r) for xp, y, r in dots if xp >= 100 - ROOF_LABEL_REACH_PCT]

    def free(top: float, taken: list[float]) -> bool:
        if any(abs(top - t) < ROOF_LABEL_GAP_PCT for t in taken):
            return False
        return all(y + r < top or y - r > top + ROOF_LABEL_LINE_PCT for y, r in near)

    out: list[tuple[float, str]] = []
    taken: list[float] = []
    for roof_pct, text in sorted(labels):
        first = max(roof_pct - ROOF_LABEL_GAP_PCT * 0.9, 0.0)
        pos = None
        for k in range(0, 40):
            for cand in (first + k * 1.0, first - k * 1.0):
                if 0.0 <= cand <= 100 - ROOF_LABEL_LINE_PCT and free(cand, taken):
                    pos = cand
                    break
            if pos is not None:
                break
        if pos is None:  # nothing free: below the last label, as before
            pos = max(first, (max(taken) + ROOF_LABEL_GAP_PCT) if taken else 0.0)
        taken.append(pos)
        out.append((pos, text))
    return out


def si(value: float) -> str:
    """1e12 -> '1 T', 0.01 -> '0.01': axis ticks a person reads at a glance."""
    for factor, suffix in ((1e15, " P"), (1e12, " T"), (1e9, " G"), (1e6, " M"), (1e3, " k")):
        if abs(value) >= factor:
            v = value / factor
            return f"{v:.0f}{suffix}" if v >= 10 or v == int(v) else f"{v:.1f}{suffix}"
    return f"{value:g}"


def roofline_svg(rf: RooflineSummary, width: int = 1000, height: int = 600) -> Markup:
    """Log-log roofline: arithmetic intensity (FLOP/byte) against achieved FLOP/s, one
    point per kernel sized by its time, the device's roofs drawn. Tick and roof labels
    are HTML beside the SVG (readable at any width); a tap on a point shows its values."""
    if not rf.points or rf.bandwidth <= 0 or not rf.peak_flops:
        return Markup("")
    x0, x1 = -2.0, 4.0  # log10 FLOP/byte
    peak_max = max(rf.peak_flops.values())
    y1 = math.log10(peak_max * 2)
    y0 = y1 - 6

    def fx(ai: float) -> float:  # 0..1 across
        return (min(max(math.log10(max(ai, 1e-9)), x0), x1) - x0) / (x1 - x0)

    def fy(f: float) -> float:  # 0..1 down
        return 1 - (min(max(math.log10(max(f, 1.0)), y0), y1) - y0) / (y1 - y0)

    svg = [
        f'<svg class="roofline" viewBox="0 0 {width} {height}" preserveAspectRatio="none" role="img" '
        'aria-label="roofline chart: FLOP/s against FLOP per byte">'
    ]
    xt, yt = ['<div class="xaxis" aria-hidden="true">'], ['<div class="yaxis" aria-hidden="true">']
    for e in range(int(x0), int(x1) + 1):
        x = fx(10.0**e)
        svg.append(f'<line x1="{x * width:.1f}" x2="{x * width:.1f}" y1="0" y2="{height}" class="grid"/>')
        if x * 100 <= LAST_TICK_PCT:
            xt.append(f'<span style="left:{x * 100:.2f}%">{si(10.0**e)}</span>')
    for e in range(math.ceil(y0), int(y1) + 1):
        y = fy(10.0**e)
        svg.append(f'<line x1="0" x2="{width}" y1="{y * height:.1f}" y2="{y * height:.1f}" class="grid"/>')
        if 3 <= y * 100 <= 97:
            yt.append(f'<span style="top:{y * 100:.2f}%">{si(10.0**e)}</span>')
    roof_labels: list[tuple[float, str]] = []
    for dtype, peak in sorted(rf.peak_flops.items(), key=lambda kv: kv[1]):
        ridge = peak / rf.bandwidth
        pts = [(10.0**x0, 10.0**x0 * rf.bandwidth), (ridge, peak), (10.0**x1, peak)]
        d = " ".join(f"{fx(a) * width:.1f},{fy(f) * height:.1f}" for a, f in pts)
        svg.append(f'<polyline points="{d}" class="roof" vector-effect="non-scaling-stroke"/>')
        roof_labels.append((fy(peak) * 100, f"{dtype} {si(peak)}FLOP/s"))
    total = sum(p.time_us for p in rf.points) or 1.0
    # Where the points are, in % of the plot (x across, y down, radius as % of the height),
    # for the labels to keep off them.
    dots = [
        (fx(p.intensity) * 100, fy(p.flops_per_s) * 100, (5 + 24 * math.sqrt(p.time_us / total)) / height * 100)
        for p in rf.points
    ]
    placed = [
        f'<span class="rooflabel" style="top:{pos:.2f}%">{escape(text)}</span>'
        for pos, text in place_roof_labels(roof_labels, dots)
    ]
    for p in sorted(rf.points, key=lambda p: -p.time_us):
        r = 5 + 24 * math.sqrt(p.time_us / total)
        colour = BOUND_COLOURS.get(p.bound, "#9aa3ad")
        tip = (
            f"{fmt.short_kernel(p.name)}: {fmt.us(p.time_us)}, {p.flops_per_s / 1e12:.1f} TFLOP/s, "
            f"{p.bytes_per_s / 1e9:.0f} GB/s, {p.intensity:.2f} FLOP/byte, {fmt.pct(p.roof_share)} of the {p.roof} "
            f"roof, {p.bound}-bound"
        )
        svg.append(
            f'<circle cx="{fx(p.intensity) * width:.1f}" cy="{fy(p.flops_per_s) * height:.1f}" r="{r:.1f}" '
            f'fill="{colour}" fill-opacity="0.55" stroke="{colour}" data-tip="{escape(tip)}" tabindex="0">'
            f"<title>{escape(tip)}</title></circle>"
        )
    svg.append("</svg>")
    return Markup(
        '<figure class="chart roofline"><div class="rf-y-title">FLOP/s achieved</div><div class="rf-body">'
        + "".join(yt)
        + "</div>"
        + '<div class="rf-plot">'
        + "".join(svg)
        + "".join(placed)
        + "</div><div></div>"
        + "".join(xt)
        + "</div></div>"
        + '<div class="axistitle">FLOP per byte (arithmetic intensity)</div></figure>'
    )


def kernel_name(name: str, width: int = fmt.KERNEL_NAME_CHARS) -> Markup:
    """A kernel name in a table cell: the short form, and the full name one tap away
    (a <details>, which works on touch screens and without script)."""
    full = fmt.short(name, FULL_NAME_CHARS)
    brief = fmt.short_kernel(name, width)
    if brief == full:
        return Markup('<span class="kn">{}</span>').format(full)
    return Markup('<details class="kn"><summary>{}</summary><span class="full">{}</span></details>').format(brief, full)


def counted(names: object) -> list[str]:
    """["a", "a", "b"] -> ["a ×2", "b"]: a kernel launched by many sites is named once."""
    order: dict[str, int] = {}
    for n in names:  # type: ignore[attr-defined]
        order[str(n)] = order.get(str(n), 0) + 1
    return [f"{n} ×{c}" if c > 1 else n for n, c in order.items()]


def device_label(report: Report) -> str:
    """ "NVIDIA H200", not "NVIDIA H200 · NVIDIA": the vendor only where the name lacks it."""
    t = report.trace
    vendor = t.vendor.upper() if t.vendor else ""
    name = t.gpu_name.lower()
    if GPU_NOT_RECORDED in t.gpu_name or name.startswith("no gpu"):
        return t.gpu_name
    if not t.gpu_count or vendor in ("", "UNKNOWN"):
        return t.gpu_name if vendor in ("", "UNKNOWN") or not t.gpu_count else f"{t.gpu_name} ({vendor})"
    if vendor.lower() in name or (vendor == "NVIDIA" and "tesla" in name):
        return t.gpu_name
    return f"{t.gpu_name} ({vendor})"


def gain_range(f: Finding, report: Report) -> str:
    """ " (1.1 ms to 1.7 ms)" after a replayed gain, in the report's unit: only where the
    ends differ by more than 2% and read differently (never "(1.1 ms to 1.1 ms)")."""
    low = fmt.in_unit(f.expected_gain_low_us, report, label=False)
    high = fmt.in_unit(f.expected_gain_high_us, report, label=False)
    if f.expected_gain_high_us - f.expected_gain_low_us <= 0.02 * f.expected_gain_us or low == high:
        return ""
    return f" ({low} to {high})"


def advice_parts(advice: str) -> tuple[list[str], list[str]]:
    """The headline's fix as shown and as folded: the first paragraph (explain/ writes the
    concrete fix first: the site, the op, the flag) and the "•" alternatives right after it
    stay open; the general advice after them is one tap away (issue 27: sampled_rank-0's
    Fix box was ~40 lines on a phone)."""
    paras = [p for p in advice.split("\n") if p.strip()]
    n = 1
    while n < len(paras) and paras[n].lstrip().startswith("•"):
        n += 1
    return paras[:n], paras[n:]


def blockers(ids: str) -> str:
    """A prediction's `blocked_by` (category ids, comma-joined) in words, lower case."""
    return " and ".join(category_label(c, capital=False) for c in ids.split(",") if c)


def primary_index(report: Report) -> int | None:
    """The index of the finding the headline names (its fix is shown there, once)."""
    if report.summary.primary is None:
        return None
    for i, f in enumerate(report.findings):
        if f.category.value == report.summary.primary:
            return i
    return None


def render_html(report: Report) -> str:
    env = environment(autoescape=True)
    template = env.get_template("report.html.j2")
    svg = timeline_svg(report.timeline) if report.timeline else Markup("")
    clocks = clocks_svg(report.clocks, busy=busy_columns(report.timeline)) if report.clocks else Markup("")
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
        device=device_label(report),
        primary_index=primary_index(report),
        analysed_us=fmt.analysed_us(report),
    )
