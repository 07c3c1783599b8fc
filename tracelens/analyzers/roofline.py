"""Roofline: for every kernel, how much work it did, how fast, and what bounds it.

Questions 3 and 6. Each op call's FLOPs and bytes (op_costs) are spread over the
kernels it launched in proportion to their time; kernels are then grouped by name.
Per group: achieved FLOP/s and bytes/s, arithmetic intensity (FLOP per byte), the
roof at that intensity, min(peak FLOP/s, intensity x bandwidth), and the share of it
reached. `bound`:
- latency: kernels too short (LATENCY_US) or reaching under LATENCY_ROOF_SHARE of their
  roof: too little work or parallelism to fill the GPU;
- memory: intensity below the ridge point (peak / bandwidth);
- compute: above it.
Communication kernels (NCCL/RCCL) are left out of the roofline. A kernel whose model
gives more than the peak is reported as a model error, never as > 100 % efficient.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec
import numpy as np
import pandas as pd

from tracelens.analyzers.base import Category, Finding, Metric, Site, severity_for
from tracelens.analyzers.context import AnalysisContext
from tracelens.analyzers.matmul_shapes import gemm_from_name
from tracelens.analyzers.op_costs import (
    ADAM_FLOPS_PER_ELEMENT,
    BSHD_ATTENTION,
    CONV,
    OpCost,
    dtype_from_kernel,
    op_cost,
)
from tracelens.derive.counters import MeasuredValues, measured_values, sm_clock_ratio
from tracelens.domain import (
    COLLECTIVE_LAUNCH_OPS,
    DTYPE_BYTES,
    DTYPE_SHORT,
    GRAPH_LAUNCH_APIS,
    SHORT_DTYPE_BYTES,
    fmt_us,
    is_collective_kernel,
)
from tracelens.model.peaks import UNIT_NAMES, DevicePeaks, peaks_for
from tracelens.model.sources import user_source
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
MAX_SITES = 8
#: Unmodelled ops listed in the report.
MAX_UNMODELLED = 12
#: Families whose FLOPs belong to the op's main kernel only.
MATH_FAMILIES = frozenset({"matmul", "conv", "attention"})
#: Enclosing ops searched for a model, as TraceModel.host_chain bounds its walk.
HOST_CHAIN_LIMIT = 512


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


#: Elements each block of ATen's multi_tensor_apply kernels handles (kChunkSize in
#: ATen/native/cuda/MultiTensorApply.cuh): a foreach launch's grid is its chunk count, so
#: grid x chunk bounds the elements it updated (over by each tensor's partial last chunk).
FOREACH_CHUNK_ELEMENTS = 65536
_FOREACH_DEPTH_RE = re.compile(r"Metadata<(?:[^,<>]+, )?(\d+)>")
#: Kernel-name fragments of the layout, offset and reduction helpers that cuDNN, cuBLAS
#: and ATen run beside the main kernel of a matmul, convolution or attention op: they get
#: the op's bytes but none of its FLOPs.
AUX_KERNEL_MARKERS = (
    "nchwtonhwc",
    "nhwctonchw",
    "transpose",
    "cask_cudnn::compute",
    "computeoffsets",
    "splitkreduce",
    "splitk_reduce",
    "reduce_kernel",
    "elementwise",
    "convert",
    "flip_filter",
    "fill_kernel",
    "winogradforward",  # the transforms of cuDNN's non-fused Winograd around its batched GEMM
    "winogradwgrad",
    "scalepackedtensor",
    "compute_dot_do_o",  # cuDNN flash-attention backward's rowsum(dO * O) and dQ conversion passes
    "convert_dq",
)


#: Thread instructions per element that ATen's kernels execute, fp32 and 16-bit (bf16/fp16):
#: Nsight Compute's InstructionStats (warp instructions x 32 / elements) on the H200, torch
#: 2.11+cu130, one kernel per op on 32768 x 1024 tensors (bench/ncu_compare_instructions.sh,
#: workloads/ncu_cases.py `instructions`; sizes unlike the comparison cases'). They are a
#: property of the kernel's code (erf's and exp's polynomials, the special-function unit,
#: bf16 conversions, warp shuffles, Welford's division), steady across sizes: the attention
#: case's 64 x 1024 x 1024 softmax_warp_forward<bf16> executes 39.4 a element, as here. Only
#: kernels that can run out of instruction issue before DRAM bandwidth are listed: a plain
#: add (4-7 a element) needs over 60 to reach the issue roof at full bandwidth.
INSTRUCTIONS_PER_ELEMENT: tuple[tuple[str, float, float], ...] = (
    ("GeluBackwardCUDAKernelImpl", 42.4, 44.4),
    ("GeluCUDAKernelImpl", 28.4, 30.1),  # erf GELU (the default)
    ("softmax_warp_forward", 37.4, 39.4),  # softmax over <= 1024 columns, one warp a row
    ("softmax_warp_backward", 10.8, 13.9),
    ("vectorized_layer_norm_kernel", 70.8, 65.7),
    ("erf_kernel_cuda", 24.4, 26.1),
    ("silu_kernel", 22.3, 24.3),
    ("sigmoid_kernel_cuda", 21.8, 24.3),
    ("tanh_kernel_cuda", 17.9, 19.5),
    ("exp_kernel_cuda", 10.8, 12.5),
    ("rsqrt_kernel_cuda", 6.5, 8.3),
    ("fused_dropout_kernel_vec", 30.0, 29.2),  # Philox random numbers
)


def instructions_per_element(kernel: str) -> float:
    """Thread instructions per element of a kernel in INSTRUCTIONS_PER_ELEMENT, 0 if absent."""
    for marker, fp32, half in INSTRUCTIONS_PER_ELEMENT:
        if marker in kernel:
            return half if dtype_from_kernel(kernel) in ("c10::BFloat16", "c10::Half") else fp32
    return 0.0


#: ATen's non-vectorised elementwise path (`elementwise_kernel<128, 4 or 2>` through
#: gpu_kernel_impl_nocast, taken when an operand is broadcast or strided) computes every
#: operand's offset from the element index, one integer division and one multiply-add per
#: operand per dimension the TensorIterator could not coalesce: its instructions per element
#: are linear in those dimensions. Measured (Nsight Compute InstructionStats, H200, torch
#: 2.11+cu130, workloads/ncu_cases.py `legacy`: broadcast copies over 1-4 coalesced dimensions
#: and strided or broadcast add/mul over 2-4, fp32 and bf16, 8M elements,
#: bench/ncu_compare_memory.sh): copies 21.0 / 18.5 (fp32 / 16-bit) + 12.0 a dimension within
#: 0.1 on all 10; add and mul 27.0 / 28.3 + 14.0 a dimension within 0.5 on all 10.
#: (kernel-name marker, fp32 base, 16-bit base, per dimension).
LEGACY_INSTRUCTIONS: tuple[tuple[str, float, float, float], ...] = (
    ("direct_copy_kernel_cuda", 21.0, 18.5, 12.0),
    ("CUDAFunctor_add", 27.0, 28.3, 14.0),
    ("MulFunctor", 27.0, 28.3, 14.0),
)
LEGACY_KERNEL_MARKERS = ("elementwise_kernel<128,", "gpu_kernel_impl_nocast<")


def legacy_coefficients(kernel: str) -> tuple[float, float] | None:
    """(base, per dimension) instructions per element of a non-vectorised elementwise
    kernel in LEGACY_INSTRUCTIONS, None for any other kernel."""
    if not all(m in kernel for m in LEGACY_KERNEL_MARKERS) or "vectorized_" in kernel or "unrolled_" in kernel:
        return None
    if "UnaryFunctor" in kernel:  # AUnary/BUnary: a binary op with a scalar operand, not measured
        return None
    half = dtype_from_kernel(kernel) in ("c10::BFloat16", "c10::Half")
    for marker, fp32, h, per_dim in LEGACY_INSTRUCTIONS:
        if marker in kernel:
            return (h if half else fp32), per_dim
    return None


def iteration_dims(shapes: dict[str, Any], inplace_or_copy: bool) -> tuple[int, int] | None:
    """(elements, dimensions) of the TensorIterator an elementwise op or copy runs: the
    output's shape (the first tensor for copy_ and in-place ops, else the inputs' broadcast
    shape, contiguous) and the dimensions left after merging each pair of adjacent ones whose
    strides are contiguous for every operand (size-1 dimensions dropped), as
    TensorIterator's coalescing does. None where shapes or strides are missing."""
    dims = [d for d in shapes.get("Input Dims") or [] if isinstance(d, list) and d]
    strides = [s for s in shapes.get("Input Strides") or [] if isinstance(s, list) and s]
    if not dims or len(dims) != len(strides) or any(len(d) != len(s) for d, s in zip(dims, strides, strict=True)):
        return None
    if not all(isinstance(x, int) for d in dims + strides for x in d):
        return None
    rank = max(len(d) for d in dims)
    shape = [1] * rank
    for d in dims:
        for j, x in enumerate(d, start=rank - len(d)):
            shape[j] = max(shape[j], x)
    ops = [[0] * (rank - len(s)) + [st if x > 1 else 0 for x, st in zip(d, s, strict=True)]
           for d, s in zip(dims, strides, strict=True)]  # fmt: skip
    if not inplace_or_copy:  # a fresh contiguous output
        out, acc = [0] * rank, 1
        for j in range(rank - 1, -1, -1):
            out[j], acc = (acc if shape[j] > 1 else 0), acc * shape[j]
        ops.insert(0, out)
    keep = [j for j in range(rank) if shape[j] > 1]
    elements = int(np.prod(shape)) if shape else 1
    if not keep:
        return elements, 1
    # Innermost first, the output's fastest dimension innermost (TensorIterator permutes so).
    keep.sort(key=lambda j: -ops[0][j])
    n_dims, inner_size = 1, shape[keep[-1]]
    inner = [op[keep[-1]] for op in ops]
    for j in reversed(keep[:-1]):
        if all(op[j] == st * inner_size for op, st in zip(ops, inner, strict=True)):
            inner_size *= shape[j]  # merged: same base strides, a larger extent
        else:
            n_dims, inner_size, inner = n_dims + 1, shape[j], [op[j] for op in ops]
    return elements, n_dims


