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
