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
from dataclasses import dataclass, replace
from typing import Literal

import numpy as np

from tracelens.analyzers.base import Category, Fact, Found, Place
from tracelens.derive.collectives import Call, bus_factor
from tracelens.derive.context import AnalysisContext
from tracelens.derive.host_calls import is_profiler_sync, last_launch_ts
from tracelens.derive.intervals import merge_intervals, overlap, subtract
from tracelens.domain import (
    DDP_BUFFER_OPS,
    DDP_FORWARD,
    TORCHREC_EMBEDDING_MARKERS,
    TORCHREC_INPUT_DIST_MARKERS,
    TORCHREC_PIPELINE_MARKERS,
)
from tracelens.model.links import NETWORK, LinkPeak, link_peak, spans_nodes
from tracelens.model.schema import Kind
from tracelens.model.sources import PySource, user_source
from tracelens.model.trace import TraceModel, name_matches

MAX_SITES = 8
#: gloo all-reduce bandwidth over loopback, measured on the 2-core development machine
#: (1.24 GB/s at 4 MB, 0.88 at 16 MB, 0.54 at 1 MB): a host collective that takes much
#: longer than its bytes at this rate is waiting for another rank, not moving data.
GLOO_ALGBW_BYTES_PER_S = 0.5e9
#: A kind issued at least this many times a step with a median kernel this short is many
#: small collectives, each paying NCCL's fixed latency and the host's issue cost: HTA's
#: df_index_resolver issues 404 all-reduces a step (median kernel 11 µs, 92 µs of host
#: time each); control.json's 10 a step and nccl_data's 7 are not.
MANY_CALLS_PER_STEP = 50
SMALL_KERNEL_US = 50.0
#: DDP's buffer broadcast is worth its advice from this share of the window in host time
#: (nccl_data: 88.1 ms of flatten, broadcast and unflatten in a 667 ms window, 13%;
#: resnet_act_checkpoint: 0.28 ms of 56 ms, 0.5%).
BUFFER_SYNC_MIN_SHARE = 0.02
#: deviceProperties lists the node's GPUs when it lists at least this many (every public
#: trace of a multi-rank job lists 2 or 8; one entry may be a rank's only visible GPU).
MIN_NODE_GPUS_LISTED = 2


@dataclass(frozen=True)
class ManySmall:
    """One kind of collective issued many times a step, each small."""

    kind: str
    per_step: float
    calls: int
    kernel_median_us: float
    host_median_us: float  # the issuing op's host time
    issued_in: str  # the op the calls are issued from ("" where none)


@dataclass(frozen=True)
class TorchRecComm:
    """Exposed collective kernel time by TorchRec phase (domain.TORCHREC_*)."""

    pipelined: bool  # a train pipeline starts the next batch's input dist a batch ahead
    input_dist_us: float  # the sparse features' (KJT) all-to-alls
    embeddings_us: float  # the pooled embeddings' all-to-all / reduce-scatter, forward and backward


@dataclass(frozen=True)
class BufferSync:
    """DistributedDataParallel's broadcast of the model's buffers before each forward."""

    broadcasts: int
    per_step: float
    nbytes: int  # per broadcast
    host_us: float  # host time flattening, broadcasting and unflattening the buffers


#: Why a bus bandwidth above the link's peak was measured (explain/communication words it).
ImpossibleWhy = Literal["", "calls_overlap", "down_sampled", "sizes_or_times_wrong"]


