"""tracelens: explains why a PyTorch GPU program is slow, from a torch.profiler trace.

The pipeline is visible in the sub-packages, in order:

    capture/   -> writes one Kineto trace (torch.profiler + an NVML sampler)
    model/     -> loads any trace vintage into a typed, columnar TraceModel
    analyzers/ -> each reads the model and returns Findings (data, not strings)
    ranking    -> orders findings by the diagnostic order, picks the primary bottleneck
    render/    -> HTML, Markdown, JSON and terminal views of the finished Report

Capture and report meet only at the trace file.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tracelens.integrations.record import StepRecorder

__version__ = "0.1.0"


def record(*args: Any, **kwargs: Any) -> StepRecorder:
    """Record steps N-M of a hand-written loop and report on them when the block ends:
    `with tracelens.record(steps="5-24") as rec: ... rec.step()` (see
    tracelens.integrations.record; torch is imported when the recording starts)."""
    from tracelens.integrations.record import record as _record

    return _record(*args, **kwargs)
