"""The per-rank map on Dask.

Embedded (the default): Dask's local `processes` scheduler over a pool of one process
per core, each with a bounded address space (RLIMIT_AS), so a laptop reads hundreds of
ranks while holding no more than one trace per core; a rank over the limit fails alone
(MemoryError) and is reported. Only the summaries (a few kB each) come back.

`--scheduler ADDRESS`: the same task for each rank goes to an existing `distributed`
scheduler (started by the user, dask-jobqueue on SLURM, dask-kubernetes); the workers
read the traces where they are (a shared filesystem or an fsspec URL) and need
tracelens installed.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from tracelens.errors import UsageError
from tracelens.job.model import RankFailure, RankInput, RankSummary
from tracelens.job.summarize import summarize

#: Address space per worker process by default. The loader needs several times a
#: trace's JSON size (the largest public trace we test, 56 MB of JSON, peaks near 1 GB
#: of RSS); Python with numpy and pandas maps ~1 GB of address space before reading any.
DEFAULT_WORKER_MEMORY = 4 * 2**30

Result = RankSummary | RankFailure
ProgressFn = Callable[[int, int, Result], None]


def _limit_memory(limit: int | None) -> None:
    """Worker initialiser: cap this process's address space, so a huge rank fails with
    MemoryError instead of taking the machine down."""
    if not limit:
        return
    try:
        import resource

        from tracelens.model.loader import MAX_JSON_BYTES

        # The loader's read(MAX_JSON_BYTES + 1) reserves that much address space for a
        # moment (never touched): allow it on top of the limit.
        limit += MAX_JSON_BYTES + 1
        _soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        cap = limit if hard == resource.RLIM_INFINITY else min(limit, hard)
        resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    except (ImportError, ValueError, OSError):  # no RLIMIT_AS (macOS, Windows): unbounded
        pass


#: A job whose local traces add up to less than this is read in this process (the
#: synchronous scheduler, the same task graph): a pool of spawned workers imports numpy,
#: pandas and tracelens again in each (5-10 s on the loaded 2-core machine, for two CPU
#: ranks of workloads/ranks/ddp_cpu.py read in under 3 s).
SMALL_JOB_BYTES = 16 * 2**20
SMALL_JOB_RANKS = 4


def _small(inputs: list[RankInput]) -> bool:
    if len(inputs) > SMALL_JOB_RANKS or any("://" in i.path for i in inputs):
        return False
    try:
        return sum(os.path.getsize(i.path) for i in inputs) < SMALL_JOB_BYTES
    except OSError:
        return False


def default_workers() -> int:
    try:
        return max(len(os.sched_getaffinity(0)), 1)
    except AttributeError:
        return max(os.cpu_count() or 1, 1)


def map_ranks(
    inputs: list[RankInput],
    *,
    scheduler: str | None = None,
    workers: int | None = None,
    worker_memory: int | None = DEFAULT_WORKER_MEMORY,
    per_rank_dir: str | None = None,
    progress: ProgressFn | None = None,
    redact: bool = False,
) -> tuple[list[Result], float, str]:
    """Summaries of every rank (in input order), the map's wall time and what ran it."""
    t0 = time.perf_counter()
    if scheduler:
        results, how = _distributed(inputs, scheduler, per_rank_dir, progress, redact)
    else:
        if workers is None and _small(inputs):
            workers = 1  # starting a pool costs more than reading these in this process
        results, how = _local(inputs, workers or default_workers(), worker_memory, per_rank_dir, progress, redact)
    return results, time.perf_counter() - t0, how


