"""Put the NVML samples and the capture's metadata into the exported trace.

Samples become Chrome counter events (`"ph": "C"`), one track per quantity on the GPU's
row, so Perfetto and chrome://tracing draw them; the capture's own facts go under the
top-level key `tracelens`. The profiler's JSON is spliced, not re-encoded: every
top-level value is kept byte-for-byte (msgspec.Raw).

The export is checked as it is read: a malformed one (seen on a 2.2 GB export) is
salvaged event by event, and the note says so. The output is streamed to a temporary file
beside the target and renamed into place, so a reader never sees half a trace.
"""

from __future__ import annotations

import gzip
import math
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from tracelens.capture.nvml import SamplerResult
from tracelens.capture.ranks import write_gz_head
from tracelens.model.schema import NVML_TRACK_PREFIX, NVML_TRACKS
from tracelens.output import make_temp, public_mode

TRACKS = NVML_TRACKS
TRACK_PREFIX = NVML_TRACK_PREFIX


def counter_events(samples: SamplerResult, base_time_ns: int | None) -> list[dict[str, Any]]:
    """Counter events in trace time: µs since baseTimeNanoseconds when the trace has it
    (torch >= 2.x), else epoch µs (as older traces' `ts`)."""
    out: list[dict[str, Any]] = []
    base = base_time_ns or 0
    for gpu in samples.gpus:
        for title, key, arg in TRACKS:
            values = gpu.values[key]
            name = f"{TRACK_PREFIX}{gpu.index} {title}"
            last = None
            for i, (t_ns, v) in enumerate(zip(gpu.t_ns, values, strict=True)):
                if isinstance(v, float) and math.isnan(v):
                    continue
                # Counters hold their value until the next event: skip repeats, keep the last.
                if v == last and i != len(values) - 1:
                    continue
                last = v
                out.append(
                    {
                        "ph": "C",
                        "name": name,
                        "pid": gpu.index,
                        "ts": round((t_ns - base) / 1000.0, 3),
                        "args": {arg: v},
                    }
                )
    return out


def capture_metadata(samples: SamplerResult | None, extra: dict[str, Any]) -> dict[str, Any]:
    meta = dict(extra)
    if samples is not None:
        meta["nvml"] = {
            "interval_s": samples.interval_s,
            "samples": samples.samples,
            "sampler_busy_s": round(samples.busy_s, 4),
            "driver_version": samples.driver,
            "nvml_version": samples.nvml_version,
            "note": samples.note,
            "gpus": [
                {
                    "index": g.index,
                    "name": g.name,
                    "uuid": g.uuid,
                    "max_sm_mhz": g.max_sm_mhz,
                    "max_mem_mhz": g.max_mem_mhz,
                    "power_limit_w": g.power_limit_w,
                }
                for g in samples.gpus
            ],
        }
    return meta


#: Events decoded and written per batch: bounds the temporary lists when re-joining a
#: large trace (a few MB of JSON at a time).
_BATCH = 20_000
#: gzip level for captures: 6 (zlib's default) was ~2x faster than 9 for <1% more bytes
#: on Kineto JSON; level 1 is ~40% larger.
GZIP_LEVEL = 6
_EVENT_START = b"\n  {"  # Kineto writes each trace event at two spaces' indent
_EVENT_END = b"\n  }"
_ERROR_AT_RE = re.compile(r"\(byte (\d+)\)")


class _Args(msgspec.Struct):
    correlation: int | None = None


class _Ev(msgspec.Struct):
    """The fields of a trace event that finishing reads (the rest stay raw)."""

    ph: str = ""
    ts: float | None = None
    dur: float | None = None
    cat: str = ""
    name: str = ""
    args: _Args | None = None


@dataclass
class TraceStats:
    """What was written, for the capture's messages and metadata."""

    path: Path
    bytes: int = 0
    events: int = 0
    ops: int = 0
    kernels: int = 0
    python_frames: int = 0
    steps: list[int] = field(default_factory=list)
    #: First and last event time (trace µs) of the kept events.
    span_us: tuple[float, float] | None = None
    dropped_events: int = 0
    salvage_note: str = ""
    seconds: float = 0.0
    #: False when finish_trace wrote nothing: the recording held no torch op, kernel or
    #: Python frame and an empty trace was not wanted (require_events).
    written: bool = True


def _decode_events(raw: msgspec.Raw) -> tuple[list[msgspec.Raw], list[_Ev]]:
    raws = msgspec.json.decode(raw, type=list[msgspec.Raw])
    try:
        parsed = msgspec.json.decode(raw, type=list[_Ev])
    except msgspec.ValidationError:  # an odd event (e.g. a string ts): one at a time
        parsed = []
        for r in raws:
            try:
                parsed.append(msgspec.json.decode(r, type=_Ev))
            except msgspec.ValidationError:
                parsed.append(_Ev())
    return raws, parsed


