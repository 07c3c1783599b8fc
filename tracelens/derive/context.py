"""The analysis context: the one door to derived data.

Every analyzer, the assembly of the report, the diff and the job read the trace through
an AnalysisContext: the model, and what is derived from it, each a typed cached
property, computed once per context when first asked for (a report that never needs the
matmul table never builds it). Nothing here reads an analyzer; what two analyzers share
is derived here.

    window           the steady-state window (derive/window.py)
    kernel_counters  hardware counters paired with the kernels (derive/counters.py)
    roofline         every kernel's FLOPs, bytes, roof and bound; fusion chains (derive/roofline.py)
    ledger           every µs of the window to one cause (derive/ledger.py)
    down_sampled     the signs that events were removed from the trace (model/sampling.py)
    eager_attention  attention written as matmul > softmax > matmul (derive/eager_attention.py)
    matmuls          the matmul table: shapes, kernels, tiles, waves (derive/matmuls.py)
    memory_profile   the [memory] events of the window (derive/memory.py)
    shape_sites      op sites whose shapes change (derive/shapes.py)
    clock_tracks     NVML clock and power samples of the GPU (derive/clocks.py)
    blocking_calls   host calls that wait for the device (derive/host_calls.py)
    queued_waits     idle with the next work queued, and what it coincides with (derive/queued.py)
    collectives      the logical collective calls, one per collective (derive/collectives.py)
    main_thread      the thread running the training loop (derive/host_time.py)
    thread_time(tid) one thread's host time: ops, data loading, Python (derive/host_time.py)
    window_activity  the GPU's kernels, copies and memsets inside the window
    graph            the window's dependency graph (derive/graph.py), for the predictions
    replayed         the window replayed unmodified (derive/replay.py): every prediction's baseline
    profiler_cost    what torch.profiler's own events cost the graph's host nodes (derive/profiler_cost.py)
    unprofiled       the window replayed without that cost: the step the user sees unprofiled
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property

import numpy as np
import pandas as pd

from tracelens.derive.clocks import Series, clock_tracks
from tracelens.derive.collectives import Collectives, collectives
from tracelens.derive.counters import KernelCounters, kernel_counters
from tracelens.derive.eager_attention import EagerAttention, eager_attention, eager_attention_shapes
from tracelens.derive.graph import DependencyGraph, build_graph, host_end_of, window_nodes
from tracelens.derive.graph_nodes import GraphNodes, graph_nodes
from tracelens.derive.host_calls import blocking_call_rows
from tracelens.derive.host_time import ThreadTime, main_thread, thread_time
from tracelens.derive.ledger import Ledger, compute_ledger
from tracelens.derive.matmuls import matmul_rows
from tracelens.derive.memory import MemoryProfile, memory_profile
from tracelens.derive.profiler_cost import ProfilerCost, profiler_cost
from tracelens.derive.queued import QueuedWaits, queued_waits
from tracelens.derive.replay import Edit, replay
from tracelens.derive.roofline import Roofline, compute_roofline
from tracelens.derive.shapes import ShapeSite, graph_launches, shape_sites
from tracelens.derive.steps import find_step_marks, with_steps
from tracelens.derive.transforms import profiler as t_profiler
from tracelens.derive.window import Window, find_window
from tracelens.domain import PerUnit
from tracelens.model.sampling import DownSampled, down_sampled
from tracelens.model.trace import TraceModel
from tracelens.report import MatmulRow
from tracelens.report.enums import ReportUnit

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
    _thread_times: dict[int, ThreadTime] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # The user's own step marks (record_function ranges, framework steps, optimizer
        # steps) become the model's steps when torch.profiler marked none, so that the
        # window, the ledger, the analyzers and the diff all see one set of steps.
        model = self.model
        if model.steps.empty or (len(model.steps) == 1 and _whole_run_capture(model)):
            bare = replace(model, steps=model.steps.iloc[0:0]) if len(model.steps) else model
            marks = find_step_marks(bare)
            if marks is not None:
                self.model = with_steps(bare, marks)

    @property
    def device(self) -> int | None:
        """The GPU the report is about: the busiest one."""
        active = self.model.meta.active_devices
        return int(active[0]) if active else None

    @cached_property
    def window(self) -> Window:
        model = self.model
        if (
            len(model.steps) == 1
            and model.step_marks == "ProfilerStep"
            and _whole_run_capture(model)
            and self.user_window is None
            and not self.user_steps
        ):
            # tracelens capture of a script without step marks wraps the whole run in one
            # ProfilerStep: that is no loop. Look for the iterations inside it, and keep
            # the step only when none repeat.
            inner = find_window(replace(model, steps=model.steps.iloc[0:0]), self.device)
            if inner.source == "detected":
                return inner
        return find_window(model, self.device, user_window=self.user_window, user_steps=self.user_steps)

    @cached_property
    def kernel_counters(self) -> KernelCounters | None:
        """The trace's hardware counters paired with its kernels (None: it holds none)."""
        return kernel_counters(self.model)

    @cached_property
    def graph_nodes(self) -> GraphNodes:
        """The capture-time nodes (op, shapes, module, source line) of the kernels replayed
        from CUDA graphs (annotations, capture traces beside the trace)."""
        return graph_nodes(self.model)

    @cached_property
    def roofline(self) -> Roofline:
        """The roofline of the device's kernels in the window (hardware counters first,
        the models where none exists). Fusion chains end where steps do: the window's
        detected iterations where the trace has no ProfilerSteps."""
        w = self.window
        iterations = tuple(st.start_us for st in w.steps) if w.source == "detected" else ()
        return compute_roofline(
            self.model, self.device, (w.start_us, w.end_us), iterations, self.kernel_counters, self.graph_nodes
        )

    @cached_property
    def ledger(self) -> Ledger:
        return compute_ledger(self.model, self.window, self.roofline, down_sampled=self.down_sampled is not None)

    @cached_property
    def down_sampled(self) -> DownSampled | None:
        """The signs that events were removed from the trace after the capture (None:
        it reads as complete)."""
        return down_sampled(self.model)

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
        if dev is None or self.down_sampled is not None:
            # A down-sampled trace holds a fraction of the step's kernels and host ops: a
            # replay of what is left is no step of the program (the findings' estimates stay).
            return None
        start, end, host_end, _ = self.replay_span
        return build_graph(self.model, start, end, dev.device, host_end)

    @cached_property
    def replayed(self) -> float:
        """The window replayed as measured, in a loop that runs on (µs): the baseline of
        every prediction (derive/replay.py, Schedule.steady_span_us)."""
        g = self.graph
        return replay(g).steady_span_us if g is not None else self.window_us

    @cached_property
    def profiler_cost(self) -> ProfilerCost | None:
        """What torch.profiler's recorded events cost the graph's host nodes."""
        g = self.graph
        return profiler_cost(self.model, g, self.replay_span[3]) if g is not None else None

    @cached_property
    def unprofiled(self) -> float:
        """The replayed window without the profiler's own host cost (µs over the replayed
        steps, like `replayed`)."""
        g, cost = self.graph, self.profiler_cost
        if g is None or cost is None:
            return self.replayed
        edit = Edit.of(g)
        t_profiler.apply(g, edit, cost)
        return replay(g, edit).steady_span_us

    @property
    def window_us(self) -> float:
        """The analysed time findings are measured against (the primary GPU's window)."""
        dev = self.ledger.primary
        if dev is not None and dev.window_us > 0:
            return dev.window_us
        return max(self.window.end_us - self.window.start_us, 1.0)

    @property
    def unit(self) -> ReportUnit:
        """The report's one unit: "step" for the user's steps (ProfilerStep or their own
        marks), "iteration" for a loop tracelens detected, "window" for neither; per-unit
        numbers everywhere (headline, titles, ledger column) are in it."""
        if not self.ledger.windowed_by_steps:
            return "window"
        if self.window.source == "detected" or (self.window.source == "user" and self.model.steps.empty):
            return "iteration"
        if self.model.step_unit == "sweep":
            return "sweep"
        return "call" if self.model.step_unit == "call" else "step"

    @property
    def n_steps(self) -> int:
        return self.ledger.n_steps

    @property
    def per_unit(self) -> PerUnit:
        """The report's unit with its count: what every window total is said in."""
        return PerUnit(self.n_steps, self.unit)

    def share(self, time_us: float) -> float:
        return float(time_us) / self.window_us if self.window_us > 0 else 0.0

    @cached_property
    def eager_attention(self) -> tuple[EagerAttention, ...]:
        return eager_attention(self.model, self.roofline.peaks, self.roofline.window)

    @cached_property
    def eager_attention_shapes(self) -> frozenset[tuple[int, int, int, int]]:
        """(batch, M, N, K) of the matmuls inside eager attention, both orders of M and N."""
        return eager_attention_shapes(self.eager_attention)

    @cached_property
    def matmuls(self) -> tuple[MatmulRow, ...]:
        return tuple(matmul_rows(self.model))

    @cached_property
    def memory_profile(self) -> MemoryProfile | None:
        return memory_profile(self.model, self.ledger.primary, self.n_steps)

    @cached_property
    def shape_sites(self) -> tuple[ShapeSite, ...]:
        return tuple(shape_sites(self.model, self.ledger.primary, self.window))

    @cached_property
    def graph_launches(self) -> int:
        """CUDA-graph launches on the host inside the GPU's window."""
        return graph_launches(self.model, self.ledger.primary)

    @cached_property
    def clock_tracks(self) -> dict[str, Series]:
        """The NVML tracks of the report's GPU, by quantity ("SM clock (MHz)", ...)."""
        dev = self.ledger.primary
        return clock_tracks(self.model, dev.device) if dev is not None else {}

    @cached_property
    def blocking_calls(self) -> np.ndarray:
        """Host rows of calls that block until the device catches up."""
        return blocking_call_rows(self.model)

    @cached_property
    def queued_waits(self) -> QueuedWaits | None:
        """The primary GPU's idle with its next work already queued, and what it coincides with."""
        return queued_waits(self.model, self.ledger.primary, self.blocking_calls, self.collectives)

    @cached_property
    def collectives(self) -> Collectives:
        """The trace's logical collective calls (one per collective, with its message size)."""
        return collectives(self.model)

    @cached_property
    def main_thread(self) -> int | None:
        """The thread that runs the training loop (None: no torch op on any thread)."""
        return main_thread(self.model)

    def thread_time(self, tid: int) -> ThreadTime:
        """One thread's host-time split (computed once per thread)."""
        got = self._thread_times.get(int(tid))
        if got is None:
            got = self._thread_times[int(tid)] = thread_time(self.model, int(tid))
        return got

    @cached_property
    def window_activity(self) -> pd.DataFrame:
        """The primary GPU's kernels, copies and memsets that overlap the window."""
        dev = self.ledger.primary
        act = self.model.gpu_activity()
        if dev is None:
            return act.iloc[0:0]
        return act[(act["device"] == dev.device) & (act["end"] > dev.window_start) & (act["ts"] < dev.window_end)]


def _whole_run_capture(model: TraceModel) -> bool:
    """Whether `tracelens capture` recorded this trace with no step marks from the script."""
    meta = str(model.meta.metadata.get("tracelens", ""))
    return "'steps_marked': 0" in meta or '"steps_marked": 0' in meta
