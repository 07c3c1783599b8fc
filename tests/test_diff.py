"""tracelens diff on pairs with known answers (issue 17)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.cli import cli, one_error_line_problem
from support.corpus import diff_of, model_of, needs_real, real, sample

from tracelens.render.diff import render_diff_html, render_diff_json, render_diff_markdown, render_diff_terminal


def _check_contract(d: object) -> None:
    data = json.loads(render_diff_json(d))  # type: ignore[arg-type]
    v = data["verdict"]
    for key in ("before_step_us", "after_step_us", "change_us", "noise_us", "within_noise", "main_cause", "text"):
        assert key in v
    # The causes' changes add up to the change in step time.
    assert sum(c["change_us"] for c in data["causes"]) == pytest.approx(v["change_us"], abs=1.0)
    for c in data["changes"]:
        assert set(c) >= {"kind", "name", "source", "before_us", "after_us"}


@pytest.mark.slow
@needs_real
def test_dataloader_workers_pair() -> None:
    """The 2021 ResNet-50 pair, DataLoader num_workers=0 vs 4 on the same V100. The mean
    ProfilerStep went from 174.9 to 139.7 ms (-35.2); the median step from 176.3 to
    126.6 (-49.7; the num_workers=4 run's first step is slow while its workers start).
    HTA's TraceDiff of one step shows DataLoader __next__ (68.7 ms) removed; ours counts
    the part of it the GPU waited for, 58.7 ms per step."""
    d = diff_of(real("worker0.1623143089861.pt.trace.json.gz"), real("worker0.1623212756351.pt.trace.json.gz"))
    _check_contract(d)
    v = d.verdict
    assert v.change_us < 0 and not v.within_noise
    assert v.change_us == pytest.approx(-35_200, rel=0.15)
    assert v.median_change_us == pytest.approx(-49_700, rel=0.15)
    assert v.main_cause == "host_bound"
    loader = next(c for c in d.changes if "DataLoader" in c.name)
    assert loader.status == "removed" and loader.before_us > 40_000
    assert "DataLoader" in v.text


def test_pinned_memory_pair() -> None:
    """host_bound_pageable vs host_bound_pinned: same batches and model; the fix pins and
    prefetches. Step time from 13.0 to 2.3 ms; the pageable copies are gone."""
    d = diff_of(sample("host_bound_pageable"), sample("host_bound_pinned"))
    _check_contract(d)
    assert d.verdict.change_share < -0.7 and not d.verdict.within_noise
    assert d.verdict.main_cause == "host_bound"
    pageable = next(c for c in d.changes if c.kind == "kernel" and "Pageable" in c.name)
    assert pageable.status == "removed"


def test_sync_fix_pair() -> None:
    """host_sync_mask vs host_sync_static: the data-dependent syncs are gone (the fix is not
    faster under the profiler: it does more elementwise work, within noise)."""
    d = diff_of(sample("host_sync_mask"), sample("host_sync_static"))
    _check_contract(d)
    sync = next(c for c in d.causes if c.cause == "host_sync")
    assert sync.before_us > 100 and sync.after_us < 0.2 * sync.before_us
    assert any(c.kind == "op" and c.name == "aten::index" and c.status == "removed" for c in d.changes)
    assert any(c.kind == "sync" and c.status == "removed" for c in d.changes)


def test_same_trace_is_within_noise() -> None:
    d = diff_of(sample("train_step"), sample("train_step"))
    _check_contract(d)
    assert d.verdict.within_noise and d.verdict.change_us == pytest.approx(0.0, abs=1e-6)
    assert not d.changes
    assert "Within noise" in d.verdict.text
    # An unchanged cause is not coloured as slower or faster (issue 27: 0.0 µs was red).
    html = render_diff_html(d)
    assert d.causes and all(c.change_us == 0 for c in d.causes)
    assert 'class="num pos"' not in html and 'class="num neg"' not in html


def test_renderers_escape_and_stay_offline() -> None:
    d = diff_of(sample("host_bound_pageable"), sample("host_bound_pinned"))
    html = render_diff_html(d)
    assert "Content-Security-Policy" in html and "http://" not in html and "https://" not in html
    md = render_diff_markdown(d)
    assert "| cause | before | after | change |" in md and len(md) < 65_536
    term = render_diff_terminal(d)
    assert "tracelens diff" in term


@pytest.mark.slow
@needs_real
def test_different_gpus_are_said_up_front() -> None:
    d = diff_of(real("worker0.1623143089861.pt.trace.json.gz"), sample("train_step"))
    assert any("Different GPUs" in n for n in d.notes)


def _event_us(path: object) -> float:
    meta = model_of(path).meta.metadata.get("tracelens_workload")  # type: ignore[arg-type]
    data = json.loads(meta) if isinstance(meta, str) else meta
    return float(data["event_step_ms"]) * 1e3


@pytest.mark.parametrize("pair", ["compile", "align"])
def test_h200_pairs_match_cuda_events(pair: str) -> None:
    """workloads/diff_pairs.py on the H200: the diff's change per step is within 15% of
    the change CUDA events measured outside the profiler (compile -3% , align 0%)."""
    b, a = sample(f"diff_{pair}_before"), sample(f"diff_{pair}_after")
    d = diff_of(b, a)
    _check_contract(d)
    measured = _event_us(a) - _event_us(b)
    assert d.verdict.change_us == pytest.approx(measured, rel=0.15)
    assert not d.verdict.within_noise
    # The K=4095 fallback kernel (cutlass_75 align1) runs at 13% of the bf16 roof: latency-
    # bound by Nsight Compute's rule, so that is the ledger cause that shrinks.
    expected = {"compile": "gpu_busy_memory", "align": "gpu_busy_latency"}[pair]
    assert d.verdict.main_cause == expected
    if pair == "align":
        assert any("align1" in c.name and c.status == "removed" for c in d.changes)
        assert d.verdict.primary_gone  # misaligned_matmul


def test_h200_cuda_graph_pair() -> None:
    """Eager tiny ops vs their CUDA-graph replay: launch overhead is what went. Under the
    profiler the eager step is slower than unprofiled (3.9 vs 2.8 ms: the profiler's cost
    per op), so the diff's saving (-3.4 ms) is larger than the events' (-2.4 ms)."""
    d = diff_of(sample("diff_graph_before"), sample("diff_graph_after"))
    v = d.verdict
    assert v.main_cause == "launch_overhead" and v.change_share < -0.8
    counters = {c.label: c for c in d.counters}
    assert counters["CUDA graph launches per step"].after == pytest.approx(1.0)
    assert counters["kernel launch calls per step"].before >= 200
    assert "graph launches" in v.text and v.primary_gone


def test_h200_repeat_is_within_noise() -> None:
    d = diff_of(sample("diff_repeat_before"), sample("diff_repeat_after"))
    assert d.verdict.within_noise and "Within noise" in d.verdict.text


@pytest.mark.slow
def test_diff_command_writes_three_reports(tmp_path: Path) -> None:
    out = tmp_path
    b, a = sample("host_bound_pageable"), sample("host_bound_pinned")
    r = cli("diff", b, a, "--out-dir", out)
    assert r.returncode == 0, r.stderr
    assert "Faster by" in r.stdout
    names = sorted(p.suffix for p in out.iterdir())
    assert names == [".html", ".json", ".md"]
    data = json.loads(next(out.glob("*.json")).read_text())
    assert data["verdict"]["change_us"] < 0
    # The inputs are never an output.
    r = cli("diff", b, a, "--json", b)
    assert r.returncode == 2 and one_error_line_problem(r.stderr) is None


@pytest.mark.slow
def test_report_steps_and_window_override(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    t = sample("train_step")
    r = cli("report", t, "--steps", "3-4", "--json", out, "-q")
    assert r.returncode == 0, r.stderr
    w = json.loads(out.read_text())["window"]
    assert w["source"] == "user" and w["steps"] == 2
    r = cli("report", t, "--window", "50:60", "--json", out, "-q")
    assert r.returncode == 2 and "not inside the trace" in r.stderr
