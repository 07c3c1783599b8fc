"""FLOPs and bytes of one op call, from its recorded shapes and dtypes.

The minimum work a perfect kernel would do: each input read once, each output written
once. Models exist for the ops that carry real models (matmuls, convolutions,
attention, elementwise, reductions, normalizations, copies and casts, embedding and
gather, foreach/fused optimizers); anything else returns None and its kernels are
reported as unmodelled, not guessed.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from tracelens.analyzers.matmul_shapes import DTYPE_BYTES, DTYPE_SHORT, MATMUL_OPS, shape_of


@dataclass(frozen=True)
class OpCost:
    flops: float
    bytes: float
    dtype: str  # short dtype of the main operand
    tensor_core: bool  # matmul-like work that can run on tensor cores
    family: str  # matmul, conv, attention, elementwise, reduction, norm, copy, gather, optimizer


ELEMENTWISE = frozenset(
    "add add_ sub sub_ mul mul_ div div_ neg neg_ exp exp_ log log_ sin cos tanh tanh_ sigmoid sigmoid_ relu relu_ "
    "gelu gelu_ silu silu_ threshold threshold_ threshold_backward gelu_backward silu_backward sigmoid_backward "
    "tanh_backward clamp clamp_ clamp_min clamp_min_ clamp_max clamp_max_ pow pow_ rsqrt rsqrt_ sqrt sqrt_ where "
    "addcmul addcmul_ addcdiv addcdiv_ lerp lerp_ abs abs_ sign reciprocal reciprocal_ maximum minimum eq ne lt gt "
    "le ge logical_and logical_or logical_not bitwise_and masked_fill masked_fill_ erf erf_ leaky_relu hardtanh "
    "dropout native_dropout native_dropout_backward mse_loss mse_loss_backward rsub floor_divide remainder".split()
)
#: Tensor inputs each elementwise op takes; one more tensor is its `out=` argument.
UNARY = frozenset(
    "neg exp log sin cos tanh sigmoid relu gelu silu abs sign reciprocal rsqrt sqrt erf leaky_relu hardtanh "
    "dropout native_dropout logical_not".split()
)
COMPARISONS = frozenset("eq ne lt gt le ge logical_and logical_or logical_not isnan isinf".split())
TERNARY = frozenset("addcmul addcdiv lerp where threshold_backward".split())
COPIES = frozenset("copy_ _to_copy to contiguous clone fill_ zero_ zeros_like ones_like cat stack".split())
REDUCTIONS = frozenset("sum mean amax amin max min norm var std argmax argmin prod cumsum logsumexp".split())
NORMS = frozenset(
    "softmax _softmax log_softmax _log_softmax layer_norm native_layer_norm rms_norm _fused_rms_norm group_norm "
    "native_group_norm batch_norm native_batch_norm cudnn_batch_norm _batch_norm_impl_index".split()
)
NORM_BACKWARD = frozenset(
    "_softmax_backward_data _log_softmax_backward_data native_layer_norm_backward native_batch_norm_backward "
    "cudnn_batch_norm_backward native_group_norm_backward _fused_rms_norm_backward".split()
)
GATHERS = frozenset("embedding index_select gather index take embedding_dense_backward index_add_ scatter_add_".split())
ATTENTION_FWD = frozenset(
    "_scaled_dot_product_flash_attention _scaled_dot_product_efficient_attention _scaled_dot_product_cudnn_attention "
    "_flash_attention_forward _efficient_attention_forward _cudnn_attention_forward".split()
)
ATTENTION_BWD = frozenset(
    "_scaled_dot_product_flash_attention_backward _scaled_dot_product_efficient_attention_backward "
    "_scaled_dot_product_cudnn_attention_backward _flash_attention_backward _efficient_attention_backward "
    "_cudnn_attention_backward".split()
)
CONV = frozenset(
    "cudnn_convolution convolution _convolution conv2d miopen_convolution convolution_overrideable".split()
)
#: (stride, padding, dilation) argument positions, from the aten schemas.
CONV_ARG_POSITIONS = {
    "convolution": (3, 4, 5),
    "_convolution": (3, 4, 5),
    "conv2d": (3, 4, 5),
    "convolution_overrideable": (3, 4, 5),
    "cudnn_convolution": (3, 2, 4),
    "miopen_convolution": (4, 3, 5),
}
CONV_BWD = frozenset(
    "convolution_backward cudnn_convolution_backward_input cudnn_convolution_backward_weight "
    "miopen_convolution_backward_input miopen_convolution_backward_weight".split()
)
#: Arithmetic per element, roughly: normalizations do a reduction, a subtract, a scale
#: and a few transcendental-free ops per element; their backward about twice that.
NORM_FLOPS_PER_ELEMENT = 5
NORM_BWD_FLOPS_PER_ELEMENT = 8
#: Adam/AdamW update arithmetic per parameter element.
ADAM_FLOPS_PER_ELEMENT = 12
#: Position of `is_causal` (or of `custom_mask_type`, for the efficient kernels) in each
#: attention op's arguments, from the aten schemas; other ops fall back to "any True".
CAUSAL_ARG = {
    "_scaled_dot_product_flash_attention": 4,
    "_scaled_dot_product_efficient_attention": 6,
    "_scaled_dot_product_cudnn_attention": 6,
    "_cudnn_attention_forward": 10,
    "_flash_attention_forward": 8,
    "_efficient_attention_forward": 9,
    "_scaled_dot_product_flash_attention_backward": 11,
    "_flash_attention_backward": 11,
    "_scaled_dot_product_efficient_attention_backward": 11,
    "_cudnn_attention_backward": 14,
    "_scaled_dot_product_cudnn_attention_backward": 14,
    "_efficient_attention_backward": 14,
}
#: Flash-attention backward does about 2.5x the forward's matmul FLOPs (5 matmuls vs 2).
ATTENTION_BWD_FACTOR = 2.5

_LIST_RE = re.compile(r"-?\d+")


def _numel(dims: Any) -> int:
    if isinstance(dims, list) and all(isinstance(d, int) for d in dims):
        return math.prod(dims) if dims else 1
    return 0


def _tensors(shapes: dict[str, Any]) -> list[tuple[int, int, str]]:
    """(numel, itemsize, dtype) of each tensor input (TensorLists flattened)."""
    dims = shapes.get("Input Dims") or []
    types = shapes.get("Input type") or []
    out = []
    for i, d in enumerate(dims):
        t = str(types[i]) if i < len(types) else ""
        if t in ("", "Scalar", "ScalarList", "None", "GenericList", "Int", "Bool", "Double", "Device", "String"):
            continue
        if isinstance(d, list) and d and isinstance(d[0], list):  # TensorList
            for sub in d:
                n = _numel(sub)
                if n:
                    out.append((n, DTYPE_BYTES.get(t, 4), DTYPE_SHORT.get(t, t)))
            continue
        n = _numel(d)
        if n and (t in DTYPE_BYTES or t in ("long int", "int", "bool", "unsigned char", "signed char", "short int")):
            size = DTYPE_BYTES.get(t) or {"long int": 8, "int": 4, "bool": 1, "unsigned char": 1}.get(t, 4)
            out.append((n, size, DTYPE_SHORT.get(t, t)))
    return out


def _concrete_ints(shapes: dict[str, Any], index: int) -> list[int]:
    conc = shapes.get("Concrete Inputs") or []
    if index < len(conc):
        return [int(x) for x in _LIST_RE.findall(str(conc[index]))]
    return []


def _gather_cost(name: str, shapes: dict[str, Any], tensors: list[tuple[int, int, str]]) -> OpCost | None:
    """Rows read = rows written: bytes = 2 x output + indices."""
    dims = shapes.get("Input Dims") or []
    if name == "embedding" and len(dims) >= 2 and isinstance(dims[0], list) and len(dims[0]) == 2:
        rows = _numel(dims[1])
        out = rows * dims[0][1] * tensors[0][1]
        return OpCost(0.0, 2.0 * out + 8 * rows, tensors[0][2], False, "gather")
    if name == "index_select" and len(dims) >= 3 and isinstance(dims[0], list) and dims[0]:
        dim = (_concrete_ints(shapes, 1) or [0])[0]
        table = dims[0]
        if not -len(table) <= dim < len(table) or table[dim] == 0:
            return None
        row = _numel(table) // table[dim]
        picked = _numel(dims[2])
        out = picked * row * tensors[0][1]
        return OpCost(0.0, 2.0 * out + 8 * picked, tensors[0][2], False, "gather")
    return None


def op_cost(op: str, shapes: dict[str, Any]) -> OpCost | None:
    name = op.split("::", 1)[1] if "::" in op else op
    if op in MATMUL_OPS:
        s = shape_of(op, shapes)
        if s is None:
            return None
        flops = 2.0 * s.m * s.n * s.k * s.batch
        bytes_ = float((s.m * s.k + s.k * s.n + s.m * s.n) * s.batch * s.itemsize)
        return OpCost(flops, bytes_, s.dtype, True, "matmul")
    tensors = _tensors(shapes)
    if not tensors:
        return None
    if any(t[2] == "TensorList" for t in tensors) and not name.startswith(("_foreach_", "_fused_adam")):
        return None  # element type of a TensorList is not recorded
    dtype = tensors[0][2]
    in_bytes = float(sum(n * b for n, b, _ in tensors))
    biggest = max(tensors, key=lambda t: t[0])
    if name in CONV:
        dims = shapes.get("Input Dims") or []
        if len(dims) < 2 or not (isinstance(dims[0], list) and isinstance(dims[1], list)):
            return None
        x, w = dims[0], dims[1]
        if len(x) != 4 or len(w) != 4:
            return None
        n, _c, h, wd = x
        k, cg, r, s_ = w
        # stride, padding, dilation are needed for the output size; traces before ~2023
        # have no Concrete Inputs, and guessing stride 1 overcounts strided convolutions.
        i_stride, i_pad, i_dil = CONV_ARG_POSITIONS.get(name, (3, 4, 5))
        stride, pad, dil = (_concrete_ints(shapes, i) for i in (i_stride, i_pad, i_dil))
        if len(stride) < 2 or len(pad) < 2 or len(dil) < 2 or min(stride) < 1 or min(dil) < 1:
            return None
        ho = (h + 2 * pad[0] - dil[0] * (r - 1) - 1) // stride[0] + 1
        wo = (wd + 2 * pad[1] - dil[1] * (s_ - 1) - 1) // stride[1] + 1
        flops = 2.0 * n * k * ho * wo * cg * r * s_
        item = tensors[0][1]
        return OpCost(flops, in_bytes + n * k * ho * wo * item, dtype, True, "conv")
    if name in CONV_BWD:
        dims = shapes.get("Input Dims") or []
        # convolution_backward(grad_out, input, weight, ...): grad input + grad weight
        if len(dims) >= 3 and all(isinstance(d, list) and len(d) == 4 for d in dims[:3]):
            go, _x, w = dims[0], dims[1], dims[2]
            flops = 2 * 2.0 * go[0] * go[1] * go[2] * go[3] * w[1] * w[2] * w[3]
            if name.endswith(("_input", "_weight")):
                flops /= 2
            return OpCost(flops, 2 * in_bytes, dtype, True, "conv")
        return None
    if name in ATTENTION_FWD or name in ATTENTION_BWD:
        dims = shapes.get("Input Dims") or []
        start = 1 if name in ATTENTION_BWD and len(dims) > 3 else 0  # backward: grad_out first
        q, k = (dims[start], dims[start + 1]) if len(dims) > start + 1 else ([], [])
        if len(q) != 4 or len(k) != 4:
            return None
        b, h, lq, d = q
        lk = k[2]
        conc = [str(c) for c in (shapes.get("Concrete Inputs") or [])]
        pos = CAUSAL_ARG.get(name)
        if pos is not None and pos < len(conc) and conc[pos] != "":
            causal = conc[pos] == "True" or (conc[pos].isdigit() and conc[pos] != "0")
        else:
            causal = any(c == "True" for c in conc)
        flops = 4.0 * b * h * lq * lk * d * (0.5 if causal else 1.0)
        if name in ATTENTION_BWD:
            return OpCost(flops * ATTENTION_BWD_FACTOR, in_bytes + in_bytes, dtype, True, "attention")
        out_bytes = b * h * lq * d * tensors[0][1]
        return OpCost(flops, in_bytes + out_bytes, dtype, True, "attention")
    out_bytes = biggest[0] * biggest[1]
    inplace = name.endswith("_")
    if op.startswith(("triton_poi_", "triton_red_", "triton_per_")):
        # An Inductor kernel, recorded under its own name with its buffers as arguments
        # (inputs and outputs alike): each read or written once. The FLOPs are a guess:
        # one per element per op named in the kernel (fused_add_gelu_mul_0 -> 3).
        ops_named = max(len([w for w in op.split("fused_", 1)[-1].split("_") if w.isalpha()]), 1)
        return OpCost(float(biggest[0] * ops_named), in_bytes, dtype, False, "compiled")
    if name in ELEMENTWISE:
        base = name.rstrip("_")
        if base in COMPARISONS:
            out_bytes = biggest[0]  # bool results: one byte each
        arity = 1 if base in UNARY else 3 if base in TERNARY else 2
        if not inplace and len(tensors) > arity:
            # The extra tensor is `out=`: written once, not read.
            reads = float(sum(n * b for n, b, _ in tensors[:arity]))
            return OpCost(float(biggest[0]), reads + out_bytes, dtype, False, "elementwise")
        total = in_bytes + (0 if inplace else out_bytes)
        return OpCost(float(biggest[0]), total, dtype, False, "elementwise")
    if name in COPIES:
        if name in ("fill_", "zero_"):
            return OpCost(0.0, float(out_bytes), dtype, False, "copy")
        if name in ("cat", "stack"):
            return OpCost(0.0, 2 * in_bytes, dtype, False, "copy")
        # copy_(dst, src): read src, write dst; to/_to_copy/contiguous/clone: read + write
        return OpCost(0.0, in_bytes if name == "copy_" else 2 * in_bytes, dtype, False, "copy")
    if name in REDUCTIONS:
        return OpCost(float(biggest[0]), in_bytes, dtype, False, "reduction")
    if name in NORMS:
        return OpCost(NORM_FLOPS_PER_ELEMENT * float(biggest[0]), in_bytes + out_bytes, dtype, False, "norm")
    if name in NORM_BACKWARD:
        return OpCost(NORM_BWD_FLOPS_PER_ELEMENT * float(biggest[0]), in_bytes + out_bytes, dtype, False, "norm")
    if name in GATHERS:
        return _gather_cost(name, shapes, tensors)
    if name.startswith("_foreach_") or name.startswith("_fused_adam"):
        n_elems = sum(n for n, _, _ in tensors)
        # fused Adam(W) reads params, grads and two moments (4 lists) and updates three.
        flops = ADAM_FLOPS_PER_ELEMENT * n_elems / 4 if "adam" in name else float(n_elems)
        writes = 0.75 * in_bytes if "adam" in name else (0.0 if name.endswith("_") else in_bytes)
        return OpCost(float(flops), in_bytes + writes, dtype, False, "optimizer")
    return None
