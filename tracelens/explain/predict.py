"""The words of a scored prediction (`tracelens diff`, tracelens/predict/score.py): each
fix's predicted and measured change, and the step the before-report predicted."""

from __future__ import annotations

from tracelens.domain import category_label, fix_label, fmt_us_change, gain_error
from tracelens.report.diff_report import PredictionCheck


def _pct(x: float) -> str:
    return f"{abs(x):.0%}"


def score_text(
    checks: list[PredictionCheck],
    predicted: float,
    lo: float,
    hi: float,
    measured: float,
    error: float,
    basis: str,
    cats: tuple[str, ...],
    within_share: float,
) -> str:
    """Each check (a check within `within_share` of its measurement is "within"), then the
    predicted step against the measured one."""
    parts = []
    for c in checks:
        off = abs(c.error)
        how = f"within {_pct(off)}" if off <= within_share else gain_error(c.error)
        of = "" if c.measured_of == "step" else " in its own time"
        parts.append(
            f"{category_label(c.category)} ({fix_label(c.fix)}): predicted {fmt_us_change(c.predicted_us)} a step, "
            f"measured {fmt_us_change(c.measured_us)}{of} ({how})"
        )
    rng = f" ({lo / 1e3:.2f} to {hi / 1e3:.2f} ms)" if hi - lo > 0.02 * max(predicted, 1e-9) else ""
    got = f"measured {measured / 1e3:.2f} ms (the prediction {_pct(error)} {'high' if error >= 0 else 'low'})"
    words = [category_label(c, capital=False) for c in cats]
    with_ = f"{' and '.join(words)} fixed together" if basis == "joint" else f"{words[0]} fixed"
    step = f"With {with_}, the before-report predicted a {predicted / 1e3:.2f} ms step{rng}; {got}."
    return " ".join([*(p + "." for p in parts), step])


def nothing_fixed_text(primary: str | None, predicted_step_us: float) -> str:
    """Why there is nothing to score: no finding of the before-report shrank by half."""
    return (
        f"No finding of the before-report shrank by half, so there is no fix to score (its headline predicted "
        f"a {predicted_step_us / 1e3:.2f} ms step after fixing the {category_label(primary, capital=False)})."
        if primary and predicted_step_us > 0
        else ""
    )


def common_steps_text(lo: int, hi: int) -> str:
    """The steps a prediction was scored on, where the two windows held different steps."""
    return f"(Scored on steps {lo}-{hi}, the ones both windows hold.)"
