"""Plans for the fixes that change kernels: fusion, SDPA, kernels at their roof, aligned
matmuls, full waves and clocks (issue 25)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from tracelens.derive.context import AnalysisContext
from tracelens.derive.fusion import FUSIBLE_FAMILIES
from tracelens.derive.replay import Edit
from tracelens.derive.roofline import gain_to_roof
from tracelens.derive.transforms import VARIANTS, Variant
from tracelens.derive.transforms import fusion as t_fusion
from tracelens.derive.transforms import kernels as t_kernels
from tracelens.model.schema import Kind
from tracelens.predict.targets import Plan, graph_of, intervals, launched_by
from tracelens.report.findings import Finding


def fusion_plan(ctx: AnalysisContext) -> Plan | None:
    roof = ctx.roofline
    if not roof.chains or roof.peaks is None:
        return None
    bound = {k.name: k.bound for k in roof.kernels}
    gpu = ctx.model.gpu
    codes = gpu["name"].cat.codes.to_numpy()
    compute_code = np.array([bound.get(str(c)) == "compute" for c in gpu["name"].cat.categories], dtype=bool)
    codes_of, compute_of = codes.tolist(), compute_code.tolist()  # per-pass lookups: Python items, not numpy
    dur = gpu["dur"].to_numpy(dtype=np.float64).tolist()
    launch = gpu["launch"].to_numpy().tolist()
    root = ctx.model.host["op_root"].to_numpy().tolist()
    h_ts = ctx.model.host["ts"].to_numpy()
    h_end = ctx.model.host["end"].to_numpy()
    groups, pass_info, removed_iv = [], [], []
    op_of = ctx.model.arrays.op
    seen: dict[int, int] = {}

    def inputs_of(call: int) -> int:
        """Full-size tensor inputs of the op that launched a pass (0: unknown)."""
        if call < 0:
            return 0
        op = int(op_of[call])
        if op < 0:
            return 0
        if op not in seen:
            dims = ctx.model.op_shapes(op).get("Input Dims") or []
            # math.prod, not np.prod: a tenth of the time on Python lists (capture_generate:
            # 5.9k shapes, 0.024 of the analysis' 1 s under cProfile), the same products.
            sizes = [math.prod(d) for d in dims if isinstance(d, list) and d and all(isinstance(x, int) for x in d)]
            top = max(sizes, default=0)
            seen[op] = sum(1 for x in sizes if x == top) if top > 1 else 0
        return seen[op]

    g = ctx.graph
    in_graph = np.zeros(len(gpu), dtype=bool)
    if g is not None:
        in_graph[g.row[g.kind == 1]] = True
    for c in roof.chains:
        for passes, pbytes in zip(c.occurrences, c.occurrence_bytes, strict=True):
            if not in_graph[passes[0][0]]:
                continue
            rows = np.array([r for p in passes for r in p], dtype=np.int64)
            groups.append(rows)
            pass_us = [float(sum(dur[r] for r in p)) for p in passes]
            compute = [any(compute_of[codes_of[r]] for r in p) for p in passes]
            ins = [inputs_of(launch[p[0]]) for p in passes]
            pass_info.append((pass_us, fused_bytes(pbytes, ins) if all(ins) else max(pbytes), compute))
            later = np.array([root[launch[p[0]]] for p in passes[1:] if launch[p[0]] >= 0], dtype=np.int64)
            later = later[later >= 0]
            removed_iv.append(np.column_stack([h_ts[later], h_end[later]]))
    bw = roof.peaks.bw
    sheet = roof.peaks.bandwidth

    def apply(edit: Edit, v: Variant) -> None:
        fused = [t_fusion.fused_time_us(v, us, (io,), cb, bw, sheet) for us, io, cb in pass_info]
        t_fusion.apply(graph_of(ctx), edit, groups, fused, removed_iv)

    return Plan(
        "fuse_chains",
        "each chain of back-to-back elementwise passes fused into one kernel (one round trip of its inputs and "
        "output, or its arithmetic if longer), its other ops no longer dispatched",
        apply,
    )


def fused_bytes(pass_bytes: Sequence[float], inputs: Sequence[int]) -> float:
    """The fused kernel's bytes: the chain's first input(s), each later pass's
    other full-size inputs, one output. A pass of k full-size inputs moves k + 1 tensors;
    the tensor's size is the first pass's bytes over its k + 1. (mul, add, gelu, mul, add
    with scalars: one read and one write, the largest pass; an fp32 chain with two more
    inputs, H200 compile_u: four tensors where its largest pass moves three.)"""
    unit = pass_bytes[0] / (inputs[0] + 1)
    moved = inputs[0] + sum(max(k - 1, 0) for k in inputs[1:]) + 1
    return max(unit * moved, max(pass_bytes))


def sdpa_plan(ctx: AnalysisContext) -> Plan | None:
    calls = ctx.eager_attention
    if not calls:
        return None
    groups, fused, removed_iv = [], [], []
    gpu = ctx.model.gpu
    g_ts, g_end = gpu["ts"].to_numpy(), gpu["end"].to_numpy()
    copies = np.flatnonzero((gpu["kind"].to_numpy() == int(Kind.MEMCPY)) & gpu["name"].astype(str).str.contains("DtoD"))
    for c in calls:
        launched = launched_by(ctx, np.array(c.rows, dtype=np.int64), (Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET))
        rows = np.concatenate(launched) if launched else np.empty(0, np.int64)
        if not len(rows):
            continue
        # Device copies between the call's first and last kernel are its own (the clone an
        # out-of-place masked_fill makes), also where the trace lost their launch link.
        inside = copies[(g_ts[copies] >= g_ts[rows].min()) & (g_end[copies] <= g_end[rows].max())]
        rows = np.union1d(rows, inside)
        groups.append(np.sort(rows))
        fused.append(float(c.sdpa_us))
        # The host no longer runs the pattern's other ops nor the Python between them: from
        # the first op's end (its dispatch stands for the SDPA call's) to the last op's end.
        iv = intervals(ctx, list(c.rows))
        removed_iv.append(np.array([[iv[0, 1], iv[:, 1].max()]]) if len(iv) else iv)
    if not groups:
        return None

    def apply(edit: Edit, v: Variant) -> None:
        scale = {Variant.LOW: 1.5, Variant.HIGH: 0.75}.get(v, 1.0)
        t_fusion.apply(graph_of(ctx), edit, groups, [f * scale for f in fused], removed_iv)

    return Plan(
        "sdpa",
        "each eager attention's kernels (and the copies between them) replaced by one scaled_dot_product_attention "
        "kernel at the roofline's estimate (half the FLOPs under a causal mask), its other ops and the Python between "
        "them no longer run on the host (the SDPA op still launches)",
        apply,
    )


def kernel_factor_plan(
    ctx: AnalysisContext,
    fix: str,
    model_text: str,
    factor_of: dict[str, float] | dict[Variant, dict[str, float]],
    spread: tuple[float, float] = (1.0, 1.0),
) -> Plan | None:
    """Kernels by name sped up by a factor: one table for all variants (LOW/HIGH move the
    saved part by `spread`), or one table per variant."""
    tables: dict[Variant, dict[str, float]]
    if factor_of and all(isinstance(k, Variant) for k in factor_of):
        tables = factor_of  # type: ignore[assignment]
    else:
        flat: dict[str, float] = factor_of  # type: ignore[assignment]
        tables = {
            v: {
                n: 1.0 - (1.0 - f) * {Variant.LOW: spread[0], Variant.HIGH: spread[1]}.get(v, 1.0)
                for n, f in flat.items()
            }
            for v in VARIANTS
        }
    if not any(tables.values()):
        return None
    gpu = ctx.model.gpu
    codes = gpu["name"].cat.codes.to_numpy()
    cats = [str(c) for c in gpu["name"].cat.categories]
    per_variant = {}
    for v, table in tables.items():
        per_code = np.ones(len(cats))
        for i, c in enumerate(cats):
            if c in table:
                per_code[i] = table[c]
        per_variant[v] = per_code
    touched = np.zeros(len(cats), dtype=bool)
    for per_code in per_variant.values():
        touched |= per_code < 1.0
    rows = np.flatnonzero(touched[codes])

    def apply(edit: Edit, v: Variant) -> None:
        t_kernels.apply(graph_of(ctx), edit, rows, per_variant[v][codes[rows]])

    return Plan(fix, model_text, apply)


def roof_factors(ctx: AnalysisContext, bound: str) -> dict[str, float]:
    """Per kernel name of that bound, its time at the sustained roof over its time now;
    kernels in a fusion chain are the fusion's to gain from (as in the analyzer)."""
    roof = ctx.roofline
    in_chains = {name for c in roof.chains for name in c.kernels}
    out = {}
    for r in roof.kernels:
        if r.name in in_chains or (bound == "memory" and r.family in FUSIBLE_FAMILIES and roof.chains):
            continue
        if r.bound == bound and r.bound_us > 0:
            g = gain_to_roof(r)
            if g > 0:
                out[r.name] = max(1.0 - g / r.time_us, 0.0)
    return out


