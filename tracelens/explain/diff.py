"""The diff's words: its verdict, why two traces do not compare, the caveats and the
environment notes, and the counters' labels, from the facts tracelens/diff.py and
tracelens/derive/compare.py find."""

from __future__ import annotations

from dataclasses import dataclass

from tracelens.derive.compare import (
    Blocking,
    Caveat,
    DifferentPrograms,
    GpuOnOneSide,
    LittleInCommon,
    Overlap,
    StepsMarkedOnOneSide,
    StepsStructuredDifferently,
)
from tracelens.domain import category_label, cut_name, fmt_us, short_kernel
from tracelens.report import TraceInfo
from tracelens.report.diff_report import Change
from tracelens.report.enums import WindowSource

#: Each counter's label, in the order the diff lists them.
COUNTER_LABELS = {
    "activities": "GPU activities per step",
    "syncs": "blocking syncs per step",
    "alloc_calls": "allocator calls per step",
    "launch_calls": "kernel launch calls per step",
    "graph_launches": "CUDA graph launches per step",
    "busy": "GPU busy",
}

#: The ledger causes as the verdict names them.
CAUSE_WORDS = {
    "gpu_busy_compute": "compute-bound kernel time",
    "gpu_busy_memory": "memory-bound kernel time",
    "gpu_busy_latency": "latency-bound kernel time",
    "gpu_busy_unknown": "kernel time not classified",
    "gpu_busy_copy": "copy time",
    "communication": "communication",
    "host_sync": "GPU idle after host syncs",
    "allocation": "allocator idle",
    "compilation": "compile idle",
    "profiler": "profiler overhead",
    "harness": "benchmark-harness idle (cache flush, warm-up)",
    "startup": "start-up idle (graph capture, first launches)",
    "launch_overhead": "launch-overhead idle",
    "host_bound": "host-bound idle",
    "idle_other": "idle with work queued",
    "unrecorded": "idle the trace does not describe (events removed)",
}


def _overlap(ov: Overlap) -> str:
    k, o, f = ov
    return (
        f"{k:.0%} of their GPU time is in kernels both have, {o:.0%} of their top-level ops (with shapes) are shared"
        + (f", {f:.0%} of their source functions" if f is not None else "")
    )


def blocking_text(b: Blocking) -> str:
    """Why the two traces do not compare (lower case, no full stop: joined by "; ")."""
    if isinstance(b, GpuOnOneSide):
        side = b.without
        other = "before" if side == "after" else "after"
        return (
            f"the {side} trace has no GPU activity and the {other} has {b.gpu_us / 1e3:,.1f} ms: "
            f"the {side} run did not use the GPU (a CPU fallback, a failed capture, CUDA_VISIBLE_DEVICES) or its "
            "trace lost the GPU events (recorded without ProfilerActivity.CUDA)"
        )
    if isinstance(b, DifferentPrograms):
        return f"the two traces look like different programs: {_overlap(b.overlap)}"
    raise TypeError(f"no words for {b!r}")


def caveat_text(c: Caveat) -> str:
    """A note the comparison stands with, as a sentence."""
    if isinstance(c, LittleInCommon):
        return f"The two traces have little in common ({_overlap(c.overlap)}): check that they run the same program."
    if isinstance(c, StepsMarkedOnOneSide):
        return (
            f"Only the {c.marked} trace marks its steps (ProfilerStep): the other's steps were detected, so "
            "per-step numbers compare different units."
        )
    if isinstance(c, StepsStructuredDifferently):
        return (
            f"The steps are structured differently: {c.ops_before:,.0f} top-level ops per step before, "
            f"{c.ops_after:,.0f} after; if the change did not restructure the step on purpose, the windows may not "
            "be the same loop."
        )
    raise TypeError(f"no words for {c!r}")


def not_comparable_text(blocking: list[Blocking], before_step_us: float, after_step_us: float) -> str:
    """The verdict when the traces do not compare: what is wrong, and the step times only
    as numbers (no faster, slower or "bottleneck gone")."""
    why = "; ".join(blocking_text(b) for b in blocking)
    return (
        f"Not like for like: {why[0].upper() + why[1:]}. The per-step numbers below ({fmt_us(before_step_us)} "
        f"before, {fmt_us(after_step_us)} after) do not measure the change."
    )


