"""Fuse kernels into one: an elementwise chain (torch.compile), or eager attention into
scaled_dot_product_attention.

Model: each group (one occurrence of a chain of back-to-back passes on one stream, or
one eager attention call) becomes one kernel, in the first kernel's place, of the
duration the caller gives per variant; the other kernels do not run, and the host no
longer dispatches or launches their ops (their host time goes). The first op's host time
stays (the compiled region's call, or the SDPA op, costs about one dispatch), so a
launch-bound group gains only the launches it no longer needs: an SDPA estimate is never
below the launches it still makes (issue 24 §7). Groups never span iterations or
independent tensors: the roofline's chains end at step boundaries and at a size change
(analyzers/roofline.py, _fusion_chains).

The fused kernel's time (`fused_time_us`) for an elementwise chain: one round trip of
the bytes the caller gives (the chain's distinct inputs and one output: predict/
gpu_plans.fused_bytes; H200 compile_u, an fp32 chain with two more inputs: four tensors,
0.90 ms predicted, 1.00 ms measured; the largest pass alone said 0.67) at the bandwidth
this GPU sustains, or the passes' arithmetic
if that takes longer (a compute- or issue-bound pass keeps its time, a memory-bound pass
adds MEMORY_PASS_ARITH_SHARE of its time). Measured on the H200 (sample_traces/
diff_compile_*, torch 2.11: mul, add, gelu(erf), mul, add on 1G bf16): eager 997, 997,
1394, 997, 997 µs; the Triton kernel 1596 µs = 1394 + 0.05 x 4 x 997 (the model: 1593);
the bytes alone (4.3 GB at 4.3 TB/s) would say 1.0 ms. LOW takes the longest pass or
1.25x the arithmetic, HIGH the bytes at the datasheet bandwidth or 0.8x the arithmetic.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tracelens.derive.graph import DependencyGraph
from tracelens.derive.replay import Edit
from tracelens.derive.transforms import Variant, remove_gpu_nodes, remove_host_time

#: The arithmetic share of a memory-bound elementwise pass's time (an add or mul at
#: 4.3 TB/s); fused, that is what it still costs (H200, diff_compile: 0.05).
MEMORY_PASS_ARITH_SHARE = 0.05
_LOW_ARITH, _HIGH_ARITH = 1.25, 0.8


def fused_time_us(
    variant: Variant,
    pass_us: Sequence[float],
    pass_bytes: Sequence[float],
    pass_compute_bound: Sequence[bool],
    bandwidth: float,
    datasheet_bandwidth: float,
) -> float:
    """The fused kernel's time for one occurrence of a chain (see the module docstring)."""
    if not len(pass_us):
        return 0.0
    arith, longest = _arith_us(pass_us, pass_compute_bound)
    io = float(max(pass_bytes)) if len(pass_bytes) else 0.0
    bw = bandwidth if bandwidth > 0 else datasheet_bandwidth
    if variant == Variant.LOW:
        return max(longest, _LOW_ARITH * arith)
    if variant == Variant.HIGH:
        peak = datasheet_bandwidth if datasheet_bandwidth > 0 else bw
        return max(io / peak * 1e6 if peak > 0 else 0.0, _HIGH_ARITH * arith)
    return max(io / bw * 1e6 if bw > 0 else 0.0, arith)


def _arith_us(pass_us: Sequence[float], compute_bound: Sequence[bool]) -> tuple[float, float]:
    """The passes' arithmetic (a compute-bound pass's time, MEMORY_PASS_ARITH_SHARE of a
    memory-bound one's) and the longest pass. Called per chain occurrence and variant
    (~3k calls on capture_generate), so a chain of fewer than 8 passes is summed in Python
    in numpy's order for so few (from -0.0, one after another: the same float), not
    through numpy's per-call overhead; longer ones by numpy itself (pairwise)."""
    if len(pass_us) < 8:
        share = MEMORY_PASS_ARITH_SHARE
        vals = [float(u) if c else share * float(u) for u, c in zip(pass_us, compute_bound, strict=True)]
        return sum(vals, -0.0), max(float(u) for u in pass_us)
    t = np.asarray(pass_us, dtype=np.float64)
    return float(np.where(np.asarray(compute_bound, bool), t, MEMORY_PASS_ARITH_SHARE * t).sum()), float(t.max())


def apply(
    g: DependencyGraph,
    edit: Edit,
    groups: Sequence[np.ndarray],
    fused_us: Sequence[float],
    removed_op_intervals: Sequence[np.ndarray],
) -> int:
    """`groups`: each group's kernels (model.gpu rows, in order); `fused_us`: the fused
    kernel's time per group; `removed_op_intervals`: per group, the (start, end) of the
    ops whose dispatch goes (all but the first). Returns the groups applied."""
    assert edit.dur is not None
    if not len(groups):
        return 0
    sizes = np.array([len(r) for r in groups], dtype=np.int64)
    which = np.repeat(np.arange(len(groups)), sizes)
    nodes = g.node_of_gpu_rows(np.concatenate([np.asarray(r, dtype=np.int64) for r in groups]))
    ok = nodes >= 0
    nodes, which = nodes[ok], which[ok]
    if not len(nodes):
        return 0
    # Each group's first node (in its stream's order) becomes the fused kernel.
    order = np.lexsort((nodes, which))
    nodes, which = nodes[order], which[order]
    first = np.ones(len(nodes), dtype=bool)
    first[1:] = which[1:] != which[:-1]
    edit.dur[nodes[first]] = np.asarray(fused_us, dtype=np.float64)[which[first]]
    remove_gpu_nodes(g, edit, nodes[~first])
    applied = np.unique(which)
    ivs = [np.asarray(removed_op_intervals[i], dtype=np.float64).reshape(-1, 2) for i in applied.tolist()]
    if ivs:
        inside = remove_host_time(g, edit, np.concatenate(ivs))
        edit.dur[inside] = 0.0
    return len(applied)
