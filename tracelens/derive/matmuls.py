"""The matmuls of a trace: shapes, layouts, kernels, tiles and waves.

Shared by the misaligned_matmul and wave_quantization analyzers and shown as the report's
matmul table. Reads the leaf matmul ops (`aten::mm`, `addmm`, `bmm`, `baddbmm`; `linear`
and `matmul` dispatch to these) with their `Input Dims`, `Input type` and `Input
Strides` (record_shapes=True), and the kernels each launched.

Conventions: torch's row-major C[M, N] = A[M, K] @ B[K, N]. cuBLAS is column-major, so
the kernel computes C^T = B^T A^T: the kernel's tile "MxN" in its name spans torch's N
along its first number and torch's M along its second.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from tracelens.domain import DTYPE_BYTES, DTYPE_SHORT, SHORT_DTYPE_BYTES
from tracelens.model.schema import Kind
from tracelens.model.sources import user_source
from tracelens.model.trace import TraceModel, name_matches
from tracelens.report.trace_report import MatmulRow as MatmulRow
from tracelens.report.trace_report import MisalignedDim  # the contract's row, made here

#: Leaf matmul ops and where A and B sit in their inputs.
MATMUL_OPS: dict[str, tuple[int, int]] = {
    "aten::mm": (0, 1),
    "aten::addmm": (1, 2),
    "aten::bmm": (0, 1),
    "aten::baddbmm": (1, 2),
    "aten::_scaled_mm": (0, 1),
    "aten::_int_mm": (0, 1),
    "aten::_addmm_activation": (1, 2),
}

#: dtypes that run on tensor cores, where operand alignment decides the kernel. Plain
#: fp32 runs SIMT kernels (sgemm) unless TF32 is on, and has no such cliff.
TENSOR_CORE_DTYPES = frozenset({"bf16", "fp16", "fp8_e4m3", "fp8_e5m2", "fp8_e4m3fnuz", "fp8_e5m2fnuz"})
#: Shapes with a dimension this small are matrix-vector work, not tiled GEMMs.
MIN_GEMM_DIM = 8

#: Tensor-core kernels want each operand's leading dimension (and the output's) to be a
#: multiple of 16 bytes: 8 bf16/fp16 elements, 4 fp32, 16 fp8. Otherwise cuBLAS falls
#: back to slower kernels (on the H200: a Turing `cutlass_75_..._align1`, 2.6-5x slower;
#: gpu-trace-facts.md).
ALIGN_BYTES = 16

_TILE_PATTERNS = (
    re.compile(r"nvjet_(?:sm\d+_)?[a-z]+_(\d+)x(\d+)_"),  # Hopper/Blackwell cuBLAS (persistent)
    re.compile(r"MT(\d+)x(\d+)x\d+"),  # AMD Tensile: Cijk_..._MT64x32x16_...
    re.compile(r"tilesize(\d+)x(\d+)x\d+"),  # sm80_xmma / sm90_xmma
    re.compile(r"cutlass\w*?_(\d+)x(\d+)_\d+x\d+"),  # cutlass_80_tensorop_..._256x128_64x3
    re.compile(r"cutlass\w*?gemm\w*?_(\d+)x(\d+)_"),  # cutlass_75_..._256x128_nn_align1
    re.compile(r"(?:sgemm|hgemm|gemm)_(\d+)x(\d+)"),  # ampere_sgemm_128x64_tn, volta_h884gemm_...
)
_ARCH_RE = re.compile(r"(?:cutlass_|sm_?|cutlass::arch::Sm)(\d{2,3})")


@dataclass(frozen=True)
class Tile:
    m: int  # the kernel's first tile dimension (torch's N)
    n: int  # the kernel's second (torch's M)
    source: str  # "name" or "grid"


def parse_tile(kernel: str) -> Tile | None:
    for pattern in _TILE_PATTERNS:
        m = pattern.search(kernel)
        if m:
            a, b = int(m.group(1)), int(m.group(2))
            if 8 <= a <= 512 and 8 <= b <= 512:
                return Tile(a, b, "name")
    return None


#: Operand types in cuBLAS/CUTLASS/xmma GEMM kernel names (first match wins): CUTLASS's
#: s1688/s16816 are TF32 MMA on fp32 data, h/bf16 prefixes half types; xmma spells types.
_GEMM_NAME_DTYPES = (
    ("bf16", "bf16"),
    ("tf32", "fp32"),
    ("f16", "fp16"),
    ("h1688", "fp16"),
    ("h16816", "fp16"),
    ("h884", "fp16"),
    ("e4m3", "fp8_e4m3"),
    ("s1688", "fp32"),
    ("s16816", "fp32"),
)
_GEMM_NAME_RE = re.compile(r"gemm|nvjet|xmma", re.IGNORECASE)
_ALIGN_RE = re.compile(r"align(\d+)\b")


@dataclass(frozen=True)
class GemmName:
    """What a tensor-core GEMM kernel's name says when the trace records no shapes for it
    (kernels replayed from a CUDA graph, or launched inside a compiled region)."""

    dtype: str  # operand type (fp32 = TF32 tensor cores)
    tile: Tile | None
    align_elements: int  # vector width the kernel assumes for its operands (0: not named)
    itemsize: int

    @property
    def misaligned(self) -> bool:
        """Built for operands not aligned to 16 bytes: cuBLAS's fallback for odd leading dims."""
        return 0 < self.align_elements * self.itemsize < ALIGN_BYTES


