"""The contract's enumerated values: every field of a report that takes one of a fixed
set of values is typed with one of these (StrEnum or Literal), so the JSON schema lists
the values and mypy checks them where reports are made. Standard library only."""

from __future__ import annotations

from enum import StrEnum
from typing import Literal, get_args


class Category(StrEnum):
    """Finding categories (the JSON contract's ids), in the seed's diagnostic order."""

    HOST_SYNC = "host_sync"
    HOST_BOUND = "host_bound"
    COMMUNICATION = "communication"
    QUEUED_IDLE = "queued_idle"  # GPU idle with its next work already queued (issue 24 §8)
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

#: Causes of the time ledger: every µs of a window is one of them (tracelens.derive.ledger
#: says what each means). In report order: busy first, then idle in diagnostic order.
Cause = Literal[
    "gpu_busy_compute",
    "gpu_busy_memory",
    "gpu_busy_latency",
    "gpu_busy_unknown",
    "gpu_busy_copy",
    "communication",
    "host_sync",
    "allocation",
    "compilation",
    "profiler",
    "harness",
    "startup",
    "launch_overhead",
    "host_bound",
    "idle_other",
    "unrecorded",
]
CAUSES: tuple[Cause, ...] = get_args(Cause)

#: What limits a kernel (the roofline): memory, compute or latency, or unknown where no
#: model covers it and neither its grid nor its length says latency.
Bound = Literal["memory", "compute", "latency", "unknown"]
#: How the analysed window was chosen: the trace's ProfilerSteps, detected iterations,
#: the whole GPU span, or the user's --window/--steps.
WindowSource = Literal["steps", "detected", "whole", "user"]
#: Kinds of start-up time before the window (tracelens.derive.window).
StartupKind = Literal[
    "cuda_init", "lazy_loading", "allocation", "compile", "autotune", "data_creation", "model_building", "other"
]
STARTUP_KINDS: tuple[StartupKind, ...] = get_args(StartupKind)
#: Why the roofline could not model an op's kernels.
UncoveredReason = Literal["no_op", "no_shapes", "no_model", "graph_replay"]
#: A diagnostic question's answer.
QuestionStatus = Literal["yes", "minor", "no", "unknown", "not_measurable", "not_built"]
#: The one unit of a report's per-unit numbers: the user's steps, a detected loop's
#: iterations, one compiled call, or the window when there is neither.
ReportUnit = Literal["step", "iteration", "call", "sweep", "window"]

#: Units with no per-unit figures: the window as a whole ("sweep": a range per
#: configuration of a sweep, matmul_sweep's shapes, where no two calls do the same work).
WHOLE_UNITS = frozenset({"window", "sweep"})
#: What a kernel-table row is.
ActivityKind = Literal["kernel", "memcpy", "memset", "other"]
#: The unit of an evidence value.
Unit = Literal["us", "share", "count", "per_s", "bytes", "bytes_per_s", "number", "text"]
#: The six diagnostic questions, in order (tracelens.ranking.DIAGNOSTIC_ORDER asks them).
QuestionId = Literal["host_waits", "launch", "memory", "shape_dynamism", "allocation", "compute"]
