"""The roofline: for every kernel, how much work it did, how fast, and what bounds it.

Questions 3 and 6. Kernels are grouped by name, their FLOPs and bytes (kernel_costs)
summed. Per group: achieved FLOP/s and bytes/s, arithmetic intensity (FLOP per byte),
the roof at that intensity, min(peak FLOP/s, intensity x bandwidth), and the share of it
reached. `bound`:
- latency: kernels too short (LATENCY_US) or reaching under NEAR_ROOF_SHARE of their
  roof: too little work or parallelism to fill the GPU;
- memory: intensity below the ridge point (peak / bandwidth);
- compute: above it.
Communication kernels (NCCL/RCCL) are left out of the roofline. A kernel whose model
gives more than the peak is reported as a model error, never as > 100 % efficient.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from tracelens.derive.counters import KernelCounters, MeasuredValues, kernel_counters, measured_values, sm_clock_ratio
from tracelens.derive.fusion import FusionChain, _fusion_chains
from tracelens.derive.graph_costs import SOURCE_CAPTURE
from tracelens.derive.graph_nodes import GraphNodes, graph_nodes
from tracelens.derive.kernel_costs import _attribute, _Attribution, _factorize_names, _subset
from tracelens.derive.kernel_models import L2_ROOF_NAME
from tracelens.derive.matmuls import gemm_from_name
from tracelens.domain import COLLECTIVE_LAUNCH_OPS, is_collective_kernel
from tracelens.model.peaks import UNIT_NAMES, DevicePeaks, infer_part, peaks_for
from tracelens.model.trace import TraceModel, name_matches
from tracelens.report.enums import Bound, UncoveredReason

#: Kernels shorter than this on average are latency-bound whatever their intensity: the
#: launch and ramp-up of a kernel take a few µs on current GPUs.
LATENCY_US = 4.0


#: Nsight Compute's Speed Of Light rule: a kernel reaching less than 60% of both the compute
#: and the memory roof is limited by latency (too little work in flight), not by either roof.
NEAR_ROOF_SHARE = 0.6


#: The compute roof is the datasheet peak at the boost clock, but SM clocks fall under load
#: (1590 of 1980 MHz on the H200 under Nsight Compute on a bf16 GEMM, power-capped), while
#: HBM's clock holds (3.2 GHz throughout): 60% at the clock the kernel ran is about 50% of
#: the boost-clock FLOP/s.
NEAR_COMPUTE_ROOF_SHARE = 0.5


#: ... and so is one whose grid has fewer blocks than this share of the SMs ("grid is too
#: small to fill the available resources"); persistent GEMMs launch about one block per SM.
SMALL_GRID_SHARE = 0.5


#: An achieved rate above the datasheet roof means the model (or the peak) is wrong.
MODEL_ERROR_SHARE = 1.0


#: Unmodelled ops listed in the report.
MAX_UNMODELLED = 12


@dataclass(frozen=True)
class KernelRoof:
    name: str
    count: int
    time_us: float
    flops: float
    bytes: float
    dtype: str
    family: str
    tensor_core: bool
    flops_per_s: float
    bytes_per_s: float
    intensity: float
    roof_flops_per_s: float
    roof_share: float  # achieved fraction of the nearer roof (max of the two shares below)
    bound: Bound
    roof_name: str = ""  # the roof it was judged against: "memory bandwidth", "bf16 tensor cores", ...
    roof_value: float = 0.0  # that roof's datasheet value (FLOP/s or bytes/s)
    measured_ceiling: float = 0.0  # the sustained ceiling measured for that roof on this GPU, 0 if none
    compute_share: float = 0.0  # achieved FLOP/s / its unit's roof, or instructions/s / the issue roof (unit "issue")
    memory_share: float = 0.0  # achieved bytes/s / the bandwidth roof
    grid: int = 0  # median blocks per launch (0: not recorded)
    unit: str = ""  # execution unit of the compute roof (fp32, tf32, bf16, fp16, fp8, int8; issue)
    instructions: float = 0.0  # thread instructions executed, estimated (INSTRUCTIONS_PER_ELEMENT), 0 if no count
    issue_share: float = 0.0  # instructions/s / the GPU's issue roof
    l2_share: float = 0.0  # modelled traffic into L2 (register spills) / the L2 write roof, 0 if not modelled
    #: Time in this name's launches that are latency-bound on their own (launch_is_latency),
    #: whatever the name's bound: an 18-block AdamW launch beside 320-block ones.
    latency_us: float = 0.0
    #: Launches whose FLOPs, bytes and instructions are hardware counters (measured, or
    #: taken from a measured launch of the same kernel, grid, block, op and shapes): when
    #: any, the rates are theirs alone and no model is used for this name.
    measured_launches: int = 0

    @property
    def bound_us(self) -> float:
        """The time `bound` holds for: the name's time less its launches latency-bound on their own."""
        return self.time_us - self.latency_us if self.bound in ("memory", "compute") else self.time_us


