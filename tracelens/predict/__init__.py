"""Every finding's expected gain from the replay (issue 25): the window's dependency graph
(derive/graph.py) replayed with the transform of the finding's first fix
(derive/transforms/), against the graph replayed as measured. One place attaches the
gains, their ranges and the predicted step to the findings, before ranking.

This module sees the findings and the analyzers' own tables (which syncs, which chains,
which kernels), turns them into the transforms' plain targets (trace rows, intervals,
factors), and keeps the transforms free of analyzer code. A finding without a transform
keeps its analyzer's rule-of-thumb estimate, marked `basis: estimate`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from tracelens.derive.context import AnalysisContext
from tracelens.derive.graph import GPU
from tracelens.derive.replay import Edit, combine, replay
from tracelens.derive.transforms import VARIANTS, Variant, merged
from tracelens.derive.transforms import loader as t_loader
from tracelens.derive.transforms import profiler as t_profiler
from tracelens.domain import PerUnit, per_unit
from tracelens.model.trace import name_matches
from tracelens.predict.blocking import can_block
from tracelens.predict.gpu_plans import (
    fusion_plan,
    kernel_factor_plan,
    misaligned_factors,
    roof_factors,
    sdpa_plan,
    site_factors,
)
from tracelens.predict.host_plans import (
    allocation_plan,
    comm_plan,
    compile_plan,
    estimate_part,
    graph_plan,
    host_bound_plan,
    shape_plan,
    sync_plan,
)
from tracelens.predict.targets import (
    Plan,
    alloc_rows,
    loader_intervals,
    pageable_uploads,
    user_syncs,
    worker_loader_intervals,
)
from tracelens.report.enums import Category
from tracelens.report.findings import Finding, Prediction


@dataclass(frozen=True)
class Outcome:
    """The replayed window with a set of fixes applied, per variant (µs over the window)."""

    span_us: dict[Variant, float]
    baseline_us: float
    n_steps: int  # the window's steps
    replayed_steps: int  # the steps the replay covered (derive: AnalysisContext.replay_span)

    #: The same without the profiler's own host cost (nominal; None where the profiler
    #: cost the host little: derive/profiler_cost.py), and its unfixed baseline.
    unprofiled_span_us: float | None = None
    unprofiled_baseline_us: float = 0.0

    def gain(self, v: Variant) -> float:
        """The fix's gain over the whole window (the replayed steps' gain per step, times
        the window's steps)."""
        return (self.baseline_us - self.span_us[v]) * self.n_steps / max(self.replayed_steps, 1)

    #: The step after the fix is at least the window's GPU work a step, scaled by what the
    #: fixes do to the replayed steps' GPU work (whole replays too: train_step's launch fix
    #: put its step 1 ms under its kernels' 17.5 ms a step). PARAM's resnet_kineto: its 10 middle steps took
    #: 395 ms against the window's 334 ms mean, and their gain scaled to the window put the
    #: step at 97 ms, below the GPU work a step that the DataLoader fix keeps.
    gpu_floor_us: float = 0.0

    def unprofiled_gain(self) -> float | None:
        """The fix's gain over the window as it runs without the profiler (None: not estimated)."""
        if self.unprofiled_span_us is None:
            return None
        return (self.unprofiled_baseline_us - self.unprofiled_span_us) * self.n_steps / max(self.replayed_steps, 1)


def plan_for(ctx: AnalysisContext, f: Finding, present: set[Category]) -> Plan | None:
    c = f.category
    if c == Category.HOST_SYNC:
        return sync_plan(ctx)
    if c == Category.LAUNCH_OVERHEAD:
        return graph_plan(ctx, present)
    if c == Category.MEMORY_BOUND:
        at_roof = roof_factors(ctx, "memory")
        text = "memory-bound kernels at the bandwidth this GPU sustains"
        return fusion_plan(ctx) or kernel_factor_plan(ctx, "memory_at_roof", text, at_roof, (0.5, 1.0))
    if c == Category.EAGER_ATTENTION:
        return sdpa_plan(ctx)
    if c == Category.MISALIGNED_MATMUL:
        return kernel_factor_plan(
            ctx, "aligned_matmul", "misaligned matmuls at the rate of an aligned peer in the trace, else at 95% of the "
            "GPU's sustained matmul rate", misaligned_factors(ctx),
        )  # fmt: skip
    if c == Category.COMPUTE_BOUND:
        fp32 = next((m.value for m in f.evidence if m.label == "fp32 matmul time"), 0.0)
        if isinstance(fp32, (int, float)) and fp32 > 0:
            return None  # its first fix is TF32 for the fp32 matmuls: no transform, the estimate stays
        text = "compute-bound kernels at the rate this GPU sustains"
        return kernel_factor_plan(ctx, "compute_at_roof", text, roof_factors(ctx, "compute"), (0.5, 1.0))
    if c in (Category.WAVE_QUANTIZATION, Category.POWER_THROTTLE):
        fix = "full_waves" if c == Category.WAVE_QUANTIZATION else "full_clocks"
        return kernel_factor_plan(
            ctx, fix, "the listed kernels at the finding's estimate", site_factors(ctx, f), (0.5, 1.0)
        )
    if c == Category.ALLOCATION:
        return allocation_plan(ctx)
    if c == Category.SHAPE_DYNAMISM:
        return shape_plan(ctx)
    if c == Category.COMPILATION:
        return compile_plan(ctx)
    if c == Category.HOST_BOUND:
        return host_bound_plan(ctx, f, present)
    if c == Category.COMMUNICATION:
        return comm_plan(ctx, f)
    return None


