"""The split load: a large file read by two processes, each decoding its share of the
batches, the second forked as early as `report` starts (so that it decodes while the
first imports), their columns merged into the one-process model.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import gc
import os
import pickle
import signal
import stat
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from tracelens.model.loader.collect import _EMPTY_SHAPES_KEY, _NO_SHAPES, MAX_PYTHON_FRAMES, _Read, _read_stream
from tracelens.model.loader.nest import _is_step_name
from tracelens.model.loader.read import _GZIP_MAGIC, _printable
from tracelens.model.loader.stream import Misaligned, Share, Unstreamable
from tracelens.model.schema import OpShapes

#: Files that hold less JSON than this are read by one process. The split costs CPU (a
#: fork, a second inflate, the transfer of half the columns: ~0.1-0.2 s on a 250 MB trace)
#: and memory (both processes' batches in flight and the pages the child copies from the
#: parent: the peak of the two together, summed PSS, was 273 MB on a 147 MB trace where one
#: process peaks at 226 MB, 1.86x vs 1.54x the JSON; 299 vs 295 MB on 248 MB, 312 vs
#: 296 MB on 209 MB). From this size on the extra memory was under 10 % of the JSON.
SPLIT_MIN_JSON_BYTES = 192 * 2**20


#: The smallest gzip ratio of any real trace we know (shared/real_traces, sample_traces:
#: 9.9x to 30.3x): a gzip file's JSON is at least this times its size.
_MIN_GZIP_RATIO = 9


#: `TRACELENS_LOAD_PROCESSES=1` reads every file in one process (to measure one core, or
#: where a fork is unwelcome).
_PROCESSES_ENV = "TRACELENS_LOAD_PROCESSES"


def _split_wanted(path: str | os.PathLike[str]) -> bool:
    """Whether to read with a second process: on Linux (fork), with two CPUs to run on,
    from a process with no other threads (a fork copies only the calling thread, and
    locks other threads hold would stay held in the child) that is not itself a worker of
    a pool (the job report runs one load per CPU already), for a large file."""
    if os.environ.get(_PROCESSES_ENV, "").strip() == "1" or not sys.platform.startswith("linux"):
        return False
    try:
        if len(os.sched_getaffinity(0)) < 2:
            return False
    except (AttributeError, OSError):
        return False
    import threading

    if threading.active_count() != 1 or threading.current_thread() is not threading.main_thread():
        return False
    mp = sys.modules.get("multiprocessing")
    if mp is not None and mp.parent_process() is not None:
        return False
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):
            return False  # the one-process read words the error
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        try:
            head = os.read(fd, 5)
            tail = os.pread(fd, 4, max(st.st_size - 4, 0))
        finally:
            os.close(fd)
    except (OSError, ValueError):
        return False
    size = st.st_size
    if head[:2] == _GZIP_MAGIC or head[3:5] == _GZIP_MAGIC:
        # gzip's last four bytes: the (last member's) size mod 2**32, exact for one
        # member under 4 GiB; never less than the smallest ratio of real traces allows.
        size = max(int.from_bytes(tail, "little"), size * _MIN_GZIP_RATIO)
    return size >= SPLIT_MIN_JSON_BYTES


#: The second process's share when it is forked by the load itself (after the caller's
#: imports): every other batch.
LATE_SHARE = Share(1, 1, 2)


#: Its share when `start_split_early` forks it as the report starts (~0.08 s into the
#: process), before the parent imports pandas, the analyzers and the renderers: the parent
#: reaches its own batches at ~0.31 s, the child at once. 4 of every 7 batches, so that
#: both finish at about the same time: on train50 (248 MB) the parent's share was done at
#: 0.95-0.98 s and the child's columns in at 0.98-1.10 s (3 of 5, earlier in the pass: 1.03-1.05
#: / 1.15-1.17 s; whole-process medians not told apart: bench/RESULTS.md, "Issue 13, fifth pass").
EARLY_SHARE = Share(1, 4, 7)


@dataclasses.dataclass
class _Child:
    """A forked reader of one share of a file, and the pipe its read comes back through."""

    pid: int
    fd: int
    share: Share
    ident: tuple[int, int, int, int]  # the file when the child started: (dev, inode, size, mtime)


#: The child `start_split_early` started, until a load of the same file takes it.
_early: _Child | None = None


def _file_ident(path: str | os.PathLike[str]) -> tuple[int, int, int, int] | None:
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def _fork_reader(path: str | os.PathLike[str], share: Share) -> _Child | None:
    """Fork a process that reads `share` of the file and sends its `_Read` back pickled
    through a pipe; None when no fork could be made."""
    ident = _file_ident(path)
    if ident is None:
        return None
    try:
        r, w = os.pipe()
    except OSError:
        return None
    try:
        pid = os.fork()
    except OSError:
        os.close(r)
        os.close(w)
        return None
    if pid == 0:  # the child: never returns into the caller's stack
        try:
            os.close(r)
            # Forked early, the child runs outside load_trace, which turns the cyclic GC
            # off for the load (it rescans every batch's objects; none form cycles).
            gc.disable()
            with os.fdopen(w, "wb") as out:
                # Pickled straight into the pipe (and unpickled from it), so neither
                # process holds the columns twice. On any failure nothing is written,
                # or a torn pickle: the parent reads alone either way.
                pickle.dump(_read_stream(path, _printable(path), [], share), out, protocol=pickle.HIGHEST_PROTOCOL)
        except BaseException:  # any failure: the parent reads alone
            pass
        finally:
            os._exit(0)
    os.close(w)
    return _Child(pid, r, share, ident)


def _stop(child: _Child) -> None:
    """Close the child's pipe, kill it and reap it (it may have finished already)."""
    with contextlib.suppress(OSError):
        os.close(child.fd)
    with contextlib.suppress(OSError):
        os.kill(child.pid, signal.SIGKILL)
    with contextlib.suppress(OSError):
        os.waitpid(child.pid, 0)


