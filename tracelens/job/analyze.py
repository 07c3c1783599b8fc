"""Across ranks: identity, clock alignment, collective matching, skew, stragglers and the
job's headline, from the RankSummaries the map returned (never from the traces).

- Identity: a rank's number comes from distributedInfo, else its file name. Duplicates
  (the first file is kept), ranks without a number, world sizes or backends that differ
  (not one job) and ranks missing from 0..world_size-1 are reported.
- Matching: a collective is one call of one process group on every rank. With the
  group's sequence number (record_param_comms' `Seq`, torch 2.2+) the key is (group,
  seq); else (group, kind, ProfilerStep, index in the step), else (group, kind, index).
  Only calls seen on every rank are matched.
- Clocks: ranks on different hosts have different clocks. A synchronising collective
  (all-reduce, all-gather, reduce-scatter, all-to-all, barrier) ends on every rank at
  about the same moment, since none can finish before the last one's data arrives. Each
  rank's offset to the reference rank (the lowest) is the median, over matched calls, of
  its end minus the reference's end; the alignment error is the median distance of
  those ends from their offset, i.e. how far "they end together" held after alignment.
- Per call: arrival = when a rank's collective starts (kernel or gloo op); the last to
  arrive is the straggler of that call, the others wait the difference; the time past
  the last arrival moves the data (algorithm bandwidth = bytes / that time; bus
  bandwidth scales it by NCCL's factor for the kind and the group size).
"""

from __future__ import annotations

import datetime as _dt
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from tracelens import __version__
from tracelens.domain import fmt_us
from tracelens.job.model import Collective, RankFailure, RankSummary
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
#: ...and the others wait for it at least this share of a step: the medium-severity
#: share of single-trace findings (a few percent is worth a change).
STRAGGLER_MIN_STEP_SHARE = 0.03
#: Causes that are waiting, not work of the rank's own: a rank late with only more of
#: these before its collectives waits for something its trace does not show (another
#: process on its GPU, a slower group's collective), so it is not named a straggler.
WAIT_CAUSES = frozenset({"communication", "idle_other", "profiler"})
#: A straggler's own extra work (its reason) must account for at least this share of
#: what the others wait for it; else its lateness is unexplained by its trace.
EXPLAINED_SHARE = 0.5
#: The alignment is too poor to tell who arrived last when the matched calls still end
#: further apart than this share of their median duration: the calls matched are not the
#: same calls (traces sampled or cut differently), so no straggler is named.
ALIGN_POOR_SHARE = 0.25
#: NCCL's bus-bandwidth factors (nccl-tests' PERFORMANCE.md): what each rank's link carries
#: per byte of the message, for n ranks.
_BUSBW: dict[str, Callable[[int], float]] = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
}


def _one(n: int) -> float:
    return 1.0