@dataclass(frozen=True)
class Unmodelled:
    """Kernel time no model covers, by launching op and why."""

    op: str
    reason: UncoveredReason
    time_us: float


@dataclass(frozen=True)
class ModelCheck:
    """The FLOP/byte model of one kernel name beside its hardware counters, summed over the
    launches that have both (a ratio of 1 is a model that counts what the GPU did)."""

    name: str
    op: str  # the op whose model covers it
    launches: int
    model_flops: float
    measured_flops: float  # NaN: not counted (tensor-core FLOPs without their counters)
    model_bytes: float
    measured_bytes: float  # DRAM read + written; NaN: not counted


@dataclass(frozen=True)
class Roofline:
    peaks: DevicePeaks | None
    kernels: tuple[KernelRoof, ...]
    modelled_us: float  # kernels whose op (or an enclosing op) has a FLOP/byte model
    estimated_us: float  # foreach kernels sized from their launch grid
    unmodelled_us: float
    communication_us: float
    model_errors: int
    classified_us: float = 0.0  # time in kernel classes that got a bound from a model
    unmodelled: tuple[Unmodelled, ...] = ()
    chains: tuple[FusionChain, ...] = ()
    window: tuple[float, float] = (0.0, 0.0)  # the profiled window the kernels were taken from
    #: GPU rows (model.gpu index) of launches that are latency-bound on their own although
    #: their name's bound is memory or compute: the ledger counts them as latency.
    latency_rows: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    measured_us: float = 0.0  # kernels with hardware counters (derive/counters.py) instead of a model
    checks: tuple[ModelCheck, ...] = ()  # model against counters, where both exist

    @property
    def total_us(self) -> float:
        return self.modelled_us + self.estimated_us + self.unmodelled_us + self.measured_us

    @property
    def coverage(self) -> float:
        """Share of (non-communication) kernel time whose own calls were modelled or measured."""
        covered = self.modelled_us + self.estimated_us + self.measured_us
        return covered / self.total_us if self.total_us > 0 else 0.0

    @property
    def classified(self) -> float:
        """Share of kernel time with a bound: classes modelled on some of their calls lend
        it to the rest (e.g. calls launched before the profiling window)."""
        return self.classified_us / self.total_us if self.total_us > 0 else 0.0


def _transposed_source(shapes: dict[str, Any]) -> bool:
    """Whether a copy reads a tensor whose innermost dimension is strided (a transposed or
    permuted view): neither contiguous (stride 1) nor broadcast (stride 0)."""
    dims = shapes.get("Input Dims") or []
    strides = shapes.get("Input Strides") or []
    for d, st in zip(dims, strides, strict=False):
        ok = isinstance(d, list) and isinstance(st, list) and len(d) == len(st) > 0
        if ok and all(isinstance(x, int) for x in d + st) and d[-1] > 1 and st[-1] not in (0, 1):
            return True
    return False


