"""The profiler turned off: the step as the user sees it without torch.profiler.

Model: every host node of the graph keeps the share of its gap and of its own time that
is not the profiler's recorded events (derive/profiler_cost.py: a fixed cost per Python
frame, torch op and runtime call on its thread); GPU work is unchanged. Applied on top
of a fix's edit, it scales what the fix left, so a fix that removes host work also
removes that work's profiler cost once. LOW takes the per-event costs at
profiler_cost.LOW_SCALE of nominal (the microbenchmark's), HIGH at HIGH_SCALE.

Checked against the CUDA-event step times measured outside the profiler on the H200
pairs of workloads/diff_pairs.py (every side) and on timm, PyG and the Trainer
(workloads/programs/README.md on branch programs): bench/diff_pairs_check.py prints the
unprofiled error beside the profiled one.
"""

from __future__ import annotations

from tracelens.derive.graph import DependencyGraph
from tracelens.derive.profiler_cost import HIGH_SCALE, LOW_SCALE, ProfilerCost
from tracelens.derive.replay import Edit
from tracelens.derive.transforms import Variant


def apply(g: DependencyGraph, edit: Edit, cost: ProfilerCost, variant: Variant = Variant.NOMINAL) -> None:
    assert edit.gap is not None and edit.dur is not None
    scale = {Variant.LOW: LOW_SCALE, Variant.HIGH: HIGH_SCALE}.get(variant, 1.0)
    gap_keep, dur_keep = cost.keep(g, scale)
    edit.gap *= gap_keep
    edit.dur *= dur_keep
