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
