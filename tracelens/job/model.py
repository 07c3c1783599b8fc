"""The data of a job report: what the per-rank map returns (small, serialisable: it
crosses process and network boundaries under Dask) and what the job analysis makes of
the ranks together. msgspec Structs, so the JSON output is these encoded as-is and
pickling to a Dask worker and back is cheap.

Times: a rank's own times are µs from its trace's first event (as in its TraceModel);
`origin_us` turns them into its clock's epoch µs. Clocks of different hosts differ:
the job analysis aligns them (see tracelens.job.analyze).
"""

from __future__ import annotations

import msgspec

JOB_SCHEMA_VERSION = 1


class RankInput(msgspec.Struct, frozen=True):
    """One trace file of the job, before it is read."""

    path: str  # a local path, or an fsspec URL (s3://, gs://, hf://, ...)
    name_rank: int | None  # the rank the file name gives (rank3, rank-3, _3.json)


class Collective(msgspec.Struct, frozen=True):
    """One collective call as one rank saw it."""

    kind: str  # all_reduce, all_gather, reduce_scatter, all_to_all, broadcast, barrier, send_recv, other
    group: str  # process group name, "default" when the trace does not say
    seq: int  # the group's sequence number (record_param_comms), else -1
    order: int  # its index among this rank's calls of the same group and kind
    step: int  # ProfilerStep number it falls in, -1 if none
    start_us: float  # when this rank got there (the collective kernel or host op starts)
    end_us: float  # when it finished (ranks finish a synchronising collective together)
    bytes: int  # message bytes (the input), 0 when the trace does not say
    source: str  # "kernel" (NCCL/RCCL on the GPU) or "host" (gloo, c10d op)
    exposed_us: float  # the ledger's communication time inside the call (no other GPU work)
    #: The ledger's causes over this rank's time since its previous collective ended:
    #: what it was doing before it arrived (cause -> µs).
    before: dict[str, float] = {}
    #: The same span on the launching thread: host_ops, data_loading, host_python (µs)
    #: (derive/host_time.py): the reason a rank without a GPU ledger gives.
    before_host: dict[str, float] = {}
    group_size: int = 0  # ranks in the group, 0 when the trace does not say
    size_source: str = ""  # where `bytes` came from (derive/collectives.py), "" unknown
    backend: str = ""
    #: With stacks: the Python frame holding most of the host_python time before it.
    hot_frame: str = ""


class StepTime(msgspec.Struct, frozen=True):
    step: int
    start_us: float
    span_us: float


class StepLate(msgspec.Struct, frozen=True):
    step: int
    late_us: float


class LedgerShare(msgspec.Struct, frozen=True):
    cause: str
    time_us: float
    share: float


class FindingBrief(msgspec.Struct, frozen=True):
    category: str
    severity: str
    title: str
    time_us: float
    share: float
    advice: str


class RankSummary(msgspec.Struct, frozen=True):
    """The single-trace pipeline's result for one rank, reduced to what the job needs."""

    file: str
    rank: int | None  # from distributedInfo, else the file name
    rank_source: str  # "distributedInfo", "file name" or "none"
    world_size: int | None
    backend: str
    host_name: str
    gpu_name: str
    origin_us: float
    window_start_us: float
    window_end_us: float
    n_steps: int
    steps: list[StepTime]
    ledger: list[LedgerShare]
    findings: list[FindingBrief]
    collectives: list[Collective]
    throttled: bool  # the power_throttle analyzer found lower clocks on this rank
    load_seconds: float
    analysis_seconds: float
    notes: list[str] = []
    report_files: list[str] = []  # per-rank reports written on request
    step_source: str = ""  # the window's: "steps" (ProfilerStep, the same numbers on every rank), "detected", ...
    #: Python frames and ops the profiler recorded per analysed step (job/overhead.py).
    events_per_step: dict[str, float] = {}
    with_stack: bool = False
    run_token: str = ""  # the torchrun run token tracelens capture wrote, "" when none


