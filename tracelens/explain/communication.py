"""The words of the communication finding."""

from __future__ import annotations

from tracelens.analyzers.base import Found
from tracelens.analyzers.communication import Collective, CommunicationFacts
from tracelens.domain import fmt_us, pct
from tracelens.explain.base import Words

LABELS = {
    "communication_us": "communication in the ledger",
    "collective_kernel_us": "collective kernel time",
    "overlapped_share": "of it overlapped by other GPU work",
    "exposed_kernel_us": "exposed collective kernel time",
    "idle_in_collectives_us": "GPU idle inside collectives",
    "collectives": "collectives",
    "waiting_for_ranks_us": "waiting for other ranks (beyond what the data needs)",
    "bytes_moved": "bytes moved (from op shapes)",
    "algorithm_bandwidth": "algorithm bandwidth",
}


def words(found: Found[CommunicationFacts, Collective], share: float) -> Words:
    f = found.facts
    parts = []
    if f.exposed_kernel_us > 0:
        parts.append(f"{fmt_us(f.exposed_kernel_us)} of collective kernels nothing overlaps")
    if f.wait_us > 0:
        parts.append(f"{fmt_us(f.wait_us)} idle inside collectives")
    title = (
        f"Communication costs {fmt_us(found.time_us)} ({pct(share)} of the window"
        + (f", {fmt_us(f.per_step_us)} per {f.unit}" if f.per_step_us is not None else "")
        + "): "
        + " and ".join(parts or ["collectives overlap other work"])
    )
    advice = []
    if f.straggler_wait_us > 0.2 * max(f.wait_us, 1.0):
        advice.append(
            f"{fmt_us(f.straggler_wait_us)} of the wait is collectives taking longer than their data needs: this "
            "rank waits for a slower one. Compare the ranks' traces (tracelens report on each) to find the "
            "straggler and why it is late (data loading, a host sync, more work, lower clocks)."
        )
    if f.exposed_kernel_us > 0:
        advice.append(
            f"{pct(f.overlapped_share)} of the collective kernel time overlaps compute. Overlap the rest: DDP buckets "
            "(bucket_cap_mb, gradient_as_bucket_view=True) start all-reduces during backward; FSDP's "
            "forward_prefetch / backward_prefetch overlap all-gathers; issue collectives with async_op=True and "
            "wait() only where the result is needed."
        )
    if f.gloo:
        advice.append(
            "The collectives run on gloo, which moves CUDA tensors through the host: use the NCCL backend for GPU "
            "tensors."
        )
    return Words(
        title=title,
        advice="\n".join(advice) or "Overlap collectives with compute.",
        gain_note=(
            "the exposed collective kernels, at best hidden under the rest of the GPU's work, plus the idle "
            "inside collectives beyond what their data needs (the fastest call of the kind, or the bytes at "
            "gloo's loopback rate): waiting for another rank"
        ),
        labels=LABELS,
        places=[f"inside {p.facts.op}" for p in found.places],
    )