def environment_notes(
    tb: TraceInfo, ta: TraceInfo, sources: tuple[WindowSource, WindowSource], steps: tuple[int, int]
) -> tuple[str, ...]:
    """What differs between the two captures (GPUs, versions, options, how the windows
    were found, a single step), as notes."""
    notes = []
    if tb.gpu_name != ta.gpu_name:
        notes.append(f"Different GPUs: {tb.gpu_name} before, {ta.gpu_name} after: the comparison is not like for like.")
    for k in sorted(set(tb.versions) | set(ta.versions)):
        vb, va = tb.versions.get(k, ""), ta.versions.get(k, "")
        if vb and va and vb != va:
            notes.append(f"{k} differs: {vb} before, {va} after.")
    for flag, label in ((tb.has_shapes != ta.has_shapes, "record_shapes"),
                        (tb.has_python_stacks != ta.has_python_stacks, "with_stack")):  # fmt: skip
        if flag:
            notes.append(f"Captured with different options ({label}): profiler overhead differs between the two.")
    if sources[0] != sources[1]:
        notes.append(
            f"The windows were found differently ({sources[0]} before, {sources[1]} after): "
            "compare per-step numbers with care."
        )
    if 1 in steps:
        notes.append("One side has a single step: the step-to-step noise cannot be measured.")
    return tuple(notes)


@dataclass(frozen=True)
class VerdictFacts:
    """What the diff's verdict sentence says, as numbers (per step, µs)."""

    before_step_us: float
    after_step_us: float
    change_us: float
    noise_us: float
    within_noise: bool
    median_change_us: float
    steps: tuple[int, int]  # before, after
    main_cause: str | None  # the ledger cause that moved most the way the step did
    before_primary: str | None
    primary_gone: bool
    launch_calls: tuple[float, float]  # kernel launch calls per step, before and after
    graph_launches: tuple[float, float]  # CUDA graph launches per step, before and after
    top_change: Change | None  # the largest change underneath the main cause


def verdict_text(v: VerdictFacts) -> str:
    """The verdict: faster, slower or within noise, by how much, mostly from what, and
    whether the before's primary bottleneck is gone."""
    change, noise = v.change_us, v.noise_us
    if v.within_noise:
        head = (
            f"Within noise: {fmt_us(v.before_step_us)} -> {fmt_us(v.after_step_us)} per step ({fmt_us(change)}, "
            f"the step-to-step noise is ±{fmt_us(noise)})."
        )
    else:
        word = "Faster" if change < 0 else "Slower"
        median = ""
        if v.steps[0] > 2 and v.steps[1] > 2 and abs(v.median_change_us - change) > 0.1 * abs(change):
            median = f"; {fmt_us(abs(v.median_change_us))} between the median steps"
        # "(82%)" alone read as a speed-up of 82% (issue 27): a speed-up says its factor and the time it saves.
        share = abs(change) / v.before_step_us
        if change < 0 and v.after_step_us > 0:
            how = f"{v.before_step_us / v.after_step_us:.1f}x faster, {share:.0%} less time"
        else:
            how = f"{share:.0%} {'less' if change < 0 else 'more'} time"
        head = (
            f"{word} by {fmt_us(abs(change))} per step on average ({how}): "
            f"{fmt_us(v.before_step_us)} -> {fmt_us(v.after_step_us)}"
            + (f", noise ±{fmt_us(noise)}" if noise > 0 else "")
            + median
            + "."
        )
    parts = [head]
    if v.main_cause == "launch_overhead" and not v.within_noise:
        k, g = v.launch_calls, v.graph_launches
        parts.append(
            f"Mostly launch-overhead idle: kernel launch calls per step {k[0]:,.0f} -> {k[1]:,.0f}"
            + (f", CUDA graph launches {g[0]:,.0f} -> {g[1]:,.0f}" if g[0] or g[1] else "")
            + "."
        )
    elif v.main_cause is not None and not v.within_noise:
        top = v.top_change
        detail = ""
        if top:
            name = short_kernel(top.name, 80) if top.kind == "kernel" else cut_name(top.name, 80)
            detail = (
                f"; the largest change underneath: {top.kind} {name} ({top.status}, "
                f"{fmt_us(top.before_us)} -> {fmt_us(top.after_us)} per step)"
            )
        parts.append(f"Mostly {CAUSE_WORDS.get(v.main_cause, v.main_cause)}{detail}.")
    if v.before_primary is not None:
        parts.append(
            f"The before's primary bottleneck ({category_label(v.before_primary, capital=False)}) is "
            + ("gone." if v.primary_gone else "still there.")
        )
    return " ".join(parts)