def gemm_from_name(kernel: str) -> GemmName | None:
    """The kernel-name model of a tensor-core GEMM: dtype, tile and operand alignment."""
    low = kernel.lower()
    if not _GEMM_NAME_RE.search(low) or not any(t in low for t in ("tensorop", "xmma", "nvjet", "s1688", "s16816")):
        return None
    dtype = next((d for marker, d in _GEMM_NAME_DTYPES if marker in low), "")
    if not dtype or "ffma" in low or "simt" in low:
        return None
    align = _ALIGN_RE.search(low)
    item = SHORT_DTYPE_BYTES.get(dtype, 1)
    return GemmName(dtype, parse_tile(kernel), int(align.group(1)) if align else 0, item)


def kernel_arch(kernel: str) -> int | None:
    """SM architecture a kernel was built for, from its name (cutlass_75 -> 75)."""
    m = _ARCH_RE.search(kernel)
    return int(m.group(1)) if m else None


def is_persistent(kernel: str) -> bool:
    """Kernels that loop over tiles with a grid of at most one CTA per SM."""
    return kernel.startswith("nvjet_") or "persistent" in kernel.lower() or "warpspecialized" in kernel.lower()


@dataclass(frozen=True)
class MatmulShape:
    op: str
    m: int
    n: int
    k: int
    batch: int
    dtype: str
    itemsize: int
    layout: str  # "NN", "TN", ... for A and B (N = row-major as torch sees it, T = transposed)
    lda: int
    ldb: int


def shape_of(op: str, shapes: dict[str, object]) -> MatmulShape | None:
    dims = shapes.get("Input Dims")
    types = shapes.get("Input type")
    strides = shapes.get("Input Strides")
    ia, ib = MATMUL_OPS[op]
    if not isinstance(dims, list) or len(dims) <= ib:
        return None
    a, b = dims[ia], dims[ib]
    if not (isinstance(a, list) and isinstance(b, list)) or len(a) < 2 or len(b) < 2:
        return None
    try:
        m, k = int(a[-2]), int(a[-1])
        k2, n = int(b[-2]), int(b[-1])
    except (TypeError, ValueError):
        return None
    if k != k2 or min(m, n, k) <= 0:
        return None
    batch = int(np.prod(a[:-2])) if len(a) > 2 else 1
    dtype = str(types[ia]) if isinstance(types, list) and len(types) > ia else ""
    itemsize = DTYPE_BYTES.get(dtype, 2)

    def layout_and_ld(st: object, rows: int, cols: int) -> tuple[str, int]:
        if isinstance(st, list) and len(st) >= 2:
            s_row, s_col = int(st[-2]), int(st[-1])
            if s_col == 1 or cols == 1:
                return "N", s_row if rows > 1 else cols
            if s_row == 1 or rows == 1:
                return "T", s_col if cols > 1 else rows
        return "N", cols  # no strides recorded: assume contiguous

    sa = strides[ia] if isinstance(strides, list) and len(strides) > ia else None
    sb = strides[ib] if isinstance(strides, list) and len(strides) > ib else None
    la, lda = layout_and_ld(sa, m, k)
    lb, ldb = layout_and_ld(sb, k, n)
    return MatmulShape(op, m, n, k, batch, DTYPE_SHORT.get(dtype, dtype), itemsize, la + lb, lda, ldb)


