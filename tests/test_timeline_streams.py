"""The timeline's per-stream busy rows (issue 27): on a multi-stream trace the report has
them, each bin at most its width, and the HTML a stream control; one stream, neither."""

from __future__ import annotations

from support.corpus import report_of, sample

from tracelens.derive.stream_busy import MAX_STREAMS
from tracelens.render import render_html


def test_multi_stream_trace_has_per_stream_busy_and_a_control() -> None:
    rep = report_of(sample("plain_gloo_wait"))  # 13 busy streams on one GPU
    tl = rep.timeline
    assert tl is not None
    n = len(tl.by_cause["gpu_busy_compute"])
    width = (tl.end_us - tl.start_us) / n
    assert 2 <= len(tl.streams) <= MAX_STREAMS + 1
    assert tl.streams[-1].stream is None and tl.streams[-1].label == "other streams"
    assert len({s.stream for s in tl.streams}) == len(tl.streams)
    for s in tl.streams:
        assert len(s.busy_us) == n
        assert sum(s.busy_us) > 0
        assert all(0 <= b <= width * (1 + 1e-6) + 1e-3 for b in s.busy_us), s.label
    totals = [sum(s.busy_us) for s in tl.streams[:-1]]
    assert totals == sorted(totals, reverse=True)
    html = render_html(rep)
    assert 'class="s-pick"' in html and "other streams" in html
    assert html.count('class="sbusy"') == len(tl.streams)


def test_single_stream_trace_has_no_stream_control() -> None:
    rep = report_of(sample("conv_train"))
    assert rep.timeline is not None
    assert rep.timeline.streams == ()
    html = render_html(rep)
    assert 'class="s-pick"' not in html and 'class="sbusy"' not in html
