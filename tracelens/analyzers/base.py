"""What analyzers return: findings as data, never formatted text.

Modelled on torch.utils.benchmark's Measurement: plain serializable dataclasses; all
formatting lives in tracelens.render.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Literal

from tracelens.model.sources import PySource


class Category(StrEnum):
    """Finding categories (the JSON contract's ids), in the seed's diagnostic order."""

    HOST_SYNC = "host_sync"
    HOST_BOUND = "host_bound"
    COMMUNICATION = "communication"
    LAUNCH_OVERHEAD = "launch_overhead"
    MEMORY_BOUND = "memory_bound"
    EAGER_ATTENTION = "eager_attention"  # attention written as matmul > softmax > matmul (issue 10)
    SHAPE_DYNAMISM = "shape_dynamism"
    COMPILATION = "compilation"  # torch.compile recompiles and graph breaks, CUDA graphs (issue 11)
    ALLOCATION = "allocation"
    COMPUTE_BOUND = "compute_bound"
    MISALIGNED_MATMUL = "misaligned_matmul"
    WAVE_QUANTIZATION = "wave_quantization"
    POWER_THROTTLE = "power_throttle"


class Severity(StrEnum):
    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"
    INFO = "info"

    @property
    def rank(self) -> int:
        return _SEVERITY_RANK[self]


_SEVERITY_RANK = {Severity.HIGH: 3, Severity.MEDIUM: 2, Severity.LOW: 1, Severity.INFO: 0}

#: Severity is the share of profiled time a finding costs. A tenth of the run is the
#: first thing to fix; a few percent is worth a change; under half a percent is noise
#: next to run-to-run variation of a profiled step.
HIGH_SHARE = 0.10
MEDIUM_SHARE = 0.03
LOW_SHARE = 0.005


def severity_for(share: float) -> Severity:
    if share >= HIGH_SHARE:
        return Severity.HIGH
    if share >= MEDIUM_SHARE:
        return Severity.MEDIUM
    if share >= LOW_SHARE:
        return Severity.LOW
    return Severity.INFO


Unit = Literal["us", "share", "count", "per_s", "bytes", "bytes_per_s", "number", "text"]


@dataclass(frozen=True)
class Metric:
    """One piece of evidence: a labelled number (or text) with its unit."""

    label: str
    value: float | int | str
    unit: Unit = "text"


@dataclass(frozen=True)
class Site:
    """One place in the program a finding comes from, with what it costs there."""

    description: str  # what happens here, e.g. "x[mask] (aten::index > aten::nonzero)"
    count: int  # occurrences in the trace
    time_us: float  # the cost attributed to this site (same meaning as Finding.time_us)
    host_us: float = 0.0  # host time spent (e.g. blocked in the sync call)
    ops: tuple[str, ...] = ()  # enclosing aten ops, innermost first
    api: str = ""  # runtime call, e.g. cudaStreamSynchronize
    source: PySource | None = None
    stack: tuple[PySource, ...] = ()  # user frames, innermost first
    kernels: tuple[str, ...] = ()
    steps: tuple[int, ...] = ()
    kind: str = ""  # a finding-specific label, e.g. the sync construct
    advice: str = ""  # what to change here, where it differs by site


@dataclass(frozen=True)
class Finding:
    category: Category
    severity: Severity
    title: str
    time_us: float  # time this costs (GPU idle it causes, or GPU time at stake)
    share: float  # time_us over the profiled window
    advice: str
    expected_gain_us: float  # what the advice should save, at best
    gain_note: str  # how the gain was estimated
    evidence: tuple[Metric, ...] = ()
    sites: tuple[Site, ...] = ()
    sources: tuple[PySource, ...] = ()
    device: int | None = None
    tags: tuple[str, ...] = field(default=())
    #: The category of the finding this one refines (its time is part of the parent's),
    #: or None for a top-level finding; top-level findings never share time.
    parent: Category | None = None
    #: The finding whose fix must come first, because this one's fix cannot apply until
    #: it is made (a CUDA graph cannot capture a step that syncs), or None; set by
    #: ranking.settle, with the reason in words.
    blocked_by: Category | None = None
    blocked_reason: str = ""
