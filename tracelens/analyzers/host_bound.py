"""host_bound: the GPU idles while the host does other work.

Question 1 of the diagnostic order, its second half. gpu_time marks a gap host_bound
when the next kernel's launch came long after the GPU drained. Here we ask what the
launching thread was doing during those gaps: which top-level ops (data loading,
collation, CPU tensor work, pageable copies) or plain Python, and name the code.
Pageable host-to-device copies get their own evidence: the host stages the data
through a bounce buffer and cannot run ahead while it does.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, cast

import numpy as np
import pandas as pd

from tracelens.analyzers.base import Category, Fact, Found, Place
from tracelens.derive.context import AnalysisContext
from tracelens.domain import DDP_BUFFER_OPS, SLEEP_FRAMES, WAIT_FUNCTIONS
from tracelens.model.schema import Kind
from tracelens.model.sources import PySource, is_machinery, parse_frame, user_sources
from tracelens.model.trace import TraceModel, name_matches

MAX_SITES = 8
#: Pageable copies are worth a line of advice when their host time is at least this
#: share of the host-bound idle (a few tiny copies are not the problem).
PAGEABLE_ADVICE_SHARE = 0.05
#: Many gaps this short are per-op host overhead (a few eager ops' worth of Python and
#: dispatch each), which CUDA graphs remove, rather than one slow piece of host work.
PER_OP_GAP_US = 300.0
PER_OP_MIN_GAPS = 100
#: What the host ran in a host-bound gap: an op, the time between the ops inside a
#: container range, a Python frame of the program, or nothing recorded at all.
#: Or the program's own sleep (time.sleep): neither slow host work nor data loading.
HostWorkKind = Literal["op", "between_ops", "python", "sleep", "untraced"]


@dataclass(frozen=True)
class HostWork:
    kind: HostWorkKind
    name: str  # the op, the container, or the Python function ("" when untraced)
    #: The op or annotation a Python frame runs inside, when the gap's time was between
    #: that container's ops (OWLv2: zoom() inside the pipeline DataLoader's __next__).
    inside: str = ""


@dataclass(frozen=True)
class HostBoundFacts:
    gaps: int
    median_gap_us: float
    after_sync_us: float  # of the idle, after a sync returned
    loader_us: float  # of the idle, in data loading ops
    pageable_copies: int  # host-to-device copies from pageable memory
    pageable_bytes: int
    pageable_host_us: float
    #: Of the idle after a sync, the part the host spent outside any op (Python working on
    #: the value it waited for); time in ops is that work, not "the result of a sync".
    after_sync_untraced_us: float = 0.0
    loader_workers: bool = False  # the loop waits for DataLoader worker processes
    training: bool = False  # the trace runs backward or an optimizer
    #: What the first place (an annotation) holds: (op name, or "" for the host time
    #: between its ops; µs), the most first.
    main_parts: tuple[tuple[str, float], ...] = ()
    #: Of the idle, the host asleep in time.sleep (light_idle: 50.1 ms of each 51 ms gap).
    sleep_us: float = 0.0
    #: Of the idle, DistributedDataParallel flattening and unflattening the model's buffers
    #: around their broadcast before each forward (nccl_data: 85.1 ms of 265.4 ms).
    ddp_buffer_us: float = 0.0


_DATALOADER_MARKERS = ("DataLoader", "dataloader", "_MultiProcessingDataLoaderIter", "__next__")


#: A range at least this many times longer than its overlap with a gap is context (a
#: `## forward ##` annotation around a whole pass), not what the host did in the gap: we
#: look inside it at the child ranges instead.
CONTAINER_FACTOR = 2.0
#: How deep to look inside containers.
MAX_DESCENT = 8


_Ranges = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]  # rows, ts, end, running max of end


class _RangeTree:
    """Ops and annotations (ProfilerStep excluded) as a per-thread tree of time ranges,
    for charging host-bound gaps to what the host was actually doing."""

    def __init__(self, model: TraceModel) -> None:
        host = model.host
        rows = np.arange(len(host))
        inner = host["range_inner"].to_numpy()
        parent = host["parent"].to_numpy()
        is_range = inner == rows
        rparent = np.where(parent >= 0, inner[np.clip(parent, 0, None)], -1)
        self.ts = host["ts"].to_numpy()
        self.end = host["end"].to_numpy()
        # Annotations are looked inside whenever they hold ops: the gap belongs to the
        # op that covers it (PARAM's clear_cache's aten::zeros and aten::mul), and the
        # annotation names the group (see _covering_annotation).
        self.is_annotation = host["kind"].to_numpy() == Kind.USER_ANNOTATION
        # numpy row sets, not DataFrames of the ranges (a copy of every column each).
        range_rows = np.flatnonzero(is_range)
        self.top: dict[tuple[int, int], _Ranges] = {}
        top = range_rows[rparent[range_rows] < 0]
        top = top[np.argsort(self.ts[top], kind="stable")]
        pid, tid = host["pid"].to_numpy()[top], host["tid"].to_numpy()[top]
        by_key = np.lexsort((tid, pid))  # stable: each thread's ranges stay in start order
        top, pid, tid = top[by_key], pid[by_key], tid[by_key]
        cuts = (np.flatnonzero((pid[1:] != pid[:-1]) | (tid[1:] != tid[:-1])) + 1).tolist()
        for lo, hi in zip([0, *cuts], [*cuts, len(top)], strict=True):
            if hi > lo:
                self.top[(int(pid[lo]), int(tid[lo]))] = self._ranges(top[lo:hi])
        child_rows = range_rows[rparent[range_rows] >= 0]
        child_parent = rparent[child_rows]
        order = np.lexsort((self.ts[child_rows], child_parent))
        self._c_rows = child_rows[order]
        c_par = child_parent[order]
        self._c_par = c_par
        self._children: dict[int, _Ranges] = {}

    def _ranges(self, rows: np.ndarray) -> _Ranges:
        te = self.end[rows]
        return rows, self.ts[rows], te, np.maximum.accumulate(te) if len(te) else te

    def children(self, row: int) -> _Ranges | None:
        got = self._children.get(row)
        if got is None:
            lo = int(np.searchsorted(self._c_par, row, side="left"))
            hi = int(np.searchsorted(self._c_par, row, side="right"))
            if hi <= lo:
                return None
            got = self._ranges(self._c_rows[lo:hi])
            self._children[row] = got
        return got

    def charge(
        self, ranges: _Ranges | None, start: float, end: float, out: dict[int | None, float], depth: int = 0
    ) -> float:
        """Add each range's overlap with [start, end) to `out`; returns the time covered."""
        if ranges is None or not len(ranges[0]) or end <= start:
            return 0.0
        rows, ts, te, te_max = ranges
        lo = int(te_max.searchsorted(start, side="right"))
        hi = int(ts.searchsorted(end, side="left"))
        covered = 0.0
        # The overlapping ranges as plain lists: numpy scalars cost ~0.1 us per read.
        for row, t0, t1 in zip(rows[lo:hi].tolist(), ts[lo:hi].tolist(), te[lo:hi].tolist(), strict=True):
            s0 = t0 if t0 > start else start
            e0 = t1 if t1 < end else end
            ov = e0 - s0
            if ov <= 0:
                continue
            if depth < MAX_DESCENT and ((t1 - t0) > CONTAINER_FACTOR * ov or self.is_annotation[row]):
                kids = self.children(row)
                inside = self.charge(kids, s0, e0, out, depth + 1) if kids is not None else 0.0
                if ov - inside > 0:
                    out[~row] += ov - inside  # ~row: time inside the container, between its ops
            else:
                out[row] += ov
            covered += ov
        return covered


