"""The one loader: any Kineto/Chrome trace that torch.profiler exports -> TraceModel.

Speed comes from the design, not from tuning: msgspec decodes the bytes straight into
small typed records (skipping every field nobody reads), columns are built with one
list comprehension each, and joins are integer indexing. No per-event pandas work.

The input file is only ever read.
"""

from __future__ import annotations

import dataclasses
import gc
import gzip
import math
import os
import re
import time
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pandas as pd

from tracelens.errors import TraceInputError
from tracelens.model.schema import (
    CATEGORY_KINDS,
    GPU_KINDS,
    HOST_KINDS,
    CounterTraceFile,
    EventArgs,
    Kind,
    LooseEvent,
    LooseTraceFile,
    RawEvent,
    TraceFile,
)
from tracelens.model.trace import DeviceInfo, TraceMeta, TraceModel, name_matches

ProgressFn = Callable[[str], None]

_STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")
_NUM_RE = re.compile(r"(-?\d+)\s*$")
_NO_ROW = -1
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def _is_step_name(name: str) -> bool:
    return name.startswith("ProfilerStep#")


#: Children may end this much after their parent and still nest: 2021 traces round to
#: whole µs, and host timestamps of nested calls are taken by different clocks' reads.
_NEST_SLACK_US = 1.0

_file_decoder = msgspec.json.Decoder(TraceFile)
_array_decoder = msgspec.json.Decoder(list[RawEvent])
_loose_file_decoder = msgspec.json.Decoder(LooseTraceFile)
_loose_array_decoder = msgspec.json.Decoder(list[LooseEvent])


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
def read_trace_bytes(path: str | os.PathLike[str]) -> tuple[bytes, int]:
    """Return the decompressed JSON bytes and the file's size. Raises TraceInputError."""
    p = Path(path)
    if not p.exists():
        raise TraceInputError(f"{p}: no such file")
    if p.is_dir():
        raise TraceInputError(f"{p}: is a directory, not a trace file")
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise TraceInputError(f"{p}: cannot read ({exc.strerror or exc})") from exc
    size = len(data)
    if data[:3] == b"\xef\xbb\xbf":  # a UTF-8 byte-order mark some editors add
        data = data[3:]
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (EOFError, OSError, zlib.error) as exc:
            raise TraceInputError(f"{p}: truncated or corrupt gzip file ({exc})") from exc
    if not _first_byte(data):
        raise TraceInputError(f"{p}: file is empty")
    return data, size


def _first_byte(data: bytes) -> bytes:
    """The first non-whitespace byte, without copying a 50 MB buffer to find it."""
    m = re.match(rb"\s*", data)
    end = m.end() if m else 0
    return data[end : end + 1]


# --------------------------------------------------------------------------------------
# decoding
# --------------------------------------------------------------------------------------
def _decode(data: bytes, name: str, notes: list[str]) -> tuple[list[RawEvent], dict[str, msgspec.Raw]]:
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
            msg = str(exc)
            if "truncated" in msg.lower():
                raise TraceInputError(f"{name}: JSON is truncated ({msg})") from exc
            raise TraceInputError(f"{name}: not a JSON trace ({msg})") from exc
    finally:
        if gc_was_enabled:
            gc.enable()
    if top.traceEvents is None:
        raise TraceInputError(f"{name}: no 'traceEvents' list: not a Chrome/Kineto trace")
    meta = {key: raw for key in TraceFile.__struct_fields__ if key != "traceEvents" and len(raw := getattr(top, key))}
    return top.traceEvents, meta


def _clean_args(args: dict[str, object] | None) -> EventArgs | None:
    """Fallback conversion of generically-decoded args: keep values that fit EventArgs."""
    if not args:
        return None
    kept: dict[str, object] = {}
    for key, value in args.items():
        kept[key] = value
    try:
        return msgspec.convert(kept, EventArgs, strict=False)
    except msgspec.ValidationError:
        pass
    # Drop keys one at a time until conversion succeeds (rare: odd vintages only).
    for key in list(kept):
        trial = {k: v for k, v in kept.items() if k != key}
        try:
            return msgspec.convert(trial, EventArgs, strict=False)
        except msgspec.ValidationError:
            continue
    return None


def _as_float(value: object) -> float:
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return float("nan")


