"""Decoding JSON into typed records: msgspec straight into small structs (skipping every
field nobody reads), with the repairs odd traces need (lone surrogates, bytes that are
not UTF-8, events of the wrong shape decoded one by one) and the counter events.
"""

from __future__ import annotations

import gc
import re
from typing import TYPE_CHECKING

import msgspec

from tracelens.errors import TraceInputError
from tracelens.model.loader.read import _first_byte
from tracelens.model.schema import CounterProbe, CounterTraceFile, EventArgs, LooseEvent, RawEvent, TraceFile

if TYPE_CHECKING:
    # pandas is imported where a function builds frames, not here: the split load's child
    # starts before the report's imports (`start_split_early`) and reads its share without
    # pandas (0.1-0.15 s of import it would otherwise pay before decoding).
    import pandas as pd

_file_decoder = msgspec.json.Decoder(TraceFile)


_array_decoder = msgspec.json.Decoder(list[RawEvent])


_event_decoder = msgspec.json.Decoder(RawEvent)


_counter_decoder = msgspec.json.Decoder(CounterTraceFile)


_counter_batch_decoder = msgspec.json.Decoder(list[CounterProbe])


_loose_event_decoder = msgspec.json.Decoder(LooseEvent)


_raw_top_decoder = msgspec.json.Decoder(dict[str, msgspec.Raw])


_raw_array_decoder = msgspec.json.Decoder(list[msgspec.Raw])


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


def _decode_batch(data: bytes) -> tuple[list[RawEvent], bytes]:
    return _array_decoder.decode(data), data