def _is_pageable_upload(name: str) -> bool:
    """`Memcpy HtoD (Pageable -> Device)`: the host stages the data through a bounce
    buffer and returns only when it is copied."""
    return "HtoD" in name and "Pageable" in name


def _pageable_copies(model: TraceModel, w0: float, w1: float) -> tuple[int, float, float, int]:
    gpu = model.gpu
    copies = gpu[(gpu["kind"] == Kind.MEMCPY).to_numpy() & name_matches(gpu["name"], _is_pageable_upload)]
    copies = copies[(copies["ts"] >= w0) & (copies["ts"] <= w1)]
    launch = copies["launch"].to_numpy()
    host_dur = model.host["dur"].to_numpy()
    host_us = float(host_dur[launch[launch >= 0]].sum()) if len(launch) else 0.0
    nbytes = int(copies["bytes"].clip(lower=0).sum())
    return len(copies), float(copies["dur"].sum()), host_us, nbytes


def _into_frame(
    model: TraceModel,
    tree: _RangeTree, frames: _UserFrames, thread: tuple[int, int], start: float, end: float,
    here: dict[int | None, float], inside_of: dict[int, int],
) -> None:  # fmt: skip
    """The host time between a container's ops that a Python frame of the program inside
    that container covers is the frame's: the gap belongs to the innermost code running
    (issue 24 §3; OWLv2: scipy's zoom() inside the pipeline DataLoader's __next__, 618 ms
    of the 626 ms idle). `inside_of` learns the frame's container."""
    between = [(key, us) for key, us in here.items() if key is not None and key < 0 and us > 0]
    if not between:
        return
    frame = frames.enclosing(thread, start, end)
    if frame is None:
        return
    src = parse_frame(model.arrays.name(frame))
    if src is None or src.function in WAIT_FUNCTIONS:
        return  # a wait: the container names what it waits for
    f0, f1 = float(tree.ts[frame]), float(tree.end[frame])
    left = min(f1, end) - max(f0, start)
    # the innermost container first (the shortest that holds the frame)
    for key, us in sorted(between, key=lambda kv: float(tree.end[~kv[0]] - tree.ts[~kv[0]])):
        c = ~key
        if left <= 0 or not (f0 >= tree.ts[c] and f1 <= tree.end[c]):
            continue
        moved = min(us, left)
        here[key] -= moved
        here[frame] += moved
        left -= moved
        inside_of.setdefault(frame, c)


