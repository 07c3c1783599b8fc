"""Ranking: findings in the order an expert looks, the six questions, the primary
bottleneck.

The order is the seed document's: is the host waiting on the device? is it drowning in
tiny launches? is it moving far more data than it reuses? shape dynamism? allocation?
raw compute? It is "what to suspect and measure first", not a ranking of sizes: within
a question, findings are sorted by the time they cost.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from tracelens.analyzers import BUILT_CATEGORIES, BUSY, CATEGORY_ORDER, LEDGER_POOL, PARENT_OF, categories_of
from tracelens.derive.context import AnalysisContext
from tracelens.derive.devices import other_accelerator
from tracelens.derive.fusion import saved_across_syncs
from tracelens.derive.ledger import BUSY_CAUSES
from tracelens.derive.profiler_cost import MATTERS_SHARE
from tracelens.derive.queued import finding_due
from tracelens.domain import MEDIUM_SHARE, PerUnit, category_label, severity_for
from tracelens.explain.headline import (
    HEADLINE_CHARS,
    BlockFacts,
    LeadFacts,
    NoGpuFacts,
    QuietFacts,
    blocked_reason,
    lead_headline,
    part_note,
    prediction_sentence,
    quiet_headline,
    unprofiled_sentence,
)
from tracelens.explain.notes import NoteFacts, Unlinked, notes_text
from tracelens.explain.power_throttle import machine_gain_note
from tracelens.explain.questions import AnswerCase, AnswerFacts, Missing, RoofCover, Unmeasured, answer_text
from tracelens.model.schema import Kind
from tracelens.model.trace import TraceModel
from tracelens.predict.blocking import has_fix, sync_cut
from tracelens.report import Question, Summary
from tracelens.report.enums import WHOLE_UNITS, Category, QuestionId, QuestionStatus, Severity
from tracelens.report.findings import Finding, Prediction


@dataclass(frozen=True)
class DiagnosticStep:
    number: int
    id: QuestionId
    question: str
    categories: tuple[Category, ...]
    not_built: str  # what the report says while no analyzer covers this question


#: The seed documents' questions, in the order an expert asks them; the categories that
#: answer each come from the analyzers' registry (tracelens.analyzers.ANALYZERS).
QUESTIONS: tuple[tuple[QuestionId, str], ...] = (
    ("host_waits", "Is the host waiting on the device, or the device on the host?"),
    ("launch", "Is the GPU starved by kernel-launch overhead (many tiny kernels)?"),
    ("memory", "Is it moving far more data than it reuses (memory-bandwidth bound)?"),
    ("shape_dynamism", "Do changing shapes defeat compilation, CUDA graphs or the allocator?"),
    ("allocation", "Is allocation (cudaMalloc, allocator churn) in the way?"),
    ("compute", "Is it really compute-bound, and are matmul shapes and clocks costing throughput?"),
)
DIAGNOSTIC_ORDER: tuple[DiagnosticStep, ...] = tuple(
    DiagnosticStep(number, qid, question, categories_of(qid), "")
    for number, (qid, question) in enumerate(QUESTIONS, start=1)
)

#: A question is answered "yes" when one of its findings is at least this severe.
YES_SEVERITY = Severity.MEDIUM

#: The primary is the largest expected gain; gains within this factor of the largest are
#: a near tie (within 20%), broken by the diagnostic order.
NEAR_TIE = 0.8
#: A child finding headlines instead of its parent when it holds this share of the
#: parent's gain (pad the misaligned matmul, rather than "compute-bound kernels").
CHILD_HEADLINE_SHARE = 0.5
#: A part of the primary finding is named in the headline ("the largest part: ...") only
#: when it holds at least this share of the primary's gain: a 6 ms sub-finding of a
#: 361 ms host-bound finding is not what that time is, and stays among the findings.
PART_IN_HEADLINE_SHARE = 0.2


def _finite(x: float) -> float:
    return float(x) if math.isfinite(x) else 0.0


def _capped(f: Finding, room_us: float, window_us: float, parent: Category | None = None) -> Finding:
    time_us = max(min(_finite(f.time_us), room_us), 0.0)
    share = time_us / window_us if window_us > 0 else 0.0
    # No gain exceeds the time it comes from, replayed or estimated (the one ledger): the
    # replay's knock-on savings in time other causes own stay in the finding's prediction
    # (the step after the fix), not in its gain.
    cap = time_us
    gain = max(min(_finite(f.expected_gain_us), cap), 0.0)
    low = max(min(_finite(f.expected_gain_low_us), gain), 0.0)
    high = max(min(_finite(f.expected_gain_high_us), cap), gain)
    return replace(
        f, time_us=time_us, share=share, expected_gain_us=gain, expected_gain_low_us=low,
        expected_gain_high_us=high, severity=severity_for(share), parent=parent,
    )  # fmt: skip


def _no_gain(f: Finding, step_us: float, unit: PerUnit) -> Finding:
    """A machine condition keeps its time (the one ledger) but offers no gain: no change to
    the program removes a power cap (power_gemm printed "expected gain: 2.06 s")."""
    note = machine_gain_note(f.time_us, unit)
    old = f.prediction or Prediction("none", "estimate", note, step_us, step_us, 0.0, 0.0, 0.0)
    # The step after "the fix" is the step now, with and without the profiler.
    pred = replace(
        old, fix="none", basis="estimate", model=note, predicted_step_us=old.step_us, gain_us=0.0,
        gain_low_us=0.0, gain_high_us=0.0, blocked_by="", part="",
        unprofiled_predicted_step_us=old.unprofiled_step_us, unprofiled_gain_us=0.0,
    )  # fmt: skip
    return replace(
        f, expected_gain_us=0.0, expected_gain_low_us=0.0, expected_gain_high_us=0.0,
        gain_note=note, prediction=pred,
    )  # fmt: skip


def settle(ctx: AnalysisContext, findings: list[Finding]) -> list[Finding]:
    """Fit the findings to the ledger: children name their parent and stay inside its
    time, top-level findings draw on disjoint ledger causes (so their shares add up to at
    most 1), no gain exceeds the time it comes from, and severity follows the share (one
    place for all of them)."""
    dev = ctx.ledger.primary
    window = ctx.window_us
    by_cause = dict(dev.by_cause) if dev is not None else {}
    present = {f.category for f in findings}
    top = [f for f in findings if PARENT_OF.get(f.category) not in present]
    children = [f for f in findings if PARENT_OF.get(f.category) in present]
    pool_left = dict(by_cause)
    busy_left = sum(by_cause.get(c, 0.0) for c in BUSY_CAUSES)
    settled: dict[int, Finding] = {}
    # Findings with a cause of their own first, then those drawing on the rest of busy.
    for i in sorted(range(len(top)), key=lambda i: BUSY in LEDGER_POOL.get(top[i].category, (BUSY,))):
        f = top[i]
        pools = LEDGER_POOL.get(f.category, (BUSY,))
        room = busy_left if BUSY in pools else sum(pool_left.get(c, 0.0) for c in pools)
        g = _capped(f, room, window)
        left = g.time_us
        if BUSY in pools:
            busy_left -= left
        for c in pools:
            take = min(left, pool_left.get(c, 0.0))
            pool_left[c] = pool_left.get(c, 0.0) - take
            busy_left -= take if c in BUSY_CAUSES else 0.0
            left -= take
        settled[i] = g
    step = window / max(ctx.n_steps, 1)
    out = [
        _no_gain(settled[i], step, ctx.per_unit) if top[i].category in MACHINE_CONDITIONS else settled[i]
        for i in range(len(top))
    ]
    parents = {f.category: f for f in out}
    kids_of: dict[Category, list[Finding]] = {}
    for f in children:
        kids_of.setdefault(PARENT_OF[f.category], []).append(f)
    for cat, kids in kids_of.items():
        parent = parents[cat]
        kids = [_capped(k, parent.time_us, window, cat) for k in kids]
        # Children may describe the same kernels: together they never gain more than
        # the parent's time.
        gains = sum(k.expected_gain_us for k in kids if k.prediction is None or k.prediction.basis != "replay")
        scale = parent.time_us / gains if gains > parent.time_us else 1.0
        out += [
            k
            if k.prediction is not None and k.prediction.basis == "replay"
            else replace(
                k,
                expected_gain_us=k.expected_gain_us * scale,
                expected_gain_low_us=k.expected_gain_low_us * scale,
                expected_gain_high_us=k.expected_gain_high_us * scale,
            )
            for k in kids
        ]
    return blockers(ctx, out)


#: Syncs block fusion when chains a sync cuts hold at least this share of its saving.
FUSION_CUT_MIN_SHARE = 0.5


def blockers(ctx: AnalysisContext, findings: list[Finding]) -> list[Finding]:
    """Mark the findings whose fix another finding blocks (issue 24 §2): CUDA graphs and
    torch.compile (the launch-overhead fix) cannot take a step that syncs every step or
    changes shape; fusion by torch.compile (the memory-bound fix) stops at a graph break
    and at every sync. The blocked finding names its blocker; the headline then puts the
    blocker's fix first."""
    by_cat = {f.category: f for f in findings if f.parent is None}
    sync = by_cat.get(Category.HOST_SYNC)
    steps = max(ctx.n_steps, 1)
    # A CUDA graph of each piece between syncs pays when the pieces hold enough launches
    # (verdict_rf_steps: one .item() a step, ~98 launches between syncs, is no blocker;
    # host_sync_mask's ~9 are too few), and a sync blocks only what it costs and can fix
    # (predict/blocking: the independent reading's "after it and the compilation fix"
    # where the compilation finding had nothing to change).
    sc = sync_cut(ctx, sync)
    sync_calls, per_sync = sc.calls, sc.per_sync
    every_step = sc.every_step and sync is not None and has_fix(sync)
    mem = by_cat.get(Category.MEMORY_BOUND)
    # Fusion waits on the syncs only where a sync separates the passes of a chain: the
    # trace must show it (host_sync_mask: none of its 30 chain occurrences has a sync
    # between its passes, so torch.compile fuses them between the syncs as they are).
    cut_share = 0.0
    if every_step and mem is not None and ctx.roofline.chains:
        total = sum(c.saved_us for c in ctx.roofline.chains)
        cut = saved_across_syncs(ctx.model, ctx.roofline.chains, ctx.blocking_calls)
        cut_share = cut / total if total > 0 else 0.0
    breaks = by_cat.get(Category.COMPILATION)
    graph_breaks = breaks is not None and "graph_breaks" in breaks.tags and has_fix(breaks)
    shapes = by_cat.get(Category.SHAPE_DYNAMISM)
    out = []
    for f in findings:
        why: BlockFacts | None = None
        blocker: Category | None = None
        if f.category == Category.LAUNCH_OVERHEAD and every_step:
            blocker = Category.HOST_SYNC
            why = BlockFacts("syncs_graph", sync_calls, steps, ctx.unit, per_sync=per_sync)
        elif f.category == Category.LAUNCH_OVERHEAD and shapes is not None and has_fix(shapes):
            blocker, why = Category.SHAPE_DYNAMISM, BlockFacts("shapes_graph")
        elif f.category == Category.MEMORY_BOUND and graph_breaks:
            blocker, why = Category.COMPILATION, BlockFacts("breaks_fusion")
        elif f.category == Category.MEMORY_BOUND and every_step and cut_share >= FUSION_CUT_MIN_SHARE:
            blocker = Category.HOST_SYNC
            why = BlockFacts("syncs_fusion", sync_calls, steps, ctx.unit, cut_share=cut_share)
        out.append(replace(f, blocked_by=blocker, blocked_reason=blocked_reason(why)) if why is not None else f)
    return out


