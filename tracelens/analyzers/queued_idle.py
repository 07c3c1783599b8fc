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

from dataclasses import dataclass

from tracelens.analyzers.base import Category, Fact, Found, Place
from tracelens.derive.context import AnalysisContext
from tracelens.derive.queued import BLOCKED_MIN_SHARE, QueuedWaits, finding_due
from tracelens.model.sources import PySource, user_source


@dataclass(frozen=True)
class QueuedFacts:
    waits: QueuedWaits  # what derive/queued found
    blocked_us: float  # of the idle, with the host in blocking calls, where it is named (0: not)


@dataclass(frozen=True)
class BlockedIn:
    """The host's blocking call the idle coincides with (derive/queued's name for it)."""

    what: str


def analyze(ctx: AnalysisContext) -> list[Found[QueuedFacts, BlockedIn]]:
    dev = ctx.ledger.primary
    q = ctx.queued_waits
    if dev is None or q is None or not finding_due(q, dev.window_us):
        return []
    idle = ctx.ledger.capped("idle_other", q.idle_us)
    blocked = q.blocked_us if q.blocked_us >= BLOCKED_MIN_SHARE * q.idle_us else 0.0
    blocked = min(blocked, idle)
    sources: tuple[PySource, ...] = ()
    if blocked > 0:
        srcs = [s for r in q.blocked_rows if (s := user_source(ctx.model, r)) is not None]
        sources = tuple(dict.fromkeys(srcs))[:3]
    return [
        Found(
            category=Category.QUEUED_IDLE,
            time_us=idle,
            expected_gain_us=blocked,
            facts=QueuedFacts(q, blocked),
            evidence=(
                Fact("queued_idle_us", idle, "us"),
                Fact("gaps", q.gaps, "count"),
                Fact("stall_us", q.stall_us, "us"),
                Fact("long_gaps", q.long_gaps, "count"),
                Fact("long_gap_us", q.long_us, "us"),
                Fact("launch_ahead_median_us", q.lead_median_us or 0.0, "us", total=False),
                Fact("blocked_us", q.blocked_us, "us"),
                Fact("stream_waits", q.stream_waits, "count"),
            ),
            places=tuple(
                Place(count=n, time_us=t, facts=BlockedIn(w), api=w.split(" in ", 1)[0])
                for w, n, t, _ in q.blocked_what
            )
            if blocked > 0
            else (),
            sources=sources,
            device=dev.device,
        )
    ]