def _decode_loose(
    data: bytes, name: str, is_array: bool, notes: list[str]
) -> tuple[list[RawEvent], dict[str, msgspec.Raw]]:
    """The tolerant path: a value of an unexpected type somewhere (e.g. AMD's string
    `bytes`). Events are decoded generically and each one's args cleaned."""
    try:
        if is_array:
            loose = _loose_array_decoder.decode(data)
            top: dict[str, msgspec.Raw] = {}
        else:
            loose_top = _loose_file_decoder.decode(data)
            if loose_top.traceEvents is None:
                raise TraceInputError(f"{name}: no 'traceEvents' list: not a Chrome/Kineto trace")
            loose = loose_top.traceEvents
            top = msgspec.json.decode(data, type=dict[str, msgspec.Raw])
            top.pop("traceEvents", None)
    except msgspec.ValidationError as exc:
        raise TraceInputError(f"{name}: traceEvents is not a list of trace events ({exc})") from exc
    notes.append("some event fields had unexpected types; they were coerced or dropped")
    out: list[RawEvent] = []
    for ev in loose:
        pid: int | str = ev.pid if isinstance(ev.pid, int | str) else str(ev.pid)
        tid: int | str = ev.tid if isinstance(ev.tid, int | str) else str(ev.tid)
        out.append(
            RawEvent(
                ph=ev.ph,
                name=ev.name,
                cat=ev.cat,
                pid=pid,
                tid=tid,
                ts=_as_float(ev.ts),
                dur=_as_float(ev.dur),
                args=_clean_args(ev.args),
            )
        )
    return out, top


def _decode_counters(data: bytes) -> pd.DataFrame:
    """Counter events ("ph": "C"), decoded in a second pass only when present."""
    probes = msgspec.json.decode(data, type=CounterTraceFile).traceEvents or []
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
    return pd.DataFrame(rows, columns=["name", "series", "ts", "value"])


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


def _finite_times(evs: list[RawEvent]) -> tuple[list[RawEvent], int]:
    ok = [e for e in evs if math.isfinite(e.ts) and math.isfinite(e.dur) and abs(e.ts) < 1e17]
    return ok, len(evs) - len(ok)


def _opt_int(values: Sequence[int | None]) -> np.ndarray:
    try:
        return np.fromiter((_NO_ROW if v is None else v for v in values), dtype=np.int64, count=len(values))
    except OverflowError:  # an id beyond int64: treat it as absent rather than fail
        return np.fromiter(
            (v if v is not None and _INT64_MIN < v < _INT64_MAX else _NO_ROW for v in values),
            dtype=np.int64,
            count=len(values),
        )


def _kind_of(cat: str, cache: dict[str, Kind]) -> Kind:
    kind = cache.get(cat)
    if kind is None:
        kind = CATEGORY_KINDS.get(cat.lower(), Kind.OTHER)
        cache[cat] = kind
    return kind


