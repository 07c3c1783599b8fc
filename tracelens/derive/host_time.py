"""What one host thread did over given spans of time: torch ops, data loading, or Python
(and anything else) outside any op.

The job report asks it of each rank's launching thread between two collectives: what
the rank did before it arrived. A CPU-only rank has no GPU ledger to say why it is late;
its launching thread does (issue 33: rank 1 of ddp_cpu.py spends 20 ms a step in Python
outside any op before its forward). With `with_stack`, the Python frame that holds most
of the time outside ops is named too.

- data_loading: inside a DataLoader's `__next__` (the profiler's `enumerate(DataLoader)#
  ...__next__` annotation) on that thread, whatever runs inside it;
- host_ops: inside torch ops (CPU ops) on that thread, collectives' own ops excepted;
- host_python: the rest of the span: the thread ran Python or other code outside any
  torch op (or sat outside one: a trace without stacks cannot tell which).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tracelens.derive.intervals import merge_intervals, overlap, subtract
from tracelens.domain import PROFILER_STEP_PREFIX, is_collective_wait_op
from tracelens.model.schema import Kind
from tracelens.model.trace import TraceModel, name_matches

#: The host-side causes, in the order reports list them.
HOST_CAUSES = ("host_python", "data_loading", "host_ops")
#: The profiler's annotation of a DataLoader's next batch (torch.utils.data).
DATALOADER_MARKERS = ("enumerate(DataLoader)", "DataLoaderIter.__next__", "dataloader.py(", "_next_data")


@dataclass(frozen=True)
class ThreadTime:
    tid: int
    data: np.ndarray  # merged intervals inside a DataLoader's __next__
    ops: np.ndarray  # merged intervals inside torch ops, data loading taken out
    frames: list[tuple[str, float, float]]  # (frame label, ts, end) of Python frames on the thread

    def split(self, lo: np.ndarray, hi: np.ndarray) -> dict[str, np.ndarray]:
        """µs of each host cause inside each [lo[i], hi[i])."""
        span = np.clip(hi - lo, 0.0, None)
        data = overlap(self.data, lo, hi) if len(self.data) else np.zeros(len(lo))
        ops = overlap(self.ops, lo, hi) if len(self.ops) else np.zeros(len(lo))
        return {"data_loading": data, "host_ops": ops, "host_python": np.clip(span - data - ops, 0.0, None)}

    def python_outside_ops(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """The merged spans of [lo, hi) outside ops and data loading (host_python time)."""
        spans = merge_intervals(lo, np.maximum(hi, lo))
        return subtract(subtract(spans, self.data), self.ops) if len(spans) else spans

    def hot_frame(self, lo: np.ndarray, hi: np.ndarray) -> tuple[str, float]:
        """The Python frame where most of the time outside ops in these spans went, and
        that time ("", 0 without stacks). Only frames that begin and end inside a span
        count (the loop and main() around everything do not), builtins excepted (a
        builtin is a call the frame makes, not where its time goes)."""
        outside = self.python_outside_ops(lo, hi)
        if not len(outside) or not self.frames:
            return "", 0.0
        ts = np.array([f[1] for f in self.frames])
        ends = np.array([f[2] for f in self.frames])
        spans = merge_intervals(lo, np.maximum(hi, lo))
        k = np.searchsorted(spans[:, 0], ts, side="right") - 1
        within = (k >= 0) & (ends <= spans[np.clip(k, 0, None), 1])
        inside = overlap(outside, ts, ends)
        by: dict[str, float] = {}
        for i in np.flatnonzero(within & (inside > 0)).tolist():
            label = self.frames[i][0]
            if not label.startswith("<built-in"):
                by[label] = by.get(label, 0.0) + float(inside[i])
        if not by:
            return "", 0.0
        label = max(by, key=lambda lb: by[lb])
        return label, by[label]


def main_thread(model: TraceModel) -> int | None:
    """The thread that runs the training loop: the one with the ProfilerStep marks, else
    the one with the most torch ops outside autograd's backward (DDP on a GPU issues its
    all-reduces from autograd's device thread, while the loop's own work, the reason a
    rank is late, runs on the main thread), else None."""
    host = model.host
    kind = host["kind"].to_numpy()
    tids = host["tid"].to_numpy()
    is_step = name_matches(host["name"], lambda n: n.startswith(PROFILER_STEP_PREFIX))
    steps = (kind == int(Kind.USER_ANNOTATION)) & is_step
    found: int | None = None
    if steps.any():
        vals, counts = np.unique(tids[steps], return_counts=True)
        found = int(vals[np.argmax(counts)])
    else:
        ops = (kind == int(Kind.CPU_OP)) & ~name_matches(host["name"], lambda n: n.startswith("autograd::engine"))
        backward = np.unique(tids[(kind == int(Kind.CPU_OP)) & name_matches(
            host["name"], lambda n: n.startswith("autograd::engine"))])  # fmt: skip
        ok = ops & ~np.isin(tids, backward)
        pick = ok if ok.any() else ops
        if pick.any():
            vals, counts = np.unique(tids[pick], return_counts=True)
            found = int(vals[np.argmax(counts)])
    return found


def thread_time(model: TraceModel, tid: int) -> ThreadTime:
    """The host-time split of one thread (AnalysisContext.thread_time keeps it per thread)."""
    return _build(model, int(tid))


def _build(model: TraceModel, tid: int) -> ThreadTime:
    host = model.host
    on = (host["tid"] == tid).to_numpy()
    kind = host["kind"].to_numpy()
    ts, end = host["ts"].to_numpy(), host["end"].to_numpy()
    annot = on & np.isin(kind, [int(Kind.USER_ANNOTATION), int(Kind.PYTHON), int(Kind.CPU_OP)])
    is_data = annot & name_matches(host["name"], lambda n: any(m in n for m in DATALOADER_MARKERS))
    data = merge_intervals(ts[is_data], end[is_data])
    is_op = on & (kind == int(Kind.CPU_OP)) & ~name_matches(host["name"], is_collective_wait_op)
    ops = subtract(merge_intervals(ts[is_op], end[is_op]), data)
    py = np.flatnonzero(on & (kind == int(Kind.PYTHON)))
    names = model.arrays
    frames = [(names.name(int(r)), float(ts[r]), float(end[r])) for r in py.tolist()]
    return ThreadTime(tid=tid, data=data, ops=ops, frames=frames)
