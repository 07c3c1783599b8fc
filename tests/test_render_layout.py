"""Issue 18: the HTML report on a phone. Chromium lays out the report of every sample and
public trace at 390 px (and 1400 px) and no element may reach past the viewport: no
sideways scrolling, whatever the kernel names, tables or charts hold. Chromium's own
layout, not a guess from the CSS; skipped where no Chromium binary is found (CI)."""

from __future__ import annotations

import re

import pytest
from layout import PHONE_PX, chromium, overflow, overflow_many
from support.corpus import REAL_TRACES, SAMPLE_TRACES, diff_of, report_of

from tracelens.render import render_html
from tracelens.render.diff import render_diff_html

pytestmark = [
    pytest.mark.chromium,
    pytest.mark.slow,
    pytest.mark.skipif(chromium() is None, reason="no Chromium binary (set CHROMIUM=...)"),
]

DESKTOP_PX = 1400


@pytest.fixture(scope="module")
def pages() -> dict[str, str]:
    return {f"{p.parent.name}/{p.name}": render_html(report_of(p)) for p in [*SAMPLE_TRACES, *REAL_TRACES]}


@pytest.mark.parametrize("width", [PHONE_PX, DESKTOP_PX])
def test_no_element_wider_than_the_viewport(pages: dict[str, str], width: int) -> None:
    results = overflow_many(pages, width)
    assert set(results) == set(pages)
    bad = {name: r for name, r in results.items() if r["count"] or r["scroll_width"] != width}
    assert all(r["viewport"] == width for r in results.values())
    assert not bad, bad


def test_the_probe_sees_an_overflow() -> None:
    """The check itself: a table too wide for a phone is reported."""
    wide = "<table><tr>" + "".join(f"<td>{'x' * 30}{i}</td>" for i in range(12)) + "</tr></table>"
    r = overflow(f"<!doctype html><html><head><meta name='viewport' content='width=device-width'></head><body>{wide}"
                 "</body></html>")  # fmt: skip
    assert r["viewport"] == PHONE_PX and r["count"] > 0 and int(str(r["scroll_width"])) > PHONE_PX


def test_dark_mode_and_diff_fit_too() -> None:
    from support.corpus import sample


    d = diff_of(sample("diff_align_before"), sample("diff_align_after"))
    page = {"diff": render_diff_html(d), "report": render_html(report_of(sample("train_step")))}
    for name, r in overflow_many(page, PHONE_PX, dark=True).items():
        assert r["count"] == 0, (name, r)


def test_job_reports_fit() -> None:
    """The job report (rank x step heat maps, ranks and collectives tables) on the H200
    gloo captures: no sideways scrolling on a phone, in light and dark mode."""
    from support.corpus import SAMPLES, job_of

    from tracelens.render.job import render_job_html

    pages = {}
    for folder in sorted(SAMPLES.glob("ranks_*")):
        page = render_job_html(job_of(folder))
        # The job page runs no script and its policy says so; the layout probe is one.
        pages[folder.name] = re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", page)
    assert len(pages) == 3
    for dark in (False, True):
        for name, r in overflow_many(pages, PHONE_PX, dark=dark).items():
            assert r["count"] == 0 and r["scroll_width"] == PHONE_PX, (name, dark, r)


def test_issue_32_parts_fit() -> None:
    """The memory snapshot page, and the CUDA-graph, serving and kernel-source parts of a
    report, on the H200 samples and the vLLM trace: nothing past a phone's viewport."""
    from pathlib import Path

    from conftest import real, sample

    from tracelens.assemble_snapshot import summarize_snapshot
    from tracelens.model.snapshot import load_snapshot
    from tracelens.render.snapshot import render_snapshot_html
    from tracelens.report import SnapshotReport

    data = Path(__file__).parent / "data" / "inputs"
    pages = {
        p.name: render_html(report_of(p))
        for p in (data / "graph_train" / "graph_train_replay.pt.trace.json.gz",
                  data / "serve_decode" / "serve_decode.pt.trace.json.gz",
                  sample("capture_compile"), real("eager_trace.json.gz"))
    }  # fmt: skip
    for snap in ("mem_train.pt.trace.snapshot.pickle.gz", "mem_generate.snapshot.pickle.gz"):
        s = summarize_snapshot(load_snapshot(data / "memory" / snap))
        page = render_snapshot_html(SnapshotReport(2, "tracelens", "0", "now", s))
        # The snapshot page runs no script and its policy says so; the layout probe is one.
        pages[snap] = re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", page)
    for width in (PHONE_PX, DESKTOP_PX):
        for name, r in overflow_many(pages, width).items():
            assert r["count"] == 0 and r["scroll_width"] == width, (name, width, r)


def test_a_long_note_folds_after_its_first_sentence() -> None:
    """Issue 27: the down-sampled note (760 characters, ~14 phone lines) shows its first
    sentence with the rest one tap away; a short note stays whole."""
    from tracelens.render.format import NOTE_FOLD_CHARS, note_parts

    long = "This trace is down-sampled: events were removed. " + "Of its ops most launched work. " * 20
    head, rest = note_parts(long)
    assert head == "This trace is down-sampled: events were removed." and rest.startswith("Of its ops")
    assert note_parts("Short note. Two sentences.") == ("Short note. Two sentences.", "")
    # a colon is not a sentence's end (eager_trace's "The largest part: GPU idles ...")
    part = "The largest part: GPU idles 14.5 ms while the host works; " + "in host work in aten::linear, " * 9
    assert note_parts(part) == (part, "")
    assert len(long) > NOTE_FOLD_CHARS
