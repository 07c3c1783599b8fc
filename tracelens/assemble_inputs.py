"""Report parts for the inputs of issue 32: CUDA-graph replays with what their capture
says (derive/graph_nodes.py) and serving steps' attention sizes (derive/serving.py).
Built from the analysis context by tracelens.assemble, like its other parts."""

from __future__ import annotations

from collections import defaultdict
from statistics import median

import numpy as np

from tracelens.derive.context import AnalysisContext
from tracelens.derive.graph_costs import SERVING_ATTENTION_OPS
from tracelens.derive.graph_nodes import Phase as GraphPhase
from tracelens.derive.serving import Phase as ServingPhase
from tracelens.derive.serving import StepSizes, parse_step
from tracelens.domain import DTYPE_BYTES
from tracelens.model.schema import Kind
from tracelens.model.sources import PySource
from tracelens.report import GraphCollectiveRow, GraphModuleRow, GraphSummary, ServingPhaseRow, ServingSummary

#: Module rows listed (the rest add up in the shares).
MAX_MODULE_ROWS = 40
#: Kernel-name marks of attention kernels (serving's paged/varlen ones and SDPA's).
ATTENTION_KERNEL_MARKS = ("fmha", "flash", "attention", "attn", "paged", "mha_")
#: Short dtype names of collectives' annotations, to element sizes.
_DTYPE_ALIASES = {
    "bfloat16": "c10::BFloat16", "float16": "c10::Half", "half": "c10::Half", "float32": "float", "float": "float",
    "float64": "double", "int64": "long int", "int32": "int", "uint8": "unsigned char", "int8": "signed char",
    "float8_e4m3fn": "c10::Float8_e4m3fn", "float8_e5m2": "c10::Float8_e5m2", "bool": "bool",
}  # fmt: skip
_INT_BYTES = {"long int": 8, "int": 4, "unsigned char": 1, "signed char": 1, "bool": 1}


def _window_rows(ctx: AnalysisContext) -> np.ndarray:
    dev = ctx.ledger.primary
    gpu = ctx.model.gpu
    if dev is None or not len(gpu):
        return np.zeros(0, dtype=np.int64)
    kind = gpu["kind"].to_numpy()
    act = (kind == int(Kind.KERNEL)) | (kind == int(Kind.MEMCPY)) | (kind == int(Kind.MEMSET))
    keep = (
        act
        & (gpu["device"].to_numpy() == dev.device)
        & (gpu["end"].to_numpy() > dev.window_start)
        & (gpu["ts"].to_numpy() < dev.window_end)
    )
    return np.flatnonzero(keep)


def _modelled_names(ctx: AnalysisContext) -> set[str]:
    return {k.name for k in ctx.roofline.kernels if k.bound in ("memory", "compute", "latency") and k.roof_name}


