"""The finished report: everything a renderer may show, as plain serializable data.

Renderers (tracelens.render) see only a `Report`; they never read the trace. The JSON
output is this structure encoded as-is, so its field names are a contract (see
README.md, "JSON output").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from tracelens.report.enums import (
    ActivityKind,
    Bound,
    Category,
    Cause,
    QuestionId,
    QuestionStatus,
    ReportUnit,
    StartupKind,
    UncoveredReason,
    WindowSource,
)
from tracelens.report.findings import Finding, PySource
from tracelens.report.snapshot_report import SnapshotSummary

SCHEMA_VERSION = 2


@dataclass(frozen=True)
class TraceInfo:
    path: str
    file_name: str
    file_bytes: int
    json_bytes: int
    n_events: int
    vintage: str
    vendor: str
    gpu_name: str
    gpu_count: int
    compute_capability: str
    num_sms: int | None
    versions: dict[str, str]
    rank: int | None
    world_size: int | None
    span_us: float
    steps: tuple[int, ...]
    has_shapes: bool
    has_python_stacks: bool
    has_memory_events: bool
    has_clock_samples: bool
    notes: tuple[str, ...]
    #: A device that is not a CUDA/ROCm GPU ("MTIA (ARTEMIS)"): its activity is in the trace
    #: but the GPU analyses do not apply. Empty for GPU and CPU-only traces.
    accelerator: str = ""


@dataclass(frozen=True)
class LedgerEntry:
    """One cause's part of a window: the entries of a window add up to all of it."""

    cause: Cause
    time_us: float
    share: float  # of the window


@dataclass(frozen=True)
class TimeSplit:
    """The ledger of one window (the whole analysed window, or one step)."""

    window_us: float
    busy_us: float
    idle_us: float
    ledger: tuple[LedgerEntry, ...]

    def get(self, cause: str) -> float:
        return sum(e.time_us for e in self.ledger if e.cause == cause)


@dataclass(frozen=True)
class StepRow:
    step: int
    start_us: float
    split: TimeSplit


@dataclass(frozen=True)
class GpuTimeSummary:
    device: int | None
    windowed_by_steps: bool
    window_start_us: float
    window_end_us: float
    total: TimeSplit
    steps: tuple[StepRow, ...]
    other_devices: tuple[tuple[int, TimeSplit], ...] = ()
    comm_us: float = 0.0  # collective kernel time, overlapped or not
    comm_overlapped_us: float = 0.0
    launch_regions: int = 0


@dataclass(frozen=True)
class StartupItem:
    what: StartupKind
    time_us: float
    count: int
    detail: str


@dataclass(frozen=True)
class WindowInfo:
    """Which part of the trace was analysed, and why; what came before is start-up."""

    start_us: float
    end_us: float
    source: WindowSource
    steps: int
    startup_us: float
    reason: str
    excluded_steps: tuple[int, ...] = ()
    startup: tuple[StartupItem, ...] = ()


@dataclass(frozen=True)
class StreamBusy:
    """One GPU stream's busy time per timeline bin (its kernels, copies and memsets, merged)."""

    label: str  # "stream 7", or "other streams" for those folded past the cap
    stream: int | None  # None for the folded rest
    busy_us: tuple[float, ...]  # per bin, at most the bin's width (same bins as by_cause)


@dataclass(frozen=True)
class Timeline:
    """The timeline picture's data: per-bin fractions of each ledger cause and host sync
    marks (µs from the trace start)."""

    start_us: float
    end_us: float
    by_cause: dict[str, tuple[float, ...]]  # every Cause
    syncs: tuple[float, ...]  # at most MAX_SYNC_MARKS, evenly sampled from all of them
    steps: tuple[tuple[int, float, float], ...]
    #: Host sync returns in each bin, all of them counted (`syncs` may be a sample).
    sync_counts: tuple[int, ...] = ()
    #: Busy µs per bin of each stream of the primary GPU with busy time, the busiest first
    #: (at most MAX_STREAMS, the rest folded into one "other streams" row); empty with one stream.
    streams: tuple[StreamBusy, ...] = ()


@dataclass(frozen=True)
class ClockTimeline:
    """NVML samples (from `tracelens capture`) at the timeline's bin centres."""

    start_us: float
    end_us: float
    sm_mhz: tuple[float, ...]
    power_w: tuple[float, ...]
    temp_c: tuple[float, ...]
    max_sm_mhz: float
    power_limit_w: float


