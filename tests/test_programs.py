"""Real programs, unmodified, captured on the H200 by workloads/programs/gpu_run.sh
(`tracelens capture --steps`, Python stacks; torch 2.11+cu130): the verdicts that the
unprofiled experiments confirmed (workloads/programs/README.md has the table)."""

from __future__ import annotations

from support.corpus import model_of, report_of, sample

from tracelens.analyzers.host_sync import GRAPH_ENDING_CONSTRUCTS


def _finding(rep, category: str):  # type: ignore[no-untyped-def]
    return next(f for f in rep.findings if f.category == category)


def test_lightning_fit_is_data_loading_bound() -> None:
    """Lightning's fit with num_workers=0: the report's first fix (DataLoader workers)
    predicted 87% of the step; 8 workers + pinned memory took it from 127.6 to 15.7 ms
    unprofiled (88%)."""
    path = sample("prog_lightning")
    meta = model_of(path).meta.metadata["tracelens"]
    assert meta["step_source"] == "optimizer"  # Lightning's own optimizer.step() calls
    rep = report_of(path)
    assert rep.window.source == "steps" and rep.window.steps == 5
    assert rep.summary.primary == "host_bound"
    hb = _finding(rep, "host_bound")
    assert hb.share >= 0.8 and "DataLoader" in hb.title


def test_timm_amp_loop_is_launch_bound() -> None:
    """resnet50 bs64 AMP in eager: launch-bound (batch 128 costs 45.2 ms against 40.4 ms
    for 64 unprofiled); the report's share (46%) matches the unprofiled step minus the GPU
    busy time (40.4 - 21.8 ms)."""
    rep = report_of(sample("prog_timm"))
    assert rep.summary.primary == "launch_overhead"
    assert 0.35 <= _finding(rep, "launch_overhead").share <= 0.6


def test_detection_with_fixed_shapes_has_no_shape_cost() -> None:
    """Faster R-CNN on fixed-size images (the fix of the varying-shape run's headline:
    254.4 -> 79.5 ms unprofiled): no shape-dynamism finding is left, the step is
    launch-bound (its largest time; which finding heads the report is the gains' ranking,
    issue 25: since predict's replayed gains it is host_bound's DataLoader work)."""
    rep = report_of(sample("prog_detection_fixed"))
    assert max(rep.findings, key=lambda f: f.time_us).category == "launch_overhead"
    assert not [f for f in rep.findings if f.category == "shape_dynamism" and f.share >= 0.03]


def test_detection_syncs_block_a_graph_counted_over_every_site() -> None:
    """Faster R-CNN's box sampling syncs 108 times a step at 18 sites; 144 of the calls in
    the 3 steps need their value on the host (x[mask], .item(), .tolist()), 51 GPU launches
    apart: a CUDA graph of the step cannot be captured, so the launch fix is blocked by the
    syncs. Counted over the 8 sites the finding shows, the calls were 72 (101 launches
    apart: no blocker) and the headline advised a CUDA graph of a detection step."""
    rep = report_of(sample("prog_detection_fixed"))
    sync = _finding(rep, "host_sync")
    ending = next(m.value for m in sync.evidence if m.id == "graph_ending_calls")
    shown = sum(s.count for s in sync.sites if s.kind in GRAPH_ENDING_CONSTRUCTS)
    assert (ending, shown) == (144, 72)
    assert len(sync.sites) == 8
    assert _finding(rep, "launch_overhead").blocked_by == "host_sync"
    assert rep.summary.primary == "host_bound"
