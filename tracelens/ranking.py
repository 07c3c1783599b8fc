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
from tracelens.derive.queued import BLOCKED_MIN_SHARE, QUEUED_GAP_MIN_US, finding_due
from tracelens.domain import MEDIUM_SHARE, fmt_us, pct, severity_for
from tracelens.explain.headline import first_fix, prediction_sentence, unprofiled_sentence
from tracelens.explain.power_throttle import machine_gain_note, machine_headline
from tracelens.explain.window import window_reason
from tracelens.model.schema import Kind
from tracelens.model.trace import TraceModel
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


def _no_gain(f: Finding, step_us: float) -> Finding:
    """A machine condition keeps its time (the one ledger) but offers no gain: no change to
    the program removes a power cap (power_gemm printed "expected gain: 2.06 s")."""
    note = machine_gain_note(f.time_us)
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
    out = [_no_gain(settled[i], step) if top[i].category in MACHINE_CONDITIONS else settled[i] for i in range(len(top))]
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


#: Construct ids of the host_sync finding that stop a step from being captured in a CUDA
#: graph or compiled whole (each ends the graph: the program needs the value on the host).
#: An explicit synchronize is the harness's (TraceLens's synchronize_each_step), outside
#: the model code a graph or torch.compile would take.
_SYNC_BLOCKERS = frozenset({"data_dependent_shape", "item", "branch", "device_to_host_copy"})
#: Syncs block only when they cut the GPU work into short pieces: at most this many GPU
#: activities per sync on average (host_sync_mask: ~8; dyn_graph_break's x[mask]: ~26). A
#: generate loop's one stopping-criteria check per token (~110 kernels of a 4-layer Llama
#: between them) leaves the forward to capture whole, and so does a harness's end-of-step
#: check (Qwen: ~1,500 kernels to 1).
MAX_ACTIVITIES_PER_BLOCKING_SYNC = 64
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
    sync_calls = 0
    if sync is not None:
        sync_calls = sum(s.count for s in sync.sites if s.kind in _SYNC_BLOCKERS)
    activities = ctx.ledger.primary.n_activities if ctx.ledger.primary is not None else 0
    per_sync = activities / sync_calls if sync_calls else float("inf")
    # A CUDA graph of each piece between syncs pays when the pieces hold enough launches
    # (verdict_rf_steps: one .item() a step, ~98 launches between syncs, is no blocker);
    # host_sync_mask's ~9 launches between syncs are too few.
    every_step = sync is not None and sync_calls >= steps and per_sync <= MAX_ACTIVITIES_PER_BLOCKING_SYNC
    units = f"{steps} {ctx.unit}" + ("" if steps == 1 else "s")
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
    graph_breaks = breaks is not None and "graph_breaks" in breaks.tags
    shapes = by_cat.get(Category.SHAPE_DYNAMISM)
    out = []
    for f in findings:
        reason = ""
        blocker: Category | None = None
        if f.category == Category.LAUNCH_OVERHEAD and every_step:
            blocker = Category.HOST_SYNC
            reason = (
                f"a CUDA graph cannot capture a step that syncs ({sync_calls} host syncs in {units}, "
                f"{per_sync:.0f} GPU launches between syncs on average: too few for a graph of each piece "
                f"to pay), and torch.compile breaks its graph at each one"
            )
        elif f.category == Category.LAUNCH_OVERHEAD and shapes is not None and shapes.time_us > 0:
            blocker = Category.SHAPE_DYNAMISM
            reason = "a CUDA graph replays fixed shapes: the changing input shapes come first"
        elif f.category == Category.MEMORY_BOUND and graph_breaks:
            blocker = Category.COMPILATION
            reason = "torch.compile fuses only inside one graph: the graph breaks come first"
        elif f.category == Category.MEMORY_BOUND and every_step and cut_share >= FUSION_CUT_MIN_SHARE:
            blocker = Category.HOST_SYNC
            reason = (
                f"torch.compile fuses only between host syncs and breaks its graph at each one "
                f"({sync_calls} in {units}; a sync separates the passes of chains holding "
                f"{cut_share:.0%} of the fusion's saving)"
            )
        out.append(replace(f, blocked_by=blocker, blocked_reason=reason) if blocker is not None else f)
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


def _measurable(ctx: AnalysisContext, step: DiagnosticStep) -> str:
    """Empty if the trace can answer the question, else what capture option is missing."""
    model = ctx.model
    kinds = model.host["kind"]
    if ctx.ledger.primary is None:
        return (
            "the trace has no GPU kernels (a CPU-only run, or a capture without ProfilerActivity.CUDA in its "
            "activities)"
        )
    if step.id in ("host_waits", "launch") and not bool((kinds == Kind.RUNTIME).any()):
        return (
            "the trace has no CUDA/HIP runtime calls on the host, so launches and syncs cannot be seen: "
            "capture with ProfilerActivity.CPU as well as CUDA"
        )
    return ""


