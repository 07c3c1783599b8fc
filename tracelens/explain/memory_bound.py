"""The words of the memory_bound finding."""

from __future__ import annotations

from tracelens.analyzers.base import Found, Place
from tracelens.analyzers.memory_bound import MemoryFacts
from tracelens.derive.fusion import FusionChain
from tracelens.derive.kernel_models import L2_ROOF_NAME
from tracelens.derive.roofline import KernelRoof
from tracelens.domain import PerUnit, pct, per_unit
from tracelens.explain.base import Words, led_by, top_place, where

LABELS = {
    "memory_bound_us": "memory-bound kernel time",
    "elementwise_copy_us": "elementwise and copy kernels",
    "fusible_chain_us": "time in fusible chains",
    "fusion_saved_us": "saved by fusing the chains (estimate)",
    "copy_us": "copies and casts",
    "copied_bytes": "bytes copied or cast",
    "bandwidth_roof": "bandwidth roof (bytes/s)",
    "modelled_share": "modelled share of kernel time",
    "compiled_us": "compiled (Triton) kernels, modelled from their buffers (FLOPs a guess)",
}


def chain_text(c: FusionChain, unit: PerUnit) -> str:
    return (
        f"{len(c.ops)} passes back to back: {' > '.join(op.split('::')[-1] for op in c.ops[:6])}"
        f"{' > ...' if len(c.ops) > 6 else ''}; "
        f"fused, about one pass ({per_unit(c.saved_us, unit)} saved)"
    )


def kernel_text(r: KernelRoof) -> str:
    if r.roof_name == L2_ROOF_NAME:
        return (
            f"{r.family or 'kernel'} {r.dtype}: register spills through L2 at {pct(r.l2_share)} of the L2 write port; "
            f"DRAM {r.bytes_per_s / 1e9:.0f} GB/s"
        )
    return (
        f"{r.family or 'kernel'}: {r.bytes_per_s / 1e9:.0f} GB/s "
        f"({pct(r.roof_share)} of the roof), {r.intensity:.2f} FLOP/B"
    )


def _chain_first(top: Place[FusionChain | KernelRoof] | None, unit: PerUnit) -> str:
    """The concrete start (issue 27, as the launch finding's site): the chain that saves
    the most fused, its ops and source line, and what torch.compile on it saves; "" where
    the top place is not a chain."""
    if top is None or not isinstance(top.facts, FusionChain):
        return ""
    c = top.facts
    ops = " > ".join(op.split("::")[-1] for op in c.ops[:6]) + (" > ..." if len(c.ops) > 6 else "")
    at = f" {where(top.source)}" if top.source is not None else ""
    return (
        f"Start with the chain {ops}{at} ({len(c.ops)} passes): torch.compile on "
        f"{'that function' if at else 'the code that runs it'} fuses it into about one pass, "
        f"{per_unit(c.saved_us, unit)} saved."
    )


def words(found: Found[MemoryFacts, FusionChain | KernelRoof], share: float, unit: PerUnit) -> Words:
    f = found.facts
    mem_time = found.time_us
    title = (
        f"{per_unit(mem_time, unit)} ({pct(share)} of the analysed time) is in memory-bound kernels; "
        f"{f.chains} chains of back-to-back elementwise/norm passes could fuse"
        if f.chains
        else f"{per_unit(mem_time, unit)} ({pct(share)} of the analysed time) is in memory-bound kernels, "
        f"{per_unit(f.elementwise_us, unit)} of it elementwise ops and copies"
    )
    advice = (
        "These kernels wait on memory, not arithmetic: fuse chains of elementwise ops so data "
        "makes one round trip instead of one per op (torch.compile does this; the chains are listed "
        "with their source), avoid copies and casts (.contiguous(), .to(dtype) inside the step), keep "
        "activations in bf16, and reuse buffers in place where autograd allows."
    )
    advice = led_by(_chain_first(top_place(found), unit), advice)
    if f.spilling_us is not None:
        advice += (
            f" {per_unit(f.spilling_us, unit)} is fp32 memory-efficient attention spilling "
            "registers: its spills fill the L2 port while DRAM idles. Run attention in bf16/fp16 "
            "(torch.autocast), where SDPA picks the flash or cuDNN kernels, which keep their tiles on chip."
        )
    return Words(
        title=title,
        advice=advice,
        gain_note=(
            "each chain of back-to-back passes fused into one (all but its longest kernel saved; on the "
            "H200 eager-vs-compiled case this over-estimated the saving by 11%) plus the other "
            "memory-bound kernels' distance to the bandwidth roof"
        ),
        labels=LABELS,
        places=[
            chain_text(p.facts, unit) if isinstance(p.facts, FusionChain) else kernel_text(p.facts)
            for p in found.places
        ],
    )
