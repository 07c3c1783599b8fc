"""The profiler's own host cost (derive/profiler_cost.py, issue 25): the step without the
profiler, replayed from a profiled trace, against the CUDA-event step measured outside
the profiler on the H200 diff pairs (workloads/diff_pairs.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from support.corpus import context_of, diff_of, model_of, report_of, sample

from tracelens.derive.profiler_cost import CHEAP_OPS, OP_COST_BOUNDS, US_PER_OP_EVENT, op_cost_us
from tracelens.model.schema import Kind
from tracelens.render.markdown import render_markdown


def _event_us(path: Path) -> float:
    meta = model_of(path).meta.metadata["tracelens_workload"]
    data = json.loads(meta) if isinstance(meta, str) else meta
    return float(data["event_step_ms"]) * 1e3


def _steps(path: Path) -> tuple[float, float]:
    """(profiled, unprofiled) step replayed, µs."""
    ctx = context_of(path)
    k = max(ctx.replay_span[3], 1)
    return ctx.replayed / k, ctx.unprofiled / k


#: Host-bound sides: profiled 40-113% slower than their CUDA-event steps.
HOST_BOUND = ["diff_item_before", "diff_item_after", "diff_loader_after", "diff_kv_after", "diff_empty_cache_after"]
#: Within this of the CUDA-event step (measured: +4% to +20% on these, item_before the
#: worst; every side's error: bench/bench_replay.py --accuracy).
UNPROFILED_TOLERANCE = 0.25


@pytest.mark.parametrize(
    ("name", "tolerance"),
    [
        # CUPTI_GRAPH_KERNEL_GAP_US was fitted here: +7.5%, the window's first step (its
        # first graph launch since the recording began held the kernels 240 us) left.
        ("diff_graph_after", 0.10),
        # Not fitted on: 300 kernels a replay, the host paced by cudaGraphLaunch (1.4 us a
        # kernel under the profiler): +60% before the graph launch was modelled, +1.0% now.
        ("diff_graph_u_after", 0.05),
    ],
)
def test_a_replayed_cuda_graph_without_the_profiler(name: str, tolerance: float) -> None:
    """Without the profiler a graph launch takes constant time and its kernels run closer
    (transforms/profiler._graph_launches): the step is the CUDA-event step."""
    path = sample(name)
    profiled, unprofiled = _steps(path)
    ev = _event_us(path)
    assert profiled > 1.3 * ev
    assert unprofiled == pytest.approx(ev, rel=tolerance)


def test_the_profilers_own_frames_are_its_cost() -> None:
    """prof.step()'s Python frames between the steps count whole (68 us a step in
    diff_graph_u_after), not 1 us per frame they recorded."""
    cost = context_of(sample("diff_graph_u_after")).profiler_cost
    assert cost is not None
    assert cost.in_gap.max() > 60.0


@pytest.mark.parametrize("name", HOST_BOUND)
def test_the_unprofiled_step_is_the_cuda_event_step(name: str) -> None:
    path = sample(name)
    profiled, unprofiled = _steps(path)
    ev = _event_us(path)
    assert profiled > 1.3 * ev  # the profiler's cost is there to remove
    assert abs(unprofiled - ev) < abs(profiled - ev)
    assert unprofiled == pytest.approx(ev, rel=UNPROFILED_TOLERANCE)


@pytest.mark.parametrize("name", ["diff_compile_before", "diff_align_before", "diff_sdpa_before"])
def test_a_gpu_bound_step_keeps_its_time(name: str) -> None:
    """The host ran ahead: removing its profiler time does not shorten the step."""
    profiled, unprofiled = _steps(sample(name))
    assert unprofiled == pytest.approx(profiled, rel=0.02)
    assert unprofiled == pytest.approx(_event_us(sample(name)), rel=0.02)


def test_the_op_cost_is_read_from_the_trace() -> None:
    model = model_of(sample("diff_item_before"))
    host = model.host
    cheap = (host["kind"].to_numpy() == int(Kind.CPU_OP)) & host["name"].astype(str).isin(CHEAP_OPS).to_numpy()
    assert cheap.sum() >= 20
    assert op_cost_us(model) == pytest.approx(float(np.median(host["dur"].to_numpy()[cheap])))
    assert OP_COST_BOUNDS[0] <= op_cost_us(model) <= OP_COST_BOUNDS[1]
    # A trace with no cheap ops (200 aten::mul a step) takes the default.
    assert op_cost_us(model_of(sample("diff_graph_before"))) == US_PER_OP_EVENT


def test_the_headline_says_the_step_without_the_profiler() -> None:
    r = report_of(sample("diff_loader_before"))
    s = r.summary
    assert 0 < s.unprofiled_predicted_step_us < s.unprofiled_step_us < s.per_step_us
    assert "Without the profiler" in " ".join((s.headline, *s.notes))  # a note where the headline is full
    assert "Without the profiler" in render_markdown(r)
    top = next(f for f in r.findings if f.category == s.primary)
    assert top.prediction is not None and 0 < top.prediction.unprofiled_gain_us < top.prediction.gain_us


def test_no_unprofiled_sentence_where_the_profiler_cost_little() -> None:
    s = report_of(sample("diff_compile_before")).summary
    assert s.unprofiled_step_us == 0 and "Without the profiler" not in s.headline


def test_the_diff_predicts_the_unprofiled_after_step() -> None:
    """DataLoader workers: predicted without the profiler 9.24 ms, CUDA events 9.25 ms."""
    b, a = sample("diff_loader_before"), sample("diff_loader_after")
    v = diff_of(b, a).verdict
    assert v.predicted_unprofiled_step_us == pytest.approx(_event_us(a), rel=0.1)
    assert v.predicted_unprofiled_step_us < v.predicted_step_us