def _charge_gaps(model: TraceModel, hb: pd.DataFrame) -> tuple[dict[int | None, float], float, dict[int, int]]:
    """Each host-bound gap's idle charged to what the host was doing then: {range row (None
    outside any): µs}, of the idle after a sync the part outside any op, and the container
    of each Python frame charged from inside one."""
    host = model.host
    pid = host["pid"].to_numpy()
    tid = host["tid"].to_numpy()
    tree = _RangeTree(model)
    frames = _UserFrames(model)
    sleeps = _Sleeps(model)
    main_thread = _main_thread(model)

    charged: dict[int | None, float] = defaultdict(float)  # range row -> µs of idle
    inside_of: dict[int, int] = {}  # Python frame row -> the container it ran inside
    # Of the idle after a sync, the part the host spent outside any op (Python working on
    # the value it waited for); time in ops (a CPU aten::randn making the next batch) is
    # that work, not "the result of a sync".
    after_sync_untraced = 0.0
    kind_list = host["kind"].to_numpy()
    for start, end, lrow, srow in zip(
        hb["start"].to_numpy(), hb["end"].to_numpy(), hb["launch_row"].to_numpy(), hb["sync_row"].to_numpy(),
        strict=True,
    ):  # fmt: skip
        thread = (int(pid[lrow]), int(tid[lrow])) if lrow >= 0 else main_thread
        here: dict[int | None, float] = defaultdict(float)
        covered = tree.charge(tree.top.get(thread), float(start), float(end), here)
        if frames.by_thread:
            _into_frame(model, tree, frames, thread, float(start), float(end), here, inside_of)
        rest = (end - start) - covered
        asleep_rows: set[int] = set()
        if rest > 0 and sleeps.by_thread:
            # The host asleep in the program's own time.sleep (no op covers it).
            asleep: dict[int | None, float] = defaultdict(float)
            slept = sleeps.charge(thread, float(start), float(end), asleep)
            scale = min(rest / slept, 1.0) if slept > 0 else 0.0
            for row, us in asleep.items():
                here[row] += us * scale
                asleep_rows.add(int(row or 0))
            rest = 0.0 if scale < 1.0 else rest - slept
        if rest > 0:
            frame = frames.enclosing(thread, float(start), float(end))
            if frame is None and thread != main_thread:
                # Nothing recorded on the launching thread (autograd's backward thread
                # between its ops; a sampled trace): the gap lies where the main thread
                # was (`## backward ##`, an optimizer step), which names it better than
                # "outside any op" (HTA's sampled_rank-0: 221 ms of 332 ms).
                other: dict[int | None, float] = defaultdict(float)
                if tree.charge(tree.top.get(main_thread), float(start), float(end), other) > 0:
                    scale = rest / sum(other.values())
                    for row, us in other.items():
                        here[row] += us * scale
                    rest = 0.0
            if rest > 0:
                here[frame] += rest
        for row, us in here.items():
            charged[row] += us
            if srow >= 0 and (row is None or row < 0 or (kind_list[row] == Kind.PYTHON and row not in asleep_rows)):
                after_sync_untraced += us
    return charged, after_sync_untraced, inside_of


