"""Question 5: allocation, from the runtime calls, [memory] events and growing tensors."""

from __future__ import annotations

import json

import pytest
from support.corpus import needs_real, real, report_of, sample

from tracelens.render import render_html, render_json, render_markdown
from tracelens.report import Category, Finding, Report


def _q(rep: Report, qid: str) -> str:
    return next(q.status for q in rep.questions if q.id == qid)


def _alloc(rep: Report) -> Finding | None:
    return next((f for f in rep.findings if f.category == Category.ALLOCATION), None)


def _metric(f: Finding, label: str) -> float:
    return float(next(m.value for m in f.evidence if m.label == label))


def test_empty_cache_in_the_loop() -> None:
    rep = report_of(sample("dyn_empty_cache"))
    f = _alloc(rep)
    assert f is not None and f.severity.value == "high"
    assert "empty_cache" in f.tags and _metric(f, "torch.cuda.empty_cache() calls") > 0
    assert _metric(f, "of them frees (device-wide syncs)") > 0
    assert "remove it" in f.advice and "cudaFree synchronises" in f.advice
    # The buffer's size changes every step: the cache cannot reuse its blocks.
    assert "Allocation sizes keep changing" in f.advice and "aten::linear" in f.advice
    assert _q(rep, "allocation") == "yes"


def test_no_empty_cache_answers_no() -> None:
    rep = report_of(sample("dyn_empty_cache_fixed"))
    assert _alloc(rep) is None
    assert _q(rep, "allocation") == "no"


def test_kv_cache_regrown_by_cat() -> None:
    """4 layers x K and V, [8, 16, L, 64] bf16 grown by one token per step: each cat
    copies the whole cache again."""
    rep = report_of(sample("dyn_kv_cat"))
    f = _alloc(rep)
    assert f is not None and "growing_tensor" in f.tags
    site = next(s for s in f.sites if s.kind == "growing_cat")
    assert site.source is not None and site.source.file.endswith("kv_cat.py")
    assert site.count == 80  # 10 steps x 4 layers x (K, V)
    recopied = _metric(f, "of them re-copied old contents (a static buffer saves)")
    # Old contents: 8*16*64 elements of 2 bytes per token of length, lengths 533..542.
    expected = sum(8 * 16 * L * 64 * 2 for L in range(533, 543)) * 8
    assert abs(recopied - expected) / expected < 0.01
    assert "static KV cache" in f.advice
    assert f.time_us > 0 and f.time_us == _metric(f, "GPU time of the growing cats")


def test_preallocated_cache_has_no_growth() -> None:
    rep = report_of(sample("dyn_kv_static"))
    assert _alloc(rep) is None
    assert _q(rep, "allocation") == "no"


@pytest.mark.slow
@needs_real
def test_alexnet_measured_forward_and_warmup_apart() -> None:
    rep = report_of(real("benchmark_result_2869224_1695835535_trace.json.gz"))
    f = _alloc(rep)
    assert f is not None and f.severity.value == "high"
    assert f.time_us > 0.3 * rep.gpu_time.total.window_us
    assert _metric(f, "allocator calls in start-up (not blamed)") > 0
    assert _metric(f, "host time in start-up allocator calls (not blamed)") > 1e6  # the 12.8 s warm-up forward's
    assert _q(rep, "allocation") == "yes"


@pytest.mark.slow
@needs_real
def test_memory_events_of_an_old_trace() -> None:
    """A 2021 ResNet-50 trace: [memory] events without totals (allocated is the running sum)."""
    rep = report_of(real("worker0.1623143089861.pt.trace.json.gz"))
    m = rep.memory
    assert m is not None and m.relative and m.peak_reserved == 0
    assert m.peak_allocated > 1e9 and m.allocated_per_step > 1e9
    # Every step frees what it allocates (a training step returns to its baseline).
    assert abs(m.allocated_per_step - m.freed_per_step) / m.allocated_per_step < 0.05
    assert m.top_ops and m.top_ops[0][1] > 0
    assert len(m.allocated) == len(m.ts) > 100
    f = _alloc(rep)
    assert f is not None and f.time_us == 0 and "memory_events" in f.tags
    data = json.loads(render_json(rep))
    assert data["memory"]["peak_allocated"] == m.peak_allocated
    html = render_html(rep)
    assert "device memory over time" in html and html.count("<polyline") >= 1
    assert "#### Device memory" in render_markdown(rep)


@pytest.mark.slow
@needs_real
def test_memory_events_with_totals() -> None:
    rep = report_of(real("Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"))
    m = rep.memory
    assert m is not None and not m.relative
    assert m.peak_reserved >= m.peak_allocated > 0
    assert m.fragmentation_at_peak >= 0


def test_memory_events_of_our_own_capture() -> None:
    """`tracelens capture --memory` on the H200 (the empty_cache loop): the [memory]
    events come through, and empty_cache is counted from its own frame, not from a
    script whose file name contains the word."""
    rep = report_of(sample("dyn_empty_cache_memory"))
    m = rep.memory
    assert m is not None and not m.relative and len(m.ts) > 100
    # Buffers of 16-96 MiB through a 1024 -> 4096 -> 1024 MLP: peaks under 1 GiB.
    assert 0.5e9 < m.peak_allocated <= m.peak_reserved < 1.5e9
    assert m.allocated_per_step > 0
    f = _alloc(rep)
    assert f is not None
    # 60 of the 120 allocator calls are the frees empty_cache() makes.
    assert _metric(f, "torch.cuda.empty_cache() calls") == _metric(f, "of them frees (device-wide syncs)") == 60
    assert _metric(f, "allocator calls in the window") == 120


def test_memory_chart_escapes_op_names() -> None:
    from dataclasses import replace

    rep = report_of(sample("dyn_kv_cat"))
    from tracelens.report import MemoryTimeline

    mem = MemoryTimeline(
        start_us=0.0, end_us=1.0, ts=(0.25, 0.75), allocated=(1.0, 2.0), reserved=(3.0, 3.0), relative=False,
        peak_allocated=2.0, peak_reserved=3.0, allocated_per_step=1.0, freed_per_step=1.0,
        fragmentation_at_peak=1.0, top_ops=(("<script>alert(1)</script>", 5.0),),
    )  # fmt: skip
    html = render_html(replace(rep, memory=mem))
    assert "<script>alert(1)" not in html and "&lt;script&gt;" in html
