"""The job report's words: each straggler reason in plain words, what to do about it,
the straggler's advice and the job's headline, from the facts tracelens/job/analyze.py
measures (the thresholds it applied come in as flags and numbers)."""

from __future__ import annotations

from dataclasses import dataclass

from tracelens.domain import fmt_us
from tracelens.report.job_report import Straggler

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
    "gpu_busy_unknown": "more GPU work (kernels not classified)",
    "gpu_busy_copy": "more GPU copies",
    "communication": "waiting in another collective",
    "idle_other": "GPU waits outside its own work (streams, events)",
    "unrecorded": "time its trace does not describe (a down-sampled trace)",
    "profiler": "the profiler's own overhead",
    "harness": "the benchmark harness's own work (cache flush, warm-up)",
    "unknown": "unknown",
}

#: What to do about each reason.
ADVICE = {
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


def detail_words(host_part: str | None, frame: str) -> str:
    """The host-side part of a straggler's reason (for host_bound: which host work) and
    the Python frame it ran in, in words ("" when neither)."""
    if host_part is not None:
        return reason_words(host_part) + (f", in {frame}" if frame else "")
    return f"in {frame}" if frame else ""


def reason_label(reason: str, detail: str) -> str:
    """A straggler's reason with its detail: "host-bound work: data loading"."""
    return reason_words(reason) + (
        f": {detail}" if reason == "host_bound" and detail else f" {detail}" if detail else ""
    )


def second_cause(cause: str, per_step_us: float) -> str:
    """The second cause worth naming beside a straggler's first."""
    return f"{reason_words(cause)}: {fmt_us(per_step_us)} more"


@dataclass(frozen=True)
class AdviceFacts:
    """What a straggler's advice states."""

    rank: int
    late: int  # collectives it was last at
    matched: int  # collectives counted
    key: str  # the ADVICE entry for its reason
    explained: bool  # its own extra work explains it
    partly: bool  # explained, but its own work is under most of its cost
    reason_label: str
    reason_us: float  # per step
    own_us: float  # per step
    cost_us: float  # per step
    profiler_us: float  # the profiler's extra per step, when it may move the straggler (else 0)
    more_python_frames: float  # per step, beside the median other rank
    us_per_python_frame: float


def straggler_advice(a: AdviceFacts) -> str:
    c, own = a.cost_us, a.own_us
    if a.explained:
        advice = (
            f"Rank {a.rank} arrives last at {a.late} of {a.matched} collectives: "
            + ADVICE.get(a.key, ADVICE["unknown"])
            + "."
        )
        if a.partly:
            advice += (
                f" Its own extra work accounts for {fmt_us(own)} of the {fmt_us(c)} per step; the rest is delay "
                "its trace does not show (a loaded host delaying its threads, another process on its GPU)."
            )
    else:
        advice = (
            f"Rank {a.rank} arrives last at {a.late} of {a.matched} collectives, but its own trace shows "
            + (f"only {fmt_us(own)} per step more work than the others' before them" if own > 0 else
               "no more work than the others' before them")
            + f" (the most it has extra is {a.reason_label}, {fmt_us(a.reason_us)} per step): it waits for something "
            "its trace does not show, such as another process on its GPU, its device's copies, or a slower process "
            "group's collective. Check what shares its GPU and host."
        )  # fmt: skip
    if a.profiler_us > 0:
        advice += (
            f" The profiler itself may account for up to {fmt_us(a.profiler_us)} of the {fmt_us(c)} per step: this "
            f"rank recorded {a.more_python_frames:,.0f} more Python frames per step than the others (with_stack), "
            f"each costing its thread about {a.us_per_python_frame:.2f} µs (more on a loaded host). That is an upper "
            "bound: it holds when the extra Python is a fixed amount of work, while a loop that runs for a set "
            "time is not lengthened. Capture again with --no-stack (or with_stack=False) to measure the "
            "straggler without it."
        )
    return advice


@dataclass(frozen=True)
class HeadlineFacts:
    """What the job's headline states."""

    ranks: int  # ranks read
    world: int | None
    matched: int  # collectives matched on every rank
    counted: int  # of them inside every rank's window
    poor: bool  # they do not end together after alignment
    stragglers: tuple[Straggler, ...]
    unexplained: tuple[Straggler, ...]
    partly_explained: bool  # the first straggler's own work is under most of its cost
    profiler_may_move: bool  # the profiler may account for the first straggler
    median_skew_us: float
    lost_skew_us: float  # per step
    exposed_us: float  # exposed communication of the median rank, per step
    step_us: float
    often: tuple[int, int, float] | None  # (rank, calls last at, cost per step) of a rank often last, under the floor
    straggler_floor_us: float  # per step: what a straggler must cost


def headline(h: HeadlineFacts) -> str:
    n, world, step_us = h.ranks, h.world, h.step_us
    if n == 0:
        return "No rank could be read."
    if n == 1:
        if world and world > 1:
            return (
                f"Only 1 of {world} ranks' traces could be used (see the inputs below): a job report needs two or "
                "more ranks of one job to measure skew or name a straggler."
            )
        return "One rank only: a job report needs the traces of two or more ranks of one job."
    if not h.counted:
        if h.matched:
            return (
                f"{n} ranks, {h.matched} collectives matched on every rank, but none inside every rank's analysed "
                "window: no skew or straggler can be measured."
            )
        return f"{n} ranks, but no collective was matched on every rank: no skew or straggler can be measured."
    if h.poor:
        return (
            f"{n} ranks, {h.counted} collectives matched by order, but they do not end together after clock "
            "alignment: these are not the same calls on every rank (sampled or differently cut traces), so no "
            "straggler is named."
        )

    def share(us: float) -> str:
        return f" ({us / step_us:.0%} of a {fmt_us(step_us)} step)" if step_us > 0 else ""

    comm = f" Exposed communication costs the median rank {fmt_us(h.exposed_us)} per step{share(h.exposed_us)}."
    if h.stragglers:
        s = h.stragglers[0]
        why = (
            "its trace does not say why"
            if s.reason == "unknown"
            else f"because of {s.reason_label}: {fmt_us(s.reason_us)} more per step than the others before them"
            + (f" (and {s.also})" if s.also else "")
            + (
                f"; that work accounts for {fmt_us(s.own_us)} of it, the rest is delay its trace does not show"
                if h.partly_explained
                else ""
            )
        )
        more = f" (and {len(h.stragglers) - 1} more)" if len(h.stragglers) > 1 else ""
        prof = " The profiler's own overhead may be part of it (see its advice)." if h.profiler_may_move else ""
        return (
            f"Rank {s.rank} is the straggler{more}: last at {s.late_count} of {s.matched} collectives, it costs the "
            f"job {fmt_us(s.cost_us)} per step{share(s.cost_us)}, {why}." + prof + comm
        )
    if h.unexplained:
        u = h.unexplained[0]
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
    if h.often is not None:
        rank, last, cost = h.often
        often = (
            f" Rank {rank} is last at {last} of them, {fmt_us(cost)} per step: under the "
            f"{fmt_us(h.straggler_floor_us)} per step a straggler costs "
            "(ranks that share a host or a GPU arrive that far apart with the same work)."
        )
    return (
        f"No straggler: across {h.counted} matched collectives the ranks arrive within {fmt_us(h.median_skew_us)} "
        f"of each other (median); arrival skew costs {fmt_us(h.lost_skew_us)} per step." + often + comm
    )
