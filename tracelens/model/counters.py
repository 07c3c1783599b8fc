"""Per-kernel hardware counters held by a trace (issue 35), as read, before any pairing.

Two sources (model/counter_metrics.py describes both):

- `cuda_profiler_range` events, Kineto's CUPTI range profiler: one per kernel, the metric
  values as args. Their `ts`/`dur` come from kernel replay in a serialised profiler session:
  they are not the kernels' times (HTA's A100 trace: 77 ranges laid end to end, each 121,431
  µs long). Such a trace has no kernel events at all; its `cudaLaunchKernel` calls are the
  kernels' launches, in the same order.
- the `tracelens_counters` key that `tracelens capture --counters` writes: Nsight Compute's
  rows for the window's first step(s), in launch order, with grid and block.

The loader counts the events of categories it does not analyse (`TraceMeta.other_categories`);
only when ranges are among them is the file read a second time, for their args. Everything
here is untrusted input: names stay text (escaped by the renderers), numbers are kept only
when finite and not negative, and a trace holds at most MAX_RECORDS records.
"""

from __future__ import annotations

import gzip
import math
import os
from dataclasses import dataclass, replace
from typing import Any

import msgspec

from tracelens.domain import MAX_COUNTER_NAME_CHARS
from tracelens.model.counter_metrics import COUNTERS_KEY, RANGE_CATEGORY
from tracelens.model.trace import TraceModel

#: Counter records kept per trace (a step of a large model launches a few thousand kernels).
MAX_RECORDS = 100_000
#: Metrics kept per record.
MAX_METRICS = 256


@dataclass(frozen=True)
class CounterRecord:
    """One measured kernel launch."""

    index: int  # its position in its source's order (launch order)
    name: str
    values: dict[str, float]
    grid: tuple[int, int, int] | None = None
    block: tuple[int, int, int] | None = None
    replay_us: float | None = None  # its duration in the profiler's replay, not on the timeline


@dataclass(frozen=True)
class CounterSet:
    """The counters of one source."""

    source: str  # "kineto" (cuda_profiler_range events) or "ncu" (capture --counters)
    tool: str
    records: tuple[CounterRecord, ...]
    metrics: tuple[str, ...] = ()
    steps: tuple[int, int] | None = None  # ProfilerStep numbers the records were taken in
    cache_control: str = ""  # Nsight Compute's: "all" flushes the caches before each replay
    notes: tuple[str, ...] = ()


def _finite(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        v = float(value)
    except OverflowError:  # an int of hundreds of digits
        return None
    return v if math.isfinite(v) and v >= 0 else None


def _triple(value: Any) -> tuple[int, int, int] | None:
    if isinstance(value, list | tuple) and len(value) == 3 and all(type(v) is int and 0 <= v < 2**31 for v in value):
        return (int(value[0]), int(value[1]), int(value[2]))
    return None


def _values(raw: Any) -> dict[str, float]:
    out: dict[str, float] = {}
    if not isinstance(raw, dict):
        return out
    for key, value in raw.items():
        v = _finite(value)
        if isinstance(key, str) and v is not None and len(out) < MAX_METRICS:
            out[key[:200]] = v
    return out


def _text(value: Any, limit: int = MAX_COUNTER_NAME_CHARS) -> str:
    return value[:limit] if isinstance(value, str) else ""


def counters_from_capture(data: Any) -> CounterSet | None:
    """The `tracelens_counters` value, validated; None when it holds no usable record."""
    if not isinstance(data, dict):
        return None
    kernels = data.get("kernels")
    if not isinstance(kernels, list):
        return None
    records = []
    for i, k in enumerate(kernels[:MAX_RECORDS]):
        if not isinstance(k, dict):
            continue
        records.append(
            CounterRecord(
                index=i,
                name=_text(k.get("name")),
                values=_values(k.get("values")),
                grid=_triple(k.get("grid")),
                block=_triple(k.get("block")),
                replay_us=_finite(k.get("replay_us")),
            )
        )
    if not records:
        return None
    steps = data.get("steps")
    step_range = None
    if isinstance(steps, list) and len(steps) == 2 and all(type(s) is int for s in steps):
        step_range = (int(steps[0]), int(steps[1]))
    metrics = data.get("metrics")
    notes = data.get("notes")
    return CounterSet(
        source=_text(data.get("source"), 40) or "capture",
        tool=_text(data.get("tool"), 200),
        records=tuple(records),
        metrics=tuple(_text(m, 200) for m in metrics if isinstance(m, str)) if isinstance(metrics, list) else (),
        steps=step_range,
        cache_control=_text(data.get("cache_control"), 40),
        notes=tuple(_text(n, 500) for n in notes if isinstance(n, str)) if isinstance(notes, list) else (),
    )


class _RangeProbe(msgspec.Struct):
    ph: str = ""
    cat: str = ""
    name: Any = ""
    ts: Any = 0.0
    dur: Any = 0.0
    args: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)


class _RangeFile(msgspec.Struct):
    traceEvents: list[_RangeProbe] | None = None


def read_ranges(path: str | os.PathLike[str]) -> CounterSet | None:
    """The `cuda_profiler_range` events of a trace file, in time order (the order Kineto
    replayed, so launched, them)."""
    from tracelens.model.loader.read import MAX_JSON_BYTES, _open_trace

    fh, _shown = _open_trace(path)
    with fh:
        magic = fh.read(2)
        fh.seek(0)
        stream: Any = gzip.GzipFile(fileobj=fh) if magic == b"\x1f\x8b" else fh
        data = stream.read(MAX_JSON_BYTES + 1)
    try:
        events = msgspec.json.decode(data, type=_RangeFile).traceEvents or []
    except (msgspec.MsgspecError, RecursionError):
        return None
    found = [e for e in events if e.cat == RANGE_CATEGORY and e.ph == "X"][:MAX_RECORDS]
    found.sort(key=lambda e: _finite(e.ts) or 0.0)
    records = []
    for i, e in enumerate(found):
        try:
            args = msgspec.json.decode(e.args) if len(e.args) else {}
        except (msgspec.MsgspecError, RecursionError):
            args = {}
        records.append(CounterRecord(index=i, name=_text(e.name), values=_values(args), replay_us=_finite(e.dur)))
    if not records:
        return None
    metrics = sorted({m for r in records for m in r.values})
    return CounterSet(source="kineto", tool="CUPTI range profiler (torch.profiler)", records=tuple(records),
                      metrics=tuple(metrics))  # fmt: skip


def with_kernel_counters(model: TraceModel, path: str | os.PathLike[str]) -> TraceModel:
    """The model with the counter sets its file holds (the same model when it holds none)."""
    sets: list[CounterSet] = []
    if model.meta.other_categories.get(RANGE_CATEGORY, 0) > 0:
        found = read_ranges(path)
        if found is not None:
            sets.append(found)
    captured = counters_from_capture(model.meta.metadata.get(COUNTERS_KEY))
    if captured is not None:
        sets.append(captured)
    if not sets:
        return model
    return replace(model, kernel_counters=tuple(sets))