def start_split_early(path: str | os.PathLike[str]) -> bool:
    """Start the split load's second process for `path` now, if the load would split it:
    the `report` command calls this first thing, so the child decodes its (larger) share
    while this process imports the rest of tracelens and parses its arguments. The next
    `load_trace` of the same, unchanged file takes the child; `discard_early` stops one
    that no load took. Whether the child is used or not, the model is the same."""
    global _early
    discard_early()
    if not _split_wanted(path):
        return False
    _early = _fork_reader(path, EARLY_SHARE)
    return _early is not None


def early_started() -> bool:
    """Whether an early child waits for its load."""
    return _early is not None


def discard_early() -> None:
    """Stop the early child if no load took it (an error before the load, another input)."""
    global _early
    child, _early = _early, None
    if child is not None:
        _stop(child)


def _adopt_early(path: str | os.PathLike[str]) -> _Child | None:
    """The early child, if it reads this very file, unchanged; else it is stopped."""
    global _early
    child, _early = _early, None
    if child is None:
        return None
    if child.ident != _file_ident(path):  # by inode, size and mtime: `./t.json` is `t.json`
        _stop(child)
        return None
    return child


def _read_split(path: str | os.PathLike[str], name: str, notes: list[str], child: _Child) -> _Read | None:
    """Read the file as two shares at once: the forked `child` decodes its batches while
    this process decodes the others and the array's end; the child's columns come back
    through a pipe and are put in batch order. None when the split could not be made (a
    batch that did not decode at its first cut, the child failing): the caller then reads
    the file in one process, which gives the same model either way. Errors of the input
    itself (TraceInputError) are raised as the one-process read raises them. The child
    is reaped (or killed) before this returns."""
    reaped = False
    try:
        try:
            mine = _read_stream(path, name, notes, child.share._replace(part=0))
        except (Misaligned, Unstreamable):
            return None
        with os.fdopen(child.fd, "rb", closefd=False) as inp:
            try:
                theirs = pickle.load(inp)
            except Exception:  # nothing, or a torn pickle: the child failed
                return None
        os.waitpid(child.pid, 0)
        reaped = True
        return _merged(mine, theirs) if isinstance(theirs, _Read) else None
    finally:
        if reaped:
            with contextlib.suppress(OSError):
                os.close(child.fd)
        else:
            _stop(child)


