"""The words of the allocation finding."""

from __future__ import annotations

from tracelens.analyzers.allocation import AllocFacts, AllocSite, CatGrowth
from tracelens.analyzers.base import Found
from tracelens.domain import PerUnit, pct, per_unit
from tracelens.explain.base import Words, where
from tracelens.explain.shapes import describe
from tracelens.report.enums import WHOLE_UNITS

LABELS = {
    "idle_us": "GPU idle in allocator calls",
    "calls": "allocator calls in the window",
    "frees": "of them frees (device-wide syncs)",
    "host_us": "host time in them",
    "empty_cache_calls": "torch.cuda.empty_cache() calls",
    "pinned_allocations": "pinned host allocations in the window",
    "startup_calls": "allocator calls in start-up (not blamed)",
    "startup_host_us": "host time in start-up allocator calls (not blamed)",
    "cat_copied_bytes": "bytes copied by growing cats",
    "cat_recopied_bytes": "of them re-copied old contents (a static buffer saves)",
    "cat_gpu_us": "GPU time of the growing cats",
    "peak_allocated": "peak allocated",
    "peak_allocated_relative": "peak allocated (relative)",
    "peak_reserved": "peak reserved",
    "allocated_per_step": "bytes allocated per step (churn)",
    "freed_per_step": "bytes freed per step",
    "fragmentation_at_peak": "reserved minus allocated at the peak (fragmentation)",
    "memory_events": "[memory] events in the window",
}


def gib(b: float) -> str:
    """Bytes with a binary prefix: 1.5 GiB, 12.0 MiB, 512 B."""
    b = float(b)
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(b) >= size:
            return f"{b / size:.1f} {unit}"
    return f"{b:.0f} B"


def _rate(f: AllocFacts) -> str:
    """How often the calls come: "3.5 per step", or "about once every 40 steps" where
    fewer than one in ten steps has one (not "0.0 per step", issue 27)."""
    if f.per_step >= 0.05:
        return f"{f.per_step:.1f} per {f.unit}"
    return f"about once every {f.steps / max(f.calls, 1):.0f} {f.unit}s"


def _calls(f: AllocFacts, unit: PerUnit) -> tuple[str, list[str]]:
    title = (
        f"GPU idles {per_unit(f.idle_us, unit)} ({pct(f.idle_share)} of the analysed time) while the host is in "
        if f.idle_us > 0
        else "The GPU does not idle while the host is in "  # not "idles 0 µs (0% of the window)"
    ) + f"{f.calls:,} allocator calls ({per_unit(f.host_us, unit)} of host time)"
    advice = []
    if f.harness_frees:
        # the benchmark's own flush empties the cache: what it times allocates again (brief misc §1)
        advice.append(
            f"The benchmark harness's cache flush ({f.harness}) frees device memory ({f.harness_frees} cudaFree) "
            f"before the timed region, so the code it times allocates its memory again ({f.calls - f.harness_frees} "
            "allocator calls): the measurement is of the allocator, not the model. Flush without handing memory "
            "back (keep the flush buffer between iterations; no torch.cuda.empty_cache()), or warm the allocator "
            "after the flush."
        )
        return title, advice
    advice.append(
        "The caching allocator should make allocator calls rare in the steady state; here they keep happening"
        + (f" ({_rate(f)})." if f.steps > 1 and f.unit not in WHOLE_UNITS else ".")
    )
    if f.empty_cache:
        advice.append(
            f"torch.cuda.empty_cache() runs in the loop ({f.empty_cache} of the calls are inside it): remove it; it "
            "hands memory back to the driver only for the next step to ask for it again."
        )
    if f.pinned:
        advice.append(
            f"{f.pinned} pinned host buffers are allocated inside the window (cudaHostAlloc): allocate them once "
            "and reuse them (or let a DataLoader with pin_memory=True keep its pool)."
        )
    if f.varying is not None:
        v = f.varying
        advice.append(
            f"Allocation sizes keep changing ({v.op}{' ' + where(v.source) if v.source else ''}: "
            f"{describe(v.variation)}): the cache cannot reuse blocks of other sizes. Pad to a "
            "few bucket sizes, or preallocate the largest buffer and reuse it."
        )
    advice.append(
        "Preallocate buffers that grow (a static KV cache instead of torch.cat), and run a warm-up step before "
        "measuring."
    )
    if f.frees:
        advice.append(f"{f.frees} of the calls free device memory: cudaFree synchronises the whole device.")
    mem = f.memory
    if f.fragmented and mem is not None:
        frag = mem.fragmentation_at_peak
        advice.append(
            f"The cache holds {gib(frag)} more than is allocated at the peak ({pct(frag / mem.peak_reserved)} of "
            "reserved): fragmentation. PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True lets the cache grow "
            "segments instead of calling cudaMalloc for new ones."
        )
    return title, advice


def _growth(g: CatGrowth, f: AllocFacts, unit: PerUnit) -> tuple[str, str]:
    title = (
        f"{g.op} {where(g.source) if g.source else ''} regrows a tensor every call (dim {g.dim}: "
        f"{min(g.sizes)}..{max(g.sizes)}), copying {gib(g.copied_bytes)} in {g.calls} calls, "
        f"{gib(g.recopied_bytes)} of it old contents again ({per_unit(f.grow_us, unit)} of GPU time)"
    )
    advice = (
        f"Preallocate the tensor {g.op} keeps regrowing at its final size (a static KV cache) and write each "
        f"step's slice in place (cache[:, :, pos] = new or index_copy_): that stops {gib(g.recopied_bytes)} of "
        f"copies in this window ({gib(g.recopied_bytes / max(f.steps, 1))} per {f.unit}, growing with every "
        "step)."
    )
    return title, advice


def _place(p: AllocSite) -> str:
    g = p.growth
    if g is None:
        return f"{p.api} in {p.op}"
    return (
        f"{g.op} grows dim {g.dim} from {min(g.sizes)} to {max(g.sizes)}: {gib(g.copied_bytes)} "
        f"copied, {gib(g.recopied_bytes)} of it again"
    )


def words(found: Found[AllocFacts, AllocSite], share: float, unit: PerUnit) -> Words:
    f = found.facts
    mem = f.memory
    title_parts: list[str] = []
    advice: list[str] = []
    if f.calls:
        title, tips = _calls(f, unit)
        title_parts.append(title)
        advice += tips
    if f.growth is not None:
        title, tip = _growth(f.growth, f, unit)
        title_parts.append(title)
        advice.append(tip)
    if not title_parts and mem is not None:
        title_parts.append(
            f"No allocator calls in the window; memory peaks at {gib(mem.peak_allocated)} allocated"
            + (f" ({gib(mem.peak_reserved)} reserved)" if mem.peak_reserved else " (relative to the recording's start)")
            + f"; the cache serves the {gib(mem.allocated_per_step)} allocated per {f.unit} without them"
        )
        advice.append("Nothing to change for allocation: the caching allocator serves every request.")
    gain_note = "the idle spent in allocator calls, gone when the cache serves every allocation"
    if f.growth is not None:
        gain_note += "; plus the growing cats' GPU time, gone with a preallocated buffer written in place"
    top_ops = mem.top_ops[:5] if mem is not None else ()
    return Words(
        title="; ".join(title_parts),
        advice="\n".join(advice),
        gain_note=gain_note,
        labels={**LABELS, **{f"allocated_by.{i}": f"allocated by {op}" for i, (op, _, _, _) in enumerate(top_ops)}},
        places=[_place(p.facts) for p in found.places],
    )