def graph_summary(ctx: AnalysisContext) -> GraphSummary | None:
    gn = ctx.graph_nodes
    if not gn.replays:
        return None
    model = ctx.model
    gpu = model.gpu
    rows = _window_rows(ctx)
    launch = gpu["launch"].to_numpy()
    table = model.arrays.name_table
    graph_codes = {i for i, n in enumerate(table) if n in ("cudaGraphLaunch", "cuGraphLaunch", "hipGraphLaunch")}
    lc = np.where(launch[rows] >= 0, model.arrays.name_codes[np.clip(launch[rows], 0, None)], -1)
    rows = rows[np.isin(lc, list(graph_codes))]
    if not len(rows):
        return None
    dur = gpu["dur"].to_numpy()
    names = gpu["name"].astype(str).to_numpy()
    kinds = gpu["kind"].to_numpy()
    total = float(dur[rows].sum())
    busy = ctx.ledger.primary.busy_us if ctx.ledger.primary else 0.0
    nodes = gn.nodes
    ann_us = cap_us = 0.0
    per: dict[tuple[str, GraphPhase, str], list[object]] = {}
    coll: dict[tuple[str, str, str, str, str], list[float]] = defaultdict(list)
    coll_meta: dict[tuple[str, str, str, str, str], float] = {}
    modelled = _modelled_names(ctx)
    kernel_us = modelled_us = 0.0
    for r in rows.tolist():
        d = float(dur[r])
        node = nodes.get(r)
        if int(kinds[r]) == int(Kind.KERNEL):
            kernel_us += d
            if names[r] in modelled:
                modelled_us += d
        if node is None:
            key: tuple[str, GraphPhase, str] = ("", "", "")
        else:
            if node.annotated:
                ann_us += d
            if node.captured:
                cap_us += d
            # Without a module name, the op at capture tells the rows apart.
            key = (node.module, node.phase, "" if node.module else node.op)
        row = per.setdefault(key, [0.0, 0, defaultdict(float), defaultdict(float), None])
        row[0] = float(row[0]) + d  # type: ignore[arg-type]
        row[1] = int(row[1]) + 1  # type: ignore[call-overload]
        row[2][names[r]] += d  # type: ignore[index]
        if node is not None and node.op:
            row[3][node.op] += d  # type: ignore[index]
        if node is not None and node.source is not None and row[4] is None:
            row[4] = node.source
        if node is not None and node.collective:
            c = node.collective
            ckey = (c.get("Collective name", ""), c.get("Process Group Description") or c.get("Process Group Name", ""),
                    c.get("dtype", ""), c.get("In msg nelems", ""), c.get("Group size", ""))  # fmt: skip
            coll[ckey].append(d)
            coll_meta[ckey] = _collective_bytes(c)
    modules = tuple(
        GraphModuleRow(
            module=m,
            phase=ph,
            time_us=float(v[0]),  # type: ignore[arg-type]
            share=float(v[0]) / total if total else 0.0,  # type: ignore[arg-type]
            kernels=int(v[1]),  # type: ignore[call-overload]
            top_kernel=max(v[2].items(), key=lambda kv: kv[1])[0],  # type: ignore[attr-defined]
            op=max(v[3].items(), key=lambda kv: kv[1])[0] if v[3] else "",  # type: ignore[attr-defined]
            source=v[4] if isinstance(v[4], PySource) else None,
        )
        for (m, ph, _), v in sorted(per.items(), key=lambda kv: -float(kv[1][0]))[:MAX_MODULE_ROWS]  # type: ignore[arg-type]
    )
    collectives = tuple(
        GraphCollectiveRow(
            collective=k[0],
            group=k[1],
            group_size=int(k[4]) if k[4].isdigit() else 0,
            dtype=k[2],
            bytes=coll_meta[k],
            calls=len(ds),
            time_us=float(sum(ds)),
            algbw_gbps=coll_meta[k] / median(ds) / 1e3 if coll_meta[k] and median(ds) > 0 else 0.0,
        )
        for k, ds in sorted(coll.items(), key=lambda kv: -sum(kv[1]))
    )
    replays = len({int(launch[r]) for r in rows.tolist()})
    return GraphSummary(
        replays=replays,
        replayed_us=total,
        replayed_share=total / busy if busy else 0.0,
        annotated_share=ann_us / total if total else 0.0,
        captured_share=cap_us / total if total else 0.0,
        modelled_share=modelled_us / kernel_us if kernel_us else 0.0,
        inline_annotated=gn.inline_annotated,
        captures=gn.captures,
        modules=modules,
        collectives=collectives,
        notes=gn.notes,
    )


def _collective_bytes(c: dict[str, str]) -> float:
    n = c.get("In msg nelems", "")
    t = _DTYPE_ALIASES.get(c.get("dtype", "").lower().removeprefix("torch."), c.get("dtype", ""))
    size = DTYPE_BYTES.get(t) or _INT_BYTES.get(t, 0)
    return float(int(n)) * size if n.isdigit() and size else 0.0