def _nest(host: pd.DataFrame) -> None:
    """Parent/op/op_root/py_frame columns from one sweep per thread.

    Events on one thread form a forest by time containment; a stack sweep in start order
    (longer first on ties) finds each event's innermost enclosing event. The derived
    columns are carried down the stack, so each is O(1) per event.
    """
    n = len(host)
    parent = np.full(n, _NO_ROW, dtype=np.int64)
    op = np.full(n, _NO_ROW, dtype=np.int64)
    op_root = np.full(n, _NO_ROW, dtype=np.int64)
    range_root = np.full(n, _NO_ROW, dtype=np.int64)
    range_inner = np.full(n, _NO_ROW, dtype=np.int64)
    py = np.full(n, _NO_ROW, dtype=np.int64)
    if n:
        tid_key = host["pid"].to_numpy() * 1_000_003 + host["tid"].to_numpy()
        ts = host["ts"].to_numpy()
        end = host["end"].to_numpy()
        order = np.lexsort((-host["dur"].to_numpy(), ts, tid_key)).tolist()
        kinds = host["kind"].to_numpy().tolist()
        is_step = name_matches(host["name"], _is_step_name).tolist()
        ts_l = ts.tolist()
        end_l = end.tolist()
        tk = tid_key.tolist()
        op_l = op.tolist()
        root_l = op_root.tolist()
        rr_l = range_root.tolist()
        ri_l = range_inner.tolist()
        py_l = py.tolist()
        par_l = parent.tolist()
        is_op = int(Kind.CPU_OP)
        is_py = int(Kind.PYTHON)
        is_ann = int(Kind.USER_ANNOTATION)
        stack: list[int] = []
        cur_thread = None
        for i in order:
            if tk[i] != cur_thread:
                stack.clear()
                cur_thread = tk[i]
            t = ts_l[i]
            # Pop what ended before this event starts, and what it outlives: a range that
            # begins inside a short call and ends long after it (ProfilerStep#N opens
            # inside prof.step()) is not that call's child.
            e = end_l[i] - _NEST_SLACK_US
            while stack and (t >= end_l[stack[-1]] or e > end_l[stack[-1]]):
                stack.pop()
            k = kinds[i]
            if stack:
                p = stack[-1]
                par_l[i] = p
                o, r, f, rr, ri = op_l[p], root_l[p], py_l[p], rr_l[p], ri_l[p]
            else:
                o = r = f = rr = ri = _NO_ROW
            if k == is_op:
                o = ri = i
                if r == _NO_ROW:
                    r = i
                if rr == _NO_ROW:
                    rr = i
            elif k == is_py:
                f = i
            elif k == is_ann and not is_step[i]:
                ri = i
                if rr == _NO_ROW:
                    rr = i
            op_l[i], root_l[i], py_l[i], rr_l[i], ri_l[i] = o, r, f, rr, ri
            stack.append(i)
        parent = np.asarray(par_l, dtype=np.int64)
        op = np.asarray(op_l, dtype=np.int64)
        op_root = np.asarray(root_l, dtype=np.int64)
        range_root = np.asarray(rr_l, dtype=np.int64)
        range_inner = np.asarray(ri_l, dtype=np.int64)
        py = np.asarray(py_l, dtype=np.int64)
    host["parent"] = parent
    host["op"] = op
    host["op_root"] = op_root
    host["range_root"] = range_root
    host["range_inner"] = range_inner
    host["py_frame"] = py


def _steps(host: pd.DataFrame) -> pd.DataFrame:
    kinds = host["kind"].to_numpy()
    names = host["name"]
    is_range = (kinds == Kind.CPU_OP) | (kinds == Kind.USER_ANNOTATION)
    cand = host[is_range & name_matches(names, _is_step_name)]
    rows = []
    for name, ts, end in zip(cand["name"], cand["ts"], cand["end"], strict=True):
        m = _STEP_RE.match(str(name))
        if m:
            number = int(m.group(1))
            if number < _INT64_MAX:
                rows.append((number, float(ts), float(end)))
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
    except msgspec.DecodeError:
        return ()
    out: list[DeviceInfo] = []
    if not isinstance(props, list):
        return ()
    for i, p in enumerate(props):
        if not isinstance(p, dict):
            continue
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


