"""The one loader: any Kineto/Chrome trace that torch.profiler exports -> TraceModel.

Speed comes from the design, not from tuning: msgspec decodes the bytes straight into
small typed records (skipping every field nobody reads), columns are built with one
list comprehension each, and joins are integer indexing. No per-event pandas work.

The input file is only ever read.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import gc
import os
import pickle
import re
import signal
import stat
import sys
import time
import zlib
from array import array
from collections.abc import Callable, Sequence
from itertools import compress, pairwise
from operator import attrgetter, not_
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import msgspec
import numpy as np

from tracelens.domain import MAX_TRACE_NAME_CHARS, cut_middle
from tracelens.errors import TraceInputError
from tracelens.model.counter_metrics import COUNTERS_KEY
from tracelens.model.schema import (
    CATEGORY_KINDS,
    GPU_KINDS,
    HOST_KINDS,
    CounterProbe,
    CounterTraceFile,
    EventArgs,
    Kind,
    LooseEvent,
    OpShapes,
    RawEvent,
    TraceFile,
)
from tracelens.model.stream import EventStream, Inflow, Misaligned, Share, Unstreamable, read_upto
from tracelens.model.trace import DeviceInfo, TraceMeta, TraceModel, name_matches

if TYPE_CHECKING:
    # pandas is imported where a function builds frames, not here: the split load's child
    # starts before the report's imports (`start_split_early`) and reads its share without
    # pandas (0.1-0.15 s of import it would otherwise pay before decoding).
    import pandas as pd

ProgressFn = Callable[[str], None]

_STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")
_NUM_RE = re.compile(r"(-?\d+)\s*$")
_NO_ROW = -1
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


#: Lone surrogates: undecodable bytes of a path (Python's surrogateescape) or a repaired
#: `\ud800` escape. No UTF-8 output can carry them.
_SURROGATE = re.compile("[\ud800-\udfff]")


def _printable(path: str | os.PathLike[str]) -> str:
    """A path as text any UTF-8 stream can carry (undecodable bytes become U+FFFD)."""
    return _SURROGATE.sub("\ufffd", os.fspath(path))


def _is_step_name(name: str) -> bool:
    return name.startswith("ProfilerStep#")


#: Children may end this much after their parent and still nest: 2021 traces round to
#: whole µs, and host timestamps of nested calls are taken by different clocks' reads.
_NEST_SLACK_US = 1.0

_file_decoder = msgspec.json.Decoder(TraceFile)
_array_decoder = msgspec.json.Decoder(list[RawEvent])
_event_decoder = msgspec.json.Decoder(RawEvent)
_counter_decoder = msgspec.json.Decoder(CounterTraceFile)
_counter_batch_decoder = msgspec.json.Decoder(list[CounterProbe])
_loose_event_decoder = msgspec.json.Decoder(LooseEvent)
_raw_top_decoder = msgspec.json.Decoder(dict[str, msgspec.Raw])
_raw_array_decoder = msgspec.json.Decoder(list[msgspec.Raw])


class _Progress:
    """Reports loader stages to `report`, but only once the load has taken over a second,
    so small traces load silently."""

    QUIET_FOR_S = 1.0

    def __init__(self, report: ProgressFn | None) -> None:
        self._report = report
        self._t0 = time.perf_counter()

    def __call__(self, stage: str) -> None:
        elapsed = time.perf_counter() - self._t0
        if self._report is not None and elapsed > self.QUIET_FOR_S:
            self._report(f"{stage} ({elapsed:.1f} s)")


# --------------------------------------------------------------------------------------
# bytes
# --------------------------------------------------------------------------------------
#: Decompressed JSON may be this many times the gzip file before it is refused as a
#: decompression bomb. Real traces compress 10-31x (shared/real_traces and sample_traces:
#: 9.9x to 30.3x); gzip's ceiling is about 1,030x (a file of one repeated byte).
MAX_GZIP_RATIO = 200
#: ...but small files may always expand this far (a tiny trace of repeated events
#: compresses better than a big one).
GZIP_FLOOR_BYTES = 256 * 2**20
#: No trace is decoded beyond this: the loader needs several times the JSON size in
#: memory, so a larger file could only end in an out-of-memory kill. The largest public
#: trace we test on is 56 MB of JSON.
MAX_JSON_BYTES = 4 * 2**30
_GZIP_MAGIC = b"\x1f\x8b"
_BOM = b"\xef\xbb\xbf"


def _open_trace(path: str | os.PathLike[str]) -> tuple[BinaryIO, str]:
    """Open a trace file for reading, or raise TraceInputError.

    Only regular files are read (a FIFO, /dev/zero or a terminal would block or never
    end), and never more than a trace can be: see MAX_GZIP_RATIO and MAX_JSON_BYTES.
    """
    p = Path(path)
    shown = _printable(p)
    try:
        st = os.stat(p)
    except FileNotFoundError:
        raise TraceInputError(f"{shown}: no such file") from None
    except (OSError, ValueError) as exc:
        raise TraceInputError(f"{shown}: cannot read ({getattr(exc, 'strerror', None) or exc})") from exc
    if stat.S_ISDIR(st.st_mode):
        raise TraceInputError(f"{shown}: is a directory, not a trace file")
    if not stat.S_ISREG(st.st_mode):
        raise TraceInputError(f"{shown}: not a regular file (a pipe, device or socket); save the trace to a file first")
    if st.st_size > MAX_JSON_BYTES:
        raise TraceInputError(f"{shown}: {st.st_size:,} bytes is larger than tracelens reads ({MAX_JSON_BYTES:,})")
    try:
        # O_NONBLOCK: should the file have become a FIFO since the stat, open() must not
        # wait for a writer. Readers read one byte past the size allowed, so a file
        # growing under us is noticed rather than read forever.
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        return os.fdopen(fd, "rb"), shown
    except OSError as exc:
        raise TraceInputError(f"{shown}: cannot read ({exc.strerror or exc})") from exc


def read_trace_bytes(path: str | os.PathLike[str], notes: list[str] | None = None) -> tuple[bytes, int]:
    """Return the decompressed JSON bytes and the file's size. Raises TraceInputError."""
    fh, shown = _open_trace(path)
    try:
        with fh:
            data = read_upto(fh, MAX_JSON_BYTES + 1)
    except OSError as exc:
        raise TraceInputError(f"{shown}: cannot read ({exc.strerror or exc})") from exc
    size = len(data)
    if size > MAX_JSON_BYTES:
        raise TraceInputError(f"{shown}: larger than tracelens reads ({MAX_JSON_BYTES:,} bytes)")
    if data[:3] == _BOM:  # a UTF-8 byte-order mark some editors add
        data = data[3:]
    if data[:2] == _GZIP_MAGIC:
        data = _gunzip(data, shown, notes if notes is not None else [])
        if data[:3] == _BOM:  # a BOM inside the gzip stream
            data = data[3:]
    if not _first_byte(data):
        raise TraceInputError(f"{shown}: file is empty")
    return data, size


