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
from typing import Any, NamedTuple

from tracelens.derive.matmuls import MATMUL_OPS, shape_of
from tracelens.domain import DTYPE_SHORT, FLOAT_DTYPE_BYTES, INTEGER_DTYPE_BYTES


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
    "dropout native_dropout native_dropout_backward mse_loss mse_loss_backward rsub floor_divide remainder elu elu_ "
    "elu_backward hardswish hardswish_ hardsigmoid softplus log1p expm1 square floor ceil round trunc "
    "bitwise_or bitwise_not logical_xor isnan nan_to_num".split()
)
#: Positional inputs (tensor or scalar) of each elementwise op; a tensor argument past
#: them is its `out=`. Binary unless listed here.
UNARY = frozenset(
    "clamp clamp_min clamp_max threshold pow "
    "neg exp log sin cos tanh sigmoid relu gelu silu abs sign reciprocal rsqrt sqrt erf leaky_relu hardtanh "
    "dropout native_dropout logical_not elu hardswish hardsigmoid softplus log1p expm1 square floor ceil round trunc "
    "bitwise_not isnan nan_to_num".split()
)
COMPARISONS = frozenset("eq ne lt gt le ge logical_and logical_or logical_not isnan isinf".split())
TERNARY = frozenset("addcmul addcdiv lerp where threshold_backward".split())
COPIES = frozenset("copy_ _to_copy to contiguous clone fill_ zero_ zeros_like ones_like cat stack".split())
REDUCTIONS = frozenset(
    "sum mean amax amin max min norm var std argmax argmin prod cumsum logsumexp linalg_vector_norm any all".split()
)
#: Pooling: each input read once (the output, smaller, is left out: a lower bound).
POOLS = frozenset(
    "max_pool2d max_pool2d_with_indices max_pool2d_with_indices_backward avg_pool2d avg_pool2d_backward "
    "adaptive_avg_pool2d _adaptive_avg_pool2d _adaptive_avg_pool2d_backward adaptive_max_pool2d "
    "max_pool3d_with_indices avg_pool3d".split()
)
NORMS = frozenset(
    "softmax _softmax log_softmax _log_softmax layer_norm native_layer_norm rms_norm _fused_rms_norm group_norm "
    "native_group_norm batch_norm native_batch_norm cudnn_batch_norm _batch_norm_impl_index".split()
)
NORM_BACKWARD = frozenset(
    "_softmax_backward_data _log_softmax_backward_data native_layer_norm_backward native_batch_norm_backward "
    "cudnn_batch_norm_backward native_group_norm_backward _fused_rms_norm_backward".split()
)
GATHERS = frozenset(
    "embedding index_select gather index take embedding_dense_backward index_add_ scatter_add_ nll_loss_forward "
    "nll_loss_backward nll_loss2d_forward nll_loss2d_backward".split()
)
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
    "convolution_backward cudnn_convolution_backward miopen_convolution_backward cudnn_convolution_backward_input "
    "cudnn_convolution_backward_weight miopen_convolution_backward_input miopen_convolution_backward_weight".split()
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
#: Attention ops whose q/k/v are (batch, seq, heads, dim), not (batch, heads, seq, dim):
#: the flash and memory-efficient kernels' own entry points (the SDPA wrappers transpose).
BSHD_ATTENTION = frozenset(
    "_flash_attention_forward _flash_attention_backward _efficient_attention_forward "
    "_efficient_attention_backward".split()
)
#: Flash-attention backward does about 2.5x the forward's matmul FLOPs (5 matmuls vs 2).
ATTENTION_BWD_FACTOR = 2.5

_LIST_RE = re.compile(r"-?\d+")


def _numel(dims: Any) -> int:
    if isinstance(dims, list) and all(isinstance(d, int) for d in dims):
        return math.prod(dims) if dims else 1
    return 0


#: Element types named in kernel template arguments, most specific first: the fallback
#: when a trace records shapes without types (early 2021) or a TensorList (whose element
#: type is never recorded).
KERNEL_DTYPES = (
    ("c10::bfloat16", "c10::BFloat16"),
    ("__nv_bfloat16", "c10::BFloat16"),
    ("bfloat16", "c10::BFloat16"),
    ("c10::half", "c10::Half"),
    ("__half", "c10::Half"),
    ("opaquetype<2u>", "c10::Half"),
    ("opaquetype<4u>", "float"),
    ("opaquetype<8u>", "double"),
    ("<double", "double"),
    ("<float", "float"),
    ("float,", "float"),
    ("sgemm", "float"),
    ("scudnn", "float"),
    ("hgemm", "c10::Half"),
)


