"""The headline's sentences written from what ranking.py has settled: the leading finding
with its gain (the blocker's fix in a few words first), or why none leads; what the step
should take after the first fix (and how to check it), and what it takes without the
profiler's own host time."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from tracelens.derive.devices import OtherAccelerator
from tracelens.domain import CAUSE_LABELS, MEDIUM_SHARE, PerUnit, category_label, fmt_us, per_unit
from tracelens.explain.base import where as where_in
from tracelens.explain.host_sync import call_name
from tracelens.explain.power_throttle import machine_headline
from tracelens.report.enums import Category
from tracelens.report.findings import Finding, Prediction


def unprofiled_sentence(unit: str, step: float, now: float, after: float) -> str:
    """What the profiler's own host time changes (derive/profiler_cost.py): the step as the
    user sees it without the profiler, now and after the fix."""
    what = "the window" if unit == "window" else f"the {unit}"
    return (
        f"Without the profiler (its own host time here is about {fmt_us(step - now)} of the {fmt_us(step)}, "
        f"estimated from the events it recorded) {what} takes about {fmt_us(now)}, and about {fmt_us(after)} "
        f"after the fix: {fmt_us(now - after)} saved."
    )


#: A predicted step is given as a range when its ends differ by more than this share.
RANGE_SHARE = 0.02


def prediction_sentence(
    unit: str,
    step: float,
    predicted: float,
    low: float,
    high: float,
    pred: Prediction,
    blockers: str = "",
    with_part: bool = True,
) -> str:
    """The headline's falsifiable end: what the step should take after the first fix, and
    how to check it (predicted, then measured); `with_part`: with what the gain is (the
    headline leaves it to a note when it does not fit, part_note)."""
    what = "the window" if unit == "window" else f"the {unit}"
    wide = high - low > RANGE_SHARE * max(predicted, 1e-9) and fmt_us(low) != fmt_us(high)
    rng = f" ({fmt_us(low)} to {fmt_us(high)})" if wide else ""  # never "(1.2 ms to 1.2 ms)"
    how = "replayed from this trace" if pred.basis == "replay" else "estimated"
    part = f"; the gain is {pred.part}" if pred.part and with_part else ""
    after = f" and the {blockers} fix" if blockers else ""
    return (
        f"After it{after} {what} should take about {fmt_us(predicted)}{rng} instead of {fmt_us(step)} ({how}{part}); "
        "check with `tracelens diff` on a new capture."
    )


def part_note(pred: Prediction) -> str:
    """What a prediction's gain is, as a note of its own ("" when the prediction says nothing)."""
    return f"The predicted gain is {pred.part}." if pred.part else ""


def first_fix(blocker: Finding) -> str:
    """The blocker's fix in a few words, with what and where (for the headline)."""
    if blocker.category == Category.HOST_SYNC:
        calls = list(dict.fromkeys(call_name(s.call, s.kind) for s in blocker.sites))
        where = f" {where_in(blocker.sources[0])}" if blocker.sources else ""
        what = ", ".join([c for c in calls if c and c not in ("exec()", "<module>")][:3])
        return f"remove the host syncs{f' ({what})' if what else ''}{where}"
    if blocker.category == Category.COMPILATION:
        return "remove the graph breaks"
    if blocker.category == Category.SHAPE_DYNAMISM:
        return "make the input shapes static (pad or bucket them)"
    return blocker.title


@dataclass(frozen=True)
class NoGpuFacts:
    """Why there is nothing on a GPU to analyse."""

    accelerator: OtherAccelerator | None = None  # another accelerator's trace
    counted_kernels: int | None = None  # kernels measured by counters, with no timeline