def _small_metadata(top: dict[str, msgspec.Raw]) -> dict[str, Any]:
    meta: dict[str, Any] = {}
    for key, raw in top.items():
        if key in ("traceEvents", "deviceProperties"):
            continue
        if len(raw) > 200_000:  # e.g. a harness's full pip list; not worth decoding
            meta[key] = f"<{len(raw)} bytes omitted>"
            continue
        try:
            meta[key] = msgspec.json.decode(raw)
        except msgspec.DecodeError:
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

    Raises TraceInputError for anything that is not a readable torch.profiler trace.
    """
    tick = _Progress(progress)
    name = str(path)
    data, file_bytes = read_trace_bytes(path)
    tick("read")
    notes: list[str] = []
    events, top = _decode(data, name, notes)
    tick(f"decoded {len(events):,} events")
    if not events:
        raise TraceInputError(f"{name}: the trace has no events")
    model = build_model(events, top, name=name, file_bytes=file_bytes, json_bytes=len(data), notes=notes)
    if any(e.ph == "C" for e in events):
        try:
            counters = _decode_counters(data)
        except (msgspec.ValidationError, msgspec.DecodeError, ValueError, TypeError):
            note = "counter events ('ph': 'C') could not be read and were ignored"
            model = dataclasses.replace(model, meta=dataclasses.replace(model.meta, notes=(*model.meta.notes, note)))
        else:
            shift = model.meta.origin_us - (model.meta.base_time_ns / 1000.0 if model.meta.base_time_ns else 0.0)
            counters["ts"] = counters["ts"] - shift
            model = dataclasses.replace(model, counters=counters)
    tick("built the trace model")
    return model


def build_model(
    events: list[RawEvent],
    top: dict[str, msgspec.Raw],
    *,
    name: str,
    file_bytes: int,
    json_bytes: int,
    notes: list[str] | None = None,
) -> TraceModel:
    notes = list(notes or [])
    kind_cache: dict[str, Kind] = {}
    # One pass to partition by phase: complete events, instants ([memory]), metadata.
    xs: list[RawEvent] = []
    instants: list[RawEvent] = []
    metas: list[RawEvent] = []
    for e in events:
        ph = e.ph
        if ph == "X":
            xs.append(e)
        elif ph == "i":
            instants.append(e)
        elif ph == "M":
            metas.append(e)
    # Events without a finite time cannot be placed; one of them must not poison the origin.
    xs, dropped = _finite_times(xs)
    if dropped:
        notes.append(f"{dropped} events without a finite ts/dur were ignored")
    kinds = np.fromiter((_kind_of(e.cat, kind_cache) for e in xs), dtype=np.int8, count=len(xs))

    is_host = np.isin(kinds, [int(k) for k in HOST_KINDS])
    is_gpu = np.isin(kinds, [int(k) for k in GPU_KINDS])
    host_ev = [xs[i] for i in np.flatnonzero(is_host)]
    gpu_ev = [xs[i] for i in np.flatnonzero(is_gpu)]
    if not gpu_ev and not any(kinds == Kind.CPU_OP):
        raise TraceInputError(
            f"{name}: no PyTorch CPU ops, runtime calls or GPU kernels found: not a torch.profiler (Kineto) trace"
        )

    all_ts = [e.ts for e in host_ev] + [e.ts for e in gpu_ev]
    origin = float(min(all_ts)) if all_ts else 0.0

    host_kinds = kinds[is_host]
    # 2021 traces file ProfilerStep#N under `Operator`: it is an annotation, not an op.
    is_step = np.fromiter((e.name.startswith("ProfilerStep#") for e in host_ev), dtype=bool, count=len(host_ev))
    host_kinds = np.where(is_step, np.int8(Kind.USER_ANNOTATION), host_kinds).astype(np.int8)
    host = _host_frame(host_ev, host_kinds, origin)
    gpu = _gpu_frame(gpu_ev, kinds[is_gpu], origin)
    _nest(host)

    steps = _steps(host)
    host["step"] = _assign_steps(host["ts"].to_numpy(), steps)

    # runtime/driver call <-> GPU activity by correlation id (flows are not 1:1; see
    # SOURCES.md #6), then the launch's step.
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
    gpu["launch"] = launch.astype(np.int64)
    host_step = host["step"].to_numpy()
    gpu["step"] = np.where(launch >= 0, host_step[np.clip(launch, 0, None)], _NO_ROW) if len(host) else _NO_ROW

    steps = _gpu_step_windows(steps, gpu)
    memory = _memory_frame(instants, origin)
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
        n_events=len(events),
        vintage=_vintage(kind_cache, base_ns),
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
    )
    threads = _thread_names(metas)
    return TraceModel(
        meta=meta, host=host, gpu=gpu, steps=steps, memory=memory, counters=counters, thread_names=threads
    )


def _host_frame(evs: list[RawEvent], kinds: np.ndarray, origin: float) -> pd.DataFrame:
    n = len(evs)
    args = [e.args for e in evs]
    ts = np.fromiter((e.ts for e in evs), dtype=np.float64, count=n) - origin
    dur = np.fromiter((e.dur for e in evs), dtype=np.float64, count=n)
    dur = np.where(np.isfinite(dur) & (dur > 0), dur, 0.0)
    ext = [_external_id(a) for a in args]
    corr = [a.correlation if a is not None else None for a in args]
    stacks = [(a.call_stack or None) if a is not None else None for a in args]
    op_kind = int(Kind.CPU_OP)
    # Ops keep their decoded args; shape fields stay raw JSON until an analyzer asks.
    shapes: list[EventArgs | None] = [a if k == op_kind else None for a, k in zip(args, kinds.tolist(), strict=True)]
    frame = pd.DataFrame(
        {
            "kind": kinds,
            "name": pd.Categorical([e.name for e in evs]),
            "pid": _int_or_code([e.pid for e in evs]),
            "tid": _int_or_code([e.tid for e in evs]),
            "ts": ts,
            "dur": dur,
            "end": ts + dur,
            "external_id": _opt_int(ext),
            "correlation": _opt_int(corr),
            "call_stack": np.array(stacks, dtype=object),
            "shapes": np.array(shapes, dtype=object),
        }
    )
    return frame


def _gpu_frame(evs: list[RawEvent], kinds: np.ndarray, origin: float) -> pd.DataFrame:
    n = len(evs)
    args = [e.args for e in evs]
    ts = np.fromiter((e.ts for e in evs), dtype=np.float64, count=n) - origin
    dur = np.fromiter((e.dur for e in evs), dtype=np.float64, count=n)
    dur = np.where(np.isfinite(dur) & (dur > 0), dur, 0.0)
    pid = _int_or_code([e.pid for e in evs])
    tid = _int_or_code([e.tid for e in evs])
    dev = np.fromiter(
        (a.device if a is not None and a.device is not None else -1 for a in args), dtype=np.int64, count=n
    )
    dev = np.where(dev >= 0, dev, pid)
    stream = np.fromiter(
        (a.stream if a is not None and isinstance(a.stream, int) else -1 for a in args), dtype=np.int64, count=n
    )
    stream = np.where(stream >= 0, stream, tid)

    grid = _triples([a.grid if a is not None else None for a in args])
    block = _triples([a.block if a is not None else None for a in args])

    ext = [_external_id(a) for a in args]
    return pd.DataFrame(
        {
            "kind": kinds,
            "name": pd.Categorical([e.name for e in evs]),
            "device": dev,
            "stream": stream,
            "ts": ts,
            "dur": dur,
            "end": ts + dur,
            "correlation": _opt_int([a.correlation if a is not None else None for a in args]),
            "external_id": _opt_int(ext),
            "grid_x": grid[:, 0],
            "grid_y": grid[:, 1],
            "grid_z": grid[:, 2],
            "block_x": block[:, 0],
            "block_y": block[:, 1],
            "block_z": block[:, 2],
            "registers": _opt_int([a.registers_per_thread if a is not None else None for a in args]),
            "shared_memory": _opt_int([a.shared_memory if a is not None else None for a in args]),
            "bytes": _opt_int([_to_int(a.bytes) if a is not None else None for a in args]),
            "sync_kind": pd.Categorical([a.cuda_sync_kind if a is not None else None for a in args]),
        }
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


def _gpu_step_windows(steps: pd.DataFrame, gpu: pd.DataFrame) -> pd.DataFrame:
    steps = steps.copy()
    if steps.empty:
        steps["gpu_ts"] = pd.Series(dtype=np.float64)
        steps["gpu_end"] = pd.Series(dtype=np.float64)
        return steps
    act = gpu[gpu["kind"].isin([int(Kind.KERNEL), int(Kind.MEMCPY), int(Kind.MEMSET)]) & (gpu["step"] >= 0)]
    g = act.groupby("step").agg(gpu_ts=("ts", "min"), gpu_end=("end", "max"))
    return steps.merge(g, how="left", left_on="step", right_index=True)


def _memory_frame(events: list[RawEvent], origin: float) -> pd.DataFrame:
    rows = [
        (e.ts - origin, a.mem_bytes, a.total_allocated, a.total_reserved, a.device_type, a.device_id, a.addr)
        for e in events
        if e.name == "[memory]" and (a := e.args) is not None
    ]
    cols = ["ts", "bytes", "total_allocated", "total_reserved", "device_type", "device_id", "addr"]
    frame = pd.DataFrame(rows, columns=cols)
    for c in cols[1:]:
        frame[c] = pd.to_numeric(frame[c], errors="coerce").astype("Int64")
    return frame


def _thread_names(events: list[RawEvent]) -> dict[tuple[int, int], str]:
    out: dict[tuple[int, int], str] = {}
    for e in events:
        if e.name == "thread_name" and e.args is not None and e.args.name:
            pid = _int_or_code([e.pid])[0]
            tid = _int_or_code([e.tid])[0]
            out[(int(pid), int(tid))] = e.args.name
    return out


def _vendor(host: pd.DataFrame, gpu: pd.DataFrame) -> str:
    runtime = host[host["kind"] == Kind.RUNTIME]["name"]
    if len(runtime):
        first = runtime.astype(str)
        if first.str.startswith("hip").mean() > 0.5:
            return "amd"
        if first.str.startswith("cuda").mean() > 0.5:
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
    except msgspec.DecodeError:
        return None
    return int(value) if isinstance(value, int | float) else None


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
