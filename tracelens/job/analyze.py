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

import numpy as np

from tracelens import __version__
from tracelens.derive.collectives import bus_factor
from tracelens.explain.job import headline, reason_words
from tracelens.job.match import SKEW_MIN_US, Instance, align_clocks, identity, keyed_calls, match_instances
from tracelens.job.model import RankFailure, RankSummary
from tracelens.job.stragglers import find_stragglers, headline_facts, most_late, rank_cause
from tracelens.model.links import link_peak
from tracelens.report.job_report import (
    JOB_SCHEMA_VERSION,
    CollectiveRow,
    JobReport,
    JobSummary,
    RankRow,
    StepLate,
)

#: A step shorter than this share of the rank's median step is a cut one, not counted
#: in per-step figures (a whole step of a steady loop is within a few % of the median).
CUT_STEP_SHARE = 0.5
#: A transfer time shorter than this many alignment errors is not measured: the clocks
#: are not known that well (its bandwidth is reported as not measurable).
MOVED_MIN_ERRORS = 2.0


def analyze(
    results: list[RankSummary | RankFailure],
    *,
    map_seconds: float = 0.0,
    scheduler: str = "",
    problems: list[str] | None = None,
) -> JobReport:
    """The job report. `problems`: what the caller knows of ranks that are not in
    `results` (a torchrun capture's missing ranks and files of another run)."""
    by_rank, failed, found = identity(results)
    problems = [*(problems or []), *found]
    ranks = sorted(by_rank)
    world = Counter(s.world_size for s in by_rank.values() if s.world_size is not None).most_common(1)
    world_size = world[0][0] if world else (len(ranks) if ranks else None)
    # ProfilerStep numbers are the same on every rank; detected iterations are not.
    by_step = bool(ranks) and all(by_rank[r].step_source in ("steps", "") for r in ranks)
    keyed = {r: keyed_calls(by_rank[r], by_step) for r in ranks}
    offsets, align_err, align_how, poor = (
        align_clocks(ranks, keyed, by_rank) if ranks else ({}, None, "no rank was read", False)
    )

    # Per-step figures divide by the steps every rank analysed (the same ProfilerSteps),
    # else by the ranks' median number of steps.
    step_sets = [_whole_steps(by_rank[r]) for r in ranks]
    job_steps = sorted(set.intersection(*step_sets)) if by_step and step_sets and all(step_sets) else []
    n_steps = len(job_steps) if job_steps else int(np.median([by_rank[r].n_steps for r in ranks])) if ranks else 1
    n_steps = max(n_steps, 1)
    counted_steps = set(job_steps)

    instances, unmatched = match_instances(ranks, keyed, by_rank, offsets, counted_steps)
    instances.sort(key=lambda i: float(i.arrive.min()))
    counted = [i for i in instances if i.counted]

    n = len(ranks)
    idx = {r: j for j, r in enumerate(ranks)}
    exposed, late, wait, cost, late_steps, lost_slowest, lost_skew = _losses(ranks, counted)
    per_step = 1.0 / n_steps
    step_medians = {
        r: float(np.median([st.span_us for st in by_rank[r].steps])) if by_rank[r].steps else 0.0 for r in ranks
    }
    job_step = float(np.median(list(step_medians.values()))) if ranks else 0.0

    stragglers, unexplained = (
        ([], []) if poor else find_stragglers(ranks, by_rank, counted, late, cost * per_step, job_step, n_steps)
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
            cause=(cause := rank_cause(by_rank[r])), cause_label=reason_words(cause),
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
        headline=headline(
            headline_facts(
                n, world_size, stragglers, unexplained, lost_skew * per_step, exposed_job, job_step, counted, poor,
                len(instances), most_late(ranks, late, cost * per_step),
            )
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


def _collective_rows(
    counted: list[Instance], n: int, n_steps: int, align_err: float | None, gpu_name: str
) -> list[CollectiveRow]:
    groups: dict[tuple[str, str], list[Instance]] = defaultdict(list)
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


def _losses(
    ranks: list[int], counted: list[Instance]
) -> tuple[np.ndarray, Counter[int], np.ndarray, np.ndarray, list[dict[int, float]], float, float]:
    """Per rank: exposed transfer, calls last at, wait, what the job loses to it, and its
    lateness per step; and the job's losses to the slowest rank and to skew (µs, summed
    over the counted calls)."""
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
    return exposed, late, wait, cost, late_steps, lost_slowest, lost_skew
