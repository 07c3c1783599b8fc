"""Analyzers: one module per finding category, each a leaf. An analyzer reads the
AnalysisContext (the trace model and the derived data, tracelens.derive) and returns
its findings; it imports no other analyzer (what two share is derived data).

`ANALYZERS` is the registry and the single description of each analyzer: the question
it answers, the ledger causes its time is drawn from, the finding it refines, what it
needs captured and the report sections it fills. The pipeline reads everything about
analyzers from here: the diagnostic order (the registry's order: the seed documents'
questions, and within a question the specific findings before the general one), each
category's ledger pool, the parents, the perfetto annotation's causes. Adding an
analyzer is one module, one line here, its words, and its tests (CONTRIBUTING.md).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tracelens.analyzers import (
    allocation,
    communication,
    compilation,
    compute_bound,
    eager_attention,
    host_bound,
    host_sync,
    launch_overhead,
    memory_bound,
    misaligned_matmul,
    power_throttle,
    queued_idle,
    shape_dynamism,
    wave_quantization,
)
from tracelens.analyzers.base import Category, Found
from tracelens.derive.context import AnalysisContext
from tracelens.derive.ledger import IDLE_CAUSES
from tracelens.report.enums import QuestionId

Analyzer = Callable[[AnalysisContext], Sequence[Found[Any, Any]]]

#: A finding whose time is any busy time no finding with causes of its own has claimed
#: (an inefficiency inside kernels of any bound).
BUSY = "busy"


@dataclass(frozen=True)
class AnalyzerSpec:
    category: Category  # the finding it makes
    question: QuestionId  # the diagnostic question it answers
    run: Analyzer
    #: The ledger causes its time is drawn from (BUSY: the busy time left to it). Top-level
    #: findings draw on disjoint causes, so their shares add up to at most the window.
    causes: tuple[str, ...]
    #: The finding it refines: its time is part of the parent's, never added to it again.
    parent: Category | None = None
    needs: tuple[str, ...] = ()  # capture options: cuda, cpu, record_shapes, nvml
    sections: tuple[str, ...] = ("findings",)  # report sections it fills beyond its findings


#: In the diagnostic order: the order findings are ranked in and analyzers run in.
ANALYZERS: tuple[AnalyzerSpec, ...] = (
    # A blocking pageable copy's own transfer time is the host's wait too (issue 34 §2).
    AnalyzerSpec(
        Category.HOST_SYNC, "host_waits", host_sync.analyze, ("host_sync", "gpu_busy_copy"), needs=("cuda", "cpu")
    ),
    AnalyzerSpec(Category.HOST_BOUND, "host_waits", host_bound.analyze, ("host_bound",), needs=("cuda", "cpu")),
    AnalyzerSpec(Category.COMMUNICATION, "host_waits", communication.analyze, ("communication",), needs=("cuda",)),
    # The GPU idles with its next work queued: it waits, but not for this host thread.
    AnalyzerSpec(Category.QUEUED_IDLE, "host_waits", queued_idle.analyze, ("idle_other",), needs=("cuda", "cpu")),
    AnalyzerSpec(
        Category.LAUNCH_OVERHEAD, "launch", launch_overhead.analyze, ("launch_overhead",), needs=("cuda", "cpu")
    ),
    AnalyzerSpec(Category.EAGER_ATTENTION, "memory", eager_attention.analyze, (BUSY,), needs=("cuda", "record_shapes")),
    AnalyzerSpec(
        Category.MEMORY_BOUND,
        "memory",
        memory_bound.analyze,
        ("gpu_busy_memory",),
        needs=("cuda", "record_shapes"),
        sections=("kernels", "roofline"),
    ),
    # The host work a new shape costs (cuDNN/cuBLAS planning for it) is host-bound idle.
    AnalyzerSpec(
        Category.SHAPE_DYNAMISM,
        "shape_dynamism",
        shape_dynamism.analyze,
        ("host_bound",),
        parent=Category.HOST_BOUND,
        needs=("cuda", "cpu"),
    ),
    AnalyzerSpec(Category.COMPILATION, "shape_dynamism", compilation.analyze, ("compilation",), needs=("cuda", "cpu")),
    # A tensor regrown by torch.cat costs its copy kernels (latency- or memory-bound).
    AnalyzerSpec(
        Category.ALLOCATION,
        "allocation",
        allocation.analyze,
        ("allocation", "gpu_busy_latency", "gpu_busy_memory"),
        needs=("cuda", "cpu"),
    ),
    # Specific causes of lost compute throughput first, the general finding last.
    AnalyzerSpec(
        Category.MISALIGNED_MATMUL,
        "compute",
        misaligned_matmul.analyze,
        (BUSY,),
        needs=("cuda", "record_shapes"),
        sections=("matmuls",),
    ),
    # Wave quantization and clocks are compute-bound time done slowly.
    AnalyzerSpec(
        Category.WAVE_QUANTIZATION,
        "compute",
        wave_quantization.analyze,
        (BUSY,),
        parent=Category.COMPUTE_BOUND,
        needs=("cuda",),
        sections=("matmuls",),
    ),
    AnalyzerSpec(
        Category.POWER_THROTTLE,
        "compute",
        power_throttle.analyze,
        (BUSY,),
        parent=Category.COMPUTE_BOUND,
        needs=("cuda", "nvml"),
        sections=("clocks",),
    ),
    AnalyzerSpec(
        Category.COMPUTE_BOUND,
        "compute",
        compute_bound.analyze,
        # fp32 kernels no shape model covers are unknown busy time (the V100 AMP finding).
        ("gpu_busy_compute", "gpu_busy_unknown"),
        needs=("cuda", "record_shapes"),
        sections=("kernels", "roofline"),
    ),
)

BUILT_CATEGORIES = frozenset(spec.category for spec in ANALYZERS)
#: Each category's rank in the diagnostic order.
CATEGORY_ORDER: dict[Category, int] = {spec.category: i for i, spec in enumerate(ANALYZERS)}
#: The ledger causes each category's time comes from.
LEDGER_POOL: dict[Category, tuple[str, ...]] = {spec.category: spec.causes for spec in ANALYZERS}
#: The finding each refining category is part of.
PARENT_OF: dict[Category, Category] = {spec.category: spec.parent for spec in ANALYZERS if spec.parent is not None}
#: The idle cause a category's finding explains, for the annotated trace's gap slices.
IDLE_CAUSE_OF: dict[str, str] = {
    spec.category.value: cause for spec in ANALYZERS for cause in spec.causes[:1] if cause in IDLE_CAUSES
}


def categories_of(question: QuestionId) -> tuple[Category, ...]:
    """The categories that answer `question`, in the diagnostic order."""
    return tuple(spec.category for spec in ANALYZERS if spec.question == question)


def run_all(ctx: AnalysisContext) -> list[Found[Any, Any]]:
    findings: list[Found[Any, Any]] = []
    for spec in ANALYZERS:
        findings.extend(spec.run(ctx))
    return findings


__all__ = [
    "ANALYZERS",
    "BUILT_CATEGORIES",
    "BUSY",
    "CATEGORY_ORDER",
    "IDLE_CAUSE_OF",
    "LEDGER_POOL",
    "PARENT_OF",
    "AnalysisContext",
    "AnalyzerSpec",
    "Category",
    "Found",
    "categories_of",
    "run_all",
]