def _median_grids(codes: np.ndarray, uniq: list[str], blocks: np.ndarray, dur: np.ndarray) -> dict[str, int]:
    """Median blocks per launch of each kernel name (0 where the trace has no grids), from
    the names' codes (first-seen order) and the names."""
    out: dict[str, int] = {}
    if not len(codes):
        return out
    # Weighted by time: one name can cover a big launch and many tiny ones (mul on a large
    # tensor and on a scalar); the launches holding the time decide. Sorted by name, then
    # blocks: each name's launches are one slice, its time-weighted median a search in it.
    order = np.lexsort((blocks, codes))
    c, b, d = codes[order], blocks[order], dur[order]
    starts = np.flatnonzero(np.r_[True, c[1:] != c[:-1]])
    ends = np.r_[starts[1:], len(c)]
    for lo, hi in zip(starts.tolist(), ends.tolist(), strict=True):
        cum = np.cumsum(d[lo:hi])
        half = int(np.searchsorted(cum, cum[-1] / 2)) if cum[-1] > 0 else -1
        out[str(uniq[c[lo]])] = int(b[lo + half]) if half >= 0 else int(b[lo:hi].max(initial=0))
    return out


def launch_is_latency(blocks: np.ndarray, dur: np.ndarray, sms: int) -> np.ndarray:
    """Launches latency-bound on their own: shorter than LATENCY_US, or with a grid under
    SMALL_GRID_SHARE of the SMs (Nsight Compute's "grid is too small", launch by launch).
    One kernel name runs at many sizes (the 18-block AdamW launches beside the 320-block
    ones; a 77-token batch beside a 384-token one): Nsight Compute calls the small launches
    latency-bound whatever the large ones are (train case: 148 us of AdamW, 25 us of casts)."""
    small = dur < LATENCY_US
    if sms > 0:
        small |= (blocks > 0) & (blocks < sms * SMALL_GRID_SHARE)
    return small


@dataclass(frozen=True)
class _NameGroup:
    """What the kernels of one name did in the window, for its roofline row."""

    count: int
    time_us: float
    flops: float  # modelled (or counted) kernels only, as bytes, mtime, instructions and port
    bytes: float
    mtime: float  # time of the modelled (or counted) kernels
    instructions: float
    port: float  # L2 port bytes of register spills
    port_time: float  # time of the kernels whose port traffic is modelled
    latency_us: float  # time in launches latency-bound on their own
    grid: int  # median blocks per launch (0: not recorded)
    transposing_us: float  # time in copies/elementwise ops of a transposed source
    meta: tuple[str, str, bool]  # dtype, family, tensor core
    measured_launches: int = 0  # launches with hardware counters
    #: A measured name's main unit (the one doing most of its work at peak) and the seconds
    #: its counted FLOPs take at their units' peaks; None: judged on its model's unit.
    measured_unit: tuple[str, float] | None = None


@dataclass(frozen=True)
class _Values:
    """The kept (non-collective) kernels' FLOPs, bytes and instructions that enter their
    name's rates: the models', or the hardware counters' where the name was measured."""

    flops: np.ndarray
    bytes: np.ndarray
    instructions: np.ndarray
    used: np.ndarray  # kept kernels whose values enter the rates (modelled, or counted)
    measured: np.ndarray  # launches with counters, per name code
    units: dict[str, tuple[str, float]]  # measured name -> (its main unit, seconds at the units' peaks)
    clock: float | None  # the SM clock over the measured kernels / the GPU's maximum
    checks: tuple[ModelCheck, ...]  # model against counters, where both exist


def _collective_kernels(model: TraceModel, k: pd.DataFrame, op_rows: np.ndarray) -> np.ndarray:
    """Which kernels are collectives."""
    # Collectives by kernel name or by launching op, each name tested once.
    comm = name_matches(k["name"], is_collective_kernel)
    if len(model.host):
        table = model.arrays.name_table
        comm_op = np.fromiter((n.startswith(COLLECTIVE_LAUNCH_OPS) for n in table), dtype=bool, count=len(table))
        op_codes = model.arrays.name_codes[np.clip(op_rows, 0, None)]
        comm |= (op_rows >= 0) & comm_op[np.clip(op_codes, 0, None)] & (op_codes >= 0)
    return comm


