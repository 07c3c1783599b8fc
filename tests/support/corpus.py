"""The traces the tests run on: the H200 captures in sample_traces/ and the public traces
in ../shared/real_traces (as CI has them beside the checkout), each loaded, analysed and
reported at most once per test session, and only when a test asks for it (never at import
or collection: collecting the suite loads nothing)."""

from __future__ import annotations

import hashlib
import os
import pickle
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


#: The H200 before/after pairs captured one side per process (workloads/diff_pairs.py,
#: 2026-12-03): the prediction's ground truth. The diff_* traces in SAMPLES are the same
#: programs captured all in one process, each after the earlier ones' profiler sessions,
#: whose host ran up to 2.7x slower for it (bench/pair_order_probe.py); they stay the
#: analyzers' inputs.
PAIRS_DIR = SAMPLES / "pairs"
#: More captures of the pairs whose profiled host speed swung between fresh processes
#: (workloads/diff_pairs.py run again on the H200; bench/host_speed_schedule_probe.py).
PAIRS_REPEAT_DIRS = (SAMPLES / "pairs_r1", SAMPLES / "pairs_r2")


def pair_trace(pair: str, side: str) -> Path:
    p = PAIRS_DIR / f"diff_{pair}_{side}.pt.trace.json.gz"
    if not p.exists():
        pytest.fail(f"pair trace missing: {p}")
    return p


def pair_captures(pair: str) -> list[tuple[Path, Path]]:
    """Every capture of a pair's two sides: sample_traces/pairs' first, then the repeats."""
    out = [(pair_trace(pair, "before"), pair_trace(pair, "after"))]
    for d in PAIRS_REPEAT_DIRS:
        b, a = (d / f"diff_{pair}_{side}.pt.trace.json.gz" for side in ("before", "after"))
        if b.exists() and a.exists():
            out.append((b, a))
    return out


#: Where the xdist workers of one session share the models and reports they built (set
#: by conftest's session fixture; None: no other worker, the in-memory caches alone).
#: Under `-n 2` most traces were loaded and reported by both workers: all samples and
#: public traces take 11 s of CPU to load and 17 s more to report on this 2-core machine, 0.3 s
#: and 0.7 s to unpickle (230 MB, 14.6 MB). Each unpickled report equals the built one and
#: renders the same HTML and Markdown; a report of an unpickled model equals the report
#: of the loaded one (checked on every trace, bar its run time and date).
_shared: Path | None = None

#: What a model or report reads besides its trace and tracelens' code (peaks, source
#: folders, the loader's processes): a test that changes one gets one of its own.
_READ_ENV = ("TRACELENS_PEAKS", "TRACELENS_SOURCES", "TORCH_EXTENSIONS_DIR", "TRACELENS_LOAD_PROCESSES")


def share_in(folder: Path | None) -> None:
    """Share the workers' models and reports in `folder` (None: stop)."""
    global _shared
    _shared = folder


def _shared_file(kind: str, path: Path) -> Path | None:
    """The file of `kind` for the trace (its path, size and time) read by this code in this
    environment: the same name is the same model or report."""
    if _shared is None:
        return None
    st = path.stat()
    parts = [kind, str(path.resolve()), str(st.st_size), str(st.st_mtime_ns), os.getcwd(), _code()]
    parts += [f"{k}={os.environ.get(k)}" for k in _READ_ENV]
    digest = hashlib.sha256("\n".join(parts).encode()).hexdigest()[:32]
    return _shared / f"{kind}-{digest}.pickle"


@cache
def _code() -> str:
    """tracelens' code as it was when this worker imported it (each file's size and time)."""
    files = sorted((REPO / "tracelens").rglob("*.py"))
    return "\n".join(f"{p}:{p.stat().st_size}:{p.stat().st_mtime_ns}" for p in files)


def _read_shared(file: Path | None) -> Any:
    if file is None or not file.exists():
        return None
    return pickle.loads(file.read_bytes())  # written by a worker of this session


def _write_shared(file: Path | None, value: object) -> None:
    if file is None:
        return
    tmp = file.with_name(f".{file.name}.{os.getpid()}.tmp")  # whole or absent: another worker may read it now
    tmp.write_bytes(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))
    os.replace(tmp, file)


@cache
def model_of(path: Path) -> TraceModel:
    file = _shared_file("model", path)
    model: TraceModel | None = _read_shared(file)
    if model is None:
        model = load_trace(path)
        _write_shared(file, model)  # before any analysis fills its caches
    return model


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
    file = _shared_file("report", path)
    report: Report | None = _read_shared(file)
    if report is None:
        report = build_report(model_of(path), ctx=context_of(path))
        _write_shared(file, report)
    return report


def diff_of(before: Path, after: Path) -> Any:
    """`build_diff` of two traces' models, built once a session (test_diff, test_gate,
    test_predict and the renderers' tests diff the same sample pairs: host_bound_pageable
    -> pinned three times, each 0.5-1.5 CPU s)."""
    return _diff_of(before, after)


@cache
def _diff_of(before: Path, after: Path) -> Any:
    from tracelens.diff import build_diff

    file = _shared_file("diff", before)
    if file is not None:
        other = _shared_file("diff", after)
        assert other is not None
        file = file.with_name(f"diff-{file.stem[5:21]}-{other.stem[5:21]}.pickle")
    d = _read_shared(file)
    if d is None:
        d = build_diff(model_of(before), model_of(after))
        _write_shared(file, d)
    return d


@cache
def job_of(folder: Path) -> Any:
    """The job report of a folder of rank traces, read with one worker (no pool)."""
    from tracelens.job import analyze, expand, map_ranks, rank_inputs

    results, seconds, how = map_ranks(rank_inputs(expand([str(folder)])), workers=1)
    return analyze(results, map_seconds=seconds, scheduler=how)
