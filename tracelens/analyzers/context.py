"""What every analyzer receives: the trace model and the derived layer (the window, the
time ledger), each computed once."""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property

from tracelens.derive.graph import DependencyGraph, build_graph, host_end_of, window_nodes
from tracelens.derive.ledger import Ledger, compute_ledger
from tracelens.derive.replay import replay
from tracelens.derive.window import Window, find_window
from tracelens.model.trace import TraceModel

#: The replay's graph stays under this many nodes (derive/replay.py: a transform's replay
#: costs a few numpy passes per round over them, or ~1 µs a node of Python when a path
#: crosses chains often): a longer window is replayed on whole steps from its middle.
REPLAY_MAX_NODES = 12_000
REPLAY_MIN_STEPS = 2


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

    @cached_property
    def replay_span(self) -> tuple[float, float, float, int]:
        """The part of the window the replay covers: (start, end, host end, steps). All of
        it, unless its graph would exceed REPLAY_MAX_NODES: then as many whole steps from
        its middle as fit (at least REPLAY_MIN_STEPS), whose gains per step stand for the
        window's (its steps are the same loop)."""
        dev = self.ledger.primary
        w = self.window
        assert dev is not None
        whole = (dev.window_start, dev.window_end, host_end_of(self.model, w), self.n_steps)
        steps = [s for s in w.steps if s.end_us > s.start_us]
        if len(steps) <= REPLAY_MIN_STEPS:
            return whole
        nodes = window_nodes(self.model, dev.window_start, dev.window_end)
        if nodes <= REPLAY_MAX_NODES:
            return whole
        k = max(REPLAY_MIN_STEPS, int(REPLAY_MAX_NODES / (nodes / len(steps))))
        if k >= len(steps):
            return whole
        i = (len(steps) - k) // 2
        part = steps[i : i + k]
        sub = replace(w, start_us=part[0].start_us, end_us=part[-1].end_us, steps=tuple(part))
        return part[0].start_us, part[-1].end_us, host_end_of(self.model, sub), k

    @cached_property
    def graph(self) -> DependencyGraph | None:
        """The window's dependency graph, for the replay's predictions (issue 25)."""
        dev = self.ledger.primary
        if dev is None:
            return None
        start, end, host_end, _ = self.replay_span
        return build_graph(self.model, start, end, dev.device, host_end)

    @cached_property
    def replayed(self) -> float:
        """The window replayed as measured, in a loop that runs on (µs): the baseline of
        every prediction (derive/replay.py, Schedule.steady_span_us)."""
        g = self.graph
        return replay(g).steady_span_us if g is not None else self.window_us

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