def rank(findings: list[Finding]) -> list[Finding]:
    """Diagnostic order, then cost; each child right after its parent."""

    def key(f: Finding) -> tuple[int, float]:
        return (CATEGORY_ORDER.get(f.category, 99), -f.time_us)

    top = sorted((f for f in findings if f.parent is None), key=key)
    out: list[Finding] = []
    for f in top:
        out.append(f)
        out.extend(sorted((c for c in findings if c.parent == f.category), key=key))
    out.extend(f for f in findings if f.parent is not None and all(f is not o for o in out))
    return out


#: Host-bound idle in fewer gaps than this share of the steps is one-off host work (a
#: harness's json.dumps in one step of diff_graph_after), not a steady-state bottleneck.
ONE_OFF_GAPS_PER_STEP = 0.5


def _one_off(f: Finding, steps: int) -> bool:
    if f.category != Category.HOST_BOUND or steps < 3:
        return False
    gaps = next((m.value for m in f.evidence if m.label == "gaps"), None)
    return isinstance(gaps, int | float) and gaps < ONE_OFF_GAPS_PER_STEP * steps


#: Findings about the machine, not the program: a power or thermal cap explains the clocks
#: (question 6) but is no fix to make first (power_gemm: capped at 700 W, 82% of the clock).
MACHINE_CONDITIONS = frozenset({Category.POWER_THROTTLE})


