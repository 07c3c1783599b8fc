"""What each kernel replayed from a CUDA graph was at capture: its op and shapes, its
module, its autograd phase, its Python source, its collective.

A replay trace shows graphed kernels under one `cudaGraphLaunch` and nothing else: the
ops, shapes and Python frames that made them ran once, at capture. Two inputs bring them
back, used together when both are there:

1. Annotations baked into the replayed events' args (model/graph_annotations.py,
   PyTorch 2.12+ `mark_kernels`): module (`module_fqn` or `name`), phase
   (`autograd_phase`), the collective's fields, a Python stack where one was merged in,
   and shape args where a pipeline put them there (`op`, `Input Dims`, `Input type`).
2. Capture traces: the profiler run during the capture (vLLM's `capture_traces/`,
   SGLang's `capture_traces/bs_<bs>_rank<r>.json.gz` or `graph_capture_profile/`), found
   in those folders beside the trace. Nothing runs during a capture, so such a trace has
   the launches (with their ops, shapes, stacks and `record_function` ranges) and no
   kernels. A captured region is a `capture_<bs>_<mode>` range (vLLM), else the file.
   A replay is matched to the region that launched the same number of kernels, copies
   and memsets in the same order (a single-stream capture is a chain: the replay runs its
   nodes in capture order); between regions alike in that (one graph per batch size),
   the batch size of the serving step around the replay decides (SGLang's `bs=`, vLLM's
   padded token count), else the replay is left unmatched and said so.

The kernels keep their launch (`cudaGraphLaunch`): the ledger's idle causes are those of
the real launches; what changes is what the roofline and the report know of them.
"""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import msgspec
import numpy as np

from tracelens.model.graph_annotations import NAME_KEYS, STACK_KEYS, read_graph_args
from tracelens.model.schema import CommArgs, Kind
from tracelens.model.sources import PySource, user_source
from tracelens.model.trace import TraceModel

#: What a replayed kernel did at capture: forward or backward of a module, the optimizer's
#: step, or "" (unknown: the loss, code outside modules).
Phase = Literal["forward", "backward", "optimizer", ""]
#: Runtime/driver calls that replay a graph.
GRAPH_LAUNCH_APIS = frozenset({"cudaGraphLaunch", "cuGraphLaunch", "hipGraphLaunch"})
#: Calls that put a node into a graph under capture: kernel launches (NCCL uses the Ex
#: forms, Triton the driver API), async copies and memsets.
CAPTURED_KERNEL_APIS = frozenset(
    {"cudaLaunchKernel", "cudaLaunchKernelExC", "cudaLaunchKernelEx", "cuLaunchKernel", "cuLaunchKernelEx",
     "cudaLaunchCooperativeKernel", "hipLaunchKernel", "hipExtModuleLaunchKernel", "hipModuleLaunchKernel",
     "hipLaunchKernelExC"}
)  # fmt: skip
CAPTURED_COPY_APIS = frozenset({"cudaMemcpyAsync", "cuMemcpyAsync", "hipMemcpyAsync", "cudaMemcpy2DAsync"})
CAPTURED_MEMSET_APIS = frozenset({"cudaMemsetAsync", "cuMemsetD8Async", "cuMemsetD32Async", "hipMemsetAsync"})
BEGIN_CAPTURE_APIS = frozenset({"cudaStreamBeginCapture", "cudaStreamBeginCapture_v2", "hipStreamBeginCapture"})
END_CAPTURE_APIS = frozenset({"cudaStreamEndCapture", "hipStreamEndCapture"})
#: Folders beside a trace that hold capture traces (vLLM, SGLang).
CAPTURE_DIRS = ("capture_traces", "graph_capture_profile")
#: At most this many capture trace files are read per report.
MAX_CAPTURE_FILES = 64
_CAPTURE_RANGE = re.compile(r"^capture_(\d+)_(\w+)")
_BS_FILE = re.compile(r"(?:^|[_-])bs_?(\d+)(?:[_.-]|$)")
_MODULE_RANGE = "module::"
_EVALUATE = "autograd::engine::evaluate_function"
#: Two records of one event (the model's and the JSON's) are this close in time.
_SAME_EVENT_US = 0.5
_OPTIMIZER_RANGE = "Optimizer.step#"
_SHAPE_KEYS = ("Input Dims", "Input type", "Input Strides", "Concrete Inputs")


