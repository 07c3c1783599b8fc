"""FLOPs and bytes of kernels no launching op of the trace describes (a helper of the
roofline, like op_costs; registered as no analyzer):

1. Kernels replayed from a CUDA graph whose capture is known (derive/graph_nodes.py):
   the op that launched them at capture, with its shapes, is modelled by `op_cost` as an
   eager op would be, and its cost shared by its kernels of that replay by time.
2. Attention of a serving step whose annotation carries its sizes (derive/serving.py):
   paged/varlen attention ops (vLLM's `unified_attention`, FlashAttention's varlen
   entry points) take packed tokens, and their cost depends on each request's cached
   keys, which no tensor shape shows. Per call (one layer), with H query heads, Hkv
   key/value heads, head dimension D:
     FLOPs = 4·H·D·(Σ N_Q·N_KV − ½·Σ N_Q² over prefill requests, when causal)
       (QKᵀ and PV, 2 FLOPs a multiply-add; a causal prefill computes half of the square
       its new tokens make with themselves);
     bytes = tokens·H·D·(q + o bytes) + Σ N_KV·Hkv·D·2·(kv bytes)
       (each request's cached keys and values read once: the least traffic).
   The KV cache's element size is the kernel's when its name says (`QkvE4m3`: fp8), else
   the key input's.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np
import pandas as pd

from tracelens.derive.graph_nodes import GraphNode, GraphNodes
from tracelens.derive.op_costs import OpCost, op_cost
from tracelens.derive.serving import StepSizes, parse_step
from tracelens.domain import DTYPE_BYTES, DTYPE_SHORT
from tracelens.model.schema import Kind
from tracelens.model.trace import TraceModel

#: `source` of a kernel whose cost comes from here (1: its own op's model, 2: a grid
#: estimate), counted as modelled.
SOURCE_CAPTURE = 3
#: Ops of serving frameworks' attention over packed tokens and a paged KV cache:
#: (query, key, value, output) are their first four tensor arguments.
SERVING_ATTENTION_OPS = frozenset(
    {"vllm::unified_attention_with_output", "vllm::unified_attention", "_vllm_fa2_C::varlen_fwd",
     "_vllm_fa3_C::fwd", "flash_attn::_flash_attn_varlen_forward", "vllm_flash_attn::varlen_fwd"}
)  # fmt: skip
#: Kernel-name marks of an fp8 KV cache (TRT-LLM/FlashInfer fmha names: QkvE4m3...).
FP8_KV_MARKS = ("qkve4m3", "kve4m3", "fp8kv", "e4m3kv")


def extra_costs(
    model: TraceModel,
    graphs: GraphNodes | None,
    k: pd.DataFrame,
    comm: np.ndarray,
    hints: list[str | None],
    source: np.ndarray,
    flops: np.ndarray,
    nbytes: np.ndarray,
    meta: dict[int, tuple[str, str, bool]],
) -> None:
    """Fill in, for kernels without a model yet (`source == 0`), the costs of the two
    kinds above; arrays are `k`'s, changed in place. `graphs`: the capture-time nodes of
    graph-replayed kernels (derive/graph_nodes.py; None: no graph nodes)."""
    todo = (source == 0) & ~comm
    if not todo.any():
        return
    rows = k.index.to_numpy()
    dur = k["dur"].to_numpy(dtype=float)
    nodes = graphs.nodes if graphs is not None else {}
    _replayed(nodes, rows, dur, todo, hints, source, flops, nbytes, meta)
    _serving_attention(model, nodes, k, rows, dur, (source == 0) & ~comm, source, flops, nbytes, meta)


def _share(
    group: list[int], cost: OpCost, dur: np.ndarray, source: np.ndarray, flops: np.ndarray, nbytes: np.ndarray,
    meta: dict[int, tuple[str, str, bool]],
) -> None:  # fmt: skip
    total = float(dur[group].sum())
    for p in group:
        part = float(dur[p]) / total if total > 0 else 1.0 / len(group)
        flops[p] = cost.flops * part
        nbytes[p] = cost.bytes * part
        source[p] = SOURCE_CAPTURE
        meta[p] = (cost.dtype, cost.family, cost.tensor_core)


def _replayed(
    nodes: dict[int, GraphNode],
    rows: np.ndarray,
    dur: np.ndarray,
    todo: np.ndarray,
    hints: list[str | None],
    source: np.ndarray,
    flops: np.ndarray,
    nbytes: np.ndarray,
    meta: dict[int, tuple[str, str, bool]],
) -> None:
    if not nodes:
        return
    groups: dict[int, list[int]] = defaultdict(list)
    for p in np.flatnonzero(todo).tolist():
        node = nodes.get(int(rows[p]))
        if node is not None and node.op and node.shapes and node.group >= 0:
            groups[node.group].append(p)
    cache: dict[tuple[str, int, str | None], OpCost | None] = {}
    for group in groups.values():
        node = nodes[int(rows[group[0]])]
        hint = hints[group[0]]
        key = (node.op, id(node.shapes), hint)
        if key not in cache:
            try:
                cache[key] = op_cost(node.op, node.shapes, hint)
            except (ValueError, TypeError, IndexError, KeyError, ZeroDivisionError):
                cache[key] = None
        cost = cache[key]
        if cost is not None:
            _share(group, cost, dur, source, flops, nbytes, meta)


def _step_of(model: TraceModel, row: int, cache: dict[int, StepSizes | None]) -> StepSizes | None:
    """The serving step annotation enclosing a host row, if any (annotation rows parsed once)."""
    arrays = model.arrays
    for r in model.host_chain(row):
        if int(arrays.kind[r]) != int(Kind.USER_ANNOTATION):
            continue
        if r not in cache:
            cache[r] = parse_step(arrays.name(r))
        if cache[r] is not None:
            return cache[r]
    return None


def _serving_attention(
    model: TraceModel,
    nodes: dict[int, GraphNode],
    k: pd.DataFrame,
    rows: np.ndarray,
    dur: np.ndarray,
    todo: np.ndarray,
    source: np.ndarray,
    flops: np.ndarray,
    nbytes: np.ndarray,
    meta: dict[int, tuple[str, str, bool]],
) -> None:
    if not len(model.host) or not todo.any():
        return
    table = model.arrays.name_table
    if not any(n in SERVING_ATTENTION_OPS for n in table) and not any(
        n.op in SERVING_ATTENTION_OPS for n in nodes.values()
    ):
        return
    launch = k["launch"].to_numpy()
    names = k["name"].astype(str).to_numpy()
    op_of = model.arrays.op
    steps: dict[int, StepSizes | None] = {}
    groups: dict[tuple[str, int], list[int]] = defaultdict(list)
    info: dict[tuple[str, int], tuple[dict[str, Any], StepSizes]] = {}
    for p in np.flatnonzero(todo).tolist():
        lr = int(launch[p])
        if lr < 0:
            continue
        node = nodes.get(int(rows[p]))
        if node is not None and node.op in SERVING_ATTENTION_OPS and node.shapes and node.group >= 0:
            key = ("graph", node.group)
            shapes = node.shapes
        else:
            o = int(op_of[lr])
            if o < 0 or model.arrays.name(o) not in SERVING_ATTENTION_OPS:
                continue
            key = ("op", o)
            shapes = model.op_shapes(o)
        step = _step_of(model, lr, steps)
        if step is None or not step.has_sizes:
            continue
        groups[key].append(p)
        info[key] = (shapes, step)
    for key, group in groups.items():
        shapes, step = info[key]
        cost = attention_cost(shapes, step, names[group[0]])
        if cost is not None:
            _share(group, cost, dur, source, flops, nbytes, meta)


def attention_cost(shapes: dict[str, Any], step: StepSizes, kernel: str) -> OpCost | None:
    """One layer's attention over a serving step's requests (module docstring)."""
    dims = shapes.get("Input Dims") or []
    types = shapes.get("Input type") or []
    if len(dims) < 4 or not all(isinstance(d, list) and len(d) == 3 for d in dims[:4]):
        return None
    (tok, heads, hd), (_, kv_heads, _), _, _ = dims[:4]
    if not (tok and heads and hd and kv_heads):
        return None
    tb = [DTYPE_BYTES.get(str(t), 2) for t in (types[:4] if len(types) >= 4 else ["c10::BFloat16"] * 4)]
    low = kernel.lower()
    kv_bytes = 1 if any(m in low for m in FP8_KV_MARKS) else tb[1]
    causal = "causal" in low or step.context_requests > 0
    qk = step.sum_qk - (step.c_sqsq / 2.0 if causal else 0.0)
    if qk <= 0:
        return None
    work = 4.0 * heads * hd * qk
    moved = float(tok) * heads * hd * (tb[0] + tb[3]) + float(step.sum_kv) * kv_heads * hd * 2 * kv_bytes
    dtype = DTYPE_SHORT.get(str(types[0]), "bf16") if types else "bf16"
    return OpCost(work, moved, dtype, True, "attention")