def primary_finding(findings: list[Finding], window_us: float, steps: int = 1) -> Finding | None:
    """The top-level finding with the largest expected gain, among those whose gain is at
    least the medium-severity share of the window (and that recur: not one-off host work
    in a few of `steps`); a near tie goes to the earlier question."""
    top = [
        f
        for f in findings
        if f.parent is None
        and f.expected_gain_us > 0
        and not _one_off(f, steps)
        and f.category not in MACHINE_CONDITIONS
    ]
    # A gain under the bar is noise next to run-to-run variation: no headline then.
    strong = [f for f in top if f.expected_gain_us >= MEDIUM_SHARE * window_us] if window_us > 0 else top
    if not strong:
        return None
    best = max(f.expected_gain_us for f in strong)
    near = [f for f in strong if f.expected_gain_us >= NEAR_TIE * best]
    top_f = min(near, key=lambda f: (CATEGORY_ORDER.get(f.category, 99), -f.expected_gain_us))
    # When one refinement holds most of the gain, its fix is the one to make first.
    kids = [f for f in findings if f.parent == top_f.category]
    best_kid = max(kids, key=lambda f: f.expected_gain_us, default=None)
    if best_kid is not None and best_kid.expected_gain_us >= CHILD_HEADLINE_SHARE * top_f.expected_gain_us:
        return best_kid
    return top_f


