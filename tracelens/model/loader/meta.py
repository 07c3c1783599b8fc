"""What a trace says about itself: its GPUs (deviceProperties, sanity-checked), versions,
vendor, active devices, clock base and vintage.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec

from tracelens.model.counter_metrics import COUNTERS_KEY
from tracelens.model.schema import Kind
from tracelens.model.trace import DeviceInfo, name_matches

if TYPE_CHECKING:
    # pandas is imported where a function builds frames, not here: the split load's child
    # starts before the report's imports (`start_split_early`) and reads its share without
    # pandas (0.1-0.15 s of import it would otherwise pay before decoding).
    import pandas as pd


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
