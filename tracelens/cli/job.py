"""`tracelens report` on several traces: one job report when they are ranks of one job,
else the list of traces for one report each (the CLI's single-trace path)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import typer

from tracelens.errors import UsageError
from tracelens.job.discover import expand, is_url, looks_like_ranks, rank_inputs
from tracelens.job.model import RankFailure, RankInput, RankSummary
from tracelens.report.job_report import JobReport


def job_stem(inputs: list[str], files: list[str]) -> str:
    """Report name: the folder's name for a folder, else the files' common folder's."""
    if len(inputs) == 1 and not is_url(inputs[0]) and Path(inputs[0]).is_dir():
        name = Path(inputs[0]).resolve().name
    else:
        common = os.path.commonpath([f.split("://", 1)[-1] for f in files]) if files else ""
        name = Path(common).name if common and not common.endswith((".json", ".gz")) else ""
        name = name or Path(files[0]).name.split(".")[0] if files else "job"
    return f"{name or 'job'}.job"


def failure_line(result: RankFailure) -> str:
    """One line for a rank that could not be read, naming its path once (the loader's
    messages begin with the path already)."""
    from tracelens.render.format import plain

    error = result.error
    for prefix in (result.file, Path(result.file).name, result.file.split("://", 1)[-1]):
        if prefix and error.startswith(prefix + ": "):
            error = error[len(prefix) + 2 :]
            break
    return f"tracelens: {plain(result.file)}: {plain(error, limit=300)}"


class _Progress:
    """The ranks' progress: a bar on a terminal only (a CI log gets no progress lines,
    so an error is the only line there); an unreadable rank is said either way."""

    def __init__(self, quiet: bool = False) -> None:
        self.tty = sys.stderr.isatty() and not quiet

    def __call__(self, done: int, total: int, result: RankSummary | RankFailure) -> None:
        if isinstance(result, RankFailure):
            typer.echo(("\r" if self.tty else "") + failure_line(result), err=True)
        if self.tty:
            bar = "#" * (30 * done // total)
            typer.echo(f"\rtracelens: ranks [{bar:<30}] {done}/{total}", err=True, nl=done == total)


def report_many(
    traces: list[str],
    html: Path | None,
    markdown: Path | None,
    json_out: Path | None,
    out_dir: Path,
    quiet: bool,
    scheduler: str | None,
    workers: int | None,
    per_rank: bool,
    windowed: str | None = None,
    redact: bool = False,
    perfetto: Path | None = None,
    *,
    run_problems: list[str] | None = None,
    stem: str | None = None,
) -> list[str]:
    """Write the job report and return [], or return the traces to report one by one.

    `run_problems` (from a torchrun capture: ranks that did not arrive, files of another
    run) make it a job report whatever the number of traces, named `stem`."""
    from tracelens.cli.common import _emit, _targets
    from tracelens.job.analyze import analyze
    from tracelens.job.run import map_ranks
    from tracelens.render.job import render_job_html, render_job_json, render_job_markdown, render_job_terminal

    files = expand(traces)
    inputs = rank_inputs(files)
    if run_problems is None and not looks_like_ranks(inputs):
        if len(files) > 1 and (html or markdown or json_out):
            raise UsageError(
                "these traces are not ranks of one job (no distributedInfo, no rank in their names): --html, "
                "--markdown and --json name one report; use --out-dir for one report per trace"
            )
        if any(is_url(f) for f in files):
            raise UsageError("a URL is read as the ranks of one job; these traces are not")
        return files
    if perfetto is not None:
        raise UsageError("--perfetto annotates one trace; give it one rank's trace (or use --per-rank)")
    if windowed:
        raise UsageError("--window and --steps apply to one trace; a job report analyses each rank's own window")
    if workers is not None and workers < 1:
        raise typer.BadParameter("--workers must be >= 1")
    stem = stem or job_stem(traces, files)
    local = [Path(i.path) for i in inputs if not is_url(i.path)]
    wanted = _targets(html, markdown, json_out, out_dir, stem, local)
    per_rank_dir = str(out_dir / stem.removesuffix(".job")) + "-ranks" if per_rank else None
    if per_rank_dir is not None:
        Path(per_rank_dir).mkdir(parents=True, exist_ok=True)
    results, seconds, how = map_ranks(
        _sorted(inputs),
        scheduler=scheduler,
        workers=workers,
        per_rank_dir=per_rank_dir,
        progress=_Progress(quiet),
        redact=redact,
    )
    rep = analyze(results, map_seconds=seconds, scheduler=how, problems=run_problems or [])
    renderers = {"html": render_job_html, "md": render_job_markdown, "json": render_job_json}
    # Paths, homes and this machine's host name; the ranks' own metadata stays in the
    # workers (each rank's report is redacted there with its trace's host names).
    # (Not the cli's _redactor: it reads every trace again for its top-level host fields.)
    from tracelens.output import is_stdout
    from tracelens.redact import Redactor

    dirs = [p.parent for p, _ in wanted if not is_stdout(p)]
    scrub = Redactor.for_trace(local, (), (), dirs).text if redact else None
    from tracelens.render.terminal import terminal_width, use_colour

    stream = sys.stderr if any(is_stdout(p) for p, _ in wanted) else sys.stdout
    width, colour = terminal_width(stream), use_colour(stream)

    def summary(report: JobReport, written: list[str]) -> str:
        # The scheduler line only when one was asked for (--scheduler): then it confirms the cluster.
        return render_job_terminal(report, written, width=width, colour=colour, verbose=scheduler is not None)

    _emit(wanted, renderers, rep, None if quiet else summary, scrub)
    return []


def _sorted(inputs: list[RankInput]) -> list[RankInput]:
    return sorted(inputs, key=lambda i: (i.name_rank is None, i.name_rank or 0))