def _measurable(ctx: AnalysisContext, step: DiagnosticStep) -> Missing:
    """Empty if the trace can answer the question, else what it lacks."""
    kinds = ctx.model.host["kind"]
    if ctx.ledger.primary is None:
        return "no_gpu"
    if step.id in ("host_waits", "launch") and not bool((kinds == Kind.RUNTIME).any()):
        return "no_runtime"
    return ""


def _unmeasured_parts(ctx: AnalysisContext, step: DiagnosticStep) -> Unmeasured:
    """Parts of a question this trace cannot answer (explain/questions.py words them)."""
    if step.id not in ("compute", "memory") or ctx.ledger.primary is None:
        # No GPU work: peaks, clocks and shapes are beside the point.
        return Unmeasured()
    r = ctx.roofline
    measured = r.peaks is not None and r.measured_us > 0
    roof = RoofCover(
        peaks_known=r.peaks is not None,
        measured=measured,
        measured_share=r.measured_us / r.total_us if measured else 0.0,
        coverage=r.coverage,
        modelled=r.modelled_us + r.unmodelled_us > 0,
        gpu_named=ctx.model.meta.primary_device is not None,
    )
    if step.id == "memory":
        return Unmeasured(roof)
    return Unmeasured(roof, no_clock_samples=ctx.model.counters.empty, no_shapes=not trace_has_shapes(ctx.model))


#: Ops scanned for recorded shapes (a trace records them for every op or for none).
SHAPE_SCAN_ROWS = 20_000
#: Questions 3 and 6 rest on the roofline: with its models covering less than this share
#: of kernel time, "no" would be a guess, so the answer is "not measurable".
MIN_MODEL_COVERAGE = 0.05


def trace_has_shapes(model: TraceModel) -> bool:
    """Whether the trace recorded input shapes (record_shapes=True): some op carries
    `Input Dims`. Ops carry other args (External id, Sequence number) either way."""
    shapes = model.host["shapes"].to_numpy()
    for args in shapes[: min(len(shapes), SHAPE_SCAN_ROWS)]:
        if args is not None and (len(args.input_dims) or len(args.input_dims_2021)):
            return True
    return False


def _peaks_unknown(ctx: AnalysisContext) -> bool:
    """Whether the primary GPU has kernels but no known peaks (questions 3 and 6 rest on them)."""
    if ctx.ledger.primary is None:
        return False
    return ctx.roofline.peaks is None


def _model_coverage(ctx: AnalysisContext, step: DiagnosticStep) -> float | None:
    """The roofline models' share of kernel time, for the questions that rest on it."""
    if step.id not in ("compute", "memory") or ctx.ledger.primary is None:
        return None
    roof = ctx.roofline
    if roof.peaks is None or roof.modelled_us + roof.unmodelled_us + roof.measured_us <= 0:
        return None
    return float(roof.coverage)