def dtype_from_kernel(kernel: str) -> str | None:
    """The C++ element type a kernel's name shows (`elementwise_kernel<.., float>`), if any."""
    low = kernel.lower()
    for marker, ctype in KERNEL_DTYPES:
        if marker in low:
            return ctype
    return None


class TensorArg(NamedTuple):
    numel: int
    itemsize: int
    dtype: str  # short name (bf16, fp32, long int, ...) or "TensorList" when unknown
    position: int  # argument index in the op's call
    stored: int  # distinct elements: broadcast (stride-0) dimensions counted once

    @property
    def read_bytes(self) -> int:
        return self.stored * self.itemsize

    @property
    def nbytes(self) -> int:
        return self.numel * self.itemsize


def _stored(dims: list[int], strides: Any) -> int:
    """Elements a tensor really holds: an expanded (stride-0) dimension is read once."""
    if isinstance(strides, list) and len(strides) == len(dims) and all(isinstance(st, int) for st in strides):
        return math.prod(d for d, st in zip(dims, strides, strict=True) if st != 0)
    return math.prod(dims)


def _tensors(shapes: dict[str, Any], type_hint: str | None = None) -> list[TensorArg]:
    """(numel, itemsize, dtype) of each tensor input (TensorLists flattened).

    `type_hint` (a C++ type from the kernel's name) stands in for types the trace did not
    record: every type in traces from early 2021, and the elements of TensorLists. A
    TensorList without a hint comes out with dtype "TensorList"."""
    dims = shapes.get("Input Dims") or []
    types = shapes.get("Input type") or []
    strides = shapes.get("Input Strides") or []
    untyped = not types
    out = []
    for i, d in enumerate(dims):
        t = str(types[i]) if i < len(types) else ""
        if d == [] and t in FLOAT_DTYPE_BYTES:  # a 0-dim tensor
            out.append(TensorArg(1, FLOAT_DTYPE_BYTES[t], DTYPE_SHORT.get(t, t), i, 1))
            continue
        if not isinstance(d, list) or not d:
            continue
        if isinstance(d[0], list):  # TensorList
            elem = type_hint if (t == "TensorList" or untyped) else t
            for sub in d:
                n = _numel(sub)
                if n and elem:
                    out.append(TensorArg(n, FLOAT_DTYPE_BYTES.get(elem, 4), DTYPE_SHORT.get(elem, elem), i, n))
                elif n:
                    out.append(TensorArg(n, 4, "TensorList", i, n))
            continue
        if untyped and type_hint:
            t = type_hint
        n = _numel(d)
        stored = _stored(d, strides[i] if i < len(strides) else None) if n else 0
        if n and t in FLOAT_DTYPE_BYTES:
            out.append(TensorArg(n, FLOAT_DTYPE_BYTES[t], DTYPE_SHORT.get(t, t), i, stored))
        elif n and t in INTEGER_DTYPE_BYTES:
            out.append(TensorArg(n, INTEGER_DTYPE_BYTES[t], t, i, stored))
    return out


def _concrete_ints(shapes: dict[str, Any], index: int) -> list[int]:
    conc = shapes.get("Concrete Inputs") or []
    if index < len(conc):
        return [int(x) for x in _LIST_RE.findall(str(conc[index]))]
    return []


