"""The analysed window (placeholder: the steps, else the GPU's span; replaced by the
steady-state detection)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tracelens.model.trace import TraceModel


@dataclass(frozen=True)
class StepSpan:
    index: int
    start_us: float
    end_us: float
    warmup: bool = False


@dataclass(frozen=True)
class StartupPart:
    what: str
    time_us: float
    count: int
    detail: str


@dataclass(frozen=True)
class Window:
    start_us: float
    end_us: float
    source: str
    steps: tuple[StepSpan, ...]
    excluded_steps: tuple[StepSpan, ...]
    startup_us: float
    startup: tuple[StartupPart, ...]
    reason: str


def find_window(
    model: TraceModel,
    device: int | None,
    *,
    user_window: tuple[float, float] | None = None,
    user_steps: tuple[int, int] | None = None,
) -> Window:
    st = model.steps.sort_values("cpu_ts")
    if len(st):
        start = float(st["cpu_ts"].min())
        end = float(np.nanmax([st["cpu_end"].max(), st["gpu_end"].max()]))
        starts = st["cpu_ts"].to_numpy()
        ends = np.concatenate([starts[1:], [end]])
        spans = tuple(StepSpan(int(s), float(a), float(b)) for s, a, b in zip(st["step"], starts, ends, strict=True))
        return Window(start, end, "steps", spans, (), start, (), "the profiled steps")
    act = model.gpu_activity()
    if device is not None:
        act = act[act["device"] == device]
    if act.empty:
        return Window(0.0, model.span_us, "whole", (), (), 0.0, (), "the whole trace")
    start, end = float(act["ts"].min()), float(act["end"].max())
    return Window(start, end, "whole", (), (), start, (), "the GPU's first to last activity")