def _values(
    model: TraceModel,
    k: pd.DataFrame,
    kept: np.ndarray,
    codes: np.ndarray,
    uniq: list[str],
    att: _Attribution,
    meas: MeasuredValues | None,
    counted: np.ndarray,
    small: np.ndarray,
    peaks: DevicePeaks | None,
    device: int | None,
) -> _Values:
    """The kept kernels' values: hardware counters first (derive/counters.py), the models
    where no counter exists. `small`: the kept kernels latency-bound on their own."""
    width = len(uniq)
    instr_of = att.instructions if att.instructions is not None else np.zeros(len(k))
    with_model = att.source[kept] > 0
    flops_k, bytes_k, instr_k = att.flops[kept], att.bytes[kept], instr_of[kept]
    m_has = counted[kept]
    g_measured = np.bincount(codes, weights=m_has.astype(float), minlength=width)
    if meas is None or not m_has.any():
        return _Values(flops_k, bytes_k, instr_k, with_model, g_measured, {}, None, ())
    # A name with measured launches takes its rates from them alone.
    in_meas = (g_measured > 0)[codes]
    mf, mb, mi = meas.flops[kept], meas.dram_bytes[kept], meas.thread_instructions[kept]
    checks = _model_checks(model, k, kept, codes, uniq, att, with_model & m_has, mf, mb)
    flops_k = np.where(in_meas & np.isfinite(mf), mf, flops_k)
    bytes_k = np.where(in_meas & np.isfinite(mb), mb, bytes_k)
    instr_k = np.where(in_meas & np.isfinite(mi), mi, instr_k)
    # Counted launches are judged launch by launch: a name's rates are those of its launches
    # that are not latency-bound on their own (the ledger counts those as latency), where it
    # has any (train's AdamW: 18-block launches at 6% of DRAM beside 320-block ones at 69%).
    big = np.bincount(codes, weights=(m_has & ~small).astype(float), minlength=width) > 0
    with_model = np.where(in_meas, m_has & (~small | ~big[codes]), with_model)
    m_has = m_has & with_model
    clock = sm_clock_ratio(model, device, k["ts"].to_numpy()[kept[m_has]], k["end"].to_numpy()[kept[m_has]])
    units = _measured_units(peaks, meas, kept, codes, uniq, m_has, g_measured) if peaks is not None else {}
    return _Values(flops_k, bytes_k, instr_k, with_model, g_measured, units, clock, checks)


def _name_groups(
    model: TraceModel,
    names: np.ndarray,
    dur: np.ndarray,
    kept: np.ndarray,
    codes: np.ndarray,
    uniq: list[str],
    att: _Attribution,
    values: _Values,
    blocks: np.ndarray,
    small: np.ndarray,
) -> dict[str, _NameGroup]:
    """Per kernel name (first-seen order) of the kept (non-collective) kernels: what its
    roofline row needs. `blocks`: every kernel's blocks per launch; `small`: the kept
    kernels latency-bound on their own."""
    with_model = values.used
    width = len(uniq)
    counts = np.bincount(codes, minlength=width)
    times = np.bincount(codes, weights=dur[kept], minlength=width)
    g_flops = np.bincount(codes, weights=np.where(with_model, values.flops, 0.0), minlength=width)
    g_bytes = np.bincount(codes, weights=np.where(with_model, values.bytes, 0.0), minlength=width)
    g_mtime = np.bincount(codes, weights=np.where(with_model, dur[kept], 0.0), minlength=width)
    g_instr = np.bincount(codes, weights=np.where(with_model, values.instructions, 0.0), minlength=width)
    groups = {
        str(nm): (int(counts[j]), float(times[j]), float(g_flops[j]), float(g_bytes[j]), float(g_mtime[j]))
        for j, nm in enumerate(uniq)
    }
    instructions = {str(nm): float(g_instr[j]) for j, nm in enumerate(uniq)}
    port_of = att.l2_port if att.l2_port is not None else np.zeros(len(names))
    g_port = np.bincount(codes, weights=np.where(with_model, port_of[kept], 0.0), minlength=width)
    port_modelled = with_model & (port_of[kept] > 0)
    g_port_time = np.bincount(codes, weights=np.where(port_modelled, dur[kept], 0.0), minlength=width)
    # The port's share over the launches it was modelled for (head dim 64 only, say).
    l2_port = {str(nm): (float(g_port[j]), float(g_port_time[j])) for j, nm in enumerate(uniq) if g_port[j] > 0}
    meta: dict[str, tuple[str, str, bool]] = {}
    by_model = att.source[kept] > 0
    modelled_idx = kept[by_model]
    _, first_of = np.unique(codes[by_model], return_index=True)
    for i in modelled_idx[first_of].tolist():
        meta[names[i]] = att.meta[i]
    for nm, (unit, _sec) in values.units.items():
        family = meta.get(nm, ("", "", False))[1]
        meta[nm] = (UNIT_DTYPES.get(unit, "fp32"), family, unit not in ("fp32", "issue"))
    transposing = _transposing_time(model, names, dur, att, modelled_idx)
    grid_of = _median_grids(codes, uniq, blocks[kept], dur[kept])
    small_time = np.bincount(codes, weights=np.where(small, dur[kept], 0.0), minlength=width)
    return {
        name: _NameGroup(
            count, time_us, flops, nbytes, mtime, instructions.get(name, 0.0), *l2_port.get(name, (0.0, 0.0)),
            float(small_time[j]), grid_of.get(name, 0), transposing.get(name, 0.0), meta.get(name, ("", "", False)),
            int(values.measured[j]), values.units.get(name),
        )
        for j, (name, (count, time_us, flops, nbytes, mtime)) in enumerate(groups.items())
    }  # fmt: skip