#: Winograd convolutions do fewer multiplies than a direct convolution: F(4x4, 3x3) 36
#: per 16 outputs instead of 144 (4x fewer), F(2x2, 3x3) 16 per 4 instead of 36 (2.25x).
#: An op whose kernels say winograd is credited with the direct FLOPs divided by this.
WINOGRAD_FLOP_DIVISOR = {"2x2": 2.25, "4x4": 4.0}
WINOGRAD_DEFAULT_DIVISOR = 4.0


def _winograd_divisor(kernel_names: list[str]) -> float:
    for name in kernel_names:
        low = name.lower()
        if "winograd" in low:
            return next((d for tile, d in WINOGRAD_FLOP_DIVISOR.items() if tile in low), WINOGRAD_DEFAULT_DIVISOR)
    return 1.0


#: Kernel families a fusing compiler (torch.compile's Inductor) merges into one pass.
FUSIBLE_FAMILIES = frozenset({"elementwise", "copy", "norm", "reduction"})
#: Adjacent passes join a chain only if their bytes are within this factor of each other:
#: a pass over a tensor and a tiny scalar op beside it are not one fusion.
CHAIN_SIZE_RATIO = 4.0
MAX_CHAINS = 8
#: Longer runs are split: fusing compilers bound a kernel's size, and a run of hundreds of
#: passes is a loop, not one expression (the claim stays that of a bounded fusion).
CHAIN_MAX_PASSES = 16


@dataclass(frozen=True)
class FusionChain:
    """Back-to-back memory-bound kernels on one stream, each a full pass over memory,
    grouped by the ops that launched them. Fused, the chain makes about one pass: the
    time saved is estimated as all but its longest kernel."""

    ops: tuple[str, ...]  # launching op of each pass, in order
    count: int  # occurrences
    time_us: float
    saved_us: float
    bytes: float
    first_row: int  # host row of the first pass's op (for its Python source)
    kernels: tuple[str, ...]


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


@dataclass
class _Attribution:
    """Per-kernel FLOPs and bytes, and where they came from."""

    flops: np.ndarray
    bytes: np.ndarray
    source: np.ndarray  # 0 none, 1 op model, 2 launch-grid estimate
    meta: dict[int, tuple[str, str, bool]]  # kernel index -> dtype, family, tensor_core
    unmodelled: dict[tuple[str, UncoveredReason], float]
    owner: np.ndarray  # host row of the op whose model covers each kernel, or -1
    instructions: np.ndarray | None = None  # estimated thread instructions (0: no count)
    l2_port: np.ndarray | None = None  # L2 port bytes of register spills (0: not modelled)


def _conv_outputs(model: TraceModel) -> dict[tuple[tuple[int, ...], tuple[int, ...]], list[int]]:
    """(input shape, weight shape) -> output shape, from the trace's convolution backward
    ops (they record grad_output), for traces whose forward calls lack stride and padding."""
    out: dict[tuple[tuple[int, ...], tuple[int, ...]], list[int]] = {}
    # Per distinct name, not per row: a fixed-width string array would be as wide as the
    # longest name in the trace for every row (issue 14).
    names = model.host["name"].astype(str).to_numpy()
    for r in np.flatnonzero(name_matches(model.host["name"], lambda n: n.endswith("convolution_backward"))):
        dims = model.op_shapes(int(r)).get("Input Dims") or []
        if len(dims) < 3 or not all(isinstance(d, list) and len(d) == 4 for d in dims[:3]):
            continue
        go, x = (dims[0], dims[1]) if names[r] == "aten::convolution_backward" else (dims[1], dims[0])
        out.setdefault((tuple(x), tuple(dims[2])), list(go))
    return out


def _foreach_estimate(name: str, grid: int, op: str) -> OpCost | None:
    """A multi_tensor_apply kernel's work from its grid: chunks x elements per chunk, each
    element read from every list and written to the updated ones."""
    match = _FOREACH_DEPTH_RE.search(name)
    if grid <= 0 or match is None:
        return None
    depth = int(match.group(1))
    ctype = dtype_from_kernel(_FOREACH_DEPTH_RE.sub("", name)) or "float"
    elements = float(grid * FOREACH_CHUNK_ELEMENTS)
    item = DTYPE_BYTES.get(ctype, 4)
    if "adam" in name.lower():
        reads, writes, flops = depth, depth - 1, ADAM_FLOPS_PER_ELEMENT * elements  # all lists but the grads
    elif op and not op.endswith("_"):
        reads, writes, flops = depth - 1, 1, elements  # out of place: the last list is the result
    else:
        reads, writes, flops = depth, 1, elements
    return OpCost(flops, elements * item * (reads + writes), DTYPE_SHORT.get(ctype, ctype), False, "optimizer")


#: cuDNN's flash-attention backward runs two passes beside its main kernel, each moving a
#: fixed multiple of the N = batch x heads x length x head-dim elements of dO: (kernel-name
#: marker, bytes per element of dO's type read or written, fp32 bytes per element, fp32
#: bytes per row). compute_dot_do_o reads dO and O (rowsum(dO * O), one fp32 a row) and
#: zeroes the fp32 dQ accumulator (its 47 MB of DRAM writes on the attention case, 4 x 16 x
#: 2048 x 128, match what the 60 MiB L2 cannot hold of a 67 MB buffer); convert_dq_to_16bits
#: reads that accumulator (67.2 MB, measured) and writes dQ in dO's type. Nsight Compute
#: DRAM reads on the H200 (bench/ncu_compare_memory.sh): 67.14 / 16.79 MB and 67.21 / 16.79 MB
#: on the attention / train cases, as modelled.
ATTENTION_HELPERS: tuple[tuple[str, float, float, float], ...] = (
    ("compute_dot_do_o", 2.0, 4.0, 4.0),
    ("convert_dq_to_16bits", 1.0, 4.0, 0.0),
)


#: Kernels that spill registers to local memory, whose spills (written through L1) load the
#: crossbar into L2 while DRAM idles: (kernel-name marker, head dim, keys per tile, L2 bytes
#: written per (query tile, key tile) pair and head, L2 bytes read per key per query tile and
#: head).
#: PyTorch's fp32 memory-efficient attention (AttentionKernel<float, Sm80, aligned, 64, 64,
#: 64>, 168 registers a thread, 3.4M local spilling requests on a 256-token launch) writes
#: 30-150 times its output into L2 and Nsight Compute calls it memory-bound on L2 (lts
#: 60-72%, DRAM 8%). Fitted on the `onchip` case (8 x 16 heads x 64, 256 and 1024 tokens;
#: lts__t_sectors_op_write / _read): 164.3 / 156.9 kB written a pair (spills, whole tiles
#: or not; output included), 765 / 828 B read a key (K and V, and spill reloads; the larger
#: 1024-token launch's figure taken). On the encoder case (16 x 12 heads, 77 / 197 / 384
#: tokens, not used to fit) it predicts writes within 4% and reads within 5% of Nsight
#: Compute's, and the port's use within 4 points (tests/test_roofline.py). Only head dim 64
#: is modelled: the same kernel at head dim 32 writes 12% less and reads half (the `spill`
#: case), and head dim 128 runs another kernel (64x128_rf, 244 registers) that does not spill.
L2_SPILL_MODELS: tuple[tuple[str, int, int, float, float], ...] = (
    ("fmha_cutlassf_f32_aligned_64x64_rf", 64, 64, 158e3, 828.0),
)  # fmt: skip
#: Bytes a read request brings from L2: the port carries one request per 128-byte line.
L2_READ_REQUEST_BYTES = 128.0
L2_ROOF_NAME = "L2 write port (register spills)"
L2_SECTOR_BYTES = 32.0


def spill_model(kernel: str) -> tuple[str, int, int, float, float] | None:
    low = kernel.lower()
    return next((m for m in L2_SPILL_MODELS if m[0] in low), None)


