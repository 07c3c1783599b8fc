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

from tracelens.derive.ledger import is_comm_op, merge_intervals, overlap, subtract
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
        """The innermost Python frame holding at least half of the time outside ops in
        these spans, and its time there ("", 0 without stacks)."""
        outside = self.python_outside_ops(lo, hi)
        total = float((outside[:, 1] - outside[:, 0]).sum()) if len(outside) else 0.0
        if total <= 0 or not self.frames:
            return "", 0.0
        by: dict[str, float] = {}
        ts = np.array([f[1] for f in self.frames])
        ends = np.array([f[2] for f in self.frames])
        inside = overlap(outside, ts, ends)
        for (label, _, _), t in zip(self.frames, inside.tolist(), strict=True):
            if t > 0 and not label.startswith("<built-in"):  # a builtin is a call, not where time goes
                by[label] = by.get(label, 0.0) + t
        # Outer frames (main, <module>) hold everything; the innermost that still holds
        # half the time is where it goes.
        held = [(t, label) for label, t in by.items() if t >= 0.5 * total]
        if not held:
            return "", 0.0
        t, label = min(held)
        return label, t


def thread_time(model: TraceModel, tid: int) -> ThreadTime:
    """The host-time split of one thread (computed once per thread and model)."""
    key = ("derive.host_time", int(tid))
    got = model.memo.get(key)
    if got is None:
        got = model.memo[key] = _build(model, int(tid))
    assert isinstance(got, ThreadTime)
    return got


def _build(model: TraceModel, tid: int) -> ThreadTime:
    host = model.host
    on = (host["tid"] == tid).to_numpy()
    kind = host["kind"].to_numpy()
    ts, end = host["ts"].to_numpy(), host["end"].to_numpy()
    annot = on & np.isin(kind, [int(Kind.USER_ANNOTATION), int(Kind.PYTHON), int(Kind.CPU_OP)])
    is_data = annot & name_matches(host["name"], lambda n: any(m in n for m in DATALOADER_MARKERS))
    data = merge_intervals(ts[is_data], end[is_data])
    is_op = on & (kind == int(Kind.CPU_OP)) & ~name_matches(host["name"], is_comm_op)
    ops = subtract(merge_intervals(ts[is_op], end[is_op]), data)
    py = np.flatnonzero(on & (kind == int(Kind.PYTHON)))
    names = model.arrays
    frames = [(names.name(int(r)), float(ts[r]), float(end[r])) for r in py.tolist()]
    return ThreadTime(tid=tid, data=data, ops=ops, frames=frames)