def _gunzip(data: bytes, shown: str, notes: list[str]) -> bytes:
    """Decompress every gzip member, at most MAX_GZIP_RATIO times the file (GZIP_FLOOR_BYTES
    for any file, MAX_JSON_BYTES in all). Whitespace or NUL padding after the last member
    (an editor's newline, a block-padded copy) is ignored and noted; anything else there
    is corruption."""
    limit = min(MAX_JSON_BYTES, max(GZIP_FLOOR_BYTES, MAX_GZIP_RATIO * len(data)))
    out: list[bytes] = []
    total = 0
    rest = data
    while True:
        inflater = zlib.decompressobj(wbits=31)
        try:
            chunk = inflater.decompress(rest, limit - total + 1)
            while chunk:
                total += len(chunk)
                out.append(chunk)
                if total > limit:
                    raise TraceInputError(
                        f"{shown}: decompresses to more than {limit:,} bytes ({MAX_GZIP_RATIO}x the file):"
                        " not a trace (a decompression bomb?)"
                    )
                chunk = inflater.decompress(inflater.unconsumed_tail, limit - total + 1)
        except zlib.error as exc:
            raise TraceInputError(f"{shown}: truncated or corrupt gzip file ({exc})") from exc
        if not inflater.eof:
            raise TraceInputError(f"{shown}: truncated or corrupt gzip file (the compressed stream ends early)")
        rest = inflater.unused_data
        if rest[:2] == _GZIP_MAGIC:
            continue  # another member (concatenated gzip files are one stream)
        if rest.strip(b" \t\r\n\x00"):
            raise TraceInputError(f"{shown}: truncated or corrupt gzip file (unexpected bytes after the gzip stream)")
        if rest:
            notes.append(f"{len(rest)} bytes of padding after the gzip stream were ignored")
        return b"".join(out)


def _first_byte(data: bytes) -> bytes:
    """The first non-whitespace byte, without copying a 50 MB buffer to find it."""
    m = re.match(rb"\s*", data)
    end = m.end() if m else 0
    return data[end : end + 1]


# --------------------------------------------------------------------------------------
# decoding
# --------------------------------------------------------------------------------------
def _decode(
    data: bytes, name: str, notes: list[str], repaired: bool = False
) -> tuple[list[RawEvent], dict[str, msgspec.Raw]]:
    """One typed pass over the whole file. Raises TraceInputError."""
    is_array = _first_byte(data) == b"["  # Chrome's "JSON Array Format": bare events
    # Decoding creates ~10^5 small objects; the cyclic GC would rescan them repeatedly
    # (it doubled decode time on the 54 MB HTA trace) and none of them form cycles.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        try:
            if is_array:
                return _array_decoder.decode(data), {}
            top = _file_decoder.decode(data)
        except msgspec.ValidationError as exc:
            if "Expected `object`" in str(exc) and "at `$`" in str(exc):
                raise TraceInputError(f"{name}: not a Chrome/Kineto trace (top level is not an object)") from exc
            return _decode_loose(data, name, is_array, notes)
        except msgspec.DecodeError as exc:
            # Text other tools read (a lone surrogate escape, stray non-UTF-8 bytes) is
            # repaired once; anything else is a file that is not JSON.
            fixed = None if repaired else _repair_text(data, notes)
            if fixed is not None:
                return _decode(fixed, name, notes, repaired=True)
            raise _json_error(name, exc) from exc
        except RecursionError as exc:
            raise _nesting_error(name) from exc
    finally:
        if gc_was_enabled:
            gc.enable()
    if top.traceEvents is None:
        raise TraceInputError(f"{name}: no 'traceEvents' list: not a Chrome/Kineto trace")
    meta = {key: raw for key in TraceFile.__struct_fields__ if key != "traceEvents" and len(raw := getattr(top, key))}
    return top.traceEvents, meta


def _json_error(name: str, exc: msgspec.DecodeError) -> TraceInputError:
    msg = str(exc)
    if "truncated" in msg.lower():
        return TraceInputError(f"{name}: JSON is truncated ({msg})")
    return TraceInputError(f"{name}: not a JSON trace ({msg})")


def _nesting_error(name: str) -> TraceInputError:
    # msgspec recurses once per level; about 1,000 levels exhaust Python's stack limit.
    # No trace nests deeper than args inside an event (5 levels).
    return TraceInputError(f"{name}: JSON nested too deeply to be a trace")


#: A `\uD800`-`\uDFFF` escape, as a valid high+low pair (kept) or alone (repaired).
_SURROGATE_ESCAPE = re.compile(
    rb"\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}|\\u[dD][89a-fA-F][0-9a-fA-F]{2}"
)
_SURROGATE_PAIR_LEN = 12


def _repair_text(data: bytes, notes: list[str]) -> bytes | None:
    """Repair what JSON decoders differ on, or None if there is nothing to repair: lone
    UTF-16 surrogate escapes (Python's json writes them for unpaired surrogates in
    names) become U+FFFD escapes; bytes that are not UTF-8 become U+FFFD."""
    count = 0

    def lone(m: re.Match[bytes]) -> bytes:
        nonlocal count
        if len(m.group(0)) == _SURROGATE_PAIR_LEN:
            return m.group(0)
        count += 1
        return rb"\ufffd"

    fixed = _SURROGATE_ESCAPE.sub(lone, data) if b"\\u" in data else data
    if count:
        notes.append(f"{count} lone UTF-16 surrogate escapes in strings were replaced by U+FFFD")
    try:
        fixed.decode("utf-8")
    except UnicodeDecodeError:
        fixed = fixed.decode("utf-8", "replace").encode("utf-8")
        notes.append("bytes that are not UTF-8 were replaced by U+FFFD")
        count += 1
    return fixed if count else None


def _clean_args(args: dict[str, object] | None) -> EventArgs | None:
    """Fallback conversion of generically-decoded args: keep values that fit EventArgs."""
    if not args:
        return None
    kept: dict[str, object] = {}
    for key, value in args.items():
        kept[key] = value
    try:
        return msgspec.convert(kept, EventArgs, strict=False)
    except (msgspec.ValidationError, RecursionError):
        pass
    # Drop keys one at a time until conversion succeeds (rare: odd vintages only).
    for key in list(kept):
        trial = {k: v for k, v in kept.items() if k != key}
        try:
            return msgspec.convert(trial, EventArgs, strict=False)
        except (msgspec.ValidationError, RecursionError):
            continue
    return None


def _as_float(value: object) -> float:
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):  # OverflowError: an int beyond float range
        return float("nan")


def _decode_loose(
    data: bytes, name: str, is_array: bool, notes: list[str]
) -> tuple[list[RawEvent], dict[str, msgspec.Raw]]:
    """The tolerant path: a value of an unexpected type somewhere (e.g. AMD's string
    `bytes`, a `"ph": null`, a `ts` out of float range). Each event is decoded on its own:
    typed if it can be, else generically with its args cleaned, else skipped and counted."""
    try:
        if is_array:
            raws = _raw_array_decoder.decode(data)
            top: dict[str, msgspec.Raw] = {}
        else:
            top = _raw_top_decoder.decode(data)
            events_raw = top.pop("traceEvents", None)
            if events_raw is None:
                raise TraceInputError(f"{name}: no 'traceEvents' list: not a Chrome/Kineto trace")
            raws = _raw_array_decoder.decode(events_raw)
    except msgspec.ValidationError as exc:
        raise TraceInputError(f"{name}: traceEvents is not a list of trace events ({exc})") from exc
    except msgspec.DecodeError as exc:
        raise _json_error(name, exc) from exc
    except RecursionError as exc:
        raise _nesting_error(name) from exc
    out: list[RawEvent] = []
    coerced = skipped = 0
    for raw in raws:
        try:
            out.append(_event_decoder.decode(raw))
            continue
        except (msgspec.ValidationError, msgspec.DecodeError, RecursionError):
            pass
        try:
            ev = _loose_event_decoder.decode(raw)
        except (msgspec.ValidationError, msgspec.DecodeError, RecursionError):
            skipped += 1  # not an event at all: a number, a list, an out-of-range ts
            continue
        if not isinstance(ev.ph, str):
            skipped += 1  # "ph": null: what the event is cannot be known
            continue
        coerced += 1
        pid: int | str = ev.pid if isinstance(ev.pid, int | str) else str(ev.pid)
        tid: int | str = ev.tid if isinstance(ev.tid, int | str) else str(ev.tid)
        out.append(
            RawEvent(
                ph=ev.ph,
                name=_as_text(ev.name),
                cat=_as_text(ev.cat),
                pid=pid,
                tid=tid,
                ts=_as_float(ev.ts),
                dur=_as_float(ev.dur),
                args=_clean_args(ev.args if isinstance(ev.args, dict) else None),
            )
        )
    if coerced:
        notes.append(f"{coerced} events had fields of unexpected types; they were coerced or dropped")
    if skipped:
        notes.append(f"{skipped} entries of traceEvents were not readable events and were skipped")
    return out, top


