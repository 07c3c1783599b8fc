"""The window's reason: which part of the trace is analysed and why, in one sentence,
from the typed fact the window search returns (tracelens.derive.window.spans)."""

from __future__ import annotations

from tracelens.derive.window.spans import (
    ColdKind,
    InnerBody,
    IterationsChosen,
    StepsChosen,
    UserSteps,
    UserWindow,
    WarmupLeftOut,
    WholeSpan,
    Window,
    WindowChoice,
)

#: The sentence of each whole-span basis.
_WHOLE = {
    "gpu": "no step marks and no repeating loop found: the GPU's first to last activity.",
    "host": "no step marks, no GPU activity and no repeating loop: the whole host span.",
    "empty": "the trace has no events to window.",
    "unplaceable": (
        "the step marks hold none of the GPU's activity and no kernel is linked to its launch (no usable "
        "correlation ids), so the steps cannot be placed on the GPU: the GPU's first to last activity."
    ),
}
#: What the repetition search coded, in words.
_TOKENS = {"kernels_and_syncs": "kernels and syncs", "top_level_ops": "top-level ops"}


def _plural(n: int, what: str) -> str:
    return f"{n} {what}" + ("" if n == 1 else "s")


def _cold_kind(kind: ColdKind) -> str:
    return "the profiler's own work" if kind == "profiler" else kind.replace("_", " ")


def _warmup(w: WarmupLeftOut) -> str:
    kinds = ", ".join(_cold_kind(k) for k in w.cold_kinds)
    return (
        f"{w.dur_us / 1e3:.1f} ms vs a median of {w.median_us / 1e3:.1f} ms, {w.cold_us / 1e3:.1f} ms of {kinds} inside"
    )


def _inner(b: InnerBody) -> str:
    if b.turns_at_gap:
        return (
            f"{b.repeats} repeats of a body of {_plural(b.kernels, 'kernel')} ({b.repeats} layers or rounds of one "
            "step, which turns over at its longest host gap)"
        )
    return f"{b.repeats} repeats of a body of {b.kernels} kernels" + (
        ", each with a host sync (in a generation loop: one token each)" if b.ends_in_sync else ""
    )


def tokens_coded(why: IterationsChosen) -> str:
    """What the repetition search coded: "kernels and syncs" (" between long idle gaps")."""
    return _TOKENS[why.tokens_kind] + (" between long idle gaps" if why.by_gaps else "")


def choice_reason(why: WindowChoice) -> str:
    """One sentence: which window was chosen and why."""
    if isinstance(why, StepsChosen):
        if why.marks == "ProfilerStep":
            marks = f"ProfilerStep#{why.first}" + (f"-{why.last}" if why.count > 1 else "")
        else:
            marks = f"marked by {why.marks}"
        member = "call" if why.unit == "sweep" else why.unit  # a sweep's members are its calls
        return (
            f"the {_plural(why.count, 'profiled ' + member)} ({marks})"
            + (f"; {member} {why.warmup.index} left out as warm-up ({_warmup(why.warmup)})" if why.warmup else "")
            + "."
        )
    if isinstance(why, IterationsChosen):
        return (
            f"no step marks: {_plural(why.iterations, 'iteration')} of a loop found in the trace's "
            f"{tokens_coded(why)} ({why.period_tokens} per iteration, repeating over {why.stretch_tokens} of "
            f"{why.tokens})"
            + (f"; one iteration holds {_inner(why.inner)}" if why.inner else "")
            + (f"; iteration 0 left out as warm-up ({_warmup(why.warmup)})" if why.warmup else "")
            + "."
        )
    if isinstance(why, WholeSpan):
        marks = "the iterations found in the trace's host ops" if why.detected else "the step marks"
        if why.basis == "outside":
            them = f"{why.outside} GPU activit{'y' if why.outside == 1 else 'ies'}"
            return (
                f"{marks} hold none of the GPU's activity: its {them} "
                + (
                    "(kernels, copies, memsets) ran outside them"
                    if why.detected
                    else "(kernels, copies, memsets) ran, and were launched, outside them"
                )
                + " (steps cut apart from the GPU work), so the GPU's first to last activity is analysed."
            )
        if why.basis == "unplaceable" and why.detected:
            return _WHOLE["unplaceable"].replace("the step marks", marks, 1)
        return _WHOLE[why.basis]
    if isinstance(why, UserWindow):
        text = f"the window asked for: {why.start_s:g} s to {why.end_s:g} s from the trace's start"
        if why.inside is None:
            return text + "."
        return text + f" ({why.inside} whole step{'' if why.inside == 1 else 's'} inside)."
    if isinstance(why, UserSteps):
        what = "ProfilerSteps" if why.marked else "detected iterations"
        return f"the {what} asked for: {why.first}-{why.last}."
    raise TypeError(f"no words for window choice {why!r}")


def window_reason(w: Window) -> str:
    """The window's reason as the report states it: the choice, and when the GPU was still
    finishing work queued before the first step, how much later the window starts."""
    text = choice_reason(w.why)
    if w.queued_us > 0:
        text = text.rstrip(".") + (
            f"; starting {w.queued_us / 1e3:.1f} ms later, when the GPU had finished the work queued before the "
            "first step."
        )
    return text