def misaligned_dims(s: MatmulShape) -> list[MisalignedDim]:
    """Which leading dimensions are not a multiple of 16 bytes, in torch's terms."""
    align = max(ALIGN_BYTES // s.itemsize, 1)
    out = []
    if s.lda % align:
        out.append(MisalignedDim("A", "K" if s.layout[0] == "N" else "M", s.lda))
    if s.ldb % align:
        out.append(MisalignedDim("B", "N" if s.layout[1] == "N" else "K", s.ldb))
    if s.n % align and not any(d.dim == "N" for d in out):
        out.append(MisalignedDim("C", "N", s.n))
    return out


def waves_of(tiles: int, slots: int) -> tuple[float, float, float]:
    """(waves, last-wave fill, efficiency) for `tiles` CTAs on `slots` concurrent CTAs."""
    if tiles <= 0 or slots <= 0:
        return 0.0, 1.0, 1.0
    waves = tiles / slots
    full = max(math.ceil(waves), 1)  # absurd slots (10**400) underflow waves to 0.0
    fill = waves - (full - 1)
    return waves, fill, waves / full


def ctas_per_sm(props: dict[str, object], smem: int, regs: int, threads: int) -> int:
    """Concurrent CTAs of one kernel per SM, from its shared memory, registers and
    threads (the occupancy calculator's three limits); 1 when unknown."""

    def num(key: str) -> int:
        v = props.get(key)
        return int(v) if isinstance(v, int | float) else 0

    limits = []
    smem_sm = num("sharedMemPerMultiprocessor") or num("maxSharedMemoryPerMultiProcessor")
    if smem > 0 and smem_sm:
        limits.append(smem_sm // smem)
    regs_sm = num("regsPerMultiprocessor")
    if regs > 0 and threads > 0 and regs_sm:
        limits.append(regs_sm // (regs * threads))
    threads_sm = num("maxThreadsPerMultiprocessor")
    if threads > 0 and threads_sm:
        limits.append(threads_sm // threads)
    return max(min(limits), 1) if limits else 1


def matmul_table(model: TraceModel) -> pd.DataFrame:
    """One row per matmul op call with its shape, kernels and time on the GPU."""
    host = model.host
    arr = model.arrays
    # Row numbers, not a DataFrame of the op rows (a copy of every host column).
    ops = np.flatnonzero(
        (host["kind"].to_numpy() == int(Kind.CPU_OP)) & name_matches(host["name"], MATMUL_OPS.__contains__)
    )
    cols = [
        "row", "op", "m", "n", "k", "batch", "dtype", "itemsize", "layout", "lda", "ldb",
        "kernel", "kernel_us", "n_kernels", "grid", "smem", "regs", "threads", "ts",
    ]  # fmt: skip
    if not len(ops):
        return pd.DataFrame(columns=cols)
    k = model.kernels()
    k = k[k["launch"] >= 0]
    k_op = arr.op[k["launch"].to_numpy()]
    keep = np.isin(k_op, ops)
    k, k_op = k[keep], k_op[keep]
    # Each op's kernels as a run of a stable sort by op row (so in trace order within an
    # op, as a groupby gives them), read from numpy columns: no DataFrame per op, and the
    # per-op numbers (main kernel, time, grid) for all ops at once.
    order = np.argsort(k_op, kind="stable")
    sorted_ops = k_op[order]
    rows: list[tuple[Any, ...]] = []
    if not len(order):  # no kernels launched by these ops (a CPU-only trace): no rows
        return pd.DataFrame(rows, columns=cols)
    starts = np.flatnonzero(np.r_[True, sorted_ops[1:] != sorted_ops[:-1]])
    sizes = np.diff(np.r_[starts, len(order)])
    # Ops in the order of `ops` (the host's), each with its run of kernels.
    run_of = dict(zip(sorted_ops[starts].tolist(), range(len(starts)), strict=True))
    op_rows = [r for r in ops.tolist() if r in run_of]
    runs = np.array([run_of[r] for r in op_rows], dtype=np.int64)
    dur = k["dur"].to_numpy()
    kd = dur[order]
    # The main kernel: the first longest of the run (np.argmax's choice).
    longest = np.maximum.reduceat(kd, starts)
    is_max = kd == np.repeat(longest, sizes)
    first_max = np.flatnonzero(is_max)[np.searchsorted(np.flatnonzero(is_max), starts)]
    main = order[first_max][runs]
    # A run's time as `dur[run].sum()` adds it: one or two kernels elementwise, longer
    # runs summed per run (numpy's pairwise order).
    first, n_k = order[starts][runs], sizes[runs]
    second = order[np.minimum(starts + 1, len(order) - 1)][runs]
    total = np.where(n_k == 1, dur[first], dur[first] + dur[second])
    for j in np.flatnonzero(n_k > 2).tolist():
        run = int(runs[j])
        total[j] = dur[order[starts[run] : starts[run] + sizes[run]]].sum()
    kname_codes = k["name"].cat.codes.to_numpy()[main].tolist()
    kname_table = [str(c) for c in k["name"].cat.categories]

    def at_least_one(c: str) -> np.ndarray:
        return np.maximum(k[c].to_numpy()[main], 1)

    grid = (at_least_one("grid_x") * at_least_one("grid_y") * at_least_one("grid_z")).tolist()
    threads = (at_least_one("block_x") * at_least_one("block_y") * at_least_one("block_z")).tolist()
    smem, regs = k["shared_memory"].to_numpy()[main].tolist(), k["registers"].to_numpy()[main].tolist()
    host_ts = host["ts"].to_numpy()[op_rows].tolist()
    shape_memo: dict[tuple[int, int], MatmulShape | None] = {}
    shapes_col = arr.shapes
    codes = arr.name_codes[op_rows].tolist()
    for j, (row, code) in enumerate(zip(op_rows, codes, strict=True)):
        # Ops with one name and one shape record share their shape (and its decode).
        key = (code, id(shapes_col[row]))
        if key not in shape_memo:
            shape_memo[key] = shape_of(arr.name(row), model.op_shapes(row))
        shape = shape_memo[key]
        if shape is None:
            continue
        rows.append(
            (
                row, shape.op, shape.m, shape.n, shape.k, shape.batch, shape.dtype, shape.itemsize, shape.layout,
                shape.lda, shape.ldb, kname_table[kname_codes[j]], float(total[j]), int(n_k[j]), int(grid[j]),
                int(smem[j]), int(regs[j]), int(threads[j]), float(host_ts[j]),
            )
        )  # fmt: skip
    return pd.DataFrame(rows, columns=cols)


def group_shapes(table: pd.DataFrame) -> pd.DataFrame:
    """Calls of the same op, shape, dtype, layout and kernel, with total time and FLOP/s."""
    if table.empty:
        return table.assign(calls=[], time_us=[], flops=[], tflops=[])
    keys = ["op", "m", "n", "k", "batch", "dtype", "itemsize", "layout", "lda", "ldb", "kernel"]
    g = (
        table.groupby(keys, sort=False)
        .agg(
            calls=("row", "size"),
            time_us=("kernel_us", "sum"),
            grid=("grid", "first"),
            smem=("smem", "first"),
            regs=("regs", "first"),
            threads=("threads", "first"),
            first_ts=("ts", "min"),
            first_row=("row", "first"),
        )
        .reset_index()
    )
    g["flops"] = 2.0 * g["m"] * g["n"] * g["k"] * g["batch"] * g["calls"]
    # Zero-duration kernels (a broken or mutated trace) have no rate, not an infinite one.
    secs = (g["time_us"] * 1e-6).where(g["time_us"] > 0)
    g["tflops"] = (g["flops"] / secs / 1e12).fillna(0.0)
    return g.sort_values("time_us", ascending=False, kind="stable").reset_index(drop=True)


def tiles_for(m: int, n: int, batch: int, tile: Tile, grid: int, persistent: bool) -> int:
    """CTAs the problem launches. cuBLAS's kernel-view puts torch's N along the tile's
    first number; a non-persistent kernel's grid settles the orientation when it can, and
    a grid that is a whole multiple of the tiles is split-K (each tile's K range cut into
    grid/tiles parts), whose CTAs are what fill the waves."""
    t1 = math.ceil(n / tile.m) * math.ceil(m / tile.n) * batch
    t2 = math.ceil(m / tile.m) * math.ceil(n / tile.n) * batch
    if not persistent and grid > 0:
        if grid in (t1, t2):
            return grid
        if grid > t1 and grid % t1 == 0:
            return grid
    return t1


def matmul_rows(model: TraceModel) -> list[MatmulRow]:
    groups = group_shapes(matmul_table(model))
    if groups.empty:
        return []
    dev = model.meta.primary_device
    props = dev.properties if dev else {}
    sms = dev.num_sms if dev and dev.num_sms else 0
    cc = dev.compute_capability if dev else None
    device_arch = cc[0] * 10 + cc[1] if cc else None
    vendor = model.meta.vendor
    out = []
    records: list[Any] = list(groups.itertuples(index=False))  # namedtuples; pandas-stubs types them loosely
    for g in records:
        shape = MatmulShape(g.op, g.m, g.n, g.k, g.batch, g.dtype, g.itemsize, g.layout, g.lda, g.ldb)
        # Alignment is judged for tensor-core GEMMs only: not matrix-vector shapes, not SIMT fp32.
        judged = g.dtype in TENSOR_CORE_DTYPES and min(g.m, g.n, g.k) >= MIN_GEMM_DIM
        bad = misaligned_dims(shape) if judged else []
        arch = kernel_arch(g.kernel)
        # A kernel for unaligned operands, or one built for an older architecture picked for
        # a misaligned shape (cutlass_75 on an sm_90 GPU): cuBLAS's fallback.
        older = arch is not None and device_arch is not None and arch < device_arch - 5
        align_m = re.search(r"align(\d+)\b", g.kernel)
        narrow = align_m is not None and int(align_m.group(1)) * int(g.itemsize) < ALIGN_BYTES
        fallback = narrow or (older and bool(bad))
        tile = parse_tile(g.kernel)
        persistent = is_persistent(g.kernel)
        per_sm = ctas_per_sm(props, int(g.smem), int(g.regs), int(g.threads))
        # The GPU holds SMs x CTAs/SM of this kernel at once: that is the capacity a wave is
        # measured against, whatever the launch grid. A persistent kernel launched with fewer
        # CTAs (grid 120 on 132 SMs) runs ceil(tiles / grid) rounds on that capacity: its
        # idle SMs are lost like a partial wave's.
        slots = sms * per_sm
        concurrent = min(slots, int(g.grid)) if persistent and g.grid > 0 and slots else (slots or int(g.grid))
        slots = slots or int(g.grid)
        if tile is not None:
            tiles = tiles_for(g.m, g.n, g.batch, tile, int(g.grid), persistent)
            tile_text, tile_source = f"{tile.m}x{tile.n}", "name"
        elif vendor == "amd":
            # HIP reports the grid in threads, not workgroups.
            tiles, tile_text, tile_source = int(g.grid) // max(int(g.threads), 1), "", "grid"
        else:
            tiles, tile_text, tile_source = int(g.grid), "", "grid"
        waves, fill, eff = waves_of(tiles, slots) if slots else (0.0, 1.0, 1.0)
        if slots and 0 < concurrent < slots and tiles > 0:
            rounds = math.ceil(tiles / concurrent)
            eff = tiles / (rounds * slots)
            fill = waves - (rounds - 1) if waves > rounds - 1 else waves / rounds
        out.append(
            MatmulRow(
                op=g.op, m=g.m, n=g.n, k=g.k, batch=g.batch, dtype=g.dtype, layout=g.layout, calls=int(g.calls),
                kernel=g.kernel, time_us=float(g.time_us), tflops=float(g.tflops), aligned=not bad,
                misaligned=(), misaligned_dims=tuple(bad), fallback_kernel=bool(fallback), tile=tile_text,
                tile_source=tile_source,
                tiles=int(tiles), sms=int(sms), ctas_per_sm=int(per_sm), slots=int(slots), waves=round(waves, 3),
                last_wave_fill=round(fill, 3), wave_efficiency=round(eff, 3),
                source=user_source(model, int(g.first_row)),
            )
        )  # fmt: skip
    return out