def salvage(data: bytes, error: str) -> tuple[dict[str, msgspec.Raw], list[msgspec.Raw], str]:
    """Recover what can be read from a malformed export: the top-level keys before
    `traceEvents`, and every event that decodes on its own. Returns (top, events, note)."""
    key = data.find(b'"traceEvents"')
    if key < 0:
        raise msgspec.DecodeError(f"the profiler's export is malformed and has no traceEvents ({error})")
    head = data[:key].rstrip().rstrip(b",") + b"}"
    try:
        top = msgspec.json.decode(head, type=dict[str, msgspec.Raw])
    except msgspec.DecodeError:
        top = {}
    begin = data.find(b"[", key)
    events: list[msgspec.Raw] = []
    bad = 0
    batch: list[bytes] = []

    def flush() -> None:
        nonlocal bad
        if not batch:
            return
        try:
            events.extend(msgspec.json.decode(b"[" + b",".join(batch) + b"]", type=list[msgspec.Raw]))
        except msgspec.DecodeError:
            for c in batch:
                try:
                    msgspec.json.decode(c)
                except msgspec.DecodeError:
                    bad += 1
                    continue
                events.append(msgspec.Raw(c))
        batch.clear()

    for chunk in data[begin + 1 :].split(_EVENT_START)[1:]:
        end = chunk.find(_EVENT_END)
        if end < 0:  # cut off mid-event
            bad += 1
            continue
        batch.append(b"{" + chunk[: end + len(_EVENT_END)])
        if len(batch) >= _BATCH:
            flush()
    flush()
    m = _ERROR_AT_RE.search(error)
    where = f" at byte {int(m.group(1)):,}" if m else ""
    note = (
        f"the profiler's export was malformed{where} ({len(data):,} bytes): kept the {len(events):,} events "
        f"that could be read, dropped {bad:,}"
    )
    return top, events, note


def _trim(raws: list[msgspec.Raw], evs: list[_Ev], max_events: int) -> tuple[list[int], str]:
    """Indices of the events to keep so that at most `max_events` timed events remain:
    everything up to a cut time (at a step boundary where one falls in the kept part),
    GPU activity of kept launches, and all metadata events."""
    timed = sorted((e.ts, i) for i, e in enumerate(evs) if e.ph == "X" and e.ts is not None)
    if len(timed) <= max_events:
        return list(range(len(raws))), ""
    cut = timed[max_events - 1][0]
    step_starts = sorted(e.ts for e in evs if e.ts is not None and e.name.startswith("ProfilerStep#") and e.ph == "X")
    inside = [t for t in step_starts if t <= cut]
    if len(inside) >= 2:  # end at the last step that started before the cut: whole steps
        cut = inside[-1]
    kept_corr = {
        e.args.correlation
        for e in evs
        if e.ts is not None and e.ts < cut and e.cat in ("cuda_runtime", "cuda_driver") and e.args is not None
    }
    keep: list[int] = []
    for i, e in enumerate(evs):
        if e.ph in ("M", "C") or e.ts is None or e.ts < cut:
            keep.append(i)
        elif e.args is not None and e.args.correlation in kept_corr and e.cat not in ("cuda_runtime", "cuda_driver"):
            keep.append(i)  # a kernel or copy launched before the cut
    return (
        keep,
        f"the recording held {len(timed):,} timed events, over --max-events {max_events:,}: kept those before the cut",
    )


