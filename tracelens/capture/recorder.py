"""Starting and stopping torch.profiler for the window (`_Recorder`), each finished
recording exported at once; the profiler's own chatter sent to a log (`_Quiet`); and
the profile objects kept until the process ends (`_KEEP`, `exit_process`)."""

from __future__ import annotations

import contextlib
import os
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn


def _profiler_on(torch: Any) -> bool:
    """Whether a torch.profiler session is on. torch.autograd.profiler keeps a flag that
    every profile's start sets and every stop clears (the C-side check reads the calling
    thread's state, which is False under profile_all_threads)."""
    flag = getattr(torch.autograd.profiler, "_is_profiler_enabled", None)
    if isinstance(flag, bool):
        return flag
    try:
        return bool(torch._C._autograd._profiler_enabled())
    except Exception:  # private API moved: assume it is on
        return True


def all_threads_config(torch: Any) -> Any:
    """torch.profiler's experimental config recording every thread's ops (by default only
    the thread that started the profiler is traced: 63 of 252 ops in a four-thread test),
    or None where this torch lacks it."""
    try:
        return torch._C._profiler._ExperimentalConfig(profile_all_threads=True)
    except (AttributeError, TypeError, RuntimeError):
        return None


class _Quiet:
    """Sends the profiler's own output (C++ lines on fd 2, Python warnings) to a log
    while tracelens calls into it; the script's output is untouched otherwise."""

    def __init__(self, log: Path, verbose: bool) -> None:
        self.log = log
        self.verbose = verbose
        self.lines = 0

    @contextlib.contextmanager
    def __call__(self) -> Iterator[None]:
        if self.verbose:
            yield
            return
        sys.stderr.flush()
        saved = os.dup(2)
        with open(self.log, "ab") as fh:
            os.dup2(fh.fileno(), 2)
            try:
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    yield
            finally:
                sys.stderr.flush()
                os.dup2(saved, 2)
                os.close(saved)
                for w in caught:
                    fh.write(f"{w.filename}:{w.lineno}: {w.category.__name__}: {w.message}\n".encode())


#: Every profile object tracelens started, kept until the process ends. Seen on torch
#: 2.13 (CPU) with profile_all_threads: destroying a stopped profile crashed the process
#: inside the garbage collector (SIGSEGV; 4 of 4 runs of tests/data/cpu_train.py 40 when
#: left to an automatic collection, 1 of 20 of `cpu_train.py 5` when collected at once
#: right after stop), so none is ever destroyed: `exit_process` ends the process
#: without finalising them.
_KEEP: list[Any] = []


def exit_process(code: int) -> NoReturn:
    """End the process as Python would (atexit functions, flushed streams) but without
    destroying the kept profile objects (see _KEEP)."""
    import atexit

    try:
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)


class _Recorder:
    """Starts and stops torch.profiler for the window. Every stopped recording that may
    be kept is exported at once, before another one starts: exporting a profile after a
    later profiler session crashed torch 2.13 (SIGSEGV in export_chrome_trace, 1 run in
    ~25 of tests/data/cpu_train.py 5). The start of the run, set aside, is one such file
    (`fallback`); the kept recording is another (`kept`)."""

    def __init__(self, torch: Any, make: Callable[[bool], Any], tmpdir: Path, quiet: _Quiet, notes: list[str]) -> None:
        self.torch = torch
        self.make = make
        self.tmpdir = tmpdir
        self.quiet = quiet
        self.notes = notes
        self.prof: Any = None
        self.kept: Path | None = None
        self.fallback: Path | None = None
        self.export_s = 0.0
        self.n = 0

    def start(self, step_num: int, provisional: bool = False) -> bool:
        if self.prof is not None:
            # The provisional recording of the start: set aside until the new recording
            # holds a whole step, in case the script ends before that.
            self.set_aside()
        prof = self.make(not provisional)
        _KEEP.append(prof)
        prof.step_num = step_num  # ProfilerStep#N labels continue the script's count
        # Without a schedule torch.profiler marks no ProfilerStep ranges; tracelens
        # starts and stops it itself (window.py) but wants the marks.
        prof.record_steps = True
        try:
            with self.quiet():
                prof.start()
        except Exception as exc:  # e.g. the script's own profiler is running
            self.notes.append(f"the profiler could not start ({type(exc).__name__}: {exc})")
            return False
        self.prof = prof
        return True

    def prewarm(self) -> None:
        """Start and stop a profiler once before the script runs, so that a later start
        from the timer's signal handler imports nothing (an import interrupted by the
        handler failed as a circular import)."""
        prof = self.make(False)
        _KEEP.append(prof)
        with contextlib.suppress(Exception), self.quiet():
            prof.start()
            prof.stop()

    def free_fallback(self) -> None:
        if self.fallback is not None:
            self.fallback.unlink(missing_ok=True)
            self.fallback = None

    def step(self) -> None:
        if self.prof is None:
            return
        self.free_fallback()  # the recording now holds a whole step
        try:
            self.prof.step()
        except Exception as exc:
            self.notes.append(f"the profiler failed at a step mark ({type(exc).__name__}: {exc})")
            self.drop()

    def _stop(self) -> Any:
        """Stop the running recording; the profile, or None when it cannot be exported."""
        prof, self.prof = self.prof, None
        if prof is None:
            return None
        if not _profiler_on(self.torch):
            # The script ran torch.profiler itself while tracelens recorded: that ends
            # the process-wide session, and exporting it then crashes inside torch.
            self.notes.append(
                "the script ran torch.profiler itself while tracelens was recording, which ended that recording "
                "(profile the script with one or the other)"
            )
            return None
        try:
            with self.quiet():
                prof.stop()
        except Exception as exc:
            self.notes.append(f"the profiler failed to stop cleanly ({type(exc).__name__}: {exc})")
            return None
        return prof

    def _export(self, prof: Any) -> Path | None:
        self.n += 1
        raw = self.tmpdir / f"recording{self.n}.json"
        t0 = time.perf_counter()
        try:
            with self.quiet():
                prof.export_chrome_trace(str(raw))
        except Exception as exc:
            self.notes.append(f"the profiler's export failed ({type(exc).__name__}: {exc})")
            raw.unlink(missing_ok=True)
            return None
        self.export_s = time.perf_counter() - t0
        return raw

    def stop(self, use_fallback: bool = False) -> None:
        """Stop and export the recording; it replaces the kept one. With use_fallback the
        set-aside start of the run is kept instead and the recording is not exported."""
        prof = self._stop()
        if use_fallback and self.fallback is not None:
            self._keep(self.fallback)
            self.fallback = None
            return
        if prof is not None:
            raw = self._export(prof)
            if raw is not None:
                self._keep(raw)

    def _keep(self, raw: Path) -> None:
        if self.kept is not None and self.kept != raw:
            self.kept.unlink(missing_ok=True)
        self.kept = raw

    def set_aside(self) -> None:
        """Stop the provisional recording and export it as the fallback."""
        prof = self._stop()
        if prof is not None:
            raw = self._export(prof)
            if raw is not None:
                self.free_fallback()
                self.fallback = raw

    def export_fallback(self) -> None:
        """Keep the set-aside start of the run (nothing better was recorded)."""
        if self.fallback is not None:
            self._keep(self.fallback)
            self.fallback = None

    def drop(self) -> None:
        self._stop()
