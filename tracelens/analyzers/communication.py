"""communication: time the GPU spends in collectives nothing overlaps, or waiting for
the other ranks.

Part of question 1's family (the device waits on something other than its own work).
The ledger gives the time: collective kernels (NCCL/RCCL) that no other GPU work
overlaps (exposed communication), and idle gaps while the host sits in a collective
(gloo runs the collective on the host; a NCCL wait() blocks there) or the next queued
kernel is a collective waiting for its peers. A collective that takes longer than the
fastest call of the same kind is waiting for a slower rank: that excess is what fixing
the straggler (or the imbalance) recovers; the exposed transfer itself is what overlap
(bucketing, async collectives, FSDP prefetch) recovers.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from tracelens.analyzers.base import Category, Fact, Found, Place
from tracelens.derive.context import AnalysisContext
from tracelens.derive.intervals import overlap
from tracelens.domain import DTYPE_BYTES, is_collective_kernel, is_collective_wait_op
from tracelens.model.schema import Kind
from tracelens.model.sources import PySource, user_source
from tracelens.model.trace import name_matches

MAX_SITES = 8
#: gloo all-reduce bandwidth over loopback, measured on the 2-core development machine
#: (1.24 GB/s at 4 MB, 0.88 at 16 MB, 0.54 at 1 MB): a host collective that takes much
#: longer than its bytes at this rate is waiting for another rank, not moving data.
GLOO_ALGBW_BYTES_PER_S = 0.5e9


@dataclass(frozen=True)
class CommunicationFacts:
    per_step_us: float | None  # the communication time per step (None: one step or none)
    exposed_kernel_us: float  # collective kernels nothing overlaps
    wait_us: float  # GPU idle inside collectives
    straggler_wait_us: float  # of it, beyond what the data needs: waiting for another rank
    overlapped_share: float  # of the collective kernel time
    gloo: bool  # GPU tensors moved by gloo, through the host
    unit: str = "step"  # the report's unit (AnalysisContext.unit) per_step_us is in


@dataclass(frozen=True)
class Collective:
    op: str


def analyze(ctx: AnalysisContext) -> list[Found[CommunicationFacts, Collective]]:
    dev = ctx.ledger.primary
    if dev is None:
        return []
    comm_time = dev.by_cause.get("communication", 0.0)
    if comm_time <= 0 and dev.comm_us <= 0:
        return []
    model = ctx.model
    host = model.host
    exposed_kernels = float(sum(b - a for a, b in dev.busy_classes["communication"]))
    waits = dev.gaps[dev.gaps["cause"] == "communication"]
    wait_us = float(waits["dur"].sum())

    # The collectives in the window: host ops (gloo/c10d/NCCL) and their durations.
    is_op = np.isin(host["kind"].to_numpy(), [int(Kind.CPU_OP), int(Kind.USER_ANNOTATION)])
    comm_rows = host.index[is_op & name_matches(host["name"], is_collective_wait_op)].to_numpy()
    ts = host["ts"].to_numpy()
    end = host["end"].to_numpy()
    in_win = (end[comm_rows] > dev.window_start) & (ts[comm_rows] < dev.window_end) if len(comm_rows) else []
    comm_rows = comm_rows[in_win] if len(comm_rows) else comm_rows
    # Outermost collective op of each nest, so a c10d::allreduce_ > gloo:all_reduce pair
    # counts once.
    op_root = host["op_root"].to_numpy()
    roots = np.unique(np.where(op_root[comm_rows] >= 0, op_root[comm_rows], comm_rows)) if len(comm_rows) else comm_rows
    roots = np.array([r for r in roots if is_collective_wait_op(model.arrays.name(int(r)))], dtype=np.int64)
    if not len(roots):
        roots = comm_rows

    # Idle while each collective ran, and its excess over the fastest call of its kind.
    by_site: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
    src_of: dict[tuple[str, str], PySource | None] = {}
    durs_by_kind: dict[str, list[float]] = defaultdict(list)
    wait_iv = waits[["start", "end"]].to_numpy() if len(waits) else np.empty((0, 2))
    idle_in = overlap(wait_iv, ts[roots], end[roots]) if len(roots) else np.zeros(0)
    nbytes = 0
    calls: list[tuple[str, float, float, int]] = []  # kind, duration, idle inside, bytes
    last_size = 0
    order = np.argsort(ts[roots], kind="stable") if len(roots) else np.zeros(0, dtype=np.int64)
    roots, idle_in = roots[order], idle_in[order]
    for r, idle in zip(roots, idle_in, strict=True):
        name = model.arrays.name(int(r))
        src = user_source(model, int(r))
        key = (name, src.label if src else "")
        by_site[key][0] += float(idle)
        by_site[key][1] += 1
        src_of[key] = src
        durs_by_kind[name].append(float(end[r] - ts[r]))
        # gloo runs the collective on its own thread, as an op without shapes: its size is
        # that of the c10d op that issued it just before.
        size = _message_bytes(ctx, int(r))
        nbytes += size  # counted once: from the op that carries the shapes
        if size:
            last_size = size
        elif name.startswith("gloo:"):
            size = last_size
        calls.append((name, float(end[r] - ts[r]), float(idle), size))
    # The time a collective needs is its fastest call of the kind (or, on the host, its
    # bytes at gloo's loopback rate, whichever is less); the rest of the idle inside it
    # is waiting for the other ranks.
    fastest = {k: min(v) for k, v in durs_by_kind.items()}
    excess = 0.0
    for name, d, idle, size in calls:
        need = fastest[name]
        if name.startswith("gloo:") and size:
            need = min(need, size / GLOO_ALGBW_BYTES_PER_S * 1e6)
        excess += max(0.0, min(idle, d - need))
    excess = min(excess, wait_us)

    comm_kernels = model.kernels()
    comm_kernels = comm_kernels[
        (comm_kernels["device"] == dev.device)
        & (comm_kernels["end"] > dev.window_start)
        & (comm_kernels["ts"] < dev.window_end)
    ]
    comm_kernels = comm_kernels[name_matches(comm_kernels["name"], is_collective_kernel)]
    n_collectives = len(roots) if len(roots) else len(comm_kernels)
    busy_s = sum(sum(d) for d in durs_by_kind.values()) * 1e-6
    algbw = nbytes / busy_s if busy_s > 0 and nbytes else 0.0

    overlapped_share = dev.comm_overlapped_us / dev.comm_us if dev.comm_us > 0 else 0.0
    # Exposed transfers can at best hide under the rest of the GPU's work.
    other_busy = dev.busy_us - exposed_kernels
    gain = min(exposed_kernels, other_busy) + excess
    gain = min(gain, comm_time)
    ranked = sorted(by_site.items(), key=lambda kv: kv[1][0], reverse=True)[:MAX_SITES]
    places = tuple(
        Place(count=int(n), time_us=idle, facts=Collective(op), ops=(op,), source=src_of[(op, label)])
        for (op, label), (idle, n, _) in ranked
    )
    facts = CommunicationFacts(
        per_step_us=comm_time / ctx.n_steps if ctx.n_steps > 1 and ctx.unit != "window" else None,
        unit=ctx.unit,
        exposed_kernel_us=exposed_kernels,
        wait_us=wait_us,
        straggler_wait_us=excess,
        overlapped_share=overlapped_share,
        gloo=any(name.startswith("gloo:") for name in durs_by_kind) and model.gpu_activity().shape[0] > 0,
    )
    return [
        Found(
            category=Category.COMMUNICATION,
            time_us=comm_time,
            expected_gain_us=gain,
            facts=facts,
            evidence=(
                Fact("communication_us", comm_time, "us"),
                Fact("collective_kernel_us", dev.comm_us, "us"),
                Fact("overlapped_share", overlapped_share, "share"),
                Fact("exposed_kernel_us", exposed_kernels, "us"),
                Fact("idle_in_collectives_us", wait_us, "us"),
                Fact("collectives", n_collectives, "count"),
                Fact("waiting_for_ranks_us", excess, "us"),
                Fact("bytes_moved", nbytes, "bytes"),
                Fact("algorithm_bandwidth", algbw, "bytes_per_s"),
            ),
            places=places,
            sources=tuple(dict.fromkeys(p.source for p in places if p.source is not None)),
            device=dev.device,
        )
    ]


def _message_bytes(ctx: AnalysisContext, row: int) -> int:
    """Bytes of a collective's first input, from its recorded shape and dtype."""
    try:
        shapes = ctx.model.op_shapes(row)
    except (ValueError, TypeError):
        return 0
    dims = shapes.get("Input Dims") or []
    types = shapes.get("Input type") or []
    for i, d in enumerate(dims):
        if isinstance(d, list) and d and all(isinstance(x, int) for x in d):
            n = int(np.prod(d))
            t = types[i] if i < len(types) else "float"
            return n * DTYPE_BYTES.get(str(t), 4)
        if isinstance(d, list) and d and isinstance(d[0], list):  # a TensorList
            t = types[i] if i < len(types) else "float"
            return sum(int(np.prod(x)) for x in d if isinstance(x, list)) * DTYPE_BYTES.get(str(t), 4)
    return 0