def finish_trace(
    raw_json: Path | None,
    out_path: Path,
    samples: SamplerResult | None,
    metadata: dict[str, Any],
    max_events: int | None = None,
    require_events: bool = False,
    extra_top: dict[str, Any] | None = None,
) -> TraceStats:
    """Read the profiler's export (None: no recording, a trace of metadata only), check
    it, salvage it if malformed, trim it to `max_events`, add samples and metadata, and
    (unless `require_events` and it holds no op, kernel or Python frame: no empty traces)
    write `out_path` (gzipped if it ends in .gz) atomically, streaming the events.
    `extra_top`: more top-level keys (`tracelens_counters`)."""
    t0 = time.perf_counter()
    stats = TraceStats(out_path)
    data = raw_json.read_bytes() if raw_json is not None else b'{"traceEvents": []}'
    try:
        top = msgspec.json.decode(data, type=dict[str, msgspec.Raw])
        raws, evs = _decode_events(top.get("traceEvents", msgspec.Raw(b"[]")))
    except msgspec.DecodeError as exc:
        top, raws, stats.salvage_note = salvage(data, str(exc))
        evs = [msgspec.json.decode(r, type=_Ev) if r else _Ev() for r in raws]
    del data
    notes = list(metadata.get("notes", []))
    if stats.salvage_note:
        notes.append(stats.salvage_note)
    if max_events is not None:
        keep, trim_note = _trim(raws, evs, max_events)
        if trim_note:
            stats.dropped_events = len(raws) - len(keep)
            raws = [raws[i] for i in keep]
            evs = [evs[i] for i in keep]
            notes.append(f"{trim_note} ({stats.dropped_events:,} dropped)")
    times = [e.ts for e in evs if e.ph == "X" and e.ts is not None]
    stats.span_us = (min(times), max(times)) if times else None
    stats.events = len(raws)
    stats.ops = sum(1 for e in evs if e.cat == "cpu_op")
    stats.kernels = sum(1 for e in evs if e.cat == "kernel")
    stats.python_frames = sum(1 for e in evs if e.cat == "python_function")
    stats.steps = sorted(
        {int(e.name[13:]) for e in evs if e.name.startswith("ProfilerStep#") and e.name[13:].isdigit()}
    )
    if require_events and not (stats.ops or stats.kernels or stats.python_frames):
        stats.written = False
        stats.seconds = time.perf_counter() - t0
        return stats
    base = None
    if "baseTimeNanoseconds" in top:
        try:
            base = int(msgspec.json.decode(top["baseTimeNanoseconds"]))
        except (msgspec.DecodeError, TypeError, ValueError):
            base = None
    extra = counter_events(samples, base) if samples is not None and samples.gpus else []
    meta = dict(metadata, notes=notes)
    meta["recorded"] = {
        "events": stats.events,
        "ops": stats.ops,
        "kernels": stats.kernels,
        "python_frames": stats.python_frames,
        "steps": [stats.steps[0], stats.steps[-1]] if stats.steps else None,
        "dropped_events": stats.dropped_events,
        "salvaged": bool(stats.salvage_note),
    }
    tail = msgspec.json.encode(capture_metadata(samples, meta))
    out_path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = make_temp(out_path)
    try:
        os.chmod(tmp, public_mode())
        with os.fdopen(fd, "wb") as fh:
            sink: Any = (
                gzip.GzipFile(fileobj=fh, mode="wb", compresslevel=GZIP_LEVEL) if out_path.name.endswith(".gz") else fh
            )
            try:
                # A rank's run tag goes first, where a reader finds it cheaply (ranks.py).
                write_gz_head(sink, metadata.get("run"))
                added = extra_top or {}
                for k, v in top.items():
                    if k not in ("traceEvents", "tracelens") and k not in added:
                        sink.write(msgspec.json.encode(k) + b":" + bytes(v) + b",")
                for k, value in added.items():
                    sink.write(msgspec.json.encode(k) + b":" + msgspec.json.encode(value) + b",")
                sink.write(b'"traceEvents":[')
                first = True
                if extra:
                    sink.write(msgspec.json.encode(extra)[1:-1])
                    first = False
                for i in range(0, len(raws), _BATCH):
                    part = b",".join(bytes(r) for r in raws[i : i + _BATCH])
                    if part:
                        sink.write((b"" if first else b",") + part)
                        first = False
                sink.write(b'],"tracelens":' + tail + b"}")
            finally:
                if sink is not fh:
                    sink.close()
        os.replace(tmp, out_path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    stats.bytes = out_path.stat().st_size
    stats.seconds = time.perf_counter() - t0
    return stats


def restamp(path: Path, updates: dict[str, Any]) -> int:
    """Rewrite a written trace's `tracelens` metadata with `updates` (the script's exit,
    learnt after the trace was written), atomically; the events are kept byte for byte.
    Returns the new size in bytes."""
    raw = path.read_bytes()
    gz = raw[:2] == b"\x1f\x8b"
    data = gzip.decompress(raw) if gz else raw
    del raw
    top = msgspec.json.decode(data, type=dict[str, msgspec.Raw])
    meta = msgspec.json.decode(top["tracelens"]) if "tracelens" in top else {}
    if not isinstance(meta, dict):
        meta = {}
    meta.update(updates)
    fd, tmp = make_temp(path)
    try:
        os.chmod(tmp, public_mode())
        with os.fdopen(fd, "wb") as fh:
            sink: Any = gzip.GzipFile(fileobj=fh, mode="wb", compresslevel=GZIP_LEVEL) if gz else fh
            try:
                sink.write(b"{")
                for k, v in top.items():
                    if k != "tracelens":
                        sink.write(msgspec.json.encode(k) + b":" + bytes(v) + b",")
                sink.write(b'"tracelens":' + msgspec.json.encode(meta) + b"}")
            finally:
                if sink is not fh:
                    sink.close()
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path.stat().st_size