@dataclass(frozen=True)
class MemoryTimeline:
    """Device memory over the analysed window, from `[memory]` events (profile_memory):
    the largest allocated and reserved bytes in each of `len(ts)` equal bins."""

    start_us: float
    end_us: float
    ts: tuple[float, ...]  # bin centres
    allocated: tuple[float, ...]
    reserved: tuple[float, ...]  # zeros when the trace has no totals (before ~2022)
    relative: bool  # no totals in the trace: allocated is relative to the recording's start
    peak_allocated: float
    peak_reserved: float
    allocated_per_step: float  # churn: bytes allocated per step
    freed_per_step: float
    fragmentation_at_peak: float  # reserved - allocated at the allocated peak
    top_ops: tuple[tuple[str, float], ...] = ()  # op, bytes it allocated in the window


@dataclass(frozen=True)
class RooflinePoint:
    name: str
    time_us: float
    intensity: float  # FLOP per byte
    flops_per_s: float
    bytes_per_s: float
    roof_share: float
    bound: Bound
    family: str
    dtype: str
    roof: str = ""  # the roof it was judged against
    roof_value: float = 0.0  # datasheet FLOP/s or bytes/s of that roof


@dataclass(frozen=True)
class UncoveredOp:
    """Kernel time the roofline could not model, by launching op and why."""

    op: str
    reason: UncoveredReason  # no_op: no launching op in the trace; no_shapes: record_shapes off
    time_us: float
    share: float  # of non-communication kernel time


@dataclass(frozen=True)
class RooflineSummary:
    device: str
    source: str
    peak_flops: dict[str, float]  # the ceilings used, per dtype
    bandwidth: float  # bytes/s used
    datasheet_bandwidth: float
    coverage: float  # share of non-communication kernel time with a FLOP/byte model
    communication_us: float
    model_errors: int
    points: tuple[RooflinePoint, ...]
    # Share of kernel time with a bound: kernel classes modelled on some calls lend their
    # rates to the rest (calls launched before the profiling window, for one).
    classified: float = 0.0
    estimated_share: float = 0.0  # foreach kernels sized from their launch grid
    uncovered: tuple[UncoveredOp, ...] = ()
    measured: dict[str, float] = field(default_factory=dict)  # sustained ceilings measured on this GPU


@dataclass(frozen=True)
class KernelRow:
    name: str
    count: int
    total_us: float
    mean_us: float
    share: float  # of the device's busy time
    kind: ActivityKind
    bound: Bound = "unknown"
    roof: str = ""  # the roof it was judged against: "memory bandwidth", "bf16 tensor cores", ...
    roof_value: float = 0.0  # that roof's datasheet value (FLOP/s or bytes/s)
    roof_share: float = 0.0  # achieved fraction of that roof (never above 1: above is a model error)
    measured_ceiling: float = 0.0  # sustained ceiling measured for that roof on this GPU, 0 if none
    # Time in launches latency-bound on their own (too short, too small a grid), counted as
    # latency in the ledger whatever `bound` says.
    latency_us: float = 0.0


@dataclass(frozen=True)
class KernelSource:
    """Where a kernel is defined, for the kernels whose source is a file a user can edit
    (Inductor-generated or hand-written Triton, a compiled extension's CUDA)."""

    kernel: str  # as in kernels[].name
    kind: Literal["inductor", "triton", "extension"]
    file: str  # the defining file as the trace names it (the compiled module, the .py, the .cu); "" if unknown
    line: int | None  # the definition's line, when the file was readable here
    function: str  # the kernel's function
    found: bool  # the file was read and the definition found in it
    launched_from: PySource | None  # the Python frame that launched it
    library: str = ""  # extension: the custom op that launched it (e.g. _C::rms_norm)


@dataclass(frozen=True)
class OpRow:
    name: str
    count: int
    gpu_us: float  # GPU time of the kernels this top-level op launched
    host_us: float  # host time inside this op
    kernels: int
    top_kernel: str
    source: PySource | None = None


@dataclass(frozen=True)
class SourceRow:
    source: PySource
    gpu_us: float  # GPU time of kernels launched from here
    kernels: int
    cost_us: float  # time findings attribute to this source