#: The status each answer's case gives the question.
CASE_STATUS: dict[AnswerCase, QuestionStatus] = {
    "not_built": "not_built",
    "missing": "not_measurable",
    "yes": "yes",
    "minor": "minor",
    "peaks_unknown": "unknown",
    "low_coverage": "not_measurable",
    "no_cost": "no",
    "nothing": "no",
}


def _answer(ctx: AnalysisContext, step: DiagnosticStep, found: list[Finding], time_us: float) -> AnswerFacts:
    """Which case the question's answer is in, with the facts its words need."""
    built = any(c in BUILT_CATEGORIES for c in step.categories)
    missing = _measurable(ctx, step)
    base = AnswerFacts(
        case="nothing",
        not_built=step.not_built,
        built=built,
        time_us=time_us,
        share=ctx.share(time_us),
        unit=ctx.per_unit,
        unmeasured=_unmeasured_parts(ctx, step),
    )
    if not built:
        return replace(base, case="not_built")
    if missing:
        return replace(base, case="missing", missing=missing)
    if any(f.severity.rank >= YES_SEVERITY.rank for f in found):
        return replace(base, case="yes", title=max(found, key=lambda f: f.time_us).title)
    if found and time_us > 0:
        return replace(base, case="minor")
    if step.id in ("compute", "memory") and _peaks_unknown(ctx):
        return replace(base, case="peaks_unknown")
    if (cov := _model_coverage(ctx, step)) is not None and cov < MIN_MODEL_COVERAGE:
        return replace(base, case="low_coverage", coverage=cov)
    if found:
        return replace(base, case="no_cost", title=found[0].title)
    return base


def questions(ctx: AnalysisContext, ranked: list[Finding]) -> tuple[Question, ...]:
    out: list[Question] = []
    for step in DIAGNOSTIC_ORDER:
        idx = tuple(i for i, f in enumerate(ranked) if f.category in step.categories)
        found = [ranked[i] for i in idx]
        # Children's time is inside their parent's: count the top level only.
        time_us = sum(f.time_us for f in found if f.parent is None or f.parent not in step.categories)
        facts = _answer(ctx, step, found, time_us)
        out.append(
            Question(
                number=step.number,
                id=step.id,
                question=step.question,
                categories=step.categories,
                status=CASE_STATUS[facts.case],
                time_us=time_us,
                share=ctx.share(time_us),
                answer=answer_text(facts),
                finding_indexes=idx,
            )
        )
    return tuple(out)


#: Idle with the next kernel already queued, above this share of the window, is worth a
#: note: the GPU waited on something other than this host thread.
OTHER_IDLE_NOTE_SHARE = 0.15
#: Profiler overhead above this share of the window is worth a note.
PROFILER_NOTE_SHARE = 0.05
#: Start-up longer than this share of the analysed window is worth a note.
STARTUP_NOTE_SHARE = 0.05


def _notes(ctx: AnalysisContext) -> tuple[str, ...]:
    dev = ctx.ledger.primary
    win = ctx.window
    facts = NoteFacts(
        win, ctx.per_unit, startup_before=win.startup_us > 0 and win.startup_us >= STARTUP_NOTE_SHARE * ctx.window_us
    )
    if dev is None or dev.window_us <= 0:
        return notes_text(facts)
    other = dev.share("idle_other")
    # (when its stalls are large, the queued_idle finding says this)
    if other >= OTHER_IDLE_NOTE_SHARE and not finding_due(ctx.queued_waits, dev.window_us):
        facts = replace(facts, other_idle=other, queued=ctx.queued_waits)
    # From STARTUP_WINDOW_SHARE on the headline itself says the window is start-up (mi250's
    # note repeated it).
    if STARTUP_NOTE_SHARE <= (startup := dev.share("startup")) < STARTUP_WINDOW_SHARE:
        facts = replace(facts, startup_share=startup)
    unlinked_us, unlinked_n = _unlinked_gpu(ctx)
    if unlinked_n:
        facts = replace(facts, unlinked=Unlinked(unlinked_n, unlinked_us, unlinked_us / dev.window_us))
    if (prof := dev.share("profiler")) >= PROFILER_NOTE_SHARE:
        facts = replace(facts, profiler_share=prof)
    if (harness := dev.share("harness")) >= PROFILER_NOTE_SHARE:
        facts = replace(facts, harness_share=harness, harness_us=dev.by_cause.get("harness", 0.0))
    return notes_text(facts)


