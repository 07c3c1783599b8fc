"""communication: time the GPU spends in collectives nothing overlaps, or idle while
the host is in a collective.

Part of question 1's family (the device waits on something other than its own work).
The ledger gives the time: collective kernels (NCCL/RCCL) that no other GPU work
overlaps (exposed communication), and idle gaps while the host sits in a collective or
the next queued kernel is one. Each collective counts once (derive/collectives.py: one
logical call from its c10d op, record_param_comms, annotation and kernels).

What one rank's trace can and cannot say:
- gloo runs the exchange on its worker thread and the program blocks in `wait()` until
  every rank's data has arrived: the idle inside a gloo exchange beyond what the data
  needs (the fastest call of the same kind and size, or its bytes at gloo's loopback
  rate) is this rank waiting for a slower one. That is evidence.
- With NCCL the host does not block on its peers: idle while the host is inside
  `c10d::allreduce_` is the host issuing the collective (host-side collective overhead,
  many small calls issued one by one), not waiting. A collective kernel's own time
  holds both the transfer and any wait for the other ranks, which one trace cannot
  split: the job report (all ranks' traces) measures it.
- Bandwidth as nccl-tests defines it: algbw = S / t (S its message: the buffer of an
  all-reduce, the gathered whole of an all-gather, ...), busbw = algbw x its factor
  (2(n-1)/n for all-reduce, (n-1)/n for all-gather, reduce-scatter and all-to-all, 1
  otherwise), with t the kernel's time (so a lower bound: t includes any wait), checked
  against the GPU's link peak (model/links.py): a rate above it cannot be true and the
  finding says why (calls that overlap, a down-sampled trace, sizes or times wrong).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from tracelens.analyzers.base import Category, Finding, Metric, Site, severity_for
from tracelens.derive.collectives import Call, bus_factor
from tracelens.derive.context import AnalysisContext
from tracelens.derive.intervals import merge_intervals, overlap, subtract
from tracelens.domain import fmt_us
from tracelens.model.links import link_peak
from tracelens.model.sources import PySource, user_source

MAX_SITES = 8
#: gloo all-reduce bandwidth over loopback, measured on the 2-core development machine
#: (1.24 GB/s at 4 MB, 0.88 at 16 MB, 0.54 at 1 MB): a host collective that takes much
#: longer than its bytes at this rate is waiting for another rank, not moving data.
GLOO_ALGBW_BYTES_PER_S = 0.5e9


@dataclass
class _Row:
    """The calls of one (process group, kind) in the window."""

    group: str
    kind: str
    backend: str
    calls: list[Call]
    group_size: int | None
    nbytes: int = 0  # sum of S
    bw_bytes: int = 0  # of it, in calls with a transfer time (a kernel, or gloo's exchange)
    time_us: float = 0.0  # sum of those calls' transfer times
    best_algbw: float = 0.0  # bytes/s of the fastest call
    sizes_from: str = ""


def _rows(calls: list[Call], world: int | None) -> list[_Row]:
    by: dict[tuple[str, str], list[Call]] = defaultdict(list)
    for c in calls:
        by[(c.group, c.kind)].append(c)
    # Calls without a record name no group size: when they all use one communicator (one
    # group, one NCCL stream), that is the default group, which spans the world.
    unnamed = {c.group for c in calls if not c.group_size}
    rows = []
    for (group, kind), cs in by.items():
        size = next((c.group_size for c in cs if c.group_size), None)
        if size is None and len(unnamed) == 1:
            size = world
        row = _Row(group=group, kind=kind, backend=cs[0].backend, calls=cs, group_size=size)
        for c in cs:
            row.nbytes += c.nbytes
            # The transfer's time: its kernels, or gloo's exchange. A call without either (a
            # zero-size all-to-all NCCL launches nothing for, a one-rank group) moved nothing
            # a link carried.
            t = (c.gpu_end - c.gpu_ts) if c.kernels else (c.exchange_end - c.exchange_ts) if c.exchange >= 0 else 0.0
            if not c.nbytes or t <= 0 or (row.group_size or 2) < 2:
                continue
            row.bw_bytes += c.nbytes
            row.time_us += t
            row.best_algbw = max(row.best_algbw, c.nbytes / (t * 1e-6))
        sources = {c.size_source for c in cs if c.size_source}
        row.sizes_from = ", ".join(sorted(sources)) if sources else "unknown"
        rows.append(row)
    rows.sort(key=lambda r: -r.time_us)
    return rows


def _overlapping(calls: list[Call]) -> bool:
    """Whether calls run at once (on different streams or groups): then the time of each
    undercounts what the links carried together."""
    reach = -float("inf")
    for start, end in sorted((c.start, c.end) for c in calls if c.kernels):
        if start < reach - 1.0:
            return True
        reach = max(reach, end)
    return False


def analyze(ctx: AnalysisContext) -> list[Finding]:
    dev = ctx.ledger.primary
    if dev is None:
        return []
    comm_time = dev.by_cause.get("communication", 0.0)
    if comm_time <= 0 and dev.comm_us <= 0:
        return []
    model = ctx.model
    found = ctx.collectives
    calls = [c for c in found.between(dev.window_start, dev.window_end) if c.device in (-1, dev.device)]
    exposed_kernels = float(sum(b - a for a, b in dev.busy_classes["communication"]))
    waits = dev.gaps[dev.gaps["cause"] == "communication"]
    wait_iv = waits[["start", "end"]].to_numpy() if len(waits) else np.empty((0, 2))
    wait_us = float(waits["dur"].sum())
    world = model.meta.world_size

    # Where the host was during the GPU idle inside collectives: in gloo's exchange (the
    # program blocked until the other ranks' data arrived), in the op that issues a call
    # (host-side overhead), or neither (the next kernel, a collective, was queued).
    exch = [c for c in calls if c.exchange >= 0]
    exch_iv = merge_intervals(np.array([c.exchange_ts for c in exch]), np.array([c.exchange_end for c in exch]))
    issuing = [c for c in calls if c.host_ts == c.host_ts and c.exchange != c.root]
    host_iv = subtract(
        merge_intervals(np.array([c.host_ts for c in issuing]), np.array([c.host_end for c in issuing])), exch_iv
    )
    in_exchange = float(overlap(exch_iv, wait_iv[:, 0], wait_iv[:, 1]).sum()) if len(wait_iv) else 0.0
    in_issue = float(overlap(host_iv, wait_iv[:, 0], wait_iv[:, 1]).sum()) if len(wait_iv) else 0.0
    queued = max(wait_us - in_exchange - in_issue, 0.0)

    # Waiting for other ranks, from gloo's blocking exchange only: per call, the idle inside
    # its exchange beyond what its data needs.
    fastest: dict[tuple[str, int], float] = {}
    for c in exch:
        key = (c.kind, c.nbytes)
        fastest[key] = min(fastest.get(key, float("inf")), c.exchange_end - c.exchange_ts)
    idle_in = overlap(wait_iv, np.array([c.exchange_ts for c in exch]), np.array([c.exchange_end for c in exch]))
    peer_wait = 0.0
    for c, idle in zip(exch, idle_in.tolist() if len(exch) else [], strict=True):
        need = fastest[(c.kind, c.nbytes)]
        if c.nbytes:
            need = min(need, c.nbytes / GLOO_ALGBW_BYTES_PER_S * 1e6)
        peer_wait += max(0.0, min(idle, c.exchange_end - c.exchange_ts - need))
    peer_wait = min(peer_wait, in_exchange)

    # Host-side overhead: a call's host op keeps the GPU idle while it issues; were a
    # step's calls issued as one (bucketed, coalesced), one call's worth per step remains.
    issue_idle = overlap(wait_iv, np.array([c.host_ts for c in issuing]), np.array([c.host_end for c in issuing]))
    per_call = float(np.median(issue_idle)) if len(issuing) else 0.0
    overhead_gain = max(in_issue - per_call * ctx.n_steps, 0.0) if len(issuing) > ctx.n_steps else 0.0

    rows = _rows(calls, world)
    gpu = model.meta.primary_device
    peak = link_peak(gpu.name if gpu is not None else None)
    impossible: list[str] = []
    total_bytes = sum(r.nbytes for r in rows)
    kernel_rows = [r for r in rows if r.backend != "gloo" and r.time_us > 0]
    algbw = sum(r.bw_bytes for r in kernel_rows) / (sum(r.time_us for r in kernel_rows) * 1e-6) if kernel_rows else 0.0
    busbw = 0.0
    best_busbw = 0.0
    for r in kernel_rows:
        f = bus_factor(r.kind, r.group_size)
        if f is None or not r.bw_bytes:
            continue
        busbw = max(busbw, r.bw_bytes / (r.time_us * 1e-6) * f)
        best = r.best_algbw * f
        best_busbw = max(best_busbw, best)
        if peak is not None and best > peak.bytes_per_s:
            impossible.append(f"{r.kind} on group {r.group}")
    why_impossible = ""
    if impossible and peak is not None:
        if _overlapping(calls):
            why_impossible = "calls overlap in time, so each one's time undercounts what the links carried together"
        elif found.notes and "no host op" in found.notes[0]:
            why_impossible = "the trace is down-sampled or cut (kernels without their host ops)"
        else:
            why_impossible = "the trace's message sizes or kernel times are wrong for these calls"

    overlapped_share = dev.comm_overlapped_us / dev.comm_us if dev.comm_us > 0 else 0.0
    other_busy = dev.busy_us - exposed_kernels
    gain = min(exposed_kernels, other_busy) + peer_wait + overhead_gain
    gain = min(gain, comm_time)
    share = ctx.share(comm_time)
    per_step = comm_time / ctx.n_steps
    parts = []
    if exposed_kernels > 0:
        parts.append(f"{fmt_us(exposed_kernels)} of collective kernels nothing overlaps")
    if wait_us > 0:
        parts.append(f"{fmt_us(wait_us)} idle inside collectives")
    title = (
        f"Communication costs {fmt_us(comm_time)} ({share:.0%} of the window"
        + (f", {fmt_us(per_step)} per {ctx.unit}" if ctx.n_steps > 1 and ctx.unit != "window" else "")
        + "): "
        + " and ".join(parts or ["collectives overlap other work"])
    )
    advice_parts = []
    if peer_wait > 0.2 * max(wait_us, 1.0):
        advice_parts.append(
            f"{fmt_us(peer_wait)} of it is gloo's exchange waiting beyond what the data needs: this rank waits for a "
            "slower one. Report on every rank's trace together (tracelens report DIR) to name the straggler and why "
            "it is late (data loading, a host sync, more work, lower clocks)."
        )
    if in_issue > 0.2 * max(wait_us, 1.0) and issuing:
        n_calls = len(issuing)
        advice_parts.append(
            f"{fmt_us(in_issue)} of GPU idle is the host issuing {n_calls} collectives ({fmt_us(in_issue / n_calls)} "
            "each, host-side collective overhead, not waiting for other ranks): issue fewer, larger ones (DDP's "
            "bucket_cap_mb, torch.distributed's coalescing manager, FSDP's larger wrap units), or keep the GPU busy "
            "meanwhile (async_op=True)."
        )
    if exposed_kernels > 0:
        advice_parts.append(
            f"{overlapped_share:.0%} of the collective kernel time overlaps compute. Overlap the rest: DDP buckets "
            "(bucket_cap_mb, gradient_as_bucket_view=True) start all-reduces during backward; FSDP's "
            "forward_prefetch / backward_prefetch overlap all-gathers; issue collectives with async_op=True and "
            "wait() only where the result is needed. How much of a kernel's time is waiting for other ranks one "
            "rank's trace cannot tell: report on every rank's trace together to measure it."
        )
    if impossible and peak is not None:
        advice_parts.append(
            f"The bus bandwidth of {', '.join(impossible[:3])} comes out above the {peak.name} peak of "
            f"{peak.bytes_per_s / 1e9:.0f} GB/s per direction, which cannot be: {why_impossible}."
        )
    if any(c.backend == "gloo" for c in calls) and model.gpu_activity().shape[0]:
        advice_parts.append(
            "The collectives run on gloo, which moves CUDA tensors through the host: use the NCCL backend for GPU "
            "tensors."
        )

    sites = []
    for r in rows[:MAX_SITES]:
        idle = float(
            overlap(wait_iv, np.array([c.start for c in r.calls]), np.array([c.end for c in r.calls])).sum()
        ) + float(overlap(dev.busy_classes["communication"], np.array([c.start for c in r.calls]),
                          np.array([c.end for c in r.calls])).sum())  # fmt: skip
        # The op that issued the calls names their source; gloo's exchange runs on its own
        # thread, where no Python frame says who asked for it.
        src: PySource | None = (
            None if r.backend == "gloo" else next((user_source(model, c.root) for c in r.calls if c.root >= 0), None)
        )
        f = bus_factor(r.kind, r.group_size)
        bw = (
            f"algbw {_rate(r.bw_bytes / (r.time_us * 1e-6))}"
            + (f", busbw {_rate(r.bw_bytes / (r.time_us * 1e-6) * f)}" if f is not None else "")
            if r.bw_bytes and r.time_us > 0
            else "one rank: nothing crosses a link"
            if r.group_size == 1
            else "bandwidth unknown (no message size)"
            if not r.nbytes
            else "bandwidth unknown (no transfer time: no kernel)"
        )
        size = f"{_size(r.nbytes / len(r.calls))} per call ({r.sizes_from})" if r.nbytes else "message size unknown"
        n = f", {r.group_size} ranks" if r.group_size else ""
        sites.append(
            Site(
                description=f"{r.kind} on group {r.group} ({r.backend or 'backend unknown'}{n}): {size}, {bw}",
                count=len(r.calls),
                time_us=idle,
                ops=(r.kind,),
                kind=r.kind,
                source=src,
            )
        )
    evidence = [
        Metric("communication in the ledger", comm_time, "us"),
        Metric("collective kernel time", dev.comm_us, "us"),
        Metric("of it overlapped by other GPU work", overlapped_share, "share"),
        Metric("exposed collective kernel time (transfer and any wait for other ranks)", exposed_kernels, "us"),
        Metric("GPU idle inside collectives", wait_us, "us"),
        Metric("of it, the host issuing collectives (host-side overhead)", in_issue, "us"),
        Metric("of it, inside gloo's blocking exchange", in_exchange, "us"),
        Metric("of it, a collective kernel queued", queued, "us"),
        Metric("waiting for other ranks (gloo exchange beyond what the data needs)", peer_wait, "us"),
        Metric("collectives (one per logical call)", len(calls), "count"),
        Metric("bytes moved (sum of message sizes)", total_bytes, "bytes"),
        Metric("message sizes from", ", ".join(sorted({r.sizes_from for r in rows})) or "unknown", "text"),
    ]
    if algbw > 0:
        evidence.append(Metric("algorithm bandwidth (collective kernels, nccl-tests' algbw)", algbw, "bytes_per_s"))
    if busbw > 0:
        evidence.append(Metric("bus bandwidth (nccl-tests' busbw, busiest kind)", busbw, "bytes_per_s"))
        evidence.append(Metric("bus bandwidth of the fastest call", best_busbw, "bytes_per_s"))
    if peak is not None and kernel_rows:
        evidence.append(Metric(f"link peak ({peak.name}, per direction)", peak.bytes_per_s, "bytes_per_s"))
    if impossible:
        evidence.append(Metric("bandwidth not possible", why_impossible, "text"))
    return [
        Finding(
            category=Category.COMMUNICATION,
            severity=severity_for(share),
            title=title,
            time_us=comm_time,
            share=share,
            advice="\n".join(advice_parts) or "Overlap collectives with compute.",
            expected_gain_us=gain,
            gain_note=(
                "the exposed collective kernels, at best hidden under the rest of the GPU's work, plus gloo's "
                "exchange beyond what its data needs (waiting for another rank), plus the host-side overhead of all "
                "but one collective per step"
            ),
            evidence=tuple(evidence),
            sites=tuple(sites),
            sources=tuple(dict.fromkeys(s.source for s in sites if s.source is not None)),
            device=dev.device,
        )
    ]


def _rate(bytes_per_s: float) -> str:
    return f"{bytes_per_s / 1e9:.2f} GB/s" if bytes_per_s >= 1e8 else f"{bytes_per_s / 1e6:.1f} MB/s"


def _size(nbytes: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{nbytes:.0f} B"
