"""The `tracelens` command.

    tracelens report TRACE [--html PATH] [--markdown PATH] [--json PATH]
    tracelens report FOLDER|GLOB|FILES...|URL [--scheduler ADDRESS] [--per-rank]   (ranks of one job)
    tracelens capture [OPTIONS] SCRIPT [ARGS...]   (or -m MODULE [ARGS...])

Errors a user can cause print one line and exit non-zero (see tracelens.errors); the
input trace is only ever read, and an output path that is the input is refused.
"""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from tracelens import __version__, early
from tracelens.errors import Interrupted, TracelensError

#: What a command renders: a Report or a DiffReport.
_Result = TypeVar("_Result")

app = typer.Typer(
    name="tracelens",
    help=(
        "Explains why a PyTorch GPU program is slow, from a torch.profiler trace, in the order an "
        "expert would look: host waits on the device, tiny launches, memory traffic, shape "
        "dynamism, allocation, raw compute.\n\n"
        "Profile and explain a script:  tracelens capture train.py [args]\n\n"
        "Explain an existing trace:  tracelens report trace.json.gz"
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
    _say(message)


@app.command()
def report(
    traces: Annotated[
        list[str],
        typer.Argument(
            help="A torch.profiler (Kineto) Chrome trace: .json or .json.gz, any torch version, NVIDIA or AMD. "
            "Or the ranks of one job: a folder, a glob, several files, an fsspec URL prefix (s3://, gs://, hf://).",
            show_default=False,
        ),
    ],
    html: Annotated[
        Path | None,
        typer.Option(
            "--html", help="Write the self-contained HTML report here ('-': standard output).", show_default=False
        ),
    ] = None,
    markdown: Annotated[
        Path | None,
        typer.Option(
            "--markdown",
            "--md",
            help="Write the Markdown summary (for a GitHub issue) here ('-': standard output).",
            show_default=False,
        ),
    ] = None,
    json_out: Annotated[
        Path | None,
        typer.Option(
            "--json", help="Write the JSON report (for machines) here ('-': standard output).", show_default=False
        ),
    ] = None,
    out_dir: Annotated[
        Path,
        typer.Option("--out-dir", help="Where the reports go when no --html/--markdown/--json is given."),
    ] = Path("reports"),
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="Print nothing but errors: no summary, no progress.")
    ] = False,
    window: Annotated[
        str | None,
        typer.Option(
            "--window",
            help="Analyse START:END seconds from the trace's start instead of the steady state tracelens finds.",
            show_default=False,
        ),
    ] = None,
    steps: Annotated[
        str | None,
        typer.Option(
            "--steps",
            help="Analyse steps N-M (ProfilerStep numbers, or detected iteration indexes) instead.",
            show_default=False,
        ),
    ] = None,
    scheduler: Annotated[
        str | None,
        typer.Option(
            "--scheduler",
            help="Many ranks: send the per-rank work to this Dask distributed scheduler (tcp://HOST:8786) "
            "instead of local processes.",
            show_default=False,
        ),
    ] = None,
    workers: Annotated[
        int | None,
        typer.Option(
            "--workers", help="Many ranks: local worker processes (default: one per core).", show_default=False
        ),
    ] = None,
    per_rank: Annotated[
        bool, typer.Option("--per-rank", help="Many ranks: also write each rank's own report (under OUT-DIR).")
    ] = False,
    perfetto: Annotated[
        Path | None,
        typer.Option(
            "--perfetto",
            help="Also write the trace annotated with tracelens' tracks (the cause of each idle gap, findings, "
            "steps) for ui.perfetto.dev or chrome://tracing; .gz compresses it.",
            show_default=False,
        ),
    ] = None,
    redact: Annotated[
        bool,
        typer.Option(
            "--redact",
            help="Replace user paths (home, working directory, scripts) and host names in "
            "every output, for attaching to a public issue.",
        ),
    ] = False,
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
    if len(traces) == 1 and Path(traces[0]).is_file():
        built = _report_one(
            Path(traces[0]), html, markdown, json_out, out_dir, quiet, window, steps, perfetto=perfetto, redact=redact
        )
        _FINISHED.extend(built)
        return
    from tracelens.job.cli import report_many

    # Ranks of one job get one job report; unrelated traces one report each, as one does.
    windowed = window or steps
    single = report_many(
        traces, html, markdown, json_out, out_dir, quiet, scheduler, workers, per_rank, windowed, redact, perfetto
    )
    for path in single:
        _report_one(Path(path), html if len(single) == 1 else None, markdown if len(single) == 1 else None,
                    json_out if len(single) == 1 else None, out_dir, quiet, window, steps,
                    perfetto=perfetto if len(single) == 1 else None, redact=redact)  # fmt: skip


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
) -> tuple[object, ...]:
    """The report on one trace; returns what it built (the model, its context, the report)."""
    from tracelens.analyzers.context import AnalysisContext
    from tracelens.assemble import build_report
    from tracelens.model import load_trace
    from tracelens.output import default_stem
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
        if _OWN_PROCESS:
            # The model lives to the end of the process: the cyclic GC need not scan its
            # objects again in every full collection of the analysis (train50: 64 -> 18 ms
            # of collections in build_report). Only in the command's own process: a
            # library caller's objects are not ours to freeze. The GC was off since the
            # start (see main).
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
        renderers: dict[str, Callable[[Any], str | bytes]] = {
            "html": render_html,
            "md": render_markdown,
            "json": render_json,
            "perfetto": lambda r: _annotated_trace(trace, r, ctx, scrub, perfetto),
        }
        written = _write(wanted, renderers, rep, scrub)
    _summary(wanted, written, rep, None if quiet else render_terminal, scrub)
    return model, ctx, rep


