"""Across ranks: identity, clock alignment, collective matching, skew, stragglers and the
job's headline, from the RankSummaries the map returned (never from the traces).

- Identity: a rank's number comes from distributedInfo, else its file name. Duplicates
  (the first file is kept), ranks without a number, world sizes or backends that differ
  (not one job), ranks of another run (tracelens capture's run token) and ranks missing
  from 0..world_size-1 are reported.
- Matching: a collective is one logical call of one process group on every rank
  (derive/collectives.py). With the group's sequence number (record_param_comms' `Seq`)
  the key is (group, seq); else, when every rank's steps are ProfilerStep numbers (the
  same on every rank), (group, kind, step, index in the step); else (group, kind, index
  in the trace). Only calls seen on every rank, inside every rank's analysed window, count.
- Clocks: ranks on different hosts have different clocks. A synchronising collective
  (all-reduce, all-gather, reduce-scatter, all-to-all, barrier) ends on every rank at
  about the same moment, since none can finish before the last one's data arrives. Each
  rank's offset to the reference rank (the lowest) is the median, over matched calls, of
  its end minus the reference's end; the alignment error is the median distance of
  those ends from their offset, i.e. how far "they end together" held after alignment.
- Per call: arrival = when a rank could start exchanging (its collective kernel starts,
  or gloo's worker thread has its data); the last to arrive is that call's straggler. What
  the job loses to it is its arrival minus the next latest one's (the call could have
  started then): a straggler's cost is that, summed over the calls it was last at, per
  step. The time past the last arrival moves the data: algbw = bytes / that time, busbw
  = algbw x nccl-tests' factor for the kind and group size, checked against the GPU's
  link peak and against the clock alignment's error.
- A straggler's reason: what it did more of than the others between its previous
  collective and the ones it was late to: its GPU ledger's causes, and its launching
  thread's host time (torch ops, data loading, Python outside ops: a CPU-only rank's
  reason). When the ranks recorded very different numbers of events (one busy in Python
  under with_stack), the profiler's own share of the lateness is said (job/overhead.py).
"""

from __future__ import annotations

import datetime as _dt
from collections import Counter, defaultdict
from dataclasses import dataclass, field

import numpy as np

from tracelens import __version__
from tracelens.derive.collectives import bus_factor
from tracelens.derive.host_time import HOST_CAUSES
from tracelens.domain import fmt_us
from tracelens.job import overhead
from tracelens.job.model import Collective, RankFailure, RankSummary
from tracelens.model.links import link_peak
from tracelens.report.job_report import (
    JOB_SCHEMA_VERSION,
    CollectiveRow,
    FailedRank,
    JobReport,
    JobSummary,
    RankRow,
    StepLate,
    Straggler,
)