class RankFailure(msgspec.Struct, frozen=True):
    file: str
    name_rank: int | None
    error: str


# -- the job report (the JSON contract: see README.md, "Many ranks") ----------------------


class Straggler(msgspec.Struct, frozen=True):
    rank: int
    late_share: float  # fraction of matched collectives it arrived last at
    #: per step: what the job loses to it: its arrival minus the next latest rank's,
    #: summed over the calls it was last at (what the others would not wait, were it on time)
    cost_us: float
    #: a ledger cause id (host_bound, gpu_busy_compute, ...), a host cause of a rank without
    #: a GPU ledger (host_python, data_loading, host_ops), power_throttle or unknown
    reason: str
    reason_us: float  # per step: how much more of that cause it had before the collectives
    advice: str
    late_count: int
    matched: int
    reason_label: str = ""  # the reason in plain words, with its detail (the Python frame)
    #: per step: how much more the profiler itself costs this rank than the median other
    #: rank (from the events each recorded: job/overhead.py), an upper bound
    profiler_us: float = 0.0
    also: str = ""  # a second cause of its lateness, in words with its amount, when one is large


class JobSummary(msgspec.Struct, frozen=True):
    ranks: int
    world_size: int | None
    steps: int
    alignment_error_us: float | None
    alignment: str  # how the clocks were aligned, and how well
    backend: str
    headline: str
    step_us: float  # median over ranks of the median step
    lost_to_slowest_us: float  # per step: the last arrival minus the one before, summed over collectives
    lost_to_skew_us: float  # per step: the last arrival minus the median one, summed over collectives
    exposed_comm_us: float  # per step, median rank: collective time past the last arrival, uncovered
    matched_collectives: int
    unmatched_collectives: int
    stragglers: list[Straggler]
    #: Ranks last most often whose own ledger does not explain it (see the advice).
    late_unexplained: list[Straggler]
    problems: list[str]  # missing, duplicate, mismatched or unreadable ranks
    counted_collectives: int = 0  # matched calls inside every rank's analysed window


class RankRow(msgspec.Struct, frozen=True):
    rank: int
    file: str
    step_us: float  # median step
    ledger: list[LedgerShare]
    steps: list[StepTime]
    wait_us: float  # per step: time it waited at collectives for later ranks
    late_count: int
    exposed_comm_us: float  # per step
    clock_offset_us: float  # added to its clock to align it with the reference rank's
    gpu_name: str
    host_name: str
    findings: list[FindingBrief]
    report_files: list[str] = []
    #: Per step: how much later than the first rank it arrived, summed over the step's
    #: collectives (its own delay; the heat map's second picture).
    late_by_step: list[StepLate] = []
    late_us: float = 0.0  # the same, per step on average
    cause: str = ""  # its largest cause besides communication (ledger, else host-side)
    cause_label: str = ""  # the same in plain words


class CollectiveRow(msgspec.Struct, frozen=True):
    group: str
    kind: str
    count: int  # matched calls (each seen on every rank)
    bytes: int  # median message bytes of a call
    median_skew_us: float  # last arrival minus first, median over calls
    busbw_gbps: float  # bus bandwidth (NCCL's convention) over the time past the last arrival
    algbw_gbps: float
    exposed_us: float  # per step, median rank
    last_rank: int | None  # the rank most often last
    source: str
    group_size: int = 0
    size_source: str = ""  # where the message sizes came from (derive/collectives.py)
    bandwidth_note: str = ""  # why a bandwidth is not given (not measurable, above the link's peak)


class FailedRank(msgspec.Struct, frozen=True):
    file: str
    rank: int | None
    error: str


class JobReport(msgspec.Struct, frozen=True):
    schema_version: int
    tool: str
    tool_version: str
    generated_at: str
    job: JobSummary
    ranks: list[RankRow]
    collectives: list[CollectiveRow]
    failed: list[FailedRank]
    map_seconds: float = 0.0
    scheduler: str = ""
