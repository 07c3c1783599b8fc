"""Analyzers: each module reads the TraceModel (through an AnalysisContext) and returns
Findings. `ANALYZERS` is the registry, in the diagnostic order of the seed documents.

Categories without an analyzer yet are listed in `tracelens.ranking.DIAGNOSTIC_ORDER`
and reported as "not built yet".
"""

from __future__ import annotations

from collections.abc import Callable

from tracelens.analyzers import (
    host_bound,
    host_sync,
    launch_overhead,
    misaligned_matmul,
    power_throttle,
    roofline,
    wave_quantization,
)
from tracelens.analyzers.base import Category, Finding, Severity
from tracelens.analyzers.context import AnalysisContext

Analyzer = Callable[[AnalysisContext], list[Finding]]

#: category ids each analyzer can emit, and the analyzer.
ANALYZERS: tuple[tuple[tuple[Category, ...], Analyzer], ...] = (
    ((Category.HOST_SYNC,), host_sync.analyze),
    ((Category.HOST_BOUND,), host_bound.analyze),
    ((Category.LAUNCH_OVERHEAD,), launch_overhead.analyze),
    ((Category.MEMORY_BOUND, Category.COMPUTE_BOUND), roofline.analyze),
    ((Category.MISALIGNED_MATMUL,), misaligned_matmul.analyze),
    ((Category.WAVE_QUANTIZATION,), wave_quantization.analyze),
    ((Category.POWER_THROTTLE,), power_throttle.analyze),
)

BUILT_CATEGORIES = frozenset(c for cats, _ in ANALYZERS for c in cats)


def run_all(ctx: AnalysisContext) -> list[Finding]:
    findings: list[Finding] = []
    for _, analyzer in ANALYZERS:
        findings.extend(analyzer(ctx))
    return findings


__all__ = ["ANALYZERS", "BUILT_CATEGORIES", "AnalysisContext", "Category", "Finding", "Severity", "run_all"]