@dataclass(frozen=True)
class CommunicationFacts:
    exposed_kernel_us: float  # collective kernels nothing overlaps (transfer and any wait)
    wait_us: float  # GPU idle inside collectives
    peer_wait_us: float  # of it, gloo's exchange beyond what the data needs: waiting for another rank
    issue_us: float  # of it, the host issuing collectives (host-side overhead)
    issuing_calls: int
    overlapped_share: float  # of the collective kernel time
    impossible: tuple[tuple[str, str], ...]  # (kind, group) whose busbw exceeds the link peak
    why_impossible: ImpossibleWhy
    link_name: str  # the link peak's name ("" where unknown)
    link_bytes_per_s: float  # per direction (0 where unknown)
    gloo_on_gpu: bool  # gloo moves this GPU program's tensors through the host
    many_small: ManySmall | None = None
    torchrec: TorchRecComm | None = None
    buffer_sync: BufferSync | None = None
    #: exposed collective kernel time while a host thread sits in a blocking call (it
    #: cannot launch until the collective ends: on the step's critical path)
    host_blocked_us: float = 0.0
    host_paced_us: float = 0.0  # the ledger's launch_overhead + host_bound: the host sets the pace
    down_sampled: bool = False  # events were removed from the trace (model/sampling.py)
    #: (kind, group, ranks) whose group spans nodes (more ranks than the trace's node has
    #: GPUs) and whose busbw is above the network's usual per-GPU rate (model/links.NETWORK):
    #: suspect, not impossible (more NICs per GPU, in-network reduction)
    over_network: tuple[tuple[str, str, int], ...] = ()
    gpus_on_node: int = 0  # the trace's deviceProperties count


@dataclass(frozen=True)
class CollectiveRow:
    """The calls of one (process group, kind) in the window, as a place."""

    kind: str
    group: str
    backend: str
    group_size: int | None
    nbytes: int  # sum of message sizes
    sizes_from: str  # where the sizes come from ("unknown")
    bw_bytes: int  # of it, in calls with a transfer time
    transfer_us: float  # those calls' transfer time
    bus_factor: float | None  # nccl-tests' busbw factor (None: unknown kind)


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


@dataclass(frozen=True)
class _WaitSplit:
    """Where the host was during the GPU's idle inside collectives."""

    exch: list[Call]  # calls with a gloo exchange
    issuing: list[Call]  # calls with a host op that issues them
    in_exchange: float  # idle while the host sat in gloo's exchange
    in_issue: float  # idle while the host issued a call
    queued: float  # the rest: the next queued kernel was a collective


def _host_during_waits(calls: list[Call], wait_iv: np.ndarray, wait_us: float) -> _WaitSplit:
    """Where the host was during the GPU idle inside collectives: in gloo's exchange (the
    program blocked until the other ranks' data arrived), in the op that issues a call
    (host-side overhead), or neither (the next kernel, a collective, was queued)."""
    exch = [c for c in calls if c.exchange >= 0]
    exch_iv = merge_intervals(np.array([c.exchange_ts for c in exch]), np.array([c.exchange_end for c in exch]))
    issuing = [c for c in calls if c.host_ts == c.host_ts and c.exchange != c.root]
    host_iv = subtract(
        merge_intervals(np.array([c.host_ts for c in issuing]), np.array([c.host_end for c in issuing])), exch_iv
    )
    in_exchange = float(overlap(exch_iv, wait_iv[:, 0], wait_iv[:, 1]).sum()) if len(wait_iv) else 0.0
    in_issue = float(overlap(host_iv, wait_iv[:, 0], wait_iv[:, 1]).sum()) if len(wait_iv) else 0.0
    queued = max(wait_us - in_exchange - in_issue, 0.0)
    return _WaitSplit(exch, issuing, in_exchange, in_issue, queued)


def _peer_wait(exch: list[Call], wait_iv: np.ndarray, in_exchange: float) -> float:
    """Waiting for other ranks, from gloo's blocking exchange only: per call, the idle inside
    its exchange beyond what its data needs (the fastest call of its kind and size, or its
    bytes at gloo's loopback rate)."""
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
    return min(peer_wait, in_exchange)


def _issue_overhead_gain(issuing: list[Call], wait_iv: np.ndarray, in_issue: float, n_steps: int) -> float:
    """Host-side overhead: a call's host op keeps the GPU idle while it issues; were a
    step's calls issued as one (bucketed, coalesced), one call's worth per step remains."""
    issue_idle = overlap(wait_iv, np.array([c.host_ts for c in issuing]), np.array([c.host_end for c in issuing]))
    per_call = float(np.median(issue_idle)) if len(issuing) else 0.0
    return max(in_issue - per_call * n_steps, 0.0) if len(issuing) > n_steps else 0.0


