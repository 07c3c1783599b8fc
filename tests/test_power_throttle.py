"""power_throttle on traces captured with `tracelens capture` on the H200
(sample_traces/power_gemm: 6 s of 8192^3 bf16 products on random data, then 6 s on zeros;
sample_traces/light_idle: small kernels and sleeps)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from support.corpus import context_of, model_of, report_of, sample

from tracelens.analyzers import power_throttle
from tracelens.derive.clocks import clock_tracks
from tracelens.render import render_html


def phase_clock(path: Path, phase: str) -> float:
    """Time-weighted SM clock over the kernels launched inside record_function(phase)."""
    m = model_of(path)
    sm = clock_tracks(m, m.meta.active_devices[0])["SM clock (MHz)"]
    host = m.host
    ann = host.index[host["name"] == phase].to_numpy()
    assert len(ann), phase
    k = m.kernels()
    k = k[k["launch"] >= 0]
    k = k[np.isin(host["range_root"].to_numpy()[k["launch"].to_numpy()], ann)]
    mid = (k["ts"].to_numpy() + k["end"].to_numpy()) / 2
    return float(np.average(sm.at(mid), weights=k["dur"].to_numpy()))


def test_power_capped_gemm() -> None:
    path = sample("power_gemm")
    (f,) = power_throttle.analyze(context_of(path))
    assert f.tags == ("sw_power_cap",)
    ev = {e.id: e.value for e in f.evidence}
    assert 1500 < ev["sm_clock_busy_mhz"] < 1900  # type: ignore[operator]
    assert ev["max_sm_clock_mhz"] == 1980
    assert ev["power_limit_w"] == 700
    assert ev["limited_share"] > 0.3  # type: ignore[operator]
    assert f.facts.reasons[0][0] == "sw_power_cap"
    # The random phase runs at a lower clock than the zeros phase (the seed's experiment).
    random_mhz, zeros_mhz = phase_clock(path, "random"), phase_clock(path, "zeros")
    assert random_mhz < zeros_mhz - 100, (random_mhz, zeros_mhz)
    # Lost time is bounded by the busy time and positive.
    busy = context_of(path).ledger.primary
    assert busy is not None and 0 < f.time_us < busy.busy_us
    # The GEMM kernel is the one that ran slow.
    assert f.places and "nvjet" in f.places[0].kernels[0]


def test_light_idle_script_not_throttled() -> None:
    path = sample("light_idle")
    assert len(model_of(path).counters) > 0
    assert power_throttle.analyze(context_of(path)) == []
    q6 = next(q for q in report_of(path).questions if q.id == "compute")
    assert q6.status == "no"


def test_report_shows_clocks_and_question_6() -> None:
    rep = report_of(sample("power_gemm"))
    q6 = next(q for q in rep.questions if q.id == "compute")
    # Throttling measured; captured with --no-shapes, so the roofline has nothing to model.
    assert q6.status == "yes" and "Roofline models cover 0%" in q6.answer
    assert rep.clocks is not None and rep.clocks.max_sm_mhz == 1980
    assert min(v for v in rep.clocks.sm_mhz if v == v) < 1800
    html = render_html(rep)
    # Three small charts, each on its own labelled scale (MHz, W, °C), not one shared axis.
    assert "max 1,980 MHz (dashed)" in html and html.count("<polyline") == 3
    assert "limit 700 W (dashed)" in html and "°C" in html
    # captured with --no-shapes: the report says so (it used to say "record_shapes: yes").
    assert not rep.trace.has_shapes
    # The power sentence does not contradict itself ("draws 513 W of its 700 W limit").
    f = next(f for f in rep.findings if f.category.value == "power_throttle")
    assert "draws about" not in f.advice and "to hold the draw at the 700 W limit" in f.advice


def test_power_cap_is_the_machine_not_the_first_fix() -> None:
    """Brief misc §4: a power cap is the machine's condition. power_gemm has no program
    change that gains 3% (host_bound's replayed gain is 19 ms of 12.5 s), so there is no
    primary and the headline says the clocks are capped by power at 700 W, with no gain."""
    rep = report_of(sample("power_gemm"))
    assert rep.summary.primary is None
    assert rep.summary.headline.startswith("Nothing in the program to fix; clocks capped by power at 700 W")
    assert "to gain" not in rep.summary.headline and rep.summary.primary_gain_us == 0.0
    assert any(f.category.value == "power_throttle" for f in rep.findings)  # still a finding (question 6)
