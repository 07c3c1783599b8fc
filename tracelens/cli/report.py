"""`tracelens report TRACE`: one trace's reports (a folder or several traces of one job go
to tracelens.cli.job).
"""

from __future__ import annotations

import gc
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from tracelens.cli import common
from tracelens.cli.common import (
    _FINISHED,
    _annotated_trace,
    _interrupt_as_error,
    _parse_step_range,
    _parse_window,
    _progress,
    _redactor,
    _summary,
    _targets,
    _write,
)

# The options of `tracelens report` that take more than a line to declare.
_Traces = Annotated[
    list[str],
    typer.Argument(
        help="A torch.profiler (Kineto) Chrome trace: .json or .json.gz, any torch version, NVIDIA or AMD. "
        "Or the ranks of one job: a folder, a glob, several files, an fsspec URL prefix (s3://, gs://, hf://).",
        show_default=False,
        metavar="TRACE",
    ),
]
_Html = Annotated[
    Path | None,
    typer.Option(
        "--html", help="Write the self-contained HTML report here ('-': standard output).", show_default=False
    ),
]
_Markdown = Annotated[
    Path | None,
    typer.Option(
        "--markdown",
        "--md",
        help="Write the Markdown summary (for a GitHub issue) here ('-': standard output).",
        show_default=False,
    ),
]
_JsonOut = Annotated[
    Path | None,
    typer.Option(
        "--json", help="Write the JSON report (for machines) here ('-': standard output).", show_default=False
    ),
]
_OutDir = Annotated[
    Path,
    typer.Option("--out-dir", help="Where the reports go when no --html/--markdown/--json is given."),
]
_Quiet = Annotated[bool, typer.Option("--quiet", "-q", help="Print nothing but errors: no summary, no progress.")]
_Window = Annotated[
    str | None,
    typer.Option(
        "--window",
        help="Analyse START:END seconds from the trace's start instead of the steady state tracelens finds.",
        show_default=False,
    ),
]
_Steps = Annotated[
    str | None,
    typer.Option(
        "--steps",
        help="Analyse steps N-M (ProfilerStep numbers, or detected iteration indexes) instead.",
        show_default=False,
    ),
]
_Scheduler = Annotated[
    str | None,
    typer.Option(
        "--scheduler",
        help="Many ranks: send the per-rank work to this Dask distributed scheduler (tcp://HOST:8786) "
        "instead of local processes.",
        show_default=False,
    ),
]
_Workers = Annotated[
    int | None,
    typer.Option("--workers", help="Many ranks: local worker processes (default: one per core).", show_default=False),
]
_PerRank = Annotated[
    bool, typer.Option("--per-rank", help="Many ranks: also write each rank's own report (under OUT-DIR).")
]
_Perfetto = Annotated[
    Path | None,
    typer.Option(
        "--perfetto",
        help="Also write the trace annotated with tracelens' tracks (the cause of each idle gap, findings, "
        "steps) for ui.perfetto.dev or chrome://tracing; .gz compresses it.",
        show_default=False,
    ),
]
_Redact = Annotated[
    bool,
    typer.Option(
        "--redact",
        help="Replace user paths (home, working directory, scripts) and host names in "
        "every output, for attaching to a public issue.",
    ),
]


def report(
    traces: _Traces,
    html: _Html = None,
    markdown: _Markdown = None,
    json_out: _JsonOut = None,
    out_dir: _OutDir = Path("reports"),
    quiet: _Quiet = False,
    window: _Window = None,
    steps: _Steps = None,
    scheduler: _Scheduler = None,
    workers: _Workers = None,
    per_rank: _PerRank = False,
    perfetto: _Perfetto = None,
    redact: _Redact = False,
) -> None:
    """Explain a trace: ranked findings with their cost, source and fix.

    With no output option, writes REPORTS/<trace>.html, .md and .json (REPORTS is
    --out-dir, default ./reports) and prints a short summary.

    Examples:

      tracelens report run.pt.trace.json.gz

      tracelens report run.json --md issue.md --json run.report.json

      tracelens report traces/ --per-rank        (one job report on the ranks in traces/)
    """
    _interrupt_as_error()
    from tracelens.model.snapshot import looks_like_snapshot

    for item in traces:
        common.check_input(item)

    if len(traces) == 1 and looks_like_snapshot(traces[0]):
        if window or steps or perfetto:
            raise typer.BadParameter("--window, --steps and --perfetto are for traces, not memory snapshots")
        _report_snapshot(Path(traces[0]), html, markdown, json_out, out_dir, quiet, redact)
        return
    if len(traces) == 1 and Path(traces[0]).is_file():
        built = _report_one(
            Path(traces[0]), html, markdown, json_out, out_dir, quiet, window, steps, perfetto=perfetto, redact=redact
        )
        _FINISHED.extend(built)
        return
    from tracelens.cli.job import report_many

    # Ranks of one job get one job report; unrelated traces one report each, as one does.
    windowed = window or steps
    single = report_many(
        traces, html, markdown, json_out, out_dir, quiet, scheduler, workers, per_rank, windowed, redact, perfetto
    )
    if len(single) == 1:
        _report_one(Path(single[0]), html, markdown, json_out, out_dir, quiet, window, steps, perfetto=perfetto,
                    redact=redact)  # fmt: skip
    elif single:
        _report_each(single, out_dir, quiet, window, steps, redact, _trace_folders_in(traces))