@dataclass(frozen=True)
class _Bandwidths:
    """The window's collective bandwidths (nccl-tests' definitions) against the link peak."""

    peak: LinkPeak | None
    on_node: int  # the node's GPUs as deviceProperties lists them (0: unknown)
    kernel_rows: list[_Row]  # the rows with a collective kernel's transfer time
    algbw: float
    busbw: float
    best_busbw: float
    impossible: list[tuple[str, str]]
    over_network: list[tuple[str, str, int]]
    why_impossible: ImpossibleWhy


def _bandwidths(model: TraceModel, rows: list[_Row], calls: list[Call], orphan_kernels: int) -> _Bandwidths:
    """algbw and busbw of the kernel rows, and the (kind, group)s whose best busbw the
    link cannot carry (impossible) or a cross-node group rarely reaches (over_network)."""
    gpu = model.meta.primary_device
    peak = link_peak(gpu.name if gpu is not None else None)
    impossible: list[tuple[str, str]] = []
    over_network: list[tuple[str, str, int]] = []
    # The node's GPUs as deviceProperties lists them; a list of one may be the rank's
    # visible GPU only (CUDA_VISIBLE_DEVICES per rank), which says nothing of the node.
    on_node = len(model.meta.devices) if len(model.meta.devices) >= MIN_NODE_GPUS_LISTED else 0
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
            impossible.append((r.kind, r.group))
        elif spans_nodes(r.group_size, on_node) and best > NETWORK.bytes_per_s and r.group_size:
            over_network.append((r.kind, r.group, r.group_size))
    why_impossible: ImpossibleWhy = ""
    if impossible and peak is not None:
        if _overlapping(calls):
            why_impossible = "calls_overlap"
        elif orphan_kernels:
            why_impossible = "down_sampled"
        else:
            why_impossible = "sizes_or_times_wrong"
    return _Bandwidths(peak, on_node, kernel_rows, algbw, busbw, best_busbw, impossible, over_network, why_impossible)


def analyze(ctx: AnalysisContext) -> list[Found[CommunicationFacts, CollectiveRow]]:
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
    waits = dev.gaps_of("communication")
    wait_iv = waits[["start", "end"]].to_numpy() if len(waits) else np.empty((0, 2))
    wait_us = float(waits["dur"].sum())
    world = model.meta.world_size

    split = _host_during_waits(calls, wait_iv, wait_us)
    exch, issuing, in_exchange, in_issue, queued = (
        split.exch, split.issuing, split.in_exchange, split.in_issue, split.queued
    )  # fmt: skip
    peer_wait = _peer_wait(exch, wait_iv, in_exchange)
    overhead_gain = _issue_overhead_gain(issuing, wait_iv, in_issue, ctx.n_steps)
    rows = _rows(calls, world)
    bw = _bandwidths(model, rows, calls, found.orphan_kernels)
    peak, impossible, over_network, on_node = bw.peak, bw.impossible, bw.over_network, bw.on_node
    total_bytes = sum(r.nbytes for r in rows)
    kernel_rows, algbw, busbw, best_busbw = bw.kernel_rows, bw.algbw, bw.busbw, bw.best_busbw
    why_impossible = bw.why_impossible

    overlapped_share = dev.comm_overlapped_us / dev.comm_us if dev.comm_us > 0 else 0.0
    other_busy = dev.busy_us - exposed_kernels
    gain = min(exposed_kernels, other_busy) + peer_wait + overhead_gain
    gain = min(gain, comm_time)
    sites = _sites(model, rows, wait_iv, dev.busy_classes["communication"])
    evidence = [
        Fact("communication_us", comm_time, "us"),
        Fact("collective_kernel_us", dev.comm_us, "us"),
        Fact("overlapped_share", overlapped_share, "share"),
        Fact("exposed_kernel_us", exposed_kernels, "us"),
        Fact("idle_in_collectives_us", wait_us, "us"),
        Fact("issue_us", in_issue, "us"),
        Fact("in_exchange_us", in_exchange, "us"),
        Fact("queued_us", queued, "us"),
        Fact("waiting_for_ranks_us", peer_wait, "us"),
        Fact("collectives", len(calls), "count"),
        Fact("bytes_moved", total_bytes, "bytes"),
        Fact("sizes_from", ", ".join(sorted({r.sizes_from for r in rows})) or "unknown", "text"),
    ]
    if algbw > 0:
        evidence.append(Fact("algorithm_bandwidth", algbw, "bytes_per_s"))
    if busbw > 0:
        evidence.append(Fact("bus_bandwidth", busbw, "bytes_per_s"))
        evidence.append(Fact("best_bus_bandwidth", best_busbw, "bytes_per_s"))
    if peak is not None and kernel_rows:
        evidence.append(Fact("link_peak", peak.bytes_per_s, "bytes_per_s"))
    if impossible:
        evidence.append(Fact("bandwidth_not_possible", "", "text"))  # text: explain/ words facts.why_impossible
    if over_network:
        evidence.append(Fact("network_rate", NETWORK.bytes_per_s, "bytes_per_s"))
    facts = CommunicationFacts(
        exposed_kernel_us=exposed_kernels,
        wait_us=wait_us,
        peer_wait_us=peer_wait,
        issue_us=in_issue,
        issuing_calls=len(issuing),
        overlapped_share=overlapped_share,
        impossible=tuple(impossible),
        why_impossible=why_impossible,
        link_name=peak.name if peak is not None else "",
        link_bytes_per_s=peak.bytes_per_s if peak is not None else 0.0,
        gloo_on_gpu=any(c.backend == "gloo" for c in calls) and bool(model.gpu_activity().shape[0]),
        over_network=tuple(over_network),
        gpus_on_node=on_node,
    )
    facts = _with_program(ctx, facts, calls, dev.busy_classes["communication"])
    return [
        Found(
            category=Category.COMMUNICATION,
            time_us=comm_time,
            expected_gain_us=gain,
            facts=facts,
            evidence=tuple(evidence),
            places=tuple(sites),
            sources=tuple(dict.fromkeys(s.source for s in sites if s.source is not None)),
            device=dev.device,
        )
    ]