@dataclass(frozen=True)
class GraphNode:
    """One replayed kernel (or copy, memset) and what it was at capture."""

    op: str = ""  # the op that launched it ("" when unknown)
    shapes: dict[str, Any] = field(default_factory=dict)  # that op's decoded shape args
    module: str = ""  # module FQN or annotated region name
    phase: Phase = ""
    source: PySource | None = None  # the user frame that made it at capture
    collective: dict[str, str] = field(default_factory=dict)  # Collective name, In msg nelems, dtype, ...
    graph: str = ""  # which captured graph: "capture_8_decode", "graph 3", a file name
    group: int = -1  # kernels of one replayed op share it: the op's cost is split among them
    annotated: bool = False  # a baked-in annotation named it
    captured: bool = False  # matched to a capture trace's launch


@dataclass(frozen=True)
class GraphNodes:
    nodes: dict[int, GraphNode]  # gpu row -> node
    replays: int  # graph launches whose kernels are in the trace
    replayed_kernels: int  # GPU events launched by them
    annotated: int  # of them with a baked-in annotation
    from_capture: int  # of them matched to a capture trace's launch
    captures: tuple[str, ...]  # capture trace files read
    inline_annotated: bool
    notes: tuple[str, ...]


_EMPTY = GraphNodes({}, 0, 0, 0, 0, (), False, ())


def graph_nodes(model: TraceModel) -> GraphNodes:
    """The nodes of the graph-replayed GPU events of a trace (annotations, capture traces
    beside it): computed once per report, as AnalysisContext.graph_nodes."""
    return _build(model)


def _replays(model: TraceModel) -> dict[int, np.ndarray]:
    """cudaGraphLaunch host row -> the GPU rows it launched, in start order."""
    if not len(model.gpu) or not len(model.host):
        return {}
    table = model.arrays.name_table
    codes = {i for i, n in enumerate(table) if n in GRAPH_LAUNCH_APIS}
    if not codes:
        return {}
    launch = model.gpu["launch"].to_numpy()
    kind = model.gpu["kind"].to_numpy()
    ts = model.gpu["ts"].to_numpy()
    act = (kind == int(Kind.KERNEL)) | (kind == int(Kind.MEMCPY)) | (kind == int(Kind.MEMSET))
    lc = np.where(launch >= 0, model.arrays.name_codes[np.clip(launch, 0, None)], -1)
    rows = np.flatnonzero(act & np.isin(lc, list(codes)))
    out: dict[int, np.ndarray] = {}
    if not len(rows):
        return out
    order = np.lexsort((ts[rows], launch[rows]))
    rows = rows[order]
    keys = launch[rows]
    cuts = np.flatnonzero(np.diff(keys)) + 1
    for part in np.split(rows, cuts):
        out[int(launch[part[0]])] = part
    return out


def _build(model: TraceModel) -> GraphNodes:
    replays = _replays(model)
    if not replays:
        return _EMPTY
    notes: list[str] = []
    total = sum(len(v) for v in replays.values())
    nodes: dict[int, GraphNode] = {}
    # 1. Annotations in the replayed events' args.
    args = read_graph_args(model.meta.path) if model.meta.path else None
    annotated = 0
    if args is not None and args.events:
        annotated = _apply_annotations(model, replays, args.events, nodes)
    # 2. Capture traces beside the trace.
    paths = capture_trace_paths(model.meta.path)
    from_capture = 0
    used: list[str] = []
    if paths:
        regions = [r for p in paths for r in _regions_of(p, notes)]
        used = sorted({r.file for r in regions})
        from_capture = _apply_captures(model, replays, regions, nodes, notes)
    if total and not annotated and not from_capture:
        notes.append(
            f"{total} GPU events replayed from {len(replays)} CUDA graph launches carry no capture information: "
            "annotate the capture (torch.cuda.graph(..., enable_annotations=True) with mark_kernels, exported with "
            "cuda_graph_annotations=...) or keep the capture trace in capture_traces/ beside the trace"
        )
    return GraphNodes(
        nodes=nodes,
        replays=len(replays),
        replayed_kernels=total,
        annotated=annotated,
        from_capture=from_capture,
        captures=tuple(os.path.basename(p) for p in used),
        inline_annotated=bool(args and args.inline_annotated),
        notes=tuple(notes),
    )


# -- 1. annotations -------------------------------------------------------------------
def _stack_source(text: str) -> PySource | None:
    """The innermost frame of a "file:line:function" stack outside PyTorch."""
    from tracelens.model.sources import is_machinery, short_path

    for line in text.splitlines():
        parts = line.strip().rsplit(":", 2)
        if len(parts) != 3 or not parts[1].isdigit():
            continue
        file = short_path(parts[0])
        if not is_machinery(file):
            return PySource(file=file, line=int(parts[1]), function=parts[2])
    return None


