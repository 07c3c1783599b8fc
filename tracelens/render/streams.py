"""The timeline's filter by stream (issue 27): the picker and each stream's busy bars,
drawn into the HTML timeline's SVG and shown by plain inline JS (_page.js.j2)."""

from __future__ import annotations

from markupsafe import escape

from tracelens.report import Timeline


def stream_control(tl: Timeline) -> str:
    """A select of the GPU's streams (2+ busy ones): the chosen stream's busy share per
    column is drawn and the causes fade behind it (plain inline JS in _page.js.j2); none
    with one stream. The causes are the device's, not a stream's: a stream's busy time is
    what a filter by stream can show."""
    if len(tl.streams) < 2:
        return ""
    opts = "".join(f'<option value="{i}">{escape(s.label)}</option>' for i, s in enumerate(tl.streams))
    return (
        '<div class="streams"><label>filter by stream <select class="s-pick">'
        f'<option value="">all streams (causes)</option>{opts}</select></label></div>'
    )


def stream_bars(tl: Timeline, bw: float, top_pad: int, plot_h: int, n: int) -> list[str]:
    """Each stream's busy share per column as an outlined bar, hidden until picked."""
    if len(tl.streams) < 2:
        return []
    span = tl.end_us - tl.start_us
    width_us = span / n if n else 0.0
    out: list[str] = []
    for i, st in enumerate(tl.streams):
        out.append(f'<g class="sbusy" data-s="{i}" style="display:none">')
        for j, b in enumerate(st.busy_us[:n]):
            frac = min(1.0, b / width_us) if width_us > 0 else 0.0
            if frac <= 0:
                continue
            h = frac * plot_h
            y = top_pad + plot_h - h
            out.append(f'<rect x="{j * bw:.2f}" y="{y:.2f}" width="{bw + 0.3:.2f}" height="{h:.2f}"/>')
        out.append("</g>")
    return out