@dataclass(frozen=True)
class MisalignedDim:
    """A leading dimension (or the output's N) that is not a multiple of 16 bytes."""

    operand: Literal["A", "B", "C"]  # C: the output
    dim: Literal["M", "N", "K"]  # in torch's terms, C[M, N] = A[M, K] @ B[K, N]
    value: int


@dataclass(frozen=True)
class MatmulRow:
    """One matmul shape of the trace as the report shows it (JSON `matmuls[]`)."""

    op: str
    m: int
    n: int
    k: int
    batch: int
    dtype: str
    layout: str
    calls: int
    kernel: str
    time_us: float
    tflops: float
    aligned: bool
    misaligned: tuple[str, ...]  # the misaligned dimensions in words (misaligned_dims as data)
    fallback_kernel: bool
    tile: str  # "256x128" as the kernel names it, "" if unknown
    tile_source: str  # "name", "grid" or ""
    tiles: int
    sms: int
    ctas_per_sm: int
    slots: int
    waves: float
    last_wave_fill: float
    wave_efficiency: float
    source: PySource | None = None
    misaligned_dims: tuple[MisalignedDim, ...] = ()  # what `misaligned` says, as data


@dataclass(frozen=True)
class Question:
    """One step of the diagnostic order and its answer for this trace."""

    number: int
    id: QuestionId
    question: str
    categories: tuple[Category, ...]
    status: QuestionStatus  # unknown: no peaks to judge the kernels by
    time_us: float
    share: float
    answer: str
    finding_indexes: tuple[int, ...] = ()


@dataclass(frozen=True)
class Summary:
    primary: Category | None
    headline: str
    primary_time_us: float
    primary_share: float
    primary_advice: str
    primary_gain_us: float
    per_step_us: float = 0.0  # the analysed window over its steps (0 without steps)
    primary_gain_per_step_us: float = 0.0
    #: The one unit every per-unit number of the report is in: "step" (the user's
    #: steps), "iteration" (a loop tracelens detected) or "window" (neither).
    unit: ReportUnit = "step"
    # Things worth knowing that are not findings (idle the host did not cause, profiler cost).
    notes: tuple[str, ...] = ()
    #: What the step (the report's unit) should take after the primary's first fix, and
    #: its range (issue 25): checked by `tracelens diff` on a capture with the fix.
    predicted_step_us: float = 0.0
    predicted_step_low_us: float = 0.0
    predicted_step_high_us: float = 0.0
    prediction_basis: str = ""  # replay or estimate; "" without a primary
    #: The step without torch.profiler's own host cost, now and after the first fix (0
    #: where the profiler cost under 5% of it: derive/profiler_cost.py).
    unprofiled_step_us: float = 0.0
    unprofiled_predicted_step_us: float = 0.0


@dataclass(frozen=True)
class MeasuredKernel:
    """One kernel name's hardware counters (issue 35). A `counted_*` field is null when the
    trace's counters did not count it (no DRAM counters in a range-profiler trace, tensor-core
    FLOPs without their counters); timeline fields are null when the trace has no kernel events."""

    name: str
    op: str  # the op that launched it (the first measured launch's)
    launches: int  # launches with counter values (measured, or of a measured signature)
    measured: int  # of those, launches the counters pass measured itself
    counted_flops: float | None
    flops_by_precision: dict[str, float]  # FLOPs per launch by "tensor bf16", "fp32", "fp16", "fp64", ...
    counted_dram_bytes: float | None  # DRAM read + written
    counted_instructions: float | None  # thread instructions (warp instructions x 32)
    counted_intensity: float | None  # FLOP per DRAM byte
    timeline_us: float | None  # the name's time on the timeline in the window
    counted_flops_per_s: float | None
    counted_bytes_per_s: float | None
    of_compute_roof: float | None  # achieved fraction of its compute roof (FLOPs at each unit's peak, or issue)
    of_dram_roof: float | None  # ... of the DRAM bandwidth roof
    bound: Bound
    roof: str = ""
    replay_us: float | None = None  # mean duration in the counters' replay: not its time on the timeline


@dataclass(frozen=True)
class ModelCheckRow:
    """The roofline's FLOP/byte model beside the counters, per kernel name, summed over the
    launches that have both."""

    name: str
    op: str
    launches: int
    model_flops: float
    counted_flops: float | None
    model_bytes: float
    counted_dram_bytes: float | None
    model_to_counted_flops: float | None  # 1: the model counts what the GPU did
    model_to_counted_bytes: float | None