def _as_text(value: object) -> str:
    """A name or category of another type: numbers keep their digits, the rest is empty."""
    if isinstance(value, str):
        return value
    return str(value) if isinstance(value, int | float) and not isinstance(value, bool) else ""


_COUNTER_COLUMNS = ["name", "series", "ts", "value"]


def _counter_rows(probes: list[CounterProbe]) -> list[tuple[str, str, float, float]]:
    rows: list[tuple[str, str, float, float]] = []
    for probe in probes:
        if probe.ph != "C" or not len(probe.args):
            continue
        try:
            series = msgspec.json.decode(probe.args, type=dict[str, float])
        except msgspec.ValidationError:
            continue
        for key, value in series.items():
            rows.append((probe.name, key, probe.ts, value))
    return rows


def _decode_counters(data: bytes) -> pd.DataFrame:
    """Counter events ("ph": "C"), decoded in a second pass only when present."""
    import pandas as pd

    probes = _counter_decoder.decode(data).traceEvents or []
    return pd.DataFrame(_counter_rows(probes), columns=_COUNTER_COLUMNS)


# --------------------------------------------------------------------------------------
# columns
# --------------------------------------------------------------------------------------
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


def _devices(top: dict[str, msgspec.Raw], vendor_hint: str) -> tuple[DeviceInfo, ...]:
    raw = top.get("deviceProperties")
    if raw is None:
        return ()
    try:
        props = msgspec.json.decode(raw)
    except (msgspec.MsgspecError, RecursionError):
        return ()
    out: list[DeviceInfo] = []
    if not isinstance(props, list):
        return ()
    for i, p in enumerate(props):
        if not isinstance(p, dict):
            continue
        p = _sane_properties(p)
        name = str(p.get("name", "") or "")
        is_amd = "AMD" in name.upper() or "maxSharedMemoryPerMultiProcessor" in p
        vendor = "amd" if is_amd else ("nvidia" if name or "computeMajor" in p else vendor_hint)
        major, minor = p.get("computeMajor"), p.get("computeMinor")
        cc = (int(major), int(minor)) if isinstance(major, int) and isinstance(minor, int) else None
        sms = p.get("numSms")
        mem = p.get("totalGlobalMem")
        out.append(
            DeviceInfo(
                index=_index_or(p.get("id"), i),
                name=name or "(unnamed GPU)",
                vendor=vendor,
                compute_capability=cc,
                num_sms=int(sms) if isinstance(sms, int | float) else None,
                total_memory_bytes=int(mem) if isinstance(mem, int | float) else None,
                properties=p,
            )
        )
    return tuple(out)


#: A device property (SM count, memory, registers, clocks) at or beyond this is no
#: measurement: 2**53 bytes is 8 PiB, and larger ints lose precision as floats.
_MAX_PROPERTY = 2**53


def _sane_properties(p: dict[str, Any]) -> dict[str, Any]:
    """deviceProperties without absurd numbers (negative, NaN, 10**30 SMs): those are
    dropped, so every analyzer sees the property as unknown rather than divides by it."""
    # Compare before any float(): an int of 400 digits does not convert.
    return {
        k: v for k, v in p.items() if isinstance(v, bool) or not isinstance(v, int | float) or 0 <= v < _MAX_PROPERTY
    }


_VERSION_KEYS = (
    "cuda_runtime_version",
    "cuda_driver_version",
    "cupti_version",
    "hip_runtime_version",
    "hip_driver_version",
    "roctracer_version",
    "torch_version",
    "tracelens_capture",
)


#: The largest `tracelens_counters` value decoded (a few thousand kernels' counters are ~2 MB).
MAX_COUNTERS_BYTES = 64 * 2**20


def _small_metadata(top: dict[str, msgspec.Raw]) -> dict[str, Any]:
    meta: dict[str, Any] = {}
    for key, raw in top.items():
        if key in ("traceEvents", "deviceProperties"):
            continue
        # e.g. a harness's full pip list is not worth decoding; counters are read whole
        if len(raw) > (MAX_COUNTERS_BYTES if key == COUNTERS_KEY else 200_000):
            meta[key] = f"<{len(raw)} bytes omitted>"
            continue
        try:
            meta[key] = msgspec.json.decode(raw)
        except (msgspec.MsgspecError, RecursionError):
            continue
    return meta


def _versions(meta: dict[str, Any]) -> dict[str, str]:
    out = {k: str(meta[k]) for k in _VERSION_KEYS if k in meta and not isinstance(meta[k], dict)}
    harness = meta.get("metadata")
    if isinstance(harness, dict):
        for key in ("torch_version", "torch", "pytorch_version"):
            if key in harness and isinstance(harness[key], str | int | float):
                out.setdefault("torch_version", str(harness[key]))
    capture = meta.get("tracelens")
    if isinstance(capture, dict):
        for key, value in capture.items():
            if isinstance(value, str | int | float) and "version" in key:
                out.setdefault(key, str(value))
    return out


# --------------------------------------------------------------------------------------
# the loader
# --------------------------------------------------------------------------------------
def load_trace(path: str | os.PathLike[str], progress: ProgressFn | None = None) -> TraceModel:
    """Load one Kineto trace (.json or .json.gz) of any vintage.

    Streams the file (see tracelens.model.stream): decompressed in chunks, the event
    array decoded a batch at a time, columns kept. A file the stream cannot place is read
    whole instead; both routes build the model with the same code, so they give the
    same model. Raises TraceInputError for anything that is not a readable trace.
    """
    tick = _Progress(progress)
    name = _printable(path)
    # The cyclic GC would rescan the ~10^5 small objects of every batch repeatedly (it
    # doubled decode time on the 54 MB HTA trace); none of them form cycles.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        from tracelens.model.counters import with_kernel_counters

        try:
            return with_kernel_counters(_load_streaming(path, name, tick), path)
        except Unstreamable:
            pass
        return with_kernel_counters(_load_whole(path, name, tick), path)
    finally:
        if gc_was_enabled:
            gc.enable()


