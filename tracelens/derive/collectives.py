"""One rank's collectives, one logical call each, with the message each moved.

A trace records one collective several times over: `c10d::allreduce_` (the op the
program called), one or two `record_param_comms` inside it (one carries the call's
sizes; from ~2022 a second one, or one of collective "wait", stands for `work.wait()`),
the backend's annotation (`nccl:all_reduce`, or `gloo:all_reduce` on gloo's worker
thread), and on the GPU the NCCL/RCCL kernel(s) with, from ~2024, the same sizes in
their args. HTA's df_index_resolver trace holds 2,020 all-reduces as 2,020 c10d ops,
4,040 record_param_comms, 2,020 annotations and 2,020 kernels. Here they become 2,020
calls:

- host ops of collectives nested in one another on one thread are one call (the
  outermost is its root); a `record_param_comms` that stands alone, holds no backend
  annotation and says nothing or "wait" is a wait on an earlier call, not a call;
- gloo's worker-thread op (`gloo:all_reduce`, where the exchange happens) belongs to the
  oldest call of the same kind issued before it that has none yet (gloo runs a process
  group's work in the order it was issued);
- a collective kernel belongs to the call whose op launched it (its launch's ancestors);
  one whose launch is not in the trace (a down-sampled trace) is a call of its own.

The message size, as nccl-tests counts it (its `size`, the `S` of algbw = S / t): the
buffer of an all-reduce, broadcast or reduce; the gathered whole of an all-gather (the
output) and the scattered whole of a reduce-scatter (the input); all that one rank sends
in an all-to-all; the message of a send/recv. From the call's record (record_param_comms
args: In/Out msg nelems, dtype), else its kernel's args, else the shapes of its ops
(record_shapes), else unknown; `size_source` says which.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tracelens.domain import dtype_bytes, is_collective_kernel, is_collective_wait_op
from tracelens.model.schema import CommArgs, Kind
from tracelens.model.trace import HostArrays, TraceModel, name_matches

#: Collective kinds by name fragment (lower case, underscores removed), in match order.
_KIND_MARKERS = (
    ("allreduce", "all_reduce"),
    ("allgather", "all_gather"),
    ("reducescatter", "reduce_scatter"),
    ("alltoall", "all_to_all"),
    ("broadcast", "broadcast"),
    ("barrier", "barrier"),
    ("sendrecv", "send_recv"),
    ("send", "send_recv"),
    ("recv", "send_recv"),
    ("reduce", "reduce"),
    ("gather", "gather"),
    ("scatter", "scatter"),
)
#: Collectives whose ranks finish together (used to align clocks). A broadcast or a
#: point-to-point send can end on the sender before the receiver has it.
SYNC_KINDS = frozenset({"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "barrier", "send_recv"})


def collective_kind(name: str) -> str:
    """all_reduce, all_gather, reduce_scatter, all_to_all, broadcast, barrier, send_recv,
    reduce, gather, scatter or other, from an op, annotation, kernel or record name."""
    low = name.lower().replace("_", "")
    for marker, kind in _KIND_MARKERS:
        if marker in low:
            return kind
    return "other"


def elem_bytes(dtype: str | None) -> int | None:
    """Bytes per element of a collective's dtype (a record's "BFloat16", a shape's
    "c10::BFloat16"): the domain's table."""
    return dtype_bytes(dtype)


def bus_factor(kind: str, n: int | None) -> float | None:
    """nccl-tests' bus bandwidth factor (its PERFORMANCE.md): what each rank's busiest link
    carries per byte of the message S, for n ranks; None when n is unknown or the kind
    moves no data (a barrier)."""
    if kind in ("broadcast", "reduce", "send_recv", "gather", "scatter"):
        return 1.0
    if not n or n < 1 or kind in ("barrier", "other"):
        return None
    if kind == "all_reduce":
        return 2.0 * (n - 1) / n
    if kind in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    return None


#: Where a call's message size came from.
SIZE_FROM_RECORD = "record_param_comms args"
SIZE_FROM_KERNEL = "NCCL kernel args"
SIZE_FROM_SHAPES = "op shapes"
SIZE_UNKNOWN = ""