def _trace_folders_in(items: list[str]) -> list[str]:
    """The folders inside the given folders that hold traces themselves (a job's ranks
    beside independent samples): not read, but said, so none seems forgotten."""
    out = []
    for item in items:
        p = Path(item)
        if "://" in item or not p.is_dir():
            continue
        for sub in sorted(c for c in p.iterdir() if c.is_dir() and not c.name.startswith(".")):
            if any(f.name.endswith((".json", ".json.gz")) for f in sub.iterdir() if f.is_file()):
                out.append(sub.name)
    return out


def _report_each(
    paths: list[str],
    out_dir: Path,
    quiet: bool,
    window: str | None,
    steps: str | None,
    redact: bool,
    folders: list[str] | None = None,
) -> None:
    """Independent traces (a folder of samples, not ranks of one job): every readable one
    reported under out_dir, one line each (its headline) as it is done, then the ones
    skipped and why. Exit 0 when at least one was reported, 2 when none could be (a bug on
    one trace is said and the rest still reported: exit 1)."""
    from tracelens.errors import Interrupted, TraceInputError, TracelensError
    from tracelens.output import default_stem
    from tracelens.render.format import plain, prose
    from tracelens.render.terminal import terminal_width

    width = terminal_width(sys.stdout)
    names = [default_stem(p).removesuffix(".pt.trace") for p in paths]
    pad = min(max(len(n) for n in names), width // 3)

    def say(line: str) -> None:
        if not quiet:
            typer.echo(line)

    say(f"tracelens: {len(paths)} traces, not ranks of one job: a report of each")
    done = 0
    skipped: list[tuple[str, str]] = []
    bug = False
    for path, name in zip(paths, names, strict=True):
        try:
            built = _report_one(Path(path), None, None, None, out_dir, True, window, steps, redact=redact, freeze=False)
        except Interrupted:
            raise
        except TracelensError as exc:
            skipped.append((path, str(exc)))
            continue
        except Exception as exc:  # a bug on one trace: said, and the others still reported
            bug = True
            skipped.append((path, f"internal error: {type(exc).__name__}: {exc} (please report it)"))
            continue
        done += 1
        rep: Any = built[2]
        head = plain(name, limit=pad).ljust(pad)
        say(f"  {head}  " + prose(_one_line(rep), max(width - pad - 4, 20)))
        del built, rep
        gc.collect()
    for path, why in skipped:
        # The loader's messages begin with the path; say it once.
        why = why.removeprefix(f"{path}: ")
        line = f"skipped {plain(Path(path).name, limit=120)}: {plain(why, limit=300)}"
        if quiet:
            typer.echo("tracelens: " + line, err=True)
        else:  # wrapped at the terminal's width, under its own start
            say(textwrap.fill(line, width, initial_indent="  ", subsequent_indent="    ", break_on_hyphens=False))
    if folders:
        shown = ", ".join(plain(f, limit=60) + "/" for f in folders[:5]) + (", ..." if len(folders) > 5 else "")
        line = f"not read: {shown} (folders of traces: tracelens report FOLDER reports one)"
        say(textwrap.fill(line, width, initial_indent="  ", subsequent_indent="    ", break_on_hyphens=False))
    say(f"{done} of {len(paths)} reported" + (f", {len(skipped)} skipped" if skipped else "")
        + f": {plain(out_dir)}/<trace>.html, .md, .json")  # fmt: skip
    if bug:
        raise typer.Exit(1)
    if not done:
        raise TraceInputError(f"none of the {len(paths)} traces could be read")


def _one_line(rep: Any) -> str:
    """A trace's report in a line: its primary finding's title and what that costs per
    step, else the headline."""
    from tracelens.render.format import us
    from tracelens.render.html import primary_index

    i = primary_index(rep)
    if rep.summary.primary and i is not None and 0 <= i < len(rep.findings):
        f = rep.findings[i]
        return f"{f.title} ({us(f.time_us)}, {f.share:.0%})"
    return str(rep.summary.headline or "no finding")


def _report_snapshot(
    path: Path,
    html: Path | None,
    markdown: Path | None,
    json_out: Path | None,
    out_dir: Path,
    quiet: bool,
    redact: bool,
) -> None:
    """The report on a CUDA memory snapshot (torch.cuda.memory._dump_snapshot's pickle)."""
    import datetime as _dt

    from tracelens import __version__
    from tracelens.assemble_snapshot import summarize_snapshot
    from tracelens.model.snapshot import load_snapshot
    from tracelens.render.snapshot import render_snapshot_html, render_snapshot_json, render_snapshot_markdown
    from tracelens.render.terminal import render_snapshot_terminal
    from tracelens.report import SCHEMA_VERSION, SnapshotReport

    name = path.name[:-3] if path.name.lower().endswith(".gz") else path.name
    stem = name.rsplit(".", 1)[0] or "snapshot"  # mem.snapshot.pickle(.gz) -> mem.snapshot
    wanted = _targets(html, markdown, json_out, out_dir, stem, [path])
    rep = SnapshotReport(
        schema_version=SCHEMA_VERSION,
        tool="tracelens",
        tool_version=__version__,
        generated_at=_dt.datetime.now(_dt.UTC).replace(microsecond=0).isoformat(),
        snapshot=summarize_snapshot(load_snapshot(path)),
    )
    scrub = _redactor(redact, [path], [], wanted)
    renderers: dict[str, Callable[[Any], str | bytes]] = {
        "html": render_snapshot_html,
        "md": render_snapshot_markdown,
        "json": render_snapshot_json,
    }
    written = _write(wanted, renderers, rep, scrub)
    _summary(wanted, written, rep, None if quiet else render_snapshot_terminal, scrub)


def _pictures(wanted: list[tuple[Path, str]], rep: Any, trace: Path) -> list[tuple[Path, str]]:
    """The SVG pictures (ledger bar, headline chart) beside a Markdown written to a file
    (issue 27), checked as the other outputs are; none beside Markdown on standard output."""
    from tracelens.output import check_outputs, check_writable, is_stdout
    from tracelens.render.charts import chart_files, render_charts

    md_paths = [p for p, kind in wanted if kind == "md" and not is_stdout(p)]
    if not md_paths:
        return []
    files = chart_files(md_paths[0])
    out = [(files[kind], svg) for kind, svg in render_charts(rep).items()]
    check_outputs(trace, [p for p, _ in wanted if not is_stdout(p)] + [p for p, _ in out])
    check_writable([p for p, _ in out])
    return out


def _report_one(
    trace: Path,
    html: Path | None,
    markdown: Path | None,
    json_out: Path | None,
    out_dir: Path,
    quiet: bool,
    window: str | None,
    steps: str | None,
    perfetto: Path | None = None,
    redact: bool = False,
    freeze: bool = True,
) -> tuple[object, ...]:
    """The report on one trace; returns what it built (the model, its context, the report)."""
    from tracelens.assemble import build_report
    from tracelens.derive.context import AnalysisContext
    from tracelens.model import load_trace
    from tracelens.output import default_stem, write_report
    from tracelens.render import render_html, render_json, render_markdown, render_terminal
    from tracelens.render.progress import progress

    if window and steps:
        raise typer.BadParameter("--window and --steps are alternatives")
    if window:
        _parse_window(window)  # a bad range fails before any work
    if steps:
        _parse_step_range(steps)
    # Before any work: a report must never overwrite the trace it is made from.
    wanted = _targets(html, markdown, json_out, out_dir, default_stem(trace), [trace], perfetto)
    with progress(quiet, _progress) as bar:
        t0 = time.perf_counter()
        model = load_trace(trace, progress=bar.loader)
        load_s = time.perf_counter() - t0
        if common.OWN_PROCESS:
            # The model lives to the end of the process: the cyclic GC need not scan its
            # objects again in every full collection of the analysis (train50: 64 -> 18 ms
            # of collections in build_report). Only in the command's own process: a
            # library caller's objects are not ours to freeze. The GC was off since the
            # start (see main).
            # Not when it reports many traces, one after another: each model is let go.
            if freeze:
                gc.freeze()
            gc.enable()
        bar.analysing()
        ctx = AnalysisContext(
            model,
            user_window=_parse_window(window) if window else None,
            user_steps=_parse_step_range(steps) if steps else None,
        )
        rep = build_report(model, load_seconds=load_s, ctx=ctx)
        bar.writing()
        scrub = _redactor(redact, [trace], [model.meta.metadata], wanted)
        pictures = _pictures(wanted, rep, trace)
        names = [p.name for p, _ in pictures]  # "written beside this file": no directory to leak
        renderers: dict[str, Callable[[Any], str | bytes]] = {
            "html": render_html,
            "md": lambda r: render_markdown(r, names),
            "json": render_json,
            "perfetto": lambda r: _annotated_trace(trace, r, ctx, scrub, perfetto),
        }
        written = _write(wanted, renderers, rep, scrub)
        for path, svg in pictures:
            write_report(path, scrub(svg))
    _summary(wanted, written, rep, None if quiet else render_terminal, scrub)
    return model, ctx, rep