def signature(ctx: AnalysisContext, fix: str) -> float | None:
    """How much of what the fix removes a trace still holds, per step (None: the fix has
    no such count): kernel launch calls not in a CUDA graph, pageable uploads, user syncs,
    batches built on the training thread, allocator calls. `tracelens diff` takes a fix as
    applied only where this fell by half."""
    n = max(ctx.n_steps, 1)
    host = ctx.model.host
    if fix == "cuda_graph":
        # The window's kernels that a launch of their own started (by the GPU's times: the
        # host may be ahead of the window).
        dev = ctx.ledger.primary
        k = ctx.model.kernels()
        if dev is not None:
            k = k[(k["ts"] >= dev.window_start) & (k["ts"] < dev.window_end)]
        launch = k["launch"].to_numpy()
        by_graph = np.zeros(len(k), dtype=bool)
        ok = launch >= 0
        if ok.any():
            graph_call = name_matches(host["name"], lambda x: "GraphLaunch" in x)
            by_graph[ok] = graph_call[launch[ok]]
        return float((~by_graph).sum()) / n
    if fix == "pinned_async_copy":
        return len(pageable_uploads(ctx)[0]) / n
    if fix == "remove_host_syncs":
        return len(user_syncs(ctx)[0]) / n
    if fix == "dataloader_workers":
        return len(loader_intervals(ctx)) / n
    if fix == "dataloader_keeps_up":
        # The training thread's wait in the workers' __next__ beyond receiving a batch, µs.
        iv = worker_loader_intervals(ctx)
        if not len(iv):
            return 0.0
        d = iv[:, 1] - iv[:, 0]
        return float((d - float(np.percentile(d, t_loader.READY_PERCENTILE))).clip(0).sum()) / n
    if fix == "remove_allocator_calls":
        from tracelens.analyzers.allocation import cat_growth

        return (len(alloc_rows(ctx)) + sum(g.calls for g in cat_growth(ctx))) / n
    return None


#: Fixes from the most specific to the most general: in a joint prediction a node belongs
#: to the first fix that changes it (derive/replay.py, combine).
FIX_ORDER = (
    "sdpa", "aligned_matmul", "static_shapes", "remove_allocator_calls", "remove_host_syncs", "pinned_async_copy",
    "dataloader_workers", "dataloader_keeps_up", "no_recompiles", "nccl_backend", "cuda_graph", "fuse_chains",
    "memory_at_roof", "compute_at_roof", "full_waves", "full_clocks", "overlap_collectives",
)  # fmt: skip