@dataclass(frozen=True)
class Call:
    """One logical collective call on this rank."""

    kind: str
    backend: str  # "nccl" (also RCCL), "gloo", or "" when the trace does not say
    group: str  # process group name; else "<backend>:stream<N>" for kernels, "<backend>"
    group_desc: str
    group_size: int | None
    seq: int  # the group's sequence number where recorded, else -1
    root: int  # host row of its outermost op, -1 for a kernel alone
    tid: int  # the issuing thread (-1 without a host op)
    host_ts: float  # the issuing op's span (NaN without one)
    host_end: float
    kernels: tuple[int, ...]  # GPU rows of its collective kernels
    device: int  # the kernels' GPU, -1 without kernels
    gpu_ts: float  # first kernel start, last kernel end (NaN without kernels)
    gpu_end: float
    exchange: int  # gloo's worker-thread op (host row), -1 if none
    exchange_ts: float
    exchange_end: float
    in_nelems: int | None
    out_nelems: int | None
    dtype: str | None
    nbytes: int  # nccl-tests' size S (0 when unknown)
    size_source: str  # SIZE_FROM_* or SIZE_UNKNOWN

    @property
    def start(self) -> float:
        """When the data exchange can begin on this rank: the kernel, gloo's op, else the op."""
        for t in (self.gpu_ts, self.exchange_ts, self.host_ts):
            if t == t:  # not NaN
                return t
        return float("nan")

    @property
    def end(self) -> float:
        for t in (self.gpu_end, self.exchange_end, self.host_end):
            if t == t:
                return t
        return float("nan")

    @property
    def source(self) -> str:
        return "kernel" if self.kernels else "host"


@dataclass(frozen=True)
class Collectives:
    calls: list[Call]  # in start order
    waits: int  # record_param_comms of waits (work.wait()), not calls
    records: int  # host ops and kernels of collectives the calls were made from
    notes: list[str] = field(default_factory=list)
    orphan_kernels: int = 0  # collective kernels without a host op (a down-sampled or cut trace)

    def between(self, lo: float, hi: float) -> list[Call]:
        """The calls that overlap [lo, hi)."""
        return [c for c in self.calls if c.end > lo and c.start < hi]


def collectives(model: TraceModel) -> Collectives:
    """The model's logical collective calls (AnalysisContext.collectives keeps them)."""
    return _build(model)


def _backend_of(names: list[str], has_kernels: bool, dist_backend: str) -> str:
    if any(n.startswith("gloo:") for n in names):
        return "gloo"
    if has_kernels or any(n.startswith("nccl:") for n in names):
        return "nccl"
    return dist_backend


def _kernel_owners(
    model: TraceModel, root_of: dict[int, int], members: dict[int, list[int]]
) -> tuple[dict[int, list[int]], list[int], np.ndarray]:
    """Collective kernels, attached to the call whose op launched them: (call root ->
    its kernels, kernels with no call, every collective kernel's row). An op that is no
    c10d one but launched one (vLLM's symm_mem) becomes a call: `root_of` and `members`
    gain it."""
    host = model.host
    parent = model.arrays.parent_list
    gpu = model.gpu
    kern = gpu[(gpu["kind"] == Kind.KERNEL).to_numpy() & name_matches(gpu["name"], is_collective_kernel)]
    k_rows = kern.index.to_numpy()
    k_launch = kern["launch"].to_numpy() if "launch" in kern else np.full(len(kern), -1)
    kernels_of: dict[int, list[int]] = {}
    orphans: list[int] = []
    op_of = host["op"].to_numpy()
    for k, launch in zip(k_rows.tolist(), k_launch.tolist(), strict=True):
        owner = -1
        x = int(launch)
        hops = 0
        while x >= 0 and hops < 64:
            if x in root_of:
                owner = root_of[x]
                break
            x = parent[x]
            hops += 1
        if owner < 0 and launch >= 0 and op_of[int(launch)] >= 0:
            # Launched by an op that is not a c10d/record_param_comms one (vLLM's
            # symm_mem::multimem_all_reduce_): that op is the call.
            owner = int(op_of[int(launch)])
            if owner not in members:
                members[owner] = [owner]
                root_of[owner] = owner
        if owner >= 0:
            kernels_of.setdefault(owner, []).append(k)
        else:
            orphans.append(k)
    return kernels_of, orphans, k_rows


