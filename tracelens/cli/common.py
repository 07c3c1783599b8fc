"""What the commands share: the outputs asked for, checked before any work and written
atomically, the summary after them, one-line messages on stderr that trace text cannot
drive the terminal with, Ctrl-C as one line, and the --window/--steps parsers.
"""

from __future__ import annotations

import contextlib
import signal
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import typer

from tracelens.errors import Interrupted

#: What a command renders: a Report or a DiffReport.
_Result = TypeVar("_Result")


def _progress(message: str) -> None:
    _say(message)


def _targets(
    html: Path | None,
    markdown: Path | None,
    json_out: Path | None,
    out_dir: Path,
    stem: str,
    inputs: list[Path],
    perfetto: Path | None = None,
) -> list[tuple[Path, str]]:
    """The outputs asked for (all three under out_dir when none is), checked before any
    work: none may be an input, and each must be writable (a report that cannot be
    written fails now, not after a minute of analysis)."""
    from tracelens.output import check_outputs, check_writable, clean_stale_temps, is_stdout

    if html is None and markdown is None and json_out is None:
        html, markdown, json_out = (out_dir / f"{stem}.html", out_dir / f"{stem}.md", out_dir / f"{stem}.json")
    wanted = [
        (p, kind)
        for p, kind in ((html, "html"), (markdown, "md"), (json_out, "json"), (perfetto, "perfetto"))
        if p is not None
    ]
    for source in inputs:
        check_outputs(source, [p for p, _ in wanted])
    check_writable([p for p, _ in wanted])
    # A run killed mid-write (kill -9) left its hidden temp file: ours, so ours to remove.
    for folder in {p.parent for p, _ in wanted if not is_stdout(p)}:
        clean_stale_temps(folder)
    return wanted


def _redactor(
    on: bool, traces: list[Path], metadata: list[Any], wanted: list[tuple[Path, str]]
) -> Callable[[str], str]:
    """The redaction of every output (identity without --redact): paths, and the host and
    user names the traces and this machine give."""
    from tracelens.output import is_stdout, read_trace_bytes
    from tracelens.redact import Redactor, no_redaction

    if not on:
        return no_redaction
    raw = [read_trace_bytes(t) for t in traces]
    dirs = [p.parent for p, _ in wanted if not is_stdout(p)]
    return Redactor.for_trace(traces, metadata, raw, dirs).text


def _annotated_trace(trace: Path, rep: Any, ctx: Any, scrub: Callable[[str], str], path: Path | None) -> bytes:
    """The input trace with tracelens' tracks spliced in (render/perfetto.py)."""
    from tracelens.output import perfetto_bytes, read_trace_bytes
    from tracelens.render.perfetto import annotation_events, gaps_of, splice

    dev = ctx.ledger.primary
    meta = ctx.model.meta
    shift = meta.origin_us - (meta.base_time_ns / 1000.0 if meta.base_time_ns else 0.0)
    from tracelens.analyzers import IDLE_CAUSE_OF
    from tracelens.redact import no_redaction

    events = annotation_events(rep, gaps_of(dev.gaps if dev else None), shift, IDLE_CAUSE_OF)
    data = splice(read_trace_bytes(trace), events)
    if scrub is not no_redaction:
        data = scrub(data.decode("utf-8", "surrogateescape")).encode("utf-8", "surrogateescape")
    return perfetto_bytes(path or "", data)


def _write(
    wanted: list[tuple[Path, str]],
    renderers: Mapping[str, Callable[[_Result], str | bytes]],
    result: _Result,
    scrub: Callable[[str], str],
) -> list[str]:
    """Write each output atomically (redacted when asked); return how to name them."""
    from tracelens.output import write_report

    written = []
    for path, kind in wanted:
        text = renderers[kind](result)
        written.append(write_report(path, scrub(text) if isinstance(text, str) else text))
    return written


def _emit(
    wanted: list[tuple[Path, str]],
    renderers: Mapping[str, Callable[[_Result], str | bytes]],
    result: _Result,
    summary: Callable[[_Result, list[str]], str] | None,
    scrub: Callable[[str], str] | None = None,
) -> None:
    """Write each output, then print a summary that takes no width or colour (to stderr
    when a report went to standard output): for callers that have such a summary."""
    from tracelens.output import is_stdout
    from tracelens.redact import no_redaction

    scrub = scrub or no_redaction
    written = _write(wanted, renderers, result, scrub)
    if summary is not None:
        typer.echo(scrub(summary(result, written)), nl=False, err=any(is_stdout(p) for p, _ in wanted))