def no_gpu_headline(f: NoGpuFacts) -> str:
    """Why there is nothing on a GPU to analyse: another accelerator, or counters without a timeline."""
    acc = f.accelerator
    if acc is not None:
        return (
            f"This trace is from an {acc.label} accelerator, not a GPU: its {acc.device_events:,} device events and "
            f"{acc.runtime_events:,} runtime calls are outside what tracelens analyses (the time ledger, roofline, "
            "launch overhead and host syncs read CUDA/ROCm kernels, copies and runtime calls). Host-side findings only."
        )
    if f.counted_kernels is not None:
        return (
            f"No kernel timeline: {f.counted_kernels} kernels were measured by hardware counters (CUPTI profiler "
            "mode: torch.profiler's profiler_metrics replays each kernel and records no kernel activity), so there is "
            "no GPU time to attribute. Their FLOPs and bytes are in the counters section; record the timing without "
            "profiler_metrics (tracelens capture --counters records both)."
        )
    return "No GPU activity to analyse."


@dataclass(frozen=True)
class QuietFacts:
    """The facts of a headline with no finding leading."""

    no_gpu: NoGpuFacts
    startup_share: float | None = None  # start-up dominates the window
    busy_share: float | None = None  # None: no GPU time in the window
    biggest: str = ""  # the largest ledger cause
    biggest_share: float = 0.0
    machine: Finding | None = None  # a machine condition at the bar
    graph_latency: bool = False  # the largest part is latency-bound kernels of replayed graphs


def quiet_headline(f: QuietFacts) -> str:
    """The headline when no finding leads: start-up dominates, or the GPU's busy share and
    its largest part (a machine condition first, a replayed graph's latency-bound time)."""
    if f.startup_share is not None:
        return (
            f"{f.startup_share:.0%} of the analysed time is one-off start-up work on the host (CUDA/HIP graph capture, "
            "graph instantiation, cold first launches), not a steady-state bottleneck: profile the steady "
            "state (later steps, or the engine's serving loop) to see what limits it."
        )
    if f.busy_share is None:
        return no_gpu_headline(f.no_gpu)
    headline = (
        f"The GPU is busy {f.busy_share:.0%} of the analysed time (largest part: "
        f"{CAUSE_LABELS.get(f.biggest, f.biggest).removeprefix('busy: ')}, {f.biggest_share:.0%}); no finding "
        f"would gain {MEDIUM_SHARE:.0%} or more of it."
    )
    if f.machine is not None:
        headline = f"{machine_headline(f.machine)} {headline}"
    if f.graph_latency:
        # Issue 24 §4: a replayed graph whose host runs ahead has no host problem;
        # its time is the graph's own latency-bound kernels.
        headline += (
            " That time is latency-bound kernels replayed from CUDA graphs, with the host running ahead: "
            "fusing the graph's body into fewer, larger kernels (torch.compile before capture) is what "
            "shortens the step."
        )
    return headline


@dataclass(frozen=True)
class LeadFacts:
    """The facts of a headline a finding leads: the finding, its largest part, its blocker
    (whose fix comes first), the gain (a window total) and the report's unit. The titles
    are the findings' own: explain/ wrote their totals in the unit already (issue 27)."""

    top: Finding
    part: Finding | None
    blocker: Finding | None
    gain_us: float
    unit: PerUnit
    window_us: float


#: The headline (the finding's sentence and the fix's) fits a phone: about eight lines at
#: 390 px (issue 27). What does not fit goes below it, into the notes, whole.
HEADLINE_CHARS = 400


def shorter_title(title: str, room: int) -> str:
    """The title cut at its last clause boundary ("; ", then ": ") that fits `room` with
    its brackets closed; the whole title where none does (the finding below says it all)."""
    if len(title) <= room:
        return title
    for sep in ("; ", ": "):
        cuts = [
            m.start()
            for m in re.finditer(re.escape(sep), title)
            if m.start() <= room and title[: m.start()].count("(") == title[: m.start()].count(")")
        ]
        if cuts:
            return title[: max(cuts)]
    return title


@dataclass(frozen=True)
class Lead:
    """The lead headline, its advice, and what did not fit in the headline (for the notes)."""

    headline: str
    advice: str
    moved: tuple[str, ...] = ()