def _annotation_node(ann: dict[str, str], base: GraphNode | None) -> GraphNode:
    module = next((ann[k] for k in NAME_KEYS if ann.get(k)), "")
    phase: Phase = "backward" if ann.get("autograd_phase") == "backward" else ("forward" if module else "")
    stack = next((ann[k] for k in STACK_KEYS if ann.get(k)), "")
    collective = {k: v for k, v in ann.items() if k in _COLLECTIVE_KEYS}
    shapes: dict[str, Any] = {}
    for k in _SHAPE_KEYS:
        if k in ann:
            with contextlib.suppress(msgspec.DecodeError):
                shapes[k] = msgspec.json.decode(ann[k])
    b = base or GraphNode()
    return GraphNode(
        op=b.op or ann.get("op", ""),
        shapes=b.shapes or (shapes if "Input Dims" in shapes else {}),
        module=module or b.module,
        phase=phase if ann.get("autograd_phase") or not b.phase else b.phase,
        source=_stack_source(stack) if stack else b.source,
        collective=collective or b.collective,
        graph=b.graph,
        group=b.group,
        annotated=bool(ann) or b.annotated,
    )


_COLLECTIVE_KEYS = frozenset(
    {"Collective name", "In msg nelems", "Out msg nelems", "Group size", "dtype", "Process Group Name",
     "Process Group Description", "Process Group Ranks", "Seq", "Src Rank", "Dst Rank", "In split size",
     "Out split size"}
)  # fmt: skip


def _apply_annotations(
    model: TraceModel, replays: dict[int, np.ndarray], events: tuple[Any, ...], nodes: dict[int, GraphNode]
) -> int:
    """Join the file's graphed events to the model's GPU rows: same correlation and name,
    in start order within each (correlation, name)."""
    corr = model.gpu["correlation"].to_numpy()
    names = model.gpu["name"]
    by_key: dict[tuple[int, str], list[dict[str, str]]] = {}
    graph_of: dict[tuple[int, str], list[int]] = {}
    for e in events:
        by_key.setdefault((e.correlation, e.name), []).append(e.annotation)
        graph_of.setdefault((e.correlation, e.name), []).append(e.graph_id)
    seen: dict[tuple[int, str], int] = {}
    count = 0
    group = max((n.group for n in nodes.values()), default=-1) + 1
    for rows in replays.values():
        prev: tuple[dict[str, str], set[str]] | None = None
        for r in rows.tolist():
            key = (int(corr[r]), str(names.iat[r]))
            anns = by_key.get(key)
            if not anns:
                prev = None
                continue
            i = seen.get(key, 0)
            seen[key] = i + 1
            if i >= len(anns):
                prev = None
                continue
            node = _annotation_node(anns[i], nodes.get(r))
            gid = graph_of[key][i]
            if not node.graph and gid > 0:
                node = GraphNode(**{**node.__dict__, "graph": f"graph {gid}"})
            if node.op and node.shapes and node.group < 0:
                # One op's kernels (a GEMM and its split-K reduction) carry the op's one
                # annotation, in a row and under different names; the same name again is
                # the next call of an op alike.
                if prev is not None and prev[0] == anns[i] and key[1] not in prev[1]:
                    prev[1].add(key[1])
                else:
                    group += 1
                    prev = (anns[i], {key[1]})
                node = GraphNode(**{**node.__dict__, "group": group})
            else:
                prev = None
            nodes[r] = node
            count += 1 if anns[i] else 0
    return count


# -- 2. capture traces --------------------------------------------------------------------
def capture_trace_paths(trace_path: str) -> list[str]:
    """Capture traces in the capture folders beside a trace (not the trace itself)."""
    if not trace_path:
        return []
    here = Path(trace_path).resolve().parent
    out: list[str] = []
    for d in CAPTURE_DIRS:
        folder = here / d
        if folder.is_dir():
            out += sorted(str(p) for p in folder.iterdir() if p.name.endswith((".json", ".json.gz")) and p.is_file())
    me = str(Path(trace_path).resolve())
    return [p for p in out if p != me][:MAX_CAPTURE_FILES]


@dataclass(frozen=True)
class _Launch:
    kind: str  # K, M, S
    op: str
    shapes: dict[str, Any]
    module: str
    phase: Phase
    source: PySource | None
    op_row: int
    collective: dict[str, str] = field(default_factory=dict)  # its record_param_comms' fields