def _transposing_time(
    model: TraceModel, names: np.ndarray, dur: np.ndarray, att: _Attribution, modelled_idx: np.ndarray
) -> dict[str, float]:
    """Per kernel name, the time in copies/elementwise ops of a transposed source."""
    transposing: dict[str, float] = defaultdict(float)
    transposed_op: dict[int, bool] = {}
    transposed_of: dict[int, tuple[bool, Any]] = {}  # by id of the shapes dict, kept alive beside it
    for i in modelled_idx.tolist():
        o = int(att.owner[i])
        if att.meta[i][1] in ("copy", "elementwise") and o >= 0:
            if o not in transposed_op:
                shapes = model.op_shapes(o)  # shared per distinct shape args: judged once each
                if id(shapes) not in transposed_of:
                    transposed_of[id(shapes)] = (_transposed_source(shapes), shapes)
                transposed_op[o] = transposed_of[id(shapes)][0]
            if transposed_op[o]:
                transposing[names[i]] += dur[i]
    return transposing


def _kernel_roof(
    name: str, g: _NameGroup, peaks: DevicePeaks | None, sms: int, clock: float | None
) -> tuple[KernelRoof, bool]:
    """One kernel name's roofline row, and whether its model gives more than the peak (a
    model error: its bound is then unknown). `clock`: the SM clock the measured kernels
    ran at over the GPU's maximum (None: no clock samples, or nothing measured)."""
    dtype, family, tc = g.meta
    count, time_us, flops, nbytes, mtime, grid = g.count, g.time_us, g.flops, g.bytes, g.mtime, g.grid
    if mtime <= 0:
        # No shapes (a CUDA-graph replay, a compiled region): a GEMM's name still gives its
        # dtype and so its roof, though without FLOPs no rate or bound.
        gm = gemm_from_name(name)
        unit, peak = peaks.roof(gm.dtype, True, name) if gm and peaks else ("", 0.0)
        # Latency needs no model: a grid too small to fill the SMs (Nsight Compute's "grid
        # is too small" rule; train's arange, 64 blocks) or launches too short to ramp up.
        short = peaks is not None and (time_us / count < LATENCY_US or 0 < grid < sms * SMALL_GRID_SHARE)
        return (KernelRoof(name, int(count), time_us, 0, 0, gm.dtype if gm else dtype,
                           "matmul" if gm else family, bool(gm) or tc, 0, 0, 0, 0, 0,
                           "latency" if short else "unknown",
                           UNIT_NAMES.get(unit, ""), peak, grid=grid, unit=unit), False)  # fmt: skip
    fps = flops / (mtime * 1e-6)
    bps = nbytes / (mtime * 1e-6)
    ai = flops / nbytes if nbytes > 0 else float("inf")
    if peaks is None:  # rates without roofs: no bound
        return (KernelRoof(name, int(count), time_us, flops, nbytes, dtype, family, tc, fps, bps, ai, 0, 0,
                           "unknown", grid=grid), False)  # fmt: skip
    measured_unit = g.measured_unit
    if measured_unit is not None:
        # Counted FLOPs by unit: the time each unit's share takes at its own peak.
        unit, peak = measured_unit[0], peaks.unit_peak(measured_unit[0])
        flop_share = measured_unit[1] / (mtime * 1e-6)
    else:
        unit, peak = peaks.roof(dtype, tc, name)
        flop_share = fps / peak if peak > 0 else 0.0
    winograd = "winograd" in name.lower()
    dram_share = bps / peaks.bw if peaks.bw > 0 else 0.0
    # Register spills load the port into L2, not DRAM: the memory roof is the nearer of the two.
    port, port_time = g.port, g.port_time
    l2_share = port / (port_time * 1e-6) / peaks.l2_write if peaks.l2_write > 0 and port > 0 else 0.0
    memory_share = max(dram_share, l2_share)
    by_l2 = l2_share > dram_share
    if winograd:
        # Winograd convolutions do fewer multiplies than the direct FLOPs we count:
        # their "FLOP/s" can pass the peak without the model being wrong.
        flop_share = min(flop_share, 1.0)
    instr = g.instructions
    issue_share = instr / (mtime * 1e-6) / peaks.issue if peaks.issue > 0 and instr > 0 else 0.0
    # The compute roof: the unit's FLOP/s, or instruction issue where the kernel runs out
    # of issue slots first (GELU, softmax: Nsight Compute's SM throughput is their issue
    # use). The issue roof is judged at NEAR_ROOF_SHARE, not NEAR_COMPUTE_ROOF_SHARE: these
    # kernels ran at 1.955 of 1.98 GHz under Nsight Compute, no power-capped clock.
    by_issue = issue_share / NEAR_ROOF_SHARE > flop_share / NEAR_COMPUTE_ROOF_SHARE
    compute_share = issue_share if by_issue else flop_share
    near_compute = NEAR_ROOF_SHARE if by_issue else NEAR_COMPUTE_ROOF_SHARE
    if measured_unit is not None and not by_issue and clock is not None:
        # Counted FLOPs are what the tensor or FMA pipes executed (tile padding included), so
        # their share of the boost-clock peak is the pipes' use times the clock the kernels
        # ran at: Nsight Compute's 60%, at that clock (NVML's SM clock over the measured
        # kernels, over the GPU's maximum). Without clock samples, the models' 50% stands.
        near_compute = NEAR_ROOF_SHARE * clock
    if by_issue:
        unit, peak = "issue", peaks.issue
    roof = min(peak, ai * peaks.bw) if ai != float("inf") and not by_issue else peak
    share = max(compute_share, memory_share)
    near_memory = memory_share >= compute_share
    roof_name = (L2_ROOF_NAME if by_l2 else "memory bandwidth") if near_memory else UNIT_NAMES.get(unit, unit)
    roof_value = (peaks.l2_write if by_l2 else peaks.bw) if near_memory else peak
    ceiling = 0.0 if near_memory and by_l2 else peaks.measured.get("bandwidth" if near_memory else unit, 0.0)
    bound: Bound
    error = False
    if max(flop_share, compute_share, memory_share) > MODEL_ERROR_SHARE:
        # Above the datasheet roof: the FLOP, instruction or byte model (or the peak) is wrong.
        error = True
        bound = "unknown"
    elif g.transposing_us > mtime / 2 and time_us / count >= LATENCY_US and grid >= sms:
        # A copy or elementwise op reading a transposed view reads one element per 32-byte
        # sector: the memory pipeline, not DRAM bytes, is the limit (Nsight Compute: L1
        # 96%, DRAM 23% on a 8192^2 fp32 transpose; memory 88-94%, DRAM 14-29% on the
        # `legacy` case's adds of a transposed operand, fp32 and bf16, 2-D and 3-D), so
        # it is memory-bound below the DRAM roof.
        bound = "memory"
    elif (
        time_us / count < LATENCY_US
        or (memory_share < NEAR_ROOF_SHARE and compute_share < near_compute)
        or 0 < grid < sms * SMALL_GRID_SHARE
    ):
        bound = "latency"
    else:
        # The roof it is nearer to, each share taken against its own threshold.
        bound = "memory" if memory_share / NEAR_ROOF_SHARE >= compute_share / near_compute else "compute"
    return (KernelRoof(name, int(count), time_us, flops, nbytes, dtype, family, tc, fps, bps, ai, roof,
                           share, bound, roof_name, roof_value, ceiling, compute_share, memory_share, grid,
                           unit, instr, issue_share, l2_share, g.latency_us, g.measured_launches),
            error)  # fmt: skip


