"""Column pieces to typed frames: the host and GPU tables, ids and numbers kept in range,
names interned and capped, exact repeats of an event dropped.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from tracelens.domain import MAX_TRACE_NAME_CHARS, cut_middle
from tracelens.model.schema import EventArgs

if TYPE_CHECKING:
    # pandas is imported where a function builds frames, not here: the split load's child
    # starts before the report's imports (`start_split_early`) and reads its share without
    # pandas (0.1-0.15 s of import it would otherwise pay before decoding).
    import pandas as pd

_NUM_RE = re.compile(r"(-?\d+)\s*$")


_NO_ROW = -1


_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def _int_or_code(values: Sequence[int | str]) -> np.ndarray:
    """pid/tid columns: ints stay; "stream 7"/"25738" parse; other strings get negative
    codes so they never collide with real ids."""
    try:
        return np.array(values, dtype=np.int64)  # all ints: the common case
    except (TypeError, ValueError, OverflowError):
        pass
    out = np.empty(len(values), dtype=np.int64)
    codes: dict[str, int] = {}
    for i, v in enumerate(values):
        if isinstance(v, int) and _INT64_MIN < v < _INT64_MAX:
            out[i] = v
            continue
        text = str(v)
        m = _NUM_RE.search(text)
        number = int(m.group(1)) if m else None
        if number is not None and _INT64_MIN < number < _INT64_MAX:
            out[i] = number
        else:  # not a number, or too large for int64: a stable code of its own
            out[i] = codes.setdefault(text, -1000 - len(codes))
    return out


def _external_id(a: EventArgs | None) -> int | None:
    if a is None:
        return None
    return a.external_id if a.external_id is not None else a.external_id_2021


def _to_int(value: int | str | None) -> int | None:
    if value is None or isinstance(value, int):
        return value
    try:
        return int(value, 0)
    except ValueError:
        return None


#: Times (µs) beyond this, about 3,000 years, are not timestamps or durations of a run.
_MAX_TIME_US = 1e17


#: The columns that make an event itself: no two distinct events share kind (category),
#: name, thread or stream, start, duration, correlation and external id (none do in the
#: 17 public traces or sample_traces).
_HOST_IDENTITY = ["kind", "name", "pid", "tid", "ts", "dur", "external_id", "correlation"]


_GPU_IDENTITY = ["kind", "name", "device", "stream", "ts", "dur", "external_id", "correlation"]


def _drop_repeats(frame: pd.DataFrame, identity: list[str]) -> tuple[pd.DataFrame, int]:
    """Drop repeats of one event (a trace merged twice, a buffer flushed twice): they would
    count twice per kernel but once in GPU busy. Vectorised (a hash per row); the first
    of each is kept, and rows are renumbered so row links stay positions."""
    if len(frame) < 2:
        return frame, 0
    if not _may_repeat(frame, identity):
        return frame, 0
    repeat = frame.duplicated(subset=identity).to_numpy()
    n = int(repeat.sum())
    if not n:
        return frame, 0
    return frame[~repeat].reset_index(drop=True), n


def _may_repeat(frame: pd.DataFrame, identity: list[str]) -> bool:
    """False only when no two rows can be equal on `identity`: one int64 key per row, a
    function of those columns (equal rows, equal keys), has no repeat. A 64-bit key is
    hashed once, where `duplicated` factorizes eight columns (0.15 s vs 0.01 s on a
    600k-row host frame); a collision only sends the frame to that full check."""
    import pandas as pd

    key = np.zeros(len(frame), dtype=np.int64)
    for i, col in enumerate(identity):
        values = frame[col]
        if isinstance(values.dtype, pd.CategoricalDtype):
            part = values.cat.codes.to_numpy().astype(np.int64)
        else:
            arr = values.to_numpy()
            if arr.dtype.kind == "f":
                part = (arr + 0.0).view(np.int64)  # + 0.0: -0.0 and 0.0 are one value
            elif arr.dtype.kind in "iu":
                part = arr.astype(np.int64)
            else:
                return True  # not a numeric column: let `duplicated` decide
        key = (key * np.int64(1_000_003 + 2 * i)) ^ part
    return bool(pd.Index(key).has_duplicates)


def _capped_names(names: list[str]) -> tuple[list[str], int]:
    """The names, those over MAX_TRACE_NAME_CHARS cut (start and end kept), and how many were."""
    if not names or max(map(len, names)) <= MAX_TRACE_NAME_CHARS:  # C-speed check: the common case
        return names, 0
    long = [i for i, n in enumerate(names) if len(n) > MAX_TRACE_NAME_CHARS]
    for i in long:
        names[i] = cut_middle(names[i], MAX_TRACE_NAME_CHARS)
    return names, len(long)


def _opt_int(values: Sequence[int | None]) -> np.ndarray:
    try:
        return np.array([_NO_ROW if v is None else v for v in values], dtype=np.int64)
    except OverflowError:  # an id beyond int64: treat it as absent rather than fail
        return np.fromiter(
            (v if v is not None and _INT64_MIN < v < _INT64_MAX else _NO_ROW for v in values),
            dtype=np.int64,
            count=len(values),
        )


_HOST_PIECES = ("kind", "name", "pid", "tid", "ts", "dur", "external_id", "correlation", "call_stack", "shapes")


_GPU_PIECES = (
    "kind",
    "name",
    "pid",
    "tid",
    "ts",
    "dur",
    "device",
    "stream",
    "grid",
    "block",
    "correlation",
    "external_id",
    "registers",
    "shared_memory",
    "bytes",
    "sync_kind",
)


def _ints_or_raw(values: list[int | str]) -> np.ndarray | list[int | str]:
    """A pid/tid piece: an int64 array when every value is an int (the common case), else
    the values themselves, for `_int_or_code` over the whole column in `finish`."""
    try:
        return np.array(values, dtype=np.int64)
    except (TypeError, ValueError, OverflowError):
        return values


def _joined(pieces: list[Any]) -> Any:
    """One column from its batch pieces: arrays concatenated, lists joined; a pid/tid
    column with any raw piece stays a list."""
    if not pieces:
        return np.empty(0)
    if all(isinstance(p, np.ndarray) for p in pieces):
        return pieces[0] if len(pieces) == 1 else np.concatenate(pieces)
    if all(isinstance(p, list) and p.count(None) == len(p) for p in pieces):
        # A column of nothing (call stacks of a 2024+ trace, sync kinds without syncs):
        # filled at C speed rather than extended and converted row by row.
        return np.full(sum(map(len, pieces)), None, dtype=object)
    out: list[Any] = []
    for p in pieces:
        out.extend(p.tolist() if isinstance(p, np.ndarray) else p)
    return out


def _ids(col: Any) -> np.ndarray:
    return col if isinstance(col, np.ndarray) else _int_or_code(col)


def _categorical(codes: np.ndarray, table: dict[str, int]) -> pd.Categorical[str]:
    """The name column: the same categories (sorted) and codes as `pd.Categorical(names)`,
    made from the codes without hashing every row's string again."""
    import pandas as pd

    if not len(table):
        return pd.Categorical(list[str]())
    names = list(table)  # in code order
    order = sorted(range(len(names)), key=names.__getitem__)
    remap = np.empty(len(names), dtype=np.int64)
    remap[order] = np.arange(len(names))
    return pd.Categorical.from_codes(remap[codes], categories=pd.Index([names[i] for i in order]))