def analyze(ctx: AnalysisContext) -> list[Found[HostBoundFacts, HostWork]]:
    dev = ctx.ledger.primary
    if dev is None:
        return []
    model = ctx.model
    hb = dev.gaps_of("host_bound")
    total = float(hb["dur"].sum())
    if total <= 0:
        return []
    after_sync = float(hb.loc[hb["sync_row"] >= 0, "dur"].sum())
    charged, after_sync_untraced, inside_of = _charge_gaps(model, hb)

    grouped, parts_of, src_of, inside = _group_charged(model, charged, inside_of)
    ranked = sorted(grouped.items(), key=lambda kv: kv[1][0], reverse=True)
    places = tuple(
        Place(
            count=int(n),  # distinct op calls (or gaps, for untraced time) charged
            time_us=us,
            facts=HostWork(kind, name, inside.get((kind, name, label), "")),
            ops=(name,) if kind == "op" else (),
            source=src_of[(kind, name, label)],
        )
        for (kind, name, label), (us, n) in ranked[:MAX_SITES]
    )

    n_copies, copy_gpu_us, copy_host_us, copy_bytes = _pageable_copies(model, dev.window_start, dev.window_end)
    loader_us = sum(
        us
        for key, (us, _) in grouped.items()
        if key[0] != "untraced" and any(m in key[1] or m in inside.get(key, "") for m in _DATALOADER_MARKERS)
    )
    untraced_us = grouped.get(("untraced", "", ""), [0.0, 0.0])[0]
    sleep_us = sum(us for (kind, _, _), (us, _) in grouped.items() if kind == "sleep")
    median_gap = float(hb["dur"].median())
    loader_names = [
        n
        for key in grouped
        if key[0] != "untraced"
        for n in (key[1], inside.get(key, ""))
        if any(m in n for m in _DATALOADER_MARKERS)
    ]
    main = places[0] if places else None
    main_parts = parts_of.get(main.facts.name, {}) if main is not None and main.facts.kind == "op" else {}
    facts = HostBoundFacts(
        gaps=len(hb),
        median_gap_us=median_gap,
        after_sync_us=after_sync,
        loader_us=loader_us,
        pageable_copies=n_copies,
        pageable_bytes=copy_bytes,
        pageable_host_us=copy_host_us,
        after_sync_untraced_us=after_sync_untraced,
        loader_workers=any("_MultiProcessingDataLoaderIter" in n for n in loader_names),
        training=_is_training(model),
        main_parts=tuple(sorted(main_parts.items(), key=lambda kv: -kv[1])),
        sleep_us=sleep_us,
        ddp_buffer_us=sum(
            us
            for row, us in charged.items()
            if row is not None and model.arrays.name(~row if row < 0 else row) in DDP_BUFFER_OPS
        ),
    )
    return [
        Found(
            category=Category.HOST_BOUND,
            time_us=total,
            expected_gain_us=total,
            facts=facts,
            evidence=(
                Fact("host_bound_us", total, "us"),
                Fact("gaps", len(hb), "count"),
                Fact("median_gap_us", median_gap, "us", total=False),
                Fact("longest_gap_us", float(hb["dur"].max()), "us", total=False),
                Fact("after_sync_us", after_sync, "us"),
                Fact("data_loading_us", loader_us, "us"),
                Fact("untraced_us", untraced_us, "us"),
                Fact("pageable_copies", n_copies, "count"),
                Fact("pageable_bytes", copy_bytes, "bytes"),
                Fact("pageable_host_us", copy_host_us, "us"),
                Fact("pageable_gpu_us", copy_gpu_us, "us"),
                *((Fact("sleep_us", sleep_us, "us"),) if sleep_us > 0 else ()),
            ),
            places=places,
            sources=tuple(dict.fromkeys(p.source for p in places if p.source is not None)),
            device=dev.device,
        )
    ]


