"""Per-kernel hardware counters, paired with the trace's kernels (issue 35).

The model holds the counter records as read (model/counters.py). Here each record is
interpreted (FLOPs by precision, an FMA counting two; DRAM bytes read + written; thread
instructions) and paired with the kernel it measured:

- a trace with kernel events (a `capture --counters` trace): the records of the counters
  pass's step(s) are aligned with the trace's kernels of the same ProfilerStep(s) in launch
  order, by the kernel's own function name and launch shape (Nsight Compute and CUPTI
  demangle differently, so only the identifier is compared, as bench/ncu_compare.py does);
  the launches of every other step get the values of their *signature* (kernel name, grid,
  block, launching op and its input shapes) where one of its launches was measured;
- a trace without kernel events (Kineto's range-profiler mode records none): record i is
  the kernel of the i-th kernel-launch call (HTA pairs them the same way), which names its op;
  such counters have no timeline: FLOPs and bytes, but no rates.

The result is computed once per analysis context and shared (AnalysisContext.kernel_counters,
which the roofline is given).
"""

from __future__ import annotations

import difflib
import math
import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from tracelens.domain import KERNEL_LAUNCH_APIS
from tracelens.model.counter_metrics import (
    CUDA_CORE_FLOP_METRICS,
    CUDA_CORE_ROOFS,
    DRAM_READ,
    DRAM_WRITE,
    TENSOR_FLOPS_PER_OP,
    TENSOR_INSTRUCTIONS,
    THREADS_PER_WARP,
    WARP_INSTRUCTIONS,
    tensor_flop_metrics,
    tensor_unit,
)
from tracelens.model.counters import CounterRecord, CounterSet
from tracelens.model.schema import NVML_TRACK_PREFIX, Kind
from tracelens.model.trace import TraceModel

#: Pairing by launch order is trusted when at least this share of the records found their
#: kernel; below it the sequences differ (another step, another program) and nothing is paired.
MIN_PAIRED_SHARE = 0.5


@dataclass(frozen=True)
class LaunchCounters:
    """One counter record, interpreted."""

    record: int
    name: str
    #: FLOPs by precision and where they ran: "fp64", "fp32", "fp16" (CUDA cores) and
    #: "tensor bf16", "tensor tf32", ... (tensor cores, where their counters were collected).
    flops_by_precision: dict[str, float]
    cuda_core_counted: bool  # the CUDA-core FP instruction counters were collected
    tensor_counted: bool  # tensor-path FLOP counters were collected for this launch
    tensor_instructions: float | None
    dram_bytes: float | None  # read + written; None when not counted
    thread_instructions: float | None
    replay_us: float | None

    @property
    def flops(self) -> float | None:
        """All FLOPs, or None when they were not counted: no FP instruction counters, or
        tensor-core instructions whose FLOPs have no counter (the CUDA-core counts alone
        would understate such a kernel)."""
        if not self.cuda_core_counted or (not self.tensor_counted and (self.tensor_instructions or 0) > 0):
            return None
        return sum(self.flops_by_precision.values())

    def unit_flops(self) -> dict[str, float]:
        """FLOPs by the roofline unit whose peak bounds them (peaks.UNIT_NAMES keys); fp64
        and other work without a roof in the peak table is left out."""
        out: dict[str, float] = {}
        for prec, v in self.flops_by_precision.items():
            unit = prec.removeprefix("tensor ") if prec.startswith("tensor ") else CUDA_CORE_ROOFS.get(prec)
            if unit and unit != "fp64" and v > 0:
                out[unit] = out.get(unit, 0.0) + v
        return out


def interpret(rec: CounterRecord) -> LaunchCounters:
    v = rec.values
    by: dict[str, float] = {}
    cuda_core = False
    for metric, prec, per in CUDA_CORE_FLOP_METRICS:
        if metric in v:
            cuda_core = True
            by[prec] = by.get(prec, 0.0) + v[metric] * per
    tensor_counted = False
    for metric in tensor_flop_metrics(v):
        unit = tensor_unit(metric)
        if unit is not None:
            tensor_counted = True
            key = f"tensor {unit}"
            by[key] = by.get(key, 0.0) + v[metric] * TENSOR_FLOPS_PER_OP
    dram = v[DRAM_READ] + v[DRAM_WRITE] if DRAM_READ in v and DRAM_WRITE in v else None
    warp = v.get(WARP_INSTRUCTIONS)
    return LaunchCounters(
        record=rec.index,
        name=rec.name,
        flops_by_precision=by,
        cuda_core_counted=cuda_core,
        tensor_counted=tensor_counted,
        tensor_instructions=v.get(TENSOR_INSTRUCTIONS),
        dram_bytes=dram,
        thread_instructions=warp * THREADS_PER_WARP if warp is not None else None,
        replay_us=rec.replay_us,
    )


