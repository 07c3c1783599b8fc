"""The words of the host_sync finding: what each sync construct is, and its fix."""

from __future__ import annotations

from tracelens.analyzers.base import Found
from tracelens.analyzers.host_sync import CopyDirection, HostSyncFacts, SyncConstruct, SyncSite
from tracelens.domain import NO_ENCLOSING_OP, PerUnit, per_unit
from tracelens.explain.base import Words, where

LABELS = {
    "sync_calls": "sync calls",
    "graph_ending_calls": "of them ending a CUDA graph (the host needs the value)",
    "host_blocked_us": "host blocked in the calls",
    "busy_while_blocked_us": "GPU busy while the host was blocked",
    "idle_after_us": "GPU idle after them (sync return + queue refill)",
    "host_bound_after_us": "GPU idle while the host worked after them (counted as host-bound)",
    "constructs": "constructs",
    "runtime_calls": "runtime calls",
    "profiler_syncs": "profiler's own syncs ignored",
}
#: What each construct is, in the reader's terms.
DESCRIPTION: dict[SyncConstruct, str] = {
    "data_dependent_shape": (
        "an op whose output size depends on tensor values (x[mask], nonzero, unique, masked_select)"
    ),
    "item": ("a scalar read of a device tensor (.item(), float(t), int(t), a Python branch on a tensor value)"),
    "branch": "a Python truth test of a tensor (if t:, while t, bool(t), t.any() in a condition)",
    "device_to_host_copy": ("a blocking device-to-host copy (.cpu(), .tolist(), .numpy(), .to('cpu'), print(t))"),
    "host_to_device_copy": (
        "a blocking host-to-device copy (.to('cuda') or torch.tensor(..., device='cuda') from pageable memory)"
    ),
    "explicit_synchronize": "an explicit synchronize (torch.cuda.synchronize(), stream/event synchronize)",
    "other": "a blocking call inside a library op",
}
#: What to change, per construct.
ADVICE: dict[SyncConstruct, str] = {
    "data_dependent_shape": (
        "Keep shapes static: compute on every element and mask (torch.where(mask, x, 0), x * mask) "
        "instead of compacting with x[mask]; where compaction is needed, build destination indices "
        "on the device with a cumsum over the mask and scatter, or give the size up front "
        "(torch.nonzero_static, repeat_interleave(output_size=...))."
    ),
    "item": (
        "Keep scalars on the device: accumulate (total += loss.detach()) and read once every N steps "
        "or after the loop; replace Python branches on tensor values with torch.where, masking, or "
        "torch.cond under torch.compile."
    ),
    "branch": (
        "Replace the Python branch with tensor ops (torch.where, masking) or torch.cond, or move the "
        "check off the hot path (every N steps)."
    ),
    "device_to_host_copy": (
        "Copy asynchronously into pinned memory (x.to('cpu', non_blocking=True) into a pinned "
        "buffer, then wait on a CUDA event only when the values are needed), batch small copies "
        "into one, or keep the computation on the GPU."
    ),
    "host_to_device_copy": (
        "Pin the source (DataLoader(pin_memory=True) or t.pin_memory()) and copy with "
        "non_blocking=True so the host does not wait for the copy."
    ),
    "explicit_synchronize": (
        "Remove synchronize calls from the hot loop; keep them at measurement boundaries only, and "
        "time with CUDA events (torch.cuda.Event(enable_timing=True))."
    ),
    "other": (
        "Find why the op needs a device result on the host (the sources below) and keep that value "
        "on the device, or move the call off the hot path."
    ),
}


#: The pageable copies' words by direction (from each memcpy's own kind): what they are,
#: and the fix that fits that direction (issue 24/27: uploads were given read-back advice).
_COPY_WORDS: dict[CopyDirection, tuple[str, str]] = {
    "device_to_host": (
        "device-to-host copies to pageable memory",
        "copy into a pinned buffer allocated once (torch.empty(..., pin_memory=True), then "
        "buf.copy_(t, non_blocking=True) and an event wait), which runs at the link's rate, and copy only "
        "what the host needs, as late as it needs it (the argmax ids, not the logits).",
    ),
    "host_to_device": (
        "host-to-device copies from pageable memory",
        "from pinned memory (DataLoader(pin_memory=True), t.pin_memory(), or a pinned staging buffer allocated "
        "once) and with non_blocking=True they run at the link's rate and the host does not wait for them.",
    ),
    "both": (
        "copies between the device and pageable host memory (both ways)",
        "pin the host side of each: uploads from pinned memory with non_blocking=True (DataLoader(pin_memory=True) "
        "or t.pin_memory()), read-backs into a pinned buffer allocated once with an event wait, and read back "
        "only what the host needs.",
    ),
    "unknown": (
        "copies through pageable host memory",
        "pin the host side (t.pin_memory(), or a pinned buffer allocated once) and copy with non_blocking=True, "
        "which runs at the link's rate.",
    ),
}


def construct_label(c: SyncConstruct | str) -> str:
    return c.replace("_", " ")


def call_name(call: str, construct: SyncConstruct | str) -> str:
    """A sync as a title or the headline names it: its Python call, else its construct."""
    return call or construct_label(construct)


def site_head(call: str, construct: SyncConstruct | str) -> str:
    """A sync site's name without its op chain: `x.item() (item)`, or the construct alone."""
    return f"{call} ({construct_label(construct)})" if call else construct_label(construct)


def site_text(s: SyncSite) -> str:
    chain = " > ".join(reversed(s.ops)) if s.ops else NO_ENCLOSING_OP
    return f"{site_head(s.call, s.construct)}: {chain} > {s.api}"


def words(found: Found[HostSyncFacts, SyncSite], share: float, unit: PerUnit) -> Words:
    f = found.facts
    at = f" {where(found.sources[0])}" if found.sources else ""
    names = [call_name(call, c) for call, c in f.calls]
    what = ", ".join(names[:3]) + (", …" if len(names) > 3 else "")
    idle_us = f.idle_us
    if f.busy_anyway:
        title = (
            f"{f.count} host syncs ({what}){at}: the host waits {per_unit(f.host_us, unit)} while the GPU stays "
            f"busy ({per_unit(idle_us, unit)} idle after them)"
        )
        lead = (
            "These syncs return while the GPU still has queued work, so they cost little now; they become "
            "expensive as soon as the GPU gets faster than the host. "
        )
    else:
        title = (
            f"{f.count} host syncs ({what}){at} leave the GPU idle {per_unit(idle_us, unit)}; the host "
            f"waits {per_unit(f.host_us, unit)}"
        )
        lead = ""
    if f.copy_us > 0:
        rate = f.copy_bytes / (f.copy_us / 1e6)
        what_copies, fix = _COPY_WORDS[f.copy_direction]
        title += (
            f"; {per_unit(f.copy_us, unit)} of the wait is their {what_copies} "
            f"({f.copy_bytes / 1e6:,.0f} MB at {rate / 1e9:.1f} GB/s)"
        )
        lead = f"The copies themselves take {per_unit(f.copy_us, unit)}: {fix} " + lead
    # One line per construct, most costly first (renderers keep the line breaks).
    advice = lead + "\n".join(f"• {DESCRIPTION[c][0].upper()}{DESCRIPTION[c][1:]}: {ADVICE[c]}" for c in f.constructs)
    return Words(
        title=title,
        advice=advice,
        gain_note=(
            "up to the GPU idle that follows these syncs; the host time blocked inside them "
            "overlaps GPU work and is not saved"
        ),
        labels=LABELS,
        places=[site_text(p.facts) for p in found.places],
        place_advice=[ADVICE[p.facts.construct] for p in found.places],
    )