@dataclass(frozen=True)
class _Region:
    file: str
    name: str
    batch: int | None
    launches: tuple[_Launch, ...]

    @property
    def signature(self) -> str:
        return "".join(x.kind for x in self.launches)


def _regions_of(path: str, notes: list[str]) -> list[_Region]:
    from tracelens.errors import TraceInputError
    from tracelens.model import load_trace

    try:
        cap = load_trace(path)
    except TraceInputError as exc:
        notes.append(f"capture trace {os.path.basename(path)} not read: {exc}")
        return []
    host = cap.host
    if not len(host):
        return []
    kind = host["kind"].to_numpy()
    ts = host["ts"].to_numpy()
    end = host["end"].to_numpy()
    arrays = cap.arrays
    table = arrays.name_table
    api_kind = {}
    for i, n in enumerate(table):
        if n in CAPTURED_KERNEL_APIS:
            api_kind[i] = "K"
        elif n in CAPTURED_COPY_APIS:
            api_kind[i] = "M"
        elif n in CAPTURED_MEMSET_APIS:
            api_kind[i] = "S"
    is_call = (kind == int(Kind.RUNTIME)) | (kind == int(Kind.DRIVER))
    calls = np.flatnonzero(is_call & np.isin(arrays.name_codes, list(api_kind)))
    calls = calls[np.argsort(ts[calls], kind="stable")]
    ann = np.flatnonzero(kind == int(Kind.USER_ANNOTATION))
    spans = [(int(r), arrays.name(int(r))) for r in ann if _CAPTURE_RANGE.match(arrays.name(int(r)))]
    file_bs = _BS_FILE.search(os.path.basename(path))
    # What was captured lies between each cudaStreamBeginCapture and its EndCapture (a
    # `capture_<bs>_<mode>` range also holds the capture's set-up launches, run eagerly).
    begins = np.flatnonzero(is_call & np.isin(arrays.name_codes, _codes(table, BEGIN_CAPTURE_APIS)))
    ends = np.flatnonzero(is_call & np.isin(arrays.name_codes, _codes(table, END_CAPTURE_APIS)))
    begins, ends = begins[np.argsort(ts[begins])], ends[np.argsort(ts[ends])]
    windows = [(float(ts[b]), float(end[e])) for b, e in zip(begins.tolist(), ends.tolist(), strict=False)]
    if not windows:
        windows = [(float(ts[r]), float(end[r])) for r, _ in spans] or [(-np.inf, np.inf)]
    regions: list[_Region] = []
    backward = _Backward(path, cap)
    comms = {a.external_id: a for a in cap.comm_args if not a.on_gpu and a.external_id >= 0}
    for lo, hi in windows:
        around = [(r, n) for r, n in spans if ts[r] <= lo and end[r] >= hi]
        m = _CAPTURE_RANGE.match(around[-1][1]) if around else None
        name = around[-1][1] if around else os.path.basename(path)
        batch = int(m.group(1)) if m else (int(file_bs.group(1)) if file_bs else None)
        inside = calls[(ts[calls] >= lo) & (ts[calls] <= hi)]
        launches = tuple(_launch(cap, int(c), api_kind[int(arrays.name_codes[c])], backward, comms) for c in inside)
        if launches:
            regions.append(_Region(file=path, name=name, batch=batch, launches=launches))
    return regions


def _codes(table: list[str], names: frozenset[str]) -> list[int]:
    return [i for i, n in enumerate(table) if n in names]


def _launch(cap: TraceModel, row: int, kind: str, backward: _Backward, comms: dict[int, CommArgs]) -> _Launch:
    arrays = cap.arrays
    op_row = int(arrays.op[row])
    op = arrays.name(op_row) if op_row >= 0 else ""
    shapes = dict(cap.op_shapes(op_row)) if op_row >= 0 else {}
    module = ""
    phase: Phase = ""
    source = user_source(cap, row)
    collective: dict[str, str] = {}
    ext = cap.host["external_id"].to_numpy()
    for r in cap.host_chain(row):
        k = int(arrays.kind[r])
        name = arrays.name(r)
        if not collective and k == int(Kind.CPU_OP) and int(ext[r]) in comms:
            # A collective captured into the graph: its record_param_comms says what the
            # replayed NCCL kernel moves, as an annotation's collective fields would.
            collective = _comm_fields(comms[int(ext[r])])
        if not module and k == int(Kind.USER_ANNOTATION) and name.startswith(_MODULE_RANGE):
            module = name[len(_MODULE_RANGE) :]
        if k == int(Kind.USER_ANNOTATION) and name.startswith(_OPTIMIZER_RANGE) and not phase:
            phase = "optimizer"
        if k == int(Kind.CPU_OP) and name.startswith(_EVALUATE):
            phase = "backward"
            # The backward of a forward op: its module and source are the forward op's
            # (autograd's sequence number links them), as mark_kernels attributes it.
            fwd = backward.forward_of(cap, r)
            if fwd is not None:
                module = module or fwd[0]
                source = source or fwd[1]
    if not phase and module:
        phase = "forward"
    return _Launch(kind=kind, op=op, shapes=shapes, module=module, phase=phase, source=source, op_row=op_row,
                   collective=collective)  # fmt: skip