def lead_headline(f: LeadFacts, reserve: int = 0) -> Lead:
    """The headline and the advice (the blocker's fix first) when a finding leads, the
    headline within HEADLINE_CHARS less `reserve` (the prediction's sentence, which follows
    it): the largest part's sentence, then the blocker's reason (the advice has it), then
    the title's last clauses go first."""
    limit = HEADLINE_CHARS - reserve
    top = f.top
    own = top.title
    part = f.part.title if f.part is not None else ""
    if top.parent is not None:
        own, part = f"{own} (part of the {category_label(top.parent, capital=False)} finding)", ""
    if f.window_us <= 0:
        return Lead(own + (f"; the largest part: {part}" if part else ""), top.advice)
    # The share's base is the analysed time, as every share of the report (the title's own
    # says so); said bare here, the headline keeps room for the prediction (HEADLINE_CHARS).
    gain = f"about {per_unit(f.gain_us, f.unit)} to gain ({f.gain_us / f.window_us:.0%})."
    if f.blocker is None:
        advice, fixes = top.advice, [f"Fix this first: {gain}"]
    else:
        first = first_fix(f.blocker)
        advice = (
            f"1. {first[0].upper()}{first[1:]}, since {top.blocked_reason}:\n{f.blocker.advice}\n2. Then: {top.advice}"
        )
        fixes = [
            f"Fix first: {first}, since {top.blocked_reason}. Both fixed, {gain}",
            f"Fix first: {first}. Both fixed, {gain}",
        ]
    moved: list[str] = []
    title = own + (f"; the largest part: {part}" if part else "")
    if part and len(title) + 2 + len(fixes[0]) > limit:
        title = own
        moved.append(f"The largest part: {part}.")
    fix = next((x for x in fixes if len(title) + 2 + len(x) <= limit), fixes[-1])
    cut = shorter_title(title, limit - 2 - len(fix))
    if len(cut) < len(title):
        # The clauses cut from the headline are the first note under it, not lost (e.g.
        # "289.6 ms of the wait is their device-to-host copies to pageable memory").
        rest = title[len(cut) :].lstrip(";: ")
        moved.insert(0, rest[:1].upper() + rest[1:] + ".")
    return Lead(f"{cut}. {fix}", advice, tuple(moved))


#: Why a finding's fix waits on another's (ranking.blockers decides which).
BlockKind = Literal["syncs_graph", "shapes_graph", "breaks_fusion", "syncs_fusion"]


@dataclass(frozen=True)
class BlockFacts:
    kind: BlockKind
    sync_calls: int = 0  # blocking host syncs in the window
    steps: int = 1
    unit: str = "step"
    per_sync: float = 0.0  # GPU launches between syncs on average
    cut_share: float = 0.0  # share of the fusion's saving in chains a sync cuts


def blocked_reason(b: BlockFacts) -> str:
    """Why the blocker's fix comes first, in words (the finding's blocked_reason)."""
    units = f"{b.steps} {b.unit}" + ("" if b.steps == 1 else "s")
    if b.kind == "syncs_graph":
        return (
            f"a CUDA graph cannot capture a step that syncs ({b.sync_calls} host syncs in {units}, "
            f"{b.per_sync:.0f} GPU launches between syncs on average: too few for a graph of each piece "
            f"to pay), and torch.compile breaks its graph at each one"
        )
    if b.kind == "shapes_graph":
        return "a CUDA graph replays fixed shapes: the changing input shapes come first"
    if b.kind == "breaks_fusion":
        return "torch.compile fuses only inside one graph: the graph breaks come first"
    return (
        f"torch.compile fuses only between host syncs and breaks its graph at each one "
        f"({b.sync_calls} in {units}; a sync separates the passes of chains holding "
        f"{b.cut_share:.0%} of the fusion's saving)"
    )
