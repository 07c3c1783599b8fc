"""The one loader's entry point: stream the file (read, decode, collect a batch at a time),
or read it whole when the stream cannot place it; both build the model with the same
code, so they give the same model.
"""

from __future__ import annotations

import dataclasses
import gc
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import msgspec

from tracelens.errors import TraceInputError
from tracelens.model.loader.collect import _Collector, _read_stream
from tracelens.model.loader.decode import _COUNTER_COLUMNS, _decode, _decode_counters, _file_decoder
from tracelens.model.loader.read import _printable, read_trace_bytes
from tracelens.model.loader.split import (
    LATE_SHARE,
    _adopt_early,
    _fork_reader,
    _read_split,
    _release_freed_memory,
    _split_wanted,
)
from tracelens.model.loader.stream import Unstreamable
from tracelens.model.schema import RawEvent, TraceFile
from tracelens.model.trace import TraceModel

if TYPE_CHECKING:
    # pandas is imported where a function builds frames, not here: the split load's child
    # starts before the report's imports (`start_split_early`) and reads its share without
    # pandas (0.1-0.15 s of import it would otherwise pay before decoding).
    import pandas as pd

ProgressFn = Callable[[str], None]


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


def load_trace(path: str | os.PathLike[str], progress: ProgressFn | None = None) -> TraceModel:
    """Load one Kineto trace (.json or .json.gz) of any vintage.

    Streams the file (see tracelens.model.loader.stream): decompressed in chunks, the event
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