def _group_charged(
    model: TraceModel, charged: dict[int | None, float], inside_of: dict[int, int]
) -> tuple[
    dict[tuple[HostWorkKind, str, str], list[float]],
    dict[str, dict[str, float]],
    dict[tuple[HostWorkKind, str, str], PySource | None],
    dict[tuple[HostWorkKind, str, str], str],
]:
    """The charged ranges grouped by what the host ran + source, under the annotation that
    covers them (not a step mark): "host work in [param|clear_cache]", its ops as parts;
    each group's [µs, calls], the annotations' parts, each group's source, and the
    container a Python frame's group ran inside."""
    step_starts = set(model.steps["cpu_ts"].to_numpy().tolist()) if len(model.steps) else set()
    grouped: dict[tuple[HostWorkKind, str, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
    parts_of: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))  # "": between its ops
    src_of: dict[tuple[HostWorkKind, str, str], PySource | None] = {}
    inside: dict[tuple[HostWorkKind, str, str], str] = {}
    # Plain ints: a numpy int8 compared with an IntEnum member costs ~3 µs (60k rows
    # charged on a 50-step training trace), a list item compared with an int ~0.03 µs.
    kinds = model.host["kind"].to_numpy().tolist()
    python_kind = int(Kind.PYTHON)
    annotation_kind = int(Kind.USER_ANNOTATION)
    # The starts as numpy: read only at annotation rows (few), a list of every row's
    # float was 9.6 MB on large_compile, at the analysis' memory peak.
    host_ts = model.host["ts"].to_numpy()
    parent = model.arrays.parent_list
    source_of = _sources_of_charged(model, charged, kinds)
    for row, us in charged.items():
        key: tuple[HostWorkKind, str, str]
        if row is None:
            key = ("untraced", "", "")
            src = None
        elif row < 0:
            inner = ~row
            src = source_of[inner]
            key = ("between_ops", model.arrays.name(inner), src.label if src else "")
            if kinds[inner] == annotation_kind and float(host_ts[inner]) not in step_starts:
                # time inside an annotation between its ops is the annotation's too
                key = ("op", model.arrays.name(inner), "")
                parts_of[model.arrays.name(inner)][""] += us
                src = src_of.get(key) or src
        elif kinds[row] == python_kind and model.arrays.name(row) in SLEEP_FRAMES:
            src = source_of[row]
            key = ("sleep", src.function if src else "", src.label if src else "")
        elif kinds[row] == python_kind:
            src = parse_frame(model.arrays.name(row), line_is_def=True)
            key = ("python", src.function, src.label) if src else ("untraced", "", "")
            if src and row in inside_of:
                inside.setdefault(key, model.arrays.name(inside_of[row]))
        else:
            src = source_of[row]
            key = ("op", model.arrays.name(row), src.label if src else "")
            ann = _covering_annotation(parent, kinds, host_ts, int(row), step_starts)
            if ann is not None:
                parts_of[model.arrays.name(ann)][model.arrays.name(row)] += us
                key = ("op", model.arrays.name(ann), "")
                src = src_of.get(key) or src
        grouped[key][0] += us
        grouped[key][1] += 1
        src_of.setdefault(key, src)
    return grouped, parts_of, src_of, inside


