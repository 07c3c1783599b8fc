"""queued_idle: the GPU idles with its next work already queued (issue 24 §8).

Part of question 1: the device waits, but not for this host thread's launches. The
ledger's idle_other is that time; when it is a large part of the window (the largest
cause on HTA's rank0.json, 59%) it gets a finding that names what the trace shows it
waiting beside (tracelens.derive.queued): how far ahead the work was queued and by what
call, the blocking host calls it coincides with (a pageable device-to-host copy that
waits for its stream keeps the host from launching what another stream needs), and the
cross-stream event waits. The trace shows no dependency edges, so the finding says
"coincides with", and its gain is the part a named fix can reach: the idle that
coincides with the blocking calls, an upper bound.
"""

from __future__ import annotations

from tracelens.analyzers.base import Category, Finding, Metric, Site, severity_for
from tracelens.derive.context import AnalysisContext
from tracelens.derive.queued import BLOCKED_MIN_SHARE, QUEUED_GAP_MIN_US, QUEUED_STALL_MIN_US, QueuedWaits, finding_due
from tracelens.domain import fmt_us
from tracelens.model.sources import PySource, user_source


def analyze(ctx: AnalysisContext) -> list[Finding]:
    dev = ctx.ledger.primary
    q = ctx.queued_waits
    if dev is None or q is None or not finding_due(q, dev.window_us):
        return []
    idle = ctx.ledger.capped("idle_other", q.idle_us)
    share = ctx.share(idle)
    ahead = (
        f" (launched a median {fmt_us(q.lead_median_us)} earlier, by {', '.join(q.launch_apis)})"
        if q.lead_median_us is not None and q.launch_apis
        else ""
    )
    title = f"The GPU idles {fmt_us(idle)} ({share:.0%} of the window) with its next work already queued{ahead}"
    blocked = q.blocked_us if q.blocked_us >= BLOCKED_MIN_SHARE * q.idle_us else 0.0
    blocked = min(blocked, idle)
    sources: tuple[PySource, ...] = ()
    if blocked > 0:
        copies = f"; {q.copy_bytes / 1e3:,.1f} KB copied to the host in all" if q.copy_bytes > 0 else ""
        parts = "; ".join(
            f"{w} ({n} {'call' if n == 1 else 'calls'}, {fmt_us(t)} of it, the longest {fmt_us(longest)})"
            for w, n, t, longest in q.blocked_what
        )
        title += f"; {fmt_us(blocked)} of it while the host sat in blocking calls: {parts}{copies}"
        srcs = [s for r in q.blocked_rows if (s := user_source(ctx.model, r)) is not None]
        sources = tuple(dict.fromkeys(srcs))[:3]
    return [
        Finding(
            category=Category.QUEUED_IDLE,
            severity=severity_for(ctx.share(blocked)) if blocked > 0 else severity_for(0.0),
            title=title,
            time_us=idle,
            share=share,
            advice=_advice(q, blocked > 0),
            expected_gain_us=blocked,
            gain_note=(
                "at most the queued-work idle that coincides with the blocking calls: the trace shows no "
                "dependency edges, so this is an upper bound for removing those calls"
                if blocked > 0
                else "none estimated: nothing the trace shows explains this idle"
            ),
            evidence=(
                Metric("queued-work idle", idle, "us"),
                Metric("gaps", q.gaps, "count"),
                Metric(f"of the idle, in stalls of {fmt_us(QUEUED_STALL_MIN_US)} or more", q.stall_us, "us"),
                Metric(f"gaps of {fmt_us(QUEUED_GAP_MIN_US)} or more", q.long_gaps, "count"),
                Metric("time in those gaps", q.long_us, "us"),
                Metric("median launch-ahead of the next work", q.lead_median_us or 0.0, "us"),
                Metric("of the idle, with the host in blocking calls", q.blocked_us, "us"),
                Metric("cross-stream event waits (cudaStreamWaitEvent)", q.stream_waits, "count"),
            ),
            sites=tuple(
                Site(description=f"idle with the host in {w}", count=n, time_us=t, api=w.split(" in ", 1)[0])
                for w, n, t, _ in q.blocked_what
            )
            if blocked > 0
            else (),
            sources=sources,
            device=dev.device,
        )
    ]


def _advice(q: QueuedWaits, blocked: bool) -> str:
    lead = (
        "The work was queued long before the GPU ran it, so launches are not what it waits for: a queued "
        "kernel waits on an event recorded on another stream (cudaStreamWaitEvent: "
        f"{q.stream_waits} in the window), on a peer rank, or on work another stream has not been given yet."
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