def _load_streaming(path: str | os.PathLike[str], name: str, tick: _Progress) -> TraceModel:
    import pandas as pd

    notes: list[str] = []
    child = _adopt_early(path)
    if child is None and _split_wanted(path):
        child = _fork_reader(path, LATE_SHARE)
    read = _read_split(path, name, notes, child) if child is not None else None
    if read is None:
        notes.clear()
        read = _read_stream(path, name, notes, None)
    collector = read.collector
    tick(f"decoded {collector.n_events:,} events")
    _release_freed_memory()
    if not collector.n_events:
        raise Unstreamable("no events")  # the whole-buffer path words the error
    try:
        top = _file_decoder.decode(read.top_bytes)
    except (msgspec.MsgspecError, RecursionError) as exc:
        raise Unstreamable("top-level keys") from exc
    if top.traceEvents:
        raise Unstreamable("a second traceEvents key")
    meta = {key: raw for key in TraceFile.__struct_fields__ if key != "traceEvents" and len(raw := getattr(top, key))}
    model = collector.finish(meta, file_bytes=read.file_bytes, json_bytes=read.json_bytes)
    if collector.has_counters:
        counters = [row for rows in read.counters for row in rows]
        model = _with_counters(model, pd.DataFrame(counters, columns=_COUNTER_COLUMNS) if read.counters_ok else None)
    _release_freed_memory()
    tick("built the trace model")
    return model


@dataclasses.dataclass
class _Read:
    """What one pass over a file's event stream collected (all of it, or one share)."""

    collector: _Collector
    counters: list[list[tuple[str, str, float, float]]]  # one list per batch taken
    counters_ok: bool
    cuts: int  # batches cut before the array's last one (the stream's count)
    last: bool  # whether the last batch was taken (only the whole read and share 0)
    share: Share | None  # which batches this read decoded (None: all)
    top_bytes: bytes
    file_bytes: int
    json_bytes: int


def _read_stream(path: str | os.PathLike[str], name: str, notes: list[str], share: Share | None) -> _Read:
    fh, _ = _open_trace(path)
    counters: list[list[tuple[str, str, float, float]]] = []
    counters_ok = True
    with fh:
        inflow = Inflow(
            fh,
            name,
            notes,
            limit_for=_gzip_limit,
            ratio=MAX_GZIP_RATIO,
            max_bytes=MAX_JSON_BYTES,
        )
        stream = EventStream(iter(inflow), share)
        collector = _Collector(name, notes)
        for events, raw in stream.batches(_decode_batch):
            rows: list[tuple[str, str, float, float]] = []
            if collector.add(events) and counters_ok:
                try:
                    rows = _counter_rows(_counter_batch_decoder.decode(raw))
                except (msgspec.MsgspecError, ValueError, TypeError, RecursionError):
                    counters_ok = False
            counters.append(rows)
            del events, raw
    return _Read(
        collector, counters, counters_ok, stream.cuts, stream.last, share, stream.top_bytes, inflow.file_bytes,
        stream.json_bytes,
    )  # fmt: skip


# --------------------------------------------------------------------------------------
# the split load: two processes, each decoding its share of the batches
# --------------------------------------------------------------------------------------
#: Files that hold less JSON than this are read by one process. The split costs CPU (a
#: fork, a second inflate, the transfer of half the columns: ~0.1-0.2 s on a 250 MB trace)
#: and memory (both processes' batches in flight and the pages the child copies from the
#: parent: the peak of the two together, summed PSS, was 273 MB on a 147 MB trace where one
#: process peaks at 226 MB, 1.86x vs 1.54x the JSON; 299 vs 295 MB on 248 MB, 312 vs
#: 296 MB on 209 MB). From this size on the extra memory was under 10 % of the JSON.
SPLIT_MIN_JSON_BYTES = 192 * 2**20
#: The smallest gzip ratio of any real trace we know (shared/real_traces, sample_traces:
#: 9.9x to 30.3x): a gzip file's JSON is at least this times its size.
_MIN_GZIP_RATIO = 9
#: `TRACELENS_LOAD_PROCESSES=1` reads every file in one process (to measure one core, or
#: where a fork is unwelcome).
_PROCESSES_ENV = "TRACELENS_LOAD_PROCESSES"


def _split_wanted(path: str | os.PathLike[str]) -> bool:
    """Whether to read with a second process: on Linux (fork), with two CPUs to run on,
    from a process with no other threads (a fork copies only the calling thread, and
    locks other threads hold would stay held in the child) that is not itself a worker of
    a pool (the job report runs one load per CPU already), for a large file."""
    if os.environ.get(_PROCESSES_ENV, "").strip() == "1" or not sys.platform.startswith("linux"):
        return False
    try:
        if len(os.sched_getaffinity(0)) < 2:
            return False
    except (AttributeError, OSError):
        return False
    import threading

    if threading.active_count() != 1 or threading.current_thread() is not threading.main_thread():
        return False
    mp = sys.modules.get("multiprocessing")
    if mp is not None and mp.parent_process() is not None:
        return False
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):
            return False  # the one-process read words the error
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        try:
            head = os.read(fd, 5)
            tail = os.pread(fd, 4, max(st.st_size - 4, 0))
        finally:
            os.close(fd)
    except (OSError, ValueError):
        return False
    size = st.st_size
    if head[:2] == _GZIP_MAGIC or head[3:5] == _GZIP_MAGIC:
        # gzip's last four bytes: the (last member's) size mod 2**32, exact for one
        # member under 4 GiB; never less than the smallest ratio of real traces allows.
        size = max(int.from_bytes(tail, "little"), size * _MIN_GZIP_RATIO)
    return size >= SPLIT_MIN_JSON_BYTES


#: The second process's share when it is forked by the load itself (after the caller's
#: imports): every other batch.
LATE_SHARE = Share(1, 1, 2)
#: Its share when `start_split_early` forks it as the report starts (~0.08 s into the
#: process), before the parent imports pandas, the analyzers and the renderers: the parent
#: reaches its own batches at ~0.31 s, the child at once. 4 of every 7 batches, so that
#: both finish at about the same time: on train50 (248 MB) the parent's share was done at
#: 0.95-0.98 s and the child's columns in at 0.98-1.10 s (3 of 5, earlier in the pass: 1.03-1.05
#: / 1.15-1.17 s; whole-process medians not told apart: bench/RESULTS.md, "Issue 13, fifth pass").
EARLY_SHARE = Share(1, 4, 7)


@dataclasses.dataclass
class _Child:
    """A forked reader of one share of a file, and the pipe its read comes back through."""

    pid: int
    fd: int
    share: Share
    ident: tuple[int, int, int, int]  # the file when the child started: (dev, inode, size, mtime)


#: The child `start_split_early` started, until a load of the same file takes it.
_early: _Child | None = None


def _file_ident(path: str | os.PathLike[str]) -> tuple[int, int, int, int] | None:
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def _fork_reader(path: str | os.PathLike[str], share: Share) -> _Child | None:
    """Fork a process that reads `share` of the file and sends its `_Read` back pickled
    through a pipe; None when no fork could be made."""
    ident = _file_ident(path)
    if ident is None:
        return None
    try:
        r, w = os.pipe()
    except OSError:
        return None
    try:
        pid = os.fork()
    except OSError:
        os.close(r)
        os.close(w)
        return None
    if pid == 0:  # the child: never returns into the caller's stack
        try:
            os.close(r)
            # Forked early, the child runs outside load_trace, which turns the cyclic GC
            # off for the load (it rescans every batch's objects; none form cycles).
            gc.disable()
            with os.fdopen(w, "wb") as out:
                # Pickled straight into the pipe (and unpickled from it), so neither
                # process holds the columns twice. On any failure nothing is written,
                # or a torn pickle: the parent reads alone either way.
                pickle.dump(_read_stream(path, _printable(path), [], share), out, protocol=pickle.HIGHEST_PROTOCOL)
        except BaseException:  # any failure: the parent reads alone
            pass
        finally:
            os._exit(0)
    os.close(w)
    return _Child(pid, r, share, ident)


