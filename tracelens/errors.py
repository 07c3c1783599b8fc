"""Typed errors, each mapped to a process exit code by the CLI (as memray does).

Anything a user can cause (a wrong path, a file that is not a trace) is one of these and
is reported as one line; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations


class TracelensError(Exception):
    """Base class: a problem the user can act on. `exit_code` is what the CLI returns."""

    exit_code = 1


class TraceInputError(TracelensError):
    """The input is not a trace we can read: missing, a directory, not JSON, truncated,
    not a Chrome/Kineto trace, or a trace with no events."""

    exit_code = 2


class UsageError(TracelensError):
    """The command line asks for something unsafe or contradictory, e.g. an output path
    that is the input trace (writing it would destroy the trace). Refused before any work."""

    exit_code = 2


class Interrupted(TracelensError):
    """Ctrl-C (SIGINT) during `tracelens report`: exit 130, as a shell reports SIGINT.

    Raised by the CLI's own SIGINT handler instead of KeyboardInterrupt, so it passes
    through click (which would print a blank line and "Aborted!") to the one-line error."""

    exit_code = 130

    def __init__(self) -> None:
        super().__init__("interrupted")


class OutputError(TracelensError):
    """A report could not be written (directory missing and not creatable, no permission)."""

    exit_code = 3


class CaptureError(TracelensError):
    """`tracelens capture` could not start the user's script or the profiler."""

    exit_code = 4


#: Every exit code of the `tracelens` command, in one place: the README's table and the
#: `--help` text are made from this (tests/test_exit_codes.py checks both).
EXIT_CODES: tuple[tuple[str, str], ...] = (
    (
        "0",
        "done: the reports are written (capture: the script exited 0 and its trace is written; "
        "diff with a gate: the gate passed)",
    ),
    (
        "1",
        "diff --fail-if-slower / --fail-if: the gate failed (one line says why); capture: the script's own "
        "exit code 1 (an uncaught exception); anything else: a bug in tracelens (one line 'internal error', "
        "TRACELENS_DEBUG=1 for the traceback)",
    ),
    (
        "2",
        "bad input or command line: not a trace tracelens can read, a missing trace or script, an output "
        "that cannot be written or would overwrite the input, contradictory options",
    ),
    ("3", "a report could not be written after the analysis (disk full, permissions changed)"),
    (
        "4",
        "capture could not run the script under the profiler (no PyTorch in this environment, the "
        "profiler failed to start)",
    ),
    ("N", "capture: the script's own exit code, passed through (sys.exit(N))"),
    (
        "128+S",
        "capture: the script was ended by signal S, as a shell reports it: 130 Ctrl-C (SIGINT), "
        "134 abort, 137 SIGKILL (also the OOM killer), 139 SIGSEGV, 143 SIGTERM (timeout, Slurm, "
        "docker); the trace of what was recorded is kept. report/diff: 130 Ctrl-C",
    ),
    (
        "torchrun",
        "capture under torchrun: each worker exits with its script's code (when one fails, the others "
        "with 143 from torchrun's SIGTERM); torchrun exits 0, or 1 with the failed rank's code in its "
        "summary. Rank 0 writes the job report on this run's traces that arrived (it waits 120 s after "
        "its own, up to 600 s for a rank still alive, 5 s after a SIGTERM) and names the missing ranks",
    ),
)


def exit_codes_text(width: int = 78) -> str:
    """The table as plain text, wrapped for `--help`."""
    import textwrap

    col = max(len(c) for c, _ in EXIT_CODES)
    lines: list[str] = []
    for code, what in EXIT_CODES:
        lines += textwrap.wrap(
            what, width, initial_indent=f"{code:>{col}}  ", subsequent_indent=" " * (col + 2), break_on_hyphens=False
        )
    return "\n".join(lines)


def exit_codes_markdown() -> str:
    """The table as Markdown, as the README has it."""
    rows = ["| Exit code | Meaning |", "|---|---|"]
    rows += [f"| {code} | {what} |" for code, what in EXIT_CODES]
    return "\n".join(rows)