def compute_roofline(
    model: TraceModel,
    device: int | None,
    window: tuple[float, float],
    iterations: tuple[float, ...] = (),
    counters: KernelCounters | None = None,
    graphs: GraphNodes | None = None,
) -> Roofline:
    """The roofline of `device`'s kernels in `window`. `iterations`: host start times of the
    window's detected loop iterations (where the trace has no ProfilerSteps), at which
    fusion chains end as they do at ProfilerSteps. `counters`: the trace's hardware counters
    paired with its kernels (AnalysisContext.kernel_counters); None: paired here, from the
    model (a model without counter sets has none). `graphs`: the nodes of graph-replayed
    kernels (AnalysisContext.graph_nodes); None: found here, from the model."""
    dev = model.meta.device(device) if device is not None else model.meta.primary_device
    inferred = infer_part(dev.name, dev.compute_capability, dev.num_sms, dev.total_memory_bytes) if dev else None
    peaks = peaks_for(inferred or (dev.name if dev else None))
    k = model.kernels()
    if device is not None:
        k = k[k["device"] == device]
    k = k[(k["end"] > window[0]) & (k["ts"] < window[1])]
    names = k["name"].astype(str).to_numpy()
    dur = k["dur"].to_numpy(dtype=float)
    op_rows = k["op"].to_numpy()
    comm = _collective_kernels(model, k, op_rows)
    # Hardware counters first (derive/counters.py), the models where no counter exists.
    meas = measured_values(counters if counters is not None else kernel_counters(model), k.index.to_numpy())
    counted = meas.has & ~comm if meas is not None else np.zeros(len(k), dtype=bool)
    att = _attribute(model, k, comm, counted, graphs if graphs is not None else graph_nodes(model))
    kept = np.flatnonzero(~comm)
    codes, uniq = _factorize_names(k["name"], kept)
    sms = (dev.num_sms if dev else None) or 0
    gx = k["grid_x"].to_numpy()
    blocks = np.where(gx > 0, gx.clip(min=1) * k["grid_y"].clip(lower=1) * k["grid_z"].clip(lower=1), 0)
    small = launch_is_latency(blocks[kept], dur[kept], sms)
    values = _values(model, k, kept, codes, uniq, att, meas, counted, small, peaks, dev.index if dev else None)
    groups = _name_groups(model, names, dur, kept, codes, uniq, att, values, blocks, small)
    modelled = float(dur[((att.source == 1) | (att.source == SOURCE_CAPTURE)) & ~counted].sum())
    estimated = float(dur[(att.source == 2) & ~counted].sum())
    measured_us = float(dur[counted].sum())
    comm_us = float(dur[comm].sum())
    unmodelled_us = float(dur.sum()) - comm_us - modelled - estimated - measured_us
    rows = []
    errors = 0
    for name, g in groups.items():
        row, error = _kernel_roof(name, g, peaks, sms, values.clock)
        rows.append(row)
        errors += error
    rows.sort(key=lambda r: -r.time_us)
    classified = sum(r.time_us for r in rows if r.bound != "unknown")
    roofed = {r.name for r in rows if r.bound in ("memory", "compute")}
    in_roofed = np.fromiter((str(nm) in roofed for nm in uniq), dtype=bool, count=len(uniq))
    latency_rows = k.index.to_numpy()[kept[small & in_roofed[codes]]]
    unmodelled = tuple(
        Unmodelled(op, reason, t) for (op, reason), t in sorted(att.unmodelled.items(), key=lambda kv: -kv[1])
    )
    return Roofline(
        peaks,
        tuple(rows),
        modelled,
        estimated,
        unmodelled_us,
        comm_us,
        errors,
        classified,
        unmodelled[:MAX_UNMODELLED],
        _fusion_chains(model, k[~comm], _subset(att, ~comm), iterations),
        window,
        latency_rows,
        measured_us,
        values.checks,
    )


