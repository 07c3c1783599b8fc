"""What some kernels do beyond their op's FLOPs and bytes, measured with Nsight Compute on
the H200: thread instructions per element (the kernels that run out of instruction issue
before bandwidth), ATen's non-vectorised elementwise path, cuDNN's attention-backward
passes, and register spills through L2.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tracelens.derive.op_costs import BSHD_ATTENTION, dtype_from_kernel
from tracelens.domain import DTYPE_BYTES
from tracelens.model.trace import TraceModel

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
