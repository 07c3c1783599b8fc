"""The headline's closing sentences, from numbers ranking.py has settled: what the step
should take after the first fix (and how to check it), and what it takes without the
profiler's own host time."""

from __future__ import annotations

from tracelens.domain import fmt_us
from tracelens.report.findings import Prediction


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
    rng = f" ({fmt_us(low)} to {fmt_us(high)})" if high - low > RANGE_SHARE * max(predicted, 1e-9) else ""
    how = "replayed from this trace" if pred.basis == "replay" else "estimated"
    part = f"; the gain is {pred.part}" if pred.part else ""
    after = f" and the {blockers} fix" if blockers else ""
    return (
        f"After it{after} {what} should take about {fmt_us(predicted)}{rng} instead of {fmt_us(step)} ({how}{part}); "
        "check with `tracelens diff` on a new capture."
    )
