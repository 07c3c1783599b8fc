"""What the window is: its steps (ProfilerSteps or detected iterations), the start-up
before it by kind, and why it was chosen.
"""

from __future__ import annotations

from dataclasses import dataclass

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


@dataclass(frozen=True)
class Window:
    start_us: float
    end_us: float
    source: WindowSource
    steps: tuple[StepSpan, ...]  # steps/iterations inside the window
    excluded_steps: tuple[StepSpan, ...]  # warm-up steps left out (reported apart)
    startup_us: float  # from the trace's first event to start_us
    startup: tuple[StartupPart, ...]
    reason: str  # one sentence: which window was chosen and why

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
    what: str  # what was coded: "kernels and syncs" (... "between long idle gaps"), "top-level ops"
    inner: str = ""  # what one iteration holds when its body repeats inside it (issue 24 §1)


def _plural(n: int, what: str) -> str:
    return f"{n} {what}" + ("" if n == 1 else "s")


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
