"""The `tracelens` command.

    tracelens report TRACE [--html PATH] [--markdown PATH] [--json PATH]
    tracelens report FOLDER|GLOB|FILES...|URL [--scheduler ADDRESS] [--per-rank]   (ranks of one job)
    tracelens capture [OPTIONS] SCRIPT [ARGS...]   (or -m MODULE [ARGS...])

Errors a user can cause print one line and exit non-zero (see tracelens.errors); the
input trace is only ever read, and an output path that is the input is refused.

One module per command (report, diff, capture; a job's several traces in job.py), what
they share in common.py; main() is the entry point.
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from tracelens import __version__, early
from tracelens.cli import capture, common, diff, mcp, report
from tracelens.cli.common import _FINISHED, _say
from tracelens.errors import Interrupted, TracelensError, exit_codes_text


def _usage_name(self: Any) -> str:
    """An argument in a usage line as click and man pages write it: `TRACE...` required,
    `[SCRIPT]` optional (typer 0.29 writes a required one `{trace}...`, which reads as a
    template placeholder; issue 27)."""
    name = str(self.metavar or self.name or "").upper()
    name = name if self.required else f"[{name}]"
    return name + ("..." if self.nargs != 1 else "")


if hasattr(typer.core.TyperArgument, "_usage_display_name"):
    typer.core.TyperArgument._usage_display_name = _usage_name  # type: ignore[method-assign]

app = typer.Typer(
    name="tracelens",
    help=(
        "Explains why a PyTorch GPU program is slow, from a torch.profiler trace, in the order an "
        "expert would look: host waits on the device, tiny launches, memory traffic, shape "
        "dynamism, allocation, raw compute.\n\n"
        "Profile and explain a script:  tracelens capture train.py [args]\n\n"
        "Explain an existing trace:  tracelens report trace.json.gz"
    ),
    epilog="Exit codes:\n\n\b\n" + exit_codes_text(),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"tracelens {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """tracelens: why is my PyTorch GPU program slow?"""


# The commands, one module each (as memray's commands/): registered in the order --help lists them.
app.command()(report.report)
app.command()(mcp.mcp)
app.command()(diff.diff)
# Everything after the script is the script's: no interspersed options.
app.command(
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True, "allow_interspersed_args": False},
    epilog="Exit codes:\n\n\b\n" + exit_codes_text(),
)(capture.capture)


def _hard_exit(code: int) -> None:
    """Leave without tearing down the heap (as mypy does): flush what the user sees, then
    os._exit. Only for the process's own entry point and only after a single-trace report,
    whose outputs are already written (atomically) and which holds no pool or child."""
    early.discard()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


#: The options of a plain single-trace report that `_fast_report` passes on itself (what
#: typer would: a Path for each value, True for each flag); any other option goes to typer.
_FAST_PATHS = {"--html": "html", "--markdown": "markdown", "--md": "markdown", "--json": "json_out",
               "--out-dir": "out_dir", "--perfetto": "perfetto"}  # fmt: skip


_FAST_FLAGS = {"-q": "quiet", "--quiet": "quiet", "--redact": "redact"}


def _fast_report(args: list[str]) -> dict[str, Any] | None:
    """`report`'s arguments for `report TRACE [--html/--md/--json/--out-dir/--perfetto PATH]
    [-q] [--redact]` on an existing file, as typer would pass them; None for any other
    command line. typer's parse of `report` costs ~65 ms on the development machine,
    most of it importing pydantic for its parameter coercion; this line needs none."""
    scanned = early.scan_report(args)
    if scanned is None or not os.path.isfile(scanned[0]):
        return None
    kwargs: dict[str, Any] = {"traces": [scanned[0]]}
    for option, value in scanned[1]:
        if option in _FAST_FLAGS:
            kwargs[_FAST_FLAGS[option]] = True
        elif option in _FAST_PATHS and value is not None:
            kwargs[_FAST_PATHS[option]] = Path(value)  # the last one given wins, as in click
        else:
            return None
    return kwargs


#: The commands (the first argument), for the hint on a trace given without one.
_COMMANDS = frozenset({"report", "diff", "capture", "mcp"})


def _missing_command(args: list[str]) -> None:
    """`tracelens trace.json.gz` (no command): say the command, as one line (exit 2),
    instead of click's "No such command"."""
    from tracelens.errors import UsageError

    if not args or args[0] in _COMMANDS or args[0].startswith("-"):
        return
    first = args[0]
    low = first.lower()
    import shlex

    rest = "".join(f" {shlex.quote(a)}" for a in args[1:])
    if low.endswith(".py") and os.path.isfile(first):
        raise UsageError(f"{first}: tracelens needs a command first; to profile this script: "
                         f"tracelens capture {shlex.quote(first)}{rest}")  # fmt: skip
    if low.endswith((".json", ".json.gz", ".gz", ".pickle", ".pkl")) or os.path.exists(first):
        raise UsageError(f"{first}: tracelens needs a command first; to explain this trace: "
                         f"tracelens report {shlex.quote(first)}{rest}")  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the app, mapping user errors to one line and an exit code."""
    if argv is None:  # the console script or `python -m tracelens`: a process of its own
        common.OWN_PROCESS = True
        # Imports make no garbage cycles worth collecting, but ~180 collections (~40 ms
        # of the report's start-up on the development machine): the GC stays off until
        # the report's model is loaded (or typer takes any other command).
        gc.disable()
        early.start(sys.argv[1:])
    try:
        _missing_command(sys.argv[1:] if argv is None else argv)
        fast = _fast_report(sys.argv[1:] if argv is None else argv)
        if fast is not None:
            report.report(**fast)
            got: object = 0
        else:
            if common.OWN_PROCESS:
                gc.enable()
            # Without standalone mode click returns the exit code of typer.Exit instead of
            # raising it; pass it on (capture's exit code is the script's).
            got = app(args=argv, standalone_mode=False)
        code = got if isinstance(got, int) else 0
        if argv is None and _FINISHED:  # the console script or `python -m tracelens`
            _hard_exit(code)
        sys.exit(code)
    except TracelensError as exc:
        _say(f"error: {exc}" if not isinstance(exc, Interrupted) else "interrupted")
        sys.exit(exc.exit_code)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        _say("aborted")
        sys.exit(130)
    except KeyboardInterrupt:
        _say("interrupted")
        sys.exit(130)
    except Exception as exc:
        # Usage errors (click's, vendored by typer) know how to show themselves.
        show = getattr(exc, "show", None)
        exit_code = getattr(exc, "exit_code", None)
        if callable(show) and isinstance(exit_code, int):
            show()
            sys.exit(exit_code)
        # A bug in tracelens: one line for the user, the traceback on request.
        if os.environ.get("TRACELENS_DEBUG"):
            raise
        _say(
            f"internal error: {type(exc).__name__}: {exc} "
            "(set TRACELENS_DEBUG=1 for the traceback, and please report it)"
        )
        sys.exit(1)
    finally:
        early.discard()
