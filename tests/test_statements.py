"""Statements wrong on their face (issue 24/27, the independent expert reading): each is
checked on the trace where it was read, so the sentence cannot come back."""

from __future__ import annotations

import pytest
from support.corpus import needs_real, real, report_of, sample

from tracelens.analyzers.base import Category
from tracelens.analyzers.host_sync import direction_of


def test_copy_direction_from_the_memcpys_own_kind() -> None:
    assert direction_of("Memcpy HtoD (Pageable -> Device)") == "host_to_device"
    assert direction_of("Memcpy DtoH (Device -> Pageable)") == "device_to_host"
    assert direction_of("Memcpy DtoD (Device -> Device)") == "unknown"


def _host_sync_text(name_or_path: object) -> str:
    rep = report_of(name_or_path)  # type: ignore[arg-type]
    f = next(f for f in rep.findings if f.category == Category.HOST_SYNC)
    return f.title + "\n" + f.advice


def test_pageable_uploads_are_not_called_read_backs() -> None:
    """host_bound_pageable: the 6 blocking `.to()` copies are `Memcpy HtoD (Pageable ->
    Device)` (59 MB, 4.6 ms); they were called "device-to-host copies to pageable memory"
    with read-back advice (the argmax ids, not the logits)."""
    text = _host_sync_text(sample("host_bound_pageable"))
    assert "host-to-device copies from pageable memory" in text
    assert "device-to-host" not in text
    assert "argmax" not in text and "logits" not in text
    assert "non_blocking=True" in text and "pin_memory" in text


@pytest.mark.slow
@needs_real
def test_param_resnet_pageable_uploads_are_uploads() -> None:
    """param/resnet_kineto: 58 `Memcpy HtoD (Pageable -> Device)` input copies (2,235 MB,
    604.8 ms): the host_sync finding and host_bound's fix name the same direction."""
    text = _host_sync_text(real("resnet_kineto.json.gz"))
    assert "host-to-device copies from pageable memory (2,235 MB" in text
    assert "device-to-host" not in text and "argmax" not in text


def test_machine_condition_offers_no_gain() -> None:
    """power_gemm: the headline says nothing in the program is fixable (power cap at 700 W),
    so the power_throttle finding keeps its 2.08 s (the one ledger) but offers no gain; its
    card said "expected gain: 2.06 s (1.03 s to 2.06 s)"."""
    from tracelens.render import render_html, render_markdown

    rep = report_of(sample("power_gemm"))
    f = next(f for f in rep.findings if f.category == Category.POWER_THROTTLE)
    assert f.time_us > 1e6 and f.share > 0.1
    assert f.expected_gain_us == f.expected_gain_low_us == f.expected_gain_high_us == 0.0
    assert f.prediction is not None and f.prediction.gain_us == 0.0
    assert f.prediction.predicted_step_us == f.prediction.step_us
    assert f.gain_note.startswith("none: the clocks are capped by the machine")
    md = render_markdown(rep)
    card = md[md.index("Clock throttling: Clocks throttled") :]
    assert "**expected gain:** none: the clocks are capped by the machine" in card
    assert "2.06 s" not in card.split("What to change")[0]
    assert "expected gain <b>none</b>" in render_html(rep)


def test_a_sleep_is_named_not_counted_as_launch_or_loading_work() -> None:
    """light_idle: every 50.3 ms gap is the program's own `time.sleep(0.05)` (main(),
    light_idle.py:30), which was "Python code in main()" with DataLoader-workers advice,
    and "2615.9 µs of host time per kernel" in the launch finding (the 1.0 s launch-bound
    region over its 383 kernels, sleeps included)."""
    rep = report_of(sample("light_idle"))
    hb = next(f for f in rep.findings if f.category == Category.HOST_BOUND)
    assert "time.sleep() in main() (workloads/light_idle.py:30)" in hb.title
    assert hb.sites[0].description == "time.sleep() in main()" and hb.sites[0].count >= 19
    asleep = next(m.value for m in hb.evidence if m.id == "sleep_us")
    assert isinstance(asleep, float) and asleep > 0.9 * hb.time_us
    assert hb.advice.startswith("The host sleeps")
    assert "time.sleep() in main() (workloads/light_idle.py:30)" in hb.advice
    assert "DataLoader" not in hb.advice and "vectorise" not in hb.advice
    assert "time.sleep()" in rep.summary.headline
    launch = next(f for f in rep.findings if f.category == Category.LAUNCH_OVERHEAD)
    per_kernel = next(m.value for m in launch.evidence if m.id == "region_host_per_kernel_us")
    assert isinstance(per_kernel, float) and 10 < per_kernel < 100  # 36.6 µs, not 2615.9
    assert "2615.9" not in launch.title