def _unmeasured_parts(ctx: AnalysisContext, step: DiagnosticStep) -> str:
    """Parts of a question this trace cannot answer, and the capture option that would."""
    if step.id not in ("compute", "memory") or ctx.ledger.primary is None:
        # No GPU work: peaks, clocks and shapes are beside the point.
        return ""
    roof = ctx.roofline
    out = ""
    if roof.peaks is None:
        out += " Roofline: this GPU is not in the peak table (set TRACELENS_PEAKS to give its peaks)."
    elif roof.measured_us > 0:
        out += (
            f" Roofline: hardware counters cover {roof.measured_us / roof.total_us:.0%} of kernel time and models "
            f"{roof.coverage - roof.measured_us / roof.total_us:.0%} (communication excluded); the rest is reported "
            "as unknown."
        )
    elif roof.modelled_us + roof.unmodelled_us > 0:
        out += (
            f" Roofline models cover {roof.coverage:.0%} of kernel time (communication excluded); the rest is "
            "reported as unknown."
        )
    if step.id == "memory":
        return out
    if ctx.model.counters.empty:
        out += (
            " Power throttling: not measurable from this trace (no GPU clock/power samples); `tracelens capture` "
            "records NVML clocks, power and throttle reasons beside the profiler."
        )
    if not trace_has_shapes(ctx.model):
        out += " Matmul shapes: not measurable (no Input Dims); capture with record_shapes=True."
    return out


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


