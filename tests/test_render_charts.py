"""Issue 27, charts: many host syncs are counted (per step, or per stretch of columns)
instead of drawn as one solid band of ticks; the NVML charts' y range fits their data so a
throttle is visible, and a stretch the GPU ran busy below its max clock is shaded."""

from __future__ import annotations

import re

from support.corpus import report_of, sample

from tracelens.render.causes import CAUSE_COLOURS
from tracelens.render.html import MAX_SYNC_TICKS, _clock_range, clocks_svg, timeline_svg
from tracelens.report import ClockTimeline, Timeline


def _timeline(n: int, syncs: list[float], steps: int, span: float = 1000.0, counts: bool = True) -> Timeline:
    by_cause = {k: (0.0,) * n for k in CAUSE_COLOURS}
    by_cause["gpu_busy_compute"] = (0.8,) * n
    by_cause["host_sync"] = (0.2,) * n
    per = [0] * n
    for t in syncs:
        per[min(int(t / span * n), n - 1)] += 1
    step_list = tuple((i, i * span / steps, (i + 1) * span / steps) for i in range(steps)) if steps else ()
    return Timeline(start_us=0.0, end_us=span, by_cause=by_cause, syncs=tuple(sorted(syncs)), steps=step_list,
                    sync_counts=tuple(per) if counts else ())  # fmt: skip


def test_few_syncs_are_ticks() -> None:
    svg = str(timeline_svg(_timeline(100, [10.0, 500.0, 900.0], steps=5)))
    assert svg.count('class="sync"') == 3 and 'class="syncs"' not in svg


def test_many_syncs_are_counted_per_step() -> None:
    # 991 steps would not fit; 200 steps with 1-5 syncs each do (4.8 units a step).
    steps = 200
    syncs = [s * 5.0 + 0.1 * j for s in range(steps) for j in range(1 + s % 5)]
    assert len(syncs) > MAX_SYNC_TICKS
    svg = str(timeline_svg(_timeline(480, syncs, steps)))
    assert 'class="sync"' not in svg
    bars = re.findall(r'<rect x="[\d.]+" y="([\d.]+)" width="([\d.]+)" height="([\d.]+)" class="syncs"><title>(\d+) '
                      r"host sync returns? in step #(\d+)</title>", svg)  # fmt: skip
    assert len(bars) == steps
    heights = {int(c): float(h) for _y, _w, h, c, _st in bars}
    assert sorted(heights) == [1, 2, 3, 4, 5] and heights[5] > 4 * heights[1] * 0.9  # height is the count
    assert all(float(w) < 5.0 for _y, w, *_ in bars)  # one step wide, with a gap: no solid band
    assert "5 host sync returns" in svg  # in the columns' read-out too


def test_sampled_syncs_are_counted_per_stretch() -> None:
    # 990 steps (power_gemm): too many to draw one bar each; the marks are a sample, the
    # counts are every sync, so the bars come from the counts.
    n, steps = 480, 990
    syncs = [i * 1000.0 / 990 + 0.5 for i in range(990)]
    tl = _timeline(n, syncs, steps)
    sampled = Timeline(tl.start_us, tl.end_us, tl.by_cause, tl.syncs[::3], tl.steps, tl.sync_counts)
    svg = str(timeline_svg(sampled))
    titles = re.findall(r"<title>(\d+) host sync returns? in ", svg)
    assert 0 < len(titles) <= 120 and sum(map(int, titles)) == 990


def test_clock_range_fits_the_data() -> None:
    bottom, top = _clock_range([1365.0, 1633.0, 1980.0], 1980.0, 200.0)
    assert bottom >= 1000 and top <= 2400  # not 0 to 2,079: the 347 MHz drop fills the chart
    assert (1980 - 1633) / (top - bottom) > 0.3
    assert _clock_range([91.0, 709.0], 700.0, 100.0)[0] == 0.0  # near zero: from zero
    lo, hi = _clock_range([39.0, 41.0], 0.0, 10.0)
    assert hi - lo >= 10.0 and lo < 39 and hi > 41  # a steady temperature is not a swing


def test_throttled_stretch_is_shaded() -> None:
    n = 40
    sm = (1980.0,) * 10 + (1600.0,) * 20 + (1100.0,) * 10  # the last 10 idle (clocked down by design)
    cl = ClockTimeline(start_us=0.0, end_us=1000.0, sm_mhz=sm, power_w=(500.0,) * n, temp_c=(50.0,) * n,
                       max_sm_mhz=1980.0, power_limit_w=700.0)  # fmt: skip
    busy = [1.0] * 30 + [0.0] * 10
    svg = str(clocks_svg(cl, busy=busy))
    shades = re.findall(r'<rect x="([\d.]+)" y="0" width="([\d.]+)" height="\d+" class="throttled"/>', svg)
    assert len(shades) == 3  # one stretch, shaded in each of the three charts
    x, w = map(float, shades[0])
    assert abs(x - 10 * 960 / n) < 0.1 and abs(w - 20 * 960 / n) < 0.1
    assert "throttled while busy: shaded" in svg and "busy below 95% of the max clock" in svg
    assert 'class="throttled"' not in str(clocks_svg(cl))  # no timeline: nothing claimed


def test_power_gemm_throttle_is_visible() -> None:
    rep = report_of(sample("power_gemm"))
    assert rep.timeline is not None and sum(rep.timeline.sync_counts) > MAX_SYNC_TICKS
    from tracelens.render import render_html

    html = render_html(rep)
    clocks = html[html.index('<figure class="chart clocks"') :]
    top, bottom = (float(v.replace(",", "")) for v in re.findall(r'class="ytick (?:top|bottom)">([\d,]+)<', clocks)[:2])
    assert bottom > 0 and (1980 - 1633) / (top - bottom) > 0.3
    assert 'class="throttled"' in clocks
    assert 'class="sync"' not in html and 'class="syncs"' in html