def _gloo_exchanges(
    names: HostArrays,
    ts: np.ndarray,
    calls: list[dict[str, Any]],
    kernels_of: dict[int, list[int]],
    gloo_workers: list[int],
) -> dict[int, int]:
    """gloo's worker ops, in start order, to the oldest call of their kind issued before
    them that has no exchange yet (call root -> worker op row); a worker op whose call was
    issued before the trace began becomes a call of its own (appended to `calls`)."""
    exchange_of: dict[int, int] = {}
    if gloo_workers:
        pending: dict[str, list[int]] = {}
        for c in sorted(calls, key=lambda c: float(ts[c["root"]])):
            if c["root"] not in kernels_of:
                rn = [names.name(r) for r in c["rows"]]
                pending.setdefault(_kind_of(_naming_row_name(rn), c["rec"]), []).append(c["root"])
        for g in sorted(gloo_workers, key=lambda r: float(ts[r])):
            queue = pending.get(collective_kind(names.name(g)), [])
            while queue and exchange_of.get(queue[0], -1) >= 0:
                queue.pop(0)
            if queue and float(ts[queue[0]]) <= float(ts[g]):
                exchange_of[queue.pop(0)] = g
            else:  # its op was issued before the trace began: a call of its own
                calls.append({"root": g, "rows": [g], "rec": None, "gloo_only": True})
    return exchange_of


