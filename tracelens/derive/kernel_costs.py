"""Kernel costs: the FLOPs and bytes of every kernel, from the op that launched it.

Each op call's FLOPs and bytes (op_costs) are spread over the kernels it launched in
proportion to their time. A kernel belongs to the innermost op that has a model, or to
the nearest enclosing op with one; foreach kernels without one are sized from their
launch grid; the rest is unmodelled, by launching op and why.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgspec
import numpy as np
import pandas as pd

from tracelens.derive.graph_costs import extra_costs
from tracelens.derive.graph_nodes import GraphNodes
from tracelens.derive.kernel_models import (
    _attention_helper_bytes,
    _l2_spill_traffic,
    instructions_per_element,
    iteration_dims,
    legacy_coefficients,
)
from tracelens.derive.op_costs import ADAM_FLOPS_PER_ELEMENT, CONV, OpCost, dtype_from_kernel, op_cost
from tracelens.domain import DTYPE_BYTES, DTYPE_SHORT, GRAPH_LAUNCH_APIS
from tracelens.model.trace import SharedShapes, TraceModel, name_matches
from tracelens.report.enums import UncoveredReason

#: Families whose FLOPs belong to the op's main kernel only.
MATH_FAMILIES = frozenset({"matmul", "conv", "attention"})


#: Enclosing ops searched for a model, as TraceModel.host_chain bounds its walk.
HOST_CHAIN_LIMIT = 512


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


@dataclass
class _Attribution:
    """Per-kernel FLOPs and bytes, and where they came from."""

    flops: np.ndarray
    bytes: np.ndarray
    source: np.ndarray  # 0 none, 1 op model, 2 launch-grid estimate, 3 capture or serving step (graph_costs)
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


#: The nearest modelled op of a row: none within HOST_CHAIN_LIMIT rows (the bound
#: host_chain has).
_NO_OWNER = (-1, HOST_CHAIN_LIMIT)


class _OpCosts:
    """Each launching op's cost model (op_costs.op_cost), found once per (op row, kernel
    type hint), and the nearest op at or above a row that has one (`resolve`)."""

    def __init__(self, model: TraceModel) -> None:
        self.model = model
        self.costs: dict[tuple[int, str | None], OpCost | None] = {}
        self.conv_out: dict[tuple[tuple[int, ...], tuple[int, ...]], list[int]] | None = None
        # Ops with no recorded shapes have no model: skip them without decoding anything (a
        # trace without record_shapes has none, and every kernel's walk up its ops is wasted).
        # A row found to hold only empty fields is marked too, so it is decoded once at most.
        self.has_shapes = model.host["shapes"].notna().to_numpy().copy() if len(model.host) else np.zeros(0, dtype=bool)
        self.decoded: dict[int, dict[str, Any]] = {}
        self.by_content: dict[tuple[str, str | None, bytes], OpCost | None] = {}
        self.by_identity: dict[tuple[str, str | None, int], OpCost | None] = {}  # ids of dicts `decoded` keeps alive
        self.parent = model.arrays.parent if len(model.host) else np.zeros(0, dtype=np.int64)
        # The owner of a launching op's kernels depends on the op row and the kernel's type
        # hint only. The nearest modelled row at or above a row (and its distance) is what its
        # parent's is, one further, unless the row has a model itself: memoised per (row, hint)
        # along each walk, so ops under the same chain of Python frames share the walk up it.
        self.nearest: dict[tuple[int, str | None], tuple[int, int]] = {}

    def cost_of(self, r: int, hint: str | None) -> OpCost | None:
        key = (r, hint)
        if key not in self.costs:
            if r not in self.decoded:
                self.decoded[r] = self.model.op_shapes(r) if self.has_shapes[r] else {}
                self.has_shapes[r] = bool(self.decoded[r])
            shapes = self.decoded[r]
            cost = None
            op = self.model.arrays.name(r)
            # Ops with the same shape args share one decoded dict (TraceModel.op_shapes): the
            # cost found for that dict is the cost of its content, without encoding it again.
            known = (op, hint, id(shapes))
            if shapes and known in self.by_identity:
                self.costs[key] = self.by_identity[known]
                return self.costs[key]
            # A loop calls the same op on the same shapes every iteration: model it once.
            same = (op, hint, msgspec.json.encode(shapes)) if shapes else None
            if same is not None and same in self.by_content:
                cost = self.by_content[same]
            elif same is not None:
                try:
                    cost = op_cost(op, shapes, hint)
                    dims = shapes.get("Input Dims") or []
                    if cost is None and op.split("::")[-1] in CONV and len(dims) >= 2:
                        if self.conv_out is None:
                            self.conv_out = _conv_outputs(self.model)
                        x, w = dims[0], dims[1]
                        if isinstance(x, list) and isinstance(w, list):
                            found = self.conv_out.get((tuple(x), tuple(w)))
                            cost = op_cost(op, shapes, hint, found) if found else None
                except (ValueError, TypeError, IndexError, KeyError, ZeroDivisionError):
                    cost = None
                self.by_content[same] = cost
            if shapes:
                self.by_identity[known] = cost
            self.costs[key] = cost
        return self.costs[key]

    def resolve(self, r: int, hint: str | None) -> tuple[int, int]:
        path: list[int] = []
        a, base = r, _NO_OWNER  # base: the answer at `a` (_NO_OWNER past the root)
        while a >= 0:
            got = self.nearest.get((a, hint))
            if got is not None:
                base = got
                break
            if len(path) == HOST_CHAIN_LIMIT:
                # r's whole bound walked without a find; the rows above r on the path had
                # less of theirs looked at, so only r's answer is known.
                self.nearest[(r, hint)] = _NO_OWNER
                return (-1, 0)
            if self.has_shapes[a] and self.cost_of(a, hint) is not None:  # innermost op first, as host_chain
                base = self.nearest[(a, hint)] = (a, 0)
                break
            path.append(a)
            a = int(self.parent[a])
        row, dist = base
        for k, p in enumerate(path):
            d = dist + len(path) - k
            self.nearest[(p, hint)] = (row, d) if row >= 0 and d < HOST_CHAIN_LIMIT else _NO_OWNER
        found = self.nearest[(r, hint)]
        return found if found[0] >= 0 else (-1, 0)


def _attribute(
    model: TraceModel,
    k: pd.DataFrame,
    comm: np.ndarray,
    measured: np.ndarray | None = None,
    graphs: GraphNodes | None = None,
) -> _Attribution:
    """FLOPs and bytes of every kernel. Each kernel belongs to the innermost op that has a
    model, or to the nearest enclosing op with one (cudnn_convolution_backward for its
    _input and _weight halves) when none of that op's other kernels has its own. The
    owner's bytes are shared by its kernels in proportion to their time; the FLOPs of
    math ops go to its main kernels only (not the layout transforms beside them).
    `measured` kernels (hardware counters) are not listed as unmodelled; `graphs`: the
    capture-time nodes of graph-replayed kernels (None: none modelled from captures)."""
    names = k["name"].astype(str).to_numpy()
    dur = k["dur"].to_numpy(dtype=float)
    launch = k["launch"].to_numpy()
    grids = (k["grid_x"].clip(lower=1) * k["grid_y"].clip(lower=1) * k["grid_z"].clip(lower=1)).to_numpy()
    grids = np.where(k["grid_x"].to_numpy() > 0, grids, 0)
    op_rows = k["op"].to_numpy()
    found = _OpCosts(model)
    # Per distinct kernel name (kcodes index `uniq`): its type hint and the flags below,
    # found once per name and spread to the kernels by their codes.
    kcodes, uniq_names = _factorize_names(k["name"])
    hint_of = [dtype_from_kernel(nm) for nm in uniq_names]
    owner, owner_cost = _owners(model, op_rows, comm, kcodes, uniq_names, hint_of, found)
    flops, nbytes, source, meta, owners, op_time = _shared_costs(
        model, names, dur, owner, owner_cost, kcodes, uniq_names
    )
    # Kernels replayed from a CUDA graph with a known capture, and serving attention
    # with its step's sizes (graph_costs.py): modelled, as `source` 3.
    extra_costs(model, graphs, k, comm, [hint_of[c] for c in kcodes.tolist()], source, flops, nbytes, meta)
    skip = comm if measured is None else comm | measured
    unmodelled = _foreach_or_unmodelled(
        model, names, dur, grids, launch, op_rows, skip, found, flops, nbytes, source, meta
    )
    instr = _instructions(model, names, dur, owner, source, owners, op_time, kcodes, uniq_names)
    l2_port = _l2_spill_traffic(model, names, owner, grids, source)
    return _Attribution(flops, nbytes, source, meta, unmodelled, owner, instr, l2_port)


def _owners(
    model: TraceModel,
    op_rows: np.ndarray,
    comm: np.ndarray,
    kcodes: np.ndarray,
    uniq_names: list[str],
    hint_of: list[str | None],
    found: _OpCosts,
) -> tuple[np.ndarray, dict[int, OpCost]]:
    """Each kernel's owner (the host row of the op whose model covers it, -1 for none)
    and each owner's cost; `hint_of` is each distinct name's dtype hint."""
    n = len(op_rows)
    has_shapes = found.has_shapes
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
                found.cost_of(r, hint_of[c])
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
            found_at, depth = found.resolve(int(rows0[j]), hint)
            if found_at >= 0:
                p_owner[j], p_depth[j], p_cost[j] = found_at, depth, found.costs[(found_at, hint)]
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
    return owner, owner_cost


def _shared_costs(
    model: TraceModel,
    names: np.ndarray,
    dur: np.ndarray,
    owner: np.ndarray,
    owner_cost: dict[int, OpCost],
    kcodes: np.ndarray,
    uniq_names: list[str],
) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[int, tuple[str, str, bool]], np.ndarray, np.ndarray]:
    """Each owner's FLOPs and bytes shared among its kernels: (flops, bytes, source, meta,
    owners, each owner's kernel time)."""
    n = len(owner)
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
    return flops, nbytes, source, meta, owners, op_time