def _sites(model: TraceModel, rows: list[_Row], wait_iv: np.ndarray, exposed: np.ndarray) -> list[Place[CollectiveRow]]:
    """One place per (group, kind): its idle and exposed time, its source."""
    sites: list[Place[CollectiveRow]] = []
    for r in rows[:MAX_SITES]:
        lo, hi = np.array([c.start for c in r.calls]), np.array([c.end for c in r.calls])
        idle = float(overlap(wait_iv, lo, hi).sum()) + float(overlap(exposed, lo, hi).sum())
        # The op that issued the calls names their source; gloo's exchange runs on its own
        # thread, where no Python frame says who asked for it.
        src: PySource | None = (
            None if r.backend == "gloo" else next((user_source(model, c.root) for c in r.calls if c.root >= 0), None)
        )
        row = CollectiveRow(
            r.kind, r.group, r.backend, r.group_size, r.nbytes, r.sizes_from, r.bw_bytes, r.time_us,
            bus_factor(r.kind, r.group_size),
        )  # fmt: skip
        sites.append(Place(count=len(r.calls), facts=row, time_us=idle, ops=(r.kind,), kind=r.kind, source=src))
    return sites


def _exposed_of(exposed: np.ndarray, calls: list[Call]) -> np.ndarray:
    """Each call's collective kernel time that no other GPU work overlaps."""
    if not calls or not len(exposed):
        return np.zeros(len(calls))
    return overlap(exposed, np.array([c.gpu_ts for c in calls]), np.array([c.gpu_end for c in calls]))