def _host_frame(h: dict[str, Any], names: pd.Categorical[str], origin: float) -> pd.DataFrame:
    import pandas as pd

    ts = h["ts"] - origin
    dur = h["dur"]
    return pd.DataFrame(
        {
            "kind": h["kind"].astype(np.int8),
            "name": names,
            "pid": _ids(h["pid"]),
            "tid": _ids(h["tid"]),
            "ts": ts,
            "dur": dur,
            "end": ts + dur,
            "external_id": h["external_id"].astype(np.int64),
            "correlation": h["correlation"].astype(np.int64),
            "call_stack": np.asarray(h["call_stack"], dtype=object),
            "shapes": np.asarray(h["shapes"], dtype=object),
        },
        copy=False,  # see _FRAME_COPY
    )


def _gpu_frame(g: dict[str, Any], names: pd.Categorical[str], origin: float) -> pd.DataFrame:
    import pandas as pd

    ts = g["ts"] - origin
    dur = g["dur"]
    pid = _ids(g["pid"])
    tid = _ids(g["tid"])
    n = len(ts)
    dev = g["device"].astype(np.int64)
    stream = g["stream"].astype(np.int64)
    grid = g["grid"].reshape(n, 3) if n else np.full((0, 3), -1, dtype=np.int64)
    block = g["block"].reshape(n, 3) if n else np.full((0, 3), -1, dtype=np.int64)
    return pd.DataFrame(
        {
            "kind": g["kind"].astype(np.int8),
            "name": names,
            "device": np.where(dev >= 0, dev, pid),
            "stream": np.where(stream >= 0, stream, tid),
            "ts": ts,
            "dur": dur,
            "end": ts + dur,
            "correlation": g["correlation"].astype(np.int64),
            "external_id": g["external_id"].astype(np.int64),
            "grid_x": grid[:, 0],
            "grid_y": grid[:, 1],
            "grid_z": grid[:, 2],
            "block_x": block[:, 0],
            "block_y": block[:, 1],
            "block_z": block[:, 2],
            "registers": g["registers"].astype(np.int64),
            "shared_memory": g["shared_memory"].astype(np.int64),
            "bytes": g["bytes"].astype(np.int64),
            "sync_kind": pd.Categorical(g["sync_kind"]),
        },
        copy=False,  # see _FRAME_COPY
    )


_NO_DIMS = (-1, -1, -1)


def _triples(values: list[list[int] | None]) -> np.ndarray:
    """grid/block lists -> (n, 3) int array, -1 where absent."""
    rows = [[*v, -1, -1, -1][:3] if v else _NO_DIMS for v in values]
    try:
        return np.array(rows, dtype=np.int64).reshape(len(values), 3)
    except OverflowError:
        clean = [[x if _INT64_MIN < x < _INT64_MAX else -1 for x in r] for r in rows]
        return np.array(clean, dtype=np.int64).reshape(len(values), 3)


def _int64_or_none(value: int | None) -> int | None:
    return value if value is not None and _INT64_MIN < value < _INT64_MAX else None
