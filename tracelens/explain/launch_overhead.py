"""The words of the launch_overhead finding."""

from __future__ import annotations

from tracelens.analyzers.base import Found, Place
from tracelens.analyzers.launch_overhead import GRAPH_REPLAY_GAP_US, TINY_KERNEL_US, Launcher, LaunchFacts
from tracelens.domain import NO_ENCLOSING_OP, PerUnit, pct, per_unit
from tracelens.explain.base import Words, led_by, top_place, where

LABELS = {
    "launch_gap_us": "launch-gap idle",
    "launch_gaps": "launch gaps",
    "kernels": "kernels in window",
    "median_kernel_us": "median kernel duration",
    "tiny_kernel_share": f"kernels under {TINY_KERNEL_US:.0f} µs",
    "launches_per_s": "kernel launches per second (host)",
    "median_launch_call_us": "median launch call on the host",
    "launch_bound_regions": "launch-bound regions",
    "region_kernels": "kernels in those regions",
    "region_host_per_kernel_us": "host time per kernel in those regions",
    "region_launch_gap_us": "launch idle inside those regions",
    "graph_launches": "CUDA graph launches",
}
#: The one-line fix for the launch storms of these ops (analyzers.launch_overhead.KNOWN_FIX_OPS).
KNOWN_FIXES = {
    "zero_grad": (
        "optimizer.zero_grad() launches one fill kernel per parameter here: call "
        "zero_grad(set_to_none=True) (the default since torch 2.0) and it launches none."
    ),
    "Optimizer.step": (
        "The optimizer step launches kernels per parameter: use foreach=True, or fused=True "
        "where the optimizer supports it (Adam, AdamW, SGD)."
    ),
    "AccumulateGrad": (
        "Gradient accumulation launches one kernel per parameter in backward: fewer, larger "
        "parameters (fused layers) or a compiled backward (torch.compile) cut them."
    ),
}


def _site_first(top: Place[Launcher] | None, unit: PerUnit) -> str:
    """The concrete start (issue 27): the op and source line whose launches leave the most
    idle, with its count and idle; "" where the trace names neither."""
    if top is None:
        return ""
    op = top.facts.op if top.facts.op != NO_ENCLOSING_OP else ""
    at = where(top.source) if top.source is not None else ""
    if not op and not at:
        return ""
    what = f"the kernels {op} launches{f' {at}' if at else ''}" if op else f"the launches {at}"
    return f"Start with {what}: {top.count:,} launch gaps there, {per_unit(top.time_us, unit)} of the idle."


def words(found: Found[LaunchFacts, Launcher], share: float, unit: PerUnit) -> Words:
    f = found.facts
    title = (
        f"GPU waits on kernel launches for {per_unit(found.time_us, unit)}: "
        f"{f.gaps:,} gaps between kernels (median kernel {f.median_kernel_us:.1f} µs, "
        f"{pct(f.tiny_share)} under {TINY_KERNEL_US:.0f} µs"
        + (f", {f.host_per_kernel_us:.1f} µs of host time per kernel" if f.host_per_kernel_us else "")
        + ")"
    )
    if f.graph_launches:
        advice = (
            f"The kernels already come from CUDA graph replays ({f.graph_launches:,} cudaGraphLaunch calls): the "
            "gaps are between graphs or around ops left outside them. Capture more of the step in one graph (fewer "
            "graph breaks, no host syncs inside), and let torch.compile fuse the small ops that remain."
        )
    else:
        advice = (
            "Issue fewer, larger kernels: capture the steady-state step in a CUDA graph "
            "(torch.compile(mode='reduce-overhead') or torch.cuda.graphs), let torch.compile fuse chains "
            "of small elementwise ops, use the foreach/fused optimizer implementations, or batch more work "
            "per op (bigger batch, vectorise Python loops over tensors)."
        )
    if f.known_fixes:
        advice = " ".join(KNOWN_FIXES[key] for key in f.known_fixes) + "\n" + advice
    advice = led_by(_site_first(top_place(found), unit), advice)
    return Words(
        title=title,
        advice=advice,
        gain_note=(
            f"the launch gaps, less about {GRAPH_REPLAY_GAP_US:.0f} µs per kernel that graph replay still "
            "costs; fusion gains more where it also removes memory round trips"
        ),
        labels=LABELS,
        places=[f"kernels launched by {p.facts.op}" for p in found.places],
    )
