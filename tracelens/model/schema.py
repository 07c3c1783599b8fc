"""The versioned mapping from Kineto's JSON to tracelens columns.

Kineto's output changed spelling several times between 2021 and 2026 (see
shared/real_traces/SOURCES.md). Every spelling we know is listed here, once, so the
loader and the analyzers never see a vintage:

- categories: 2021 `Operator`/`Kernel`/`Runtime`/`Memcpy`/`Memset`, 2022+ `cpu_op`/
  `kernel`/`cuda_runtime`/`gpu_memcpy`/`gpu_memset`, 2025+ `cuda_driver`, `overhead`;
  AMD traces reuse the CUDA categories with `hip*` event names.
- arg keys: `External id` (2022+) vs `external id` (2021 GPU and runtime events);
  `Input Dims` vs `Input dims` (Jan 2021); `Call stack` (2021-2022) vs `python_function`
  events (2024+).

The structs below are decoded by msgspec straight from the bytes: fields not named here
are skipped without being materialised, which is most of the loader's speed.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Any

import msgspec


class Kind(IntEnum):
    """What an event is, independent of the vintage's category spelling."""

    OTHER = 0
    CPU_OP = 1  # aten:: ops, autograd nodes, optimizer steps (cat cpu_op / Operator)
    USER_ANNOTATION = 2  # record_function ranges, ProfilerStep#N (cat user_annotation)
    RUNTIME = 3  # cudaLaunchKernel, cudaMemcpyAsync, hipLaunchKernel... (cuda_runtime)
    DRIVER = 4  # cuLaunchKernel(Ex) (cuda_driver, 2025+)
    PYTHON = 5  # python_function frames (with_stack, 2024+)
    KERNEL = 10  # GPU kernel
    MEMCPY = 11  # GPU copy
    MEMSET = 12  # GPU memset
    GPU_SYNC = 13  # CUPTI sync records on the GPU row (cat cuda_sync)
    GPU_ANNOTATION = 14  # gpu_user_annotation: a CPU range mirrored on the GPU row
    OVERHEAD = 20  # profiler overhead (Buffer Flush, Lazy Function Loading)
    TRACE_SPAN = 21  # "PyTorch Profiler (0)" span rows


#: Every category spelling seen in real traces, lower-cased, mapped to its Kind.
CATEGORY_KINDS: dict[str, Kind] = {
    "cpu_op": Kind.CPU_OP,
    "operator": Kind.CPU_OP,
    "user_annotation": Kind.USER_ANNOTATION,
    "cuda_runtime": Kind.RUNTIME,
    "runtime": Kind.RUNTIME,
    "cuda_driver": Kind.DRIVER,
    "python_function": Kind.PYTHON,
    "kernel": Kind.KERNEL,
    "gpu_memcpy": Kind.MEMCPY,
    "memcpy": Kind.MEMCPY,
    "gpu_memset": Kind.MEMSET,
    "memset": Kind.MEMSET,
    "cuda_sync": Kind.GPU_SYNC,
    "gpu_user_annotation": Kind.GPU_ANNOTATION,
    "overhead": Kind.OVERHEAD,
    "trace": Kind.TRACE_SPAN,
}

#: Kinds that run on the host (the thread that issued them is meaningful).
HOST_KINDS = frozenset({Kind.CPU_OP, Kind.USER_ANNOTATION, Kind.RUNTIME, Kind.DRIVER, Kind.PYTHON})
#: Kinds that occupy a GPU engine: the union of their intervals is "GPU busy".
GPU_ACTIVITY_KINDS = frozenset({Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET})
#: Everything shown on a GPU row.
GPU_KINDS = GPU_ACTIVITY_KINDS | {Kind.GPU_SYNC, Kind.GPU_ANNOTATION}