def _comm_fields(a: CommArgs) -> dict[str, str]:
    """A record_param_comms' fields under the names the annotations give them."""
    fields = {"Collective name": a.collective, "In msg nelems": a.in_nelems, "Out msg nelems": a.out_nelems,
              "Group size": a.group_size, "dtype": a.dtype, "Process Group Name": a.pg_name,
              "Process Group Description": a.pg_desc, "Process Group Ranks": a.pg_ranks}  # fmt: skip
    return {k: str(v) for k, v in fields.items() if v is not None}


class _Backward:
    """Autograd's link from a backward node (`autograd::engine::evaluate_function: XBackward0`)
    to the forward op that made it: both carry the same `Sequence number` (the loader keeps
    no such arg, so a capture trace's ops are read here from its JSON, once)."""

    def __init__(self, path: str, cap: TraceModel) -> None:
        self._by_event: dict[str, tuple[np.ndarray, list[tuple[str, PySource | None]]]] = {}
        self._built = False
        self._path = path
        self._cap = cap

    def _build(self) -> None:
        self._built = True
        from tracelens.output import read_trace_bytes

        try:
            top = msgspec.json.decode(read_trace_bytes(self._path), type=_SeqFile)
        except Exception:  # unreadable here: no backward modules, never an error
            return
        cap = self._cap
        meta = cap.meta
        shift = meta.origin_us - (meta.base_time_ns / 1000.0 if meta.base_time_ns else 0.0)
        ranges: dict[object, list[tuple[float, float, str]]] = {}
        fwd: list[tuple[int, object, float, str]] = []
        bwd: list[tuple[int, float, str]] = []
        for e in top.traceEvents or ():
            if e.cat == "user_annotation" and e.name.startswith(_MODULE_RANGE):
                ranges.setdefault(e.tid, []).append((e.ts, e.ts + e.dur, e.name[len(_MODULE_RANGE) :]))
            elif e.cat == "cpu_op" and e.args is not None and e.args.seq is not None:
                if e.name.startswith(_EVALUATE):
                    bwd.append((e.args.seq, e.ts, e.name))
                elif not e.args.fwd_thread:
                    fwd.append((e.args.seq, e.tid, e.ts, e.name))
        self._shift = shift
        # The JSON's times and the model's (shifted back) agree to well under a µs, not
        # to the last digit: events are matched by name and the nearest time.
        ops = np.flatnonzero(cap.arrays.kind == int(Kind.CPU_OP))
        host_ts = cap.host["ts"].to_numpy()[ops] + shift
        rows_of: dict[str, list[tuple[float, int]]] = {}
        for r, t in zip(ops.tolist(), host_ts.tolist(), strict=True):
            rows_of.setdefault(cap.arrays.name(r), []).append((t, r))
        by_seq: dict[int, tuple[str, PySource | None]] = {}
        for seq, tid, t, name in fwd:
            if seq in by_seq:
                continue  # the outermost op of the sequence number comes first
            inner = [x for x in ranges.get(tid, ()) if x[0] <= t <= x[1]]
            module = min(inner, key=lambda x: x[1] - x[0])[2] if inner else ""
            near = min(rows_of.get(name, ()), key=lambda x: abs(x[0] - t), default=None)
            row = near[1] if near is not None and abs(near[0] - t) < _SAME_EVENT_US else None
            by_seq[seq] = (module, user_source(cap, row) if row is not None else None)
        found: dict[str, list[tuple[float, tuple[str, PySource | None]]]] = {}
        for seq, t, name in bwd:
            if seq in by_seq:
                found.setdefault(name, []).append((t, by_seq[seq]))
        for name, items in found.items():
            items.sort(key=lambda x: x[0])
            self._by_event[name] = (np.array([x[0] for x in items]), [x[1] for x in items])

    def forward_of(self, cap: TraceModel, row: int) -> tuple[str, PySource | None] | None:
        if not self._built:
            self._build()
        if not self._by_event:
            return None
        got = self._by_event.get(cap.arrays.name(row))
        if got is None:
            return None
        times, values = got
        t = float(cap.host["ts"].to_numpy()[row]) + self._shift
        i = int(np.argmin(np.abs(times - t)))
        return values[i] if abs(float(times[i]) - t) < _SAME_EVENT_US else None


