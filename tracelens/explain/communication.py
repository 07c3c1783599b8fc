"""The words of the communication finding."""

from __future__ import annotations

from tracelens.analyzers.base import Found
from tracelens.analyzers.communication import (
    BufferSync,
    CollectiveRow,
    CommunicationFacts,
    ImpossibleWhy,
    ManySmall,
    TorchRecComm,
)
from tracelens.domain import PerUnit, fmt_us, pct, per_unit
from tracelens.explain.base import Words

LABELS = {
    "communication_us": "communication in the ledger",
    "collective_kernel_us": "collective kernel time",
    "overlapped_share": "of it overlapped by other GPU work",
    "exposed_kernel_us": "exposed collective kernel time (transfer and any wait for other ranks)",
    "idle_in_collectives_us": "GPU idle inside collectives",
    "issue_us": "of it, the host issuing collectives (host-side overhead)",
    "in_exchange_us": "of it, inside gloo's blocking exchange",
    "queued_us": "of it, a collective kernel queued",
    "waiting_for_ranks_us": "waiting for other ranks (gloo exchange beyond what the data needs)",
    "collectives": "collectives (one per logical call)",
    "bytes_moved": "bytes moved (sum of message sizes)",
    "sizes_from": "message sizes from",
    "algorithm_bandwidth": "algorithm bandwidth (collective kernels, nccl-tests' algbw)",
    "bus_bandwidth": "bus bandwidth (nccl-tests' busbw, busiest kind)",
    "best_bus_bandwidth": "bus bandwidth of the fastest call",
    "bandwidth_not_possible": "bandwidth not possible",
    "network_rate": "network's usual rate per GPU (the group spans nodes; 400 Gb/s NIC)",
}
#: Why a bus bandwidth above the link's peak was measured.
WHY_IMPOSSIBLE: dict[ImpossibleWhy, str] = {
    "": "",
    "calls_overlap": "calls overlap in time, so each one's time undercounts what the links carried together",
    "down_sampled": "the trace is down-sampled or cut (kernels without their host ops)",
    "sizes_or_times_wrong": "the trace's message sizes or kernel times are wrong for these calls",
}


def _rate(bytes_per_s: float) -> str:
    return f"{bytes_per_s / 1e9:.2f} GB/s" if bytes_per_s >= 1e8 else f"{bytes_per_s / 1e6:.1f} MB/s"