def _build(model: TraceModel) -> Collectives:
    host = model.host
    names = model.arrays
    dist = model.meta.metadata.get("distributedInfo")
    dist_backend = str(dist.get("backend", "") or "") if isinstance(dist, dict) else ""
    kind_col = host["kind"].to_numpy()
    is_opish = np.isin(kind_col, [int(Kind.CPU_OP), int(Kind.USER_ANNOTATION)])
    comm_mask = is_opish & name_matches(host["name"], is_collective_wait_op)
    comm_rows = np.flatnonzero(comm_mask)
    parent = names.parent_list
    in_comm = set(comm_rows.tolist())
    root_of: dict[int, int] = {}
    for r in comm_rows.tolist():
        x = r
        while parent[x] >= 0 and parent[x] in in_comm:
            x = parent[x]
        root_of[r] = x
    members: dict[int, list[int]] = {}
    for r, root in root_of.items():
        members.setdefault(root, []).append(r)

    ext = host["external_id"].to_numpy()
    ts, end, tid = host["ts"].to_numpy(), host["end"].to_numpy(), host["tid"].to_numpy()
    host_args = {a.external_id: a for a in model.comm_args if not a.on_gpu and a.external_id >= 0}
    gpu_args = {a.correlation: a for a in model.comm_args if a.on_gpu and a.correlation >= 0}

    gpu = model.gpu
    kernels_of, orphans, k_rows = _kernel_owners(model, root_of, members)
    calls: list[dict[str, Any]] = []
    waits = 0
    gloo_workers: list[int] = []
    for root, rows in members.items():
        rnames = [names.name(r) for r in rows]
        rec = next((host_args[int(ext[r])] for r in rows if int(ext[r]) in host_args
                    and host_args[int(ext[r])].collective.lower() != "wait"), None)  # fmt: skip
        said_wait = any(int(ext[r]) in host_args and host_args[int(ext[r])].collective.lower() == "wait" for r in rows)
        root_name = names.name(root)
        has_backend = any(n.startswith(("nccl:", "gloo:")) for n in rnames)
        waiting = root_name.startswith("record_param_comms") or said_wait or "wait" in root_name.lower()
        if root not in kernels_of and rec is None and not has_backend and waiting:
            waits += 1  # work.wait(): the host waits on an earlier call, it issues none
            continue
        if root_name.startswith("gloo:") and root not in kernels_of:
            gloo_workers.append(root)  # gloo's worker thread: joined to its call below
            continue
        calls.append({"root": root, "rows": rows, "rec": rec})

    exchange_of = _gloo_exchanges(names, ts, calls, kernels_of, gloo_workers)
    g_ts, g_end = gpu["ts"].to_numpy(), gpu["end"].to_numpy()
    g_dev, g_stream, g_corr = gpu["device"].to_numpy(), gpu["stream"].to_numpy(), gpu["correlation"].to_numpy()
    out: list[Call] = []
    nan = float("nan")
    for c in calls:
        root, rows, rec = c["root"], c["rows"], c["rec"]
        ks = sorted(kernels_of.get(root, []), key=lambda k: float(g_ts[k]))
        krec = next((gpu_args[int(g_corr[k])] for k in ks if int(g_corr[k]) in gpu_args), None)
        rnames = [names.name(r) for r in rows]
        kind = _kind_of(_naming_row_name(rnames), rec or krec)
        exch = exchange_of.get(root, root if c.get("gloo_only") else -1)
        backend = _backend_of(rnames + ([names.name(exch)] if exch >= 0 else []), bool(ks), dist_backend)
        nbytes, source, inn, outn, dtype = _message(model, kind, rows, rec, krec)
        meta = rec or krec
        group = meta.pg_name if meta is not None and meta.pg_name is not None else ""
        if not group:
            group = f"{backend or 'nccl'}:stream{int(g_stream[ks[0]])}" if ks else (backend or "default")
        is_host = not c.get("gloo_only")
        out.append(
            Call(
                kind=kind, backend=backend, group=group, group_desc=(meta.pg_desc or "") if meta is not None else "",
                group_size=meta.group_size if meta is not None else None,
                seq=meta.seq if meta is not None and meta.seq is not None else -1,
                root=root if is_host else -1, tid=int(tid[root]) if is_host else -1,
                host_ts=float(ts[root]) if is_host else nan, host_end=float(end[root]) if is_host else nan,
                kernels=tuple(ks), device=int(g_dev[ks[0]]) if ks else -1,
                gpu_ts=float(g_ts[ks[0]]) if ks else nan, gpu_end=float(max(g_end[k] for k in ks)) if ks else nan,
                exchange=exch, exchange_ts=float(ts[exch]) if exch >= 0 else nan,
                exchange_end=float(end[exch]) if exch >= 0 else nan,
                in_nelems=inn, out_nelems=outn, dtype=dtype, nbytes=nbytes, size_source=source,
            )
        )  # fmt: skip
    for k in orphans:
        krec = gpu_args.get(int(g_corr[k]))
        kind = _kind_of(str(gpu["name"].iat[k]), krec)
        nbytes, source, inn, outn, dtype = _message(model, kind, [], None, krec)
        group = krec.pg_name if krec is not None and krec.pg_name is not None else f"nccl:stream{int(g_stream[k])}"
        out.append(
            Call(
                kind=kind, backend="nccl", group=group, group_desc=(krec.pg_desc or "") if krec else "",
                group_size=krec.group_size if krec else None, seq=krec.seq if krec and krec.seq is not None else -1,
                root=-1, tid=-1, host_ts=nan, host_end=nan, kernels=(k,), device=int(g_dev[k]),
                gpu_ts=float(g_ts[k]), gpu_end=float(g_end[k]), exchange=-1, exchange_ts=nan, exchange_end=nan,
                in_nelems=inn, out_nelems=outn, dtype=dtype, nbytes=nbytes, size_source=source,
            )
        )  # fmt: skip
    out.sort(key=lambda c: c.start)
    notes = []
    if orphans:
        notes.append(
            f"{len(orphans)} collective kernels have no host op in the trace (a down-sampled or cut trace): each is "
            "counted as one call, its size from its own args where it has them"
        )
    return Collectives(
        calls=out, waits=waits, records=len(comm_rows) + len(k_rows), notes=notes, orphan_kernels=len(orphans)
    )


