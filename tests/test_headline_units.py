"""The headline speaks one unit (issue 27): with steps, its costs and gains are per step
(the share may stay); without them, window totals."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from support.corpus import SAMPLE_TRACES, report_of, sample, trace_id

from tracelens.domain import fmt_us
from tracelens.explain.headline import DURATION, HEADLINE_CHARS, _duration_us, per_unit_title, shorter_title
from tracelens.render.markdown import render_markdown


def test_shorter_title_cuts_at_a_clause_with_brackets_closed() -> None:
    title = "GPU idles 14.5 ms (17%; of it) while the host works; in host work in aten::linear (29%), more"
    assert shorter_title(title, 70) == "GPU idles 14.5 ms (17%; of it) while the host works"
    assert shorter_title(title, 500) == title


def test_per_unit_title_divides_totals_and_keeps_per_kernel_values() -> None:
    title = (
        "GPU waits on kernel launches for 33.2 ms (1.7 ms per step): 428 gaps (median kernel 2.9 µs, 100% under 10 µs)"
    )
    assert per_unit_title(title, 20, "step") == (
        "GPU waits on kernel launches for 1.7 ms per step: 428 gaps (median kernel 2.9 µs, 100% under 10 µs)"
    )
    assert per_unit_title(title, 1, "step") == title


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