def site_factors(ctx: AnalysisContext, f: Finding) -> dict[str, float]:
    """Per kernel name, 1 - (the time a site says it loses) / (the name's time in the window)."""
    dev = ctx.ledger.primary
    if dev is None:
        return {}
    act = ctx.model.gpu_activity()
    act = act[(act["ts"] >= dev.window_start) & (act["ts"] < dev.window_end)]
    total = act.groupby(act["name"].astype(str))["dur"].sum().to_dict()
    out: dict[str, float] = {}
    for s in f.sites:
        for k in s.kernels[:1]:
            t = float(total.get(k, 0.0))
            if t > 0:
                out[k] = max(out.get(k, 1.0) - s.time_us / t, 0.05)
    return out


#: An aligned bf16/fp16 matmul runs at about this share of the sustained ceiling measured on
#: the GPU (H200 sweep, sample_traces/matmul_sweep: 744-827 of 790 TFLOP/s).
ALIGNED_SHARE_OF_CEILING = 0.95


def misaligned_factors(ctx: AnalysisContext) -> dict[Variant, dict[str, float]]:
    """Per misaligned kernel, its time aligned over its time now: at an aligned peer's rate
    in this trace, else at ALIGNED_SHARE_OF_CEILING of the GPU's sustained matmul rate
    (LOW: the analyzer's conservative EXPECTED_SLOWDOWN; HIGH: the ceiling itself)."""
    from tracelens.analyzers.misaligned_matmul import EXPECTED_SLOWDOWN, MAX_SLOWDOWN, _peer_rate

    attention = ctx.eager_attention_shapes
    roofs = {k.name: k for k in ctx.roofline.kernels}
    rows = [r for r in ctx.matmuls if (r.batch, r.m, r.n, r.k) not in attention]
    out: dict[Variant, dict[str, float]] = {v: {} for v in VARIANTS}
    for r in rows:
        if r.aligned or r.tflops <= 0:
            continue
        peer = _peer_rate(r, rows)
        k = roofs.get(r.kernel)
        ceiling = (min(k.measured_ceiling, k.roof_value) if k is not None and k.measured_ceiling > 0 else
                   (k.roof_value if k is not None else 0.0)) / 1e12  # fmt: skip
        nominal = peer if peer else ALIGNED_SHARE_OF_CEILING * ceiling if ceiling else r.tflops * EXPECTED_SLOWDOWN
        high = max(nominal, ceiling) if ceiling else nominal
        for v, rate in ((Variant.LOW, r.tflops * EXPECTED_SLOWDOWN), (Variant.NOMINAL, nominal), (Variant.HIGH, high)):
            slowdown = min(max(rate / r.tflops, 1.0), MAX_SLOWDOWN)
            out[v][r.kernel] = min(out[v].get(r.kernel, 1.0), 1.0 / slowdown)
    return out
