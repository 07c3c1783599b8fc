"""Ranking: findings in the order an expert looks, the six questions, the primary
bottleneck.

The order is the seed document's: is the host waiting on the device? is it drowning in
tiny launches? is it moving far more data than it reuses? shape dynamism? allocation?
raw compute? It is "what to suspect and measure first", not a ranking of sizes: within
a question, findings are sorted by the time they cost.
"""

from __future__ import annotations

from dataclasses import dataclass

from tracelens.analyzers import BUILT_CATEGORIES
from tracelens.analyzers.base import Category, Finding, Severity
from tracelens.analyzers.context import AnalysisContext, fmt_us
from tracelens.model.schema import Kind
from tracelens.report import Question, Summary


@dataclass(frozen=True)
class DiagnosticStep:
    number: int
    id: str
    question: str
    categories: tuple[Category, ...]
    not_built: str  # what the report says while no analyzer covers this question


DIAGNOSTIC_ORDER: tuple[DiagnosticStep, ...] = (
    DiagnosticStep(
        1,
        "host_waits",
        "Is the host waiting on the device, or the device on the host?",
        (Category.HOST_SYNC, Category.HOST_BOUND),
        "",
    ),
    DiagnosticStep(
        2,
        "launch",
        "Is the GPU starved by kernel-launch overhead (many tiny kernels)?",
        (Category.LAUNCH_OVERHEAD,),
        "",
    ),
    DiagnosticStep(
        3,
        "memory",
        "Is it moving far more data than it reuses (memory-bandwidth bound)?",
        (Category.MEMORY_BOUND,),
        "",
    ),
    DiagnosticStep(
        4,
        "shape_dynamism",
        "Do changing shapes defeat compilation, CUDA graphs or the allocator?",
        (Category.SHAPE_DYNAMISM,),
        "The shape-dynamism analyzer is not built yet.",
    ),
    DiagnosticStep(
        5,
        "allocation",
        "Is allocation (cudaMalloc, allocator churn) in the way?",
        (Category.ALLOCATION,),
        "The allocation analyzer is not built yet.",
    ),
    DiagnosticStep(
        6,
        "compute",
        "Is it really compute-bound, and are matmul shapes and clocks costing throughput?",
        # Specific causes of lost compute throughput first, the general finding last.
        (Category.MISALIGNED_MATMUL, Category.WAVE_QUANTIZATION, Category.POWER_THROTTLE, Category.COMPUTE_BOUND),
        "",
    ),
)

CATEGORY_ORDER: dict[Category, int] = {
    cat: i for i, cat in enumerate(c for step in DIAGNOSTIC_ORDER for c in step.categories)
}

#: A question is answered "yes" when one of its findings is at least this severe.
YES_SEVERITY = Severity.MEDIUM


def rank(findings: list[Finding]) -> list[Finding]:
    """Diagnostic order first, then cost."""
    return sorted(findings, key=lambda f: (CATEGORY_ORDER.get(f.category, 99), -f.time_us))


def primary_finding(findings: list[Finding]) -> Finding | None:
    """The first finding in diagnostic order with severity medium or more; else the one
    costing the most time."""
    ranked = rank(findings)
    for f in ranked:
        if f.severity.rank >= YES_SEVERITY.rank:
            return f
    costly = [f for f in ranked if f.time_us > 0]
    return max(costly, key=lambda f: f.time_us) if costly else None


def _measurable(ctx: AnalysisContext, step: DiagnosticStep) -> str:
    """Empty if the trace can answer the question, else what capture option is missing."""
    model = ctx.model
    kinds = model.host["kind"]
    if ctx.gpu_time.primary is None:
        return "the trace has no GPU kernels: capture with activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]"
    if step.id in ("host_waits", "launch") and not bool((kinds == Kind.RUNTIME).any()):
        return (
            "the trace has no CUDA/HIP runtime calls on the host, so launches and syncs cannot be seen: "
            "capture with ProfilerActivity.CPU as well as CUDA"
        )
    return ""


