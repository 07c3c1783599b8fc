"""What every analyzer receives: the trace model and the shared GPU time accounting."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from tracelens.analyzers.gpu_time import GpuTime, compute_gpu_time
from tracelens.model.trace import TraceModel


@dataclass
class AnalysisContext:
    model: TraceModel

    @cached_property
    def gpu_time(self) -> GpuTime:
        return compute_gpu_time(self.model)

    @property
    def window_us(self) -> float:
        """The profiled time findings are measured against (the primary GPU's window)."""
        dev = self.gpu_time.primary
        if dev is not None and dev.window_us > 0:
            return dev.window_us
        return max(self.model.span_us, 1.0)

    def share(self, time_us: float) -> float:
        return float(time_us) / self.window_us if self.window_us > 0 else 0.0


def fmt_us(us: float) -> str:
    """Human duration for titles: 12 µs, 3.4 ms, 1.23 s."""
    us = float(us)
    if abs(us) >= 1e6:
        return f"{us / 1e6:.2f} s"
    if abs(us) >= 1e3:
        return f"{us / 1e3:.1f} ms"
    return f"{us:.0f} µs"