def _stop(child: _Child) -> None:
    """Close the child's pipe, kill it and reap it (it may have finished already)."""
    with contextlib.suppress(OSError):
        os.close(child.fd)
    with contextlib.suppress(OSError):
        os.kill(child.pid, signal.SIGKILL)
    with contextlib.suppress(OSError):
        os.waitpid(child.pid, 0)


def start_split_early(path: str | os.PathLike[str]) -> bool:
    """Start the split load's second process for `path` now, if the load would split it:
    the `report` command calls this first thing, so the child decodes its (larger) share
    while this process imports the rest of tracelens and parses its arguments. The next
    `load_trace` of the same, unchanged file takes the child; `discard_early` stops one
    that no load took. Whether the child is used or not, the model is the same."""
    global _early
    discard_early()
    if not _split_wanted(path):
        return False
    _early = _fork_reader(path, EARLY_SHARE)
    return _early is not None


def early_started() -> bool:
    """Whether an early child waits for its load."""
    return _early is not None


def discard_early() -> None:
    """Stop the early child if no load took it (an error before the load, another input)."""
    global _early
    child, _early = _early, None
    if child is not None:
        _stop(child)


def _adopt_early(path: str | os.PathLike[str]) -> _Child | None:
    """The early child, if it reads this very file, unchanged; else it is stopped."""
    global _early
    child, _early = _early, None
    if child is None:
        return None
    if child.ident != _file_ident(path):  # by inode, size and mtime: `./t.json` is `t.json`
        _stop(child)
        return None
    return child


def _read_split(path: str | os.PathLike[str], name: str, notes: list[str], child: _Child) -> _Read | None:
    """Read the file as two shares at once: the forked `child` decodes its batches while
    this process decodes the others and the array's end; the child's columns come back
    through a pipe and are put in batch order. None when the split could not be made (a
    batch that did not decode at its first cut, the child failing): the caller then reads
    the file in one process, which gives the same model either way. Errors of the input
    itself (TraceInputError) are raised as the one-process read raises them. The child
    is reaped (or killed) before this returns."""
    reaped = False
    try:
        try:
            mine = _read_stream(path, name, notes, child.share._replace(part=0))
        except (Misaligned, Unstreamable):
            return None
        with os.fdopen(child.fd, "rb", closefd=False) as inp:
            try:
                theirs = pickle.load(inp)
            except Exception:  # nothing, or a torn pickle: the child failed
                return None
        os.waitpid(child.pid, 0)
        reaped = True
        return _merged(mine, theirs) if isinstance(theirs, _Read) else None
    finally:
        if reaped:
            with contextlib.suppress(OSError):
                os.close(child.fd)
        else:
            _stop(child)


def _merged(mine: _Read, theirs: _Read) -> _Read | None:
    """Share 0's read with share 1's batches put in their places: batch i of the stream is
    `share.owner(i)`'s, the last is share 0's. Names are re-coded into share 0's tables, shape
    records replaced by share 0's record of the same set. None if the shares disagree."""
    a, b = mine.collector, theirs.collector
    if mine.share is None or theirs.share != mine.share._replace(part=1):
        return None
    owner = [mine.share.owner(i) for i in range(mine.cuts)] + ([0] if mine.last else [])
    n_b = sum(owner)
    if theirs.cuts != mine.cuts or len(a.marks) != len(owner) - n_b or len(b.marks) != n_b:
        return None
    if a.py_frames + b.py_frames > MAX_PYTHON_FRAMES:
        return None  # the cap applies in file order: the one-process read applies it
    remap = []
    for which in (0, 1):
        table = a.name_tables[which]
        names = list(b.name_tables[which])
        for nm in names:
            if nm not in table:
                table[nm] = len(table)
                if which == 0:
                    a.host_step.append(_is_step_name(nm))
        remap.append(np.array([table[nm] for nm in names], dtype=np.int64))
    same: dict[int, OpShapes] = {}
    for key, rec in b.shapes.items():
        same[id(rec)] = a.shapes.setdefault(key, _NO_SHAPES if key == _EMPTY_SHAPES_KEY else rec)

    def interleave(pa: list[Any], pb: list[Any], fix: Callable[[Any], Any] | None = None) -> list[Any]:
        ia, ib = iter(pa), iter(map(fix, pb) if fix is not None else pb)
        return [next(ib) if o else next(ia) for o in owner]

    for cols, tables_of, which in ((a.host, b.host, 0), (a.gpu, b.gpu, 1)):
        for col in list(cols):
            fix: Callable[[Any], Any] | None = None
            if col == "name":
                fix = remap[which].__getitem__
            elif col == "shapes":
                fix = functools.partial(_same_shapes, same)
            cols[col] = interleave(cols[col], tables_of.pop(col), fix)

    def spans(marks: list[tuple[int, int]], j: int) -> list[tuple[int, int]]:
        ends = [m[j] for m in marks]
        return list(zip([0, *ends], ends, strict=False))  # (start, end) of each batch

    for j, attr in ((0, "memory"), (1, "threads")):
        la, lb = getattr(a, attr), getattr(b, attr)
        sa, sb = iter(spans(a.marks, j)), iter(spans(b.marks, j))
        merged: list[Any] = []
        for o in owner:
            lo, hi = next(sb) if o else next(sa)
            merged.extend((lb if o else la)[lo:hi])
        setattr(a, attr, merged)
    ca, cb = iter(mine.counters), iter(theirs.counters)
    mine.counters = [next(cb) if o else next(ca) for o in owner]
    mine.counters_ok = mine.counters_ok and theirs.counters_ok
    a.n_events += b.n_events
    a.has_counters = a.has_counters or b.has_counters
    for cat, kind in b.kind_cache.items():
        a.kind_cache.setdefault(cat, kind)
    for cat, count in b.other_categories.items():
        a.other_categories[cat] = a.other_categories.get(cat, 0) + count
    a.dropped += b.dropped
    a.py_frames += b.py_frames
    a.any_op = a.any_op or b.any_op
    a.long_names = [x + y for x, y in zip(a.long_names, b.long_names, strict=True)]
    return mine


def _same_shapes(same: dict[int, OpShapes], piece: list[OpShapes | None]) -> list[OpShapes | None]:
    return [None if rec is None else same[id(rec)] for rec in piece]


def _release_freed_memory() -> None:
    """Hand the batches' freed memory back to the OS (glibc's malloc_trim).

    glibc raises its mmap threshold each time a large block (a 16 MB batch) is freed, so
    later batches come from the heap, and freed heap memory stays in the process: on a
    225 MB trace the process kept 430 MB after the load, 237 MB once trimmed, and the
    analyzers allocate on top of that. Elsewhere (macOS, musl) this does nothing.
    """
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    try:
        import ctypes

        fn: Callable[[int], int] = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError, ImportError, TypeError):  # no glibc (TypeError: Windows)
        return None
    return fn


def _decode_batch(data: bytes) -> tuple[list[RawEvent], bytes]:
    return _array_decoder.decode(data), data


def _gzip_limit(compressed: int) -> int:
    return min(MAX_JSON_BYTES, max(GZIP_FLOOR_BYTES, MAX_GZIP_RATIO * compressed))


def _load_whole(path: str | os.PathLike[str], name: str, tick: _Progress) -> TraceModel:
    """The whole-buffer route: the file read and decoded in one piece, with the repairs
    and the tolerant per-event decode for odd files."""
    notes: list[str] = []
    data, file_bytes = read_trace_bytes(path, notes)
    tick("read")
    events, top = _decode(data, name, notes)
    tick(f"decoded {len(events):,} events")
    if not events:
        raise TraceInputError(f"{name}: the trace has no events")
    model = build_model(events, top, name=name, file_bytes=file_bytes, json_bytes=len(data), notes=notes)
    if any(e.ph == "C" for e in events):
        try:
            counters: pd.DataFrame | None = _decode_counters(data)
        except (msgspec.MsgspecError, ValueError, TypeError, RecursionError):
            counters = None
        model = _with_counters(model, counters)
    tick("built the trace model")
    return model