def _naming_row_name(names: list[str]) -> str:
    """The name that says what a call is: its c10d op, else its backend annotation, else
    any member whose name names a kind (not record_param_comms)."""
    for prefix in ("c10d::", "nccl:", "gloo:"):
        for n in names:
            if n.startswith(prefix):
                return n
    return next((n for n in names if collective_kind(n) != "other"), names[0] if names else "")


def _kind_of(root_name: str, rec: CommArgs | None) -> str:
    if rec is not None and rec.collective and collective_kind(rec.collective) != "other":
        kind = collective_kind(rec.collective)
        if kind == "send_recv" and collective_kind(root_name) == "all_to_all":
            return "all_to_all"  # all-to-all runs as grouped send/recv
        return kind
    return collective_kind(root_name)


def _message(
    model: TraceModel, kind: str, rows: list[int], rec: CommArgs | None, krec: CommArgs | None
) -> tuple[int, str, int | None, int | None, str | None]:
    """(size S in bytes, where it came from, in nelems, out nelems, dtype)."""
    for r, source in ((rec, SIZE_FROM_RECORD), (krec, SIZE_FROM_KERNEL)):
        if r is None:
            continue
        eb = elem_bytes(r.dtype)
        inn, outn = r.in_nelems, r.out_nelems
        if eb is None or (not inn and not outn):
            continue
        n = size_elements(kind, inn, outn, r.group_size)
        if n:
            return n * eb, source, inn, outn, r.dtype
    for row in rows:
        got = _shape_size(model, row, kind)
        if got is not None:
            n, dtype = got
            eb = elem_bytes(dtype) or 4
            return n * eb, SIZE_FROM_SHAPES, None, None, dtype
    return 0, SIZE_UNKNOWN, None, None, None


def size_elements(kind: str, in_nelems: int | None, out_nelems: int | None, group_size: int | None) -> int:
    """nccl-tests' size in elements, from a record's per-rank in/out element counts."""
    inn, outn, n = in_nelems or 0, out_nelems or 0, group_size or 0
    if kind == "all_gather":
        return outn or (inn * n)
    if kind == "reduce_scatter":
        return inn or (outn * n)
    return inn or outn


def _tensor_dims(d: object) -> list[list[int]]:
    """The tensors of one shape arg: a tensor [a, b], or a TensorList [[a, b], [c]]."""
    if isinstance(d, list) and d and all(isinstance(x, int) for x in d):
        return [d]
    if isinstance(d, list) and d and all(isinstance(x, list) for x in d):
        out: list[list[int]] = []
        for x in d:
            out.extend(_tensor_dims(x))
        return out
    return []


#: Which shape arg of a c10d op is the message: the output of an all-gather (the whole),
#: the input of a reduce-scatter or an all-to-all, else the first (the tensor itself).
_SHAPE_ARG = {"all_gather": 0, "reduce_scatter": 1, "all_to_all": 1}


def _shape_size(model: TraceModel, row: int, kind: str) -> tuple[int, str] | None:
    try:
        shapes = model.op_shapes(row)
    except (ValueError, TypeError):
        return None
    dims = shapes.get("Input Dims") or shapes.get("Input dims") or []
    types = shapes.get("Input type") or []
    name = model.arrays.name(row)
    which = _SHAPE_ARG.get(kind, 0) if name.startswith("c10d::") else 0
    order = [which, *[i for i in range(len(dims)) if i != which]]
    for i in order:
        if i >= len(dims):
            continue
        tensors = _tensor_dims(dims[i])
        if not tensors:
            continue
        t = types[i] if i < len(types) else "float"
        if isinstance(t, list):  # a TensorList's types
            t = t[0] if t else "float"
        n = int(sum(int(np.prod(x)) for x in tensors))
        if n <= 0:
            continue
        return n, str(t)
    return None


def group_ranks(text: str | None) -> list[int] | None:
    """Process Group Ranks ("[0, 1]", a string in the trace) as a list."""
    if not text:
        return None
    try:
        got = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return None
    return [int(x) for x in got] if isinstance(got, list | tuple) and all(isinstance(x, int) for x in got) else None
