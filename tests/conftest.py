"""pytest's hooks and fixtures. What tests share otherwise lives in tests/support/ (the
traces, one CLI runner, one synthetic trace builder): import it from there."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

# Older tests imported these from conftest; they are support.corpus's.
from support.corpus import (  # noqa: F401
    REAL,
    REAL_TRACES,
    REPO,
    SAMPLE_TRACES,
    SAMPLES,
    context_of,
    job_of,
    model_of,
    needs_real,
    real,
    report_of,
    sample,
    share_in,
    whole_context_of,
)

from tracelens.report import Report


@pytest.fixture(scope="session", autouse=True)
def _corpus_shared_by_the_workers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Under pytest-xdist, a model or report one worker built is read by the others from
    this session's temp folder (the workers' own are inside it) instead of built again."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        yield
        return
    folder = tmp_path_factory.getbasetemp().parent / "corpus"
    folder.mkdir(exist_ok=True)
    share_in(folder)
    yield
    share_in(None)


@pytest.fixture(scope="session")
def all_real_reports() -> dict[str, Report]:
    return {p.name: report_of(p) for p in REAL_TRACES}


#: Tests that take many seconds each (processes, torch captures, the fuzzer), run first.
#: xdist hands each worker its next test as it finishes one (pyproject.toml's
#: --maxschedchunk 1), so started first they overlap the many short tests instead of
#: one of them holding a worker after the rest are done (the slow lane on 2 cores: one
#: worker ran 95 s alone when the first 167 tests went to it in one chunk). A name that
#: is gone here only loses its place at the front.
LONG_FIRST = (
    "test_ranks_capture.py::test_torchrun_capture_reports_on_its_own_run_with_a_stale_trace_planted",
    "test_fuzz.py::test_bounded_fuzz_run",
    "test_integrations.py::test_capture_waits_for_a_frameworks_steps",
    "test_counters.py::test_capture_counters_end_to_end",
    "test_capture_supervisor.py::test_a_spawn_pool_leaves_no_process_behind",
    "test_fuzz.py::test_corpus_replays",
    "test_job.py::test_torchrun_capture_one_trace_per_rank_and_one_job_report",
    "test_job.py::test_distributed_scheduler",
    "test_analyzers.py::test_every_real_trace_reports",
    "test_capture.py::test_time_window",
    "test_capture_supervisor.py::test_a_segfault_after_the_recording_keeps_the_trace_and_the_signal",
    "test_capture.py::test_ctrl_c_writes_the_trace",
    "test_cli.py::test_ctrl_c_is_one_line_and_exit_130",
    "test_gate.py::test_the_gate_refuses_other_gpus_and_other_capture_options",
    "test_cli.py::test_folder_of_independent_traces",
    "test_gate.py::test_cli_gate_exit_codes",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """LONG_FIRST's tests first, in its order; the rest keep theirs (a stable sort)."""

    def rank(item: pytest.Item) -> int:
        name = f"{item.path.name}::{item.originalname}" if isinstance(item, pytest.Function) else ""
        return LONG_FIRST.index(name) if name in LONG_FIRST else len(LONG_FIRST)

    items.sort(key=rank)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-goldens",
        action="store_true",
        default=False,
        help="rewrite tests/goldens/ from the current outputs instead of comparing against them",
    )


def pytest_collection_finish(session: pytest.Session) -> None:
    """Collecting the suite loads no trace: parameters are paths, and a test loads what
    it needs when it runs (loading 58 traces at import once cost 24 s per run)."""
    loaded = model_of.cache_info().currsize
    if loaded:
        raise pytest.UsageError(f"{loaded} traces were loaded while collecting the tests; load them inside the test")
