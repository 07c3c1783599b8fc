"""`tracelens capture`: run a script under torch.profiler with the NVML sampler beside it,
then report on its trace (tracelens.capture does the work; this is its command line).
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from tracelens.cli.common import _parse_window, _progress, _progress_raw
from tracelens.cli.report import _report_one
from tracelens.errors import TracelensError

if TYPE_CHECKING:
    from tracelens.capture.options import CaptureResult
    from tracelens.capture.ranks import RunTag
    from tracelens.capture.runner import CaptureOptions
    from tracelens.capture.window import Limits


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


def _counters_pass(opts: CaptureOptions, limits: Limits, steps: int, backend: str) -> None:
    """`--counters`: the hardware counters pass before the timing pass, its counters into
    `opts` (and so into the trace)."""
    if os.environ.get("RANK") and os.environ.get("WORLD_SIZE"):
        # Kernel replay re-runs each collective on one rank while the others wait for it.
        _progress("--counters: not under torchrun (replaying collective kernels would hang the ranks); "
                  "capture one process with --counters instead")  # fmt: skip
        return
    from tracelens.capture.counters import counters_log_path, run_counters_pass

    assert opts.out is not None
    measured = run_counters_pass(
        opts.target,
        opts.args,
        opts.module,
        limits,
        steps=steps,
        backend=backend,
        log=counters_log_path(opts.out),
        echo=_progress_raw,
    )
    for note in measured.notes:
        _progress(note)
    opts.counters = measured.data


# The options of `tracelens capture` that take more than a line to declare.
_Target = Annotated[
    str | None,
    typer.Argument(help="The script to run (its own arguments follow it).", show_default=False, metavar="SCRIPT"),
]
_Module = Annotated[
    str | None, typer.Option("-m", "--module", help="Run a module as `python -m MODULE` does.", show_default=False)
]
_Out = Annotated[
    Path | None,
    typer.Option(
        "--out", "-o", help="Trace path (default reports/<script>-<time>.pt.trace.json.gz).", show_default=False
    ),
]
_Steps = Annotated[
    str | None,
    typer.Option(
        "--steps",
        help="Record steps N-M (default: 5-24 after a warm-up). Steps are tracelens.capture.step() calls, "
        "else optimizer.step() calls, else the ends of the outermost nn.Module calls; step 0 is the part "
        "before the first mark.",
        show_default=False,
    ),
]
_Schedule = Annotated[
    str | None,
    typer.Option(
        "--schedule",
        help="torch.profiler-style WAIT,WARMUP,ACTIVE[,1]: as --steps W+U-(W+U+A-1).",
        show_default=False,
    ),
]
_Window = Annotated[
    str | None,
    typer.Option("--window", help="Record from START to END seconds into the run (START:END).", show_default=False),
]
_Duration = Annotated[
    float | None,
    typer.Option(
        "--duration",
        help="Longest recording in seconds (default 10; none with --steps, --window).",
        show_default=False,
    ),
]
_MaxEvents = Annotated[
    int | None,
    typer.Option(
        "--max-events",
        help="Most timed events kept in the trace (default 1,000,000; the rest are cut).",
        show_default=False,
    ),
]
_All = Annotated[bool, typer.Option("--all", help="Record the whole run, start-up included, with no limits.")]
_Verbose = Annotated[
    bool, typer.Option("--verbose", help="Show the profiler's own messages (else they go to a .capture.log).")
]
_StopAfterRecording = Annotated[
    bool,
    typer.Option(
        "--stop-after-recording",
        help="End the script once its recording is written (for a loop that never ends by itself).",
    ),
]
_Counters = Annotated[
    bool,
    typer.Option(
        "--counters",
        help="First run the script for a few steps with per-kernel hardware counters (FLOPs by precision, "
        "DRAM bytes, instructions; Nsight Compute's kernel replay, or torch's CUPTI range profiler), then the "
        "timing pass as usual; the counters go into the trace and the roofline uses them.",
    ),
]
_CountersSteps = Annotated[
    int, typer.Option("--counters-steps", help="Steps the counters pass measures (from the window's first).")
]
_CountersBackend = Annotated[
    str, typer.Option("--counters-backend", help="auto (ncu if on PATH, else kineto), ncu or kineto.")
]


def capture(
    ctx: typer.Context,
    target: _Target = None,
    module: _Module = None,
    out: _Out = None,
    steps: _Steps = None,
    schedule: _Schedule = None,
    window: _Window = None,
    duration: _Duration = None,
    max_events: _MaxEvents = None,
    record_all: _All = False,
    stack: Annotated[bool, typer.Option("--stack/--no-stack", help="Record Python stacks (with_stack).")] = True,
    shapes: Annotated[bool, typer.Option("--shapes/--no-shapes", help="Record input shapes (record_shapes).")] = True,
    memory: Annotated[bool, typer.Option("--memory", help="Record allocator events (profile_memory).")] = False,
    nvml: Annotated[bool, typer.Option("--nvml/--no-nvml", help="Sample clocks, power and throttle reasons.")] = True,
    nvml_interval_ms: Annotated[float, typer.Option("--nvml-interval-ms", help="NVML sampling period.")] = 10.0,
    report_after: Annotated[bool, typer.Option("--report/--no-report", help="Report on the trace afterwards.")] = True,
    verbose: _Verbose = False,
    stop_after_recording: _StopAfterRecording = False,
    out_dir: Annotated[Path, typer.Option("--out-dir", help="Where traces and reports go by default.")] = Path(
        "reports"
    ),
    counters: _Counters = False,
    counters_steps: _CountersSteps = 1,
    counters_backend: _CountersBackend = "auto",
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

    if target is None and module is None:
        raise typer.BadParameter("give a script, or -m MODULE")
    _check_options(out, steps, schedule, window, record_all, duration, max_events, counters_steps, counters_backend)
    limits = _limits(steps, schedule, window, record_all, duration, max_events)
    name = module or target
    assert name is not None
    from tracelens.capture.ranks import Heartbeat, ranks_folder, run_tag, torchrun_env

    # Under torchrun: this run's token (the same on every worker), written into the trace,
    # and a heartbeat beside the traces while this worker lives (capture/ranks.py).
    rank_env = torchrun_env()
    tag = run_tag(rank_env) if rank_env is not None else None
    rank_folder = ranks_folder(name, out_dir) if rank_env is not None else None
    beat = Heartbeat(rank_folder, tag).start() if tag is not None and rank_folder is not None else None
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
        run=tag.as_meta() if tag is not None else None,
        stop_after_recording=stop_after_recording,
    )
    if counters:
        _counters_pass(opts, limits, counters_steps, counters_backend)
    try:
        result = _run(opts)
    except BaseException:
        if beat is not None:
            beat.finish("failed")
        raise
    if beat is not None:
        beat.finish("written" if result.trace is not None else "failed")
    trace = _tell_result(result)
    if result.stats is not None and result.stats.ops == 0 and result.stats.kernels == 0:
        _progress("the trace holds no torch ops, so there is nothing to report")
    elif report_after:
        try:
            if rank_env is None or tag is None or rank_folder is None:
                from tracelens.output import default_stem

                perfetto = out_dir / f"{default_stem(trace)}.perfetto.json.gz"
                _report_one(trace, None, None, None, out_dir, False, None, None, perfetto=perfetto)
            elif rank_env.rank == 0:  # under torchrun: rank 0 reports once on this run's traces
                _report_job(trace, result.exit_code, rank_folder, tag, out_dir)
        except Exception as exc:  # the trace is the product; a failed report must not hide it
            msg = str(exc) if isinstance(exc, TracelensError) else f"{type(exc).__name__}: {exc}"
            _progress(f"the report failed ({msg}); the trace is kept at {trace}")
    from tracelens.capture.runner import exit_process

    exit_process(result.exit_code)


def _check_options(
    out: Path | None,
    steps: str | None,
    schedule: str | None,
    window: str | None,
    record_all: bool,
    duration: float | None,
    max_events: int | None,
    counters_steps: int,
    counters_backend: str,
) -> None:
    """Options that do not go together, or values out of range: a usage error each."""
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


def _limits(
    steps: str | None,
    schedule: str | None,
    window: str | None,
    record_all: bool,
    duration: float | None,
    max_events: int | None,
) -> Limits:
    """What the recording keeps: the steps, the time window or the whole run, and its bounds."""
    from tracelens.capture.window import MAX_EVENTS, Limits, Mode

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
    return limits


def _run(opts: CaptureOptions) -> CaptureResult:
    """The capture, under a supervising parent (or in this process, to debug tracelens)."""
    from tracelens.capture.runner import capture as run_capture

    if os.environ.get("TRACELENS_CAPTURE_IN_PROCESS") == "1":
        # For debugging tracelens itself: no supervising parent (a crash of the script
        # then loses what was not yet written).
        return run_capture(opts, echo=_progress_raw)
    from tracelens.capture.supervise import supervise

    return supervise(opts, echo=_progress_raw)


def _tell_result(result: CaptureResult) -> Path:
    """The capture's notes, what was recorded and where the trace is; the trace's path (a
    capture that wrote none ends the process with the script's exit code)."""
    for note in result.notes:
        _progress(note)
    if result.trace is None:
        from tracelens.capture.runner import exit_process

        _progress("no trace written, so there is nothing to report")
        exit_process(result.exit_code)
    st = result.stats
    rec = result.recorded
    if rec is not None and rec.t_end is not None:
        whole = rec.kind == "steps" and rec.last_step is not None and rec.last_step > rec.first_step
        steps_txt = f"steps {rec.first_step}-{(rec.last_step or 1) - 1}, " if whole else ""
        _progress(
            f"recorded {steps_txt}{rec.t_start:.1f}-{rec.t_end:.1f} s of {result.wall_s:.1f} s "
            f"({rec.kind} recording; end: {rec.reason})"
        )
    if st is not None:
        timing = f"; export {result.export_s:.1f} s, write {st.seconds:.1f} s" if st.seconds else ""
        _progress(f"trace written: {result.trace} ({st.bytes / 1e6:.1f} MB, {st.events:,} events{timing})")
    if result.log is not None:
        _progress(f"the profiler's messages: {result.log}")
    return result.trace


def _report_job(trace: Path, exit_code: int, rank_folder: Path, tag: RunTag, out_dir: Path) -> None:
    """Rank 0 under torchrun: wait (bounded) for this run's other traces, then the job report."""
    from tracelens.capture.ranks import wait_for_ranks
    from tracelens.capture.runner import INTERRUPTED_EXIT, TERMINATED_EXIT
    from tracelens.cli.job import report_many

    terminated = exit_code in (INTERRUPTED_EXIT, TERMINATED_EXIT)
    # torchrun SIGTERMs every worker when one fails (and SIGKILLs 30 s later): the report
    # goes on, without waiting for more ranks, instead of being lost.
    stop = _TermFlag()
    with stop.installed():
        arrival = wait_for_ranks(rank_folder, tag, _progress, terminated=terminated, stopped=stop.get)
        report_many([str(p) for p in arrival.ready] or [str(trace)], None, None, None, out_dir, False, None, None,
                    False, run_problems=arrival.problems, stem=f"{rank_folder.name}.job")  # fmt: skip


class _TermFlag:
    """A SIGTERM handler for the report after a torchrun capture: the first SIGTERM is
    noted (the report is finished without waiting for more ranks), a second one ends the
    process as SIGTERM would."""

    def __init__(self) -> None:
        self.seen = False

    def get(self) -> bool:
        return self.seen

    def _on_term(self, signum: int, _frame: object) -> None:
        if self.seen:
            os._exit(128 + signum)
        self.seen = True

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        try:
            old = signal.signal(signal.SIGTERM, self._on_term)
        except ValueError:  # not the main thread
            yield
            return
        try:
            yield
        finally:
            signal.signal(signal.SIGTERM, old)


def _rank_or_default_path(name: str, out_dir: Path) -> Path:
    """Under torchrun each worker writes <script>-ranks/rank<R>.pt.trace.json.gz."""
    from tracelens.capture.ranks import rank_trace_path, torchrun_env
    from tracelens.capture.runner import default_trace_path

    env = torchrun_env()
    return rank_trace_path(name, out_dir, env) if env is not None else default_trace_path(name, out_dir)
