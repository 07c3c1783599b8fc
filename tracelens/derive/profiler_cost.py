"""What torch.profiler itself adds to the host, from what it recorded (issue 25).

The profiler costs host time on the thread that records each event: a Python frame
under `with_stack` (the tracer's call and return hooks), a torch op (RecordFunction's
start and end, its input shapes under `record_shapes`), and a CUDA runtime call (CUPTI's
callback and activity record). Where the step is host-bound that time is part of the
measured step, so a gain stated in profiled milliseconds overstates what the user sees
without the profiler: timm resnet50 65.6 ms profiled vs 40.4 ms unprofiled, PyG GIN 71.6
vs 28.4, the transformers Trainer 82.2 vs 43.1 (H200, workloads/programs/README.md on
branch programs).

Model: each recorded event costs a fixed host time on its thread, at its start; each
node of the dependency graph (derive/graph.py) keeps the share of its gap and of its own
time that is not the profiler's events. Replaying the graph with those shares (derive/
transforms/profiler.py) estimates the step without the profiler; a finding's gain is
then replayed on that graph too (tracelens/predict/).

A torch op's cost differs tenfold between programs (the median aten::view/empty/t/
expand lasts 0.6 µs in the PyG trace, 3.0 in the Trainer's, 5.5 in timm's: the
recording of inputs and stacks happens inside the op's span, and those ops do almost no
work of their own), so it is read from the trace: the median duration of its cheap
view-like ops. A Python frame costs US_PER_PYTHON_EVENT (PyG: 36,000 frames a step and
43 ms of profiler time; bench/profiler_overhead.py on branch comm measured 0.46 µs in a
one-frame loop on the H200 host, the floor), a runtime call US_PER_RUNTIME_EVENT (CUPTI's
callback). torch.profiler's own Python frames (prof.step() between steps: 60-70 µs a
step in the H200 pairs' traces, 135 µs in diff_graph_u_after's first) are its cost whole,
not per event; a CUDA-graph launch costs it the launch's time beyond
GRAPH_LAUNCH_UNPROFILED_US. Checked, step without the profiler replayed vs measured with
CUDA events (H200): timm +7%, PyG +13%, Trainer +23% (profiled: +65%, +152%, +91%; before
the profiler's frames and graph launches were modelled); the diff pairs' 42 sides
(bench/bench_replay.py --accuracy): 29 within 15% (24 within 10%), the host-bound ones -26% (graph
before, no cheap ops: the default op cost) to +70% (kv_u after), profiled +40% to +142%.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tracelens.derive.graph import HOST, DependencyGraph
from tracelens.derive.transforms import covered, merged
from tracelens.domain import GRAPH_LAUNCH_APIS, PROFILER_FRAMES
from tracelens.model.schema import Kind
from tracelens.model.trace import TraceModel, name_matches

#: Host µs the profiler adds per recorded event of each kind (see the module docstring);
#: the op cost is the trace's own where it has CHEAP_OPS_MIN cheap ops.
US_PER_PYTHON_EVENT = 1.0
US_PER_OP_EVENT = 2.0
US_PER_RUNTIME_EVENT = 3.0
#: A CUDA-graph launch (cudaGraphLaunch) takes this long on the host without the profiler:
#: CUDA 12.6+ launches a straight-line graph in constant time (NVIDIA, "Constant Time
#: Launch for Straight-Line CUDA Graphs and Other Performance Enhancements", 2024). Under
#: the profiler the call's time grows with the graph's kernels, CUPTI tracing each node at
#: the launch (H200: 0.74-0.86 µs a kernel in diff_graph_after's steady steps, 200
#: kernels; 1.37-1.45 µs in diff_graph_u_after's, 300): the rest of its time is the
#: profiler's. An assumption, not fitted: the unprofiled launch was not timed on its own.
GRAPH_LAUNCH_UNPROFILED_US = 3.0
#: Ops that do next to no work of their own: their median duration is the profiler's
#: per-op recording cost (an unprofiled aten::view takes well under 0.5 µs).
CHEAP_OPS = frozenset({"aten::empty", "aten::view", "aten::as_strided", "aten::empty_strided", "aten::t",
                       "aten::transpose", "aten::expand"})  # fmt: skip
CHEAP_OPS_MIN = 20
#: The per-op cost read from the trace stays within these bounds (µs).
OP_COST_BOUNDS = (0.3, 8.0)
#: The range of the estimate, as a scale of the per-event costs: the checks above miss
#: by -25% to +28% of the unprofiled step.
LOW_SCALE = 0.5
HIGH_SCALE = 1.5
#: The report speaks of the step without the profiler where the profiler's cost is at
#: least this share of the step, before or after the fix (smaller costs are within the
#: replay's own error).
MATTERS_SHARE = 0.05
#: A node keeps at least this share of its measured time (an estimate above the time
#: measured means the constants are too high for this program, not that it took none).
MIN_KEEP = 0.1

_RECORDED = (int(Kind.PYTHON), int(Kind.CPU_OP), int(Kind.RUNTIME), int(Kind.DRIVER))


@dataclass(frozen=True)
class ProfilerCost:
    """The profiler's recorded events on the graph's host threads and their estimated cost."""

    #: events a step on the graph's host threads: python frames, torch ops, runtime calls
    python_per_step: float
    ops_per_step: float
    runtime_per_step: float
    #: the estimated host time they cost a step (µs), nominal
    us_per_step: float
    #: the per-op cost used (µs): the trace's cheap ops' median, or US_PER_OP_EVENT
    us_per_op: float
    #: per graph node: the estimated profiler time inside its gap and inside its own time
    #: (nominal µs; zero on GPU nodes)
    in_gap: np.ndarray
    in_own: np.ndarray

    @property
    def stacks(self) -> bool:
        return self.python_per_step > 0

    def keep(self, g: DependencyGraph, scale: float) -> tuple[np.ndarray, np.ndarray]:
        """The share of each node's gap and own time left without the profiler, with the
        per-event costs times `scale`."""
        gap_keep = np.ones(g.n)
        dur_keep = np.ones(g.n)
        h = g.kind == HOST
        gp = np.where(g.gap > 0, g.gap, 1.0)
        own = g.end - g.ts
        op = np.where(own > 0, own, 1.0)
        gap_keep[h] = np.where(g.gap[h] > 0, np.maximum(1.0 - scale * self.in_gap[h] / gp[h], MIN_KEEP), 1.0)
        dur_keep[h] = np.where(own[h] > 0, np.maximum(1.0 - scale * self.in_own[h] / op[h], MIN_KEEP), 1.0)
        return gap_keep, dur_keep


def graph_kernels(model: TraceModel, rows: np.ndarray) -> np.ndarray:
    """For each host row of `rows`, the GPU activities it launched when it is a CUDA-graph
    launch (cudaGraphLaunch), else 0."""
    host, gpu = model.host, model.gpu
    out = np.zeros(len(rows))
    if not len(rows) or not len(gpu):
        return out
    # The mask over all rows, then the rows': no Series of the rows' names (a copy of
    # their codes), no float copy of the counts (both at the analysis' memory peak).
    is_graph = name_matches(host["name"], GRAPH_LAUNCH_APIS.__contains__)[rows]
    if not is_graph.any():
        return out
    launch = gpu["launch"].to_numpy()
    per_row = np.bincount(launch[launch >= 0], minlength=len(host))
    out[is_graph] = per_row[rows[is_graph]]
    return out


def op_cost_us(model: TraceModel) -> float:
    """The profiler's cost per torch op in this trace: the median duration of its cheap
    view-like ops (CHEAP_OPS), within OP_COST_BOUNDS; US_PER_OP_EVENT with too few."""
    host = model.host
    kind = host["kind"].to_numpy()
    ops = np.flatnonzero(kind == int(Kind.CPU_OP))
    if not len(ops):
        return US_PER_OP_EVENT
    cheap = ops[name_matches(host["name"].iloc[ops], CHEAP_OPS.__contains__)]
    if len(cheap) < CHEAP_OPS_MIN:
        return US_PER_OP_EVENT
    lo, hi = OP_COST_BOUNDS
    return float(np.clip(np.median(host["dur"].to_numpy(dtype=np.float64)[cheap]), lo, hi))


def profiler_cost(model: TraceModel, g: DependencyGraph, steps: int) -> ProfilerCost:
    """The profiler's events on the host threads of `g` between its first and last host
    node, and what they cost each node (events are placed at their start)."""
    host = model.host
    n = g.n
    in_gap = np.zeros(n)
    in_own = np.zeros(n)
    counts = {int(Kind.PYTHON): 0, int(Kind.CPU_OP): 0, int(Kind.RUNTIME): 0}
    total = 0.0
    prev = np.empty(n)
    prev[1:] = g.end[:-1]
    prev[g.chain_first[:-1]] = g.chain_init
    kind = host["kind"].to_numpy()
    recorded = np.isin(kind, _RECORDED)
    per_op = op_cost_us(model)
    if not recorded.any():
        return ProfilerCost(0.0, 0.0, 0.0, 0.0, per_op, in_gap, in_own)
    rows = np.flatnonzero(recorded)
    ts = host["ts"].to_numpy(dtype=np.float64)[rows]
    pid = host["pid"].to_numpy()[rows].astype(np.int64)
    tid_low = host["tid"].to_numpy()[rows].astype(np.int64) & 0xFFFFFFFF
    tid: np.ndarray | None = tid_low
    if int(pid.min()) >= -(2**31) and int(pid.max()) < 2**31:
        # One key per thread (pid, low 32 bits of tid), not two columns: memory peak.
        pid = pid * 2**32 + tid_low
        tid = None
    del tid_low
    k = kind[rows]
    cost = np.where(
        k == int(Kind.PYTHON), US_PER_PYTHON_EVENT, np.where(k == int(Kind.CPU_OP), per_op, US_PER_RUNTIME_EVENT)
    )
    # A graph launch costs the profiler its time beyond the unprofiled launch's.
    graphs = np.flatnonzero(graph_kernels(model, rows) > 1)
    g_dur = host["dur"].to_numpy(dtype=np.float64)[rows[graphs]]
    cost[graphs] = np.maximum(g_dur - GRAPH_LAUNCH_UNPROFILED_US, cost[graphs])
    del graphs, g_dur
    # torch.profiler's own Python frames (prof.step(): its bookkeeping, the step marks'
    # record_function) are the profiler's cost whole, not per event they recorded.
    own = np.flatnonzero(k == int(Kind.PYTHON))
    own = own[name_matches(host["name"], lambda n: any(m in n for m in PROFILER_FRAMES))[rows[own]]]
    own_end = host["end"].to_numpy(dtype=np.float64)[rows[own]]
    for c, key in enumerate(g.chain_key):
        if not g.chain_host[c]:
            continue
        lo, hi = int(g.chain_first[c]), int(g.chain_first[c + 1])
        if hi <= lo:
            continue
        t0, t1 = float(prev[lo]), float(g.end[lo:hi].max())
        p, t = int(key[0]), int(key[1]) & 0xFFFFFFFF
        if tid is not None:
            thread = (pid == p) & (tid == t)
        else:
            thread = pid == p * 2**32 + t if -(2**31) <= p < 2**31 else np.zeros(len(pid), dtype=bool)
        mine = thread & (ts >= t0) & (ts < t1)
        if not mine.any():
            continue
        frames = own[thread[own]]
        iv = merged(np.column_stack([np.clip(ts[frames], t0, t1), np.clip(own_end[thread[own]], t0, t1)]))
        if len(iv):
            # The events inside cost nothing more: the frames' whole time is counted below.
            at = np.searchsorted(iv[:, 0], ts, side="right") - 1
            inside = mine & (at >= 0) & (ts < iv[np.clip(at, 0, None), 1])
            cost = np.where(inside, 0.0, cost)
            total += float((iv[:, 1] - iv[:, 0]).sum())
        at_mine = np.flatnonzero(mine)
        order = at_mine[np.argsort(ts[at_mine], kind="stable")]
        del at_mine
        e_ts = ts[order]
        cum = np.concatenate([[0.0], np.cumsum(cost[order])])
        del order

        def upto(t: np.ndarray, e_ts: np.ndarray = e_ts, cum: np.ndarray = cum) -> np.ndarray:
            return cum[np.searchsorted(e_ts, t, side="left")]

        in_gap[lo:hi] = np.maximum(upto(g.ts[lo:hi]) - upto(prev[lo:hi]), 0.0)
        in_own[lo:hi] = np.maximum(upto(g.end[lo:hi]) - upto(g.ts[lo:hi]), 0.0)
        if len(iv):
            in_gap[lo:hi] += covered(iv, prev[lo:hi], g.ts[lo:hi])
            in_own[lo:hi] += covered(iv, g.ts[lo:hi], g.end[lo:hi])
        total += float(cum[-1])
        km = k[mine]
        counts[int(Kind.PYTHON)] += int((km == int(Kind.PYTHON)).sum())
        counts[int(Kind.CPU_OP)] += int((km == int(Kind.CPU_OP)).sum())
        counts[int(Kind.RUNTIME)] += int(((km == int(Kind.RUNTIME)) | (km == int(Kind.DRIVER))).sum())
    s = max(steps, 1)
    return ProfilerCost(
        counts[int(Kind.PYTHON)] / s,
        counts[int(Kind.CPU_OP)] / s,
        counts[int(Kind.RUNTIME)] / s,
        total / s,
        per_op,
        in_gap,
        in_own,
    )
