"""Host rows the ledger and the analyzers classify: calls that block until the device
catches up (one per logical call), the one-off start-up work (graph capture regions,
graph instantiation, cold first launches), and host intervals by name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np
import pandas as pd

from tracelens.derive.intervals import merge_intervals
from tracelens.domain import (
    ASYNC_COPY_APIS,
    CAPTURE_BEGIN_APIS,
    CAPTURE_END_APIS,
    CAPTURE_TOOL_FRAMES,
    GRAPH_INSTANTIATE_APIS,
    HARNESS_MARKERS,
    LAUNCH_APIS,
    PROFILER_FRAMES,
    SYNC_APIS,
)
from tracelens.model.schema import Kind
from tracelens.model.sources import in_profiler, python_stack
from tracelens.model.trace import TraceModel, name_matches

#: A kernel or graph launch call this long is a cold first launch (lazy module loading,
#: a graph's upload): 6.54 ms for mi250_minitoy's first hipLaunchKernel and 1.69 ms for
#: rank0.json's first cudaGraphLaunch, where steady launches take 3-12 µs.
COLD_LAUNCH_MIN_US = 1_000.0


def _calls(model: TraceModel) -> pd.DataFrame:
    host = model.host
    return host[(host["kind"] == Kind.RUNTIME) | (host["kind"] == Kind.DRIVER)]


def blocking_call_rows(model: TraceModel) -> np.ndarray:
    """Host rows of calls that block until the device catches up: synchronizes, and copy
    calls whose host side is pageable memory."""
    calls = _calls(model)
    rows = calls.index[name_matches(calls["name"], SYNC_APIS.__contains__)].to_numpy()
    copies = calls.index[name_matches(calls["name"], ASYNC_COPY_APIS.__contains__)].to_numpy()
    if len(copies):
        gpu = model.gpu
        mc = gpu[(gpu["kind"] == Kind.MEMCPY) & (gpu["launch"] >= 0)]
        pageable = mc[name_matches(mc["name"], lambda n: "Pageable" in n)]["launch"].to_numpy()
        rows = np.union1d(rows, np.intersect1d(copies, pageable))
    return np.sort(rows.astype(np.int64))


#: Copy activities whose call never waits for the device: device to device, and a host
#: side in pinned memory (the call only queues it). sdpa_u's eager masked_fill clones
#: its scores with a 15 µs DtoD cudaMemcpyAsync while the host ran 6 ms ahead of the GPU:
#: a queued kernel that ended inside the call read as the call's wait, and the SDPA
#: replay then held the host 2.7 ms on it (the after step predicted 1.08 ms, 0.39 measured).
_QUEUED_COPY_MARKERS = ("DtoD", "Device -> Device", "DeviceToDevice", "Pinned")


def queued_copy_call_rows(model: TraceModel) -> np.ndarray:
    """Host rows of copy calls whose copy only queues: device to device, or to or from
    pinned host memory (sorted)."""
    gpu = model.gpu
    mc = gpu[(gpu["kind"] == Kind.MEMCPY) & (gpu["launch"] >= 0)]
    if mc.empty:
        return np.empty(0, dtype=np.int64)
    queued = name_matches(mc["name"], lambda n: any(m in n for m in _QUEUED_COPY_MARKERS))
    return np.unique(mc["launch"].to_numpy()[queued].astype(np.int64))


def one_per_call(model: TraceModel, rows: np.ndarray) -> np.ndarray:
    """Of blocking-call rows (sorted), one per logical call. A pageable `.tolist()` or
    `.cpu()` is a cudaMemcpyAsync and then a cudaStreamSynchronize inside one
    `aten::copy_`/`aten::_local_scalar_dense`: the host waits once (256 `.tolist()` were
    counted as 512), so a blocking copy that shares its op with a synchronize is dropped.
    Several synchronizes in one op (an autotuner timing 16 configs) are 16 waits."""
    if not len(rows):
        return rows
    names = model.arrays.name_table
    codes = model.arrays.name_codes[rows]
    is_sync = np.fromiter((names[c] in SYNC_APIS for c in codes), dtype=bool, count=len(rows))
    op = model.host["op"].to_numpy()[rows]
    sync_ops = set(op[is_sync & (op >= 0)].tolist())
    keep = is_sync | (op < 0) | ~np.isin(op, list(sync_ops))
    out: np.ndarray = rows[keep]
    return out


def startup_intervals(model: TraceModel) -> np.ndarray:
    """Host intervals of one-off start-up work (see the module: graph capture regions,
    graph instantiation, cold first launches), sorted and disjoint."""
    host = model.host
    if host.empty:
        return np.empty((0, 2))
    kind = host["kind"].to_numpy()
    call = (kind == Kind.RUNTIME) | (kind == Kind.DRIVER)
    ts, end = host["ts"].to_numpy(), host["end"].to_numpy()
    begin = np.flatnonzero(call & name_matches(host["name"], CAPTURE_BEGIN_APIS.__contains__))
    stop = np.flatnonzero(call & name_matches(host["name"], CAPTURE_END_APIS.__contains__))
    inst = call & name_matches(host["name"], GRAPH_INSTANTIATE_APIS.__contains__)
    cold = call & name_matches(host["name"], LAUNCH_APIS.__contains__) & (end - ts >= COLD_LAUNCH_MIN_US)
    # torch.cuda.graph's own Python around a capture (its synchronize, gc.collect and
    # empty_cache before capture_begin, capture_end after) is the capture's too
    graph_py = (kind == Kind.PYTHON) & name_matches(host["name"], lambda n: "torch/cuda/graphs.py" in n)
    starts, ends = [ts[inst | cold | graph_py]], [end[inst | cold | graph_py]]
    if len(begin) and len(stop):
        thread = host["pid"].to_numpy() * 1_000_003 + host["tid"].to_numpy()
        for b in begin:
            later = stop[(thread[stop] == thread[b]) & (ts[stop] >= ts[b])]
            if len(later):
                starts.append(np.array([ts[b]]))
                ends.append(np.array([float(end[later].min())]))
    return merge_intervals(np.concatenate(starts), np.concatenate(ends))


def _rows_intervals(model: TraceModel, mask: np.ndarray) -> np.ndarray:
    host = model.host
    return merge_intervals(host["ts"].to_numpy()[mask], host["end"].to_numpy()[mask])


def named_intervals(model: TraceModel, predicate: Callable[[str], bool], kinds: Iterable[Kind]) -> np.ndarray:
    host = model.host
    kind_mask = np.isin(host["kind"].to_numpy(), [int(k) for k in kinds])
    if not kind_mask.any():
        return np.empty((0, 2))
    return _rows_intervals(model, kind_mask & name_matches(host["name"], predicate))


def harness_intervals(model: TraceModel) -> np.ndarray:
    """Host intervals of a benchmark harness's own method between its timed regions
    (domain.HARNESS_MARKERS: PARAM's [param|clear_cache], warm-up ranges)."""
    return named_intervals(
        model,
        lambda n: any(m in n.lower() for m in HARNESS_MARKERS),
        (Kind.USER_ANNOTATION, Kind.PYTHON),
    )


def profiler_intervals(model: TraceModel) -> np.ndarray:
    """Host intervals of the profiler's own work: torch.profiler's Python frames, and the
    frames of the capturing tool (tracelens capture) under which no op ran: its own
    bookkeeping, such as the gc.collect() at the start of a recording (3.54 s inside the
    first ProfilerStep of sample_traces/capture_compile), on a thread that runs ops. The
    tool's frames that run the user's script hold its ops and are not overhead; its own
    threads (the window timer, the NVML sampler) run beside the program."""
    host = model.host
    kind = host["kind"].to_numpy()
    py = kind == Kind.PYTHON
    if not py.any():
        return np.empty((0, 2))
    names = host["name"]
    prof = py & name_matches(names, lambda n: any(m in n for m in PROFILER_FRAMES))
    tool = np.flatnonzero(py & name_matches(names, lambda n: any(m in n for m in CAPTURE_TOOL_FRAMES)))
    ts, end = host["ts"].to_numpy(), host["end"].to_numpy()
    if len(tool):
        thread = host["pid"].to_numpy().astype(np.int64) * 1_000_003 + host["tid"].to_numpy().astype(np.int64)
        ops = np.flatnonzero((kind == Kind.CPU_OP) | (kind == Kind.USER_ANNOTATION) | (kind == Kind.RUNTIME))
        for t in np.unique(thread[tool]):
            mine = tool[thread[tool] == t]
            op_ts = np.sort(ts[ops[thread[ops] == t]])
            if not len(op_ts):
                continue  # the tool's own threads (its timer, the NVML sampler) idle beside the run
            inside = np.searchsorted(op_ts, end[mine], side="left") - np.searchsorted(op_ts, ts[mine], side="left")
            prof[mine[inside == 0]] = True
    return merge_intervals(ts[prof], end[prof])


def last_launch_ts(model: TraceModel) -> float:
    """Host start of the last call that launched GPU work (inf when none did)."""
    launch = model.gpu["launch"].to_numpy() if len(model.gpu) else np.empty(0, dtype=np.int64)
    launched = launch[launch >= 0]
    return float(model.host["ts"].to_numpy()[launched].max()) if len(launched) else float("inf")


def is_profiler_sync(model: TraceModel, row: int, last_launch: float) -> bool:
    """The profiler's own synchronize at the end of the window (torch.profiler's stop
    waits for the device), not the program's: inside the profiler's frames, or a device
    synchronize outside any op after the last launch."""
    if python_stack(model, row):
        return in_profiler(model, row)
    return (
        model.arrays.name(row) in ("cudaDeviceSynchronize", "hipDeviceSynchronize")
        and int(model.arrays.op[row]) < 0
        and float(model.host["ts"].to_numpy()[row]) >= last_launch
    )
