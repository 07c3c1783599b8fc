"""Nesting: each host event's parent, op, outermost op, annotation and Python frame on its
thread; the ProfilerSteps and each row's step; GPU activity linked to the call that
launched it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from tracelens.domain import PROFILER_STEP_PREFIX, PROFILER_STEP_RE
from tracelens.model.loader.columns import _INT64_MAX, _NO_ROW
from tracelens.model.schema import Kind
from tracelens.model.trace import name_matches

if TYPE_CHECKING:
    # pandas is imported where a function builds frames, not here: the split load's child
    # starts before the report's imports (`start_split_early`) and reads its share without
    # pandas (0.1-0.15 s of import it would otherwise pay before decoding).
    import pandas as pd

_STEP_RE = PROFILER_STEP_RE


def _is_step_name(name: str) -> bool:
    return name.startswith(PROFILER_STEP_PREFIX)


#: Children may end this much after their parent and still nest: 2021 traces round to
#: whole µs, and host timestamps of nested calls are taken by different clocks' reads.
_NEST_SLACK_US = 1.0


def _nest(host: pd.DataFrame) -> dict[str, np.ndarray]:
    """Parent/op/op_root/py_frame columns from one sweep per thread.

    Events on one thread form a forest by time containment: in start order (longer first
    on ties), each event's parent is its innermost enclosing event, the one a stack sweep
    would have on top (`_enclosing` finds them all in numpy), and its depth counts its
    ancestors. The derived columns (innermost/outermost enclosing op, range, Python
    frame) are then carried down the forest one depth level at a time with numpy.
    """
    n = len(host)
    parent = op = op_root = range_root = range_inner = py = np.full(0, _NO_ROW, dtype=np.int64)
    if n:
        tid_key = host["pid"].to_numpy() * 1_000_003 + host["tid"].to_numpy()
        ts = host["ts"].to_numpy()
        end = host["end"].to_numpy()
        order = _sweep_order(tid_key, ts, host["dur"].to_numpy())
        # Per thread, in sweep order. A row pops what ended before it starts (t >= E) and
        # what it outlives (x - slack > E): for floats, a > E exactly when the largest
        # float below a is >= E, so the two tests are one, `key >= E`, with key computed
        # here for every row at once.
        sorted_keys = tid_key[order]
        ts_s = ts[order]
        end_s = end[order]
        key_s = np.maximum(ts_s, np.nextafter(end_s - _NEST_SLACK_US, -np.inf))
        first = np.ones(n, dtype=bool)  # a thread's first row: nothing before it encloses it
        first[1:] = sorted_keys[1:] != sorted_keys[:-1]
        del sorted_keys, ts_s
        parent_s = _enclosing(key_s, end_s, first)
        del key_s, end_s, first
        parent = np.full(n, _NO_ROW, dtype=np.int64)
        parent[order] = np.where(parent_s >= 0, order[np.clip(parent_s, 0, None)], _NO_ROW)
        # Each sweep-order array freed once used: the load's memory peak is in here.
        del parent_s, order, tid_key
        depth = _depths(parent)
        kinds = host["kind"].to_numpy()
        is_step = name_matches(host["name"], _is_step_name)
        rows = np.arange(n, dtype=np.int64)
        is_op = kinds == int(Kind.CPU_OP)
        is_range = is_op | ((kinds == int(Kind.USER_ANNOTATION)) & ~is_step)
        # Innermost qualifying row at or above each row, and outermost.
        op = np.where(is_op, rows, _NO_ROW)
        range_inner = np.where(is_range, rows, _NO_ROW)
        py = np.where(kinds == int(Kind.PYTHON), rows, _NO_ROW)
        del rows, is_op, is_range, is_step
        op_root = op.copy()
        range_root = range_inner.copy()
        by_depth = np.argsort(depth, kind="stable")
        bounds = np.searchsorted(depth[by_depth], np.arange(1, int(depth.max(initial=0)) + 2))
        del depth
        for lo, hi in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
            level = by_depth[lo:hi]  # rows at one depth: their parents are all done
            up = parent[level]
            for inner in (op, range_inner, py):
                own = inner[level]
                inner[level] = np.where(own >= 0, own, inner[up])
            for outer in (op_root, range_root):
                above = outer[up]
                outer[level] = np.where(above >= 0, above, outer[level])
    return {
        "parent": parent,
        "op": op,
        "op_root": op_root,
        "range_root": range_root,
        "range_inner": range_inner,
        "py_frame": py,
    }


def _sweep_order(tid_key: np.ndarray, ts: np.ndarray, dur: np.ndarray) -> np.ndarray:
    """`np.lexsort((-dur, ts, tid_key))`: rows by thread, start, longer first, then row
    order. The rows come almost in start order, which a stable sort by start alone takes
    in about one pass (timsort's runs) where lexsort sorts three keys from scratch
    (large_generate's 967k rows: 0.22-0.42 s against 1.95-2.12 s, load average 8.7);
    only the rows that share a start are then put longer first, and the threads apart
    with a second stable sort."""
    order = np.argsort(ts, kind="stable")
    ts_o = ts[order]
    tied = np.flatnonzero(ts_o[1:] == ts_o[:-1])
    if len(tied):
        at = np.zeros(len(order), dtype=bool)  # positions in a run of equal starts
        at[tied] = True
        at[tied + 1] = True
        pos = np.flatnonzero(at)
        # A run: consecutive positions with one start (two runs with one start are apart).
        run = np.cumsum(np.concatenate(([True], (pos[1:] != pos[:-1] + 1) | (ts_o[pos[1:]] != ts_o[pos[:-1]]))))
        rows = order[pos]
        order[pos] = rows[np.lexsort((-dur[rows], run))]
    return order[np.argsort(tid_key[order], kind="stable")]


def _enclosing(key: np.ndarray, end: np.ndarray, first: np.ndarray) -> np.ndarray:
    """For rows in sweep order (each thread's rows together, by start, longer first), the
    position of each row's parent, -1 for none: what a stack sweep finds, where a row
    pops the open rows it does not fit in (`key >= end`, see `_nest`) and the top left is
    its parent.

    That top is the latest row j before i (same thread) with end[j] > key[i]: every row
    after it ended at or before key[i] (else it would be later), and a row the sweep
    popped before i was popped by a later one whose end is at least as large (a row's
    key is at most its end), so the latest row with a larger end is never a popped one.
    Found for all rows at once by pointer jumping: each row tests a candidate (first the
    row before it) and, when that candidate ends too early, moves to the candidate's own
    candidate, which skips only rows that end at or before the candidate's key and so
    before this row's. A run of n siblings takes about log2(n) rounds, a chain of closed
    ancestors one round each (the bench corpus: 28-48 rounds, 3.4-5.0 tests per row)."""
    n = len(key)
    cand = np.arange(-1, n - 1, dtype=np.int64)
    cand[first] = _NO_ROW
    parent = np.full(n, _NO_ROW, dtype=np.int64)
    todo = np.flatnonzero(cand >= 0)
    while len(todo):
        c = cand[todo]
        fits = end[c] > key[todo]
        parent[todo[fits]] = c[fits]
        todo, c = todo[~fits], c[~fits]
        nxt = cand[c]
        cand[todo] = nxt
        todo = todo[nxt >= 0]  # no candidate left: a root (parent -1)
    return parent


def _depths(parent: np.ndarray) -> np.ndarray:
    """How many ancestors each row has, by pointer doubling over `parent` (log2 of the
    deepest chain numpy passes)."""
    depth = (parent >= 0).astype(np.int64)
    up = parent.copy()
    live = np.flatnonzero(up >= 0)
    while len(live):
        a = up[live]
        depth[live] += depth[a]  # both read before either is written: one synchronous step
        up[live] = up[a]
        live = live[up[live] >= 0]
    return depth


def _with_columns(frame: pd.DataFrame, cols: dict[str, Any]) -> pd.DataFrame:
    """frame with `cols` added (or replaced), none of them copied: `frame[c] = array`
    copies each array, and fresh memory is slow here (six such copies took 0.25 s for
    2.4M rows on the development VM, 40 ms each, where the rebuild takes 1 ms)."""
    import pandas as pd

    return pd.DataFrame({**{c: frame[c] for c in frame.columns}, **cols}, copy=False)


def _steps(host: pd.DataFrame, notes: list[str] | None = None) -> pd.DataFrame:
    import pandas as pd

    kinds = host["kind"].to_numpy()
    names = host["name"]
    is_range = (kinds == Kind.CPU_OP) | (kinds == Kind.USER_ANNOTATION)
    cand = host[is_range & name_matches(names, _is_step_name)]
    rows = []
    empty = 0
    for name, ts, end in zip(cand["name"], cand["ts"], cand["end"], strict=True):
        m = _STEP_RE.match(str(name))
        if m and not end > ts:
            # A step of negative (clamped to zero) duration spans nothing: it cannot be a window.
            empty += 1
        elif m:
            number = int(m.group(1))
            if number < _INT64_MAX:
                rows.append((number, float(ts), float(end)))
    if empty and notes is not None:
        notes.append(f"{empty} ProfilerStep ranges with no positive duration were not used as steps")
    steps = pd.DataFrame(rows, columns=["step", "cpu_ts", "cpu_end"])
    return steps.sort_values("cpu_ts", kind="stable").drop_duplicates("step").reset_index(drop=True)


def _assign_steps(ts: np.ndarray, steps: pd.DataFrame) -> np.ndarray:
    out = np.full(len(ts), _NO_ROW, dtype=np.int64)
    if steps.empty or not len(ts):
        return out
    starts = steps["cpu_ts"].to_numpy()
    ends = steps["cpu_end"].to_numpy()
    idx = np.searchsorted(starts, ts, side="right") - 1
    ok = idx >= 0
    inside = ok.copy()
    inside[ok] = ts[ok] < ends[idx[ok]]
    out[inside] = steps["step"].to_numpy()[idx[inside]]
    return out


def _link_launches(host: pd.DataFrame, gpu: pd.DataFrame) -> dict[str, Any]:
    """runtime/driver call <-> GPU activity by correlation id (flows are not 1:1; see
    SOURCES.md #6), then the launch's step and ops: the kernel -> op link, made once here
    for every reader."""
    import pandas as pd

    launchers = host[((host["kind"] == Kind.RUNTIME) | (host["kind"] == Kind.DRIVER)) & (host["correlation"] >= 0)]
    corr_index = pd.Index(launchers["correlation"].to_numpy())
    launch_rows = launchers.index.to_numpy()
    if not corr_index.is_unique:
        keep = ~corr_index.duplicated(keep="first")
        corr_index = corr_index[keep]
        launch_rows = launch_rows[keep]
    pos = corr_index.get_indexer(gpu["correlation"].to_numpy())
    launch = np.where(pos >= 0, launch_rows[np.clip(pos, 0, None)] if len(launch_rows) else _NO_ROW, _NO_ROW)
    launch = np.where(gpu["correlation"].to_numpy() >= 0, launch, _NO_ROW)

    def at_launch(column: str) -> np.ndarray | int:
        """The launching call's `column` for each activity (-1 where none launched it)."""
        if not len(host):
            return _NO_ROW
        return np.where(launch >= 0, host[column].to_numpy()[np.clip(launch, 0, None)], _NO_ROW)

    return {
        "launch": launch.astype(np.int64),
        "step": at_launch("step"),
        "op": at_launch("op"),
        "op_root": at_launch("op_root"),
        "range_root": at_launch("range_root"),
    }


def _unlinked_note(gpu: pd.DataFrame) -> str:
    """What could not be linked: GPU activity whose `args.correlation` is missing or
    unusable (absent, no args, 2^63 or beyond) is still on the GPU timeline and in the
    ledger, but no launch, op or source line can be named for it (issue 29: such kernels
    vanished)."""
    kind = gpu["kind"].to_numpy()
    act = (kind == Kind.KERNEL) | (kind == Kind.MEMCPY) | (kind == Kind.MEMSET)
    bad = act & (gpu["correlation"].to_numpy() < 0)
    n = int(bad.sum())
    if not n:
        return ""
    ms = float(gpu["dur"].to_numpy()[bad].sum()) / 1e3
    return (
        f"{n:,} of {int(act.sum()):,} GPU kernels and copies ({ms:,.1f} ms) have no usable correlation id "
        "(missing, or beyond 64 bits): their GPU time is analysed, but the launch, op and source line behind "
        "them are unknown"
    )


def _gpu_step_windows(steps: pd.DataFrame, gpu: pd.DataFrame) -> pd.DataFrame:
    import pandas as pd

    steps = steps.copy()
    if steps.empty:
        steps["gpu_ts"] = pd.Series(dtype=np.float64)
        steps["gpu_end"] = pd.Series(dtype=np.float64)
        return steps
    act = gpu[gpu["kind"].isin([int(Kind.KERNEL), int(Kind.MEMCPY), int(Kind.MEMSET)]) & (gpu["step"] >= 0)]
    g = act.groupby("step").agg(gpu_ts=("ts", "min"), gpu_end=("end", "max"))
    return steps.merge(g, how="left", left_on="step", right_index=True)