def _local(
    inputs: list[RankInput],
    workers: int,
    worker_memory: int | None,
    per_rank_dir: str | None,
    progress: ProgressFn | None,
    redact: bool = False,
) -> tuple[list[Result], str]:
    import dask
    from dask.callbacks import Callback

    workers = max(1, min(workers, len(inputs)))
    tasks = [dask.delayed(summarize, pure=False)(item, per_rank_dir, redact) for item in inputs]
    done = [0]

    class _Progress(Callback):  # type: ignore[misc]
        def _posttask(self, key: Any, result: Any, dsk: Any, state: Any, worker_id: Any) -> None:
            if isinstance(result, RankSummary | RankFailure):
                done[0] += 1
                if progress is not None:
                    progress(done[0], len(inputs), result)

    how = f"dask local processes scheduler, {workers} worker{'s' if workers > 1 else ''}"
    if worker_memory:
        how += f", {worker_memory / 2**30:.1f} GiB address space each"
    if workers == 1:
        # One worker: no pool to start (its imports cost a second), same task graph.
        _limit_memory(None)
        with _Progress():
            out = dask.compute(*tasks, scheduler="synchronous")
        return list(out), "dask synchronous scheduler, 1 worker"
    # spawn, not fork: the parent may hold threads (a fork copies their locks held).
    ctx = multiprocessing.get_context("spawn")
    with (
        ProcessPoolExecutor(
            max_workers=workers, mp_context=ctx, initializer=_limit_memory, initargs=(worker_memory,)
        ) as pool,
        _Progress(),
    ):
        out = dask.compute(*tasks, scheduler="processes", pool=pool)
    return list(out), how


def _distributed(
    inputs: list[RankInput],
    address: str,
    per_rank_dir: str | None,
    progress: ProgressFn | None,
    redact: bool = False,
) -> tuple[list[Result], str]:
    try:
        from distributed import Client, as_completed
    except ImportError:
        raise UsageError(
            "--scheduler needs dask's distributed package: pip install 'tracelens-gpu[distributed]'"
        ) from None
    try:
        client = Client(address, timeout="20s")
    except (OSError, TimeoutError) as exc:
        raise UsageError(f"--scheduler {address}: cannot connect ({exc})") from exc
    try:
        n_workers = len(client.scheduler_info().get("workers", {}))
        profiling = _workers_profiling(client)
        futures = client.map(summarize, inputs, per_rank_dir=per_rank_dir, redact=redact, pure=False)
        order = {f.key: i for i, f in enumerate(futures)}
        results: list[Result | None] = [None] * len(inputs)
        for done, fut in enumerate(as_completed(futures), start=1):
            i = order[fut.key]
            try:
                res: Result = fut.result()
            except Exception as exc:  # the worker died (killed for memory): that rank fails alone
                res = RankFailure(file=inputs[i].path, name_rank=inputs[i].name_rank,
                                  error=f"the worker failed: {type(exc).__name__}: {exc}")  # fmt: skip
            results[i] = res
            if progress is not None:
                progress(done, len(inputs), res)
            fut.release()
    finally:
        client.close()
    how = f"dask distributed scheduler at {address}, {n_workers} workers"
    if profiling:
        how += f" ({WORKER_PROFILER_NOTE})"
    return [r for r in results if r is not None], how


#: Dask's own worker profiler (on by default) samples the task thread's stack every 10 ms
#: and keeps the call trees: a long-lived worker's memory then grows with the ranks it
#: reads, not tracelens' tasks (helper mem28b, 2026-12-02, LocalCluster of 2 workers, 64
#: ranks a batch on the 2-core dev machine: RSS 129 / 142 / 158 MiB after 64 / 256 / 512
#: tasks with it, 111 / 112 / 113 MiB without; each task returns a 5.4 kB summary and the
#: worker holds no result or task after a batch).
WORKER_PROFILER_NOTE = (
    "its workers run Dask's profiler, whose memory grows with the ranks read: start them with "
    "DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED=False for jobs of many ranks"
)


def _workers_profiling(client: Any) -> bool:
    """Whether any worker runs Dask's statistical profiler (its own config, set where it
    was started; a worker that cannot answer counts as not)."""

    def enabled() -> bool:
        import dask

        return bool(dask.config.get("distributed.worker.profile.enabled", True))

    try:
        return any(client.run(enabled).values())
    except Exception:  # an old or restricted worker: say nothing rather than fail the job
        return False