class EventArgs(msgspec.Struct, omit_defaults=True, gc=False):
    """The `args` keys any analyzer reads. Unknown keys are skipped by the decoder.

    Shape args are kept as raw JSON (`msgspec.Raw`) and decoded only for the ops an
    analyzer asks about: they are the bulk of a record_shapes trace.
    """

    external_id: int | None = msgspec.field(name="External id", default=None)
    external_id_2021: int | None = msgspec.field(name="external id", default=None)
    correlation: int | None = None
    device: int | None = None
    # int on NVIDIA; AMD runtime events spell it "0x0".
    stream: int | str | None = None
    grid: list[int] | None = None
    block: list[int] | None = None
    registers_per_thread: int | None = msgspec.field(name="registers per thread", default=None)
    shared_memory: int | None = msgspec.field(name="shared memory", default=None)
    bytes: int | str | None = None  # AMD writes some as strings
    # AMD runtime events carry the launched kernel's name and copy kind/size as strings.
    kernel: str | None = None
    # Shapes (record_shapes=True); raw JSON, decoded lazily.
    input_dims: msgspec.Raw = msgspec.field(name="Input Dims", default_factory=msgspec.Raw)
    input_dims_2021: msgspec.Raw = msgspec.field(name="Input dims", default_factory=msgspec.Raw)
    input_type: msgspec.Raw = msgspec.field(name="Input type", default_factory=msgspec.Raw)
    input_strides: msgspec.Raw = msgspec.field(name="Input Strides", default_factory=msgspec.Raw)
    concrete_inputs: msgspec.Raw = msgspec.field(name="Concrete Inputs", default_factory=msgspec.Raw)
    # Python stacks: the 2021-2022 string arg, and the 2024+ python_function tree.
    call_stack: str | None = msgspec.field(name="Call stack", default=None)
    python_id: int | None = msgspec.field(name="Python id", default=None)
    python_parent_id: int | None = msgspec.field(name="Python parent id", default=None)
    # cuda_sync records (2023+): "Stream Sync", "Event Sync", "Context Sync", ...
    cuda_sync_kind: str | None = None
    # M (metadata) events: process_name / thread_name value.
    name: str | None = None
    # [memory] instant events (profile_memory=True).
    mem_bytes: int | None = msgspec.field(name="Bytes", default=None)
    total_allocated: int | None = msgspec.field(name="Total Allocated", default=None)
    total_reserved: int | None = msgspec.field(name="Total Reserved", default=None)
    device_type: int | None = msgspec.field(name="Device Type", default=None)
    device_id: int | None = msgspec.field(name="Device Id", default=None)
    addr: int | None = msgspec.field(name="Addr", default=None)
    # A collective's record (record_param_comms ops, and NCCL kernels from ~2024): kept
    # by the loader as CommArgs, so no analysis reads the file again for them.
    collective_name: str | None = msgspec.field(name="Collective name", default=None)
    in_msg_nelems: int | None = msgspec.field(name="In msg nelems", default=None)
    out_msg_nelems: int | None = msgspec.field(name="Out msg nelems", default=None)
    group_size: int | None = msgspec.field(name="Group size", default=None)
    dtype: str | None = None
    pg_name: str | int | None = msgspec.field(name="Process Group Name", default=None)
    pg_desc: str | None = msgspec.field(name="Process Group Description", default=None)
    pg_ranks: str | None = msgspec.field(name="Process Group Ranks", default=None)
    seq: int | str | None = msgspec.field(name="Seq", default=None)


class OpShapes(msgspec.Struct, frozen=True, gc=False):
    """What the model keeps of an op's args: its shape args as raw JSON bytes (b"" where
    absent), decoded by `TraceModel.op_shapes` when an analyzer asks. The loader keeps
    one record per distinct set, shared by every op that has it, and copies the bytes
    out of the decoded batch so the batch's buffer is freed."""

    input_dims: bytes = b""
    input_dims_2021: bytes = b""
    input_type: bytes = b""
    input_strides: bytes = b""
    concrete_inputs: bytes = b""


class CommArgs(msgspec.Struct, frozen=True, gc=False):
    """What one collective's record says (a `record_param_comms` op, or an NCCL kernel's
    args in traces from ~2024): its kind, message size and process group. Element counts
    are per rank: for an all-gather `in_nelems` is this rank's part and `out_nelems` the
    gathered whole; for a reduce-scatter the other way round."""

    on_gpu: bool  # an NCCL kernel's args (else a host op's)
    name: str  # the event's name (record_param_comms, ncclDevKernel_...)
    external_id: int  # -1 when absent
    correlation: int  # -1 when absent
    ts: float  # the event's own ts, µs as in the file (the loader's origin is not applied)
    collective: str  # "allreduce", "_allgather_base", "broadcast", "wait", ...
    in_nelems: int | None = None
    out_nelems: int | None = None
    group_size: int | None = None
    dtype: str | None = None  # "Float", "BFloat16", "Long", ...
    pg_name: str | None = None
    pg_desc: str | None = None
    pg_ranks: str | None = None  # a string such as "[0, 1]"
    seq: int | None = None