def _unmeasured_parts(ctx: AnalysisContext, step: DiagnosticStep) -> str:
    """Parts of a question this trace cannot answer, and the capture option that would."""
    if step.id not in ("compute", "memory"):
        return ""
    from tracelens.analyzers.roofline import for_context

    roof = for_context(ctx)
    out = ""
    if roof.peaks is None:
        out += " Roofline: this GPU is not in the peak table (set TRACELENS_PEAKS to give its peaks)."
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
    shapes = ctx.model.host["shapes"].to_numpy()
    if not any(s is not None for s in shapes[: min(len(shapes), 20000)]):
        out += " Matmul shapes: not measurable (no Input Dims); capture with record_shapes=True."
    return out


def questions(ctx: AnalysisContext, ranked: list[Finding]) -> tuple[Question, ...]:
    out: list[Question] = []
    for step in DIAGNOSTIC_ORDER:
        idx = tuple(i for i, f in enumerate(ranked) if f.category in step.categories)
        found = [ranked[i] for i in idx]
        time_us = sum(f.time_us for f in found)
        built = any(c in BUILT_CATEGORIES for c in step.categories)
        missing = _measurable(ctx, step)
        partly = f" {step.not_built}" if built and step.not_built else ""
        partly += _unmeasured_parts(ctx, step)
        if not built:
            status, answer = "not_built", step.not_built
        elif missing:
            status, answer = "not_measurable", f"Not measurable from this trace: {missing}.{partly}"
        elif any(f.severity.rank >= YES_SEVERITY.rank for f in found):
            top = max(found, key=lambda f: f.time_us)
            status = "yes"
            answer = f"Yes: {fmt_us(time_us)} ({ctx.share(time_us):.0%} of the profiled time). {top.title}.{partly}"
        elif found and time_us > 0:
            status = "minor"
            answer = (
                f"A little: {fmt_us(time_us)} ({ctx.share(time_us):.1%} of the profiled time), below the bar.{partly}"
            )
        else:
            status, answer = "no", f"No: nothing measurable in this trace.{partly}"
        out.append(
            Question(
                number=step.number,
                id=step.id,
                question=step.question,
                categories=tuple(c.value for c in step.categories),
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


def _notes(ctx: AnalysisContext) -> tuple[str, ...]:
    dev = ctx.gpu_time.primary
    if dev is None or dev.window_us <= 0:
        return ()
    out = []
    other = dev.idle_by_cause.get("other", 0.0) / dev.window_us
    if other >= OTHER_IDLE_NOTE_SHARE:
        out.append(
            f"The GPU also idles {other:.0%} of the window with its next kernel already queued: it waits on "
            "another stream, a collective (other ranks), or an event, not on this host thread. In multi-GPU "
            "runs compare the ranks' traces; on one GPU look at cross-stream dependencies."
        )
    prof = dev.idle_by_cause.get("profiler", 0.0) / dev.window_us
    if prof >= PROFILER_NOTE_SHARE:
        out.append(
            f"{prof:.0%} of the window is idle while the host runs torch.profiler's own prof.step(): profiler "
            "overhead that an unprofiled run does not have."
        )
    return tuple(out)


def summary(ctx: AnalysisContext, findings: list[Finding]) -> Summary:
    top = primary_finding(findings)
    dev = ctx.gpu_time.primary
    notes = _notes(ctx)
    if top is None:
        busy = (
            f"The GPU is busy {dev.busy_us / dev.window_us:.0%} of the profiled time" if dev and dev.window_us else ""
        )
        return Summary(
            primary=None,
            headline=(busy + "; no bottleneck found." if busy else "No GPU activity to analyze."),
            primary_time_us=0.0,
            primary_share=0.0,
            primary_advice="",
            primary_gain_us=0.0,
            notes=notes,
        )
    return Summary(
        primary=top.category.value,
        headline=top.title,
        primary_time_us=top.time_us,
        primary_share=top.share,
        primary_advice=top.advice,
        primary_gain_us=top.expected_gain_us,
        notes=notes,
    )
