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
    eager_attention  attention written as matmul > softmax > matmul (derive/eager_attention.py)
    matmuls          the matmul table: shapes, kernels, tiles, waves (derive/matmuls.py)
    memory_profile   the [memory] events of the window (derive/memory.py)
    shape_sites      op sites whose shapes change (derive/shapes.py)
    clock_tracks     NVML clock and power samples of the GPU (derive/clocks.py)
    blocking_calls   host calls that wait for the device (derive/ledger.py)
    window_activity  the GPU's kernels, copies and memsets inside the window
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np
import pandas as pd

from tracelens.derive.clocks import Series, clock_tracks
from tracelens.derive.counters import KernelCounters, kernel_counters
from tracelens.derive.eager_attention import EagerAttention, eager_attention, eager_attention_shapes
from tracelens.derive.graph_nodes import GraphNodes, graph_nodes
from tracelens.derive.host_calls import blocking_call_rows
from tracelens.derive.ledger import Ledger, compute_ledger
from tracelens.derive.matmuls import matmul_rows
from tracelens.derive.memory import MemoryProfile, memory_profile
from tracelens.derive.roofline import Roofline, compute_roofline
from tracelens.derive.shapes import ShapeSite, graph_launches, shape_sites
from tracelens.derive.steps import find_step_marks, with_steps
from tracelens.derive.window import Window, find_window
from tracelens.model.trace import TraceModel
from tracelens.report import MatmulRow
from tracelens.report.enums import ReportUnit


@dataclass
class AnalysisContext:
    model: TraceModel
    #: `--window START:END` (seconds from the trace's start) or `--steps N-M` from the user.
    user_window: tuple[float, float] | None = None
    user_steps: tuple[int, int] | None = None

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
        return compute_ledger(self.model, self.window, self.roofline)

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
        return "call" if self.model.step_unit == "call" else "step"

    @property
    def n_steps(self) -> int:
        return self.ledger.n_steps

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
