"""What every analyzer receives: the trace model and the derived layer (the window, the
time ledger), each computed once."""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property

from tracelens.derive.ledger import Ledger, compute_ledger
from tracelens.derive.window import Window, find_window
from tracelens.model.trace import TraceModel


@dataclass
class AnalysisContext:
    model: TraceModel
    #: `--window START:END` (seconds from the trace's start) or `--steps N-M` from the user.
    user_window: tuple[float, float] | None = None
    user_steps: tuple[int, int] | None = None

    @property
    def device(self) -> int | None:
        """The GPU the report is about: the busiest one."""
        active = self.model.meta.active_devices
        return int(active[0]) if active else None

    @cached_property
    def window(self) -> Window:
        model = self.model
        if len(model.steps) == 1 and _whole_run_capture(model) and self.user_window is None and not self.user_steps:
            # tracelens capture of a script without step marks wraps the whole run in one
            # ProfilerStep: that is no loop. Look for the iterations inside it, and keep
            # the step only when none repeat.
            inner = find_window(replace(model, steps=model.steps.iloc[0:0]), self.device)
            if inner.source == "detected":
                return inner
        return find_window(model, self.device, user_window=self.user_window, user_steps=self.user_steps)

    @cached_property
    def ledger(self) -> Ledger:
        from tracelens.analyzers.roofline import for_context

        roof = for_context(self)
        bounds = {k.name: k.bound for k in roof.kernels}
        return compute_ledger(self.model, self.window, lambda name: bounds.get(name, "unknown"), roof.latency_rows)

    @property
    def window_us(self) -> float:
        """The analysed time findings are measured against (the primary GPU's window)."""
        dev = self.ledger.primary
        if dev is not None and dev.window_us > 0:
            return dev.window_us
        return max(self.window.end_us - self.window.start_us, 1.0)

    @property
    def n_steps(self) -> int:
        return self.ledger.n_steps

    def share(self, time_us: float) -> float:
        return float(time_us) / self.window_us if self.window_us > 0 else 0.0


def _whole_run_capture(model: TraceModel) -> bool:
    """Whether `tracelens capture` recorded this trace with no step marks from the script."""
    meta = str(model.meta.metadata.get("tracelens", ""))
    return "'steps_marked': 0" in meta or '"steps_marked": 0' in meta
