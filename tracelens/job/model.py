"""What the per-rank map of a job reads and returns: small, serialisable msgspec
Structs (they cross process and network boundaries under Dask, and pickling them to a
worker and back is cheap). The job report made of them is the contract's
(tracelens.report.job_report).

Times: a rank's own times are µs from its trace's first event (as in its TraceModel);
`origin_us` turns them into its clock's epoch µs. Clocks of different hosts differ:
the job analysis aligns them (see tracelens.job.analyze).
"""

from __future__ import annotations

import msgspec

from tracelens.report.job_report import FindingBrief, LedgerShare, StepTime


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
    step: int  # the number of the analysed step it falls in (its window's own steps), -1 if none
    start_us: float  # when this rank got there with its data (its kernel starts, or gloo's exchange can)
    end_us: float  # when it finished (ranks finish a synchronising collective together)
    bytes: int  # nccl-tests' message size S (derive/collectives.py), 0 when the trace does not say
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
    #: The rank's program, for "ranks from different programs" (tracelens/derive/compare.py):
    #: its heaviest kernels by GPU time and top-level ops (with shapes) by count, as shares.
    program_kernels: dict[str, float] = {}
    program_ops: dict[str, float] = {}


class RankFailure(msgspec.Struct, frozen=True):
    file: str
    name_rank: int | None
    error: str