def _sources_of_charged(
    model: TraceModel, charged: dict[int | None, float], kinds: list[int]
) -> dict[int, PySource | None]:
    """`user_source` of every row `_group_charged` asks about (the rows of ops and sleeps
    charged, the annotation or op a between-ops range lies inside), worked out at once by
    `user_sources` (the same answers): one refinement per row was 0.11 of large_compile's
    1.0 s of analysis."""
    python_kind = int(Kind.PYTHON)
    rows = [
        ~row if row < 0 else row
        for row in charged
        if row is not None and (row < 0 or kinds[row] != python_kind or model.arrays.name(row) in SLEEP_FRAMES)
    ]
    return dict(zip(rows, user_sources(model, rows), strict=True))


def _is_training(model: TraceModel) -> bool:
    """Whether the trace runs backward or an optimizer (a training loop, not inference)."""
    names = model.arrays.name_table
    return any(n.startswith(("autograd::engine", "Optimizer.step", "Optimizer#")) for n in names)


def _covering_annotation(
    parent: Sequence[int], kinds: list[int], ts: np.ndarray, row: int, step_starts: set[float]
) -> int | None:
    """The innermost annotation (record_function range, the DataLoader's __next__, PARAM's
    ranges) enclosing an op row, other than a step mark, or None. Walks the row's
    ancestors as `TraceModel.host_chain(row)[1:]` lists them (at most 511), on plain lists:
    a numpy int8 compared with an IntEnum member costs ~3 µs, and this runs once per
    charged op row (large_compile: 0.26 of its 1.0 s of analysis)."""
    annotation_kind = int(Kind.USER_ANNOTATION)
    r = parent[row]
    depth = 1
    while r >= 0 and depth < 512:
        if kinds[r] == annotation_kind and float(ts[r]) not in step_starts:
            return int(r)
        r = parent[r]
        depth += 1
    return None


_FRAME_FILE = re.compile(r"^(.*?)\(\d+\): ")
#: Frames per block of the per-thread index `enclosing` prunes with: small enough that a
#: gap reads few frames besides the ones it overlaps, large enough that the blocks' end
#: maxima are few to scan.
_FRAME_BLOCK = 64


def _is_user_frame(name: str) -> bool:
    m = _FRAME_FILE.match(name)
    return not is_machinery(m.group(1) if m else "<")