def outcome(ctx: AnalysisContext, plans: Sequence[Plan]) -> Outcome | None:
    """The window replayed with all `plans` applied, per variant."""
    g = ctx.graph
    if g is None:
        return None
    rank_of = {f: i for i, f in enumerate(FIX_ORDER)}
    plans = sorted(plans, key=lambda p: rank_of.get(p.fix, len(FIX_ORDER)))
    base = ctx.replayed
    spans = {}
    unprofiled = None
    gpu_floor = 0.0
    cost = ctx.profiler_cost
    for v in VARIANTS:
        edits = []
        for p in plans:
            edit = Edit.of(g)
            p.apply(edit, v)
            edits.append(edit)
        both = combine(g, edits)
        sched = replay(g, both)
        spans[v] = sched.steady_span_us
        dev = ctx.ledger.primary
        if v == Variant.NOMINAL and dev is not None and ctx.replay_span[3] > 0:
            gpu = g.kind == GPU
            after = merged(np.column_stack([sched.start[gpu], sched.end[gpu]]))
            before = merged(np.column_stack([g.ts[gpu], g.end[gpu]]))
            b_after = float((after[:, 1] - after[:, 0]).sum()) if len(after) else 0.0
            b_before = float((before[:, 1] - before[:, 0]).sum()) if len(before) else 0.0
            if b_before > 0:
                gpu_floor = dev.busy_us / max(ctx.n_steps, 1) * min(b_after / b_before, 1.0)
        if v == Variant.NOMINAL and cost is not None and cost.us_per_step > 0:
            t_profiler.apply(g, both, cost)
            unprofiled = replay(g, both).steady_span_us
    return Outcome(spans, base, ctx.n_steps, ctx.replay_span[3], unprofiled, ctx.unprofiled, gpu_floor)


#: A replayed gain this many times the finding's own (ledger) time says where the rest
#: comes from: the fix also removes time the ledger gives other causes.
BEYOND_OWN_TIME = 1.5
#: Where a fix's gain beyond its finding's own time comes from, by fix.
BEYOND_WHY = {
    "cuda_graph": "the graph also removes the host's work between the launches (Python, dispatch), which the "
    "ledger counts as host-bound idle",
    "remove_host_syncs": "without the waits the host's work overlaps the GPU's instead of following it, time the "
    "ledger counts as host-bound and launch-overhead idle",
    "fuse_chains": "the chain's other ops are no longer dispatched on the host either",
    "sdpa": "the pattern's other ops are no longer dispatched on the host either",
    "remove_allocator_calls": "the allocator's calls also synchronised the device; without them the host's work "
    "overlaps the GPU's, time the ledger counts as host-bound idle",
}


def gain_ceiling(ctx: AnalysisContext, fix: str, f: Finding) -> float:
    """The most a fix of `f` may be credited with over the window: its finding's own time.

    The one-ledger contract (tests/test_ledger.py): no microsecond is promised by two
    findings. The replay may say a fix removes more (a graph also removes host work
    between launches), but that time belongs to another cause with its own finding and
    fix: on HTA's rank0.json the graph transform "gained" 740 ms for 3.6 ms of launch gaps
    (the 730 ms of queued-work idle queued_idle owns), on worker0.pt (num_workers=0) 229 ms
    for 69 ms (its DataLoader's 192 ms). The gain note still says where the replay's
    extra comes from (beyond_own_time)."""
    del ctx, fix
    return max(f.time_us, 0.0)


def beyond_own_time(fix: str, gain_us: float, time_us: float, unit: PerUnit) -> str:
    """Why a replayed gain exceeds its finding's own time, where it does (said in the
    report's unit, as the gain beside it)."""
    if gain_us <= BEYOND_OWN_TIME * max(time_us, 0.0):
        return ""
    why = BEYOND_WHY.get(fix, "the replayed step also loses time the ledger gives other causes")
    return f"; more than its own {per_unit(time_us, unit)}: {why}"


