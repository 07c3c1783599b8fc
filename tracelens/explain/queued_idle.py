"""The words of the queued_idle finding."""

from __future__ import annotations

from tracelens.analyzers.base import Found
from tracelens.analyzers.queued_idle import BlockedIn, QueuedFacts
from tracelens.derive.queued import QUEUED_GAP_MIN_US, QUEUED_STALL_MIN_US, QueuedWaits, WaitsOn
from tracelens.domain import PerUnit, fmt_us, pct, per_unit
from tracelens.explain.base import Words

LABELS = {
    "queued_idle_us": "queued-work idle",
    "gaps": "gaps",
    "stall_us": f"of the idle, in stalls of {fmt_us(QUEUED_STALL_MIN_US)} or more",
    "long_gaps": f"gaps of {fmt_us(QUEUED_GAP_MIN_US)} or more",
    "long_gap_us": "time in those gaps",
    "launch_ahead_median_us": "median launch-ahead of the next work",
    "blocked_us": "of the idle, with the host in blocking calls",
    "stream_waits": "cross-stream event waits (cudaStreamWaitEvent)",
}


def _advice(q: QueuedWaits, blocked: bool) -> str:
    lead = (
        "The work was queued long before the GPU ran it, so launches are not what it waits for: a queued "
        "kernel waits on an event recorded on another stream (cudaStreamWaitEvent: "
        f"{q.stream_waits} in the window), on a peer rank, or on work another stream has not been given yet."
    )
    if blocked and q.waits_on:
        w = q.waits_on[0]
        what = w.kind.replace("_", "-")
        lead += (
            f" Here the queued work and the host's copy wait on the {what} on stream {w.stream}: the copy's "
            f"stream {w.copy_stream} runs only after it, so the host, blocked in the copy, launches nothing "
            f"meanwhile; look at why the {what} takes as long as it does too (its other ranks: report on every "
            "rank's trace together)."
        )
    if not blocked:
        return (
            lead + " Find the stream the next kernel waits on in the trace's flow and stream rows, and launch "
            "the work it waits for earlier (or drop the dependency when it is not needed)."
        )
    return (
        lead + " Here the idle coincides with the host sitting in blocking calls: while a thread waits in a "
        "device-to-host copy into pageable memory or a synchronize, it launches nothing, so a stream that "
        "waits for its next work (a batch's host-to-device copy, a collective) stalls the queued graph or "
        "kernels behind it. Copy into a pinned buffer with non_blocking=True and wait on an event only where "
        "the value is read (or move the read to the end of the step), then check which stream the queued "
        "work waits on."
    )


def _waits_on(w: WaitsOn) -> str:
    what = w.kind.replace("_", "-")
    kernel = w.kernel.split("(")[0]
    return (
        f"the copies' stream {w.copy_stream} ran again only after the {what} on stream {w.stream} ended ({kernel}, "
        f"{fmt_us(w.kernel_median_us)} a call; {fmt_us(w.after_median_us)} later; {w.calls} of the copies): the "
        f"copy waits on that {what} through the streams' event waits, and the host with it"
    )


def words(found: Found[QueuedFacts, BlockedIn], share: float, unit: PerUnit) -> Words:
    q, blocked = found.facts.waits, found.facts.blocked_us
    ahead = (
        f" (launched a median {fmt_us(q.lead_median_us)} earlier, by {', '.join(q.launch_apis)})"
        if q.lead_median_us is not None and q.launch_apis
        else ""
    )
    title = (
        f"The GPU idles {per_unit(found.time_us, unit)} ({pct(share)} of the analysed time) with its next work already "
        f"queued{ahead}"
    )
    if blocked > 0:
        copies = f"; {q.copy_bytes / 1e3:,.1f} KB copied to the host in all" if q.copy_bytes > 0 else ""
        parts = "; ".join(
            f"{w} ({n} {'call' if n == 1 else 'calls'}, {per_unit(t, unit)} of it, the longest {fmt_us(longest)})"
            for w, n, t, longest in q.blocked_what
        )
        title += f"; {per_unit(blocked, unit)} of it while the host sat in blocking calls: {parts}{copies}"
        if q.waits_on:
            title += "; " + _waits_on(q.waits_on[0])
    return Words(
        title=title,
        advice=_advice(q, blocked > 0),
        gain_note=(
            "at most the queued-work idle that coincides with the blocking calls: the trace shows no "
            "dependency edges, so this is an upper bound for removing those calls"
            if blocked > 0
            else "none estimated: nothing the trace shows explains this idle"
        ),
        labels=LABELS,
        places=[f"idle with the host in {p.facts.what}" for p in found.places],
    )
