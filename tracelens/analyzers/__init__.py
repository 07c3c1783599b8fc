"""Analyzers: each module reads the TraceModel and the derived layer (through an
AnalysisContext) and returns Findings. `ANALYZERS` is the registry, in the diagnostic
order of the seed documents: each entry says which question it answers, which categories
it emits, what capture options it needs and which report sections it fills, so a new
analyzer plugs in by adding a module and a line here.

Categories without an analyzer yet are listed in `tracelens.ranking.DIAGNOSTIC_ORDER`
and reported as "not built yet".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tracelens.analyzers import (
    allocation,
    communication,
    eager_attention,
    host_bound,
    host_sync,
    launch_overhead,
    misaligned_matmul,
    power_throttle,
    roofline,
    shape_dynamism,
    wave_quantization,
)
from tracelens.analyzers.base import Category, Finding, Severity
from tracelens.analyzers.context import AnalysisContext

Analyzer = Callable[[AnalysisContext], list[Finding]]


@dataclass(frozen=True)
class AnalyzerSpec:
    question: str  # the DiagnosticStep id it answers
    categories: tuple[Category, ...]
    run: Analyzer
    needs: tuple[str, ...] = ()  # capture options: cuda, cpu, record_shapes, nvml
    sections: tuple[str, ...] = ("findings",)  # report sections it fills beyond its findings


ANALYZERS: tuple[AnalyzerSpec, ...] = (
    AnalyzerSpec("host_waits", (Category.HOST_SYNC,), host_sync.analyze, ("cuda", "cpu")),
    AnalyzerSpec("host_waits", (Category.HOST_BOUND,), host_bound.analyze, ("cuda", "cpu")),
    AnalyzerSpec("host_waits", (Category.COMMUNICATION,), communication.analyze, ("cuda",)),
    AnalyzerSpec("launch", (Category.LAUNCH_OVERHEAD,), launch_overhead.analyze, ("cuda", "cpu")),
    AnalyzerSpec("memory", (Category.EAGER_ATTENTION,), eager_attention.analyze, ("cuda", "record_shapes")),
    AnalyzerSpec(
        "memory",
        (Category.MEMORY_BOUND, Category.COMPUTE_BOUND),
        roofline.analyze,
        ("cuda", "record_shapes"),
        ("kernels", "roofline"),
    ),
    AnalyzerSpec(
        "shape_dynamism", (Category.SHAPE_DYNAMISM, Category.COMPILATION), shape_dynamism.analyze, ("cuda", "cpu")
    ),
    AnalyzerSpec("allocation", (Category.ALLOCATION,), allocation.analyze, ("cuda", "cpu")),
    AnalyzerSpec(
        "compute", (Category.MISALIGNED_MATMUL,), misaligned_matmul.analyze, ("cuda", "record_shapes"), ("matmuls",)
    ),
    AnalyzerSpec("compute", (Category.WAVE_QUANTIZATION,), wave_quantization.analyze, ("cuda",), ("matmuls",)),
    AnalyzerSpec("compute", (Category.POWER_THROTTLE,), power_throttle.analyze, ("cuda", "nvml"), ("clocks",)),
)

BUILT_CATEGORIES = frozenset(c for spec in ANALYZERS for c in spec.categories)


def run_all(ctx: AnalysisContext) -> list[Finding]:
    findings: list[Finding] = []
    for spec in ANALYZERS:
        findings.extend(spec.run(ctx))
    return findings


__all__ = [
    "ANALYZERS",
    "BUILT_CATEGORIES",
    "AnalysisContext",
    "AnalyzerSpec",
    "Category",
    "Finding",
    "Severity",
    "run_all",
]