def _foreach_or_unmodelled(
    model: TraceModel,
    names: np.ndarray,
    dur: np.ndarray,
    grids: np.ndarray,
    launch: np.ndarray,
    op_rows: np.ndarray,
    skip: np.ndarray,
    found: _OpCosts,
    flops: np.ndarray,
    nbytes: np.ndarray,
    source: np.ndarray,
    meta: dict[int, tuple[str, str, bool]],
) -> dict[tuple[str, UncoveredReason], float]:
    """The kernels no op model covers, except the `skip`ped ones (collectives, kernels with
    hardware counters): foreach kernels sized from their grid (into flops, nbytes, source
    and meta), the rest's time by launching op and why it has no model."""
    has_shapes = found.has_shapes
    unmodelled: dict[tuple[str, UncoveredReason], float] = defaultdict(float)
    codes = model.arrays.name_codes
    graph_codes = [c for c, nm in enumerate(model.arrays.name_table) if nm in GRAPH_LAUNCH_APIS]
    if len(model.host):
        graph_replay = (launch >= 0) & np.isin(codes[np.clip(launch, 0, None)], graph_codes)
    else:
        graph_replay = launch < -1
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
    return dict(unmodelled)


def _instructions(
    model: TraceModel,
    names: np.ndarray,
    dur: np.ndarray,
    owner: np.ndarray,
    source: np.ndarray,
    owners: np.ndarray,
    op_time: np.ndarray,
    kcodes: np.ndarray,
    uniq_names: list[str],
) -> np.ndarray:
    """Each kernel's thread instructions, estimated where a per-element count is known
    (0 elsewhere)."""
    n = len(owner)
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
    # iteration_dims per distinct (shape args, in-place) pair: a decode loop's kernels share
    # a few hundred sets (the model's decoded dicts, shared and alive here, so an id is one set).
    dims_of: dict[tuple[int, bool], tuple[int, int] | None] = {}
    for i in np.flatnonzero((source == 1) & has_legacy).tolist():
        o = int(owner[i])
        op = model.arrays.name(o).split("::")[-1]
        shapes, inplace = model.op_shapes(o), op == "copy_" or op.endswith("_")
        if isinstance(shapes, SharedShapes):
            dkey = (id(shapes), inplace)
            if dkey not in dims_of:
                dims_of[dkey] = iteration_dims(shapes, inplace)
            found = dims_of[dkey]
        else:
            found = iteration_dims(shapes, inplace)
        coef = legacy[names[i]]
        if found is not None and coef is not None:
            j = int(np.searchsorted(owners, o))
            instr[i] = (coef[0] + coef[1] * found[1]) * found[0] * dur[i] / op_time[j]
    return instr


def _ancestors_among(up: Sequence[int], rows: set[int], among: set[int]) -> set[int]:
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
