"""explain/ writes the words from the analyzers' facts: every analyzer has a writer, every
piece of evidence it states has a label, and the report carries the evidence ids."""

from __future__ import annotations

from support.corpus import context_of, report_of, sample

from tracelens import explain
from tracelens.analyzers import ANALYZERS, run_all


def test_every_analyzer_has_a_writer() -> None:
    assert {spec.category for spec in ANALYZERS} <= set(explain.WRITERS)


def test_every_fact_has_its_words() -> None:
    """On traces where most analyzers fire: each finding is worded, each evidence id has a
    label, each place a description (explain.findings raises on a missing one)."""
    seen = set()
    for name in ("train_step", "host_sync_mask", "power_gemm", "gemm_misaligned", "dyn_recompile"):
        ctx = context_of(sample(name))
        found = run_all(ctx)
        worded = explain.findings(found, ctx.share, ctx.per_unit)
        assert len(worded) == len(found)
        for f, w in zip(found, worded, strict=True):
            seen.add(f.category)
            assert w.title and w.advice
            assert [m.id for m in w.evidence] == [e.id for e in f.evidence]
            assert all(m.label for m in w.evidence)
            assert len(w.sites) == len(f.places) and all(s.description for s in w.sites)
    assert len(seen) >= 6, seen  # a positive control: the traces exercise most writers


def test_report_evidence_carries_ids() -> None:
    """The JSON evidence names its quantity by id, so wording can change without breaking
    a reader (power_gemm: the SM clock while busy, 1500-1900 MHz of 1980)."""
    rep = report_of(sample("power_gemm"))
    power = next(f for f in rep.findings if f.category == "power_throttle")
    ev = {m.id: m for m in power.evidence}
    assert 1500 < float(ev["sm_clock_busy_mhz"].value) < 1900
    assert ev["reasons"].value.startswith("power cap")  # type: ignore[union-attr]  # NVML's sw_power_cap, in words
