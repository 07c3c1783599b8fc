"""An NVML sampler thread: SM/memory clocks, power and its enforced limit, temperature,
utilization and the clocks-event (throttle) reasons, every few milliseconds, with
wall-clock timestamps that line up with the trace (`baseTimeNanoseconds + ts * 1000`
equals `time.time_ns()` in the profiled process; gpu-trace-facts.md).

NVML calls go through ctypes, which releases the GIL while the driver answers, so the
profiled program's Python thread is held only for the few µs of bookkeeping per sample
(measured by bench/bench_sampler.py).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tracelens.model.schema import NVML_REASON_BITS

#: Default sampling period. Power readings lag the load by tens of ms on H200
#: (gpu-trace-facts.md), clocks change within a few ms; 10 ms resolves both and keeps
#: the sampler's cost under 1% (bench/bench_sampler.py).
DEFAULT_INTERVAL_S = 0.010

REASON_BITS = NVML_REASON_BITS

#: Slowly changing quantities are read every this many samples (and held in between).
SLOW_EVERY = 10

SERIES = ("sm_mhz", "mem_mhz", "power_w", "power_limit_w", "temp_c", "util_gpu_pct", "util_mem_pct", "reasons")


@dataclass
class GpuSamples:
    """Samples of one GPU. `index` is the CUDA device index the program sees."""

    index: int
    name: str
    uuid: str
    max_sm_mhz: int | None
    max_mem_mhz: int | None
    power_limit_w: float | None
    t_ns: list[int] = field(default_factory=list)
    values: dict[str, list[float]] = field(default_factory=lambda: {s: [] for s in SERIES})


@dataclass
class SamplerResult:
    gpus: list[GpuSamples]
    interval_s: float
    driver: str
    nvml_version: str
    samples: int
    busy_s: float  # time spent inside sampling calls (the sampler's own cost)
    note: str = ""


def _cuda_visible_uuids(nvml: Any) -> list[tuple[int, Any]]:
    """(CUDA index, NVML handle) for the GPUs the program will see, honouring
    CUDA_VISIBLE_DEVICES given as indices or UUIDs; NVML order otherwise."""
    import os

    count = nvml.nvmlDeviceGetCount()
    handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None or visible.strip() == "":
        return list(enumerate(handles)) if visible is None else []
    out: list[tuple[int, Any]] = []
    for cuda_idx, item in enumerate(x.strip() for x in visible.split(",")):
        if item.isdigit() and int(item) < count:
            out.append((cuda_idx, handles[int(item)]))
        elif item.startswith(("GPU-", "MIG-")):
            try:
                out.append((cuda_idx, nvml.nvmlDeviceGetHandleByUUID(item)))
            except Exception:
                continue
    return out


def _str(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class NvmlSampler:
    """Start with `start()`, stop with `stop()` -> SamplerResult. Never raises: without
    NVML (no driver, CI, laptops) `start()` returns False and says why in `note`."""

    def __init__(self, interval_s: float = DEFAULT_INTERVAL_S, max_gpus: int = 8) -> None:
        self.interval_s = interval_s
        self.max_gpus = max_gpus
        self.note = ""
        self._nvml: Any = None
        self._handles: list[tuple[GpuSamples, Any]] = []
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._busy_s = 0.0
        self._samples = 0
        self._driver = ""
        self._version = ""

    def start(self) -> bool:
        try:
            import pynvml as nvml
        except ImportError:
            self.note = "pynvml (nvidia-ml-py) is not installed: no clock/power samples"
            return False
        try:
            nvml.nvmlInit()
        except Exception as exc:
            self.note = f"NVML unavailable ({exc}): no clock/power samples"
            return False
        self._nvml = nvml
        try:
            self._driver = _str(nvml.nvmlSystemGetDriverVersion())
            self._version = _str(nvml.nvmlSystemGetNVMLVersion())
        except Exception:
            pass
        for cuda_idx, handle in _cuda_visible_uuids(nvml)[: self.max_gpus]:
            self._handles.append((self._describe(cuda_idx, handle), handle))
        if not self._handles:
            self.note = "NVML found no GPU visible to this process: no clock/power samples"
            nvml.nvmlShutdown()
            return False
        self._thread = threading.Thread(target=self._run, name="tracelens-nvml", daemon=True)
        self._thread.start()
        return True

    def _describe(self, cuda_idx: int, handle: Any) -> GpuSamples:
        nvml = self._nvml

        def safe(fn: Any, *args: Any) -> Any:
            try:
                return fn(*args)
            except Exception:
                return None

        limit_mw = safe(nvml.nvmlDeviceGetEnforcedPowerLimit, handle)
        return GpuSamples(
            index=cuda_idx,
            name=_str(safe(nvml.nvmlDeviceGetName, handle) or "GPU"),
            uuid=_str(safe(nvml.nvmlDeviceGetUUID, handle) or ""),
            max_sm_mhz=safe(nvml.nvmlDeviceGetMaxClockInfo, handle, nvml.NVML_CLOCK_SM),
            max_mem_mhz=safe(nvml.nvmlDeviceGetMaxClockInfo, handle, nvml.NVML_CLOCK_MEM),
            power_limit_w=limit_mw / 1000.0 if limit_mw else None,
        )

    def _reasons_fn(self) -> Any:
        nvml = self._nvml
        return getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
            nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None
        )

    def _run(self) -> None:
        nvml = self._nvml
        reasons_fn = self._reasons_fn()
        sm, mem, temp_sensor = nvml.NVML_CLOCK_SM, nvml.NVML_CLOCK_MEM, nvml.NVML_TEMPERATURE_GPU
        # Clocks, power and throttle reasons move within milliseconds: read them every
        # sample. Memory clock, power limit, temperature and utilization (itself an
        # average over ~1/6 s) change slowly: read them every SLOW_EVERY samples and
        # hold the value, which keeps the GIL time per sample small.
        fast: list[tuple[str, Callable[[Any], float]]] = [
            ("sm_mhz", lambda h: nvml.nvmlDeviceGetClockInfo(h, sm)),
            ("power_w", lambda h: nvml.nvmlDeviceGetPowerUsage(h) / 1000.0),
            ("reasons", lambda h: reasons_fn(h) if reasons_fn else float("nan")),
        ]
        slow: list[tuple[str, Callable[[Any], float]]] = [
            ("mem_mhz", lambda h: nvml.nvmlDeviceGetClockInfo(h, mem)),
            ("power_limit_w", lambda h: nvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0),
            ("temp_c", lambda h: nvml.nvmlDeviceGetTemperature(h, temp_sensor)),
            ("util_gpu_pct", lambda h: nvml.nvmlDeviceGetUtilizationRates(h).gpu),
            ("util_mem_pct", lambda h: nvml.nvmlDeviceGetUtilizationRates(h).memory),
        ]
        held: dict[int, dict[str, float]] = {}
        next_t = time.perf_counter()
        while not self._stop.is_set():
            t0 = time.perf_counter()
            read_slow = self._samples % SLOW_EVERY == 0
            for gpu, h in self._handles:
                now = time.time_ns()
                row = held.setdefault(gpu.index, {})
                for key, read in fast + slow if read_slow else fast:
                    try:
                        row[key] = float(read(h))
                    except Exception:  # a counter this GPU lacks stays NaN
                        row[key] = float("nan")
                gpu.t_ns.append(now)
                for key in SERIES:
                    gpu.values[key].append(row.get(key, float("nan")))
            self._samples += 1
            self._busy_s += time.perf_counter() - t0
            next_t += self.interval_s
            delay = next_t - time.perf_counter()
            if delay < 0:  # fell behind (a slow driver call): don't burst to catch up
                next_t = time.perf_counter()
                delay = 0.0
            self._stop.wait(delay)

    def snapshot(self) -> SamplerResult:
        """The samples so far, while the sampler keeps running (for a trace written the
        moment a recording ends). Each GPU's series are cut to the samples the thread has
        finished (it appends the time first, then each value)."""
        gpus = []
        for g, _ in self._handles:
            n = min([len(g.t_ns), *(len(v) for v in g.values.values())])
            copy = GpuSamples(g.index, g.name, g.uuid, g.max_sm_mhz, g.max_mem_mhz, g.power_limit_w)
            copy.t_ns = g.t_ns[:n]
            copy.values = {k: v[:n] for k, v in g.values.items()}
            gpus.append(copy)
        return SamplerResult(gpus, self.interval_s, self._driver, self._version, self._samples, self._busy_s, self.note)

    def stop(self) -> SamplerResult:
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=5)
        if self._nvml is not None:
            with contextlib.suppress(Exception):  # shutting down: nothing left to report
                self._nvml.nvmlShutdown()
        return SamplerResult(
            gpus=[g for g, _ in self._handles],
            interval_s=self.interval_s,
            driver=self._driver,
            nvml_version=self._version,
            samples=self._samples,
            busy_s=self._busy_s,
            note=self.note,
        )
