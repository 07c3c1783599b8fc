"""`tracelens diff BEFORE AFTER`: did a change help, and why (tracelens.diff)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from tracelens.cli.common import (
    _interrupt_as_error,
    _progress,
    _redactor,
    _say,
    _summary,
    _targets,
    _write,
    check_input,
)


def diff(
    before: Annotated[Path, typer.Argument(help="The trace before the change.", show_default=False, metavar="BEFORE")],
    after: Annotated[Path, typer.Argument(help="The trace after the change.", show_default=False, metavar="AFTER")],
    html: Annotated[
        Path | None, typer.Option("--html", help="Write the HTML diff here ('-': standard output).", show_default=False)
    ] = None,
    markdown: Annotated[
        Path | None,
        typer.Option(
            "--markdown",
            "--md",
            help="Write the Markdown diff (for a PR) here ('-': standard output).",
            show_default=False,
        ),
    ] = None,
    json_out: Annotated[
        Path | None, typer.Option("--json", help="Write the JSON diff here ('-': standard output).", show_default=False)
    ] = None,
    out_dir: Annotated[
        Path, typer.Option("--out-dir", help="Where the diffs go when no --html/--markdown/--json is given.")
    ] = Path("reports"),
    redact: Annotated[
        bool, typer.Option("--redact", help="Replace user paths and host names in every output.")
    ] = False,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="Print nothing but errors: no summary, no progress.")
    ] = False,
    fail_if_slower: Annotated[
        str | None,
        typer.Option(
            "--fail-if-slower",
            help="CI gate: exit 1 when the step got slower by more than this (5%, 0.05, 2ms) and beyond the "
            "step-to-step noise.",
            show_default=False,
        ),
    ] = None,
    fail_if: Annotated[
        list[str] | None,
        typer.Option(
            "--fail-if",
            help="CI gate: exit 1 when this ledger cause (host_sync, host_bound, launch_overhead, ...) grew per "
            "step beyond its noise (and beyond --fail-if-slower when given, else 1% of the step). Repeatable.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Did a change help, and why: the change in step time split by cause, and what
    changed underneath (kernels, ops, syncs, host work).

    With --fail-if-slower or --fail-if it is a CI gate: exit 1 with a one-line reason
    when the change made the step (or the cause) slower beyond the threshold and the
    noise, 0 otherwise; 2 when the traces do not compare like for like.

    Examples:

      tracelens diff before.pt.trace.json.gz after.pt.trace.json.gz

      tracelens diff before.json after.json --md pr-comment.md

      tracelens diff main.json.gz pr.json.gz --fail-if-slower 5% --fail-if host_sync
    """
    from tracelens.gate import parse_causes, parse_threshold

    threshold = parse_threshold(fail_if_slower) if fail_if_slower is not None else None
    gate_causes = parse_causes(fail_if or [])
    from tracelens.diff import build_diff
    from tracelens.model import load_trace
    from tracelens.output import default_stem
    from tracelens.render.diff import render_diff_html, render_diff_json, render_diff_markdown, render_diff_terminal
    from tracelens.render.progress import progress

    _interrupt_as_error()
    check_input(str(before))
    check_input(str(after))
    stem = f"{default_stem(before)}-vs-{default_stem(after)}.diff"
    wanted = _targets(html, markdown, json_out, out_dir, stem, [before, after])
    with progress(quiet, _progress, files=2) as bar:
        first = load_trace(before, progress=bar.loader)
        bar.next_file()
        second = load_trace(after, progress=bar.loader)
        bar.analysing()
        d = build_diff(first, second)
        gate = None
        if threshold is not None or gate_causes:
            from tracelens.gate import evaluate

            gate = evaluate(d, threshold, gate_causes)  # refuses traces that do not compare, before any write
        bar.writing()
        scrub = _redactor(redact, [before, after], [first.meta.metadata, second.meta.metadata], wanted)
        renderers: dict[str, Callable[[Any], str | bytes]] = {
            "html": render_diff_html,
            "md": render_diff_markdown,
            "json": render_diff_json,
        }
        written = _write(wanted, renderers, d, scrub)
    _summary(wanted, written, d, None if quiet else render_diff_terminal, scrub)
    if gate is not None:
        if gate.failed or not quiet:
            _say(gate.reason)
        if gate.failed:
            raise typer.Exit(1)