@dataclass(frozen=True)
class CountersSummary:
    """Per-kernel hardware counters the trace holds, and how the report used them."""

    source: str  # "ncu" (tracelens capture --counters) or "kineto" (CUPTI range profiler)
    tool: str
    timeline: bool  # the trace has kernel events: counters paired with them, rates from their times
    counted_steps: tuple[int, int] | None  # ProfilerSteps the counters were taken in
    records: int  # launches measured
    paired: int  # of those, paired with a kernel (timeline) or a launch call (no timeline)
    measured_share: float  # share of the window's non-communication kernel time with counter values
    cache_control: str  # "all": caches flushed before each replayed kernel (DRAM bytes from cold caches)
    kernels: tuple[MeasuredKernel, ...]
    checks: tuple[ModelCheckRow, ...] = ()
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Report:
    schema_version: int
    tool: str
    tool_version: str
    generated_at: str
    trace: TraceInfo
    summary: Summary
    window: WindowInfo
    ledger: tuple[LedgerEntry, ...]
    gpu_time: GpuTimeSummary
    timeline: Timeline | None
    clocks: ClockTimeline | None
    questions: tuple[Question, ...]
    findings: tuple[Finding, ...]
    kernels: tuple[KernelRow, ...]
    ops: tuple[OpRow, ...]
    sources: tuple[SourceRow, ...]
    matmuls: tuple[MatmulRow, ...] = ()
    roofline: RooflineSummary | None = None
    load_seconds: float = 0.0
    analysis_seconds: float = 0.0
    extra: dict[str, str] = field(default_factory=dict)
    memory: MemoryTimeline | None = None
    snapshot: SnapshotSummary | None = None  # a memory snapshot beside the trace
    kernel_sources: tuple[KernelSource, ...] = ()  # where the listed kernels are defined, when a file
    graphs: GraphSummary | None = None  # kernels replayed from CUDA graphs, with what their capture says
    serving: ServingSummary | None = None  # serving steps' batches and attention sizes
    counters: CountersSummary | None = None


# -- CUDA-graph replays and serving steps -------------------------------------------------
@dataclass(frozen=True)
class GraphModuleRow:
    """Replayed GPU time of one module (or annotated region) and autograd phase."""

    module: str  # "" when the capture named none
    phase: Literal["forward", "backward", "optimizer", ""]
    time_us: float
    share: float  # of the window's replayed GPU time
    kernels: int  # replayed events
    top_kernel: str
    op: str  # the op launching most of that time at capture ("" when unknown)
    source: PySource | None


@dataclass(frozen=True)
class GraphCollectiveRow:
    """A collective captured into a graph, from its annotation (or capture op)."""

    collective: str
    group: str  # process group description or name
    group_size: int
    dtype: str
    bytes: float  # per call: In msg nelems x the dtype's size
    calls: int
    time_us: float  # GPU time of its kernels in the window
    algbw_gbps: float  # bytes over the median call's time


@dataclass(frozen=True)
class GraphSummary:
    replays: int  # graph launches in the window
    replayed_us: float  # GPU time of their kernels, copies and memsets in the window
    replayed_share: float  # of the window's GPU busy time
    annotated_share: float  # of replayed time with a baked-in annotation
    captured_share: float  # of replayed time matched to a capture trace's launch
    modelled_share: float  # of replayed kernel time the roofline models
    inline_annotated: bool
    captures: tuple[str, ...]
    modules: tuple[GraphModuleRow, ...]
    collectives: tuple[GraphCollectiveRow, ...]
    notes: tuple[str, ...]


@dataclass(frozen=True)
class ServingPhaseRow:
    phase: Literal["prefill", "decode", "mixed", "idle"]
    steps: int
    mean_us: float  # host span of the step annotation, mean
    requests: float  # mean per step
    tokens: float  # mean per step
    sum_qk: float  # mean Σ N_Q·N_KV per step
    sum_kv: float  # mean Σ N_KV per step


@dataclass(frozen=True)
class ServingSummary:
    framework: Literal["sglang", "vllm", "atom"]
    steps: int
    with_sizes: int  # steps whose annotation has the attention sums
    phases: tuple[ServingPhaseRow, ...]
    attention_us: float  # GPU time of attention kernels in the steps
    attention_modelled_share: float  # of it with a roofline
    cache_use: float  # Σ N_KV over the cache positions attention read (static caches; 0 when not known)
    notes: tuple[str, ...]
