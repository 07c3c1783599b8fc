"""Put the NVML samples and the capture's metadata into the exported trace.

Samples become Chrome counter events (`"ph": "C"`), one track per quantity on the GPU's
row, so Perfetto and chrome://tracing draw them; the capture's own facts go under the
top-level key `tracelens`. The profiler's JSON is spliced, not re-encoded: every
top-level value is kept byte-for-byte (msgspec.Raw).
"""

from __future__ import annotations

import gzip
import math
import os
import tempfile
from pathlib import Path
from typing import Any

import msgspec

from tracelens.capture.nvml import SamplerResult
from tracelens.model.schema import NVML_TRACK_PREFIX, NVML_TRACKS
from tracelens.output import public_mode

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


def finish_trace(raw_json: Path, out_path: Path, samples: SamplerResult | None, metadata: dict[str, Any]) -> Path:
    """Read the profiler's export, add samples and metadata, write `out_path` (gzipped if
    it ends in .gz) atomically."""
    data = raw_json.read_bytes()
    top = msgspec.json.decode(data, type=dict[str, msgspec.Raw])
    base = None
    if "baseTimeNanoseconds" in top:
        try:
            base = int(msgspec.json.decode(top["baseTimeNanoseconds"]))
        except (msgspec.DecodeError, TypeError, ValueError):
            base = None
    events = top.get("traceEvents", msgspec.Raw(b"[]"))
    extra = counter_events(samples, base) if samples is not None and samples.gpus else []
    if extra:
        body = bytes(events).strip()
        added = msgspec.json.encode(extra)[1:-1]
        inner = body[1:-1].strip()
        events = msgspec.Raw(b"[" + added + (b"," + inner if inner else b"") + b"]")
    top["traceEvents"] = events
    top["tracelens"] = msgspec.Raw(msgspec.json.encode(capture_metadata(samples, metadata)))
    payload = msgspec.json.encode(top)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{out_path.name}.", suffix=".tmp", dir=str(out_path.parent))
    try:
        os.chmod(tmp, public_mode())
        with os.fdopen(fd, "wb") as fh:
            if out_path.name.endswith(".gz"):
                with gzip.GzipFile(fileobj=fh, mode="wb", compresslevel=6) as gz:
                    gz.write(payload)
            else:
                fh.write(payload)
        os.replace(tmp, out_path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return out_path