def serving_summary(ctx: AnalysisContext) -> ServingSummary | None:
    """Serving steps in the window: their batches and attention sizes, and how much of
    the attention kernels' time the roofline now models."""
    model = ctx.model
    host = model.host
    if not len(host):
        return None
    arrays = model.arrays
    kind = arrays.kind
    parsed: dict[int, StepSizes] = {}
    for code, name in enumerate(arrays.name_table):
        if name.startswith(("step[", "execute_", "prefill[", "decode[")):
            s = parse_step(name)
            if s is not None:
                for r in np.flatnonzero((arrays.name_codes == code) & (kind == int(Kind.USER_ANNOTATION))).tolist():
                    parsed[r] = s
    if not parsed:
        return None
    dev = ctx.ledger.primary
    ts = host["ts"].to_numpy()
    end = host["end"].to_numpy()
    lo, hi = (dev.window_start, dev.window_end) if dev is not None else (-np.inf, np.inf)
    steps = {r: s for r, s in parsed.items() if end[r] > lo and ts[r] < hi} or parsed
    by_phase: dict[ServingPhase, list[tuple[int, StepSizes]]] = defaultdict(list)
    for r, s in steps.items():
        by_phase[s.phase].append((r, s))
    phases = tuple(
        ServingPhaseRow(
            phase=ph,
            steps=len(items),
            mean_us=float(np.mean([end[r] - ts[r] for r, _ in items])),
            requests=float(np.mean([s.context_requests + s.generation_requests for _, s in items])),
            tokens=float(np.mean([s.tokens for _, s in items])),
            sum_qk=float(np.mean([s.sum_qk for _, s in items])),
            sum_kv=float(np.mean([s.sum_kv for _, s in items])),
        )
        for ph, items in sorted(by_phase.items())
    )
    att_us, att_modelled, cache_use = _attention_time(ctx, steps)
    notes: list[str] = []
    if not any(s.has_sizes for s in steps.values()):
        notes.append(
            "the step annotations carry no attention sums (Σ N_Q·N_KV): SGLang's roofline_annotations, vLLM's "
            "detailed_trace_annotation or ATOM_ENABLE_DETAILED_ANNOTATION=1 add them, and attention gets a roofline"
        )
    return ServingSummary(
        framework=next(iter(steps.values())).framework,
        steps=len(steps),
        with_sizes=sum(1 for s in steps.values() if s.has_sizes),
        phases=phases,
        attention_us=att_us,
        attention_modelled_share=att_modelled / att_us if att_us else 0.0,
        cache_use=cache_use,
        notes=tuple(notes),
    )


def _attention_time(ctx: AnalysisContext, steps: dict[int, StepSizes]) -> tuple[float, float, float]:
    """(attention kernel time in the steps, of it modelled, Σ N_KV / cache positions read)."""
    model = ctx.model
    gpu = model.gpu
    rows = _window_rows(ctx)
    if not len(rows):
        return 0.0, 0.0, 0.0
    names = gpu["name"].astype(str).to_numpy()
    dur = gpu["dur"].to_numpy()
    launch = gpu["launch"].to_numpy()
    nodes = ctx.graph_nodes.nodes
    modelled = _modelled_names(ctx)
    step_rows = np.array(sorted(steps), dtype=np.int64)
    host_ts = model.host["ts"].to_numpy()
    host_end = model.host["end"].to_numpy()
    att = mod = 0.0
    used = read = 0.0
    for r in rows.tolist():
        low = names[r].lower()
        node = nodes.get(r)
        op_row = int(model.arrays.op[launch[r]]) if launch[r] >= 0 else -1
        op = node.op if node is not None and node.op else (model.arrays.name(op_row) if op_row >= 0 else "")
        if not (any(m in low for m in ATTENTION_KERNEL_MARKS) or op in SERVING_ATTENTION_OPS or "attention" in op):
            continue
        lr = int(launch[r])
        if lr < 0:
            continue
        inside = step_rows[(host_ts[step_rows] <= host_ts[lr]) & (host_end[step_rows] >= host_ts[lr])]
        if not len(inside):
            continue
        d = float(dur[r])
        att += d
        if names[r] in modelled:
            mod += d
        step = steps[int(inside[-1])]
        shapes = node.shapes if node is not None and node.shapes else (model.op_shapes(op_row) if op_row >= 0 else {})
        dims = shapes.get("Input Dims") or []
        # Attention over a static cache: key [batch, heads, positions, dim] (SDPA and the
        # cuDNN/flash/efficient ops under it); the requests hold Σ N_KV of those positions.
        if "attention" in op and len(dims) >= 2 and isinstance(dims[1], list) and len(dims[1]) == 4:
            b, _, positions, _ = dims[1]
            if step.sum_kv and b and positions:
                used += step.sum_kv * d
                read += float(b * positions) * d
    return att, mod, (used / read if read else 0.0)