_ID_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def kernel_identifier(name: str) -> str:
    """A kernel's own function name, as Nsight Compute and CUPTI both spell it:
    'void at::native::(anonymous namespace)::foo<...>(...)' -> 'foo'."""
    head = name.removeprefix("void ").replace("<unnamed>", "anon").replace("(anonymous namespace)", "anon")
    depth = 0
    cut = len(head)
    for j, ch in enumerate(head):  # drop template arguments and the parameter list
        if ch == "<":
            if depth == 0 and j > 0:
                cut = j
                break
            depth += 1
        elif ch == "(" and depth == 0:
            cut = j
            break
    ids = _ID_RE.findall(head[:cut].split("::")[-1])
    return ids[-1] if ids else head


@dataclass(frozen=True)
class KernelCounters:
    """A trace's counters paired with its kernels."""

    source: str  # "kineto" or "ncu"
    tool: str
    cache_control: str
    steps: tuple[int, int] | None
    notes: tuple[str, ...]
    launches: tuple[LaunchCounters, ...]  # one per record, in record order
    timeline: bool  # the trace has kernel events (else the counters have no times)
    #: Per record: the model.gpu row (index label) of its kernel, and the host row of its
    #: launch call and of the op that made it (-1 where unknown).
    record_kernel: np.ndarray
    record_launch: np.ndarray
    record_op: np.ndarray
    #: Per model.gpu row with counter values: how (1 measured itself, 2 the mean of its
    #: signature's measured launches) and the values (NaN where not counted).
    rows: np.ndarray
    how: np.ndarray
    flops: np.ndarray
    dram_bytes: np.ndarray
    thread_instructions: np.ndarray
    unit_flops: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def paired(self) -> int:
        return int((self.record_kernel >= 0).sum()) if self.timeline else int((self.record_launch >= 0).sum())


def _launch_rows(model: TraceModel) -> np.ndarray:
    """Host rows of kernel-launch calls, in time order."""
    host = model.host
    if host.empty:
        return np.empty(0, dtype=np.int64)
    calls = host[host["kind"] == Kind.RUNTIME]
    names = calls["name"].astype(str)
    picked = calls[names.isin(KERNEL_LAUNCH_APIS).to_numpy()]
    return picked.sort_values("ts", kind="stable").index.to_numpy(dtype=np.int64)


def _op_of(model: TraceModel, launch_rows: np.ndarray) -> np.ndarray:
    if len(model.host) == 0 or len(launch_rows) == 0:
        return np.full(len(launch_rows), -1, dtype=np.int64)
    ok = launch_rows >= 0
    ops = np.full(len(launch_rows), -1, dtype=np.int64)
    ops[ok] = model.arrays.op[launch_rows[ok]]
    return ops


def _key(name: str, grid: tuple[int, int, int] | None, block: tuple[int, int, int] | None) -> str:
    """What two spellings of one launch share: the identifier, and the launch shape where known."""
    shape = f"|{grid}|{block}" if grid is not None and block is not None else ""
    return kernel_identifier(name) + shape


def _ordered_kernels(model: TraceModel, steps: tuple[int, int] | None) -> pd.DataFrame:
    k = model.kernels()
    if steps is not None:
        inside = k[(k["step"] >= steps[0]) & (k["step"] <= steps[1])]
        if len(inside):
            k = inside
    launch = k["launch"].to_numpy()
    # A kernel without a launch (no usable correlation, or a trace of GPU events only) is
    # ordered by its own start: there may be no host row at all to index.
    host_ts = np.full(len(launch), np.nan)
    linked = launch >= 0
    host_ts[linked] = model.host["ts"].to_numpy()[launch[linked]]
    order = np.lexsort((k["ts"].to_numpy(), np.where(np.isnan(host_ts), k["ts"].to_numpy(), host_ts)))
    return k.iloc[order]


def _pair_timeline(model: TraceModel, cs: CounterSet) -> np.ndarray:
    """Per record, the gpu row of its kernel (-1: none)."""
    cand = _ordered_kernels(model, cs.steps)
    has_shape = all(r.grid is not None for r in cs.records)
    gx, gy, gz = (cand[c].to_numpy() for c in ("grid_x", "grid_y", "grid_z"))
    bx, by, bz = (cand[c].to_numpy() for c in ("block_x", "block_y", "block_z"))
    names = cand["name"].astype(str).tolist()
    b = [
        _key(n, (int(gx[i]), int(gy[i]), int(gz[i])), (int(bx[i]), int(by[i]), int(bz[i])))
        if has_shape
        else kernel_identifier(n)
        for i, n in enumerate(names)
    ]
    a = [_key(r.name, r.grid, r.block) if has_shape else kernel_identifier(r.name) for r in cs.records]
    out = np.full(len(a), -1, dtype=np.int64)
    rows = cand.index.to_numpy(dtype=np.int64)
    for blk in difflib.SequenceMatcher(None, a, b, autojunk=False).get_matching_blocks():
        out[blk.a : blk.a + blk.size] = rows[blk.b : blk.b + blk.size]
    return out