def _unlinked_gpu(ctx: AnalysisContext) -> tuple[float, int]:
    """GPU time (clipped to the window) and count of the primary GPU's activities that
    have no usable correlation id (the loader stores it as -1)."""
    dev = ctx.ledger.primary
    act = ctx.model.gpu_activity()
    if dev is None or act.empty:
        return 0.0, 0
    ts, end = act["ts"].to_numpy(), act["end"].to_numpy()
    sel = (
        (act["device"].to_numpy() == dev.device)
        & (act["correlation"].to_numpy() < 0)
        & (end > dev.window_start)
        & (ts < dev.window_end)
    )
    if not sel.any():
        return 0.0, 0
    clipped = np.minimum(end[sel], dev.window_end) - np.maximum(ts[sel], dev.window_start)
    return float(np.clip(clipped, 0, None).sum()), int(sel.sum())


#: The largest ledger cause over this share of the window is explained in the headline
#: (issue 24 §8).
LARGEST_CAUSE_SHARE = 0.2
#: A window this much start-up (graph capture, cold first launches) has no steady state
#: to fix: the headline says so instead of naming a small steady-state finding.
STARTUP_WINDOW_SHARE = 0.5


def _no_gpu(ctx: AnalysisContext) -> NoGpuFacts:
    """Why there is nothing on a GPU to analyse: another accelerator, or counters without a timeline."""
    acc = other_accelerator(ctx.model)
    if acc is not None and not ctx.model.meta.active_devices:
        return NoGpuFacts(accelerator=acc)
    kc = ctx.kernel_counters
    if kc is not None and not kc.timeline:
        return NoGpuFacts(counted_kernels=len(kc.launches))
    return NoGpuFacts()


def _no_finding_headline(ctx: AnalysisContext, findings: list[Finding], startup: float) -> str:
    """The headline when no finding leads (explain/headline.py words it)."""
    dev = ctx.ledger.primary
    facts = QuietFacts(_no_gpu(ctx))
    if startup >= STARTUP_WINDOW_SHARE:
        facts = replace(facts, startup_share=startup)
    elif dev is not None and dev.window_us > 0:
        biggest = max(dev.by_cause, key=lambda c: dev.by_cause[c])
        capped = next(
            (f for f in findings if f.category in MACHINE_CONDITIONS and f.parent is None and f.share >= MEDIUM_SHARE),
            None,
        )
        replays = any(f.category == Category.COMPILATION and "cuda_graphs" in f.tags for f in findings)
        facts = replace(
            facts,
            busy_share=dev.busy_us / dev.window_us,
            biggest=biggest,
            biggest_share=dev.share(biggest),
            machine=capped,
            graph_latency=biggest == "gpu_busy_latency" and replays and dev.share(biggest) >= LARGEST_CAUSE_SHARE,
        )
    return quiet_headline(facts)


