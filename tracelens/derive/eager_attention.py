"""Eager attention: attention written out as matmul > softmax (> dropout) > matmul, found
from the ops' shapes, with the time a fused scaled_dot_product_attention kernel would take.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import numpy as np

from tracelens.domain import DTYPE_SHORT, SHORT_DTYPE_BYTES
from tracelens.model.peaks import DevicePeaks
from tracelens.model.trace import TraceModel

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
#: A causal SDPA kernel skips the blocks above the diagonal: about half the FLOPs (H200,
#: workloads/diff_pairs.py sdpa_u: 4x8x2048x2048x128 fp16, cuDNN flash with is_causal 83 µs a
#: call, 174 µs estimated for the full square).
CAUSAL_FLOPS_SHARE = 0.5
#: Ops that apply a mask to the scores: a square [Lq, Lk] mask shared by every batch and
#: head (no batch dims) is a causal one (a padding mask is [B, 1, 1, Lk]).
MASK_OPS = frozenset({"aten::masked_fill", "aten::masked_fill_", "aten::where", "aten::add", "aten::add_"})


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
    causal: bool = False  # masked by a square mask shared by all batches and heads (SDPA is_causal)


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
        return ()
    # Kernel time of each pattern: kernels launched under its ops, and under the ops between
    # them that touch the score matrix (scale, mask add).
    k = model.kernels()
    if window is not None:
        k = k[(k["end"] > window[0]) & (k["ts"] < window[1])]
    kop = k["op"].to_numpy()
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
        causal = lq == lk and any(_square_mask(model, r, lq) for r in roots)
        flops = 4.0 * b_ * lq * lk * d * (CAUSAL_FLOPS_SHARE if causal else 1.0)
        sdpa = 0.0
        if peaks is not None:
            _, peak = peaks.roof(dtype or "bf16", True)
            item = SHORT_DTYPE_BYTES.get(dtype, 2)
            io = 4.0 * b_ * lq * d * item  # q, k, v, out (lq ~ lk)
            sdpa = 1e6 * max(flops / (SDPA_ROOF_SHARE * peak) if peak else 0.0, io / peaks.bw if peaks.bw else 0.0)
        if t > 0:
            out.append(EagerAttention(tuple(sorted(roots)), b_, lq, lk, d, dtype, t, min(sdpa, t), causal))
    return tuple(out)


def _square_mask(model: TraceModel, row: int, n: int) -> bool:
    """Whether the op masks the scores with an [n, n] tensor that has no batch dims."""
    if model.arrays.name(row) not in MASK_OPS:
        return False
    dims = model.op_shapes(row).get("Input Dims") or []
    return any(isinstance(x, list) and [int(v) for v in x if isinstance(v, int)] == [n, n] for x in dims[1:])


def eager_attention_shapes(calls: tuple[EagerAttention, ...]) -> frozenset[tuple[int, int, int, int]]:
    """(batch, M, N, K) of the matmuls inside eager attention (both orders of M and N): the
    matmul findings leave them to the eager-attention finding, whose fix removes them."""
    out: set[tuple[int, int, int, int]] = set()
    for c in calls:
        for m, n, k in ((c.queries, c.keys, c.head_dim), (c.queries, c.head_dim, c.keys)):
            out |= {(c.batch, m, n, k), (c.batch, n, m, k)}
    return frozenset(out)