class _SeqArgs(msgspec.Struct, gc=False):
    seq: int | None = msgspec.field(name="Sequence number", default=None)
    # Set (non-zero) on backward ops: the id of the thread that ran their forward.
    fwd_thread: int | None = msgspec.field(name="Fwd thread id", default=None)


class _SeqEvent(msgspec.Struct, gc=False):
    cat: str = ""
    name: str = ""
    tid: int | str = 0
    ts: float = 0.0
    dur: float = 0.0
    args: _SeqArgs | None = None


class _SeqFile(msgspec.Struct, gc=False):
    traceEvents: list[_SeqEvent] | None = None


def _serving_batch(model: TraceModel, launch_row: int) -> int | None:
    """The batch a serving step around a graph launch ran (None when no step says)."""
    from tracelens.derive.serving import parse_step

    arrays = model.arrays
    for r in model.host_chain(launch_row):
        if int(arrays.kind[r]) == int(Kind.USER_ANNOTATION):
            step = parse_step(arrays.name(r))
            if step is not None:
                return step.graph_batch
    return None


def _apply_captures(
    model: TraceModel,
    replays: dict[int, np.ndarray],
    regions: list[_Region],
    nodes: dict[int, GraphNode],
    notes: list[str],
) -> int:
    kind = model.gpu["kind"].to_numpy()
    code = {int(Kind.KERNEL): "K", int(Kind.MEMCPY): "M", int(Kind.MEMSET): "S"}
    by_sig: dict[str, list[_Region]] = {}
    for reg in regions:
        by_sig.setdefault(reg.signature, []).append(reg)
    matched = 0
    unmatched = 0
    ambiguous = 0
    group = max((n.group for n in nodes.values()), default=-1) + 1
    for launch_row, rows in replays.items():
        sig = "".join(code.get(int(kind[r]), "?") for r in rows.tolist())
        cands = by_sig.get(sig, [])
        if len(cands) > 1:
            bs = _serving_batch(model, launch_row)
            if bs is not None:
                exact = [c for c in cands if c.batch == bs]
                bigger = sorted((c for c in cands if c.batch is not None and c.batch >= bs), key=lambda c: c.batch or 0)
                cands = exact or bigger[:1]
            if len({tuple(x.op for x in c.launches) for c in cands}) == 1 and len(cands) > 1:
                # Alike in ops too: any of them names the same ops, modules and sources;
                # only the shapes may differ, so they are left out.
                ambiguous += 1
                cands = [_without_shapes(cands[0])]
            elif len(cands) > 1:
                ambiguous += 1
                cands = []
        if not cands:
            unmatched += 1
            continue
        reg = cands[0]
        op_group: dict[int, int] = {}
        for r, x in zip(rows.tolist(), reg.launches, strict=True):
            if x.op_row not in op_group:
                op_group[x.op_row] = group
                group += 1
            base = nodes.get(r)
            nodes[r] = GraphNode(
                op=x.op,
                shapes=x.shapes,
                module=(base.module if base and base.module else x.module),
                phase=(base.phase if base and base.phase else x.phase),
                source=(base.source if base and base.source else x.source),
                collective=base.collective if base and base.collective else x.collective,
                graph=reg.name,
                group=op_group[x.op_row] if x.op_row >= 0 else -1,
                annotated=bool(base and base.annotated),
                captured=True,
            )
            matched += 1
    if unmatched:
        notes.append(
            f"{unmatched} of {len(replays)} graph replays match no captured region of the capture traces "
            "(another number or order of kernels)"
        )
    if ambiguous:
        notes.append(f"{ambiguous} graph replays match several captured graphs and no serving step said which")
    return matched


def _without_shapes(reg: _Region) -> _Region:
    return _Region(
        file=reg.file,
        name=reg.name,
        batch=None,
        launches=tuple(_Launch(x.kind, x.op, {}, x.module, x.phase, x.source, x.op_row) for x in reg.launches),
    )
