"""Stragglers: the rank last at most matched collectives, what it costs the job per step,
and why (what it did more of than the others before them); and the facts of the job's
headline (tracelens/job/analyze.py's docstring gives the rules; explain/job.py words them)."""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass

import numpy as np

from tracelens.derive.host_time import HOST_CAUSES
from tracelens.explain.job import (
    AdviceFacts,
    HeadlineFacts,
    detail_words,
    reason_label,
    second_cause,
    straggler_advice,
)
from tracelens.job import overhead
from tracelens.job.match import Instance
from tracelens.job.model import RankSummary
from tracelens.report.job_report import Straggler

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
#: A second cause of a straggler's lateness is named beside the first when it holds at
#: least this share of the rank's own extra work.
SECOND_CAUSE_SHARE = 0.25


def most_late(ranks: list[int], late: Counter[int], cost_per_step: np.ndarray) -> tuple[int, int, float] | None:
    """(rank, calls it was last at, what that cost per step) of the rank last most often."""
    if not late:
        return None
    r, k = late.most_common(1)[0]
    return r, k, float(cost_per_step[ranks.index(r)])


def rank_cause(s: RankSummary) -> str:
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


def find_stragglers(
    ranks: list[int],
    by_rank: dict[int, RankSummary],
    counted: list[Instance],
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
        why = _reason(j, r, by_rank, counted, n_steps)
        reason, reason_us, own = why.cause, why.amount_us, why.own_us
        key = "gpu_busy" if reason.startswith("gpu_busy") else reason
        if reason == "host_bound" and why.host_part is not None:  # the host side says which host work
            key = why.host_part
        # Explained when the rank's own extra work (every cause that is not waiting) makes
        # up at least half of what it costs: its trace shows why it is late.
        explained = reason == "unknown" or (reason not in WAIT_CAUSES and own >= EXPLAINED_SHARE * c)
        prof = _profiler_share(j, r, by_rank, ranks)
        words = reason_label(reason, detail_words(why.host_part, why.frame))
        also = second_cause(*why.second) if why.second is not None else ""
        moves = prof >= overhead.MOVES_SHARE * c
        more = (
            by_rank[r].events_per_step.get("python", 0.0)
            - float(np.median([by_rank[o].events_per_step.get("python", 0.0) for o in ranks if o != r]))
            if moves
            else 0.0
        )
        advice = straggler_advice(
            AdviceFacts(
                rank=r,
                late=late[r],
                matched=len(counted),
                key=key,
                explained=explained,
                partly=reason != "unknown" and own < MOSTLY_EXPLAINED_SHARE * c,
                reason_label=words,
                reason_us=reason_us,
                own_us=own,
                cost_us=c,
                profiler_us=prof if moves else 0.0,
                more_python_frames=more,
                us_per_python_frame=overhead.US_PER_PYTHON_FRAME,
            )
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


@dataclass(frozen=True)
class _Why:
    """What a straggler had more of than the others before the calls it was last at, per step."""

    cause: str
    amount_us: float  # its excess
    own_us: float  # the excess of all its own work (causes that are not waiting)
    host_part: str | None = None  # for host_bound: the host cause that had most of it
    frame: str = ""  # the Python frame that work ran in (Python outside torch ops)
    second: tuple[str, float] | None = None  # a second cause worth naming, and its excess


_UNKNOWN = _Why("unknown", 0.0, 0.0)


def _reason(j: int, r: int, by_rank: dict[int, RankSummary], counted: list[Instance], n_steps: int) -> _Why:
    """What the straggler had more of than the others before the calls it was last at."""
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
    python_frame = frame if frame and host_cause == "host_python" else ""

    def second(ranked: list[tuple[float, str]], total: float) -> tuple[str, float] | None:
        if len(ranked) < 2 or ranked[1][0] < SECOND_CAUSE_SHARE * total:
            return None
        return ranked[1][1], ranked[1][0] / n_steps

    if seen_gpu:
        # The GPU busy classes are one question (more GPU work), whichever roof they are near.
        busy = sum(v for k, v in gpu.items() if k.startswith("gpu_busy"))
        cand = {k: v for k, v in gpu.items() if not k.startswith("gpu_busy")}
        top_busy = max((k for k in gpu if k.startswith("gpu_busy")), key=lambda k: gpu[k], default="gpu_busy_unknown")
        cand[top_busy] = busy
        ranked = sorted(((v, k) for k, v in cand.items() if v > 0), reverse=True)
        if not ranked:
            return _UNKNOWN
        amount, cause = ranked[0]
        own = sum(v for v, k in ranked if k not in WAIT_CAUSES)
        if cause.startswith("gpu_busy") and by_rank[r].throttled:
            cause = "power_throttle"
        host_part = host_cause if cause == "host_bound" and host_amount > 0 else None
        in_frame = python_frame if host_part is not None else ""
        return _Why(cause, amount / n_steps, own / n_steps, host_part, in_frame, second(ranked, own))
    if seen_host and host_amount > 0:
        own = sum(v for v, _ in ranked_host)
        return _Why(host_cause, host_amount / n_steps, own / n_steps, None, python_frame, second(ranked_host, own))
    return _UNKNOWN


def headline_facts(
    n: int,
    world: int | None,
    stragglers: list[Straggler],
    unexplained: list[Straggler],
    lost_skew: float,
    exposed: float,
    step_us: float,
    counted: list[Instance],
    poor: bool,
    matched: int,
    latest: tuple[int, int, float] | None,
) -> HeadlineFacts:
    s = stragglers[0] if stragglers else None
    often = (
        latest
        if latest is not None and latest[1] >= STRAGGLER_LATE_SHARE * len(counted) and latest[2] > 0
        else None
    )
    return HeadlineFacts(
        ranks=n,
        world=world,
        matched=matched,
        counted=len(counted),
        poor=poor,
        stragglers=tuple(stragglers),
        unexplained=tuple(unexplained),
        partly_explained=s is not None and s.reason != "unknown" and 0 < s.own_us < MOSTLY_EXPLAINED_SHARE * s.cost_us,
        profiler_may_move=s is not None and s.profiler_us >= overhead.MOVES_SHARE * s.cost_us,
        median_skew_us=float(np.median([i.skew for i in counted])) if counted else 0.0,
        lost_skew_us=lost_skew,
        exposed_us=exposed,
        step_us=step_us,
        often=often,
        straggler_floor_us=max(STRAGGLER_MIN_STEP_SHARE * step_us, STRAGGLER_MIN_US),
    )