class _UserFrames:
    """The program's own Python frames (not torch, stdlib or builtins) per thread, to
    name the code the host ran in a gap that no op covers."""

    def __init__(self, model: TraceModel) -> None:
        host = model.host
        self.by_thread: dict[tuple[int, int], tuple[np.ndarray, ...]] = {}
        is_py = model.arrays.kind == Kind.PYTHON
        if not is_py.any():
            return
        # numpy columns, not a DataFrame of the frames (a copy of every column: 40 MB on
        # a 200 MB trace); user frames decided once per distinct frame name.
        rows = np.flatnonzero(is_py & name_matches(host["name"], _is_user_frame))
        pid = host["pid"].to_numpy()[rows]
        tid = host["tid"].to_numpy()[rows]
        by_key = np.lexsort((tid, pid))  # stable: each thread's frames stay in row order
        pid, tid, rows = pid[by_key], tid[by_key], rows[by_key]
        cuts = np.flatnonzero((pid[1:] != pid[:-1]) | (tid[1:] != tid[:-1])) + 1
        ts_all, end_all = host["ts"].to_numpy(), host["end"].to_numpy()
        for lo, hi in zip([0, *cuts.tolist()], [*cuts.tolist(), len(rows)], strict=True):
            if hi <= lo:
                continue
            thread_rows = rows[lo:hi]
            ts, te = ts_all[thread_rows], end_all[thread_rows]
            # By start time, with each block's latest end: a gap's candidates are the
            # frames that start before it ends and end after it starts, found without
            # reading every frame of the thread (that made this quadratic).
            order = np.argsort(ts, kind="stable")
            te_sorted = te[order]
            starts = np.arange(0, len(order), _FRAME_BLOCK)
            block_end = np.maximum.reduceat(te_sorted, starts)
            self.by_thread[(int(pid[lo]), int(tid[lo]))] = (thread_rows, ts, te, order, ts[order], te_sorted, block_end)

    def enclosing(self, thread: tuple[int, int], start: float, end: float) -> int | None:
        """The shortest user frame covering at least half of [start, end) (the first in
        row order among equals)."""
        entry = self.by_thread.get(thread)
        if entry is None:
            return None
        rows, ts, te, order, ts_sorted, te_sorted, block_end = entry
        if end > start:
            # A frame covering half the gap overlaps it: it starts at or before `end` and
            # ends at or after `start`. Only those are read.
            hi = int(np.searchsorted(ts_sorted, end, side="right"))
            full = hi // _FRAME_BLOCK
            blocks = np.flatnonzero(block_end[:full] >= start)
            parts = [np.arange(b * _FRAME_BLOCK, (b + 1) * _FRAME_BLOCK) for b in blocks.tolist()]
            parts.append(np.arange(full * _FRAME_BLOCK, hi))
            idx = np.concatenate(parts)
            idx = order[idx[te_sorted[idx] >= start]]
            if not len(idx):
                return None
            idx.sort()  # row order, for the tie-break
            rows, ts, te = rows[idx], ts[idx], te[idx]
        ov = np.minimum(te, end) - np.maximum(ts, start)
        ok = ov >= 0.5 * (end - start)
        if not ok.any():
            return None
        dur = np.where(ok, te - ts, np.inf)
        return int(rows[int(np.argmin(dur))])


class _Sleeps:
    """The program's time.sleep calls per thread (Python frames), to name a gap the host
    spent asleep: the program's own wait, not host work to speed up."""

    def __init__(self, model: TraceModel) -> None:
        host = model.host
        self.by_thread: dict[tuple[int, int], tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        is_py = model.arrays.kind == Kind.PYTHON
        if not is_py.any():
            return
        rows = np.flatnonzero(is_py & name_matches(host["name"], SLEEP_FRAMES.__contains__))
        pid, tid = host["pid"].to_numpy()[rows], host["tid"].to_numpy()[rows]
        ts, end = host["ts"].to_numpy(), host["end"].to_numpy()
        for key in {(int(a), int(b)) for a, b in zip(pid.tolist(), tid.tolist(), strict=True)}:
            sel = rows[(pid == key[0]) & (tid == key[1])]
            sel = sel[np.argsort(ts[sel], kind="stable")]
            self.by_thread[key] = (sel, ts[sel], end[sel])

    def charge(self, thread: tuple[int, int], start: float, end: float, out: dict[int | None, float]) -> float:
        """Add each sleep's overlap with [start, end) to `out`; returns the time asleep."""
        entry = self.by_thread.get(thread)
        if entry is None or end <= start:
            return 0.0
        rows, ts, te = entry
        # One thread's sleeps do not nest: their ends are in start order too.
        lo = int(te.searchsorted(start, side="right"))
        hi = int(ts.searchsorted(end, side="left"))
        asleep = 0.0
        for row, t0, t1 in zip(rows[lo:hi].tolist(), ts[lo:hi].tolist(), te[lo:hi].tolist(), strict=True):
            ov = min(t1, end) - max(t0, start)
            if ov > 0:
                out[row] += ov
                asleep += ov
        return asleep


def _main_thread(model: TraceModel) -> tuple[int, int]:
    """The thread that issued most launches (charged for gaps whose launch is unknown)."""
    host = model.host
    calls = host[host["kind"] == Kind.RUNTIME]
    if calls.empty:
        return (-1, -1)
    pid, tid = cast(tuple[int, int], calls.groupby(["pid", "tid"]).size().idxmax())
    return (int(pid), int(tid))