#: Ledger causes that make a rank late, and what to do about each.
_ADVICE = {
    "host_bound": (
        "its host is busy before the collective while its GPU idles (data loading, preprocessing, Python work "
        "on that rank): give its DataLoader more workers (num_workers, pin_memory=True, prefetch_factor), move "
        "the preprocessing off the training loop, and check that rank's input pipeline and storage"
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
    "unknown": "the trace has no GPU ledger to say why: compare its per-rank report (--per-rank) with a fast rank's",
}


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
    counted: bool  # inside the analysed steps
    bytes: int = 0
    last: int = -1
    skew: float = 0.0
    waits: np.ndarray = field(default_factory=lambda: np.zeros(0))


def _key(c: Collective, index_in_step: int) -> tuple[object, ...]:
    if c.seq >= 0:
        return (c.group, "seq", c.seq)
    if c.step >= 0:
        return (c.group, c.kind, "step", c.step, index_in_step)
    return (c.group, c.kind, "order", c.order)


def _keyed(s: RankSummary) -> dict[tuple[object, ...], Collective]:
    out: dict[tuple[object, ...], Collective] = {}
    in_step: dict[tuple[str, str, int], int] = defaultdict(int)
    for c in s.collectives:
        k = (c.group, c.kind, c.step)
        out.setdefault(_key(c, in_step[k]), c)
        in_step[k] += 1
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
    if poor:
        how += (
            f". That is over {ALIGN_POOR_SHARE:.0%} of the calls' median duration: the calls matched by order are "
            "not the same calls on every rank (sampled or differently cut traces), so arrival order is not "
            "trusted and no straggler is named"
        )
    return offsets, err, how, poor


def analyze(results: list[RankSummary | RankFailure], *, map_seconds: float = 0.0, scheduler: str = "") -> JobReport:
    by_rank, failed, problems = _identity(results)
    ranks = sorted(by_rank)
    world = Counter(s.world_size for s in by_rank.values() if s.world_size is not None).most_common(1)
    world_size = world[0][0] if world else (len(ranks) if ranks else None)
    keyed = {r: _keyed(by_rank[r]) for r in ranks}
    offsets, align_err, align_how, poor = (
        _align(ranks, keyed, by_rank) if ranks else ({}, None, "no rank was read", False)
    )

    # The analysed steps: those every rank kept in its window (per-step figures divide by
    # their number); without step marks, every call counts.
    step_sets = [{st.step for st in by_rank[r].steps} for r in ranks]
    job_steps = sorted(set.intersection(*step_sets)) if step_sets and all(step_sets) else []
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
        in_steps = c0.step in counted_steps if counted_steps else True
        inst = _Instance(k, c0.group, c0.kind, c0.source, ranks, arrive, end, calls, in_steps,
                         bytes=int(np.median([c.bytes for c in calls])))  # fmt: skip
        last = int(np.argmax(arrive))
        inst.last = ranks[last]
        inst.skew = float(arrive[last] - arrive.min())
        inst.waits = arrive[last] - arrive
        instances.append(inst)
    instances.sort(key=lambda i: float(i.arrive.min()))
    counted = [i for i in instances if i.counted]

    # Per rank: waits, lateness, exposed transfer.
    n = len(ranks)
    idx = {r: j for j, r in enumerate(ranks)}
    wait = np.zeros(n)
    exposed = np.zeros(n)
    late = Counter[int]()
    cost = np.zeros(n)
    lost_slowest = 0.0
    lost_skew = 0.0
    late_steps: list[dict[int, float]] = [defaultdict(float) for _ in ranks]
    for inst in counted:
        first = float(inst.arrive.min())
        for j, c in enumerate(inst.calls):
            late_steps[j][c.step] += float(inst.arrive[j]) - first
            w = float(inst.waits[j])
            wait[j] += w
            exposed[j] += max(c.exposed_us - min(w, c.exposed_us), 0.0)
        if n > 1 and inst.skew >= SKEW_MIN_US:
            late[inst.last] += 1
            j = idx[inst.last]
            others = np.delete(inst.waits, j)
            cost[j] += float(others.mean())
        srt = np.sort(inst.arrive)
        if n > 1:
            lost_slowest += float(srt[-1] - srt[-2])
            lost_skew += float(srt[-1] - np.median(srt))
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
        )
        for r in ranks
    ]  # fmt: skip
    collectives = _collective_rows(counted, n, n_steps, idx)
    exposed_job = float(np.median(exposed)) * per_step if n else 0.0
    backend = Counter(s.backend for s in by_rank.values() if s.backend).most_common(1)
    summary = JobSummary(
        ranks=n,
        world_size=world_size,
        steps=n_steps,
        alignment_error_us=round(align_err, 3) if align_err is not None else None,
        alignment=align_how,
        backend=backend[0][0] if backend else "",
        headline=_headline(n, stragglers, unexplained, lost_slowest * per_step, exposed_job, job_step, counted, poor),
        step_us=round(job_step, 3),
        lost_to_slowest_us=round(lost_slowest * per_step, 3),
        lost_to_skew_us=round(lost_skew * per_step, 3),
        exposed_comm_us=round(exposed_job, 3),
        matched_collectives=len(instances),
        unmatched_collectives=unmatched,
        stragglers=stragglers,
        late_unexplained=unexplained,
        problems=problems,
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
        if share < STRAGGLER_LATE_SHARE or c < STRAGGLER_MIN_STEP_SHARE * max(step_us, 1.0):
            continue
        reason, reason_us = _reason(j, r, by_rank, counted, n_steps)
        key = "gpu_busy" if reason.startswith("gpu_busy") else reason
        explained = reason == "unknown" or (reason not in WAIT_CAUSES and reason_us >= EXPLAINED_SHARE * c)
        if explained:
            advice = (
                f"Rank {r} arrives last at {late[r]} of {len(counted)} collectives: "
                + _ADVICE.get(key, _ADVICE["unknown"])
                + "."
            )
        else:
            advice = (
                f"Rank {r} arrives last at {late[r]} of {len(counted)} collectives, but its own trace shows no more "
                f"work than the others' before them (the most it has extra is {reason} time, {fmt_us(reason_us)} per "
                "step): it waits for something its trace does not show, such as another process on its GPU, its "
                "device's copies, or a slower process group's collective. Check what shares its GPU and host."
            )
        (out if explained else unexplained).append(
            Straggler(rank=r, late_share=round(share, 4), cost_us=round(c, 3), reason=reason,
                      reason_us=round(reason_us, 3), advice=advice, late_count=late[r], matched=len(counted))
        )  # fmt: skip
    out.sort(key=lambda s: -s.cost_us)
    unexplained.sort(key=lambda s: -s.cost_us)
    return out, unexplained


def _reason(
    j: int, r: int, by_rank: dict[int, RankSummary], counted: list[_Instance], n_steps: int
) -> tuple[str, float]:
    """The ledger cause the straggler had more of than the others, before the calls it was
    last at (per step)."""
    excess: dict[str, float] = defaultdict(float)
    seen = False
    for inst in counted:
        if inst.last != r:
            continue
        mine = inst.calls[j].before
        others = [c.before for i, c in enumerate(inst.calls) if i != j]
        if not mine and not any(others):
            continue
        seen = True
        for cause in set(mine) | {k for o in others for k in o}:
            excess[cause] += mine.get(cause, 0.0) - float(np.mean([o.get(cause, 0.0) for o in others]))
    if not seen:
        return "unknown", 0.0
    # The GPU busy classes are one question (more GPU work), whichever roof they are near.
    busy = sum(v for k, v in excess.items() if k.startswith("gpu_busy"))
    cand = {k: v for k, v in excess.items() if not k.startswith("gpu_busy")}
    top_busy = max((k for k in excess if k.startswith("gpu_busy")), key=lambda k: excess[k], default="gpu_busy_unknown")
    cand[top_busy] = busy
    cause, amount = max(cand.items(), key=lambda kv: kv[1])
    if amount <= 0:
        return "unknown", 0.0
    if cause.startswith("gpu_busy") and by_rank[r].throttled:
        cause = "power_throttle"
    return cause, amount / n_steps


def _collective_rows(counted: list[_Instance], n: int, n_steps: int, idx: dict[int, int]) -> list[CollectiveRow]:
    groups: dict[tuple[str, str], list[_Instance]] = defaultdict(list)
    for inst in counted:
        groups[(inst.group, inst.kind)].append(inst)
    rows = []
    for (group, kind), insts in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        moved = [float(np.median(i.end) - i.arrive.max()) for i in insts]
        nbytes: list[int] = [i.bytes for i in insts]
        busy_s = sum(max(m, 1.0) for m in moved) * 1e-6
        total_bytes = float(np.sum(nbytes)) if nbytes else 0.0
        algbw = total_bytes / busy_s / 1e9 if busy_s > 0 else 0.0
        factor = _BUSBW.get(kind, _one)(n) if n > 1 else 1.0
        per_rank_exposed = np.zeros(n)
        for i in insts:
            for j, c in enumerate(i.calls):
                w = float(i.waits[j])
                per_rank_exposed[j] += max(c.exposed_us - min(w, c.exposed_us), 0.0)
        lasts = Counter(i.last for i in insts if i.skew >= SKEW_MIN_US).most_common(1)
        rows.append(
            CollectiveRow(
                group=group, kind=kind, count=len(insts), bytes=int(np.median(nbytes)) if nbytes else 0,
                median_skew_us=round(float(np.median([i.skew for i in insts])), 3),
                busbw_gbps=round(algbw * factor, 4), algbw_gbps=round(algbw, 4),
                exposed_us=round(float(np.median(per_rank_exposed)) / n_steps, 3),
                last_rank=lasts[0][0] if lasts else None, source=insts[0].source,
            )
        )  # fmt: skip
    return rows


def _headline(
    n: int,
    stragglers: list[Straggler],
    unexplained: list[Straggler],
    lost_slowest: float,
    exposed: float,
    step_us: float,
    counted: list[_Instance],
    poor: bool,
) -> str:
    if n == 0:
        return "No rank could be read."
    if n == 1:
        return "One rank only: a job report needs the traces of two or more ranks of one job."
    if not counted:
        return f"{n} ranks, but no collective was matched on every rank: no skew or straggler can be measured."
    if poor:
        return (
            f"{n} ranks, {len(counted)} collectives matched by order, but they do not end together after clock "
            "alignment: these are not the same calls on every rank (sampled or differently cut traces), so no "
            "straggler is named."
        )

    def share(us: float) -> str:
        return f" ({us / step_us:.0%} of a {fmt_us(step_us)} step)" if step_us > 0 else ""

    tail = (
        f" The job loses {fmt_us(lost_slowest)} per step to its slowest rank{share(lost_slowest)} and "
        f"{fmt_us(exposed)} to exposed communication{share(exposed)}."
    )
    if stragglers:
        s = stragglers[0]
        why = {"unknown": "cause unknown"}.get(
            s.reason, f"{s.reason}: {fmt_us(s.reason_us)} more per step than the others"
        )
        more = f" (and {len(stragglers) - 1} more)" if len(stragglers) > 1 else ""
        return (
            f"Rank {s.rank} is the straggler{more}: last at {s.late_count} of {s.matched} collectives; each other "
            f"rank waits {fmt_us(s.cost_us)} per step for it ({why})." + tail
        )
    med = float(np.median([i.skew for i in counted]))
    if unexplained:
        u = unexplained[0]
        return (
            f"No straggler of its own making: rank {u.rank} arrives last at {u.late_count} of {u.matched} "
            f"collectives ({fmt_us(u.cost_us)} per step for the others) with no more work than the others in its "
            "trace, so what delays it is outside its trace (a shared GPU or host)." + tail
        )
    return (
        f"No straggler: across {len(counted)} matched collectives the ranks arrive within {fmt_us(med)} (median)."
        + tail
    )