def _with_counters(model: TraceModel, counters: pd.DataFrame | None) -> TraceModel:
    if counters is None:
        note = "counter events ('ph': 'C') could not be read and were ignored"
        return dataclasses.replace(model, meta=dataclasses.replace(model.meta, notes=(*model.meta.notes, note)))
    shift = model.meta.origin_us - (model.meta.base_time_ns / 1000.0 if model.meta.base_time_ns else 0.0)
    counters["ts"] = counters["ts"] - shift
    return dataclasses.replace(model, counters=counters)


def build_model(
    events: list[RawEvent],
    top: dict[str, msgspec.Raw],
    *,
    name: str,
    file_bytes: int,
    json_bytes: int,
    notes: list[str] | None = None,
) -> TraceModel:
    collector = _Collector(name, list(notes or []))
    collector.add(events)
    return collector.finish(top, file_bytes=file_bytes, json_bytes=json_bytes)


#: Python frames (with_stack's python_function events) kept at most. They are the bulk of
#: stack-heavy traces (53% of the 967k host rows of a transformers generate loop,
#: workloads/capture_large.py) and only name sources, so past this they are dropped, with
#: a note, rather than the load running out of memory. A host row costs 131 bytes of
#: columns: 10M frames are 1.3 GB, about what a trace near MAX_JSON_BYTES holds.
MAX_PYTHON_FRAMES = 10_000_000

_TS, _DUR, _CAT, _NAME = attrgetter("ts"), attrgetter("dur"), attrgetter("cat"), attrgetter("name")
_PID, _TID, _ARGS = attrgetter("pid"), attrgetter("tid"), attrgetter("args")
_PH = attrgetter("ph")
_IS_X = "X".__eq__
_EXT_ID, _EXT_ID_2021 = attrgetter("external_id"), attrgetter("external_id_2021")
_CORRELATION, _CALL_STACK = attrgetter("correlation"), attrgetter("call_stack")
#: The five shape args of an op, in the order of `_op_shapes`'s key.
_SHAPE_FIELDS = tuple(
    attrgetter(f) for f in ("input_dims", "input_dims_2021", "input_type", "input_strides", "concrete_inputs")
)
_NUL_JOIN = b"\x00".join
_HOST_KIND_CODES = [int(k) for k in HOST_KINDS]
_GPU_KIND_CODES = [int(k) for k in GPU_KINDS]
_OP = int(Kind.CPU_OP)
_NO_SHAPES = OpShapes()
#: The shape key of an op with none of the five shape args.
_EMPTY_SHAPES_KEY = b"\x00" * 4


