"""The entry point: the user's window or steps, else the ProfilerSteps, else detected
iterations, else the whole span (the package docstring gives the rules).
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from tracelens.derive.window.detect import _window_from_iterations, detect_iterations
from tracelens.derive.window.spans import StepSpan, UserSteps, UserWindow, WholeSpan, Window, WindowError, _trace_start
from tracelens.derive.window.startup import _make
from tracelens.derive.window.steps import _marked_steps, _window_from_steps
from tracelens.model.trace import TraceModel


def find_window(
    model: TraceModel,
    device: int | None,
    *,
    user_window: tuple[float, float] | None = None,
    user_steps: tuple[int, int] | None = None,
) -> Window:
    """The window to analyse on `device` (None: the busiest GPU), and the start-up before it."""
    dev = device if device is not None else (model.meta.active_devices[0] if model.meta.active_devices else None)
    t0 = _trace_start(model)
    marked = _marked_steps(model)
    if user_window is not None:
        return _user_window(model, dev, t0, user_window, marked)
    if user_steps is not None:
        return _user_steps(model, dev, t0, user_steps, marked)
    if marked:
        return _holding_the_gpu(model, dev, t0, _window_from_steps(model, t0, marked), detected=False)
    found = detect_iterations(model, dev)
    if found is not None:
        return _holding_the_gpu(model, dev, t0, _window_from_iterations(model, t0, found), detected=True)
    return _whole(model, dev, t0)


def _holding_the_gpu(model: TraceModel, dev: int | None, t0: float, w: Window, *, detected: bool) -> Window:
    """`w`, unless it holds none of the GPU's activity while the trace has some: then the
    GPU's whole span, saying why (issue 29's fuzz: seed 29 case 2066, a kernel after the
    last ProfilerStep; seed 30 case 1896, two iterations found in the host's top-level ops
    and the one kernel after them: "No GPU activity to analyse" for a trace with GPU time)."""
    if _unplaceable_on_gpu(model, dev, w):
        return _whole(model, dev, t0, "unplaceable", detected=detected)
    # Iterations found in the host's ops are analysed as they run: GPU work launched in
    # them but run after them is not theirs (seed 30 case 1896 again, with the kernel's
    # launch kept: the launch inside, the kernel 11 ms after), so only running counts.
    outside = _all_outside_steps(model, dev, w, launched_counts=not detected)
    if outside:
        return _whole(model, dev, t0, "outside", outside, detected=detected)
    return w


def _unplaceable_on_gpu(model: TraceModel, dev: int | None, w: Window) -> bool:
    """Whether the marked steps hold none of `dev`'s GPU activity while none of it is
    linked to a launch: the GPU trails the host, and without the links (correlation ids
    removed or unusable, issue 29) nothing says which GPU work was the steps', so a
    window of the steps alone would analyse no GPU time of a trace that has it."""
    act = model.gpu_activity()
    on_dev = act[act["device"] == dev] if dev is not None else act
    if not len(on_dev) or bool((on_dev["launch"].to_numpy() >= 0).any()):
        return False
    inside = (on_dev["end"].to_numpy() > w.start_us) & (on_dev["ts"].to_numpy() < w.end_us)
    return not bool(inside.any())


def _all_outside_steps(model: TraceModel, dev: int | None, w: Window, *, launched_counts: bool = True) -> int:
    """How many of `dev`'s GPU activities there are when none of them runs inside the
    marked steps' window or was launched from inside it, else 0 (issue 29's fuzz, seed 29
    case 2066: a kernel after the last ProfilerStep, with its launch, gave "No GPU
    activity to analyse" for a trace that has GPU time)."""
    act = model.gpu_activity()
    on_dev = act[act["device"] == dev] if dev is not None else act
    if not len(on_dev):
        return 0
    inside = (on_dev["end"].to_numpy() > w.start_us) & (on_dev["ts"].to_numpy() < w.end_us)
    if bool(inside.any()):
        return 0
    if not launched_counts:
        return len(on_dev)
    rows = on_dev["launch"].to_numpy()
    linked = rows[rows >= 0]
    if len(linked):
        host_ts = model.host["ts"].to_numpy()
        at = host_ts[linked[linked < len(host_ts)]]
        if bool(((at >= w.start_us) & (at < w.end_us)).any()):
            return 0
    return len(on_dev)


def _whole(
    model: TraceModel,
    dev: int | None,
    t0: float,
    gpu_basis: Literal["gpu", "unplaceable", "outside"] = "gpu",
    outside: int = 0,
    *,
    detected: bool = False,
) -> Window:
    """The GPU's first to last activity (`gpu_basis` says why, when the trace marks steps:
    they cannot be placed on the GPU, or all its `outside` activities ran outside them),
    else the host span, else nothing."""
    act = model.gpu_activity()
    on_dev = act[act["device"] == dev] if dev is not None else act
    if len(on_dev):
        start, end = float(on_dev["ts"].min()), float(on_dev["end"].max())
        why = WholeSpan(gpu_basis, outside, detected)
    elif len(model.host):
        start, end = float(model.host["ts"].min()), float(model.host["end"].max())
        why = WholeSpan("host")
    else:
        start = end = t0
        why = WholeSpan("empty")
    return _make(model, t0, start, end, "whole", (), (), why)


def _user_window(
    model: TraceModel, dev: int | None, t0: float, window: tuple[float, float], marked: tuple[StepSpan, ...]
) -> Window:
    a, b = window
    span = model.span_us
    start, end = t0 + a * 1e6, t0 + b * 1e6
    if not (np.isfinite(a) and np.isfinite(b)) or a < 0 or b <= a or start >= span:
        raise WindowError(f"--window {a:g}:{b:g} is not inside the trace (0 to {(span - t0) / 1e6:.3f} s)")
    end = min(end, span)
    spans = marked or _detected_spans(model, dev)
    inside = tuple(s for s in spans if s.start_us >= start and s.end_us <= end)
    why = UserWindow(a, b, len(inside) if spans else None)
    return _make(model, t0, start, end, "user", inside, (), why)


def _user_steps(
    model: TraceModel, dev: int | None, t0: float, steps: tuple[int, int], marked: tuple[StepSpan, ...]
) -> Window:
    lo, hi = steps
    spans = marked or _detected_spans(model, dev)
    chosen = tuple(s for s in spans if lo <= s.index <= hi)
    if not chosen:
        have = f"{spans[0].index}-{spans[-1].index}" if spans else "none"
        what = "steps" if marked else "detected iterations"
        raise WindowError(f"--steps {lo}-{hi} selects no step (this trace's {what}: {have})")
    why = UserSteps(bool(marked), chosen[0].index, chosen[-1].index)
    return _make(model, t0, chosen[0].start_us, chosen[-1].end_us, "user", chosen, (), why)


def _detected_spans(model: TraceModel, dev: int | None) -> tuple[StepSpan, ...]:
    found = detect_iterations(model, dev)
    return found.spans if found is not None else ()