def _summary(
    wanted: list[tuple[Path, str]],
    written: list[str],
    result: _Result,
    summary: Callable[..., str] | None,
    scrub: Callable[[str], str],
) -> None:
    """Print the summary at the terminal's width (to stderr when a report went to
    standard output, out of its way), coloured only on a terminal without NO_COLOR."""
    from tracelens.output import is_stdout
    from tracelens.render.terminal import terminal_width, use_colour

    if summary is None:
        return
    err = any(is_stdout(p) for p, _ in wanted)
    stream = sys.stderr if err else sys.stdout
    colour = use_colour(stream)
    text = summary(result, [scrub(w) for w in written], width=terminal_width(stream), colour=colour)
    typer.echo(scrub(text), nl=False, err=err, color=colour)


def _parse_step_range(text: str) -> tuple[int, int]:
    """ "3-5" -> steps 3..5 (inclusive); "4" -> step 4."""
    try:
        lo_s, _, hi_s = text.partition("-")
        lo = int(lo_s)
        hi = int(hi_s) if hi_s else lo
    except ValueError as exc:
        raise typer.BadParameter("expected N-M, e.g. 3-5") from exc
    if lo < 0 or hi < lo:
        raise typer.BadParameter("expected 0 <= N <= M")
    return (lo, hi)


def _raise_interrupted(signum: int, frame: object) -> None:
    raise Interrupted()


def _interrupt_as_error() -> None:
    """Ctrl-C becomes `Interrupted` (one line, exit 130) rather than KeyboardInterrupt,
    which click turns into a blank line and "Aborted!". Only `report` does this: capture
    hands Ctrl-C to the user's script."""
    with contextlib.suppress(ValueError):  # not the main thread (an embedding caller)
        signal.signal(signal.SIGINT, _raise_interrupted)


def _parse_window(text: str) -> tuple[float, float]:
    try:
        lo_s, hi_s = text.split(":", 1)
        lo, hi = float(lo_s), float(hi_s)
    except ValueError as exc:
        raise typer.BadParameter("expected START:END in seconds, e.g. 10:15") from exc
    if lo < 0 or hi <= lo:
        raise typer.BadParameter("expected 0 <= START < END")
    return (lo, hi)


def _progress_raw(message: str) -> None:
    typer.echo(message, err=True)


def _say(message: str) -> None:
    """One line on stderr: trace text and paths quoted in it cannot drive the terminal."""
    from tracelens.render.format import plain

    typer.echo(f"tracelens: {plain(message, limit=MAX_ERROR_CHARS)}", err=True)


#: An error line quotes a path and perhaps a decoder message; beyond this it is noise.
MAX_ERROR_CHARS = 1000


#: What finished single-trace reports leave behind (the trace model, its context, the
#: report), kept alive to the end: freeing a large trace's columns and interned strings
#: takes ~0.1 s at exit on a 250 MB trace (measured on the 2-core machine), time the user
#: waits for nothing once every output is written.
_FINISHED: list[object] = []
#: Whether this process is the command's own (tracelens.cli.main called as the entry point).
OWN_PROCESS = False


#: Files of other profilers, which a user may hand tracelens first: what to do instead.
_OTHER_PROFILERS = (
    ((".nsys-rep", ".qdrep", ".sqlite"), "this is Nsight Systems"),
    ((".ncu-rep",), "this is Nsight Compute"),
)
_KINETO_HOW = (
    "export a Kineto trace with torch.profiler (prof.export_chrome_trace('trace.json.gz')), "
    "or run the script under `tracelens capture`"
)


def check_input(item: str) -> None:
    """The common slips, said before any work as one line (exit 2): another profiler's
    report given as a trace, and a `.json` named where only the `.json.gz` exists (or the
    other way round)."""
    from tracelens.errors import TraceInputError

    if "://" in item and not item.startswith("file://"):
        return
    p = Path(item.removeprefix("file://"))
    low = p.name.lower()
    for suffixes, what in _OTHER_PROFILERS:
        if low.endswith(suffixes):
            raise TraceInputError(f"{item}: {what}, not a torch.profiler trace; {_KINETO_HOW}")
    if p.exists() or any(ch in item for ch in "*?["):
        return
    for other in (p.with_name(p.name + ".gz"), p.with_name(p.name[:-3]) if low.endswith(".gz") else None):
        if other is not None and other.is_file():
            raise TraceInputError(f"{item}: no such file; did you mean {other}?")
