"""Whether a trace is down-sampled: events removed after the capture to shrink it.

HTA's sampled_rank-0 / sampled_rank-1 (a 128-rank DLRM job, shipped as test data) kept
only some kernels, their launch calls and the host ops above those launches. Nothing
in the file says so; the holes do:

- Ops that allocate their output (`aten::_to_copy`, `aten::clone`, `aten::zeros`, ...)
  dispatch `aten::empty*` for it, which the profiler records as their child: in every
  complete trace of the corpus 79-100% of them have it (17 public traces, 89 H200
  captures; HTA's control.json 79%, all others >= 92%); in the two sampled traces none
  of 87 and 85 do.
- Ops that launch nothing (views, `aten::empty`, `aten::detach`) are 14-95% of a
  complete trace's host ops wherever it has allocating ops; 0.2% in the sampled traces.
- The launches that remain are a fraction of a complete step's: an
  `AddmmBackward0` launches 3-6 kernels in control.json, 1-3 in sampled_rank-0.

So the GPU idle of such a trace holds kernels that ran and were dropped, and the host
time between the remaining ops holds ops that ran and were dropped: neither is the
program's. What stays true is each remaining event's own time (a collective kernel's
duration, say).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tracelens.model.schema import Kind
from tracelens.model.trace import TraceModel

#: Ops whose output is allocated by a dispatched `aten::empty*` child.
ALLOCATING_OPS = frozenset({
    "aten::_to_copy", "aten::zeros", "aten::zeros_like", "aten::ones", "aten::ones_like", "aten::full",
    "aten::full_like", "aten::clone", "aten::new_zeros", "aten::new_ones", "aten::new_full", "aten::empty_like",
    "aten::randn", "aten::rand", "aten::arange",
})  # fmt: skip
#: At least this many allocating ops before their children are judged (the sampled traces
#: have 85 and 87; a tiny synthetic loop may have 2).
MIN_ALLOCATING_OPS = 20
#: A trace is down-sampled when at most this share of its allocating ops has the
#: allocation child (sampled traces 0%, complete traces 79% or more)...
MAX_WITH_ALLOCATION = 0.10
#: ...and at most this share of its host ops launched nothing (sampled 0.2%; complete
#: traces with allocating ops 14% or more).
MAX_SILENT_OPS = 0.05


@dataclass(frozen=True)
class DownSampled:
    """What shows that events were removed from the trace."""

    host_ops: int
    silent_ops: int  # of them, ops with no GPU work under them
    allocating_ops: int
    with_allocation: int  # of them, with their aten::empty* child
    runtime_calls: int
    launches: int  # of them, calls that launched GPU work


def down_sampled(model: TraceModel) -> DownSampled | None:
    """The signs that events were removed from `model`'s trace, or None when it reads as
    complete (or is too small to tell)."""
    host = model.host
    if not len(host):
        return None
    kind = host["kind"].to_numpy()
    ops = np.flatnonzero(kind == int(Kind.CPU_OP))
    if len(ops) < MIN_ALLOCATING_OPS:
        return None
    arrays = model.arrays
    names = arrays.name_table
    codes = arrays.name_codes
    parent = host["parent"].to_numpy()
    is_alloc_name = np.array([n in ALLOCATING_OPS for n in names], dtype=bool)
    is_empty_name = np.array([n.startswith(("aten::empty", "aten::new_empty")) for n in names], dtype=bool)
    op_codes = codes[ops]
    alloc = ops[is_alloc_name[op_codes]]
    if len(alloc) < MIN_ALLOCATING_OPS:
        return None
    empties = ops[is_empty_name[op_codes]]
    has_child = np.zeros(len(host), dtype=bool)
    par = parent[empties]
    has_child[par[par >= 0]] = True
    with_alloc = int(has_child[alloc].sum())
    if with_alloc > MAX_WITH_ALLOCATION * len(alloc):
        return None
    # Ops with GPU work under them: the ancestors of every launch call.
    launch = model.gpu["launch"].to_numpy()
    launch = np.unique(launch[launch >= 0])
    busy = np.zeros(len(host), dtype=bool)
    plist = arrays.parent_list
    for r in launch.tolist():
        x = r
        while x >= 0 and not busy[x]:
            busy[x] = True
            x = plist[x]
    silent = int((~busy[ops]).sum())
    if silent > MAX_SILENT_OPS * len(ops):
        return None
    runtime = int(np.isin(kind, [int(Kind.RUNTIME), int(Kind.DRIVER)]).sum())
    return DownSampled(
        host_ops=len(ops), silent_ops=silent, allocating_ops=len(alloc), with_allocation=with_alloc,
        runtime_calls=runtime, launches=len(launch),
    )  # fmt: skip