def _merged(mine: _Read, theirs: _Read) -> _Read | None:
    """Share 0's read with share 1's batches put in their places: batch i of the stream is
    `share.owner(i)`'s, the last is share 0's. Names are re-coded into share 0's tables, shape
    records replaced by share 0's record of the same set. None if the shares disagree."""
    a, b = mine.collector, theirs.collector
    if mine.share is None or theirs.share != mine.share._replace(part=1):
        return None
    owner = [mine.share.owner(i) for i in range(mine.cuts)] + ([0] if mine.last else [])
    n_b = sum(owner)
    if theirs.cuts != mine.cuts or len(a.marks) != len(owner) - n_b or len(b.marks) != n_b:
        return None
    if a.py_frames + b.py_frames > MAX_PYTHON_FRAMES:
        return None  # the cap applies in file order: the one-process read applies it
    remap = []
    for which in (0, 1):
        table = a.name_tables[which]
        names = list(b.name_tables[which])
        for nm in names:
            if nm not in table:
                table[nm] = len(table)
                if which == 0:
                    a.host_step.append(_is_step_name(nm))
        remap.append(np.array([table[nm] for nm in names], dtype=np.int64))
    same: dict[int, OpShapes] = {}
    for key, rec in b.shapes.items():
        same[id(rec)] = a.shapes.setdefault(key, _NO_SHAPES if key == _EMPTY_SHAPES_KEY else rec)

    def interleave(pa: list[Any], pb: list[Any], fix: Callable[[Any], Any] | None = None) -> list[Any]:
        ia, ib = iter(pa), iter(map(fix, pb) if fix is not None else pb)
        return [next(ib) if o else next(ia) for o in owner]

    for cols, tables_of, which in ((a.host, b.host, 0), (a.gpu, b.gpu, 1)):
        for col in list(cols):
            fix: Callable[[Any], Any] | None = None
            if col == "name":
                fix = remap[which].__getitem__
            elif col == "shapes":
                fix = functools.partial(_same_shapes, same)
            cols[col] = interleave(cols[col], tables_of.pop(col), fix)

    def spans(marks: list[tuple[int, int]], j: int) -> list[tuple[int, int]]:
        ends = [m[j] for m in marks]
        return list(zip([0, *ends], ends, strict=False))  # (start, end) of each batch

    for j, attr in ((0, "memory"), (1, "threads")):
        la, lb = getattr(a, attr), getattr(b, attr)
        sa, sb = iter(spans(a.marks, j)), iter(spans(b.marks, j))
        merged: list[Any] = []
        for o in owner:
            lo, hi = next(sb) if o else next(sa)
            merged.extend((lb if o else la)[lo:hi])
        setattr(a, attr, merged)
    ca, cb = iter(mine.counters), iter(theirs.counters)
    mine.counters = [next(cb) if o else next(ca) for o in owner]
    mine.counters_ok = mine.counters_ok and theirs.counters_ok
    a.n_events += b.n_events
    a.comm.extend(b.comm)  # matched to rows by id and sorted in finish: order does not matter
    a.has_counters = a.has_counters or b.has_counters
    for cat, kind in b.kind_cache.items():
        a.kind_cache.setdefault(cat, kind)
    for cat, count in b.other_categories.items():
        a.other_categories[cat] = a.other_categories.get(cat, 0) + count
    a.dropped += b.dropped
    a.py_frames += b.py_frames
    a.any_op = a.any_op or b.any_op
    a.long_names = [x + y for x, y in zip(a.long_names, b.long_names, strict=True)]
    return mine


def _same_shapes(same: dict[int, OpShapes], piece: list[OpShapes | None]) -> list[OpShapes | None]:
    return [None if rec is None else same[id(rec)] for rec in piece]


def _release_freed_memory() -> None:
    """Hand the batches' freed memory back to the OS (glibc's malloc_trim).

    glibc raises its mmap threshold each time a large block (a 16 MB batch) is freed, so
    later batches come from the heap, and freed heap memory stays in the process: on a
    225 MB trace the process kept 430 MB after the load, 237 MB once trimmed, and the
    analyzers allocate on top of that. Elsewhere (macOS, musl) this does nothing.
    """
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    try:
        import ctypes

        fn: Callable[[int], int] = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError, ImportError, TypeError):  # no glibc (TypeError: Windows)
        return None
    return fn