def _gather_cost(name: str, shapes: dict[str, Any], tensors: list[TensorArg]) -> OpCost | None:
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
    if name == "embedding_dense_backward" and len(tensors) >= 2:
        # (grad_output, indices, num_weights, ...): every gradient row read once and added
        # into a zeroed [num_weights, D] table.
        grad, idx = tensors[0], tensors[1]
        rows = (_concrete_ints(shapes, 2) or [0])[0]
        width = dims[0][-1] if isinstance(dims[0], list) and dims[0] else 0
        return OpCost(float(grad.numel), float(grad.nbytes + idx.nbytes + rows * width * grad.itemsize),
                      grad.dtype, False, "gather")  # fmt: skip
    if name in ("nll_loss_forward", "nll_loss2d_forward") and len(tensors) >= 2:
        # One log-probability picked per target: the input is not read in full.
        target = tensors[1]
        return OpCost(float(target.numel), float(target.nbytes + target.numel * tensors[0].itemsize),
                      tensors[0].dtype, False, "gather")  # fmt: skip
    by_position = {t.position: t for t in tensors}
    if name in ("nll_loss_backward", "nll_loss2d_backward") and 1 in by_position and 2 in by_position:
        # (grad_output, self, target, ...): one value per target scattered into a gradient
        # zeroed beforehand (by its own fill kernel).
        grad_in, target = by_position[1], by_position[2]
        scattered = target.numel * grad_in.itemsize
        return OpCost(float(target.numel), float(scattered + target.nbytes), grad_in.dtype, False, "gather")
    return None


def _typed(shapes: dict[str, Any], type_hint: str | None) -> dict[str, Any]:
    """`shapes` with every tensor's type set to `type_hint` where the trace recorded none."""
    if shapes.get("Input type") or not type_hint:
        return shapes
    dims = shapes.get("Input Dims") or []
    return {**shapes, "Input type": [type_hint if isinstance(d, list) and d else "" for d in dims]}


def _conv_output_hw(shapes: dict[str, Any], name: str, h: int, w: int, r: int, s: int) -> tuple[int, int] | None:
    """Output height and width from stride, padding and dilation (`Concrete Inputs`)."""
    i_stride, i_pad, i_dil = CONV_ARG_POSITIONS.get(name, (3, 4, 5))
    stride, pad, dil = (_concrete_ints(shapes, i) for i in (i_stride, i_pad, i_dil))
    if len(stride) < 2 or len(pad) < 2 or len(dil) < 2 or min(stride) < 1 or min(dil) < 1:
        return None
    return (
        (h + 2 * pad[0] - dil[0] * (r - 1) - 1) // stride[0] + 1,
        (w + 2 * pad[1] - dil[1] * (s - 1) - 1) // stride[1] + 1,
    )


def _conv_backward_cost(name: str, shapes: dict[str, Any], tensors: list[TensorArg]) -> OpCost | None:
    """Input and weight gradients, each as many FLOPs as the forward convolution."""
    dims = shapes.get("Input Dims") or []
    if len(dims) < 3:
        return None
    # Argument order differs: convolution_backward(grad_output, input, weight, ...),
    # cudnn/miopen_convolution_backward(input, grad_output, weight, ...). The _input and
    # _weight halves lack the weight's or the input's shape; their parent op has both.
    if name == "convolution_backward":
        go, x, w = dims[0], dims[1], dims[2]
    elif name in ("cudnn_convolution_backward", "miopen_convolution_backward"):
        x, go, w = dims[0], dims[1], dims[2]
    else:
        return None
    if not all(isinstance(d, list) and len(d) == 4 for d in (go, x, w)):
        return None
    # output_mask says which gradients were computed (the first layer's input needs none).
    mask = [m == "True" for m in re.findall(r"True|False", str((shapes.get("Concrete Inputs") or [""] * 11)[-1]))]
    grads = sum(mask[:2]) if len(mask) >= 2 else 2
    per_grad = 2.0 * math.prod(go) * w[1] * w[2] * w[3]
    item = tensors[0][1]
    nbytes = float(sum(math.prod(d) for d in (go, x, w)) * item + (math.prod(x) + math.prod(w)) * item)
    return OpCost(grads * per_grad, nbytes, tensors[0][2], True, "conv")