def _size(nbytes: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{nbytes:.0f} B"


def row_text(r: CollectiveRow, calls: int) -> str:
    if r.bw_bytes and r.transfer_us > 0:
        algbw = r.bw_bytes / (r.transfer_us * 1e-6)
        bw = f"algbw {_rate(algbw)}" + (f", busbw {_rate(algbw * r.bus_factor)}" if r.bus_factor is not None else "")
    elif r.group_size == 1:
        bw = "one rank: nothing crosses a link"
    elif not r.nbytes:
        bw = "bandwidth unknown (no message size)"
    else:
        bw = "bandwidth unknown (no transfer time: no kernel)"
    size = f"{_size(r.nbytes / calls)} per call ({r.sizes_from})" if r.nbytes else "message size unknown"
    n = f", {r.group_size} ranks" if r.group_size else ""
    return f"{r.kind} on group {r.group} ({r.backend or 'backend unknown'}{n}): {size}, {bw}"


def _many_small(m: ManySmall) -> str:
    where = f" from {m.issued_in}" if m.issued_in else ""
    return (
        f"{m.per_step:.0f} {m.kind.replace('_', '-')}s a step ({m.calls:,} in the window) are issued one by "
        f"one{where}: a median kernel of {fmt_us(m.kernel_median_us)} and {fmt_us(m.host_median_us)} of host time "
        "each, so each pays NCCL's fixed latency and the host's issue cost for a few bytes. Bucket them into a few "
        "large ones: DistributedDataParallel's gradient buckets (bucket_cap_mb, 25 MB by default) instead of one "
        "call per tensor, torch.distributed's coalescing (one call on a flattened buffer, the coalescing manager); "
        "under torch.compile let DDP bucket them (torch._dynamo.config.optimize_ddp) rather than reducing each "
        "gradient inside the compiled graph."
    )


def _torchrec(t: TorchRecComm, unit: PerUnit) -> str:
    parts = []
    if t.input_dist_us > 0:
        if t.pipelined:
            parts.append(
                f"The input dist (the sparse features' KJT all-to-alls, {per_unit(t.input_dist_us, unit)} exposed) "
                "already runs a batch ahead (the trace's sparse_data_dist ranges are TorchRec's "
                "TrainPipelineSparseDist), yet no compute kernel runs beside that part of it: start it earlier in "
                "the step or give it more to hide under (TrainPipelineSemiSync, or prefetching the next batch's "
                "embeddings)."
            )
        else:
            parts.append(
                f"The input dist (the sparse features' KJT all-to-alls, {per_unit(t.input_dist_us, unit)} exposed) "
                "runs in line with the step: use TorchRec's TrainPipelineSparseDist to overlap the input dist with "
                "compute (it starts the next batch's input dist on its own stream during this batch's forward and "
                "backward)."
            )
    if t.embeddings_us > 0:
        parts.append(
            "The pooled embeddings' all-to-all (alltoall_fwd_single / alltoall_bwd_single, "
            f"{per_unit(t.embeddings_us, unit)} exposed) sits between the embedding lookups and the dense part that "
            "needs it: send fewer bytes with TorchRec's quantized comms "
            "(QCommsConfig(forward_precision=CommType.FP16, backward_precision=CommType.BF16) through "
            "get_qcomm_codecs_registry) or a sharding plan that moves less (row-wise or data-parallel for small "
            "tables), or overlap it with the dense compute of another batch (TrainPipelineSemiSync)."
        )
    return " ".join(parts)


def _bound(f: CommunicationFacts, unit: PerUnit) -> str:
    """What bounds the gain of hiding the exposed kernels."""
    if f.exposed_kernel_us <= 0 or f.down_sampled:
        return ""
    text = ""
    if f.host_blocked_us > 0:
        text = (
            "The host sits in blocking calls (a synchronize, a device-to-host copy) for "
            f"{per_unit(f.host_blocked_us, unit)} "
            "of the exposed time, waiting for a collective to end: that part is on the step's critical path."
        )
    rest = f.exposed_kernel_us - f.host_blocked_us
    if f.host_paced_us >= 0.5 * rest > 0:
        what = f"The rest ({per_unit(rest, unit)})" if f.host_blocked_us > 0 else "It"
        text += (
            f" {what} runs while the host is still launching the step's work (the GPU waits "
            f"{per_unit(f.host_paced_us, unit)} on the host's launches and host work): hiding it shortens the "
            "step only as far as the host keeps up, so the launch and host-work fixes come first there."
        )
    return text.strip()


def _broadcast(b: BufferSync, unit: PerUnit) -> str:
    return (
        f"DistributedDataParallel broadcasts the model's buffers from rank 0 before every forward "
        f"({b.per_step:.0f} broadcasts a step, {_size(b.nbytes)} each, with {per_unit(b.host_us, unit)} of host time "
        "flattening and unflattening them): when the buffers need no sync each step (BatchNorm running stats "
        "each rank may keep, or no buffers that change), construct DistributedDataParallel(..., "
        "broadcast_buffers=False); use SyncBatchNorm where the statistics must agree."
    )


def _advice(f: CommunicationFacts, unit: PerUnit) -> str:
    parts = []
    if f.peer_wait_us > 0.2 * max(f.wait_us, 1.0):
        parts.append(
            f"{per_unit(f.peer_wait_us, unit)} of it is gloo's exchange waiting beyond what the data needs: this "
            "rank waits for a slower one. Report on every rank's trace together (tracelens report DIR) to name the "
            "straggler and why it is late (data loading, a host sync, more work, lower clocks)."
        )
    if f.buffer_sync is not None:
        parts.append(_broadcast(f.buffer_sync, unit))
    if f.many_small is not None:
        parts.append(_many_small(f.many_small))
    elif f.issue_us > 0.2 * max(f.wait_us, 1.0) and f.issuing_calls:
        n = f.issuing_calls
        parts.append(
            f"{per_unit(f.issue_us, unit)} of GPU idle is the host issuing {n} collectives ({fmt_us(f.issue_us / n)} "
            "each, host-side collective overhead, not waiting for other ranks): issue fewer, larger ones (DDP's "
            "bucket_cap_mb, torch.distributed's coalescing manager, FSDP's larger wrap units), or keep the GPU busy "
            "meanwhile (async_op=True)."
        )
    if f.torchrec is not None:
        parts.append(_torchrec(f.torchrec, unit))
    if (
        f.exposed_kernel_us > 0
        and f.many_small is None
        and (f.torchrec is None or f.torchrec.input_dist_us + f.torchrec.embeddings_us < 0.5 * f.exposed_kernel_us)
    ):
        parts.append(
            f"{pct(f.overlapped_share)} of the collective kernel time overlaps compute. Overlap the rest: DDP buckets "
            "(bucket_cap_mb, gradient_as_bucket_view=True) start all-reduces during backward; FSDP's "
            "forward_prefetch / backward_prefetch overlap all-gathers; issue collectives with async_op=True and "
            "wait() only where the result is needed. How much of a kernel's time is waiting for other ranks one "
            "rank's trace cannot tell: report on every rank's trace together to measure it."
        )
    if bound := _bound(f, unit):
        parts.append(bound)
    if f.impossible and f.link_name:
        which = ", ".join(f"{kind} on group {group}" for kind, group in f.impossible[:3])
        parts.append(
            f"The bus bandwidth of {which} comes out above the {f.link_name} peak of "
            f"{f.link_bytes_per_s / 1e9:.0f} GB/s per direction, which cannot be: {WHY_IMPOSSIBLE[f.why_impossible]}."
        )
    if f.over_network:
        which = ", ".join(f"{kind} on group {group} ({n} ranks)" for kind, group, n in f.over_network[:3])
        parts.append(
            f"The bus bandwidth of {which} comes out above the network's usual 50 GB/s per GPU (one 400 Gb/s NIC "
            f"per GPU), and the group has more ranks than this node's {f.gpus_on_node} GPUs, so its data crosses "
            "the network: that holds only with more NICs per GPU or in-network reduction (SHARP, NVLink SHARP); "
            "otherwise calls overlap or the trace's sizes or times are off for these calls."
        )
    if f.gloo_on_gpu:
        parts.append(
            "The collectives run on gloo, which moves CUDA tensors through the host: use the NCCL backend for GPU "
            "tensors."
        )
    if f.down_sampled:
        # After the concrete fix, not before it (issue 27: the Fix box opened on the caveat).
        parts.append(
            "This trace is down-sampled (see the notes): each collective kernel's own time holds, but compute "
            "kernels that could hide them were dropped, so the overlapped share and the gain are rough."
        )
    return "\n".join(parts) or "Overlap collectives with compute."


def _joined(parts: list[str]) -> str:
    if len(parts) > 1:
        return ", ".join(parts[:-1]) + " and " + parts[-1]
    return "".join(parts) or "collectives overlap other work"


def words(found: Found[CommunicationFacts, CollectiveRow], share: float, unit: PerUnit) -> Words:
    f = found.facts
    parts: list[tuple[float, str]] = []  # (time, what it is): each said once
    if f.exposed_kernel_us > 0:
        parts.append((f.exposed_kernel_us, "collective kernels nothing overlaps"))
    if f.wait_us > 0:
        parts.append((f.wait_us, "idle inside collectives"))
    cost = per_unit(found.time_us, unit)
    if len(parts) == 1 and per_unit(parts[0][0], unit) == cost:
        # the one part is the whole cost: "all of it", not the amount again (issue 27)
        said = [f"all of it {parts[0][1]}"]
    else:
        said = [f"{per_unit(t, unit)} {what}" for t, what in parts]
    if f.many_small is not None:
        m = f.many_small
        said.append(
            f"{m.per_step:.0f} {m.kind.replace('_', '-')}s a step, a median kernel of {fmt_us(m.kernel_median_us)}"
        )
    title = f"Communication costs {cost} ({pct(share)} of the analysed time): " + _joined(said)
    return Words(
        title=title,
        advice=_advice(f, unit),
        gain_note=(
            "the exposed collective kernels, at best hidden under the rest of the GPU's work, plus gloo's "
            "exchange beyond what its data needs (waiting for another rank), plus the host-side overhead of all "
            "but one collective per step"
        ),
        labels={**LABELS, "link_peak": f"link peak ({f.link_name}, per direction)"},
        places=[row_text(p.facts, p.count) for p in found.places],
        texts={"bandwidth_not_possible": WHY_IMPOSSIBLE[f.why_impossible]},
    )
