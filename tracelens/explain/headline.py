"""The headline's sentences written from what ranking.py has settled: the blocker's fix in
a few words, what the step should take after the first fix (and how to check it), and
what it takes without the profiler's own host time."""

from __future__ import annotations

from tracelens.domain import fmt_us
from tracelens.explain.base import where as where_in
from tracelens.report.enums import Category
from tracelens.report.findings import Finding, Prediction


def unprofiled_sentence(unit: str, step: float, now: float, after: float) -> str:
    """What the profiler's own host time changes (derive/profiler_cost.py): the step as the
    user sees it without the profiler, now and after the fix."""
    what = "the window" if unit == "window" else f"the {unit}"
    return (
        f"Without the profiler (its own host time here is about {fmt_us(step - now)} of the {fmt_us(step)}, "
        f"estimated from the events it recorded) {what} takes about {fmt_us(now)}, and about {fmt_us(after)} "
        f"after the fix: {fmt_us(now - after)} saved."
    )


#: A predicted step is given as a range when its ends differ by more than this share.
RANGE_SHARE = 0.02


def prediction_sentence(
    unit: str, step: float, predicted: float, low: float, high: float, pred: Prediction, blockers: str = ""
) -> str:
    """The headline's falsifiable end: what the step should take after the first fix, and
    how to check it (predicted, then measured)."""
    what = "the window" if unit == "window" else f"the {unit}"
    wide = high - low > RANGE_SHARE * max(predicted, 1e-9) and fmt_us(low) != fmt_us(high)
    rng = f" ({fmt_us(low)} to {fmt_us(high)})" if wide else ""  # never "(1.2 ms to 1.2 ms)"
    how = "replayed from this trace" if pred.basis == "replay" else "estimated"
    part = f"; the gain is {pred.part}" if pred.part else ""
    after = f" and the {blockers} fix" if blockers else ""
    return (
        f"After it{after} {what} should take about {fmt_us(predicted)}{rng} instead of {fmt_us(step)} ({how}{part}); "
        "check with `tracelens diff` on a new capture."
    )


def first_fix(blocker: Finding) -> str:
    """The blocker's fix in a few words, with what and where (for the headline)."""
    if blocker.category == Category.HOST_SYNC:
        calls = list(dict.fromkeys(s.description.split(" (", 1)[0].split(":", 1)[0] for s in blocker.sites))
        where = f" {where_in(blocker.sources[0])}" if blocker.sources else ""
        what = ", ".join([c for c in calls if c and c not in ("exec()", "<module>")][:3])
        return f"remove the host syncs{f' ({what})' if what else ''}{where}"
    if blocker.category == Category.COMPILATION:
        return "remove the graph breaks"
    if blocker.category == Category.SHAPE_DYNAMISM:
        return "make the input shapes static (pad or bucket them)"
    return blocker.title