def _vllm_cost(name: str, shapes: dict[str, Any], tensors: list[TensorArg]) -> OpCost | None:
    """vLLM's custom kernels (`_C::`), whose outputs are often arguments (written, not read)."""
    dims = shapes.get("Input Dims") or []
    in_bytes = float(sum(n * b for n, b, *_ in tensors))
    x = tensors[0]
    if name == "rms_norm":  # (out, input, weight, eps): out is written once, not read
        return OpCost(NORM_FLOPS_PER_ELEMENT * float(x[0]), in_bytes, x[2], False, "norm")
    if name == "fused_add_rms_norm":  # (input, residual, weight, eps): both updated in place
        return OpCost(NORM_FLOPS_PER_ELEMENT * float(x[0]), in_bytes + 2.0 * x[0] * x[1], x[2], False, "norm")
    if name in ("silu_and_mul", "gelu_and_mul", "gelu_tanh_and_mul"):  # (out, input)
        return OpCost(3.0 * x[0], in_bytes, x[2], False, "elementwise")
    if name == "rotary_embedding" and len(dims) >= 5 and len(tensors) >= 3:
        # (positions, query, key, head_size, cos_sin_cache, is_neox): q and k rotated in
        # place, one cache row read per token.
        tokens, q, k = tensors[0], tensors[1], tensors[2]
        cache_row = dims[4][-1] if isinstance(dims[4], list) and dims[4] else 0
        rot = 2.0 * (q[0] * q[1] + k[0] * k[1]) + tokens[0] * tokens[1] + tokens[0] * cache_row * q[1]
        return OpCost(3.0 * (q[0] + k[0]), rot, q[2], False, "elementwise")
    if name in ("reshape_and_cache", "reshape_and_cache_flash") and len(tensors) >= 5:
        # (key, value, key_cache, value_cache, slot_mapping, ...): each new key and value
        # is read once and written into its cache slot.
        key, value, cache, slots = tensors[0], tensors[1], tensors[2], tensors[4]
        moved = key[0] + value[0]
        return OpCost(0.0, float(key[0] * key[1] + value[0] * value[1] + slots[0] * slots[1] + moved * cache[1]),
                      key[2], False, "copy")  # fmt: skip
    return None


def op_cost(
    op: str,
    shapes: dict[str, Any],
    type_hint: str | None = None,
    conv_output: list[int] | None = None,
) -> OpCost | None:
    """FLOPs and bytes of one call of `op`, or None where no model applies.

    `type_hint`: the element type the op's kernel names, for traces that recorded no
    types. `conv_output`: a convolution's output shape found elsewhere in the trace (its
    backward), for traces that recorded no stride or padding.

    Shapes from `TraceModel.op_shapes` are shared by every op call with the same shape
    args and keep their `op_costs`: the cost is worked out once per (op, hint) for them
    (a decode loop repeats the same few thousand calls).
    """
    known: dict[tuple[str, str | None], OpCost | None] | None = getattr(shapes, "op_costs", None)
    if known is None or conv_output is not None:
        return _op_cost(op, shapes, type_hint, conv_output)
    key = (op, type_hint)
    if key not in known:
        known[key] = _op_cost(op, shapes, type_hint)  # an exception is raised again next time
    return known[key]


def _conv_cost(
    name: str,
    shapes: dict[str, Any],
    tensors: list[TensorArg],
    in_bytes: float,
    dtype: str,
    conv_output: list[int] | None,
) -> OpCost | None:
    """A forward convolution: its FLOPs from the input, weight and output sizes."""
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
    hw = _conv_output_hw(shapes, name, h, wd, r, s_)
    if hw is None and conv_output is not None and len(conv_output) == 4 and conv_output[:2] == [n, k]:
        hw = (conv_output[2], conv_output[3])
    if hw is None:
        return None
    ho, wo = hw
    flops = 2.0 * n * k * ho * wo * cg * r * s_
    item = tensors[0][1]
    return OpCost(flops, in_bytes + n * k * ho * wo * item, dtype, True, "conv")


def _attention_cost(
    name: str, shapes: dict[str, Any], tensors: list[TensorArg], in_bytes: float, dtype: str
) -> OpCost | None:
    """Scaled-dot-product attention, forward or backward (causal halves the FLOPs)."""
    dims = shapes.get("Input Dims") or []
    start = 1 if name in ATTENTION_BWD and len(dims) > 3 else 0  # backward: grad_out first
    q, k = (dims[start], dims[start + 1]) if len(dims) > start + 1 else ([], [])
    if len(q) != 4 or len(k) != 4:
        return None
    if name in BSHD_ATTENTION:
        b, lq, h, d = q
        lk = k[1]
    else:
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