def questions(ctx: AnalysisContext, ranked: list[Finding]) -> tuple[Question, ...]:
    out: list[Question] = []
    for step in DIAGNOSTIC_ORDER:
        idx = tuple(i for i, f in enumerate(ranked) if f.category in step.categories)
        found = [ranked[i] for i in idx]
        # Children's time is inside their parent's: count the top level only.
        time_us = sum(f.time_us for f in found if f.parent is None or f.parent not in step.categories)
        built = any(c in BUILT_CATEGORIES for c in step.categories)
        missing = _measurable(ctx, step)
        status: QuestionStatus
        partly = f" {step.not_built}" if built and step.not_built else ""
        partly += _unmeasured_parts(ctx, step)
        if not built:
            status, answer = "not_built", step.not_built
        elif missing:
            status, answer = "not_measurable", f"Not measurable from this trace: {missing}.{partly}"
        elif any(f.severity.rank >= YES_SEVERITY.rank for f in found):
            top = max(found, key=lambda f: f.time_us)
            status = "yes"
            answer = f"Yes: {fmt_us(time_us)} ({ctx.share(time_us):.0%} of the analysed time). {top.title}.{partly}"
        elif found and time_us > 0:
            status = "minor"
            share = pct(ctx.share(time_us))
            answer = f"A little: {fmt_us(time_us)} ({share} of the analysed time), below the bar.{partly}"
        elif step.id in ("compute", "memory") and _peaks_unknown(ctx):
            # No roof to judge the kernels against: that is no evidence of a no.
            status = "unknown"
            answer = f"Unknown: this GPU's peaks are not known, so no kernel could be judged against a roof.{partly}"
        elif (cov := _model_coverage(ctx, step)) is not None and cov < MIN_MODEL_COVERAGE:
            status = "not_measurable"
            answer = (
                f"Not measurable from this trace: no finding, but with the models covering {pct(cov)} of kernel "
                f"time that is no evidence of a no.{partly}"
            )
        elif found:
            # A finding with no cost still says what it saw (a graph break whose wait is the
            # host_sync finding's time, a trace that already replays CUDA graphs).
            status, answer = "no", f"No cost measured here: {found[0].title}.{partly}"
        else:
            status, answer = "no", f"No: nothing measurable in this trace.{partly}"
        out.append(
            Question(
                number=step.number,
                id=step.id,
                question=step.question,
                categories=step.categories,
                status=status,
                time_us=time_us,
                share=ctx.share(time_us),
                answer=answer,
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
    out = [f"Analysed window: {window_reason(win).rstrip('.')}."]
    if win.startup_us > 0 and win.startup_us >= STARTUP_NOTE_SHARE * ctx.window_us:
        parts = ", ".join(f"{p.what.replace('_', ' ')} {fmt_us(p.time_us)}" for p in win.startup[:4])
        out.append(
            f"Start-up before the window ({fmt_us(win.startup_us)}) is reported apart and not blamed"
            + (f": {parts}." if parts else ".")
        )
    if dev is None or dev.window_us <= 0:
        return tuple(out)
    other = dev.share("idle_other")
    if other >= OTHER_IDLE_NOTE_SHARE and not finding_due(ctx.queued_waits, dev.window_us):
        # (when its stalls are large, the queued_idle finding says this)
        out.append(
            f"The GPU also idles {other:.0%} of the window with its next kernel already queued: it waits on "
            "another stream or an event, not on this host thread. On one GPU look at cross-stream dependencies."
            + _queued_wait_words(ctx)
        )
    startup = dev.share("startup")
    if startup >= STARTUP_NOTE_SHARE:
        out.append(
            f"{startup:.0%} of the window is one-off start-up work on the host (CUDA/HIP graph capture, whose "
            "launches are recorded into the graph and do not run; graph instantiation; cold first launches): "
            "a serving engine's or a first iteration's set-up, not a bottleneck of the steady state."
        )
    unlinked_us, unlinked_n = _unlinked_gpu(ctx)
    if unlinked_n:
        out.append(
            f"{unlinked_n:,} GPU kernels and copies in the window ({fmt_us(unlinked_us)}, "
            f"{unlinked_us / dev.window_us:.0%} of it) have no usable correlation id: their GPU time is in the "
            "ledger, but the launches, ops and source lines behind them are unknown, so host syncs, launch "
            "overhead and the roofline are judged without them."
        )
    prof = dev.share("profiler")
    if prof >= PROFILER_NOTE_SHARE:
        out.append(
            f"{prof:.0%} of the window is idle while the host runs torch.profiler's own prof.step(): profiler "
            "overhead that an unprofiled run does not have."
        )
    harness = dev.share("harness")
    if harness >= PROFILER_NOTE_SHARE:
        out.append(
            f"{harness:.0%} of the window ({fmt_us(dev.by_cause.get('harness', 0.0))}) is idle while the host runs "
            "the benchmark harness's own method between its timed regions (a cache flush such as PARAM's "
            "[param|clear_cache], a warm-up range): the benchmark's method, not the program's bottleneck, so no "
            "finding blames it."
        )
    return tuple(out)


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


def _queued_wait_words(ctx: AnalysisContext) -> str:
    """What the queued-work idle coincides with (issue 24 §8), for the note below the
    queued_idle finding's share: the long gaps, how far ahead their work was launched."""
    q = ctx.queued_waits
    if q is None or not q.long_gaps:
        return ""
    words = f" {q.long_gaps} gaps of {fmt_us(QUEUED_GAP_MIN_US)} or more hold {fmt_us(q.long_us)} of it"
    if q.lead_median_us is not None and q.launch_apis:
        words += (
            f"; their next work had been launched a median {fmt_us(q.lead_median_us)} earlier "
            f"(by {', '.join(q.launch_apis)})"
        )
    if q.blocked_what and q.blocked_us >= BLOCKED_MIN_SHARE * q.idle_us:
        words += f"; {fmt_us(q.blocked_us)} of the idle coincides with the host in {q.blocked_what[0][0]}"
    return words + "."


def _no_gpu_headline(ctx: AnalysisContext) -> str:
    """Why there is nothing on a GPU to analyse: another accelerator, or counters without a timeline."""
    acc = other_accelerator(ctx.model)
    if acc is not None and not ctx.model.meta.active_devices:
        return (
            f"This trace is from an {acc.label} accelerator, not a GPU: its {acc.device_events:,} device events and "
            f"{acc.runtime_events:,} runtime calls are outside what tracelens analyses (the time ledger, roofline, "
            "launch overhead and host syncs read CUDA/ROCm kernels, copies and runtime calls). Host-side findings only."
        )
    kc = ctx.kernel_counters
    if kc is not None and not kc.timeline:
        return (
            f"No kernel timeline: {len(kc.launches)} kernels were measured by hardware counters (CUPTI profiler "
            "mode: torch.profiler's profiler_metrics replays each kernel and records no kernel activity), so there is "
            "no GPU time to attribute. Their FLOPs and bytes are in the counters section; record the timing without "
            "profiler_metrics (tracelens capture --counters records both)."
        )
    return "No GPU activity to analyse."


def _no_finding_headline(ctx: AnalysisContext, findings: list[Finding], startup: float) -> str:
    """The headline when no finding leads: start-up dominates, or the GPU's busy share and
    its largest part (a machine condition first, a replayed graph's latency-bound time)."""
    dev = ctx.ledger.primary
    headline = _no_gpu_headline(ctx)
    if startup >= STARTUP_WINDOW_SHARE:
        headline = (
            f"{startup:.0%} of the analysed time is one-off start-up work on the host (CUDA/HIP graph capture, "
            "graph instantiation, cold first launches), not a steady-state bottleneck: profile the steady "
            "state (later steps, or the engine's serving loop) to see what limits it."
        )
    elif dev is not None and dev.window_us > 0:
        biggest = max(dev.by_cause, key=lambda c: dev.by_cause[c])
        headline = (
            f"The GPU is busy {dev.busy_us / dev.window_us:.0%} of the analysed time (largest part: "
            f"{biggest.replace('gpu_busy_', 'busy ').replace('_', ' ')}, {dev.share(biggest):.0%}); no finding "
            f"would gain {MEDIUM_SHARE:.0%} or more of it."
        )
        capped = next(
            (
                f
                for f in findings
                if f.category in MACHINE_CONDITIONS and f.parent is None and f.share >= MEDIUM_SHARE
            ),
            None,
        )
        if capped is not None:
            headline = f"{machine_headline(capped)} {headline}"
        replays = any(f.category == Category.COMPILATION and "cuda_graphs" in f.tags for f in findings)
        if biggest == "gpu_busy_latency" and replays and dev.share(biggest) >= LARGEST_CAUSE_SHARE:
            # Issue 24 §4: a replayed graph whose host runs ahead has no host problem;
            # its time is the graph's own latency-bound kernels.
            headline += (
                " That time is latency-bound kernels replayed from CUDA graphs, with the host running ahead: "
                "fusing the graph's body into fewer, larger kernels (torch.compile before capture) is what "
                "shortens the step."
            )
    return headline


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
    per = max(steps, 1) if unit not in WHOLE_UNITS else 1
    kids = [
        f
        for f in findings
        if f.parent == top.category and f.expected_gain_us >= PART_IN_HEADLINE_SHARE * top.expected_gain_us > 0
    ]
    part = max(kids, key=lambda f: f.expected_gain_us) if kids else None
    title = top.title + (f"; the largest part: {part.title}" if part is not None else "")
    if top.parent is not None:
        title = f"{top.title} (part of {top.parent.value})"
    gain, advice = top.expected_gain_us, top.advice
    blocker = next((f for f in findings if f.parent is None and f.category == top.blocked_by), None)
    if blocker is not None:
        # The blocker's fix is fix 1 and the gain is the two together (issue 24 §2).
        gain = min(top.expected_gain_us + blocker.expected_gain_us, ctx.window_us)
        first = first_fix(blocker)
        advice = (
            f"1. {first[0].upper()}{first[1:]}, since {top.blocked_reason}:\n{blocker.advice}\n2. Then: {top.advice}"
        )
        headline = (
            f"{title}. Fix first: {first}, since {top.blocked_reason}. Both fixed, about "
            f"{fmt_us(gain / per)} per {unit} to gain ({gain / ctx.window_us:.0%} of the {unit})."
            if ctx.window_us > 0
            else title
        )
    else:
        headline = (
            f"{title}. Fix this first: about {fmt_us(gain / per)} per {unit} to gain "
            f"({gain / ctx.window_us:.0%} of the {unit})."
            if ctx.window_us > 0
            else title
        )
    pred = top.prediction
    predicted = low = high = 0.0
    u_now = u_after = 0.0
    if pred is not None and ctx.window_us > 0 and per > 0:
        step = ctx.window_us / per
        scale = ctx.n_steps / per  # the prediction's per-step values in the report's unit
        # The step after the fix is after its blockers' fixes too: the verdict's blocker
        # (its own gain), or the replay's (a graph capture needs the syncs gone first).
        if blocker is not None:
            extra, after = blocker.expected_gain_us / per, blocker.category.value
            u_extra = blocker.prediction.unprofiled_gain_us if blocker.prediction is not None else 0.0
        elif pred.blocked_by:
            extra = max(step - pred.predicted_step_us * scale - top.expected_gain_us / per, 0.0)
            after = pred.blocked_by.replace(",", ", ")
            u_extra = max(pred.unprofiled_step_us - pred.unprofiled_predicted_step_us - pred.unprofiled_gain_us, 0.0)
        else:
            extra, after, u_extra = 0.0, "", 0.0
        predicted = max(step - extra - top.expected_gain_us / per, 0.0)
        low = max(step - extra - top.expected_gain_high_us / per, 0.0)
        high = max(step - extra - top.expected_gain_low_us / per, 0.0)
        headline += " " + prediction_sentence(unit, step, predicted, low, high, pred, after)
        if pred.unprofiled_step_us > 0:
            u_now = pred.unprofiled_step_us * scale
            u_after = max(u_now - (pred.unprofiled_gain_us + u_extra) * scale, 0.0)
            if step - u_now >= MATTERS_SHARE * step or predicted - u_after >= MATTERS_SHARE * predicted:
                headline += " " + unprofiled_sentence(unit, step, u_now, u_after)
            else:
                u_now = u_after = 0.0  # the profiler's cost is within the replay's own error
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


