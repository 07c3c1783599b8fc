"""Progress of `tracelens report` / `diff` on standard error.

On a terminal: a live bar (rich, which typer brings anyway) that moves through the
stages the loader reports (read, decode, build) and the analysis, with a spinner and the
elapsed time so a long stage visibly runs; it is erased when the work is done (or fails:
the one-line error is then the only line). Not on a terminal (a CI log, a pipe) and with
-q: nothing, so that a failing run's stderr is its one error line (issue 29: a progress
line came before it).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any

#: The stages, in order; the loader's messages start with the first word of the stage
#: they end ("read", "decoded 123 events", "built the trace model").
STAGES = ("reading the trace", "decoding the JSON", "building the trace model", "analysing", "writing the reports")
_DONE_BY = {"read": 1, "decoded": 2, "built": 3}


def live_allowed(quiet: bool) -> bool:
    """A live bar only on a terminal, never with -q or TERM=dumb (or TRACELENS_NO_PROGRESS
    set, for recordings and screenshots)."""
    if quiet or os.environ.get("TERM") == "dumb" or os.environ.get("TRACELENS_NO_PROGRESS"):
        return False
    return bool(getattr(sys.stderr, "isatty", None) and sys.stderr.isatty())


class Progress:
    """`stage(message)` advances the bar; `done()` finishes it. A no-op without a bar,
    apart from passing loader lines to `fallback` when one is given."""

    def __init__(self, bar: Any | None, task: Any | None, fallback: Callable[[str], None] | None, files: int) -> None:
        self._bar = bar
        self._task = task
        self._fallback = fallback
        self._files = files
        self._base = 0

    def next_file(self) -> None:
        """`diff` loads two traces: the bar covers both."""
        self._base += len(_DONE_BY)

    def loader(self, message: str) -> None:
        """The loader's callback."""
        if self._bar is None:
            if self._fallback is not None:
                self._fallback(message)
            return
        done = _DONE_BY.get(message.split(" ", 1)[0], 0)
        if done:
            self._set(self._base + done, STAGES[min(done, len(STAGES) - 1)])

    def analysing(self) -> None:
        self._set(self._files * len(_DONE_BY), STAGES[3])

    def writing(self) -> None:
        self._set(self._files * len(_DONE_BY) + 1, STAGES[4])

    def _set(self, completed: int, what: str) -> None:
        if self._bar is not None:
            self._bar.update(self._task, completed=completed, description=what)


@contextlib.contextmanager
def progress(quiet: bool, fallback: Callable[[str], None] | None, files: int = 1) -> Iterator[Progress]:
    """The progress display for one command; the bar is erased when the block ends."""
    if not live_allowed(quiet):
        yield Progress(None, None, None, files)
        return
    from rich.console import Console
    from rich.progress import BarColumn, SpinnerColumn, TextColumn, TimeElapsedColumn
    from rich.progress import Progress as RichProgress

    console = Console(stderr=True, highlight=False)
    bar = RichProgress(
        SpinnerColumn(),
        TextColumn("tracelens: {task.description}"),
        BarColumn(bar_width=24),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    )
    total = files * len(_DONE_BY) + 2
    with bar:
        task = bar.add_task(STAGES[0], total=total)
        p = Progress(bar, task, None, files)
        yield p
        bar.update(task, completed=total)
