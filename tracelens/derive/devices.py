"""Which device a trace's device activity ran on, when it is not a CUDA/ROCm GPU (issue 35).

Kineto writes other accelerators' activity under their own categories (libkineto's
ActivityType names): MTIA's device events as `mtia_ccp_events` (DMA requests, executed
functions, event records and waits on the device's streams) and its host runtime calls as
`mtia_runtime`. tracelens' GPU analyses read CUDA/ROCm kernels, copies and runtime calls
only, so on such a trace they have nothing to measure; the report says what the device is
rather than "no GPU activity", and keeps what the host side shows.
"""

from __future__ import annotations

from dataclasses import dataclass

from tracelens.model.trace import TraceModel

#: Kineto categories of non-GPU accelerators, to the accelerator's name.
ACCELERATOR_CATEGORIES = {
    "mtia_ccp_events": "MTIA",
    "mtia_runtime": "MTIA",
    "mtia_insight": "MTIA",
    "mtia_counters": "MTIA",
    "hpu_op": "HPU (Intel Gaudi)",
}
#: Of those, the ones that are device-side activity (the rest are host runtime calls).
DEVICE_CATEGORIES = frozenset({"mtia_ccp_events", "mtia_insight", "mtia_counters", "hpu_op"})


@dataclass(frozen=True)
class OtherAccelerator:
    kind: str  # "MTIA", ...
    device_names: tuple[str, ...]  # from deviceProperties (MTIA traces name their chip: ARTEMIS)
    device_events: int
    runtime_events: int
    categories: dict[str, int]

    @property
    def label(self) -> str:
        names = ", ".join(self.device_names)
        return f"{self.kind} ({names})" if names else self.kind


def other_accelerator(model: TraceModel) -> OtherAccelerator | None:
    """The non-GPU accelerator whose activity the trace holds, or None (a GPU trace, or
    one with no device activity of a kind we know)."""
    found = {c: n for c, n in model.meta.other_categories.items() if c in ACCELERATOR_CATEGORIES}
    if not found:
        return None
    kind = ACCELERATOR_CATEGORIES[max(found, key=found.__getitem__)]
    # With no GPU activity, deviceProperties describe the accelerator (the loader's vendor
    # guess for them means nothing then).
    devices = model.meta.devices if not model.meta.active_devices else ()
    names = tuple(dict.fromkeys(d.name for d in devices if d.name))
    device = sum(n for c, n in found.items() if c in DEVICE_CATEGORIES)
    return OtherAccelerator(kind, names, device, sum(found.values()) - device, found)
