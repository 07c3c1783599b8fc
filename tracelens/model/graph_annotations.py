"""CUDA-graph kernel annotations baked into a trace (PyTorch 2.12+, prototype).

`torch.cuda.graph(g, enable_annotations=True)` with `torch.cuda.graph_annotations.
mark_kernels(...)` scopes records, per graph node, what the scope said: a dict such as
{"name": ..., "module_fqn": ..., "autograd_phase": "backward"} (mark_kernels tags the
backward of a scope's forward with `autograd_phase`), and for collectives captured into
the graph the fields Kineto attaches to an eager NCCL kernel ("Collective name",
"In msg nelems", "Out msg nelems", "Group size", "dtype", "Process Group Name",
"Process Group Description", "Process Group Ranks", "Seq"; torch/distributed/
_cuda_graph_annotations.py). `prof.export_chrome_trace(path, cuda_graph_annotations=
get_kernel_annotations(), graph_lanes=...)` (pytorch PR 194854; before it, the offline
torch.cuda._annotate_cuda_graph_trace) splices each node's dict into the `args` of every
replayed kernel, memcpy and memset whose `graph node id` is that node, values
stringified, and marks the file `"cudaGraphInlineAnnotated": true`. With
`graph_lanes="all"` the event also moves to the lane its annotation names (`stream` then
says the lane, `original_stream` the hardware stream).

Kineto's own args of a graphed event are `graph id` and `graph node id` (the node's
toolsId: the exec graph's id in the high 32 bits). This module reads those events' args
in a second, light pass over the file (the main loader keeps only the args analyzers
read), only for traces that replay graphs.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import msgspec

#: Kineto's own args of a GPU event: not part of an annotation.
KINETO_GPU_ARGS = frozenset(
    {"External id", "external id", "queued", "device", "context", "stream", "correlation", "registers per thread",
     "shared memory", "blocks per SM", "warps per SM", "grid", "block", "est. achieved occupancy %", "graph id",
     "graph node id", "original_stream", "annotated_stream", "bytes", "memory bandwidth (GB/s)", "kind",
     "priority"}
)  # fmt: skip
#: Categories of the events annotations are spliced into (the exporter's _WORK_CATEGORIES).
WORK_CATEGORIES = frozenset({"kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset"})
#: The key naming a region (mark_kernels("x") records {"name": "x"}; legacy pickles {"str": "x"}).
NAME_KEYS = ("module_fqn", "name", "str")
#: Where a Python launch stack may sit in an annotation (torch keeps stacks apart from
#: annotations, torch.cuda.graph_py_stacks; a pipeline that merges them in uses one of
#: these): "file:line:function" frames, one per line, innermost first.
STACK_KEYS = ("python_stack", "py_stack", "stack", "Python stack")


class _Event(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str = ""
    name: str = ""
    args: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)


class _File(msgspec.Struct, gc=False):
    traceEvents: list[_Event] | None = None
    cudaGraphInlineAnnotated: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)


@dataclass(frozen=True)
class GraphedEvent:
    """One replayed GPU event's graph ids and annotation (args beyond Kineto's own)."""

    name: str
    correlation: int
    graph_id: int
    node_id: int
    annotation: dict[str, str]


@dataclass(frozen=True)
class GraphArgs:
    inline_annotated: bool  # the file says its annotations were baked in at export
    events: tuple[GraphedEvent, ...]  # in file order


_file_decoder = msgspec.json.Decoder(_File)
_args_decoder = msgspec.json.Decoder(dict[str, Any])
_GRAPH_NODE = b'"graph node id"'


def _int(v: Any) -> int:
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        return v
    if isinstance(v, str) and v.strip().lstrip("-").isdigit():
        return int(v)
    return -1


#: How much of a trace's JSON is looked at for graph node ids before the whole file is
#: read again: torch writes `cudaGraphInlineAnnotated` before the events, and a trace that
#: replays graphs has graphed kernels all through it. 4 MB inflate in about 20 ms.
PROBE_BYTES = 4_000_000


def _may_have_graph_ids(path: str | os.PathLike[str]) -> bool:
    """Whether the start of the file names a graph node id (a cheap look before the
    second pass over the whole file, which costs its read and inflate again)."""
    import gzip

    try:
        with open(path, "rb") as raw:
            magic = raw.read(2)
        opener = gzip.open if magic == b"\x1f\x8b" else open
        with opener(path, "rb") as fh:
            head = fh.read(PROBE_BYTES)
    except (OSError, EOFError):
        return False
    return _GRAPH_NODE in head or b'"cudaGraphInlineAnnotated"' in head


def read_graph_args(path: str | os.PathLike[str]) -> GraphArgs:
    """The graphed GPU events of a trace file and their annotations (empty when none).

    Never raises for a trace the main loader read: a file it cannot decode here gives no
    events (the report then says the graph replays are not annotated)."""
    from tracelens.errors import TracelensError
    from tracelens.output import read_trace_bytes

    if not _may_have_graph_ids(path):
        return GraphArgs(False, ())
    try:
        data = read_trace_bytes(path)
    except (OSError, ValueError, TracelensError):
        return GraphArgs(False, ())
    if _GRAPH_NODE not in data:
        return GraphArgs(False, ())
    try:
        top = _file_decoder.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return GraphArgs(False, ())
    flag = bytes(top.cudaGraphInlineAnnotated).strip() == b"true"
    out: list[GraphedEvent] = []
    for e in top.traceEvents or ():
        if e.cat not in WORK_CATEGORIES or _GRAPH_NODE not in bytes(e.args):
            continue
        try:
            args = _args_decoder.decode(e.args)
        except (msgspec.DecodeError, msgspec.ValidationError):
            continue
        node = _int(args.get("graph node id"))
        if node <= 0:
            continue
        ann = {str(k): v if isinstance(v, str) else msgspec.json.encode(v).decode()
               for k, v in args.items() if k not in KINETO_GPU_ARGS}  # fmt: skip
        out.append(
            GraphedEvent(
                name=e.name,
                correlation=_int(args.get("correlation")),
                graph_id=_int(args.get("graph id")),
                node_id=node,
                annotation=ann,
            )
        )
    return GraphArgs(flag, tuple(out))