#: The dtype a kernel judged against a unit's roof is shown with.
UNIT_DTYPES = {"fp32": "fp32", "tf32": "fp32", "tf32x3": "fp32", "bf16": "bf16", "fp16": "fp16", "fp8": "fp8",
               "int8": "int8"}  # fmt: skip


def _measured_units(
    peaks: DevicePeaks,
    meas: MeasuredValues,
    kept: np.ndarray,
    codes: np.ndarray,
    uniq: list[str],
    m_has: np.ndarray,
    g_measured: np.ndarray,
) -> dict[str, tuple[str, float]]:
    """Per measured kernel name: the unit doing most of its work at peak (its roof), and the
    seconds its counted FLOPs take at their units' peaks (fp32 FMA, bf16 tensor cores, ...)."""
    width = len(uniq)
    # A name with a launch whose FLOPs were not counted keeps its model's roof.
    uncounted = np.bincount(codes, weights=(m_has & ~np.isfinite(meas.flops[kept])).astype(float), minlength=width)
    seconds: dict[str, np.ndarray] = {}
    for unit, values in meas.unit_flops.items():
        peak = peaks.unit_peak(unit)
        if peak > 0:
            seconds[unit] = np.bincount(codes, weights=np.where(m_has, values[kept], 0.0), minlength=width) / peak
    out: dict[str, tuple[str, float]] = {}
    for j, nm in enumerate(uniq):
        if g_measured[j] <= 0 or uncounted[j] > 0:
            continue
        per = {u: float(s[j]) for u, s in seconds.items() if s[j] > 0}
        out[str(nm)] = (max(per, key=per.__getitem__) if per else "fp32", sum(per.values()))
    return out