@app.command()
def diff(
    before: Annotated[Path, typer.Argument(help="The trace before the change.", show_default=False)],
    after: Annotated[Path, typer.Argument(help="The trace after the change.", show_default=False)],
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
) -> None:
    """Did a change help, and why: the change in step time split by cause, and what
    changed underneath (kernels, ops, syncs, host work).

    Examples:

      tracelens diff before.pt.trace.json.gz after.pt.trace.json.gz

      tracelens diff before.json after.json --md pr-comment.md
    """
    from tracelens.diff import build_diff
    from tracelens.model import load_trace
    from tracelens.output import default_stem
    from tracelens.render.diff import render_diff_html, render_diff_json, render_diff_markdown, render_diff_terminal
    from tracelens.render.progress import progress

    _interrupt_as_error()
    stem = f"{default_stem(before)}-vs-{default_stem(after)}.diff"
    wanted = _targets(html, markdown, json_out, out_dir, stem, [before, after])
    with progress(quiet, _progress, files=2) as bar:
        first = load_trace(before, progress=bar.loader)
        bar.next_file()
        second = load_trace(after, progress=bar.loader)
        bar.analysing()
        d = build_diff(first, second)
        bar.writing()
        scrub = _redactor(redact, [before, after], [first.meta.metadata, second.meta.metadata], wanted)
        renderers: dict[str, Callable[[Any], str | bytes]] = {
            "html": render_diff_html,
            "md": render_diff_markdown,
            "json": render_diff_json,
        }
        written = _write(wanted, renderers, d, scrub)
    _summary(wanted, written, d, None if quiet else render_diff_terminal, scrub)


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
    from tracelens.output import check_outputs, check_writable

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
    from tracelens.redact import no_redaction

    data = splice(read_trace_bytes(trace), annotation_events(rep, gaps_of(dev.gaps if dev else None), shift))
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


def _parse_steps(text: str) -> tuple[int, int]:
    """ "5-9" -> record steps 5..9 (step 0 is the part before the first step mark)."""
    try:
        lo_s, hi_s = text.split("-", 1)
        lo, hi = int(lo_s), int(hi_s)
    except ValueError as exc:
        raise typer.BadParameter("expected N-M, e.g. 5-9") from exc
    if lo < 0 or hi < lo:
        raise typer.BadParameter("expected 0 <= N <= M")
    return (lo, hi)


