"""What the window is: its steps (ProfilerSteps or detected iterations), the start-up
before it by kind, and why it was chosen.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from tracelens.errors import TracelensError
from tracelens.model.trace import TraceModel
from tracelens.report.enums import StartupKind, WindowSource


class WindowError(TracelensError):
    """A --window or --steps that does not select anything in this trace."""

    exit_code = 2


@dataclass(frozen=True)
class StepSpan:
    index: int  # ProfilerStep#N number, or 0..n-1 for detected iterations
    start_us: float
    end_us: float
    warmup: bool = False  # excluded from the window as warm-up

    @property
    def dur_us(self) -> float:
        return self.end_us - self.start_us


@dataclass(frozen=True)
class StartupPart:
    what: StartupKind
    time_us: float  # host wall time of that kind before the window (non-overlapping)
    count: int
    detail: str  # the top few op/call names


#: What a first step's cold start held: the start-up kinds (tracelens.report.enums), an
#: op's slow first call, and "profiler" (the profiler's own work as the recording begins).
ColdKind = Literal[StartupKind, "first_call", "profiler"]


@dataclass(frozen=True)
class WarmupLeftOut:
    """The first step or iteration left out as warm-up, and what made it one."""

    index: int
    dur_us: float
    median_us: float  # of the steps kept
    cold_us: float  # cold-start work inside it
    cold_kinds: tuple[ColdKind, ...]


@dataclass(frozen=True)
class InnerBody:
    """What one detected iteration holds when its own tokens repeat (issue 24 §1)."""

    repeats: int
    kernels: int  # per repeat
    ends_in_sync: bool  # each repeat ends in a host sync (a generation loop: one token each)
    turns_at_gap: bool = False  # the repeats are the layers or rounds of one step (it turns over at a host gap)


#: What the repetition search coded: the device's kernels and syncs, or the busiest
#: thread's top-level ops.
TokenKind = Literal["kernels_and_syncs", "top_level_ops"]


@dataclass(frozen=True)
class StepsChosen:
    """The profiled steps (source "steps")."""

    count: int
    unit: str  # the model's step unit ("step", ...)
    marks: str  # what marks them ("ProfilerStep", or the annotation the loader used)
    first: int
    last: int
    warmup: WarmupLeftOut | None


@dataclass(frozen=True)
class IterationsChosen:
    """Iterations of a loop found in the trace (source "detected")."""

    iterations: int
    tokens_kind: TokenKind
    by_gaps: bool  # delimited by long idle gaps
    period_tokens: int
    stretch_tokens: int
    tokens: int
    inner: InnerBody | None
    warmup: WarmupLeftOut | None


@dataclass(frozen=True)
class WholeSpan:
    """Nothing repeats (source "whole"): the GPU's span, the host's, or nothing; or the
    step marks hold no GPU work and nothing links kernels to launches ("unplaceable"); or
    all `outside` GPU activities ran, and were launched, outside the marked steps (or, with
    `detected`, outside the iterations found in the trace's host ops)."""

    basis: Literal["gpu", "host", "empty", "unplaceable", "outside"]
    outside: int = 0
    detected: bool = False


@dataclass(frozen=True)
class UserWindow:
    """--window A:B (seconds from the trace's start); `inside` whole steps, None when the
    trace has no steps to count."""

    start_s: float
    end_s: float
    inside: int | None


@dataclass(frozen=True)
class UserSteps:
    """--steps A-B, by ProfilerStep number (`marked`) or detected iteration index."""

    marked: bool
    first: int
    last: int


#: Why the window is what it is: a typed fact; explain/window.py words it.
WindowChoice = StepsChosen | IterationsChosen | WholeSpan | UserWindow | UserSteps


@dataclass(frozen=True)
class Window:
    start_us: float
    end_us: float
    source: WindowSource
    steps: tuple[StepSpan, ...]  # steps/iterations inside the window
    excluded_steps: tuple[StepSpan, ...]  # warm-up steps left out (reported apart)
    startup_us: float  # from the trace's first event to start_us
    startup: tuple[StartupPart, ...]
    why: WindowChoice  # which window was chosen and why (explain.window.window_reason words it)
    queued_us: float = 0.0  # the start moved this much later: the GPU was finishing work queued before

    @property
    def dur_us(self) -> float:
        return self.end_us - self.start_us


@dataclass(frozen=True)
class Iterations:
    """What the repetition search found (the test and `--steps` read it too)."""

    spans: tuple[StepSpan, ...]
    period_tokens: int
    tokens: int  # length of the coded sequence
    stretch_tokens: int  # tokens inside the repeating stretch
    tokens_kind: TokenKind  # what was coded
    by_gaps: bool  # the iterations are delimited by long idle gaps
    inner: InnerBody | None = None  # what one iteration holds when its body repeats inside it


def _trace_start(model: TraceModel) -> float:
    firsts = [float(df["ts"].min()) for df in (model.host, model.gpu) if len(df)]
    return min(firsts) if firsts else 0.0


def _merge(iv: np.ndarray) -> np.ndarray:
    """Union of (n, 2) intervals, sorted and disjoint."""
    if not len(iv):
        return np.empty((0, 2))
    iv = iv[np.argsort(iv[:, 0], kind="stable")]
    run_end = np.maximum.accumulate(iv[:, 1])
    new = np.empty(len(iv), dtype=bool)
    new[0] = True
    new[1:] = iv[1:, 0] > run_end[:-1]
    group = np.cumsum(new) - 1
    out = np.zeros((int(new.sum()), 2))
    out[:, 0] = iv[new, 0]
    np.maximum.at(out[:, 1], group, run_end)
    return out
