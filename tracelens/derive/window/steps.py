"""The window from the trace's ProfilerStep marks, and the warm-up rule: the first step
(or iteration) is left out when it is much slower than the others and has cold-start
work inside.
"""

from __future__ import annotations

import numpy as np

from tracelens.derive.host_calls import profiler_intervals
from tracelens.derive.steps import drop_empty_steps
from tracelens.derive.window.spans import StepSpan, Window, _merge, _plural
from tracelens.derive.window.startup import _PRIORITY_INDEX, _classify_host, _make
from tracelens.model.trace import TraceModel

#: A first step/iteration at least this much slower than the median of the others is a
#: warm-up candidate: steady steps of the real traces vary by less than 1.4x (the
#: num_workers=4 ResNet, worker0.1623212756351, has a 1.44x first step with no cold start).
WARMUP_MIN_RATIO = 1.5


#: ... and slower by more than this: sub-millisecond steps jitter by more than 1.5x
#: (elementwise_fp32's 0.4 ms vs 0.15 ms steps) without any cold start.
WARMUP_MIN_EXCESS_US = 1_000.0


#: Cold-start work must explain at least this share of the first step's excess time, so
#: that one first-call cudaMalloc in a slow data-loading step does not make it a warm-up.
COLD_START_MIN_SHARE = 0.10


#: Steps left after excluding a warm-up step (the brief's rule: a single remaining marked
#: step is not a steady state worth trusting over the user's own marks).
MIN_STEPS_KEPT = 2


#: The profiler's own work inside a first step counts as its cold start from this much
#: on (tracelens capture's gc.collect at the recording's start: 3.54 s in capture_compile;
#: torch.profiler's per-step frames take 0.1-0.3 ms).
PROFILER_START_MIN_US = 1_000.0


#: Kinds that make a slow first step a warm-up ("other" here is first-call work only).
_COLD_KINDS = frozenset({"cuda_init", "lazy_loading", "allocation", "autotune", "compile", "first_call"})


def _marked_steps(model: TraceModel) -> tuple[StepSpan, ...]:
    """ProfilerSteps as a partition: each runs to the next one's host start, the last to
    the end of its host or GPU work (the per-step ledger splits the window the same way)."""
    st = drop_empty_steps(model.steps)
    if st.empty:
        return ()
    st = st.sort_values("cpu_ts", kind="stable")
    starts = st["cpu_ts"].to_numpy(dtype=np.float64)
    cpu_end = st["cpu_end"].to_numpy(dtype=np.float64)
    gpu_end = st["gpu_end"].to_numpy(dtype=np.float64)
    last_end = float(np.nanmax([np.nanmax(cpu_end), np.nanmax(gpu_end) if np.isfinite(gpu_end).any() else np.nan]))
    numbers = st["step"].to_numpy()
    spans = []
    for i, number in enumerate(numbers):
        end = float(starts[i + 1]) if i + 1 < len(starts) else last_end
        spans.append(StepSpan(int(number), float(starts[i]), max(end, float(starts[i]))))
    return tuple(spans)


def _window_from_steps(model: TraceModel, t0: float, steps: tuple[StepSpan, ...]) -> Window:
    kept, excluded, why = _split_warmup(model, steps, MIN_STEPS_KEPT)
    start, end = kept[0].start_us, kept[-1].end_us
    if model.step_marks == "ProfilerStep":
        marks = f"ProfilerStep#{kept[0].index}" + (f"-{kept[-1].index}" if len(kept) > 1 else "")
    else:
        marks = f"marked by {model.step_marks}"
    member = "call" if model.step_unit == "sweep" else model.step_unit
    reason = (
        f"the {_plural(len(kept), 'profiled ' + member)} ({marks})"
        + (f"; {member} {excluded[0].index} left out as warm-up ({why})" if excluded else "")
        + "."
    )
    return _make(model, t0, start, end, "steps", kept, excluded, reason)


def _split_warmup(
    model: TraceModel, spans: tuple[StepSpan, ...], min_kept: int
) -> tuple[tuple[StepSpan, ...], tuple[StepSpan, ...], str]:
    """(kept, excluded warm-up, why) by the first-step rule in the module docstring."""
    if len(spans) < min_kept + 1:
        return spans, (), ""
    first, rest = spans[0], spans[1:]
    median = float(np.median([s.dur_us for s in rest]))
    excess = first.dur_us - median
    if first.dur_us < WARMUP_MIN_RATIO * median or excess <= WARMUP_MIN_EXCESS_US:
        return spans, (), ""
    cold, names = _cold_start_us(model, first, rest[0].start_us, rest[-1].end_us)
    if cold < COLD_START_MIN_SHARE * excess:
        return spans, (), ""
    flagged = StepSpan(first.index, first.start_us, first.end_us, warmup=True)
    why = f"{first.dur_us / 1e3:.1f} ms vs a median of {median / 1e3:.1f} ms, {cold / 1e3:.1f} ms of {names} inside"
    return rest, (flagged,), why


def _cold_start_us(model: TraceModel, span: StepSpan, ref_lo: float, ref_hi: float) -> tuple[float, str]:
    """Wall time of cold-start work inside `span`, and the names of its kinds."""
    parts = _classify_host(model, span.start_us, span.end_us, ref_lo, ref_hi)
    cold = [iv for what, iv in parts.intervals.items() if what in _COLD_KINDS and len(iv)]
    kinds = [
        k.replace("_", " ")
        for k in sorted((w for w in _COLD_KINDS if len(parts.intervals.get(w, ()))), key=lambda k: _PRIORITY_INDEX[k])
    ]
    # The profiler's own start (tracelens capture's gc.collect as the recording begins)
    # makes a first step no steady state either.
    prof = np.clip(profiler_intervals(model), span.start_us, span.end_us)
    prof = prof[prof[:, 1] > prof[:, 0]] if len(prof) else prof
    if len(prof) and float((prof[:, 1] - prof[:, 0]).sum()) >= PROFILER_START_MIN_US:
        cold.append(prof)
        kinds.append("the profiler's own work")
    if not cold:
        return 0.0, ""
    merged = _merge(np.concatenate(cold))
    return float((merged[:, 1] - merged[:, 0]).sum()), ", ".join(kinds)