def _with_program(
    ctx: AnalysisContext, facts: CommunicationFacts, calls: list[Call], exposed: np.ndarray
) -> CommunicationFacts:
    """The facts that fit the advice to the program: many small calls, TorchRec's phases,
    DDP's buffer broadcast, and how much of the exposed time the host waits for."""
    model, dev = ctx.model, ctx.ledger.primary
    with_k = [c for c in calls if c.kernels]
    exp = _exposed_of(exposed, with_k)
    blocked = 0.0
    rows = ctx.blocking_calls
    if len(rows) and len(exposed):
        last = last_launch_ts(model)
        rows = np.array([r for r in rows.tolist() if not is_profiler_sync(model, r, last)], dtype=np.int64)
        ts, end = model.host["ts"].to_numpy(), model.host["end"].to_numpy()
        if len(rows):
            blocked = float(overlap(merge_intervals(ts[rows], end[rows]), exposed[:, 0], exposed[:, 1]).sum())
    paced = dev.by_cause.get("launch_overhead", 0.0) + dev.by_cause.get("host_bound", 0.0) if dev else 0.0
    return replace(
        facts,
        many_small=_many_small(ctx, with_k),
        torchrec=_torchrec(model, with_k, exp),
        buffer_sync=_buffer_sync(ctx, calls),
        host_blocked_us=blocked,
        host_paced_us=paced,
        down_sampled=ctx.down_sampled is not None,
    )


def _many_small(ctx: AnalysisContext, calls: list[Call]) -> ManySmall | None:
    by: dict[str, list[Call]] = defaultdict(list)
    for c in calls:
        by[c.kind].append(c)
    if not by:
        return None
    kind, cs = max(by.items(), key=lambda kv: len(kv[1]))
    per_step = len(cs) / max(ctx.n_steps, 1)
    kmed = float(np.median([c.gpu_end - c.gpu_ts for c in cs]))
    if per_step < MANY_CALLS_PER_STEP or kmed > SMALL_KERNEL_US:
        return None
    hosted = [c for c in cs if c.root >= 0]
    hmed = float(np.median([c.host_end - c.host_ts for c in hosted])) if hosted else 0.0
    model = ctx.model
    parents = [model.arrays.parent_list[c.root] for c in hosted]
    named = [model.arrays.name(p) for p in parents if p >= 0]
    issued_in = max(set(named), key=named.count) if named else ""
    return ManySmall(kind, per_step, len(cs), kmed, hmed, issued_in)


def _chain_names(model: TraceModel, row: int) -> list[str]:
    return [model.arrays.name(r) for r in model.host_chain(row)] if row >= 0 else []


def _torchrec(model: TraceModel, calls: list[Call], exposed: np.ndarray) -> TorchRecComm | None:
    """Exposed time by TorchRec phase, from the ranges around each call's op."""
    inp = emb = 0.0
    for c, e in zip(calls, exposed.tolist(), strict=True):
        chain = _chain_names(model, c.root)
        if any(m in n for n in chain for m in TORCHREC_EMBEDDING_MARKERS):
            emb += e
        elif any(m in n for n in chain for m in TORCHREC_INPUT_DIST_MARKERS):
            inp += e
    if inp <= 0 and emb <= 0:
        return None
    host = model.host
    ann = host["kind"].to_numpy() == int(Kind.USER_ANNOTATION)
    pipelined = bool((ann & name_matches(host["name"], lambda n: n.startswith(TORCHREC_PIPELINE_MARKERS))).any())
    return TorchRecComm(pipelined, inp, emb)


def _buffer_sync(ctx: AnalysisContext, calls: list[Call]) -> BufferSync | None:
    """DDP's broadcast of the buffers: broadcasts issued inside its forward, with the host
    time of the flatten / unflatten around them."""
    model = ctx.model
    mine = [c for c in calls if c.kind == "broadcast" and c.root >= 0 and DDP_FORWARD in _chain_names(model, c.root)]
    if not mine:
        return None
    host = model.host
    parent = host["parent"].to_numpy()
    fwd = {r for c in mine for r in model.host_chain(c.root) if model.arrays.name(r) == DDP_FORWARD}
    around = np.flatnonzero(name_matches(host["name"], DDP_BUFFER_OPS.__contains__) & np.isin(parent, list(fwd)))
    host_us = float(host["dur"].to_numpy()[around].sum()) + sum(c.host_end - c.host_ts for c in mine)
    if host_us < BUFFER_SYNC_MIN_SHARE * ctx.window_us:
        return None
    nbytes = int(np.median([c.nbytes for c in mine]))
    return BufferSync(len(mine), len(mine) / max(ctx.n_steps, 1), nbytes, host_us)