class RawEvent(msgspec.Struct, gc=False):
    """One Chrome trace event, with only the fields tracelens reads."""

    ph: str = ""
    name: str = ""
    cat: str = ""
    # pid/tid are ints in most vintages; 2021 GPU rows use "stream 7" and span rows
    # use "Spans"/"Traces"; 2021 CPU tids are numeric strings.
    pid: int | str = 0
    tid: int | str = 0
    # Microseconds. Integers (epoch µs) up to 2023, floats relative to
    # baseTimeNanoseconds from 2024; msgspec turns ints into floats here.
    ts: float = 0.0
    dur: float = 0.0
    args: EventArgs | None = None


class LooseEvent(msgspec.Struct):
    """Fallback record for one event whose values have unexpected types: every field is
    decoded generically, then coerced (or the event skipped) by the loader; args are
    cleaned before conversion to `EventArgs`."""

    ph: Any = ""
    name: Any = ""
    cat: Any = ""
    pid: Any = 0
    tid: Any = 0
    ts: Any = 0.0
    dur: Any = 0.0
    args: Any = None


class TraceFile(msgspec.Struct, gc=False):
    """The top level of a Kineto trace: the events and the metadata keys we know.

    Decoding the whole file in one typed pass is the fastest route; unknown top-level
    keys are skipped. Metadata values stay raw JSON and are decoded afterwards.
    """

    traceEvents: list[RawEvent] | None = None
    deviceProperties: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)
    distributedInfo: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)
    baseTimeNanoseconds: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)
    displayTimeUnit: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)
    traceName: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)
    schemaVersion: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)
    cuda_runtime_version: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)
    cuda_driver_version: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)
    cupti_version: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)
    hip_runtime_version: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)
    hip_driver_version: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)
    roctracer_version: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)
    record_shapes: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)
    with_stack: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)
    with_flops: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)
    with_modules: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)
    profile_memory: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)
    trace_id: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)
    # A benchmark harness's metadata (TraceLens traces) and tracelens capture's own.
    metadata: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)
    tracelens: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)
    # Metadata our workload scripts add (workloads/): what ran and what was measured.
    tracelens_workload: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)
    tracelens_sweep: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)
    # `tracelens capture --counters`' per-kernel counters (model/counter_metrics.COUNTERS_KEY).
    tracelens_counters: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)


class CounterProbe(msgspec.Struct):
    """Second-pass record for traces that hold counter events."""

    ph: str = ""
    name: str = ""
    ts: float = 0.0
    args: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)


class CounterTraceFile(msgspec.Struct):
    traceEvents: list[CounterProbe] | None = None


# --------------------------------------------------------------------------------------
# NVML samples written by `tracelens capture` as Chrome counter events. The capture writes
# this format and the power_throttle analyzer reads it; they share nothing but this.
# --------------------------------------------------------------------------------------
#: Every counter track name starts with this, then the CUDA device index and a space.
NVML_TRACK_PREFIX = "tracelens NVML GPU"
#: (track title, sample series key, arg name) per quantity.
NVML_TRACKS = (
    ("SM clock (MHz)", "sm_mhz", "MHz"),
    ("memory clock (MHz)", "mem_mhz", "MHz"),
    ("power (W)", "power_w", "W"),
    ("power limit (W)", "power_limit_w", "W"),
    ("temperature (C)", "temp_c", "C"),
    ("utilization (%)", "util_gpu_pct", "%"),
    ("clocks event reasons", "reasons", "bitmask"),
)
#: A quantity's track title by its series key ("sm_mhz" -> "SM clock (MHz)").
NVML_TRACK_TITLE: dict[str, str] = {key: title for title, key, _ in NVML_TRACKS}
#: NVML clocks-event reason bits (nvmlClocksEventReason*, formerly ThrottleReasons).
NVML_REASON_BITS: dict[int, str] = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
