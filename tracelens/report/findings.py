"""What a finding says, as data: its category, cost, gain, evidence, the places in the
program it comes from and the Python source lines behind them.

Modelled on torch.utils.benchmark's Measurement: plain serializable dataclasses; all
formatting lives in tracelens.render.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from tracelens.report.enums import Category, Severity, Unit


@dataclass(frozen=True)
class PySource:
    """One Python frame: where a finding comes from.

    `line_is_def` is True for 2024+ `python_function` frames, whose line is the line of
    the function's `def` (not of the call inside it); False for 2021-2022 `Call stack`
    frames, whose line is the calling line."""

    file: str
    line: int | None
    function: str
    line_is_def: bool = False
    #: The statement inside the function that made the call, inferred from the source
    #: (None when the file is unreadable, changed since the trace, or nothing matched).
    call_line: int | None = None
    #: That line's text, stripped (for the report's source cells).
    code: str = ""
    #: True when call_line comes from parsing the source, not from the trace.
    line_inferred: bool = False
    #: True when several statements could have made the call; call_line is the first.
    ambiguous: bool = False
    #: Every candidate line when ambiguous (call_line is candidates[0]).
    candidates: tuple[int, ...] = ()

    @property
    def label(self) -> str:
        return f"{self.file}:{self.line}" if self.line is not None else self.file

    @property
    def call_label(self) -> str:
        """file:call_line when the calling statement is known, else `label`."""
        return f"{self.file}:{self.call_line}" if self.call_line is not None else self.label


@dataclass(frozen=True)
class Metric:
    """One piece of evidence: a labelled number (or text) with its unit. `id` names the
    quantity for machines and stays when the label's wording changes."""

    label: str
    value: float | int | str
    unit: Unit = "text"
    id: str = ""
    #: A duration the window's steps share (the report says it per step, issue 27); false
    #: for one that is not a window total: a median, the longest, a time per kernel, or
    #: start-up outside the window.
    total: bool = True


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
    #: The Python call made here, as the trace or its source names it (a host sync's
    #: `x.item()`, `tensor[bool_mask]`); "" where the finding has none or it is unknown.
    call: str = ""


@dataclass(frozen=True)
class Prediction:
    """What the finding's first fix should do to the step: the window's dependency graph
    replayed with the fix's transform (tracelens/derive/transforms/), or, where no
    transform exists, the analyzer's rule-of-thumb estimate. Per step, in the report's
    unit."""

    fix: str  # the transform (remove_host_syncs, cuda_graph, fuse_chains, ...), or "estimate"
    basis: Literal["replay", "estimate"]
    model: str  # what the transform assumes, in one sentence
    step_us: float  # the measured step (the window over its steps)
    predicted_step_us: float  # the step after the fix
    gain_us: float  # step_us - predicted_step_us (never below 0)
    gain_low_us: float  # the range from the model's own uncertainty
    gain_high_us: float
    #: The category whose fix must come first (a CUDA graph cannot capture a loop that
    #: syncs); then the prediction is for both fixes together.
    blocked_by: str = ""
    #: What the gain is of, when it is not all of the finding's time ("the transport part
    #: of the collectives; the rest is waiting for another rank").
    part: str = ""
    #: Without torch.profiler's own host cost (derive/profiler_cost.py; 0 where the trace
    #: recorded no host events): the step now, after the fix, and the fix's gain (µs a step).
    unprofiled_step_us: float = 0.0
    unprofiled_predicted_step_us: float = 0.0
    unprofiled_gain_us: float = 0.0


@dataclass(frozen=True)
class Finding:
    category: Category
    severity: Severity
    title: str
    time_us: float  # time this costs (GPU idle it causes, or GPU time at stake)
    share: float  # time_us over the analysed window
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
    #: ranking.settle, with the reason in words (issue 24 §2).
    blocked_by: Category | None = None
    blocked_reason: str = ""
    #: The range of expected_gain_us (over the window, like it) from the model's own
    #: uncertainty (issue 32); equal to it where the estimate has no range.
    expected_gain_low_us: float = 0.0
    expected_gain_high_us: float = 0.0
    prediction: Prediction | None = None
