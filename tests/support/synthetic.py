"""One builder for small synthetic Kineto traces: the edge cases that no real trace has
(a trace with no kernels, two loops, a name that tries to inject HTML), each a few
events. Real traces stay the evidence for everything else (support.corpus).

Events are the dicts torch.profiler writes: host events (`cpu_op`, `cuda_runtime`,
`cuda_driver`, `user_annotation`, `python_function`) on a (pid, tid), kernels on
(pid 0, tid = stream) with `device`, `stream` and the launch's `correlation`.

    tr = TraceBuilder()
    tr.op("aten::mm", kernel="gemm_kernel")      # an op, its launch and its kernel
    tr.call("cudaDeviceSynchronize", dur=20)      # a runtime call on its own
    model = tr.load(tmp_path)
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

from tracelens.model import TraceModel, load_trace

Event = dict[str, Any]

#: The H200's deviceProperties as torch 2.11 writes them (sample_traces/).
H200_PROPERTIES: dict[str, Any] = {
    "id": 0,
    "name": "NVIDIA H200",
    "totalGlobalMem": 150109880320,
    "computeMajor": 9,
    "computeMinor": 0,
    "maxThreadsPerMultiprocessor": 2048,
    "numSms": 132,
    "regsPerMultiprocessor": 65536,
    "sharedMemPerMultiprocessor": 233472,
}


def host_event(
    cat: str, name: str, ts: float, dur: float, args: dict[str, Any] | None = None, *, pid: int = 1, tid: int = 1
) -> Event:
    """One complete (`ph: X`) host event; `args=None` writes none."""
    ev: Event = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur}
    if args is not None:
        ev["args"] = args
    return ev


def kernel_event(
    name: str, ts: float, dur: float, correlation: int, *, device: int = 0, stream: int = 7, **args: Any
) -> Event:
    """One kernel on `device`'s `stream`, tied to its launch by `correlation`; further
    args (`grid`, `block`, "registers per thread" as registers_per_thread, ...) as given."""
    extra = {k.replace("_", " "): v for k, v in args.items()}
    return {
        "ph": "X",
        "cat": "kernel",
        "name": name,
        "pid": 0,
        "tid": stream,
        "ts": ts,
        "dur": dur,
        "args": {"device": device, "stream": stream, "correlation": correlation, **extra},
    }


class TraceBuilder:
    """A trace built event by event. `op` and `call` append at the host clock `t` and move
    it on (by the event's length and `gap_us`); the event constructors above place events
    anywhere, through `add`."""

    def __init__(self, *, pid: int = 1, tid: int = 1, start_us: float = 1_000.0, gap_us: float = 2.0) -> None:
        self.events: list[Event] = []
        self.pid, self.tid = pid, tid
        self.t = start_us
        self.gap_us = gap_us
        self.corr = 0
        self.device_properties: list[dict[str, Any]] = []
        self.top: dict[str, Any] = {}

    def add(self, *events: Event) -> TraceBuilder:
        self.events.extend(events)
        return self

    def next_correlation(self) -> int:
        self.corr += 1
        return self.corr

    def op(
        self,
        name: str,
        kernel: str | None = None,
        dur: float = 10.0,
        kernel_dur: float = 3.0,
        args: dict[str, Any] | None = None,
        launch: str = "cudaLaunchKernel",
    ) -> int:
        """An op at the clock; with `kernel`, the runtime call it makes (1 µs in, 4 µs long)
        and the kernel that runs 6 µs after the op starts. Returns its External id."""
        c = self.next_correlation()
        self.add(
            host_event("cpu_op", name, self.t, dur, {"External id": c, **(args or {})}, pid=self.pid, tid=self.tid)
        )
        if kernel is not None:
            launch_args = {"External id": c, "correlation": c}
            self.add(
                host_event("cuda_runtime", launch, self.t + 1, 4, launch_args, pid=self.pid, tid=self.tid),
                kernel_event(kernel, self.t + 6, kernel_dur, c, External_id=c),
            )
        self.t += dur + self.gap_us
        return c

    def call(self, name: str, dur: float, args: dict[str, Any] | None = None) -> None:
        """A runtime call (a sync, an allocation, context creation) at the clock."""
        self.add(host_event("cuda_runtime", name, self.t, dur, args if args is not None else {}, pid=self.pid,
                            tid=self.tid))  # fmt: skip
        self.t += dur + self.gap_us

    def trace(self) -> dict[str, Any]:
        doc: dict[str, Any] = dict(self.top)
        if self.device_properties:
            doc["deviceProperties"] = self.device_properties
        doc["traceEvents"] = self.events
        return doc

    def write(self, path: Path) -> Path:
        """The trace as JSON at `path` (gzip-compressed when it ends in .gz)."""
        return write_trace(path, self.trace())

    def load(self, tmp_path: Path, name: str = "t.json") -> TraceModel:
        return load_trace(self.write(tmp_path / name))


def write_trace(path: Path, doc: dict[str, Any] | list[Any]) -> Path:
    data = json.dumps(doc).encode("utf-8", "surrogatepass")
    path.write_bytes(gzip.compress(data) if path.suffix == ".gz" else data)
    return path


def tiny_trace(steps: int = 2) -> dict[str, Any]:
    """A minimal Kineto trace of the 2025+ shape (H200 capture): per step a ProfilerStep
    range, an aten::mm with shapes, its cuLaunchKernelEx and the kernel it launched. For
    edge-case inputs small enough to keep in the fuzz corpus; tests index into it (event 2
    is ProfilerStep#1, 3 its aten::mm, 4 its launch, 5 its kernel at ts 1040.0)."""
    events: list[Event] = [
        {"name": "process_name", "ph": "M", "ts": 0, "pid": 7, "tid": 0, "args": {"name": "python3"}},
        {"name": "thread_name", "ph": "M", "ts": 0, "pid": 7, "tid": 7, "args": {"name": "main"}},
    ]
    t = 1000.0
    for i in range(1, steps + 1):
        corr = 100 + i
        mm_args = {
            "External id": 10 * i + 1,
            "Input Dims": [[4096, 4096], [4096, 4096]],
            "Input type": ["c10::BFloat16", "c10::BFloat16"],
        }
        events += [
            host_event("user_annotation", f"ProfilerStep#{i}", t, 400.0, {"External id": 10 * i}, pid=7, tid=7),
            host_event("cpu_op", "aten::mm", t + 10, 50.0, mm_args, pid=7, tid=7),
            host_event(
                "cuda_driver", "cuLaunchKernelEx", t + 20, 10.0, {"External id": 10 * i + 1, "correlation": corr},
                pid=7, tid=7,
            ),
            kernel_event(
                "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", t + 40, 300.0, corr,
                registers_per_thread=168, shared_memory=200000, grid=[2, 66, 1], block=[384, 1, 1],
            ),
        ]  # fmt: skip
        t += 400.0
    return {"schemaVersion": 1, "deviceProperties": [dict(H200_PROPERTIES)], "traceEvents": events}
