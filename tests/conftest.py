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