def _l2_spill_traffic(
    model: TraceModel, names: np.ndarray, owner: np.ndarray, grids: np.ndarray, source: np.ndarray
) -> np.ndarray:
    """Per kernel, the L2 port bytes of its register spills (L2_SPILL_MODELS): writes plus
    a request per 128-byte line read, in bytes of 32-byte port slots; 0 where not modelled.
    A launch's blocks are its query tiles x heads x batch; the key length comes from the
    owning attention op's key tensor."""
    port = np.zeros(len(names))
    spills = {nm: spill_model(nm) for nm in set(names.tolist())}
    rows = [i for i in np.flatnonzero((source == 1) & (grids > 0)).tolist() if spills[names[i]] is not None]
    for i in rows:
        found = spills[names[i]]
        assert found is not None
        _, head_dim, keys_per_tile, written, read_per_key = found
        o = int(owner[i])
        op = model.arrays.name(o).split("::")[-1]
        dims = model.op_shapes(o).get("Input Dims") or []
        key = dims[1] if len(dims) > 1 else None
        if not (isinstance(key, list) and len(key) == 4 and all(isinstance(x, int) for x in key)):
            continue
        if key[3] != head_dim:
            continue  # measured at this head dim only
        length = key[1] if op in BSHD_ATTENTION else key[2]
        pairs = float(grids[i]) * -(-length // keys_per_tile)
        reads = float(grids[i]) * length * read_per_key
        port[i] = pairs * written + reads * L2_SECTOR_BYTES / L2_READ_REQUEST_BYTES
    return port


def _attention_helper_bytes(
    model: TraceModel,
    names: np.ndarray,
    owner: np.ndarray,
    dur: np.ndarray,
    nbytes: np.ndarray,
) -> None:
    """Give cuDNN's attention-backward passes (ATTENTION_HELPERS) the bytes they move,
    from the backward op's dO, and the op's main kernels its modelled bytes shared over
    their own time, instead of every kernel a time share of the op's bytes."""
    helper_of = {nm: next((h for h in ATTENTION_HELPERS if h[0] in nm), None) for nm in set(names.tolist())}
    rows = np.flatnonzero((owner >= 0) & np.fromiter((helper_of[nm] is not None for nm in names), bool, len(names)))
    for o in {int(owner[i]) for i in rows.tolist()}:
        shapes = model.op_shapes(o)
        dims = shapes.get("Input Dims") or []
        types = shapes.get("Input type") or []
        grad = dims[0] if dims else None
        if not (isinstance(grad, list) and len(grad) == 4 and all(isinstance(x, int) for x in grad)):
            continue
        item = DTYPE_BYTES.get(str(types[0]) if types else "", 2)
        elements = float(np.prod(grad))
        mine = np.flatnonzero(owner == o)
        helpers = [i for i in mine.tolist() if helper_of[names[i]] is not None]
        rest = [i for i in mine.tolist() if helper_of[names[i]] is None]
        total, rest_time = float(nbytes[mine].sum()), float(dur[rest].sum())
        for i in helpers:
            h = helper_of[names[i]]
            assert h is not None
            nbytes[i] = elements * (h[1] * item + h[2]) + elements / grad[-1] * h[3]
        if rest and rest_time > 0:
            nbytes[rest] = total * dur[rest] / rest_time


def _attribute(
    model: TraceModel, k: pd.DataFrame, comm: np.ndarray, measured: np.ndarray | None = None
) -> _Attribution:
    """FLOPs and bytes of every kernel. Each kernel belongs to the innermost op that has a
    model, or to the nearest enclosing op with one (cudnn_convolution_backward for its
    _input and _weight halves) when none of that op's other kernels has its own. The
    owner's bytes are shared by its kernels in proportion to their time; the FLOPs of
    math ops go to its main kernels only (not the layout transforms beside them).
    `measured` kernels (hardware counters) are not listed as unmodelled."""
    names = k["name"].astype(str).to_numpy()
    dur = k["dur"].to_numpy(dtype=float)
    launch = k["launch"].to_numpy()
    grids = (k["grid_x"].clip(lower=1) * k["grid_y"].clip(lower=1) * k["grid_z"].clip(lower=1)).to_numpy()
    grids = np.where(k["grid_x"].to_numpy() > 0, grids, 0)
    n = len(k)
    op_rows = np.where(launch >= 0, model.arrays.op[np.clip(launch, 0, None)], -1) if len(model.host) else launch
    costs: dict[tuple[int, str | None], OpCost | None] = {}
    conv_out: dict[tuple[tuple[int, ...], tuple[int, ...]], list[int]] | None = None
    # Ops with no recorded shapes have no model: skip them without decoding anything (a
    # trace without record_shapes has none, and every kernel's walk up its ops is wasted).
    # A row found to hold only empty fields is marked too, so it is decoded once at most.
    has_shapes = model.host["shapes"].notna().to_numpy().copy() if len(model.host) else np.zeros(0, dtype=bool)
    decoded: dict[int, dict[str, Any]] = {}
    by_content: dict[tuple[str, str | None, bytes], OpCost | None] = {}
    by_identity: dict[tuple[str, str | None, int], OpCost | None] = {}  # ids of dicts `decoded` keeps alive
    parent = model.arrays.parent if len(model.host) else np.zeros(0, dtype=np.int64)

    def cost_of(r: int, hint: str | None) -> OpCost | None:
        nonlocal conv_out
        key = (r, hint)
        if key not in costs:
            if r not in decoded:
                decoded[r] = model.op_shapes(r) if has_shapes[r] else {}
                has_shapes[r] = bool(decoded[r])
            shapes = decoded[r]
            cost = None
            op = model.arrays.name(r)
            # Ops with the same shape args share one decoded dict (TraceModel.op_shapes): the
            # cost found for that dict is the cost of its content, without encoding it again.
            known = (op, hint, id(shapes))
            if shapes and known in by_identity:
                costs[key] = by_identity[known]
                return costs[key]
            # A loop calls the same op on the same shapes every iteration: model it once.
            same = (op, hint, msgspec.json.encode(shapes)) if shapes else None
            if same is not None and same in by_content:
                cost = by_content[same]
            elif same is not None:
                try:
                    cost = op_cost(op, shapes, hint)
                    dims = shapes.get("Input Dims") or []
                    if cost is None and op.split("::")[-1] in CONV and len(dims) >= 2:
                        if conv_out is None:
                            conv_out = _conv_outputs(model)
                        x, w = dims[0], dims[1]
                        if isinstance(x, list) and isinstance(w, list):
                            found = conv_out.get((tuple(x), tuple(w)))
                            cost = op_cost(op, shapes, hint, found) if found else None
                except (ValueError, TypeError, IndexError, KeyError, ZeroDivisionError):
                    cost = None
                by_content[same] = cost
            if shapes:
                by_identity[known] = cost
            costs[key] = cost
        return costs[key]

    # The owner of a launching op's kernels depends on the op row and the kernel's type
    # hint only. The nearest modelled row at or above a row (and its distance) is what its
    # parent's is, one further, unless the row has a model itself: memoised per (row, hint)
    # along each walk, so ops under the same chain of Python frames share the walk up it.
    # NONE: no modelled row within HOST_CHAIN_LIMIT rows (the bound host_chain has).
    nearest: dict[tuple[int, str | None], tuple[int, int]] = {}
    none = (-1, HOST_CHAIN_LIMIT)

    def resolve(r: int, hint: str | None) -> tuple[int, int]:
        path: list[int] = []
        a, base = r, none  # base: the answer at `a` (none past the root)
        while a >= 0:
            got = nearest.get((a, hint))
            if got is not None:
                base = got
                break
            if len(path) == HOST_CHAIN_LIMIT:
                # r's whole bound walked without a find; the rows above r on the path had
                # less of theirs looked at, so only r's answer is known.
                nearest[(r, hint)] = none
                return (-1, 0)
            if has_shapes[a] and cost_of(a, hint) is not None:  # innermost op first, as host_chain
                base = nearest[(a, hint)] = (a, 0)
                break
            path.append(a)
            a = int(parent[a])
        row, dist = base
        for k, p in enumerate(path):
            d = dist + len(path) - k
            nearest[(p, hint)] = (row, d) if row >= 0 and d < HOST_CHAIN_LIMIT else none
        found = nearest[(r, hint)]
        return found if found[0] >= 0 else (-1, 0)

    # Per distinct kernel name (kcodes index `uniq`): its type hint and the flags below,
    # found once per name and spread to the kernels by their codes.
    kcodes, uniq_names = _factorize_names(k["name"])
    hint_of = [dtype_from_kernel(nm) for nm in uniq_names]
    owner = np.full(n, -1, dtype=np.int64)
    via_ancestor = np.zeros(n, dtype=bool)
    owner_cost: dict[int, OpCost] = {}
    by_ancestor: set[int] = set()
    cand = np.flatnonzero((op_rows >= 0) & ~comm)
    if len(cand):
        # One walk per distinct (launching op, kernel name), not one per kernel.
        pair = op_rows[cand].astype(np.int64) * len(uniq_names) + kcodes[cand]
        _, first, inv = np.unique(pair, return_index=True, return_inverse=True)
        rows0, codes0 = op_rows[cand[first]], kcodes[cand[first]]
        p_owner = np.full(len(rows0), -1, dtype=np.int64)
        p_depth = np.zeros(len(rows0), dtype=np.int64)
        p_cost: list[OpCost | None] = [None] * len(rows0)
        # An op with the same name, shape args record (the loader shares one among equal
        # args) and kernel hint as another costs the same: the ops that own their kernels
        # (most) are found per distinct such key, in numpy, without a walk each.
        sel = np.flatnonzero(has_shapes[rows0])
        if len(sel):
            srows = rows0[sel]
            args_ids, _ = pd.factorize(
                np.fromiter((id(x) for x in model.arrays.shapes[srows].tolist()), dtype=np.uint64, count=len(sel))
            )
            hint_codes, _ = pd.factorize(np.array(hint_of, dtype=object)[codes0[sel]], use_na_sentinel=False)
            key = (model.arrays.name_codes[srows].astype(np.int64) * (int(args_ids.max()) + 1) + args_ids) * (
                int(hint_codes.max()) + 1
            ) + hint_codes
            _, rep_first, rep_inv = np.unique(key, return_index=True, return_inverse=True)
            rep_cost = [
                cost_of(r, hint_of[c])
                for r, c in zip(srows[rep_first].tolist(), codes0[sel][rep_first].tolist(), strict=True)
            ]
            modelled_rep = np.array([c is not None for c in rep_cost], dtype=bool)
            own = modelled_rep[rep_inv]
            p_owner[sel[own]] = srows[own]
            for j, q in zip(sel[own].tolist(), rep_inv[own].tolist(), strict=True):
                p_cost[j] = rep_cost[q]
        # The rest walk up their ops to the nearest one with a model.
        for j in np.flatnonzero(p_owner < 0).tolist():
            hint = hint_of[int(codes0[j])]
            found_at, depth = resolve(int(rows0[j]), hint)
            if found_at >= 0:
                p_owner[j], p_depth[j], p_cost[j] = found_at, depth, costs[(found_at, hint)]
        owner[cand] = p_owner[inv]
        via_ancestor[cand] = (p_owner >= 0)[inv] & (p_depth > 0)[inv]
        by_ancestor = {int(a) for a in np.unique(owner[via_ancestor])}
        # An owner's cost is that of its last kernel's hint (in kernel order), as a
        # per-kernel walk assigning it kernel by kernel would leave it.
        pos = np.flatnonzero(owner[cand] >= 0)[::-1]
        _, last = np.unique(owner[cand[pos]], return_index=True)
        for j in pos[last].tolist():
            c = p_cost[int(inv[j])]
            assert c is not None
            owner_cost[int(owner[cand[j]])] = c
    if by_ancestor:
        # An enclosing op whose other kernels have their own models would be counted twice.
        direct = {int(o) for o in np.unique(owner[(owner >= 0) & (owner == op_rows)])}
        clash = _ancestors_among(model.arrays.parent_list, direct, by_ancestor)
        if clash:
            owner[via_ancestor & np.isin(owner, list(clash))] = -1
    flops = np.zeros(n)
    nbytes = np.zeros(n)
    source = np.zeros(n, dtype=np.int8)
    meta: dict[int, tuple[str, str, bool]] = {}
    aux = np.array([any(m in nm.lower() for m in AUX_KERNEL_MARKERS) for nm in uniq_names], dtype=bool)[kcodes]
    owned = np.flatnonzero(owner >= 0)
    # Per owner: its kernels' total time, the time of its main (non-aux) kernels, its
    # longest kernel (the FLOPs' home when all its kernels are aux), by vectorised groups.
    owners, slot = np.unique(owner[owned], return_inverse=True)
    op_time = np.bincount(slot, weights=dur[owned], minlength=len(owners))
    main_time = np.bincount(slot, weights=np.where(aux[owned], 0.0, dur[owned]), minlength=len(owners))
    by_len = np.lexsort((-dur[owned], slot))  # per owner, longest first (ties: first launched)
    first = np.ones(len(by_len), dtype=bool)
    first[1:] = slot[by_len][1:] != slot[by_len][:-1]
    longest = np.full(len(owners), -1, dtype=np.int64)
    longest[slot[by_len][first]] = owned[by_len][first]
    owned_names: dict[int, list[str]] = defaultdict(list)
    winograd = np.array(["winograd" in nm.lower() for nm in uniq_names], dtype=bool)  # once per distinct name
    for i in owned[winograd[kcodes[owned]]]:
        owned_names[int(owner[i])].append(names[i])
    for o, c in owner_cost.items():
        divisor = _winograd_divisor(owned_names.get(o, []))
        if divisor != 1.0 and c.family == "conv":
            owner_cost[o] = OpCost(c.flops / divisor, c.bytes, c.dtype, c.tensor_core, c.family)
    costs_of = [owner_cost[o] for o in owners.tolist()]
    c_bytes = np.array([c.bytes for c in costs_of], dtype=float)
    c_flops = np.array([c.flops for c in costs_of], dtype=float)
    c_math = np.array([c.family in MATH_FAMILIES for c in costs_of], dtype=bool)
    ok = op_time[slot] > 0  # an owner whose kernels all took 0 µs shares nothing
    d = dur[owned]
    with np.errstate(divide="ignore", invalid="ignore"):
        shared_bytes = c_bytes[slot] * d / op_time[slot]
        shared_flops = c_flops[slot] * d / op_time[slot]
        by_main = np.where(aux[owned], 0.0, c_flops[slot] * d / main_time[slot])
    on_longest = np.where(owned == longest[slot], c_flops[slot], 0.0)
    math_flops = np.where(main_time[slot] > 0, by_main, on_longest)
    sel = owned[ok]
    nbytes[sel] = shared_bytes[ok]
    _attention_helper_bytes(model, names, owner, dur, nbytes)
    flops[sel] = np.where(c_math[slot], math_flops, shared_flops)[ok]
    source[sel] = 1
    kinds = [(c.dtype, c.family, c.tensor_core) for c in costs_of]
    meta.update(zip(sel.tolist(), (kinds[j] for j in slot[ok].tolist()), strict=True))
    unmodelled: dict[tuple[str, UncoveredReason], float] = defaultdict(float)
    codes = model.arrays.name_codes
    graph_codes = [c for c, nm in enumerate(model.arrays.name_table) if nm in GRAPH_LAUNCH_APIS]
    if len(model.host):
        graph_replay = (launch >= 0) & np.isin(codes[np.clip(launch, 0, None)], graph_codes)
    else:
        graph_replay = launch < -1
    skip = comm if measured is None else comm | measured
    for i in np.flatnonzero((source == 0) & ~skip).tolist():
        r = int(op_rows[i])
        op = model.arrays.name(r) if r >= 0 else ""
        if "multi_tensor_apply" in names[i]:
            est = _foreach_estimate(names[i], int(grids[i]), op)
            if est is not None:
                flops[i], nbytes[i], source[i] = est.flops, est.bytes, 2
                meta[i] = (est.dtype, est.family, est.tensor_core)
                continue
        if r < 0:
            unmodelled[("(no launching op)", "no_op")] += dur[i]
        elif graph_replay[i]:
            # Replayed from a CUDA graph: the ops that made the kernel ran at capture, outside
            # the trace (HTA's rank0.json: 117 ms of TF32 GEMMs under CompiledFunctionBackward).
            unmodelled[(op, "graph_replay")] += dur[i]
        elif not has_shapes[r] or not model.op_shapes(r):
            unmodelled[(op, "no_shapes")] += dur[i]
        else:
            unmodelled[(op, "no_model")] += dur[i]
    # Instructions of the kernels with a per-element count: the elements are the owner op's
    # first tensor (gelu's input, gelu_backward's and softmax backward's gradient, the
    # normalised input), shared among the owner's kernels by time as its bytes are.
    instr = np.zeros(n)
    counted = np.array([instructions_per_element(nm) for nm in uniq_names], dtype=float)[kcodes]
    for i in np.flatnonzero((counted > 0) & (source == 1)).tolist():
        o = int(owner[i])
        dims = model.op_shapes(o).get("Input Dims") or []
        lead = dims[0] if dims else None
        if isinstance(lead, list) and lead and all(isinstance(x, int) for x in lead):
            j = int(np.searchsorted(owners, o))
            instr[i] = counted[i] * float(np.prod(lead)) * dur[i] / op_time[j]
    # The non-vectorised path: per element, linear in the dimensions left after coalescing.
    legacy = {nm: legacy_coefficients(nm) for nm in uniq_names}
    has_legacy = np.array([legacy[nm] is not None for nm in uniq_names], dtype=bool)[kcodes]
    for i in np.flatnonzero((source == 1) & has_legacy).tolist():
        o = int(owner[i])
        op = model.arrays.name(o).split("::")[-1]
        found = iteration_dims(model.op_shapes(o), op == "copy_" or op.endswith("_"))
        coef = legacy[names[i]]
        if found is not None and coef is not None:
            j = int(np.searchsorted(owners, o))
            instr[i] = (coef[0] + coef[1] * found[1]) * found[0] * dur[i] / op_time[j]
    l2_port = _l2_spill_traffic(model, names, owner, grids, source)
    return _Attribution(flops, nbytes, source, meta, dict(unmodelled), owner, instr, l2_port)


def _ancestors_among(up: list[int], rows: set[int], among: set[int]) -> set[int]:
    """The rows of `among` that enclose one of `rows` within host_chain's bound (what
    `{a for r in rows for a in model.host_chain(r)[1:] if a in among}` gives), in one walk
    over the shared ancestors rather than one whole chain per row: a stack-heavy trace's
    ops share long chains of Python frames."""
    budget: dict[int, int] = {}  # row -> the most chain entries left when a walk reached it
    found: set[int] = set()
    for r in rows:
        a, left = up[r], HOST_CHAIN_LIMIT - 1  # host_chain(r)[1:]: r's ancestors, up to 511
        while a >= 0 and left > 0:
            if budget.get(a, 0) >= left:
                break  # walked from here already with at least this much of the bound left
            budget[a] = left
            if a in among:
                found.add(a)
            a, left = up[a], left - 1
    return found


def _subset(att: _Attribution, keep: np.ndarray) -> _Attribution:
    """The attribution of the kernels `keep` selects, renumbered."""
    index = np.flatnonzero(keep)
    new_of = {int(old): new for new, old in enumerate(index)}
    meta = {new_of[i]: m for i, m in att.meta.items() if i in new_of}
    instr = att.instructions[keep] if att.instructions is not None else None
    port = att.l2_port[keep] if att.l2_port is not None else None
    return _Attribution(
        att.flops[keep], att.bytes[keep], att.source[keep], meta, att.unmodelled, att.owner[keep], instr, port
    )


def _kernel_steps(model: TraceModel, k: pd.DataFrame, iterations: tuple[float, ...]) -> np.ndarray:
    """Each kernel's step: the detected iteration (host start times) its launch falls in when
    the window is made of detected iterations (a trace without ProfilerSteps, or `tracelens
    capture`'s one step around the whole run), else its launch's ProfilerStep, else -1."""
    steps = k["step"].to_numpy() if "step" in k.columns else np.full(len(k), -1)
    launch = k["launch"].to_numpy()
    if not iterations or not len(model.host):
        return steps
    ts = model.host["ts"].to_numpy()[np.clip(launch, 0, None)]
    found = np.searchsorted(np.asarray(iterations, dtype=float), ts, side="right") - 1
    return np.where((launch >= 0) & (found >= 0), found, -1)


def _fusion_chains(
    model: TraceModel, k: pd.DataFrame, att: _Attribution, iterations: tuple[float, ...] = ()
) -> tuple[FusionChain, ...]:
    """Maximal runs of consecutive fusible kernels on each stream (no other kernel between
    them), of comparable size, two passes or more."""
    order = np.lexsort((k["ts"].to_numpy(), k["stream"].to_numpy(), k["device"].to_numpy()))
    # Python lists, not numpy arrays: the walk below reads single items (a numpy scalar
    # costs an object and slower arithmetic each; the values are the same floats and ints).
    streams = (k["device"].to_numpy() * 1_000_003 + k["stream"].to_numpy())[order].tolist()
    # A chain ends at a step (iteration) boundary: fusing compilers fuse within one
    # iteration's graph, and a chain spanning iterations over-states the saving (14.7 ms
    # claimed vs 11.6 ms measured eager-vs-compiled on a 5-iteration elementwise loop).
    steps = _kernel_steps(model, k, iterations)[order].tolist()
    dur = k["dur"].to_numpy(dtype=float)[order].tolist()
    names = k["name"].astype(str).to_numpy()[order]
    nbytes = att.bytes[order].tolist()
    owner = att.owner[order].tolist()
    fusible_family = np.zeros(len(order), dtype=bool)
    for i, m in att.meta.items():
        fusible_family[i] = m[1] in FUSIBLE_FAMILIES
    fusible = ((att.source == 1) & fusible_family)[order].tolist()
    groups: dict[tuple[str, ...], list[Any]] = {}

    def close(run: list[int]) -> None:
        # Kernels of one op call are one pass (batch norm backward's reduce and apply
        # kernels are one algorithm, not a fusion the user can ask for).
        passes: list[list[int]] = []
        for j in run:
            if passes and owner[passes[-1][-1]] == owner[j]:
                passes[-1].append(j)
            else:
                passes.append([j])
        for start in range(0, len(passes), CHAIN_MAX_PASSES):
            add(passes[start : start + CHAIN_MAX_PASSES])

    def add(passes: list[list[int]]) -> None:
        if len(passes) < 2:
            return
        ops = tuple(model.arrays.name(int(owner[p[0]])) for p in passes)
        times = [float(sum(dur[j] for j in p)) for p in passes]
        g = groups.setdefault(ops, [0, 0.0, 0.0, 0.0, int(owner[passes[0][0]]), tuple(names[p[0]] for p in passes)])
        g[0] += 1
        g[1] += sum(times)
        g[2] += sum(times) - max(times)
        g[3] += float(sum(nbytes[j] for p in passes for j in p))

    run: list[int] = []
    for j in range(len(order)):
        joins = (
            fusible[j]
            and run
            and streams[j] == streams[run[-1]]
            and steps[j] == steps[run[-1]]
            and nbytes[j] > 0
            and max(nbytes[j], nbytes[run[-1]]) <= CHAIN_SIZE_RATIO * min(nbytes[j], nbytes[run[-1]])
        )
        if joins:
            run.append(j)
            continue
        close(run)
        run = [j] if fusible[j] and nbytes[j] > 0 else []
    close(run)
    chains = [FusionChain(ops, int(g[0]), g[1], g[2], g[3], g[4], g[5]) for ops, g in groups.items()]
    chains.sort(key=lambda c: -c.saved_us)
    return tuple(chains)


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


def _factorize_names(col: pd.Series, index: np.ndarray | None = None) -> tuple[np.ndarray, list[str]]:
    """`pd.factorize` of a kernel-name column's strings (of the rows `index` picks, all by
    default): codes in first-seen order and the names. From a categorical's codes where
    it is one (ints, no string hashed: the kernels of a long trace are tens of thousands)."""
    if isinstance(col.dtype, pd.CategoricalDtype):
        cat_codes = col.cat.codes.to_numpy()
        if index is not None:
            cat_codes = cat_codes[index]
        if not len(cat_codes) or int(cat_codes.min()) >= 0:  # a missing name: as strings
            codes, first = pd.factorize(cat_codes)
            cats = col.cat.categories
            return codes, [str(cats[c]) for c in first.tolist()]
    names = col.astype(str).to_numpy()
    codes, uniq = pd.factorize(names if index is None else names[index])
    return codes, [str(nm) for nm in uniq]


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


def compute_roofline(
    model: TraceModel, device: int | None, window: tuple[float, float], iterations: tuple[float, ...] = ()
) -> Roofline:
    """The roofline of `device`'s kernels in `window`. `iterations`: host start times of the
    window's detected loop iterations (where the trace has no ProfilerSteps), at which
    fusion chains end as they do at ProfilerSteps."""
    memo = model.memo
    key = ("roofline", device, window, iterations)
    if key in memo:
        return memo[key]  # type: ignore[no-any-return]
    dev = model.meta.device(device) if device is not None else model.meta.primary_device
    peaks = peaks_for(dev.name if dev else None)
    k = model.kernels()
    if device is not None:
        k = k[k["device"] == device]
    k = k[(k["end"] > window[0]) & (k["ts"] < window[1])]
    names = k["name"].astype(str).to_numpy()
    dur = k["dur"].to_numpy(dtype=float)
    launch = k["launch"].to_numpy()
    op_rows = np.where(launch >= 0, model.arrays.op[np.clip(launch, 0, None)], -1) if len(model.host) else launch
    # Collectives by kernel name or by launching op, each name tested once.
    comm = name_matches(k["name"], is_collective_kernel)
    if len(model.host):
        table = model.arrays.name_table
        comm_op = np.fromiter((n.startswith(COLLECTIVE_LAUNCH_OPS) for n in table), dtype=bool, count=len(table))
        op_codes = model.arrays.name_codes[np.clip(op_rows, 0, None)]
        comm |= (op_rows >= 0) & comm_op[np.clip(op_codes, 0, None)] & (op_codes >= 0)
    # Hardware counters first (derive/counters.py), the models where no counter exists.
    meas = measured_values(model, k.index.to_numpy())
    counted = meas.has & ~comm if meas is not None else np.zeros(len(k), dtype=bool)
    att = _attribute(model, k, comm, counted)
    # Per kernel name (first-seen order): launches, time, modelled FLOPs, bytes and time.
    kept = np.flatnonzero(~comm)
    codes, uniq = _factorize_names(k["name"], kept)
    width = len(uniq)
    instr_of = att.instructions if att.instructions is not None else np.zeros(len(k))
    with_model = att.source[kept] > 0
    flops_k, bytes_k, instr_k = att.flops[kept], att.bytes[kept], instr_of[kept]
    m_has = counted[kept]
    g_measured = np.bincount(codes, weights=m_has.astype(float), minlength=width)
    sms = (dev.num_sms if dev else None) or 0
    gx = k["grid_x"].to_numpy()
    blocks = np.where(gx > 0, gx.clip(min=1) * k["grid_y"].clip(lower=1) * k["grid_z"].clip(lower=1), 0)
    small = launch_is_latency(blocks[kept], dur[kept], sms)
    clock: float | None = None  # the SM clock over the measured kernels / the GPU's maximum
    unit_of: dict[str, tuple[str, float]] = {}  # measured name -> (its main unit, seconds at the units' peaks)
    checks: tuple[ModelCheck, ...] = ()
    if meas is not None and m_has.any():
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
        clock = sm_clock_ratio(model, dev.index if dev else None, k["ts"].to_numpy()[kept[m_has]],
                               k["end"].to_numpy()[kept[m_has]])  # fmt: skip
        if peaks is not None:
            unit_of = _measured_units(peaks, meas, kept, codes, uniq, m_has, g_measured)
    counts = np.bincount(codes, minlength=width)
    times = np.bincount(codes, weights=dur[kept], minlength=width)
    g_flops = np.bincount(codes, weights=np.where(with_model, flops_k, 0.0), minlength=width)
    g_bytes = np.bincount(codes, weights=np.where(with_model, bytes_k, 0.0), minlength=width)
    g_mtime = np.bincount(codes, weights=np.where(with_model, dur[kept], 0.0), minlength=width)
    g_instr = np.bincount(codes, weights=np.where(with_model, instr_k, 0.0), minlength=width)
    groups = {
        str(nm): (int(counts[j]), float(times[j]), float(g_flops[j]), float(g_bytes[j]), float(g_mtime[j]))
        for j, nm in enumerate(uniq)
    }
    instructions = {str(nm): float(g_instr[j]) for j, nm in enumerate(uniq)}
    port_of = att.l2_port if att.l2_port is not None else np.zeros(len(k))
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
    for nm, (unit, _sec) in unit_of.items():
        family = meta.get(nm, ("", "", False))[1]
        meta[nm] = (UNIT_DTYPES.get(unit, "fp32"), family, unit not in ("fp32", "issue"))
    transposing: dict[str, float] = defaultdict(float)  # time in copies/elementwise ops of a transposed source
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
    modelled = float(dur[(att.source == 1) & ~counted].sum())
    estimated = float(dur[(att.source == 2) & ~counted].sum())
    measured_us = float(dur[counted].sum())
    comm_us = float(dur[comm].sum())
    unmodelled_us = float(dur.sum()) - comm_us - modelled - estimated - measured_us
    rows = []
    errors = 0
    grid_of = _median_grids(codes, uniq, blocks[kept], dur[kept])
    small_time = np.bincount(codes, weights=np.where(small, dur[kept], 0.0), minlength=width)
    latency_of = {str(nm): float(small_time[j]) for j, nm in enumerate(uniq)}
    measured_of = {str(nm): int(g_measured[j]) for j, nm in enumerate(uniq) if g_measured[j] > 0}
    for name, (count, time_us, flops, nbytes, mtime) in groups.items():
        dtype, family, tc = meta.get(name, ("", "", False))
        grid = grid_of.get(name, 0)
        if mtime <= 0:
            # No shapes (a CUDA-graph replay, a compiled region): a GEMM's name still gives its
            # dtype and so its roof, though without FLOPs no rate or bound.
            gm = gemm_from_name(name)
            unit, peak = peaks.roof(gm.dtype, True, name) if gm and peaks else ("", 0.0)
            # Latency needs no model: a grid too small to fill the SMs (Nsight Compute's "grid
            # is too small" rule; train's arange, 64 blocks) or launches too short to ramp up.
            short = peaks is not None and (time_us / count < LATENCY_US or 0 < grid < sms * SMALL_GRID_SHARE)
            rows.append(KernelRoof(name, int(count), time_us, 0, 0, gm.dtype if gm else dtype,
                                   "matmul" if gm else family, bool(gm) or tc, 0, 0, 0, 0, 0,
                                   "latency" if short else "unknown",
                                   UNIT_NAMES.get(unit, ""), peak, grid=grid, unit=unit))  # fmt: skip
            continue
        fps = flops / (mtime * 1e-6)
        bps = nbytes / (mtime * 1e-6)
        ai = flops / nbytes if nbytes > 0 else float("inf")
        if peaks is None:  # rates without roofs: no bound
            rows.append(KernelRoof(name, int(count), time_us, flops, nbytes, dtype, family, tc, fps, bps, ai, 0, 0,
                                   "unknown", grid=grid))  # fmt: skip
            continue
        measured_unit = unit_of.get(name)
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
        port, port_time = l2_port.get(name, (0.0, 0.0))
        l2_share = port / (port_time * 1e-6) / peaks.l2_write if peaks.l2_write > 0 and port > 0 else 0.0
        memory_share = max(dram_share, l2_share)
        by_l2 = l2_share > dram_share
        if winograd:
            # Winograd convolutions do fewer multiplies than the direct FLOPs we count:
            # their "FLOP/s" can pass the peak without the model being wrong.
            flop_share = min(flop_share, 1.0)
        instr = instructions.get(name, 0.0)
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
        if max(flop_share, compute_share, memory_share) > MODEL_ERROR_SHARE:
            # Above the datasheet roof: the FLOP, instruction or byte model (or the peak) is wrong.
            errors += 1
            bound = "unknown"
        elif transposing.get(name, 0.0) > mtime / 2 and time_us / count >= LATENCY_US and grid >= sms:
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
        rows.append(KernelRoof(name, int(count), time_us, flops, nbytes, dtype, family, tc, fps, bps, ai, roof,
                               share, bound, roof_name, roof_value, ceiling, compute_share, memory_share, grid,
                               unit, instr, issue_share, l2_share, latency_of.get(name, 0.0),
                               measured_of.get(name, 0)))  # fmt: skip
    rows.sort(key=lambda r: -r.time_us)
    classified = sum(r.time_us for r in rows if r.bound != "unknown")
    roofed = {r.name for r in rows if r.bound in ("memory", "compute")}
    in_roofed = np.fromiter((str(nm) in roofed for nm in uniq), dtype=bool, count=width)
    latency_rows = k.index.to_numpy()[kept[small & in_roofed[codes]]]
    unmodelled = tuple(
        Unmodelled(op, reason, t) for (op, reason), t in sorted(att.unmodelled.items(), key=lambda kv: -kv[1])
    )
    result = Roofline(
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
        checks,
    )
    memo[key] = result
    return result


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


def for_context(ctx: AnalysisContext) -> Roofline:
    window = (ctx.window.start_us, ctx.window.end_us)
    w = ctx.window
    iterations = tuple(st.start_us for st in w.steps) if w.source == "detected" else ()
    return compute_roofline(ctx.model, ctx.device, window, iterations)


def _gain_to_roof(r: KernelRoof) -> float:
    """Time saved if the kernel group ran at the rate it can sustain: the ceiling measured
    on this GPU where there is one (790 TFLOP/s bf16, 4.3 TB/s on the H200: the datasheet
    roof is not reachable on random data under the power cap), else the datasheet roof."""
    if r.roof_share <= 0 or r.roof_value <= 0:
        return 0.0
    reachable = min(r.measured_ceiling, r.roof_value) if r.measured_ceiling > 0 else r.roof_value
    return r.bound_us * max(1.0 - r.roof_share * r.roof_value / reachable, 0.0)


def _ledger_capped(ctx: AnalysisContext, cause: str, kernel_us: float) -> float:
    dev = ctx.ledger.primary
    return min(kernel_us, dev.by_cause.get(cause, 0.0)) if dev is not None else kernel_us


def _sites(rows: list[KernelRoof], describe: Callable[[KernelRoof], str]) -> tuple[Site, ...]:
    """The costliest kernel groups as finding sites."""
    return tuple(
        Site(description=describe(r), count=r.count, time_us=r.bound_us, kernels=(r.name,)) for r in rows[:MAX_SITES]
    )


def _eager_attention_finding(ctx: AnalysisContext, roof: Roofline) -> Finding | None:
    """Attention written as matmul > softmax > matmul: it writes and reads the [Lq x Lk]
    score matrix (several times) where a fused kernel keeps it on chip."""
    calls = eager_attention(ctx.model, roof.peaks, roof.window)
    if not calls:
        return None
    total = sum(c.time_us for c in calls)
    sdpa = sum(c.sdpa_us for c in calls)
    gain = total - sdpa
    groups: dict[tuple[int, int, int, int, str], list[EagerAttention]] = defaultdict(list)
    for c in calls:
        groups[(c.batch, c.queries, c.keys, c.head_dim, c.dtype)].append(c)
    sites = []
    for (b, lq, lk, d, dtype), cs in sorted(groups.items(), key=lambda kv: -sum(c.time_us for c in kv[1])):
        t = sum(c.time_us for c in cs)
        ops = tuple(dict.fromkeys(ctx.model.arrays.name(r) for r in cs[0].rows))
        sites.append(
            Site(
                description=(
                    f"{' > '.join(o.split('::')[-1] for o in ops)} on {b}x{lq}x{lk} scores (head dim {d}, {dtype}): "
                    f"{fmt_us(t / len(cs))} a call eager, about {fmt_us(sum(c.sdpa_us for c in cs) / len(cs))} "
                    "with scaled_dot_product_attention"
                ),
                count=len(cs),
                time_us=t,
                ops=ops,
                source=user_source(ctx.model, cs[0].rows[0]),
                kind="eager_attention",
            )
        )
    share = ctx.share(total)
    return Finding(
        category=Category.EAGER_ATTENTION,
        severity=severity_for(ctx.share(gain)),
        title=(
            f"Attention is written out as matmul > softmax > matmul: {len(calls)} calls take {fmt_us(total)} "
            f"({share:.0%}); torch.nn.functional.scaled_dot_product_attention would take about {fmt_us(sdpa)}"
        ),
        time_us=total,
        share=share,
        advice=(
            "Replace the matmul > softmax (> dropout) > matmul sequence with "
            "torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=..., dropout_p=..., scale=...): "
            "one fused (flash or memory-efficient) kernel that never writes the Lq x Lk score matrix to memory. "
            'Hugging Face models take attn_implementation="sdpa" in from_pretrained where they support it. '
            "Padding the sequence for aligned matmuls is a much smaller win."
        ),
        expected_gain_us=gain,
        gain_note=(
            f"eager time minus the same attention at {SDPA_ROOF_SHARE:.0%} of the dtype's tensor-core roof (what "
            "cuDNN/flash SDPA reached on the H200; OWLv2's 5185-token layer: 3.33 ms eager, 0.30 ms SDPA measured)"
        ),
        evidence=(
            Metric("eager attention calls", len(calls), "count"),
            Metric("eager attention kernel time", total, "us"),
            Metric("estimated with scaled_dot_product_attention", sdpa, "us"),
        ),
        sites=tuple(sites[:MAX_SITES]),
    )


def analyze(ctx: AnalysisContext) -> list[Finding]:
    roof = for_context(ctx)
    if roof.peaks is None or not roof.kernels:
        return []
    findings = []
    eager = _eager_attention_finding(ctx, roof)
    if eager is not None:
        findings.append(eager)
    mem = [r for r in roof.kernels if r.bound == "memory"]
    # The ledger's share of the window: kernels overlapping on several streams count once.
    mem_time = _ledger_capped(ctx, "gpu_busy_memory", sum(r.bound_us for r in mem))
    if mem_time > 0:
        elementwise = [r for r in mem if r.family in ("elementwise", "copy")]
        compiled = [r for r in mem if r.family == "compiled"]
        ew_time = sum(r.bound_us for r in elementwise)
        copies = [r for r in mem if r.family == "copy"]
        copy_time = sum(r.bound_us for r in copies)
        copy_bytes = sum(r.bytes for r in copies)
        # A chain of n passes fused makes about one: it saves all but its longest kernel.
        # Other memory-bound kernels can at best reach the bandwidth roof.
        chains = roof.chains
        chain_saved = sum(c.saved_us for c in chains)
        gain = chain_saved + sum(_gain_to_roof(r) for r in mem if r.family not in FUSIBLE_FAMILIES)
        share = ctx.share(mem_time)
        chain_sites = tuple(
            Site(
                description=(
                    f"{len(c.ops)} passes back to back: {' > '.join(op.split('::')[-1] for op in c.ops[:6])}"
                    f"{' > ...' if len(c.ops) > 6 else ''}; "
                    f"fused, about one pass ({fmt_us(c.saved_us)} saved)"
                ),
                count=c.count,
                time_us=c.time_us,
                ops=c.ops,
                source=user_source(ctx.model, c.first_row),
                kernels=c.kernels,
                kind="fusion_chain",
            )
            for c in chains[:MAX_CHAINS]
        )
        kernel_sites = _sites(mem, _memory_site)
        spilling = [r for r in mem if r.roof_name == L2_ROOF_NAME]
        findings.append(
            Finding(
                category=Category.MEMORY_BOUND,
                severity=severity_for(ctx.share(gain)),
                title=(
                    f"{fmt_us(mem_time)} ({share:.0%}) of the profiled time is in memory-bound kernels; "
                    f"{sum(c.count for c in chains)} chains of back-to-back elementwise/norm passes could fuse"
                    if chains
                    else f"{fmt_us(mem_time)} ({share:.0%}) of the profiled time is in memory-bound kernels, "
                    f"{fmt_us(ew_time)} of it elementwise ops and copies"
                ),
                time_us=mem_time,
                share=share,
                advice=(
                    "These kernels wait on memory, not arithmetic: fuse chains of elementwise ops so data "
                    "makes one round trip instead of one per op (torch.compile does this; the chains are listed "
                    "with their source), avoid copies and casts (.contiguous(), .to(dtype) inside the step), keep "
                    "activations in bf16, and reuse buffers in place where autograd allows."
                    + (
                        f" {fmt_us(sum(r.bound_us for r in spilling))} is fp32 memory-efficient attention spilling "
                        "registers: its spills fill the L2 port while DRAM idles. Run attention in bf16/fp16 "
                        "(torch.autocast), where SDPA picks the flash or cuDNN kernels, which keep their tiles on chip."
                        if spilling
                        else ""
                    )
                ),
                expected_gain_us=gain,
                gain_note=(
                    "each chain of back-to-back passes fused into one (all but its longest kernel saved; on the "
                    "H200 eager-vs-compiled case this over-estimated the saving by 11%) plus the other "
                    "memory-bound kernels' distance to the bandwidth roof"
                ),
                evidence=(
                    Metric("memory-bound kernel time", mem_time, "us"),
                    Metric("elementwise and copy kernels", ew_time, "us"),
                    Metric("time in fusible chains", sum(c.time_us for c in chains), "us"),
                    Metric("saved by fusing the chains (estimate)", chain_saved, "us"),
                    Metric("copies and casts", copy_time, "us"),
                    Metric("bytes copied or cast", copy_bytes, "bytes"),
                    Metric("bandwidth roof (bytes/s)", roof.peaks.bw, "bytes_per_s"),
                    Metric("modelled share of kernel time", roof.coverage, "share"),
                    Metric(
                        "compiled (Triton) kernels, modelled from their buffers (FLOPs a guess)",
                        sum(r.time_us for r in compiled),
                        "us",
                    ),
                ),
                sites=(chain_sites + kernel_sites)[:MAX_SITES],
            )
        )
    comp = [r for r in roof.kernels if r.bound == "compute"]
    comp_time = _ledger_capped(ctx, "gpu_busy_compute", sum(r.bound_us for r in comp))
    if comp_time > 0:
        tf32 = roof.peaks.flops.get("tf32", 0.0)
        # fp32 matmuls and convolutions on CUDA cores, on a GPU that has TF32 (not V100/T4).
        fp32_mm = [r for r in comp if r.tensor_core and r.unit == "fp32" and r.dtype == "fp32"] if tf32 else []
        fp32_time = sum(r.bound_us for r in fp32_mm)
        fp32_gain = fp32_time * (1 - roof.peaks.flops.get("fp32", 0.0) / tf32) if tf32 else 0.0
        eff = sum(r.bound_us * r.roof_share for r in comp) / comp_time
        # A kernel in a fusion chain is the memory finding's to gain from (fusing removes
        # its pass): counting its distance to the roof here too would count it twice.
        in_chains = {name for c in roof.chains for name in c.kernels}
        gain = fp32_gain + sum(_gain_to_roof(r) for r in comp if r not in fp32_mm and r.name not in in_chains)
        share = ctx.share(comp_time)
        advice = (
            "These kernels are limited by arithmetic: check their efficiency against the peak (the table), "
            "use bf16/fp16 (or fp8 where accuracy allows) so they run on tensor cores, and keep matmul shapes "
            "aligned and wave-friendly (the matmul findings)."
        )
        issue_bound = [r for r in comp if r.unit == "issue"]
        if issue_bound:
            # The non-vectorised path's count grows by 12-14 instructions an element for
            # every dimension it cannot merge (LEGACY_INSTRUCTIONS): there the layout is the cost.
            strided = [r for r in issue_bound if legacy_coefficients(r.name) is not None]
            strided_us = sum(r.bound_us for r in strided)
            examples = (
                " (GELU's erf, softmax's exp, layer norm's Welford division)" if len(strided) < len(issue_bound) else ""
            )
            advice += (
                f" {fmt_us(sum(r.bound_us for r in issue_bound))} of them are elementwise/norm kernels that run out of "
                f"instruction issue, not FLOPs or bandwidth{examples}: fusing them into the neighbouring kernels "
                "(torch.compile, a fused epilogue) removes their separate passes; tensor cores do not help them."
            )
            if strided:
                advice += (
                    f" {fmt_us(strided_us)} of those run ATen's non-vectorised path because an operand is broadcast "
                    "or strided (a transposed or sliced view), and most of their instructions compute offsets, one "
                    "set per dimension that cannot be merged. Fusing is the fix there too; where one strided view "
                    "feeds several ops, a single .contiguous() upstream moves them to the vectorised path."
                )
        if fp32_time:
            advice += (
                f" {fmt_us(fp32_time)} of fp32 matmuls run on CUDA cores: "
                "torch.backends.cuda.matmul.allow_tf32 = True (or torch.set_float32_matmul_precision('high')) "
                "moves them to tensor cores."
            )
        findings.append(
            Finding(
                category=Category.COMPUTE_BOUND,
                severity=severity_for(ctx.share(gain)),
                title=(
                    f"{fmt_us(comp_time)} ({share:.0%}) of the profiled time is in compute-bound kernels at "
                    f"{eff:.0%} of their peak on average"
                ),
                time_us=comp_time,
                share=share,
                advice=advice,
                expected_gain_us=gain,
                gain_note=(
                    "each compute-bound kernel's distance to its roof (kernels in a fusion chain are left to the "
                    "memory finding), plus fp32 matmuls at the TF32 peak"
                ),
                evidence=(
                    Metric("compute-bound kernel time", comp_time, "us"),
                    Metric("time-weighted share of the roof", eff, "share"),
                    Metric("fp32 matmul time", fp32_time, "us"),
                    Metric("peak used (bf16 FLOP/s)", roof.peaks.peak("bf16", True), "number"),
                ),
                sites=_sites(comp, _compute_site),
            )
        )
    return findings


def _memory_site(r: KernelRoof) -> str:
    if r.roof_name == L2_ROOF_NAME:
        return (
            f"{r.family or 'kernel'} {r.dtype}: register spills through L2 at {r.l2_share:.0%} of the L2 write port; "
            f"DRAM {r.bytes_per_s / 1e9:.0f} GB/s"
        )
    return (
        f"{r.family or 'kernel'}: {r.bytes_per_s / 1e9:.0f} GB/s "
        f"({r.roof_share:.0%} of the roof), {r.intensity:.2f} FLOP/B"
    )


def _compute_site(r: KernelRoof) -> str:
    if r.unit == "issue":
        # Instruction-bound: the FLOP count says little (erf, exp, conversions are not FLOPs).
        return (
            f"{r.family or 'kernel'} {r.dtype}: instruction-bound, {r.instructions / (r.time_us * 1e-6) / 1e12:.1f} T "
            f"instructions/s ({r.roof_share:.0%} of the issue roof)"
            + ("; non-vectorised: a broadcast or strided operand" if legacy_coefficients(r.name) is not None else "")
        )
    return (
        f"{r.family or 'kernel'} {r.dtype}: {r.flops_per_s / 1e12:.0f} TFLOP/s "
        f"({r.roof_share:.0%} of the roof), {r.intensity:.0f} FLOP/B"
    )


def bound_of(ctx: AnalysisContext) -> dict[str, str]:
    """Kernel name -> bound, for the report's kernel table."""
    return {r.name: r.bound for r in for_context(ctx).kernels}


# --- Eager attention -------------------------------------------------------------------

#: Ops that make attention scores (Q @ K^T) or apply them (P @ V).
ATTN_MATMULS = frozenset({"aten::bmm", "aten::matmul", "aten::baddbmm", "aten::einsum"})
ATTN_SOFTMAX = frozenset({"aten::softmax", "aten::_softmax", "aten::_safe_softmax"})
ATTN_DROPOUT = frozenset({"aten::dropout", "aten::native_dropout", "aten::feature_dropout"})
#: Score matrices narrower than this are not worth a fused kernel (and are rarely attention).
ATTN_MIN_KEYS = 64
#: Ops allowed between the score matmul, the softmax and the value matmul (scale, mask,
#: views, casts) before the pattern is dropped.
ATTN_MAX_GAP_OPS = 12
#: The share of its dtype's roof a fused SDPA kernel reaches: measured on the H200 in
#: tests/data/ncu (cuDNN flash forward 48% of the bf16 datasheet roof, memory-efficient fp32
#: attention 39% of the fp32 roof); the OWLv2 layer of issue 10 ran 0.30 ms in SDPA vs the
#: 0.28 ms this gives.
SDPA_ROOF_SHARE = 0.4


@dataclass(frozen=True)
class EagerAttention:
    """One call of attention written as matmul > softmax (> dropout) > matmul."""

    rows: tuple[int, ...]  # host rows of the ops in the pattern (score matmul first)
    batch: int  # batch x heads
    queries: int
    keys: int
    head_dim: int
    dtype: str
    time_us: float  # kernel time of the pattern's ops (scores, softmax, dropout, values, and the scale/mask between)
    sdpa_us: float  # the same attention as one fused SDPA kernel, estimated


def _last2(d: Any) -> tuple[int, int] | None:
    """The last two dims of a tensor's shape, or None for a non-tensor argument."""
    ok = isinstance(d, list) and len(d) >= 2 and all(isinstance(x, int) for x in d)
    return (int(d[-2]), int(d[-1])) if ok else None


def _batch(d: list[int]) -> int:
    out = 1
    for x in d[:-2]:
        out *= int(x)
    return out


def eager_attention(
    model: TraceModel, peaks: DevicePeaks | None, window: tuple[float, float] | None = None
) -> tuple[EagerAttention, ...]:
    """Calls of attention written out: a (b)bmm/matmul whose output is [.., Lq, Lk], a softmax
    over a tensor of that shape, maybe a dropout, then a bmm/matmul whose first input has it.
    Their kernel time counts kernels inside `window` (the profiled window) only."""
    memo = model.memo
    key = ("eager_attention", peaks.name if peaks else None, window)
    if key in memo:
        return memo[key]  # type: ignore[no-any-return]
    host = model.host
    if host.empty:
        return ()
    # Rows by name code: the names are tested once per distinct name, not once per row.
    codes, table = model.arrays.name_codes, model.arrays.name_table
    attn = ATTN_MATMULS | ATTN_SOFTMAX | ATTN_DROPOUT
    wanted = np.flatnonzero(np.isin(codes, [c for c, nm in enumerate(table) if nm in attn]))
    kinds = host["kind"].to_numpy()
    op_kind = kinds[wanted[0]] if len(wanted) else 0
    all_ops = np.flatnonzero(kinds == op_kind)

    def position(r: int) -> int:
        """A row's order among the ops (0 when it is none), for the gap limit: a search
        in the sorted op rows rather than a dict of every op row."""
        i = int(np.searchsorted(all_ops, r))
        return i if i < len(all_ops) and int(all_ops[i]) == r else 0

    tids = host["tid"].to_numpy()
    ts = host["ts"].to_numpy()
    found: list[list[Any]] = []
    state: dict[int, list[Any]] = {}  # tid -> [stage, rows, (B, Lq, Lk, D), dtype, last position]
    for r in sorted((int(x) for x in wanted), key=lambda x: ts[x]):
        name = table[codes[r]]
        dims = model.op_shapes(r).get("Input Dims") or []
        types = model.op_shapes(r).get("Input type") or []
        tid = int(tids[r])
        st = state.get(tid)
        pos = position(r)
        if st is not None and pos - st[4] > ATTN_MAX_GAP_OPS:
            st = state.pop(tid, None)
        if name in ATTN_MATMULS and name != "aten::einsum":
            a, b = (dims[1], dims[2]) if name == "aten::baddbmm" and len(dims) >= 3 else (*dims[:2], None, None)[:2]
            la, lb = _last2(a), _last2(b)
            if st is not None and st[0] == 2 and la is not None and la == st[2][1:3] and lb is not None:
                b_, lq, lk, d = st[2]  # P @ V: done
                found.append([(*st[1], r), b_, lq, lk, d, st[3]])
                state.pop(tid, None)
                continue
            if la is not None and lb is not None and la[1] == lb[0] and lb[1] >= ATTN_MIN_KEYS:
                if st is None or st[0] != 1 or st[2][1:3] != (la[0], lb[1]):
                    dtype = DTYPE_SHORT.get(str(types[0]), str(types[0])) if types else ""
                    state[tid] = [1, (r,), (_batch(a), la[0], lb[1], la[1]), dtype, pos]
                else:
                    st[4] = pos
            continue
        if st is None:
            continue
        shape = _last2(dims[0]) if dims else None
        softmax = name in ATTN_SOFTMAX and st[0] == 1
        dropout = name in ATTN_DROPOUT and st[0] == 2
        if (softmax or dropout) and shape == st[2][1:3]:
            state[tid] = [2, (*st[1], r), st[2], st[3], pos]
    if not found:
        memo[key] = ()
        return ()
    # Kernel time of each pattern: kernels launched under its ops, and under the ops between
    # them that touch the score matrix (scale, mask add).
    k = model.kernels()
    if window is not None:
        k = k[(k["end"] > window[0]) & (k["ts"] < window[1])]
    launch = k["launch"].to_numpy()
    kop = np.where(launch >= 0, model.arrays.op[np.clip(launch, 0, None)], -1) if len(host) else launch
    dur = k["dur"].to_numpy(dtype=float)
    root = host["op_root"].to_numpy()
    by_root: dict[int, float] = defaultdict(float)
    for o, d in zip(kop, dur, strict=True):
        if o >= 0:
            by_root[int(root[o])] += d
    out = []
    for rows, b_, lq, lk, d, dtype in found:
        first, last = rows[0], rows[-1]
        tid = tids[first]
        roots = {int(root[r]) for r in rows}
        lo, hi = position(int(root[first])), position(int(root[last]))
        for r in all_ops[lo : hi + 1]:
            r = int(r)
            if tids[r] == tid and root[r] == r and r not in roots:
                dims = model.op_shapes(r).get("Input Dims") or []
                if any(_last2(x) == (lq, lk) for x in dims):
                    roots.add(r)
        t = sum(by_root.get(r, 0.0) for r in roots)
        flops = 4.0 * b_ * lq * lk * d
        sdpa = 0.0
        if peaks is not None:
            _, peak = peaks.roof(dtype or "bf16", True)
            item = SHORT_DTYPE_BYTES.get(dtype, 2)
            io = 4.0 * b_ * lq * d * item  # q, k, v, out (lq ~ lk)
            sdpa = 1e6 * max(flops / (SDPA_ROOF_SHARE * peak) if peak else 0.0, io / peaks.bw if peaks.bw else 0.0)
        if t > 0:
            out.append(EagerAttention(tuple(sorted(roots)), b_, lq, lk, d, dtype, t, min(sdpa, t)))
    result = tuple(out)
    memo[key] = result
    return result


def eager_attention_shapes(ctx: AnalysisContext) -> set[tuple[int, int, int, int]]:
    """(batch, M, N, K) of the matmuls inside eager attention (both orders of M and N): the
    matmul findings leave them to the eager-attention finding, whose fix removes them."""
    roof = for_context(ctx)
    out: set[tuple[int, int, int, int]] = set()
    for c in eager_attention(ctx.model, roof.peaks, roof.window):
        for m, n, k in ((c.queries, c.keys, c.head_dim), (c.queries, c.head_dim, c.keys)):
            out |= {(c.batch, m, n, k), (c.batch, n, m, k)}
    return out