def attach(ctx: AnalysisContext, findings: list[Finding]) -> list[Finding]:
    """The findings with their gains from the replay (or their estimate, marked so)."""
    # A plan waits only on findings that can block it (predict/blocking.py): eager_trace's
    # 2 syncs for 768 kernels and capture_compile's "nothing to change" compilation do not.
    present = can_block(ctx, findings)
    step = ctx.window_us / max(ctx.n_steps, 1)
    plans: dict[Category, Plan] = {}
    for f in findings:
        try:
            p = plan_for(ctx, f, present) if ctx.graph is not None else None
        except (ValueError, IndexError, KeyError):  # a target the trace cannot resolve: keep the estimate
            p = None
        if p is not None:
            plans[f.category] = p
    out = []
    # Each set of plans replayed once: a blocker's own outcome is also its blocked fix's
    # `before` (capture_generate: static shapes, before the CUDA graph).
    replayed: dict[tuple[int, ...], Outcome | None] = {}

    def outcome_of(ps: list[Plan]) -> Outcome | None:
        key = tuple(map(id, ps))
        if key not in replayed:
            replayed[key] = outcome(ctx, ps)
        return replayed[key]

    for f in findings:
        p = plans.get(f.category)
        res = None
        if p is not None:
            first = [plans[b] for b in p.blocked_by if b in plans]
            res = outcome_of([*first, p])
            # A blocked fix gains what it adds once its blockers are fixed (their own gain
            # is theirs: issue 34 §4); the predicted step is for all of them together.
            before = outcome_of(first) if first and res is not None else None
        if p is None or res is None:
            # The analyzer's estimate keeps to the finding's own time too (the one-ledger contract).
            f = replace(f, expected_gain_us=min(f.expected_gain_us, max(f.time_us, 0.0)))
            pred = Prediction(
                fix="estimate", basis="estimate", model=f.gain_note, step_us=step,
                predicted_step_us=max(step - f.expected_gain_us / max(ctx.n_steps, 1), 0.0),
                gain_us=f.expected_gain_us / max(ctx.n_steps, 1), gain_low_us=f.expected_gain_us / max(ctx.n_steps, 1),
                gain_high_us=f.expected_gain_us / max(ctx.n_steps, 1), part=estimate_part(f),
            )  # fmt: skip
            out.append(
                replace(
                    f,
                    expected_gain_low_us=f.expected_gain_us,
                    expected_gain_high_us=f.expected_gain_us,
                    prediction=pred,
                )
            )
            continue
        n = max(ctx.n_steps, 1)
        joint_gain = max(res.gain(Variant.NOMINAL), 0.0)

        def gain(v: Variant, res: Outcome = res, before: Outcome | None = before) -> float:
            return res.gain(v) - (before.gain(v) if before is not None else 0.0)

        # The prediction is the replay's (the step after the fix, all of what it removes);
        # the finding's gain keeps to its own time (gain_ceiling: the one ledger).
        gains = sorted(max(gain(v), 0.0) for v in VARIANTS)
        nominal = min(max(gain(Variant.NOMINAL), gains[0]), gains[-1])
        ceiling = gain_ceiling(ctx, p.fix, f)
        u_joint, u_gain = res.unprofiled_gain(), None
        if u_joint is not None:
            u_before = before.unprofiled_gain() if before is not None else 0.0
            u_gain = max(u_joint - (u_before or 0.0), 0.0)
        u_step = step - (ctx.replayed - ctx.unprofiled) / max(ctx.replay_span[3], 1) if u_gain is not None else 0.0
        dev = ctx.ledger.primary
        if u_gain is not None and dev is not None:
            # The step without the profiler keeps the GPU's own work a step (collectives
            # aside: without the profiler their wait for peers may shrink): train_step's
            # replayed steps put it at 16.92 ms for 17.46-17.59 ms of kernels every step.
            u_step = max(u_step, min((dev.busy_us - dev.comm_us) / n, step))
        # Without the profiler the step after the fix keeps the GPU work the fix keeps too
        # (the profiled prediction's floor): PARAM's resnet_kineto said 96.3 ms after the
        # DataLoader fix for 157 ms of GPU work a step, "saving" 234 ms of a 176 ms finding.
        u_floor = min(res.gpu_floor_us, max(u_step, 0.0))
        u_room = max(u_step - u_floor, 0.0) * n
        pred = Prediction(
            fix=p.fix,
            basis="replay",
            model=p.model,
            step_us=step,
            predicted_step_us=max(step - max(joint_gain, nominal) / n, min(res.gpu_floor_us, step), 0.0),
            gain_us=nominal / n,
            gain_low_us=gains[0] / n,
            gain_high_us=gains[-1] / n,
            blocked_by=",".join(b.value for b in p.blocked_by),
            part=p.part,
            unprofiled_step_us=max(u_step, 0.0),
            unprofiled_predicted_step_us=max(u_step - min(max(u_joint or 0.0, u_gain or 0.0), u_room) / n, 0.0),
            unprofiled_gain_us=min(u_gain or 0.0, u_room) / n,
        )
        out.append(
            replace(
                f,
                expected_gain_us=min(nominal, ceiling),
                expected_gain_low_us=min(gains[0], ceiling),
                expected_gain_high_us=min(gains[-1], ceiling),
                gain_note=f"replayed: {p.model}" + beyond_own_time(p.fix, nominal, f.time_us, ctx.per_unit),
                prediction=pred,
            )
        )
    return out


def joint(ctx: AnalysisContext, findings: Sequence[Finding]) -> Outcome | None:
    """The window replayed with the first fixes of all `findings` applied together."""
    present = {f.category for f in findings}
    plans = []
    for f in findings:
        p = plan_for(ctx, f, present) if ctx.graph is not None else None
        if p is not None:
            plans.append(p)
    return outcome(ctx, plans) if plans else None