def _parse_window(text: str) -> tuple[float, float]:
    try:
        lo_s, hi_s = text.split(":", 1)
        lo, hi = float(lo_s), float(hi_s)
    except ValueError as exc:
        raise typer.BadParameter("expected START:END in seconds, e.g. 10:15") from exc
    if lo < 0 or hi <= lo:
        raise typer.BadParameter("expected 0 <= START < END")
    return (lo, hi)


def _parse_schedule(text: str) -> tuple[int, int, int, int]:
    try:
        parts = [int(x) for x in text.split(",")]
    except ValueError as exc:
        raise typer.BadParameter("expected WAIT,WARMUP,ACTIVE[,REPEAT]") from exc
    if len(parts) not in (3, 4) or any(p < 0 for p in parts) or parts[2] < 1:
        raise typer.BadParameter("expected WAIT,WARMUP,ACTIVE[,REPEAT] with ACTIVE >= 1")
    if len(parts) == 4 and parts[3] != 1:
        # Each cycle would be exported on its own; one trace holds one cycle.
        raise typer.BadParameter("REPEAT must be 1: tracelens keeps one profiled cycle per trace")
    return (parts[0], parts[1], parts[2], parts[3] if len(parts) == 4 else 1)


# Everything after the script is the script's: no interspersed options.
@app.command(
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True, "allow_interspersed_args": False}
)
def capture(
    ctx: typer.Context,
    target: Annotated[
        str | None,
        typer.Argument(help="The script to run (its own arguments follow it).", show_default=False),
    ] = None,
    module: Annotated[
        str | None, typer.Option("-m", "--module", help="Run a module as `python -m MODULE` does.", show_default=False)
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out", "-o", help="Trace path (default reports/<script>-<time>.pt.trace.json.gz).", show_default=False
        ),
    ] = None,
    steps: Annotated[
        str | None,
        typer.Option(
            "--steps",
            help="Record steps N-M (default: 5-24 after a warm-up). Steps are tracelens.capture.step() calls, "
            "else optimizer.step() calls, else the ends of the outermost nn.Module calls; step 0 is the part "
            "before the first mark.",
            show_default=False,
        ),
    ] = None,
    schedule: Annotated[
        str | None,
        typer.Option(
            "--schedule",
            help="torch.profiler-style WAIT,WARMUP,ACTIVE[,1]: as --steps W+U-(W+U+A-1).",
            show_default=False,
        ),
    ] = None,
    window: Annotated[
        str | None,
        typer.Option("--window", help="Record from START to END seconds into the run (START:END).", show_default=False),
    ] = None,
    duration: Annotated[
        float | None,
        typer.Option(
            "--duration",
            help="Longest recording in seconds (default 10; none with --steps, --window).",
            show_default=False,
        ),
    ] = None,
    max_events: Annotated[
        int | None,
        typer.Option(
            "--max-events",
            help="Most timed events kept in the trace (default 1,000,000; the rest are cut).",
            show_default=False,
        ),
    ] = None,
    record_all: Annotated[
        bool, typer.Option("--all", help="Record the whole run, start-up included, with no limits.")
    ] = False,
    stack: Annotated[bool, typer.Option("--stack/--no-stack", help="Record Python stacks (with_stack).")] = True,
    shapes: Annotated[bool, typer.Option("--shapes/--no-shapes", help="Record input shapes (record_shapes).")] = True,
    memory: Annotated[bool, typer.Option("--memory", help="Record allocator events (profile_memory).")] = False,
    nvml: Annotated[bool, typer.Option("--nvml/--no-nvml", help="Sample clocks, power and throttle reasons.")] = True,
    nvml_interval_ms: Annotated[float, typer.Option("--nvml-interval-ms", help="NVML sampling period.")] = 10.0,
    report_after: Annotated[bool, typer.Option("--report/--no-report", help="Report on the trace afterwards.")] = True,
    verbose: Annotated[
        bool, typer.Option("--verbose", help="Show the profiler's own messages (else they go to a .capture.log).")
    ] = False,
    out_dir: Annotated[Path, typer.Option("--out-dir", help="Where traces and reports go by default.")] = Path(
        "reports"
    ),
    counters: Annotated[
        bool,
        typer.Option(
            "--counters",
            help="First run the script for a few steps with per-kernel hardware counters (FLOPs by precision, "
            "DRAM bytes, instructions; Nsight Compute's kernel replay, or torch's CUPTI range profiler), then the "
            "timing pass as usual; the counters go into the trace and the roofline uses them.",
        ),
    ] = False,
    counters_steps: Annotated[
        int, typer.Option("--counters-steps", help="Steps the counters pass measures (from the window's first).")
    ] = 1,
    counters_backend: Annotated[
        str, typer.Option("--counters-backend", help="auto (ncu if on PATH, else kineto), ncu or kineto.")
    ] = "auto",
) -> None:
    """Run a Python script under torch.profiler (CPU + GPU, shapes, stacks) with an NVML
    clock/power sampler beside it, write one trace, then report on it.

    By default a warm-up is skipped (5 steps, or 5 s when the script marks no steps) and a
    bounded steady state is recorded (20 steps, at most 10 s and 1,000,000 events); the
    limits are printed. Put tracelens options before the script; everything after the
    script goes to it. The script's exit code passes through; the trace is written even
    if it fails, you press Ctrl-C or it gets SIGTERM.

    Examples:

      tracelens capture train.py --epochs 1

      tracelens capture --steps 10-14 train.py

      tracelens capture --all -m mypkg.infer --batch 8
    """
    from tracelens.capture.runner import CaptureOptions
    from tracelens.capture.runner import capture as run_capture
    from tracelens.capture.window import MAX_EVENTS, Limits, Mode

    if target is None and module is None:
        raise typer.BadParameter("give a script, or -m MODULE")
    if out is not None and os.environ.get("RANK") and os.environ.get("WORLD_SIZE"):
        raise typer.BadParameter("under torchrun each rank writes OUT-DIR/<script>-ranks/rank<R>.pt.trace.json.gz: "
                                 "give --out-dir, not --out")  # fmt: skip
    if sum(x is not None for x in (steps, schedule, window)) + record_all > 1:
        raise typer.BadParameter("--steps, --schedule, --window and --all are alternatives")
    if duration is not None and duration <= 0:
        raise typer.BadParameter("--duration must be > 0")
    if max_events is not None and max_events < 1:
        raise typer.BadParameter("--max-events must be >= 1")
    if counters_steps < 1:
        raise typer.BadParameter("--counters-steps must be >= 1")
    if counters_backend not in ("auto", "ncu", "kineto"):
        raise typer.BadParameter("--counters-backend is auto, ncu or kineto")
    limits = Limits()
    if steps or schedule:
        if steps:
            lo, hi = _parse_steps(steps)
        else:
            assert schedule is not None
            wait, warm, active, _repeat = _parse_schedule(schedule)
            lo, hi = wait + warm, wait + warm + active - 1
        limits = Limits(mode=Mode.STEPS, warmup_steps=lo, steps=hi - lo + 1, duration_s=None)
    elif window:
        limits = Limits(mode=Mode.TIME, window_s=_parse_window(window), duration_s=None, steps=None)
    elif record_all:
        limits = Limits(mode=Mode.ALL, steps=None, duration_s=None, max_events=None)
    if duration is not None:
        limits.duration_s = duration
    if max_events is not None:
        limits.max_events = max_events
    elif record_all:
        limits.max_events = None
    else:
        limits.max_events = MAX_EVENTS
    name = module or target
    assert name is not None
    opts = CaptureOptions(
        target=name,
        args=list(ctx.args) if module is None else ([target, *ctx.args] if target else list(ctx.args)),
        module=module is not None,
        out=out or _rank_or_default_path(name, out_dir),
        record_shapes=shapes,
        with_stack=stack,
        profile_memory=memory,
        limits=limits,
        nvml=nvml,
        nvml_interval_s=nvml_interval_ms / 1000.0,
        verbose=verbose,
    )
    if counters and os.environ.get("RANK") and os.environ.get("WORLD_SIZE"):
        # Kernel replay re-runs each collective on one rank while the others wait for it.
        _progress("--counters: not under torchrun (replaying collective kernels would hang the ranks); "
                  "capture one process with --counters instead")  # fmt: skip
    elif counters:
        from tracelens.capture.counters import counters_log_path, run_counters_pass

        assert opts.out is not None
        measured = run_counters_pass(
            opts.target,
            opts.args,
            opts.module,
            limits,
            steps=counters_steps,
            backend=counters_backend,
            log=counters_log_path(opts.out),
            echo=_progress_raw,
        )
        for note in measured.notes:
            _progress(note)
        opts.counters = measured.data
    result = run_capture(opts, echo=_progress_raw)
    for note in result.notes:
        _progress(note)
    if result.trace is None:
        from tracelens.capture.runner import exit_process

        exit_process(result.exit_code)
    st = result.stats
    rec = result.recorded
    if rec is not None and rec.t_end is not None:
        whole = rec.last_step is not None and rec.last_step > rec.first_step
        steps_txt = f"steps {rec.first_step}-{(rec.last_step or 1) - 1}, " if whole else ""
        _progress(
            f"recorded {steps_txt}{rec.t_start:.1f}-{rec.t_end:.1f} s of {result.wall_s:.1f} s "
            f"({rec.kind} recording; end: {rec.reason})"
        )
    if st is not None:
        _progress(
            f"trace written: {result.trace} ({st.bytes / 1e6:.1f} MB, {st.events:,} events; "
            f"export {result.export_s:.1f} s, write {st.seconds:.1f} s)"
        )
    if result.log is not None:
        _progress(f"the profiler's messages: {result.log}")
    if st is not None and st.ops == 0 and st.kernels == 0:
        _progress("the trace holds no torch ops, so there is nothing to report")
    elif report_after:
        try:
            from tracelens.capture.ranks import ranks_folder, torchrun_env, wait_for_ranks

            env = torchrun_env()
            if env is None:
                from tracelens.output import default_stem

                perfetto = out_dir / f"{default_stem(result.trace)}.perfetto.json.gz"
                _report_one(result.trace, None, None, None, out_dir, False, None, None, perfetto=perfetto)
            elif env.rank == 0:  # under torchrun: rank 0 reports once on every rank's trace
                folder = ranks_folder(name, out_dir)
                ready = wait_for_ranks(folder, env.world_size, _progress)
                report([str(p) for p in ready] or [str(folder)], None, None, None, out_dir, False)
        except Exception as exc:  # the trace is the product; a failed report must not hide it
            msg = str(exc) if isinstance(exc, TracelensError) else f"{type(exc).__name__}: {exc}"
            _progress(f"the report failed ({msg}); the trace is kept at {result.trace}")
    from tracelens.capture.runner import exit_process

    exit_process(result.exit_code)


def _rank_or_default_path(name: str, out_dir: Path) -> Path:
    """Under torchrun each worker writes <script>-ranks/rank<R>.pt.trace.json.gz."""
    from tracelens.capture.ranks import rank_trace_path, torchrun_env
    from tracelens.capture.runner import default_trace_path

    env = torchrun_env()
    return rank_trace_path(name, out_dir, env) if env is not None else default_trace_path(name, out_dir)


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


#: Whether this process is the command's own (main() called as the entry point).
_OWN_PROCESS = False


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the app, mapping user errors to one line and an exit code."""
    global _OWN_PROCESS
    if argv is None:  # the console script or `python -m tracelens`: a process of its own
        _OWN_PROCESS = True
        # Imports make no garbage cycles worth collecting, but ~180 collections (~40 ms
        # of the report's start-up on the development machine): the GC stays off until
        # the report's model is loaded (or typer takes any other command).
        gc.disable()
        early.start(sys.argv[1:])
    try:
        fast = _fast_report(sys.argv[1:] if argv is None else argv)
        if fast is not None:
            report(**fast)
            got: object = 0
        else:
            if _OWN_PROCESS:
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
