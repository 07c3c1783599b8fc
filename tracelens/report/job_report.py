"""The job report: many ranks' traces read as one job (see README.md, "Many ranks"),
and the parts of it that the per-rank map returns. msgspec Structs, so the JSON output
is these encoded as-is and pickling to a Dask worker and back is cheap.

Times: a rank's own times are µs from its trace's first event; `origin_us` turns them
into its clock's epoch µs. Clocks of different hosts differ: the job analysis aligns
them (see tracelens.job.analyze).
"""

from __future__ import annotations

import msgspec

from tracelens.report.enums import Category, Cause, Severity

JOB_SCHEMA_VERSION = 1


class StepTime(msgspec.Struct, frozen=True):
    step: int
    start_us: float
    span_us: float


class StepLate(msgspec.Struct, frozen=True):
    step: int
    late_us: float


class LedgerShare(msgspec.Struct, frozen=True):
    cause: Cause
    time_us: float
    share: float


class FindingBrief(msgspec.Struct, frozen=True):
    category: Category
    severity: Severity
    title: str
    time_us: float
    share: float
    advice: str


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
    #: per step: all of its own extra work before those calls (every cause that is not
    #: waiting); below cost_us, the rest of its lateness is delay its trace does not show
    own_us: float = 0.0


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