class _Collector:
    """Turns batches of decoded events into column pieces, then one TraceModel.

    What is kept of an event is its columns (numbers in numpy arrays, names interned, an
    op's shape args as one shared compact record per distinct set), so a batch's JSON
    and decoded objects can be freed once `add` returns. Everything that depends on more
    than one event (the time origin, string-id codes, the notes' counts) is done in
    `finish`, over all batches, so the model does not depend on where batches end.
    """

    def __init__(self, name: str, notes: list[str]) -> None:
        self.name = name
        self.notes = notes
        self.n_events = 0
        self.has_counters = False
        self.kind_cache: dict[str, Kind] = {}
        #: Events of categories tracelens does not analyse (Kind.OTHER), counted by category:
        #: an MTIA trace's `mtia_ccp_events`, a range-profiler trace's `cuda_profiler_range`.
        self.other_categories: dict[str, int] = {}
        self.dropped = 0
        self.py_frames = 0
        self.py_dropped = 0
        self.any_op = False
        self.long_names = [0, 0]  # host, gpu
        self.name_tables: tuple[dict[str, int], dict[str, int]] = ({}, {})
        self.host_step: list[bool] = []  # per host name code: a ProfilerStep#N
        self.shapes: dict[bytes, OpShapes] = {}
        self.host: dict[str, list[Any]] = {k: [] for k in _HOST_PIECES}
        self.gpu: dict[str, list[Any]] = {k: [] for k in _GPU_PIECES}
        self.memory: list[tuple[float | int | None, ...]] = []
        self.threads: list[tuple[int | str, int | str, str]] = []
        # (len(memory), len(threads)) after each batch: where a batch's rows end, so a
        # split read can put two collectors' batches in file order.
        self.marks: list[tuple[int, int]] = []

    def add(self, events: list[RawEvent]) -> bool:
        """Take one batch; returns whether it held counter events ("ph": "C")."""
        self.n_events += len(events)
        counters = False
        # Complete events ("X") are picked out at C speed (compress over a map of
        # comparisons); only the rest (flows, instants, metadata) are looked at in Python.
        is_x = list(map(_IS_X, map(_PH, events)))
        xs: list[RawEvent] = list(compress(events, is_x))
        for e in compress(events, map(not_, is_x)):
            ph = e.ph
            if ph == "i":
                if e.name == "[memory]" and (a := e.args) is not None:
                    self.memory.append(
                        (
                            e.ts,
                            *map(
                                _int64_or_none,
                                (a.mem_bytes, a.total_allocated, a.total_reserved, a.device_type, a.device_id, a.addr),
                            ),
                        )
                    )
            elif ph == "M":
                if e.name == "thread_name" and e.args is not None and e.args.name:
                    self.threads.append((e.pid, e.tid, e.args.name))
            elif ph == "C":
                counters = True
        # Events without a finite time cannot be placed; one of them must not poison the origin.
        n = len(xs)
        ts = np.fromiter(map(_TS, xs), dtype=np.float64, count=n)
        dur = np.fromiter(map(_DUR, xs), dtype=np.float64, count=n)
        with np.errstate(invalid="ignore"):
            ok = np.isfinite(ts) & np.isfinite(dur) & (np.abs(ts) < _MAX_TIME_US) & (np.abs(dur) < _MAX_TIME_US)
        if not ok.all():
            keep = np.flatnonzero(ok)
            self.dropped += n - len(keep)
            xs = [xs[i] for i in keep.tolist()]
            ts, dur, n = ts[keep], dur[keep], len(keep)
        cats = list(map(_CAT, xs))
        cache = self.kind_cache
        for cat in set(cats).difference(cache):
            cache[cat] = CATEGORY_KINDS.get(cat.lower(), Kind.OTHER)
        kinds = np.fromiter(map(cache.__getitem__, cats), dtype=np.int8, count=n)
        for i in np.flatnonzero(kinds == Kind.OTHER).tolist():
            self.other_categories[cats[i]] = self.other_categories.get(cats[i], 0) + 1
        self.any_op = self.any_op or bool((kinds == Kind.CPU_OP).any())
        is_host = np.isin(kinds, _HOST_KIND_CODES)
        is_gpu = np.isin(kinds, _GPU_KIND_CODES)
        host_ev = list(compress(xs, is_host.tolist()))
        gpu_ev = list(compress(xs, is_gpu.tolist()))
        host_kinds = kinds[is_host]
        # 2021 traces file ProfilerStep#N under `Operator`: it is an annotation, not an op.
        host_codes = self._codes(list(map(_NAME, host_ev)), 0)
        is_step = np.asarray(self.host_step, dtype=bool)[host_codes] if len(host_codes) else np.zeros(0, bool)
        host_kinds = np.where(is_step, np.int8(Kind.USER_ANNOTATION), host_kinds).astype(np.int8)
        host_ts, host_dur = ts[is_host], dur[is_host]
        is_py = host_kinds == Kind.PYTHON
        n_py = int(is_py.sum())
        room = max(MAX_PYTHON_FRAMES - self.py_frames, 0)
        if n_py > room:
            # Past the cap, Python frames are dropped (and counted for a note) rather than
            # the load running out of memory: they only name sources, ops and kernels stay.
            drop = np.flatnonzero(is_py)[room:]
            keep = np.ones(len(host_ev), dtype=bool)
            keep[drop] = False
            self.py_dropped += len(drop)
            kept = np.flatnonzero(keep).tolist()
            host_ev = [host_ev[i] for i in kept]
            host_codes = host_codes[keep]
            host_kinds, host_ts, host_dur = host_kinds[keep], host_ts[keep], host_dur[keep]
            n_py = room
        self.py_frames += n_py
        self._add_host(host_ev, host_kinds, host_ts, host_dur, host_codes)
        self._add_gpu(gpu_ev, kinds[is_gpu], ts[is_gpu], dur[is_gpu])
        self.has_counters = self.has_counters or counters
        self.marks.append((len(self.memory), len(self.threads)))
        return counters

    def _codes(self, names: list[str], which: int) -> np.ndarray:
        """Names as codes into this table's names (host 0, GPU 1), in first-seen order;
        `finish` sorts them into categories. Per-name facts are worked out per new name."""
        names, cut = _capped_names(names)
        self.long_names[which] += cut
        table = self.name_tables[which]
        for name in set(names).difference(table):
            table[name] = len(table)
            if which == 0:
                self.host_step.append(_is_step_name(name))
        return np.fromiter(map(table.__getitem__, names), dtype=np.int64, count=len(names))

    def _op_shapes(self, a: EventArgs) -> OpShapes:
        # One bytes key per op, the five raw fields joined by NUL: a JSON value cannot hold
        # a raw NUL (msgspec rejects one), so the key is unambiguous; five separate copies
        # are made only for a set not seen before.
        key = b"\x00".join((a.input_dims, a.input_dims_2021, a.input_type, a.input_strides, a.concrete_inputs))
        found = self.shapes.get(key)
        if found is None:
            fields = (
                bytes(a.input_dims),
                bytes(a.input_dims_2021),
                bytes(a.input_type),
                bytes(a.input_strides),
                bytes(a.concrete_inputs),
            )
            found = self.shapes[key] = OpShapes(*fields) if any(fields) else _NO_SHAPES
        return found

    def _add_host(
        self, evs: list[RawEvent], kinds: np.ndarray, ts: np.ndarray, dur: np.ndarray, codes: np.ndarray
    ) -> None:
        args = list(map(_ARGS, evs))
        h = self.host
        h["kind"].append(kinds)
        h["name"].append(codes)
        h["pid"].append(_ints_or_raw(list(map(_PID, evs))))
        h["tid"].append(_ints_or_raw(list(map(_TID, evs))))
        h["ts"].append(ts)
        h["dur"].append(np.where(np.isfinite(dur) & (dur > 0), dur, 0.0))
        if None in args:  # events without args (rare): row by row
            h["external_id"].append(_opt_int([_external_id(a) for a in args]))
            h["correlation"].append(_opt_int([a.correlation if a is not None else None for a in args]))
            h["call_stack"].append([(a.call_stack or None) if a is not None else None for a in args])
            shape = self._op_shapes
            h["shapes"].append(
                [shape(a) if k == _OP and a is not None else None for a, k in zip(args, kinds.tolist(), strict=True)]
            )
            return
        # Every event has args: each field is read with a C-level map over them.
        ext = list(map(_EXT_ID, args))
        if None in ext:
            old = list(map(_EXT_ID_2021, args))
            if old.count(None) != len(old):  # the 2021 spelling somewhere
                ext = [x if x is not None else y for x, y in zip(ext, old, strict=True)]
        h["external_id"].append(_opt_int(ext))
        h["correlation"].append(_opt_int(list(map(_CORRELATION, args))))
        stacks = list(map(_CALL_STACK, args))
        if "" in stacks:
            stacks = [s or None for s in stacks]
        h["call_stack"].append(stacks)
        # Ops keep their shape args (raw JSON, decoded when an analyzer asks), one shared
        # record per distinct set: a loop's ops repeat the same few hundred shapes.
        h["shapes"].append(self._shapes_of(args, kinds == _OP))

    def _shapes_of(self, args: list[EventArgs], is_op: np.ndarray) -> list[OpShapes | None]:
        """The shapes column of a piece whose events all have args: None but for ops."""
        ops = list(compress(args, is_op.tolist()))
        keys = list(map(_NUL_JOIN, zip(*(map(get, ops) for get in _SHAPE_FIELDS), strict=True)))
        found = list(map(self.shapes.get, keys))
        if None in found:
            for i, rec in enumerate(found):
                if rec is None:
                    found[i] = self._op_shapes(ops[i])
        out: list[OpShapes | None] = [None] * len(args)
        for i, rec in zip(np.flatnonzero(is_op).tolist(), found, strict=True):
            out[i] = rec
        return out

    def _add_gpu(self, evs: list[RawEvent], kinds: np.ndarray, ts: np.ndarray, dur: np.ndarray) -> None:
        n = len(evs)
        args = list(map(_ARGS, evs))
        g = self.gpu
        g["kind"].append(kinds)
        g["name"].append(self._codes(list(map(_NAME, evs)), 1))
        g["pid"].append(_ints_or_raw(list(map(_PID, evs))))
        g["tid"].append(_ints_or_raw(list(map(_TID, evs))))
        g["ts"].append(ts)
        g["dur"].append(np.where(np.isfinite(dur) & (dur > 0), dur, 0.0))
        # Ids beyond int64 (a device of 2**70) are no ids: fall back to pid/tid (in finish).
        g["device"].append(
            np.fromiter(
                (
                    a.device if a is not None and a.device is not None and 0 <= a.device < _INT64_MAX else -1
                    for a in args
                ),
                dtype=np.int64,
                count=n,
            )
        )
        g["stream"].append(
            np.fromiter(
                (
                    a.stream if a is not None and isinstance(a.stream, int) and 0 <= a.stream < _INT64_MAX else -1
                    for a in args
                ),
                dtype=np.int64,
                count=n,
            )
        )
        g["grid"].append(_triples([a.grid if a is not None else None for a in args]))
        g["block"].append(_triples([a.block if a is not None else None for a in args]))
        g["correlation"].append(_opt_int([a.correlation if a is not None else None for a in args]))
        g["external_id"].append(_opt_int([_external_id(a) for a in args]))
        g["registers"].append(_opt_int([a.registers_per_thread if a is not None else None for a in args]))
        g["shared_memory"].append(_opt_int([a.shared_memory if a is not None else None for a in args]))
        g["bytes"].append(_opt_int([_to_int(a.bytes) if a is not None else None for a in args]))
        g["sync_kind"].append([a.cuda_sync_kind if a is not None else None for a in args])

    def _note_long_names(self, which: int) -> None:
        cut = self.long_names[which]
        if cut:
            self.notes.append(f"{cut} names longer than {MAX_TRACE_NAME_CHARS:,} characters were shortened")

    def finish(self, top: dict[str, msgspec.Raw], *, file_bytes: int, json_bytes: int) -> TraceModel:
        import pandas as pd

        name, notes = self.name, self.notes
        if self.dropped:
            notes.append(f"{self.dropped} events without a finite ts/dur were ignored")
        if self.py_dropped:
            notes.append(
                f"{self.py_dropped:,} Python frames (with_stack) past the first {MAX_PYTHON_FRAMES:,} were dropped to "
                "bound memory: ops and kernels after them have no Python source"
            )
        # Column by column, each one's pieces freed once joined (peak memory).
        h = {k: _joined(self.host.pop(k)) for k in list(self.host)}
        g = {k: _joined(self.gpu.pop(k)) for k in list(self.gpu)}
        if not len(g["kind"]) and not self.any_op:
            raise TraceInputError(
                f"{name}: no PyTorch CPU ops, runtime calls or GPU kernels found: not a torch.profiler (Kineto) trace"
            )
        all_ts = np.concatenate([h["ts"], g["ts"]])
        origin = float(all_ts.min()) if len(all_ts) else 0.0
        del all_ts
        # Host first, then GPU, as the notes have always come.
        self._note_long_names(0)
        host = _host_frame(h, _categorical(h["name"], self.name_tables[0]), origin)
        h.clear()  # the frame holds its own copies
        self._note_long_names(1)
        gpu = _gpu_frame(g, _categorical(g["name"], self.name_tables[1]), origin)
        g.clear()
        host, host_repeats = _drop_repeats(host, _HOST_IDENTITY)
        gpu, gpu_repeats = _drop_repeats(gpu, _GPU_IDENTITY)
        if host_repeats or gpu_repeats:
            notes.append(f"{host_repeats + gpu_repeats} exact repeats of events were ignored (each event counted once)")
        host = _with_columns(host, _nest(host))

        steps = _steps(host, notes)
        host = _with_columns(host, {"step": _assign_steps(host["ts"].to_numpy(), steps)})
        gpu = _with_columns(gpu, _link_launches(host, gpu))
        steps = _gpu_step_windows(steps, gpu)
        cols = ["ts", "bytes", "total_allocated", "total_reserved", "device_type", "device_id", "addr"]
        memory = pd.DataFrame([(r[0] - origin, *r[1:]) for r in self.memory], columns=cols)  # type: ignore[operator]
        for c in cols[1:]:
            memory[c] = pd.to_numeric(memory[c], errors="coerce").astype("Int64")
        counters = pd.DataFrame({"name": [], "series": [], "ts": [], "value": []})

        meta_dict = _small_metadata(top)
        vendor = _vendor(host, gpu)
        devices = _devices(top, vendor)
        if not devices:
            notes.append("no deviceProperties in the trace: GPU model and SM count unknown")
        active = _active_devices(gpu)
        dist = meta_dict.get("distributedInfo") if isinstance(meta_dict.get("distributedInfo"), dict) else {}
        assert isinstance(dist, dict)
        base_ns = _base_time_ns(top)
        origin_abs = origin + (base_ns / 1000.0 if base_ns else 0.0)
        meta = TraceMeta(
            path=name,
            file_bytes=file_bytes,
            json_bytes=json_bytes,
            n_events=self.n_events,
            vintage=_vintage(self.kind_cache, base_ns),
            origin_us=origin_abs,
            base_time_ns=base_ns,
            vendor=vendor,
            devices=devices,
            active_devices=active,
            rank=_opt_meta_int(dist.get("rank")),
            world_size=_opt_meta_int(dist.get("world_size")),
            versions=_versions(meta_dict),
            metadata=meta_dict,
            notes=tuple(notes),
            other_categories=dict(self.other_categories),
        )
        threads: dict[tuple[int, int], str] = {}
        for pid, tid, tname in self.threads:
            threads[(int(_int_or_code([pid])[0]), int(_int_or_code([tid])[0]))] = tname
        return TraceModel(
            meta=meta, host=host, gpu=gpu, steps=steps, memory=memory, counters=counters, thread_names=threads
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


#: _FRAME_COPY: the host and GPU frames take their column arrays as they are (copy=False)
#: rather than copied into one 2-D block per dtype: the arrays are fresh and owned by the
#: frame alone, and the consolidating copy grew faster than the trace (0.02 s on a 600k-row
#: host frame, 0.28 s on 1.2M rows, on fresh memory), one source of the load's
#: super-linear growth.


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


def _link_launches(host: pd.DataFrame, gpu: pd.DataFrame) -> dict[str, Any]:
    """runtime/driver call <-> GPU activity by correlation id (flows are not 1:1; see
    SOURCES.md #6), then the launch's step."""
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
    host_step = host["step"].to_numpy()
    return {
        "launch": launch.astype(np.int64),
        "step": np.where(launch >= 0, host_step[np.clip(launch, 0, None)], _NO_ROW) if len(host) else _NO_ROW,
    }


_NO_DIMS = (-1, -1, -1)


def _triples(values: list[list[int] | None]) -> np.ndarray:
    """grid/block lists -> (n, 3) int array, -1 where absent."""
    rows = [[*v, -1, -1, -1][:3] if v else _NO_DIMS for v in values]
    try:
        return np.array(rows, dtype=np.int64).reshape(len(values), 3)
    except OverflowError:
        clean = [[x if _INT64_MIN < x < _INT64_MAX else -1 for x in r] for r in rows]
        return np.array(clean, dtype=np.int64).reshape(len(values), 3)


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


def _int64_or_none(value: int | None) -> int | None:
    return value if value is not None and _INT64_MIN < value < _INT64_MAX else None


def _vendor(host: pd.DataFrame, gpu: pd.DataFrame) -> str:
    runtime = host[host["kind"] == Kind.RUNTIME]["name"]
    if len(runtime):
        # Each distinct name tested once (a string per row was 0.1 s on 2.4M host rows).
        if name_matches(runtime, lambda n: n.startswith("hip")).mean() > 0.5:
            return "amd"
        if name_matches(runtime, lambda n: n.startswith("cuda")).mean() > 0.5:
            return "nvidia"
    return "unknown" if gpu.empty else "nvidia"


def _active_devices(gpu: pd.DataFrame) -> tuple[int, ...]:
    act = gpu[gpu["kind"].isin([int(Kind.KERNEL), int(Kind.MEMCPY), int(Kind.MEMSET)])]
    if act.empty:
        return ()
    busy = act.groupby("device")["dur"].sum().sort_values(ascending=False)
    return tuple(int(d) for d in busy.index)


def _base_time_ns(top: dict[str, msgspec.Raw]) -> int | None:
    raw = top.get("baseTimeNanoseconds")
    if raw is None:
        return None
    try:
        value = msgspec.json.decode(raw)
    except (msgspec.MsgspecError, RecursionError):
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not abs(value) < 2**62:
        return None  # not a time, or one no clock gives
    return int(value)


def _index_or(value: object, default: int) -> int:
    parsed = _opt_meta_int(value)
    return parsed if parsed is not None else default


def _opt_meta_int(value: object) -> int | None:
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return None


def _vintage(cats: dict[str, Kind], base_ns: int | None) -> str:
    names = set(cats)
    if "Kernel" in names or "Runtime" in names or "Operator" in names:
        era = "2021 (Operator/Kernel/Runtime categories)"
    elif "cuda_driver" in names:
        era = "2025+ (cuda_driver category)"
    elif "cpu_op" in names or "kernel" in names:
        era = "2022+ (cpu_op/kernel/cuda_runtime categories)"
    else:
        era = "unknown"
    return era + ("; ts relative to baseTimeNanoseconds" if base_ns else "; ts in epoch µs")
