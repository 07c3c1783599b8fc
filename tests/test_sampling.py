"""Down-sampled traces (issue 24, the independent reading): HTA's sampled_rank-0/1 had
events removed after the capture. The removed events must not read as host work, the
report says what was removed, and what stays true (the collectives' own time) leads."""

from __future__ import annotations

import pytest
from support.corpus import REAL_TRACES, SAMPLE_TRACES, context_of, model_of, needs_real, real, report_of

from tracelens.model.sampling import down_sampled
from tracelens.report import Category

SAMPLED = ("sampled_rank-0.json.gz", "sampled_rank-1.json.gz")


@pytest.mark.slow
@needs_real
def test_only_the_sampled_traces_are_down_sampled() -> None:
    """The signature holds on the two sampled traces and on no complete trace of the
    corpus: 17 public traces, every H200 capture."""
    for p in REAL_TRACES + SAMPLE_TRACES:
        d = down_sampled(model_of(p))
        assert (d is not None) == (p.name in SAMPLED), p.name
    d = down_sampled(model_of(real("sampled_rank-0.json.gz")))
    assert d is not None and d.allocating_ops == 87 and d.with_allocation == 0
    assert d.host_ops == 2329 and d.silent_ops == 4 and d.runtime_calls == d.launches == 1204


@pytest.mark.slow
@pytest.mark.parametrize("name", SAMPLED)
def test_down_sampled_holes_are_not_host_work(name: str) -> None:
    """sampled_rank-0 read 355 ms of 'host work in ## backward ##' (the autograd thread's
    dropped ops and kernels) and headlined it. Now that idle is 'unrecorded', no replay
    is made of the fragment, a note says the trace is down-sampled, and the collectives
    (the all-to-all first) lead."""
    rep = report_of(real(name))
    t = rep.gpu_time.total
    assert t.get("host_bound") == 0 and t.get("launch_overhead") == 0 and t.get("idle_other") == 0
    assert t.get("unrecorded") > 0.4 * t.window_us
    assert not any(f.category == Category.HOST_BOUND for f in rep.findings)
    assert rep.summary.primary == Category.COMMUNICATION
    assert any("down-sampled" in n and "unrecorded" in n for n in rep.summary.notes)
    comm = next(f for f in rep.findings if f.category == Category.COMMUNICATION)
    assert comm.sites[0].kind == "all_to_all" and "down-sampled" in comm.advice
    assert context_of(real(name)).graph is None


@pytest.mark.slow
def test_a_complete_trace_keeps_its_causes() -> None:
    """control.json (complete, same kind of job): nothing unrecorded, a replay, its
    host_bound and launch_overhead as before."""
    rep = report_of(real("control.json.gz"))
    assert rep.gpu_time.total.get("unrecorded") == 0 and rep.gpu_time.total.get("launch_overhead") > 0
    assert not any("down-sampled" in n for n in rep.summary.notes)
    assert context_of(real("control.json.gz")).graph is not None
