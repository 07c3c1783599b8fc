"""explain/: every word of the report, written from facts.

The analyzers return findings as facts (tracelens.analyzers.base.Found): each category's
module here writes the finding's title, advice, gain note, evidence labels and site
descriptions from them (`words`), with the one duration, share and bytes formatter
(tracelens.domain). Wording changes here and nowhere else: analysis code holds no
English, and the tests assert facts (the words are pinned by tests/goldens/).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from tracelens.analyzers.base import Found
from tracelens.domain import PerUnit
from tracelens.explain import (
    allocation,
    communication,
    compilation,
    compute_bound,
    eager_attention,
    host_bound,
    host_sync,
    launch_overhead,
    matmuls,
    memory_bound,
    misaligned_matmul,
    power_throttle,
    queued_idle,
    shape_dynamism,
    wave_quantization,
)
from tracelens.explain.base import Words, finding
from tracelens.report.enums import Category
from tracelens.report.findings import Finding

#: A category's writer: its facts, their share of the analysed time, the report's unit
#: (every window total it says is said per unit: tracelens.domain.per_unit).
Writer = Callable[[Any, float, PerUnit], Words]

#: Each category's writer (tests/test_explain.py checks every analyzer has one).
WRITERS: dict[Category, Writer] = {
    Category.HOST_SYNC: host_sync.words,
    Category.HOST_BOUND: host_bound.words,
    Category.COMMUNICATION: communication.words,
    Category.QUEUED_IDLE: queued_idle.words,
    Category.LAUNCH_OVERHEAD: launch_overhead.words,
    Category.EAGER_ATTENTION: eager_attention.words,
    Category.MEMORY_BOUND: memory_bound.words,
    Category.SHAPE_DYNAMISM: shape_dynamism.words,
    Category.COMPILATION: compilation.words,
    Category.ALLOCATION: allocation.words,
    Category.MISALIGNED_MATMUL: misaligned_matmul.words,
    Category.WAVE_QUANTIZATION: wave_quantization.words,
    Category.POWER_THROTTLE: power_throttle.words,
    Category.COMPUTE_BOUND: compute_bound.words,
}


def findings(found: Iterable[Found[Any, Any]], share: Callable[[float], float], unit: PerUnit) -> list[Finding]:
    """The report's findings: each analyzer's facts with their words (`share(time_us)`:
    of the analysed window; `unit`: the report's, that its totals are said in)."""
    out = []
    for f in found:
        fraction = share(f.time_us)
        out.append(finding(f, WRITERS[f.category](f, fraction, unit), fraction))
    return out


__all__ = ["WRITERS", "Words", "findings", "matmuls"]
