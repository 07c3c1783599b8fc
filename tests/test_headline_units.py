"""The report speaks one unit (issue 27): with steps, every window total in the headline,
the findings' titles and cards and the questions' answers is per step (the share stays of
the analysed time); without them, window totals."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from support.corpus import REAL_TRACES, SAMPLE_TRACES, needs_real, report_of, sample, trace_id

from tracelens.domain import PerUnit, fmt_us, per_unit
from tracelens.explain.headline import HEADLINE_CHARS, shorter_title
from tracelens.render import format as fmt
from tracelens.render.format import in_unit
from tracelens.render.markdown import md, render_markdown
from tracelens.report import Report

#: A duration as fmt_us writes it ("12 µs", "3.4 ms", "1.23 s"): for reading the words
#: back in tests only (explain/ builds them from facts and never parses them).
DURATION = re.compile(r"(?<![\w.])(\d[\d,]*(?:\.\d+)?) (µs|ms|s)\b(?!/)")
#: What the words just before or after a duration say when it is a per-item value (a
#: kernel's, a call's, a gap's), not a window total.
PER_ITEM_BEFORE = ("median kernel ", "kernel of ", "under ", "over ", "median ", "longest ", "gaps of ")
PER_ITEM_AFTER = (" a call", " each", " earlier", " later", " or more", " of host time per", " of host time each")


def _duration_us(number: str, unit: str) -> float:
    return float(number.replace(",", "")) * {"µs": 1.0, "ms": 1e3, "s": 1e6}[unit]


def test_shorter_title_cuts_at_a_clause_with_brackets_closed() -> None:
    title = "GPU idles 14.5 ms (17%; of it) while the host works; in host work in aten::linear (29%), more"
    assert shorter_title(title, 70) == "GPU idles 14.5 ms (17%; of it) while the host works"
    assert shorter_title(title, 500) == title


def test_per_unit_says_a_total_per_unit_only_where_the_window_splits() -> None:
    assert per_unit(33_200, PerUnit(20, "step")) == "1.7 ms per step"
    assert per_unit(33_200, PerUnit(20, "step"), label=False) == "1.7 ms"
    assert per_unit(33_200, PerUnit(1, "step")) == "33.2 ms"  # one step: the total is the step
    assert per_unit(33_200, PerUnit(53, "sweep")) == per_unit(33_200, PerUnit(53, "window")) == "33.2 ms"


@pytest.mark.parametrize("name", ["host_sync_mask", "prog_detection_fixed", "plain_gloo_wait"])
def test_headline_amounts_are_per_step(name: str) -> None:
    s = report_of(sample(name)).summary
    assert s.primary is not None and s.per_step_us > 0
    assert fmt_us(s.primary_time_us) not in s.headline  # the window total is not said
    first = re.split(r"\. Fix (?:this )?first", s.headline)[0]
    for m in DURATION.finditer(first):
        before, after = first[max(m.start() - 16, 0) : m.start()], first[m.end() : m.end() + 20]
        if before.endswith(("median kernel ", "under ")) or after.startswith(" of host time per"):
            continue
        assert after.startswith(f" per {s.unit}"), (m.group(0), s.headline)
    for m in DURATION.finditer(s.headline):  # no amount in it exceeds one step
        assert _duration_us(m.group(1), m.group(2)) <= s.per_step_us * 1.05, (m.group(0), s.headline)


@pytest.mark.parametrize("path", SAMPLE_TRACES, ids=trace_id)
def test_headline_fits_a_phone(path: Path) -> None:
    """Issue 27: the headline (the finding's sentence and the fix's) is at most
    HEADLINE_CHARS in the JSON and in the Markdown's quote (unescaped), cut at a clause."""
    rep = report_of(path)
    s = rep.summary
    assert len(s.headline) <= HEADLINE_CHARS, s.headline
    md = render_markdown(rep)
    quote = next((line for line in md.splitlines() if line.startswith("> ") and "**" not in line), "")
    plain = re.sub(r"\\(.)", r"\1", quote.removeprefix("> ")).replace("&#8203;", "")
    assert len(plain) <= HEADLINE_CHARS + 20, quote
    assert not s.headline.endswith(("; .", ": .", ",.")), s.headline


