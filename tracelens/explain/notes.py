"""The report's notes, written from what ranking.py has settled: the analysed window,
start-up left out, idle waiting on queued work, one-off start-up inside the window,
activities without a correlation id, and the profiler's and a harness's own time."""

from __future__ import annotations

from dataclasses import dataclass

from tracelens.derive.queued import BLOCKED_MIN_SHARE, QUEUED_GAP_MIN_US, QueuedWaits
from tracelens.derive.window.spans import Window
from tracelens.domain import PerUnit, fmt_us, per_unit
from tracelens.explain.window import window_reason
from tracelens.model.sampling import DownSampled


@dataclass(frozen=True)
class Unlinked:
    """The primary GPU's activities in the window without a usable correlation id."""

    count: int
    time_us: float
    share: float


@dataclass(frozen=True)
class NoteFacts:
    """What the notes say; a field left None (or empty) has no note."""

    window: Window
    unit: PerUnit  # the report's: the window's totals are said in it
    startup_before: bool = False  # start-up before the window is worth a note
    other_idle: float | None = None  # share idle with the next kernel queued
    queued: QueuedWaits | None = None
    startup_share: float | None = None
    unlinked: Unlinked | None = None
    profiler_share: float | None = None
    harness_share: float | None = None
    harness_us: float = 0.0


def queued_wait_words(q: QueuedWaits | None, unit: PerUnit) -> str:
    """What the queued-work idle coincides with (issue 24 §8), for the note below the
    queued_idle finding's share: the long gaps, how far ahead their work was launched."""
    if q is None or not q.long_gaps:
        return ""
    words = f" {q.long_gaps} gaps of {fmt_us(QUEUED_GAP_MIN_US)} or more hold {per_unit(q.long_us, unit)} of it"
    if q.lead_median_us is not None and q.launch_apis:
        words += (
            f"; their next work had been launched a median {fmt_us(q.lead_median_us)} earlier "
            f"(by {', '.join(q.launch_apis)})"
        )
    if q.blocked_what and q.blocked_us >= BLOCKED_MIN_SHARE * q.idle_us:
        words += f"; {per_unit(q.blocked_us, unit)} of the idle coincides with the host in {q.blocked_what[0][0]}"
    return words + "."


def notes_text(n: NoteFacts) -> tuple[str, ...]:
    win = n.window
    out = [f"Analysed window: {window_reason(win).rstrip('.')}."]
    if n.startup_before:
        parts = ", ".join(f"{p.what.replace('_', ' ')} {fmt_us(p.time_us)}" for p in win.startup[:4])
        out.append(
            f"Start-up before the window ({fmt_us(win.startup_us)}) is reported apart and not blamed"
            + (f": {parts}." if parts else ".")
        )
    if n.other_idle is not None:
        out.append(
            f"The GPU also idles {n.other_idle:.0%} of the analysed time with its next kernel already queued: it "
            "waits on another stream or an event, not on this host thread. On one GPU look at cross-stream "
            "dependencies." + queued_wait_words(n.queued, n.unit)
        )
    if n.startup_share is not None:
        out.append(
            f"{n.startup_share:.0%} of the analysed time is one-off start-up work on the host (CUDA/HIP graph capture, "
            "whose launches are recorded into the graph and do not run; graph instantiation; cold first launches): "
            "a serving engine's or a first iteration's set-up, not a bottleneck of the steady state."
        )
    if n.unlinked is not None:
        u = n.unlinked
        out.append(
            f"{u.count:,} GPU kernels and copies in the window ({per_unit(u.time_us, n.unit)}, "
            f"{u.share:.0%} of the analysed time) have no usable correlation id: their GPU time is in the "
            "ledger, but the launches, ops and source lines behind them are unknown, so host syncs, launch "
            "overhead and the roofline are judged without them."
        )
    if n.profiler_share is not None:
        out.append(
            f"{n.profiler_share:.0%} of the analysed time is idle while the host runs torch.profiler's own "
            "prof.step(): profiler overhead that an unprofiled run does not have."
        )
    if n.harness_share is not None:
        out.append(
            f"{n.harness_share:.0%} of the analysed time ({per_unit(n.harness_us, n.unit)}) is idle while the "
            "host runs the benchmark harness's own method between its timed regions (a cache flush such as PARAM's "
            "[param|clear_cache], a warm-up range): the benchmark's method, not the program's bottleneck, so no "
            "finding blames it."
        )
    return tuple(out)


def down_sampled_words(d: DownSampled, unrecorded_us: float, share: float, unit: PerUnit) -> str:
    """The note of a down-sampled trace (model/sampling.py): what was removed, and what the
    report can and cannot say about it."""
    return (
        f"This trace is down-sampled: events were removed after the capture. Of its {d.host_ops:,} host ops "
        f"{d.host_ops - d.silent_ops:,} launched GPU work (a complete trace has views, allocations and other ops "
        f"that launch nothing), none of the {d.allocating_ops} ops that allocate their output has its aten::empty "
        f"child, and its {d.runtime_calls:,} runtime calls are all launches. So kernels that ran and host ops that "
        "ran between the remaining ones are missing: the GPU idle the trace shows holds dropped kernels, and the "
        f"host time between its ops holds dropped ops. That idle ({per_unit(unrecorded_us, unit)}, {share:.0%} of "
        "the analysed time) is 'unrecorded' in the ledger, not host work or launch overhead, and no step is "
        "replayed; each remaining event's own time (a collective kernel's, say) still holds. Profile again without "
        "removing events for the whole picture."
    )
