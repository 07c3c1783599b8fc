"""Which findings can block another's fix (issue 24 §2, the independent reading's first
systematic problem): a finding blocks only when it owns time and has a fix, and a CUDA
graph waits on the syncs only when they fall inside the step it would capture and cut it
into pieces too short for a graph of each to pay. One rule for the verdict's blocker
(ranking.blockers) and the replay's (predict.attach: a blocked plan is replayed together
with its blockers' plans)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tracelens.analyzers.host_sync import GRAPH_ENDING_CALLS
from tracelens.derive.context import AnalysisContext
from tracelens.report.enums import Category
from tracelens.report.findings import Finding

#: Syncs block only when they cut the GPU work into short pieces: at most this many GPU
#: activities per sync on average (host_sync_mask: ~8; dyn_graph_break's x[mask]: ~26). A
#: generate loop's one stopping-criteria check per token (~110 kernels of a 4-layer Llama
#: between them) leaves the forward to capture whole, and so does a harness's end-of-step
#: check (Qwen: ~1,500 kernels to 1).
MAX_ACTIVITIES_PER_BLOCKING_SYNC = 64
#: The words a finding's advice opens with when it has nothing to fix (compilation:
#: "Nothing to change here: the compiled step runs without recompiling").
NOTHING_TO_CHANGE = "nothing to change"


@dataclass(frozen=True)
class SyncCut:
    """The window's graph-ending syncs (inside its steps: the host_sync finding's sites
    are the window's) and the GPU launches between them."""

    calls: int
    per_sync: float  # GPU activities per sync, on average (inf: none)
    every_step: bool  # at least one a step, and too few launches between them for a graph to pay


def sync_cut(ctx: AnalysisContext, sync: Finding | None) -> SyncCut:
    steps = max(ctx.n_steps, 1)
    calls = int(next((m.value for m in sync.evidence if m.id == GRAPH_ENDING_CALLS), 0)) if sync is not None else 0
    activities = ctx.ledger.primary.n_activities if ctx.ledger.primary is not None else 0
    per_sync = activities / calls if calls else float("inf")
    # A CUDA graph of each piece between syncs pays when the pieces hold enough launches
    # (verdict_rf_steps: one .item() a step, ~98 launches between syncs, is no blocker);
    # host_sync_mask's ~9 launches between syncs are too few.
    every = sync is not None and calls >= steps and per_sync <= MAX_ACTIVITIES_PER_BLOCKING_SYNC
    return SyncCut(calls, per_sync, every)


def has_fix(f: Finding) -> bool:
    """The finding owns time and its advice changes something."""
    return f.time_us > 0 and not f.advice.strip().lower().startswith(NOTHING_TO_CHANGE)


def can_block(ctx: AnalysisContext, findings: Sequence[Finding]) -> set[Category]:
    """The top-level categories whose fix may come before another's: those with a fix,
    and host_sync only where its syncs cut the step (sync_cut)."""
    out = {f.category for f in findings if f.parent is None and has_fix(f)}
    sync = next((f for f in findings if f.parent is None and f.category == Category.HOST_SYNC), None)
    if Category.HOST_SYNC in out and not sync_cut(ctx, sync).every_step:
        out.discard(Category.HOST_SYNC)
    return out
