"""The report of `tracelens diff`: the step-time change of two traces split by ledger
cause, the kernels, ops, syncs and counts that moved, and the verdict (see README.md,
"Diff"). Made by tracelens.diff; encoded as-is as its JSON."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tracelens.report.enums import Category, Cause, WindowSource
from tracelens.report.trace_report import TraceInfo

DIFF_SCHEMA_VERSION = 1
#: What a change row compares: a kernel, a top-level op (the GPU time of the kernels it
#: launched), a host sync site, or host work the GPU waited for.
ChangeKind = Literal["kernel", "op", "sync", "host"]
ChangeStatus = Literal["new", "removed", "faster", "slower", "same"]


@dataclass(frozen=True)
class CauseChange:
    cause: Cause
    before_us: float  # per step
    after_us: float
    change_us: float  # after minus before
    #: The step-to-step noise band of this cause's change (two standard errors of the
    #: per-step ledgers' difference; 0 when either side has fewer than two steps).
    noise_us: float = 0.0


@dataclass(frozen=True)
class Change:
    kind: ChangeKind
    name: str
    source: str
    before_us: float  # per step
    after_us: float
    before_count: float  # per step
    after_count: float
    status: ChangeStatus


@dataclass(frozen=True)
class Counter:
    label: str
    before: float
    after: float
    unit: Literal["count", "per_s", "us", "share"]


@dataclass(frozen=True)
class Verdict:
    before_step_us: float
    after_step_us: float
    change_us: float  # after minus before, mean per step; negative is faster (the causes add up to it)
    change_share: float  # of the before step
    median_change_us: float  # after minus before, median step (robust to one slow step)
    noise_us: float  # the step-to-step noise band of the difference (0 when unknown)
    within_noise: bool
    main_cause: Cause | None
    before_primary: Category | None
    after_primary: Category | None
    primary_gone: bool
    text: str
    #: The step the before-report predicted for the fixes the after-trace shows applied
    #: (tracelens/predict/score.py), its range, and its error against the after's
    #: step: (predicted - measured) / measured.
    predicted_step_us: float = 0.0
    predicted_step_low_us: float = 0.0
    predicted_step_high_us: float = 0.0
    prediction_error: float = 0.0
    #: "single" (one fix applied), "joint" (several, replayed together), "" (none applied)
    prediction_basis: Literal["single", "joint", ""] = ""
    prediction_text: str = ""
    #: The after-step predicted without torch.profiler's own host cost (0: not estimated):
    #: for a check with CUDA events outside the profiler.
    predicted_unprofiled_step_us: float = 0.0


@dataclass(frozen=True)
class PredictionCheck:
    """One before-finding's prediction against the after-trace (per step, µs; negative is faster)."""

    category: Category
    fix: str  # the transform, or "estimate"
    basis: Literal["replay", "estimate"]
    predicted_us: float
    predicted_low_us: float
    predicted_high_us: float
    measured_us: float
    measured_of: Literal["step", "finding"]  # the step's change, or the finding's own time's
    error: float  # (predicted - measured) / |measured|; 0 when nothing was measured


@dataclass(frozen=True)
class Side:
    trace: TraceInfo
    window_source: WindowSource
    window_reason: str
    steps: int
    step_us: float
    step_spread_us: float  # standard deviation of the steps' spans
    primary: Category | None
    headline: str


@dataclass(frozen=True)
class DiffReport:
    schema_version: int
    tool: str
    tool_version: str
    generated_at: str
    before: Side
    after: Side
    notes: tuple[str, ...]  # what differs besides the code: GPU, versions, capture options
    verdict: Verdict
    causes: tuple[CauseChange, ...]
    changes: tuple[Change, ...]
    counters: tuple[Counter, ...]
    #: False when the traces do not compare like for like (GPU activity on one side only,
    #: different programs: tracelens/derive/compare.py); the reasons are `not_comparable`.
    comparable: bool = True
    not_comparable: tuple[str, ...] = ()
    predictions: tuple[PredictionCheck, ...] = ()