def _signatures(model: TraceModel, rows: np.ndarray) -> np.ndarray:
    """A code per gpu row: kernel name, grid, block, launching op and the op's input shapes."""
    g = model.gpu.loc[rows]
    launch = g["launch"].to_numpy()
    op = np.where(launch >= 0, model.arrays.op[np.clip(launch, 0, None)], -1) if len(model.host) else launch
    op_name = np.where(op >= 0, model.arrays.name_codes[np.clip(op, 0, None)], -1) if len(model.host) else op
    shapes = model.arrays.shapes
    shape_id = np.fromiter(
        (id(shapes[o]) if o >= 0 and shapes[o] is not None else 0 for o in op.tolist()), dtype=np.int64, count=len(op)
    )
    frame = pd.DataFrame(
        {
            "name": g["name"].cat.codes.to_numpy() if hasattr(g["name"], "cat") else g["name"].astype(str),
            **{c: g[c].to_numpy() for c in ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z")},
            "op": op_name,
            "shape": shape_id,
        }
    )
    return frame.groupby(list(frame.columns), sort=False, dropna=False).ngroup().to_numpy()


def _nan(v: float | None) -> float:
    return float("nan") if v is None else float(v)


def kernel_counters(model: TraceModel) -> KernelCounters | None:
    """The trace's counters paired with its kernels; None when it holds none (or none
    could be paired). Computed once per report: read it as AnalysisContext.kernel_counters."""
    sets: tuple[CounterSet, ...] = model.kernel_counters
    if not sets:
        return None
    cs = sets[-1]  # capture --counters' over a range profiler's, when a trace has both
    launches = tuple(interpret(r) for r in cs.records)
    n = len(launches)
    timeline = bool((model.gpu["kind"] == Kind.KERNEL).any()) if len(model.gpu) else False
    notes: list[str] = list(cs.notes)
    record_kernel = np.full(n, -1, dtype=np.int64)
    record_launch = np.full(n, -1, dtype=np.int64)
    if timeline:
        record_kernel = _pair_timeline(model, cs)
        paired = int((record_kernel >= 0).sum())
        if paired < MIN_PAIRED_SHARE * n:
            notes.append(
                f"only {paired} of {n} measured kernels matched the trace's kernels in launch order: "
                "the counters are not from this trace's program, and are not used"
            )
            record_kernel[:] = -1
        ok = record_kernel >= 0
        at = pd.Index(model.gpu.index).get_indexer(pd.Index(record_kernel[ok]))
        record_launch[ok] = model.gpu["launch"].to_numpy()[at]
    else:
        calls = _launch_rows(model)
        m = min(len(calls), n)
        record_launch[:m] = calls[:m]
        if len(calls) != n:
            notes.append(
                f"{n} measured kernels but {len(calls)} kernel-launch calls: paired in order for the first {m}"
            )
    record_op = _op_of(model, record_launch)
    rows = np.empty(0, dtype=np.int64)
    how = np.empty(0, dtype=np.int8)
    flops = dram = instr = np.empty(0)
    unit_flops: dict[str, np.ndarray] = {}
    if timeline and (record_kernel >= 0).any():
        rows, how, flops, dram, instr, unit_flops = _spread(model, launches, record_kernel)
    return KernelCounters(
        source=cs.source,
        tool=cs.tool,
        cache_control=cs.cache_control,
        steps=cs.steps,
        notes=tuple(notes),
        launches=launches,
        timeline=timeline,
        record_kernel=record_kernel,
        record_launch=record_launch,
        record_op=record_op,
        rows=rows,
        how=how,
        flops=flops,
        dram_bytes=dram,
        thread_instructions=instr,
        unit_flops=unit_flops,
    )


def _spread(
    model: TraceModel, launches: tuple[LaunchCounters, ...], record_kernel: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """Values for every kernel whose signature was measured: its own where it was, else the
    mean of its signature's measured launches."""
    kernels = model.kernels().index.to_numpy(dtype=np.int64)
    sig = _signatures(model, kernels)
    pos = pd.Index(kernels)
    measured_at = pos.get_indexer(pd.Index(record_kernel[record_kernel >= 0]))
    recs = [launches[i] for i in np.flatnonzero(record_kernel >= 0).tolist()]
    units = sorted({u for lc in recs for u in lc.unit_flops()})
    values = np.array(
        [
            [_nan(lc.flops), _nan(lc.dram_bytes), _nan(lc.thread_instructions)]
            + [lc.unit_flops().get(u, 0.0) for u in units]
            for lc in recs
        ],
        dtype=float,
    ).reshape(len(recs), 3 + len(units))
    n_sig = int(sig.max()) + 1 if len(sig) else 0
    # Per signature: the mean of its measured launches (NaN stays NaN: not counted).
    sums = np.zeros((n_sig, values.shape[1]))
    counts = np.zeros((n_sig, values.shape[1]))
    s_of = sig[measured_at]
    finite = np.isfinite(values)
    np.add.at(sums, s_of, np.where(finite, values, 0.0))
    np.add.at(counts, s_of, finite.astype(float))
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
    has_sig = np.zeros(n_sig, dtype=bool)
    has_sig[s_of] = True
    take = has_sig[sig]
    out = mean[sig[take]]
    how = np.full(int(take.sum()), 2, dtype=np.int8)
    own = np.full(len(kernels), -1, dtype=np.int64)
    own[measured_at] = np.arange(len(recs))
    own_taken = own[take]
    direct = own_taken >= 0
    out[direct] = values[own_taken[direct]]
    how[direct] = 1
    rows = kernels[take]
    unit_flops = {u: out[:, 3 + j] for j, u in enumerate(units)}
    return rows, how, out[:, 0], out[:, 1], out[:, 2], unit_flops


@dataclass(frozen=True)
class MeasuredValues:
    """Counter values for a given list of gpu rows (NaN where not counted; `how` 0 where
    the row has none)."""

    how: np.ndarray
    flops: np.ndarray
    dram_bytes: np.ndarray
    thread_instructions: np.ndarray
    unit_flops: dict[str, np.ndarray]

    @property
    def has(self) -> np.ndarray:
        return self.how > 0


def measured_values(kc: KernelCounters | None, gpu_rows: np.ndarray) -> MeasuredValues | None:
    """The counters (`kernel_counters`) of these gpu rows (model.gpu index labels), or None
    when the trace has no counters paired with its kernels."""
    if kc is None or len(kc.rows) == 0:
        return None
    at = pd.Index(kc.rows).get_indexer(pd.Index(gpu_rows))
    found = at >= 0
    pick = np.clip(at, 0, None)

    def take(values: np.ndarray, fill: float) -> np.ndarray:
        return np.where(found, values[pick], fill) if len(values) else np.full(len(gpu_rows), fill)

    return MeasuredValues(
        how=np.where(found, kc.how[pick], 0).astype(np.int8),
        flops=take(kc.flops, np.nan),
        dram_bytes=take(kc.dram_bytes, np.nan),
        thread_instructions=take(kc.thread_instructions, np.nan),
        unit_flops={u: take(v, 0.0) for u, v in kc.unit_flops.items()},
    )


#: The NVML track `tracelens capture` writes for a GPU's SM clock (model/schema.NVML_TRACKS).
_SM_CLOCK_TRACK = "SM clock (MHz)"


def sm_clock_ratio(model: TraceModel, device: int | None, starts: np.ndarray, ends: np.ndarray) -> float | None:
    """The SM clock NVML sampled while these kernels ran, time-weighted, over the GPU's
    maximum SM clock (capture's metadata, else the largest sample); None without samples."""
    c = model.counters
    if c.empty or device is None or len(starts) == 0:
        return None
    s = c[c["name"].astype(str) == f"{NVML_TRACK_PREFIX}{device} {_SM_CLOCK_TRACK}"].sort_values("ts", kind="stable")
    if s.empty:
        return None
    ts, mhz = s["ts"].to_numpy(dtype=float), s["value"].to_numpy(dtype=float)
    top = float(np.nanmax(mhz))
    meta = model.meta.metadata.get("tracelens")
    nvml = meta.get("nvml") if isinstance(meta, dict) else None
    for g in nvml.get("gpus", []) if isinstance(nvml, dict) else []:
        if isinstance(g, dict) and g.get("index") == device and isinstance(g.get("max_sm_mhz"), int | float):
            top = float(g["max_sm_mhz"]) or top
    if not top > 0:
        return None
    mid = (starts + ends) / 2
    held = mhz[np.clip(np.searchsorted(ts, mid, side="right") - 1, 0, len(ts) - 1)]  # sample and hold
    weight = np.maximum(ends - starts, 0.0)
    mean = float((held * weight).sum() / weight.sum()) if weight.sum() > 0 else float(np.nanmean(held))
    return min(mean / top, 1.0) if math.isfinite(mean) else None
