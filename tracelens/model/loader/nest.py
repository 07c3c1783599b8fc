"""Nesting: each host event's parent, op, outermost op, annotation and Python frame on its
thread; the ProfilerSteps and each row's step; GPU activity linked to the call that
launched it.
"""

from __future__ import annotations

import re
from array import array
from itertools import pairwise
from typing import TYPE_CHECKING, Any

import numpy as np

from tracelens.model.loader.columns import _INT64_MAX, _NO_ROW
from tracelens.model.schema import Kind
from tracelens.model.trace import name_matches

if TYPE_CHECKING:
    # pandas is imported where a function builds frames, not here: the split load's child
    # starts before the report's imports (`start_split_early`) and reads its share without
    # pandas (0.1-0.15 s of import it would otherwise pay before decoding).
    import pandas as pd

_STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")


def _is_step_name(name: str) -> bool:
    return name.startswith("ProfilerStep#")


#: Children may end this much after their parent and still nest: 2021 traces round to
#: whole µs, and host timestamps of nested calls are taken by different clocks' reads.
_NEST_SLACK_US = 1.0


def _nest(host: pd.DataFrame) -> dict[str, np.ndarray]:
    """Parent/op/op_root/py_frame columns from one sweep per thread.

    Events on one thread form a forest by time containment; a stack sweep in start order
    (longer first on ties) finds each event's innermost enclosing event and its depth.
    The derived columns (innermost/outermost enclosing op, range, Python frame) are then
    carried down the forest one depth level at a time with numpy, not per row in Python:
    the sweep is the load's slowest loop, and it does only what needs a stack.
    """
    n = len(host)
    parent = op = op_root = range_root = range_inner = py = np.full(0, _NO_ROW, dtype=np.int64)
    if n:
        tid_key = host["pid"].to_numpy() * 1_000_003 + host["tid"].to_numpy()
        ts = host["ts"].to_numpy()
        end = host["end"].to_numpy()
        order = np.lexsort((-host["dur"].to_numpy(), ts, tid_key))
        # Per thread, in sweep order. A row pops what ended before it starts (t >= E) and
        # what it outlives (x - slack > E): for floats, a > E exactly when the largest
        # float below a is >= E, so the two tests are one, `key >= E`, with key computed
        # here for every row at once.
        sorted_keys = tid_key[order]
        cuts = np.flatnonzero(sorted_keys[1:] != sorted_keys[:-1]) + 1
        threads_at = np.concatenate(([0], cuts, [n])).tolist()
        ts_s = ts[order]
        end_s = end[order]
        key_s = np.maximum(ts_s, np.nextafter(end_s - _NEST_SLACK_US, -np.inf))
        # Rows as array.array (8 bytes each) rather than lists of int and float objects
        # (~36 each), which made this step the load's memory peak on stack-heavy traces;
        # indexing them costs about what a list does.
        order_l = array("q", order.astype(np.int64).tobytes())
        key_l = array("d", key_s.tobytes())
        end_l = array("d", end_s.tobytes())
        del ts_s, end_s, key_s, sorted_keys
        par_l = array("q", [_NO_ROW]) * n
        dep_l = array("q", [0]) * n
        # The open rows by depth (rows_at[d], innermost at depth d) and their ends beside
        # them, as preallocated lists indexed by the current depth: popping is `d -= 1`
        # and pushing two stores, not four list method calls per row (train50's sweep:
        # ~0.21 s -> ~0.15 s). Depth 0 is a sentinel (no row, an end nothing reaches), so
        # the loop tests nothing else.
        longest = max((hi - lo for lo, hi in pairwise(threads_at)), default=0)
        rows_at: list[int] = [_NO_ROW] * (longest + 1)
        ends_at: list[float] = [float("inf")] * (longest + 1)
        for lo, hi in pairwise(threads_at):
            d = 0
            for i, k, x in zip(order_l[lo:hi], key_l[lo:hi], end_l[lo:hi], strict=True):
                while k >= ends_at[d]:
                    d -= 1
                par_l[i] = rows_at[d]
                dep_l[i] = d
                d += 1
                rows_at[d] = i
                ends_at[d] = x
        parent = np.frombuffer(par_l, dtype=np.int64)  # shares the array's buffer: no copy
        depth = np.frombuffer(dep_l, dtype=np.int64)
        kinds = host["kind"].to_numpy()
        is_step = name_matches(host["name"], _is_step_name)
        rows = np.arange(n, dtype=np.int64)
        is_op = kinds == int(Kind.CPU_OP)
        is_range = is_op | ((kinds == int(Kind.USER_ANNOTATION)) & ~is_step)
        # Innermost qualifying row at or above each row, and outermost.
        op = np.where(is_op, rows, _NO_ROW)
        range_inner = np.where(is_range, rows, _NO_ROW)
        py = np.where(kinds == int(Kind.PYTHON), rows, _NO_ROW)
        op_root = op.copy()
        range_root = range_inner.copy()
        by_depth = np.argsort(depth, kind="stable")
        bounds = np.searchsorted(depth[by_depth], np.arange(1, int(depth.max(initial=0)) + 2))
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
