"""Identity, matching and clocks across ranks (tracelens/job/analyze.py's docstring gives
the rules): which file is which rank of which job, each collective as one call on every
rank, and each rank's clock offset to the reference rank."""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field

import numpy as np

from tracelens.derive.collectives import SYNC_KINDS
from tracelens.domain import fmt_us
from tracelens.job.model import Collective, RankFailure, RankSummary
from tracelens.report.job_report import FailedRank

#: The alignment is too poor to tell who arrived last when the matched calls still end
#: further apart than this share of their median duration: the calls matched are not the
#: same calls (traces sampled or cut differently), so no straggler is named.
ALIGN_POOR_SHARE = 0.25
#: Ranks whose clocks, before alignment, agree within this (and a quarter of a call) share
#: one clock (one host: Kineto's times are the host's wall clock): on a loaded host their
#: gloo exchanges end up to tens of ms apart (ddp_cpu.py on the 2-core machine: 7.8 ms
#: median, 47 ms worst, with clocks 0.3 ms apart), which says nothing about the calls.
#: (Collective kernels do end together: HTA's sampled rank pair, ends 65 ms apart with
#: clocks 0.2 ms apart, are not the same calls.)
SAME_CLOCK_US = 2000.0


@dataclass
class Instance:
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


def keyed_calls(s: RankSummary, by_step: bool) -> dict[tuple[object, ...], Collective]:
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


def identity(results: list[RankSummary | RankFailure]) -> tuple[dict[int, RankSummary], list[FailedRank], list[str]]:
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


def align_clocks(
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


#: A call whose arrivals spread less than this has no straggler worth naming: clocks are
#: aligned to tens of µs at best (CUPTI's timestamps, a kernel's launch jitter).
SKEW_MIN_US = 50.0


def match_instances(
    ranks: list[int],
    keyed: dict[int, dict[tuple[object, ...], Collective]],
    by_rank: dict[int, RankSummary],
    offsets: dict[int, float],
    counted_steps: set[int],
) -> tuple[list[Instance], int]:
    """Each key seen on every rank as one call on the aligned timeline (its arrivals,
    ends, last rank and skew), and how many keys were not seen on every rank."""
    all_keys: set[tuple[object, ...]] = set()
    for r in ranks:
        all_keys |= set(keyed[r])
    instances: list[Instance] = []
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
        inst = Instance(k, c0.group, c0.kind, c0.source, ranks, arrive, end, calls, inside,
                         bytes=int(np.median([c.bytes for c in calls])))  # fmt: skip
        last = int(np.argmax(arrive))
        inst.last = ranks[last]
        inst.skew = float(arrive[last] - arrive.min())
        inst.waits = arrive[last] - arrive
        srt = np.sort(arrive)
        inst.lost = float(srt[-1] - srt[-2]) if len(srt) > 1 else 0.0
        instances.append(inst)
    return instances, unmatched
