"""The `tracelens` command.

    tracelens report TRACE [--html PATH] [--markdown PATH] [--json PATH]
    tracelens capture SCRIPT [ARGS...]      (coming: see README)

Errors a user can cause print one line and exit non-zero (see tracelens.errors); the
input trace is only ever read.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Annotated

import typer

from tracelens import __version__
from tracelens.errors import TracelensError

app = typer.Typer(
    name="tracelens",
    help=(
        "Explains why a PyTorch GPU program is slow, from a torch.profiler trace, in the order an "
        "expert would look: host waits on the device, tiny launches, memory traffic, shape "
        "dynamism, allocation, raw compute.\n\n"
        "Start with:  tracelens report trace.json.gz"
    ),
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


def _progress(message: str) -> None:
    typer.echo(f"tracelens: {message}", err=True)


@app.command()
def report(
    trace: Annotated[
        Path,
        typer.Argument(
            help="A torch.profiler (Kineto) Chrome trace: .json or .json.gz, any torch version, NVIDIA or AMD.",
            show_default=False,
        ),
    ],
    html: Annotated[
        Path | None, typer.Option("--html", help="Write the self-contained HTML report here.", show_default=False)
    ] = None,
    markdown: Annotated[
        Path | None,
        typer.Option(
            "--markdown", "--md", help="Write the Markdown summary (for a GitHub issue) here.", show_default=False
        ),
    ] = None,
    json_out: Annotated[
        Path | None, typer.Option("--json", help="Write the JSON report (for machines) here.", show_default=False)
    ] = None,
    out_dir: Annotated[
        Path,
        typer.Option("--out-dir", help="Where the reports go when no --html/--markdown/--json is given."),
    ] = Path("reports"),
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Do not print the terminal summary.")] = False,
) -> None:
    """Explain a trace: ranked findings with their cost, source and fix.

    With no output option, writes REPORTS/<trace>.html, .md and .json (REPORTS is
    --out-dir, default ./reports) and prints a short summary.

    Examples:

      tracelens report run.pt.trace.json.gz

      tracelens report run.json --md issue.md --json run.report.json
    """
    from tracelens.assemble import build_report
    from tracelens.model import load_trace
    from tracelens.output import default_stem, write_atomic
    from tracelens.render import render_html, render_json, render_markdown, render_terminal

    t0 = time.perf_counter()
    model = load_trace(trace, progress=_progress)
    load_s = time.perf_counter() - t0
    rep = build_report(model, load_seconds=load_s)
    targets: list[tuple[Path, str]] = []
    if html is None and markdown is None and json_out is None:
        stem = default_stem(trace)
        html, markdown, json_out = (out_dir / f"{stem}.html", out_dir / f"{stem}.md", out_dir / f"{stem}.json")
    if html is not None:
        targets.append((html, render_html(rep)))
    if markdown is not None:
        targets.append((markdown, render_markdown(rep)))
    if json_out is not None:
        targets.append((json_out, render_json(rep)))
    written = [str(write_atomic(path, text)) for path, text in targets]
    if not quiet:
        typer.echo(render_terminal(rep, written), nl=False)


def main() -> None:
    """Entry point: run the app, mapping user errors to one line and an exit code."""
    try:
        app(standalone_mode=False)
    except TracelensError as exc:
        typer.echo(f"tracelens: error: {exc}", err=True)
        sys.exit(exc.exit_code)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        typer.echo("tracelens: aborted", err=True)
        sys.exit(130)
    except KeyboardInterrupt:
        typer.echo("tracelens: interrupted", err=True)
        sys.exit(130)
    except Exception as exc:
        # Usage errors (click's, vendored by typer) know how to show themselves.
        show = getattr(exc, "show", None)
        code = getattr(exc, "exit_code", None)
        if callable(show) and isinstance(code, int):
            show()
            sys.exit(code)
        raise