def _model_checks(
    model: TraceModel,
    k: pd.DataFrame,
    kept: np.ndarray,
    codes: np.ndarray,
    uniq: list[str],
    att: _Attribution,
    both: np.ndarray,
    measured_flops: np.ndarray,
    measured_bytes: np.ndarray,
) -> tuple[ModelCheck, ...]:
    """Model and counters summed per kernel name over the launches that have both."""
    width = len(uniq)
    if not both.any():
        return ()
    n = np.bincount(codes, weights=both.astype(float), minlength=width)
    sums = [
        np.bincount(codes, weights=np.where(both, v, 0.0), minlength=width)
        for v in (att.flops[kept], att.bytes[kept], np.nan_to_num(measured_flops), np.nan_to_num(measured_bytes))
    ]
    counted_f = np.bincount(codes, weights=(both & np.isfinite(measured_flops)).astype(float), minlength=width)
    counted_b = np.bincount(codes, weights=(both & np.isfinite(measured_bytes)).astype(float), minlength=width)
    first: dict[int, int] = {}
    for pos in np.flatnonzero(both).tolist():
        first.setdefault(int(codes[pos]), int(kept[pos]))
    out = []
    for j in np.flatnonzero(n > 0).tolist():
        owner = int(att.owner[first[j]])
        op = model.arrays.name(owner) if owner >= 0 else ""
        out.append(ModelCheck(
            str(uniq[j]), op, int(n[j]), float(sums[0][j]),
            float(sums[2][j]) if counted_f[j] == n[j] else float("nan"), float(sums[1][j]),
            float(sums[3][j]) if counted_b[j] == n[j] else float("nan"),
        ))  # fmt: skip
    time_of = np.bincount(codes, weights=np.where(both, k["dur"].to_numpy(dtype=float)[kept], 0.0), minlength=width)
    rank = {str(uniq[j]): float(time_of[j]) for j in range(width)}
    return tuple(sorted(out, key=lambda c: -rank.get(c.name, 0.0)))


def gain_to_roof(r: KernelRoof) -> float:
    """Time saved if the kernel group ran at the rate it can sustain: the ceiling measured
    on this GPU where there is one (790 TFLOP/s bf16, 4.3 TB/s on the H200: the datasheet
    roof is not reachable on random data under the power cap), else the datasheet roof."""
    if r.roof_share <= 0 or r.roof_value <= 0:
        return 0.0
    reachable = min(r.measured_ceiling, r.roof_value) if r.measured_ceiling > 0 else r.roof_value
    return r.bound_us * max(1.0 - r.roof_share * r.roof_value / reachable, 0.0)