def _op_cost(
    op: str,
    shapes: dict[str, Any],
    type_hint: str | None = None,
    conv_output: list[int] | None = None,
) -> OpCost | None:
    name = op.split("::", 1)[1] if "::" in op else op
    if op in MATMUL_OPS:
        s = shape_of(op, _typed(shapes, type_hint))
        if s is None:
            return None
        flops = 2.0 * s.m * s.n * s.k * s.batch
        bytes_ = float((s.m * s.k + s.k * s.n + s.m * s.n) * s.batch * s.itemsize)
        return OpCost(flops, bytes_, s.dtype, True, "matmul")
    tensors = _tensors(shapes, type_hint)
    if not tensors:
        return None
    if any(t[2] == "TensorList" for t in tensors) and not name.startswith(("_foreach_", "_fused_adam")):
        return None  # element type of a TensorList is not recorded
    dtype = tensors[0][2]
    in_bytes = float(sum(n * b for n, b, *_ in tensors))
    biggest = max(tensors, key=lambda t: t[0])
    if name in CONV:
        return _conv_cost(name, shapes, tensors, in_bytes, dtype, conv_output)
    if name in CONV_BWD:
        return _conv_backward_cost(name, shapes, tensors)
    if name in ATTENTION_FWD or name in ATTENTION_BWD:
        return _attention_cost(name, shapes, tensors, in_bytes, dtype)
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
        # Arguments past the functional inputs (a Scalar alpha, ...) that are tensors are
        # `out=`: written once, not read. In place, the first input is also written.
        reads = [t for t in tensors if t.position < arity]
        outs = [t for t in tensors if t.position >= arity]
        read_bytes = float(sum(t.read_bytes for t in reads))
        if inplace:
            written = float(tensors[0].nbytes)
        elif outs:
            written = float(sum(t.nbytes for t in outs))
        else:
            written = float(out_bytes)
        return OpCost(float(biggest[0]), read_bytes + written, dtype, False, "elementwise")
    if name in COPIES:
        if name in ("fill_", "zero_"):
            return OpCost(0.0, float(out_bytes), dtype, False, "copy")
        if name in ("cat", "stack"):
            return OpCost(0.0, 2 * in_bytes, dtype, False, "copy")
        # copy_(dst, src): read src, write dst; to/_to_copy/contiguous/clone: read + write.
        # An expanded source is read once per distinct element.
        if name == "copy_" and len(tensors) >= 2:
            return OpCost(0.0, float(tensors[0].nbytes + tensors[1].read_bytes), dtype, False, "copy")
        if name in ("_to_copy", "to") and type_hint in FLOAT_DTYPE_BYTES:
            # A cast writes the kernel's element type (bfloat16_copy_kernel: 2 bytes), not the input's.
            return OpCost(0.0, float(tensors[0].read_bytes + tensors[0].numel * FLOAT_DTYPE_BYTES[type_hint]), dtype,
                          False, "copy")  # fmt: skip
        return OpCost(0.0, float(tensors[0].read_bytes + in_bytes), dtype, False, "copy")
    if name in REDUCTIONS:
        return OpCost(float(biggest[0]), in_bytes, dtype, False, "reduction")
    if name in NORMS:
        return OpCost(NORM_FLOPS_PER_ELEMENT * float(biggest[0]), in_bytes + out_bytes, dtype, False, "norm")
    if name in NORM_BACKWARD:
        return OpCost(NORM_BWD_FLOPS_PER_ELEMENT * float(biggest[0]), in_bytes + out_bytes, dtype, False, "norm")
    if name in POOLS:
        return OpCost(float(biggest[0]), in_bytes, dtype, False, "pool")
    if name in GATHERS:
        return _gather_cost(name, shapes, tensors)
    if op.startswith(("_C::", "_C_cache_ops::")):
        return _vllm_cost(name, shapes, tensors)
    if name.startswith("_foreach_") or name.startswith("_fused_adam"):
        n_elems = sum(n for n, *_ in tensors)
        # fused Adam(W) reads params, grads and two moments (4 lists) and updates three.
        flops = ADAM_FLOPS_PER_ELEMENT * n_elems / 4 if "adam" in name else float(n_elems)
        # Every other foreach op writes one list shaped like its first: in place (mul_, lerp_,
        # addcmul_) the first list itself, out of place (sqrt, div) the result.
        first = float(sum(t.nbytes for t in tensors if t.position == 0))
        writes = 0.75 * in_bytes if "adam" in name else first
        return OpCost(float(flops), in_bytes + writes, dtype, False, "optimizer")
    return None
