"""The traces the tests run on: the H200 captures in sample_traces/ and the public traces
in ../shared/real_traces (as CI has them beside the checkout), each loaded, analysed and
reported at most once per test session, and only when a test asks for it (never at import
or collection: collecting the suite loads nothing)."""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from tracelens.assemble import build_report
from tracelens.derive.context import AnalysisContext
from tracelens.model import TraceModel, load_trace
from tracelens.report import Report

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "sample_traces"
DATA = REPO / "tests" / "data"
REAL = Path(os.environ.get("TRACELENS_REAL_TRACES", REPO.parent / "shared" / "real_traces"))

REAL_TRACES = sorted(REAL.glob("*/*.json.gz")) if REAL.is_dir() else []
SAMPLE_TRACES = sorted(SAMPLES.glob("*.json.gz"))

needs_real = pytest.mark.skipif(not REAL_TRACES, reason=f"real traces not found at {REAL}")


def trace_id(path: Path) -> str:
    """A trace's name without its suffixes, for test ids."""
    return path.name.split(".json")[0].removesuffix(".pt.trace")


def real(name: str) -> Path:
    """A trace from shared/real_traces by file name."""
    for p in REAL_TRACES:
        if p.name == name:
            return p
    pytest.skip(f"real trace {name} not found under {REAL}")


def sample(name: str) -> Path:
    p = SAMPLES / f"{name}.pt.trace.json.gz"
    if not p.exists():
        pytest.fail(f"sample trace missing: {p}")
    return p


@cache
def model_of(path: Path) -> TraceModel:
    return load_trace(path)


@cache
def context_of(path: Path) -> AnalysisContext:
    return AnalysisContext(model_of(path))


@cache
def whole_context_of(path: Path) -> AnalysisContext:
    """The whole trace as the window: for benchmark sweeps, whose parts are not one loop."""
    model = model_of(path)
    return AnalysisContext(model, user_window=(0.0, model.span_us / 1e6 + 1.0))


@cache
def report_of(path: Path) -> Report:
    return build_report(model_of(path), ctx=context_of(path))


@cache
def job_of(folder: Path) -> Any:
    """The job report of a folder of rank traces, read with one worker (no pool)."""
    from tracelens.job import analyze, expand, map_ranks, rank_inputs

    results, seconds, how = map_ranks(rank_inputs(expand([str(folder)])), workers=1)
    return analyze(results, map_seconds=seconds, scheduler=how)