def _carries_the_prediction(rep: Report) -> None:
    s = rep.summary
    if s.primary is None:
        return
    assert "should take about" in s.headline and "tracelens diff" in s.headline, s.headline
    assert len(s.headline) <= HEADLINE_CHARS, s.headline
    assert not any(n.startswith("After it") for n in s.notes), s.notes


@pytest.mark.parametrize("path", SAMPLE_TRACES, ids=trace_id)
def test_headline_carries_the_prediction(path: Path) -> None:
    """Issue 25: where a finding leads, the headline ends with the falsifiable prediction
    (the step after the fix, and how to check it), within HEADLINE_CHARS: the title and its
    fix make room for it (plain_gloo_wait's went to the notes before)."""
    _carries_the_prediction(report_of(path))


@pytest.mark.slow
@needs_real
@pytest.mark.parametrize("path", REAL_TRACES, ids=trace_id)
def test_public_headline_carries_the_prediction(path: Path) -> None:
    _carries_the_prediction(report_of(path))


def _unit_traces() -> list[Path]:
    return [p for p in SAMPLE_TRACES if "diff_" not in p.name]


def _splits(rep: Report) -> bool:
    return PerUnit(rep.window.steps, rep.summary.unit).splits


def _window_totals(text: str, unit: str) -> list[tuple[str, bool]]:
    """Each duration of `text` that is not a per-item value, and whether it says "per unit"."""
    out = []
    for m in DURATION.finditer(text):
        before, after = text[max(m.start() - 20, 0) : m.start()], text[m.end() : m.end() + 30]
        if before.endswith(PER_ITEM_BEFORE) or after.startswith(PER_ITEM_AFTER):
            continue
        out.append((m.group(0), after.startswith(f" per {unit}")))
    return out


@pytest.mark.parametrize("path", _unit_traces(), ids=trace_id)
def test_every_window_total_is_per_unit(path: Path) -> None:
    _says_totals_per_unit(path)


@pytest.mark.slow
@needs_real
@pytest.mark.parametrize("path", REAL_TRACES, ids=trace_id)
def test_every_window_total_is_per_unit_on_public_traces(path: Path) -> None:
    _says_totals_per_unit(path)


def _says_totals_per_unit(path: Path) -> None:
    """Issue 27, everywhere: in a report with steps, the findings' titles and advice, the
    questions' answers, the notes and the headline's finding sentence say their window
    totals per step, none more than a step; the Markdown's cards say each finding's cost,
    gain and evidence and each answer's time as `in_unit` writes them from the JSON's
    window totals (`Metric.total` false: as it is)."""
    rep = report_of(path)
    if not _splits(rep):
        pytest.skip("the window is the unit")
    s = rep.summary
    texts = [f.title for f in rep.findings] + [f.advice for f in rep.findings] + [q.answer for q in rep.questions]
    texts.append(re.split(r" After it| Without the profiler", s.headline)[0])  # the step it takes is no total
    texts += [n for n in s.notes if not n.startswith(("After it", "Without the", "Analysed window", "Start-up before"))]
    for text in texts:
        for said, per in _window_totals(text, s.unit):
            assert per, (said, text)
            assert _duration_us(*said.split(" ")) <= s.per_step_us * 1.05, (said, text)
    page = render_markdown(rep)
    for f in rep.findings:  # from the facts: the cost and gain in the unit, not the totals
        if f.time_us > 0:
            assert f"**Cost:** {in_unit(f.time_us, rep)} ({fmt.pct(f.share)} of the analysed time)" in page, f.title
        assert f"| {md(f.title)} | {in_unit(f.time_us, rep)} (" in page or f not in rep.findings[:8]
        if f.expected_gain_us > 0:
            assert in_unit(f.expected_gain_us, rep) in page
        for m in f.evidence:  # a duration the steps share is said per step; a median as it is
            if m.unit == "us" and not isinstance(m.value, str):
                said = in_unit(float(m.value), rep) if m.total else fmt.us(float(m.value))
                assert f"- {md(m.label)}: {md(said)}" in page, (m, f.title)
    for q in rep.questions:
        if q.status in ("yes", "minor"):
            assert f"{in_unit(q.time_us, rep)} ({fmt.pct(q.share)})" in page
    # one base for every share: the analysed time (not "of the window", "of the step", "profiled time")
    assert not re.search(r"\d% of the (window|step|iteration|call)\b|profiled time", page)