def summary(ctx: AnalysisContext, findings: list[Finding]) -> Summary:
    top = primary_finding(findings, ctx.window_us, ctx.n_steps if ctx.unit == "step" else 1)
    dev = ctx.ledger.primary
    notes = _notes(ctx)
    steps = ctx.n_steps
    startup = dev.share("startup") if dev is not None else 0.0
    if startup >= STARTUP_WINDOW_SHARE:
        top = None
    if top is None:
        headline = _no_finding_headline(ctx, findings, startup)
        return Summary(
            primary=None,
            headline=headline,
            primary_time_us=0.0,
            primary_share=0.0,
            primary_advice="",
            primary_gain_us=0.0,
            notes=notes,
            # the report's unit stays (the ledger's per-step column, "N steps of X ms")
            per_step_us=ctx.window_us / max(steps, 1) if ctx.unit not in WHOLE_UNITS else 0.0,
            unit=ctx.unit,
        )
    unit = ctx.unit
    per = ctx.per_unit.count if ctx.per_unit.splits else 1
    kids = [
        f
        for f in findings
        if f.parent == top.category and f.expected_gain_us >= PART_IN_HEADLINE_SHARE * top.expected_gain_us > 0
    ]
    part = max(kids, key=lambda f: f.expected_gain_us) if kids else None
    gain = top.expected_gain_us
    blocker = next((f for f in findings if f.parent is None and f.category == top.blocked_by), None)
    if blocker is not None:
        # The blocker's fix is fix 1 and the gain is the two together (issue 24 §2).
        gain = min(top.expected_gain_us + blocker.expected_gain_us, ctx.window_us)
    below: list[str] = []
    pred = top.prediction
    predicted = low = high = 0.0
    u_now = u_after = 0.0
    if pred is not None and ctx.window_us > 0 and per > 0:
        step = ctx.window_us / per
        scale = ctx.n_steps / per  # the prediction's per-step values in the report's unit
        # The step after the fix is after its blockers' fixes too: the verdict's blocker
        # (its own gain), or the replay's (a graph capture needs the syncs gone first).
        if blocker is not None:
            extra, after = blocker.expected_gain_us / per, category_label(blocker.category, capital=False)
            u_extra = blocker.prediction.unprofiled_gain_us if blocker.prediction is not None else 0.0
        elif pred.blocked_by:
            extra = max(step - pred.predicted_step_us * scale - top.expected_gain_us / per, 0.0)
            after = " and ".join(category_label(c, capital=False) for c in pred.blocked_by.split(",") if c)
            u_extra = max(pred.unprofiled_step_us - pred.unprofiled_predicted_step_us - pred.unprofiled_gain_us, 0.0)
        else:
            extra, after, u_extra = 0.0, "", 0.0
        predicted = max(step - extra - top.expected_gain_us / per, 0.0)
        low = max(step - extra - top.expected_gain_high_us / per, 0.0)
        high = max(step - extra - top.expected_gain_low_us / per, 0.0)
        below.append(prediction_sentence(unit, step, predicted, low, high, pred, after))
        if pred.unprofiled_step_us > 0:
            u_now = pred.unprofiled_step_us * scale
            u_after = max(u_now - (pred.unprofiled_gain_us + u_extra) * scale, 0.0)
            if step - u_now >= MATTERS_SHARE * step or predicted - u_after >= MATTERS_SHARE * predicted:
                below.append(unprofiled_sentence(unit, step, u_now, u_after))
            else:
                u_now = u_after = 0.0  # the profiler's cost is within the replay's own error
    # The prediction is the headline's falsifiable end (issue 25): the title and fix make
    # room for it, and what does not fit beside it goes to the notes.
    facts = LeadFacts(top, part, blocker, gain, ctx.per_unit, ctx.window_us)
    alone = len(lead_headline(facts).headline)
    if pred is not None and below and pred.part and alone + 1 + len(below[0]) > HEADLINE_CHARS:
        # Too long beside the headline: the prediction without what its gain is, that in a note.
        below[0] = prediction_sentence(unit, step, predicted, low, high, pred, after, with_part=False)
        notes = (*notes, part_note(pred))
    reserve = len(below[0]) + 1 if below else 0
    lead = lead_headline(facts, reserve)
    headline, advice = lead.headline, lead.advice
    notes = (*lead.moved, *notes)  # what the headline left out reads right under it
    # The headline fits a phone (issue 27): a sentence that would take it past
    # HEADLINE_CHARS goes to the notes below it, in order, whole.
    # (the profiler's cost stays only after the prediction)
    room = True
    for i, sentence in enumerate(below):
        room = room and (i == 0 or len(headline) + 1 + len(sentence) <= HEADLINE_CHARS)
        if room:
            headline += " " + sentence
        else:
            notes = (*notes, sentence)
    return Summary(
        primary=top.category,
        headline=headline,
        primary_time_us=top.time_us,
        primary_share=top.share,
        primary_advice=advice,
        primary_gain_us=gain,
        notes=notes,
        per_step_us=ctx.window_us / per if unit not in WHOLE_UNITS else 0.0,
        primary_gain_per_step_us=gain / per if unit not in WHOLE_UNITS else 0.0,
        unit=unit,
        predicted_step_us=predicted,
        predicted_step_low_us=low,
        predicted_step_high_us=high,
        prediction_basis=pred.basis if pred is not None else "",
        unprofiled_step_us=u_now,
        unprofiled_predicted_step_us=u_after,
    )