#: Collectives whose ranks finish together (used to align clocks). A broadcast or a
#: point-to-point send can end on the sender before the receiver has it.
SYNC_KINDS = frozenset({"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "barrier", "send_recv"})
#: A call whose arrivals spread less than this has no straggler worth naming: clocks are
#: aligned to tens of µs at best (CUPTI's timestamps, a kernel's launch jitter).
SKEW_MIN_US = 50.0
#: A rank is a straggler when it arrives last at least at this share of the matched
#: collectives (so a rank last by chance in a balanced job is not one)...
STRAGGLER_LATE_SHARE = 0.5
#: ...and it costs the job at least this share of a step: the medium-severity share of
#: single-trace findings (a few percent is worth a change).
STRAGGLER_MIN_STEP_SHARE = 0.03
#: ...and at least this much per step: ranks that share one GPU with the same work arrive
#: up to 1.5 ms apart, the same one last each time (H200: sample_traces/ranks_balanced,
#: three ranks, 1.5 ms per step; workloads/ranks/plain_gloo.py --slow none, two ranks,
#: 1.3 ms), which is the processes' scheduling, not a straggler.
STRAGGLER_MIN_US = 2000.0
#: Causes that are waiting, not work of the rank's own: a rank late with only more of
#: these before its collectives waits for something its trace does not show (another
#: process on its GPU, a slower group's collective), so it is not named a straggler.
WAIT_CAUSES = frozenset({"communication", "idle_other", "profiler"})
#: A straggler's own extra work (its reason and every other cause that is not waiting)
#: must account for at least this share of what it costs the job; else its lateness is
#: unexplained by its trace. Measured: on the loaded 2-core machine (load ~14) a run of
#: ddp_cpu.py had rank 1 last at 38 of 40 calls, 57.9 ms late per step, with 19.2 ms of
#: extra Python (its real 20 ms) and 9.6 ms of extra host ops: 50% of the lateness, the
#: rest the host's scheduling. At a half it was called "no more work than the others".
EXPLAINED_SHARE = 0.25
#: Below this share of the cost explained, the report says how much of it the rank's
#: own extra work accounts for and that the rest is delay its trace does not show.
MOSTLY_EXPLAINED_SHARE = 0.75
#: A step shorter than this share of the rank's median step is a cut one, not counted
#: in per-step figures (a whole step of a steady loop is within a few % of the median).
CUT_STEP_SHARE = 0.5
#: The alignment is too poor to tell who arrived last when the matched calls still end
#: further apart than this share of their median duration: the calls matched are not the
#: same calls (traces sampled or cut differently), so no straggler is named.
ALIGN_POOR_SHARE = 0.25
#: A second cause of a straggler's lateness is named beside the first when it holds at
#: least this share of the rank's own extra work.
SECOND_CAUSE_SHARE = 0.25
#: Ranks whose clocks, before alignment, agree within this (and a quarter of a call) share
#: one clock (one host: Kineto's times are the host's wall clock): on a loaded host their
#: gloo exchanges end up to tens of ms apart (ddp_cpu.py on the 2-core machine: 7.8 ms
#: median, 47 ms worst, with clocks 0.3 ms apart), which says nothing about the calls.
#: (Collective kernels do end together: HTA's sampled rank pair, ends 65 ms apart with
#: clocks 0.2 ms apart, are not the same calls.)
SAME_CLOCK_US = 2000.0
#: A transfer time shorter than this many alignment errors is not measured: the clocks
#: are not known that well (its bandwidth is reported as not measurable).
MOVED_MIN_ERRORS = 2.0

#: Every reason id in plain words (ledger causes, host causes, and the rest).
REASON_WORDS = {
    "host_bound": "host-bound work",
    "host_python": "Python outside torch ops",
    "data_loading": "data loading",
    "host_ops": "torch ops on the host",
    "host_sync": "host syncs",
    "launch_overhead": "kernel-launch overhead",
    "allocation": "device-memory allocation",
    "compilation": "torch.compile compiling",
    "power_throttle": "lower GPU clocks (throttling)",
    "gpu_busy": "more GPU work",
    "gpu_busy_compute": "more GPU work (compute-bound kernels)",
    "gpu_busy_memory": "more GPU work (memory-bound kernels)",
    "gpu_busy_latency": "more GPU work (latency-bound kernels)",
    "gpu_busy_unknown": "more GPU work (kernels without a model)",
    "gpu_busy_copy": "more GPU copies",
    "communication": "waiting in another collective",
    "idle_other": "GPU waits outside its own work (streams, events)",
    "profiler": "the profiler's own overhead",
    "harness": "the benchmark harness's own work (cache flush, warm-up)",
    "unknown": "unknown",
}

#: What to do about each reason.
_ADVICE = {
    "host_bound": (
        "its host is busy before the collective while its GPU idles (data loading, preprocessing, Python work "
        "on that rank): give its DataLoader more workers (num_workers, pin_memory=True, prefetch_factor), move "
        "the preprocessing off the training loop, and check that rank's input pipeline and storage"
    ),
    "host_python": (
        "its launching thread runs Python outside any torch op before the collective (preprocessing, a "
        "tokenizer, logging, a Python loop on that rank): move that work off the training loop (a DataLoader "
        "worker, a background thread), do it on every rank alike, or vectorise it"
    ),
    "data_loading": (
        "it waits for its DataLoader before the collective: give it more workers (num_workers, "
        "persistent_workers=True, prefetch_factor), pin_memory=True, and check that rank's storage and input files"
    ),
    "host_ops": (
        "its launching thread runs more torch ops on the host before the collective (CPU tensors, "
        "preprocessing in torch): move them to the device or out of the step, or balance that work across ranks"
    ),
    "host_sync": (
        "it blocks in a host sync (.item(), .cpu(), a mask index) before the collective: keep the value on "
        "the device or read it after the step"
    ),
    "launch_overhead": (
        "its host launches kernels more slowly than the GPU runs them: fuse small ops, use CUDA graphs or "
        "torch.compile, and check for a slower or busier CPU on that rank's host"
    ),
    "allocation": "it allocates device memory before the collective (cudaMalloc): reuse buffers, set "
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
    "compilation": "it is compiling (torch.compile) while the others wait: warm up every rank the same way, "
    "mark dynamic shapes, or cache the compiled artifacts",
    "power_throttle": "its GPU runs the same work at lower clocks (power or thermal throttling): check that "
    "GPU's cooling, power cap and clocks (nvidia-smi -q -d PERFORMANCE) against its peers",
    "gpu_busy": (
        "it runs more GPU work than the others before the collective: load imbalance. Give every rank the "
        "same amount of work (equal batch sizes, sequence lengths bucketed or padded alike, even shards of "
        "embedding tables or pipeline stages)"
    ),
    "communication": "it waits in another collective first (another process group is slower): look at that "
    "group's straggler",
    "idle_other": "its GPU waits on something outside the ledger's causes (a stream or event wait): compare "
    "its per-rank report with a fast rank's",
    "unknown": "its trace does not say why: compare its per-rank report (--per-rank) with a fast rank's",
}


def reason_words(reason: str) -> str:
    return REASON_WORDS.get(reason, reason.replace("_", " "))


@dataclass
class _Instance:
    key: tuple[object, ...]
    group: str
    kind: str
    source: str
    ranks: list[int]
    arrive: np.ndarray  # aligned epoch µs
    end: np.ndarray
    calls: list[Collective]
    counted: bool  # inside every rank's analysed window
    bytes: int = 0
    last: int = -1
    skew: float = 0.0
    waits: np.ndarray = field(default_factory=lambda: np.zeros(0))
    lost: float = 0.0  # the last arrival minus the next latest


def _keyed(s: RankSummary, by_step: bool) -> dict[tuple[object, ...], Collective]:
    out: dict[tuple[object, ...], Collective] = {}
    in_step: dict[tuple[str, str, int], int] = defaultdict(int)
    for c in s.collectives:
        if c.seq >= 0:
            key: tuple[object, ...] = (c.group, "seq", c.seq)
        elif by_step and c.step >= 0:
            k = (c.group, c.kind, c.step)
            key = (c.group, c.kind, "step", c.step, in_step[k])
            in_step[k] += 1
        else:
            key = (c.group, c.kind, "order", c.order)
        out.setdefault(key, c)
    return out


def _identity(results: list[RankSummary | RankFailure]) -> tuple[dict[int, RankSummary], list[FailedRank], list[str]]:
    problems: list[str] = []
    failed = [FailedRank(file=r.file, rank=r.name_rank, error=r.error) for r in results if isinstance(r, RankFailure)]
    by_rank: dict[int, RankSummary] = {}
    for s in (r for r in results if isinstance(r, RankSummary)):
        if s.rank is None:
            problems.append(f"{s.file}: no rank in its distributedInfo or its file name: left out")
            continue
        if s.rank < 0:
            problems.append(
                f"{s.file}: its {s.rank_source} says rank {s.rank}, which is no rank of a job (a process outside "
                "the process group?): left out"
            )
            continue
        if s.rank in by_rank:
            problems.append(f"rank {s.rank} appears twice ({by_rank[s.rank].file} and {s.file}): the first is kept")
            continue
        by_rank[s.rank] = s
    tokens = Counter(s.run_token for s in by_rank.values() if s.run_token)
    if len(tokens) > 1:
        # Ranks captured by different runs (tracelens capture under torchrun writes its run
        # token into each trace): keep the run most ranks come from.
        keep = tokens.most_common(1)[0][0]
        for r in sorted(by_rank):
            s = by_rank[r]
            if s.run_token and s.run_token != keep:
                problems.append(f"rank {r} ({s.file}) is from another run (run token {s.run_token[:12]}): left out")
                del by_rank[r]
    for f in failed:
        problems.append(f"{f.file}{f' (rank {f.rank})' if f.rank is not None else ''} could not be read: {f.error}")
    sizes = Counter(s.world_size for s in by_rank.values() if s.world_size is not None)
    if len(sizes) > 1:
        problems.append(
            "the traces disagree on the world size ("
            + ", ".join(f"{n} say {w}" for w, n in sizes.most_common())
            + "): they may come from different jobs"
        )
    backends = Counter(s.backend for s in by_rank.values() if s.backend)
    if len(backends) > 1:
        problems.append(f"the traces disagree on the backend ({', '.join(sorted(backends))}): different jobs?")
    world = sizes.most_common(1)[0][0] if sizes else None
    if world is not None:
        missing = sorted(set(range(world)) - set(by_rank))
        if missing:
            shown = ", ".join(str(m) for m in missing[:8]) + (", ..." if len(missing) > 8 else "")
            problems.append(f"{len(missing)} of {world} ranks are missing (ranks {shown}): the job's view is partial")
        beyond = sorted(r for r in by_rank if r >= world)
        if beyond:
            problems.append(f"ranks {beyond[:8]} are beyond the world size {world}")
    origins = [s.origin_us for s in by_rank.values()]
    if origins and max(origins) - min(origins) > 3600e6:
        problems.append("the traces start more than an hour apart: they are probably not one job")
    problems.extend(_mixed(by_rank))
    return by_rank, failed, problems


def _mixed(by_rank: dict[int, RankSummary]) -> list[str]:
    """Ranks that do not compare with each other: different GPU models, different
    programs (their kernels and ops barely overlap with the other ranks')."""
    from tracelens.derive.compare import different_programs, weighted_overlap

    out: list[str] = []
    gpus = Counter(s.gpu_name for s in by_rank.values() if s.gpu_name)
    if len(gpus) > 1:
        out.append(
            "the ranks ran on different GPUs ("
            + ", ".join(f"{n} on {g}" for g, n in gpus.most_common())
            + "): a rank on a slower GPU is late for that alone, so stragglers and skew compare unlike hardware"
        )
    if len(by_rank) < 2:
        return out
    odd = []
    for r, s in sorted(by_rank.items()):
        others = [o for q, o in by_rank.items() if q != r]
        kernels: dict[str, float] = {}
        ops: dict[str, float] = {}
        for o in others:
            for k, v in o.program_kernels.items():
                kernels[k] = kernels.get(k, 0.0) + v
            for k, v in o.program_ops.items():
                ops[k] = ops.get(k, 0.0) + v
        if not (s.program_kernels or s.program_ops):
            continue
        overlap = (weighted_overlap(s.program_kernels, kernels), weighted_overlap(s.program_ops, ops), None)
        if different_programs(overlap):
            odd.append(r)
    if odd and len(odd) < len(by_rank):
        shown = ", ".join(str(r) for r in odd[:8]) + (", ..." if len(odd) > 8 else "")
        out.append(
            f"rank{'s' if len(odd) > 1 else ''} {shown} look{'' if len(odd) > 1 else 's'} like a different program: "
            "{} kernels and ops barely overlap with the other ranks' (a trace of another job in the folder?)".format(
                "their" if len(odd) > 1 else "its"
            )
        )
    elif odd:
        out.append("the ranks' kernels and ops barely overlap with each other: they look like different programs")
    return out


def _align(
    ranks: list[int], keyed: dict[int, dict[tuple[object, ...], Collective]], summaries: dict[int, RankSummary]
) -> tuple[dict[int, float], float | None, str, bool]:
    """Clock offsets (added to each rank's epoch µs) from the ends of synchronising calls."""
    ref = ranks[0]
    offsets = {r: 0.0 for r in ranks}
    if len(ranks) < 2:
        return offsets, None, "one rank: nothing to align", False
    common = set(keyed[ref])
    for r in ranks[1:]:
        common &= set(keyed[r])
    sync = [k for k in common if keyed[ref][k].kind in SYNC_KINDS]
    if not sync:
        return offsets, None, "not aligned: no synchronising collective was matched on every rank", False
    residuals: list[float] = []
    raw: list[float] = []
    for r in ranks[1:]:
        d = np.array(
            [
                (keyed[r][k].end_us + summaries[r].origin_us) - (keyed[ref][k].end_us + summaries[ref].origin_us)
                for k in sync
            ]
        )
        off = float(np.median(d))
        offsets[r] = -off
        residuals.extend(np.abs(d - off).tolist())
        raw.extend(np.abs(d).tolist())
    err = float(np.median(residuals))
    durations = [keyed[r][k].end_us - keyed[r][k].start_us for r in ranks for k in sync]
    poor = err > SKEW_MIN_US and err > ALIGN_POOR_SHARE * float(np.median(durations))
    worst = float(np.max(residuals))
    shift = max(abs(o) for o in offsets.values())
    how = (
        f"aligned on the ends of {len(sync)} synchronising collectives matched on every rank: after alignment "
        f"they end within {err:.0f} µs of each other (median; worst {fmt_us(worst)}); the largest clock offset "
        f"was {fmt_us(shift)}"
    )
    same_clock = shift < min(SAME_CLOCK_US, ALIGN_POOR_SHARE * float(np.median(durations)))
    # Only a host exchange (gloo's thread) ends late for reasons of its own; collective
    # kernels of one call end within microseconds of each other on every GPU.
    on_host = all(keyed[r][k].source == "host" for r in ranks for k in sync)
    if poor and same_clock and on_host:
        # The clocks agreed before any alignment (ranks of one host): ends that spread are
        # the exchange finishing at different moments on each rank (a loaded host delays a
        # worker thread), not calls that are not the same.
        poor = False
        how += (
            ". The clocks agreed before alignment (one host), so the spread is each rank's exchange finishing at "
            "its own moment, and arrival order is trusted"
        )
    if poor:
        how += (
            f". That is over {ALIGN_POOR_SHARE:.0%} of the calls' median duration: the calls matched by order are "
            "not the same calls on every rank (sampled or differently cut traces), so arrival order is not "
            "trusted and no straggler is named"
        )
    return offsets, err, how, poor


def analyze(
    results: list[RankSummary | RankFailure],
    *,
    map_seconds: float = 0.0,
    scheduler: str = "",
    problems: list[str] | None = None,
) -> JobReport:
    """The job report. `problems`: what the caller knows of ranks that are not in
    `results` (a torchrun capture's missing ranks and files of another run)."""
    by_rank, failed, found = _identity(results)
    problems = [*(problems or []), *found]
    ranks = sorted(by_rank)
    world = Counter(s.world_size for s in by_rank.values() if s.world_size is not None).most_common(1)
    world_size = world[0][0] if world else (len(ranks) if ranks else None)
    # ProfilerStep numbers are the same on every rank; detected iterations are not.
    by_step = bool(ranks) and all(by_rank[r].step_source in ("steps", "") for r in ranks)
    keyed = {r: _keyed(by_rank[r], by_step) for r in ranks}
    offsets, align_err, align_how, poor = (
        _align(ranks, keyed, by_rank) if ranks else ({}, None, "no rank was read", False)
    )

    # Per-step figures divide by the steps every rank analysed (the same ProfilerSteps),
    # else by the ranks' median number of steps.
    step_sets = [_whole_steps(by_rank[r]) for r in ranks]
    job_steps = sorted(set.intersection(*step_sets)) if by_step and step_sets and all(step_sets) else []
    n_steps = len(job_steps) if job_steps else int(np.median([by_rank[r].n_steps for r in ranks])) if ranks else 1
    n_steps = max(n_steps, 1)
    counted_steps = set(job_steps)

    all_keys: set[tuple[object, ...]] = set()
    for r in ranks:
        all_keys |= set(keyed[r])
    instances: list[_Instance] = []
    unmatched = 0
    for k in all_keys:
        if not all(k in keyed[r] for r in ranks):
            unmatched += 1
            continue
        calls = [keyed[r][k] for r in ranks]
        arrive = np.array([c.start_us + by_rank[r].origin_us + offsets[r] for r, c in zip(ranks, calls, strict=True)])
        end = np.array([c.end_us + by_rank[r].origin_us + offsets[r] for r, c in zip(ranks, calls, strict=True)])
        c0 = calls[0]
        inside = all(c.step >= 0 for c in calls) and (not counted_steps or c0.step in counted_steps)
        inst = _Instance(k, c0.group, c0.kind, c0.source, ranks, arrive, end, calls, inside,
                         bytes=int(np.median([c.bytes for c in calls])))  # fmt: skip
        last = int(np.argmax(arrive))
        inst.last = ranks[last]
        inst.skew = float(arrive[last] - arrive.min())
        inst.waits = arrive[last] - arrive
        srt = np.sort(arrive)
        inst.lost = float(srt[-1] - srt[-2]) if len(srt) > 1 else 0.0
        instances.append(inst)
    instances.sort(key=lambda i: float(i.arrive.min()))
    counted = [i for i in instances if i.counted]

    # Per rank: waits, lateness, exposed transfer, and what the job loses to it. Waits of
    # calls that overlap in time (DDP's buckets, gloo's two worker threads exchanging at
    # once) are one wait: each is an interval on the aligned timeline, and what is lost is
    # the length of their union (summing them counted plain_gloo's 25 ms twice a step).
    n = len(ranks)
    idx = {r: j for j, r in enumerate(ranks)}
    exposed = np.zeros(n)
    late = Counter[int]()
    wait_iv: list[list[tuple[float, float]]] = [[] for _ in ranks]
    cost_iv: list[list[tuple[float, float]]] = [[] for _ in ranks]
    late_iv: list[dict[int, list[tuple[float, float]]]] = [defaultdict(list) for _ in ranks]
    slowest_iv: list[tuple[float, float]] = []
    skew_iv: list[tuple[float, float]] = []
    for inst in counted:
        t_first, t_last = float(inst.arrive.min()), float(inst.arrive.max())
        for j, c in enumerate(inst.calls):
            late_iv[j][c.step].append((t_first, float(inst.arrive[j])))
            wait_iv[j].append((float(inst.arrive[j]), t_last))
            w = float(inst.waits[j])
            exposed[j] += max(c.exposed_us - min(w, c.exposed_us), 0.0)
        if n > 1:
            lost = (t_last - inst.lost, t_last)
            if inst.skew >= SKEW_MIN_US:
                late[inst.last] += 1
                cost_iv[idx[inst.last]].append(lost)
            slowest_iv.append(lost)
            skew_iv.append((float(np.median(inst.arrive)), t_last))
    wait = np.array([_union_us(v) for v in wait_iv]) if n else np.zeros(0)
    cost = np.array([_union_us(v) for v in cost_iv]) if n else np.zeros(0)
    late_steps = [{step: _union_us(v) for step, v in per.items()} for per in late_iv]
    lost_slowest, lost_skew = _union_us(slowest_iv), _union_us(skew_iv)
    per_step = 1.0 / n_steps
    step_medians = {
        r: float(np.median([st.span_us for st in by_rank[r].steps])) if by_rank[r].steps else 0.0 for r in ranks
    }
    job_step = float(np.median(list(step_medians.values()))) if ranks else 0.0

    stragglers, unexplained = (
        ([], []) if poor else _stragglers(ranks, by_rank, counted, late, cost * per_step, job_step, n_steps)
    )
    rows = [
        RankRow(
            rank=r, file=by_rank[r].file, step_us=round(step_medians[r], 3), ledger=by_rank[r].ledger,
            steps=by_rank[r].steps, wait_us=round(float(wait[idx[r]]) * per_step, 3), late_count=late[r],
            exposed_comm_us=round(float(exposed[idx[r]]) * per_step, 3), clock_offset_us=round(offsets[r], 3),
            gpu_name=by_rank[r].gpu_name, host_name=by_rank[r].host_name, findings=by_rank[r].findings,
            report_files=by_rank[r].report_files,
            late_by_step=[StepLate(step=k, late_us=round(v, 3)) for k, v in sorted(late_steps[idx[r]].items())],
            late_us=round(sum(late_steps[idx[r]].values()) * per_step, 3),
            cause=(cause := _rank_cause(by_rank[r])), cause_label=reason_words(cause),
        )
        for r in ranks
    ]  # fmt: skip
    gpu_name = next((by_rank[r].gpu_name for r in ranks if by_rank[r].gpu_name), "")
    collectives = _collective_rows(counted, n, n_steps, align_err, gpu_name)
    exposed_job = float(np.median(exposed)) * per_step if n else 0.0
    backend = Counter(s.backend for s in by_rank.values() if s.backend).most_common(1)
    summary = JobSummary(
        ranks=n,
        world_size=world_size,
        steps=n_steps,
        alignment_error_us=round(align_err, 3) if align_err is not None else None,
        alignment=align_how,
        backend=backend[0][0] if backend else "",
        headline=_headline(
            n,
            world_size,
            stragglers,
            unexplained,
            lost_skew * per_step,
            exposed_job,
            job_step,
            counted,
            poor,
            len(instances),
            _most_late(ranks, late, cost * per_step),
        ),
        step_us=round(job_step, 3),
        lost_to_slowest_us=round(lost_slowest * per_step, 3),
        lost_to_skew_us=round(lost_skew * per_step, 3),
        exposed_comm_us=round(exposed_job, 3),
        matched_collectives=len(instances),
        unmatched_collectives=unmatched,
        stragglers=stragglers,
        late_unexplained=unexplained,
        problems=problems,
        counted_collectives=len(counted),
    )
    return JobReport(
        schema_version=JOB_SCHEMA_VERSION,
        tool="tracelens",
        tool_version=__version__,
        generated_at=_dt.datetime.now(_dt.UTC).replace(microsecond=0).isoformat(),
        job=summary,
        ranks=rows,
        collectives=collectives,
        failed=failed,
        map_seconds=round(map_seconds, 3),
        scheduler=scheduler,
    )


def _most_late(ranks: list[int], late: Counter[int], cost_per_step: np.ndarray) -> tuple[int, int, float] | None:
    """(rank, calls it was last at, what that cost per step) of the rank last most often."""
    if not late:
        return None
    r, k = late.most_common(1)[0]
    return r, k, float(cost_per_step[ranks.index(r)])


def _whole_steps(s: RankSummary) -> set[int]:
    """The rank's steps but a cut one: a step much shorter than the rest (the last of
    steps made from a mark that covers part of an iteration, DDP's forward say, ends with
    that mark) holds no whole iteration, and dividing by it dilutes every per-step figure
    (plain_gloo none_python: the last of 6 steps was 0.8 ms of a 34 ms median, and the
    straggler's cost came out 5/6 of its per-step loss)."""
    if not s.steps:
        return set()
    median = float(np.median([st.span_us for st in s.steps]))
    return {st.step for st in s.steps if st.span_us >= CUT_STEP_SHARE * median}


def _union_us(intervals: list[tuple[float, float]]) -> float:
    """The length of the union of intervals (µs)."""
    total, reach = 0.0, -float("inf")
    for a, b in sorted(intervals):
        if b <= reach:
            continue
        total += b - max(a, reach)
        reach = b
    return total


def _rank_cause(s: RankSummary) -> str:
    """A rank's largest cause besides communication: its ledger's, else (no GPU) its
    launching thread's host time before its collectives."""
    if s.ledger:
        top = max((e for e in s.ledger if e.cause != "communication"), key=lambda e: e.time_us, default=None)
        return top.cause if top is not None else "communication"
    host: dict[str, float] = defaultdict(float)
    for c in s.collectives:
        for k, v in c.before_host.items():
            host[k] += v
    return max(host, key=lambda k: host[k]) if host else "unknown"


def _stragglers(
    ranks: list[int],
    by_rank: dict[int, RankSummary],
    counted: list[_Instance],
    late: Counter[int],
    cost_per_step: np.ndarray,
    step_us: float,
    n_steps: int,
) -> tuple[list[Straggler], list[Straggler]]:
    out: list[Straggler] = []
    unexplained: list[Straggler] = []
    if len(ranks) < 2 or not counted:
        return out, unexplained
    for j, r in enumerate(ranks):
        share = late[r] / len(counted)
        c = float(cost_per_step[j])
        if share < STRAGGLER_LATE_SHARE or c < max(STRAGGLER_MIN_STEP_SHARE * max(step_us, 1.0), STRAGGLER_MIN_US):
            continue
        reason, reason_us, detail, own, also = _reason(j, r, by_rank, counted, n_steps)
        key = "gpu_busy" if reason.startswith("gpu_busy") else reason
        if reason == "host_bound" and detail:  # the host side says which host work
            key = next((h for h in HOST_CAUSES if detail.startswith(reason_words(h))), key)
        # Explained when the rank's own extra work (every cause that is not waiting) makes
        # up at least half of what it costs: its trace shows why it is late.
        explained = reason == "unknown" or (reason not in WAIT_CAUSES and own >= EXPLAINED_SHARE * c)
        prof = _profiler_share(j, r, by_rank, ranks)
        words = reason_words(reason) + (
            f": {detail}" if reason == "host_bound" and detail else f" {detail}" if detail else ""
        )
        if explained:
            advice = (
                f"Rank {r} arrives last at {late[r]} of {len(counted)} collectives: "
                + _ADVICE.get(key, _ADVICE["unknown"])
                + "."
            )
            if reason != "unknown" and own < MOSTLY_EXPLAINED_SHARE * c:
                advice += (
                    f" Its own extra work accounts for {fmt_us(own)} of the {fmt_us(c)} per step; the rest is delay "
                    "its trace does not show (a loaded host delaying its threads, another process on its GPU)."
                )
        else:
            advice = (
                f"Rank {r} arrives last at {late[r]} of {len(counted)} collectives, but its own trace shows "
                + (f"only {fmt_us(own)} per step more work than the others' before them" if own > 0 else
                   "no more work than the others' before them")
                + f" (the most it has extra is {words}, {fmt_us(reason_us)} per step): it waits for something its "
                "trace does not show, such as another process on its GPU, its device's copies, or a slower process "
                "group's collective. Check what shares its GPU and host."
            )  # fmt: skip
        if prof >= overhead.MOVES_SHARE * c:
            more = by_rank[r].events_per_step.get("python", 0.0) - float(
                np.median([by_rank[o].events_per_step.get("python", 0.0) for o in ranks if o != r])
            )
            advice += (
                f" The profiler itself may account for up to {fmt_us(prof)} of the {fmt_us(c)} per step: this rank "
                f"recorded {more:,.0f} more Python frames per step than the others (with_stack), each costing its "
                f"thread about {overhead.US_PER_PYTHON_FRAME:.2f} µs (more on a loaded host). That is an upper "
                "bound: it holds when the extra Python is a fixed amount of work, while a loop that runs for a set "
                "time is not lengthened. Capture again with --no-stack (or with_stack=False) to measure the "
                "straggler without it."
            )
        (out if explained else unexplained).append(
            Straggler(rank=r, late_share=round(share, 4), cost_us=round(c, 3), reason=reason,
                      reason_us=round(reason_us, 3), advice=advice, late_count=late[r], matched=len(counted),
                      reason_label=words, profiler_us=round(prof, 3), also=also, own_us=round(own, 3))
        )  # fmt: skip
    out.sort(key=lambda s: -s.cost_us)
    unexplained.sort(key=lambda s: -s.cost_us)
    return out, unexplained


def _profiler_share(j: int, r: int, by_rank: dict[int, RankSummary], ranks: list[int]) -> float:
    """How much more per step the profiler costs rank r than the median other rank."""
    mine = overhead.per_step_us(by_rank[r].events_per_step)
    others = [overhead.per_step_us(by_rank[o].events_per_step) for o in ranks if o != r]
    return max(mine - float(np.median(others)), 0.0) if others else 0.0


def _reason(
    j: int, r: int, by_rank: dict[int, RankSummary], counted: list[_Instance], n_steps: int
) -> tuple[str, float, str, float, str]:
    """What the straggler had more of than the others before the calls it was last at,
    per step: (cause, its excess, a detail (the host-side part, the Python frame), the
    excess of all its own work (causes that are not waiting), a second cause worth
    naming in words ("" when none))."""
    gpu: dict[str, float] = defaultdict(float)
    host: dict[str, float] = defaultdict(float)
    frames: Counter[str] = Counter()
    seen_gpu = seen_host = False
    for inst in counted:
        if inst.last != r:
            continue
        mine = inst.calls[j]
        others = [c for i, c in enumerate(inst.calls) if i != j]
        if mine.before or any(o.before for o in others):
            seen_gpu = True
            for cause in set(mine.before) | {k for o in others for k in o.before}:
                gpu[cause] += mine.before.get(cause, 0.0) - float(np.mean([o.before.get(cause, 0.0) for o in others]))
        if mine.before_host or any(o.before_host for o in others):
            seen_host = True
            for cause in HOST_CAUSES:
                host[cause] += mine.before_host.get(cause, 0.0) - float(
                    np.mean([o.before_host.get(cause, 0.0) for o in others])
                )
        if mine.hot_frame:
            frames[mine.hot_frame] += 1
    ranked_host = sorted(((v, k) for k, v in host.items() if v > 0), reverse=True)
    host_cause, host_amount = (ranked_host[0][1], ranked_host[0][0]) if ranked_host else ("unknown", 0.0)
    frame = frames.most_common(1)[0][0] if frames else ""
    in_frame = f", in {frame}" if frame and host_cause == "host_python" else ""
    host_detail = reason_words(host_cause) + in_frame if host_amount > 0 else ""

    def second(ranked: list[tuple[float, str]], total: float) -> str:
        if len(ranked) < 2 or ranked[1][0] < SECOND_CAUSE_SHARE * total:
            return ""
        return f"{reason_words(ranked[1][1])}: {fmt_us(ranked[1][0] / n_steps)} more"

    if seen_gpu:
        # The GPU busy classes are one question (more GPU work), whichever roof they are near.
        busy = sum(v for k, v in gpu.items() if k.startswith("gpu_busy"))
        cand = {k: v for k, v in gpu.items() if not k.startswith("gpu_busy")}
        top_busy = max((k for k in gpu if k.startswith("gpu_busy")), key=lambda k: gpu[k], default="gpu_busy_unknown")
        cand[top_busy] = busy
        ranked = sorted(((v, k) for k, v in cand.items() if v > 0), reverse=True)
        if not ranked:
            return "unknown", 0.0, "", 0.0, ""
        amount, cause = ranked[0]
        own = sum(v for v, k in ranked if k not in WAIT_CAUSES)
        if cause.startswith("gpu_busy") and by_rank[r].throttled:
            cause = "power_throttle"
        detail = host_detail if cause == "host_bound" else ""
        return cause, amount / n_steps, detail, own / n_steps, second(ranked, own)
    if seen_host and host_amount > 0:
        own = sum(v for v, _ in ranked_host)
        detail = f"in {frame}" if frame and host_cause == "host_python" else ""
        return host_cause, host_amount / n_steps, detail, own / n_steps, second(ranked_host, own)
    return "unknown", 0.0, "", 0.0, ""


def _collective_rows(
    counted: list[_Instance], n: int, n_steps: int, align_err: float | None, gpu_name: str
) -> list[CollectiveRow]:
    groups: dict[tuple[str, str], list[_Instance]] = defaultdict(list)
    for inst in counted:
        groups[(inst.group, inst.kind)].append(inst)
    peak = link_peak(gpu_name)
    rows = []
    for (group, kind), insts in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        moved = [float(np.median(i.end) - i.arrive.max()) for i in insts]
        nbytes: list[int] = [i.bytes for i in insts]
        size = max((c.group_size for i in insts for c in i.calls), default=0) or n
        floor = MOVED_MIN_ERRORS * (align_err or 0.0)
        ok = [(b, m) for b, m in zip(nbytes, moved, strict=True) if b and m > max(floor, 1.0)]
        algbw = sum(b for b, _ in ok) / (sum(m for _, m in ok) * 1e-6) / 1e9 if ok else 0.0
        factor = bus_factor(kind, size) if size > 1 else None
        busbw = algbw * factor if factor is not None else 0.0
        note = ""
        if any(nbytes) and len(ok) < len([b for b in nbytes if b]):
            note = (
                f"{len([b for b in nbytes if b]) - len(ok)} calls moved their data in less than "
                f"{MOVED_MIN_ERRORS:g}x the clock alignment's error: their bandwidth is not measurable"
            )
        if peak is not None and busbw * 1e9 > peak.bytes_per_s:
            note = (
                f"bus bandwidth above the {peak.name} peak ({peak.bytes_per_s / 1e9:.0f} GB/s per direction) "
                "cannot be: the time past the last arrival is shorter than the clocks can tell"
            )
            algbw = busbw = 0.0
        per_rank_exposed = np.zeros(n)
        for i in insts:
            for j, c in enumerate(i.calls):
                w = float(i.waits[j])
                per_rank_exposed[j] += max(c.exposed_us - min(w, c.exposed_us), 0.0)
        lasts = Counter(i.last for i in insts if i.skew >= SKEW_MIN_US).most_common(1)
        sources = sorted({c.size_source for i in insts for c in i.calls if c.size_source})
        rows.append(
            CollectiveRow(
                group=group, kind=kind, count=len(insts), bytes=int(np.median(nbytes)) if nbytes else 0,
                median_skew_us=round(float(np.median([i.skew for i in insts])), 3),
                busbw_gbps=round(busbw, 4), algbw_gbps=round(algbw, 4),
                exposed_us=round(float(np.median(per_rank_exposed)) / n_steps, 3),
                last_rank=lasts[0][0] if lasts else None, source=insts[0].source,
                group_size=size, size_source=", ".join(sources), bandwidth_note=note,
            )
        )  # fmt: skip
    return rows


def _headline(
    n: int,
    world: int | None,
    stragglers: list[Straggler],
    unexplained: list[Straggler],
    lost_skew: float,
    exposed: float,
    step_us: float,
    counted: list[_Instance],
    poor: bool,
    matched: int,
    latest: tuple[int, int, float] | None = None,
) -> str:
    if n == 0:
        return "No rank could be read."
    if n == 1:
        if world and world > 1:
            return (
                f"Only 1 of {world} ranks' traces could be used (see the inputs below): a job report needs two or "
                "more ranks of one job to measure skew or name a straggler."
            )
        return "One rank only: a job report needs the traces of two or more ranks of one job."
    if not counted:
        if matched:
            return (
                f"{n} ranks, {matched} collectives matched on every rank, but none inside every rank's analysed "
                "window: no skew or straggler can be measured."
            )
        return f"{n} ranks, but no collective was matched on every rank: no skew or straggler can be measured."
    if poor:
        return (
            f"{n} ranks, {len(counted)} collectives matched by order, but they do not end together after clock "
            "alignment: these are not the same calls on every rank (sampled or differently cut traces), so no "
            "straggler is named."
        )

    def share(us: float) -> str:
        return f" ({us / step_us:.0%} of a {fmt_us(step_us)} step)" if step_us > 0 else ""

    comm = f" Exposed communication costs the median rank {fmt_us(exposed)} per step{share(exposed)}."
    if stragglers:
        s = stragglers[0]
        why = (
            "its trace does not say why"
            if s.reason == "unknown"
            else f"because of {s.reason_label}: {fmt_us(s.reason_us)} more per step than the others before them"
            + (f" (and {s.also})" if s.also else "")
            + (
                f"; that work accounts for {fmt_us(s.own_us)} of it, the rest is delay its trace does not show"
                if s.reason != "unknown" and 0 < s.own_us < MOSTLY_EXPLAINED_SHARE * s.cost_us
                else ""
            )
        )
        more = f" (and {len(stragglers) - 1} more)" if len(stragglers) > 1 else ""
        prof = (
            " The profiler's own overhead may be part of it (see its advice)."
            if s.profiler_us >= overhead.MOVES_SHARE * s.cost_us
            else ""
        )
        return (
            f"Rank {s.rank} is the straggler{more}: last at {s.late_count} of {s.matched} collectives, it costs the "
            f"job {fmt_us(s.cost_us)} per step{share(s.cost_us)}, {why}." + prof + comm
        )
    med = float(np.median([i.skew for i in counted]))
    if unexplained:
        u = unexplained[0]
        return (
            f"No straggler of its own making: rank {u.rank} arrives last at {u.late_count} of {u.matched} "
            f"collectives (costing the job {fmt_us(u.cost_us)} per step) with "
            + (
                f"only {fmt_us(u.own_us)} per step more work than the others"
                if u.own_us > 0
                else "no more work than the others"
            )
            + " in its trace, so what delays it is outside its trace (a shared GPU or host)."
            + comm
        )
    often = ""
    if latest is not None and latest[1] >= STRAGGLER_LATE_SHARE * len(counted) and latest[2] > 0:
        often = (
            f" Rank {latest[0]} is last at {latest[1]} of them, {fmt_us(latest[2])} per step: under the "
            f"{fmt_us(max(STRAGGLER_MIN_STEP_SHARE * step_us, STRAGGLER_MIN_US))} per step a straggler costs "
            "(ranks that share a host or a GPU arrive that far apart with the same work)."
        )
    return (
        f"No straggler: across {len(counted)} matched collectives the ranks arrive within {fmt_us(med)} of each "
        f"other (median); arrival skew costs {fmt_us(lost_skew)} per step." + often + comm
    )
