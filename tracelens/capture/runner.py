"""Run a user's script under torch.profiler with the NVML sampler beside it.

The script runs as `__main__` in this process (runpy), with `sys.argv` set to the script
and its arguments, as `python script.py args` would. Its exit code and exceptions pass
through (Python's own code when it never ran torch: a syntax error is 1, `--help` is 0);
the trace is written whatever happens: an exception, Ctrl-C, SIGTERM (what `timeout`,
Slurm, docker and systemd send). torch is imported here and nowhere else in tracelens.

What is recorded is decided by `window.Window` (a warm-up, then a bounded steady state by
default); `_Recorder` starts and stops the profiler for it, exporting each finished
recording at once so a later failure cannot lose it. The profiler's own chatter (USDT
lines on stderr, its UserWarnings) goes to a log file, not into the script's output.
"""

from __future__ import annotations

import contextlib
import os
import runpy
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from tracelens.capture.nvml import NvmlSampler
from tracelens.capture.options import CaptureOptions as CaptureOptions
from tracelens.capture.options import CaptureResult as CaptureResult
from tracelens.capture.options import StateSink as StateSink
from tracelens.capture.options import default_trace_path as default_trace_path
from tracelens.capture.options import log_path as log_path
from tracelens.capture.recorder import _KEEP, _Quiet, _Recorder
from tracelens.capture.recorder import all_threads_config as all_threads_config
from tracelens.capture.recorder import exit_process as exit_process
from tracelens.capture.window import Action, Mode, Recording, Window, loaded_framework
from tracelens.capture.writer import _finish, _TraceWriter
from tracelens.errors import CaptureError

#: Exit codes when a signal ends the script, as a shell reports them (128 + signal).
INTERRUPTED_EXIT = 130
TERMINATED_EXIT = 143
#: The signal the timer thread sends the main thread so that time-based starts and stops
#: run there, between bytecodes (the profiler is not started from other threads).
#: SIGURG is ignored by default and scripts rarely handle it.
TICK_SIGNAL = signal.SIGURG
#: After a tick the timer waits this long for the main thread to act before resending
#: (the main thread may be inside a long C call, or inside tracelens itself).
TICK_RETRY_S = 0.5


class Terminated(BaseException):
    """Raised in the script's main thread on SIGTERM (a BaseException, so the script's
    `except Exception` does not swallow it)."""


class RecordingDone(BaseException):
    """Raised in the script's main thread once the recording is written, with
    --stop-after-recording: the script has nothing more to give the trace."""


def _check_writable(out: Path) -> None:
    """Fail before running the script, not after, when the trace cannot be written."""
    parent = out.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CaptureError(f"{parent}: cannot create the output directory ({exc.strerror or exc})") from exc
    if not os.access(parent, os.W_OK):
        raise CaptureError(f"{parent}: not writable")


def _join_script_threads() -> None:
    for t in threading.enumerate():
        if t is not threading.current_thread() and not t.daemon and not t.name.startswith("tracelens-"):
            t.join()


def _print_user_traceback(exc: BaseException) -> None:
    """The traceback from the first frame outside tracelens and runpy, as `python
    script.py` would print it."""
    tb = exc.__traceback__
    while tb is not None:
        name = tb.tb_frame.f_code.co_filename
        if "runpy" in name or f"{os.sep}tracelens{os.sep}capture{os.sep}" in name:
            tb = tb.tb_next
            continue
        break
    traceback.print_exception(type(exc), exc, tb if tb is not None else exc.__traceback__)


def _import_torch() -> Any:
    try:
        import torch
        import torch.profiler
    except ImportError as exc:
        raise CaptureError(
            "tracelens capture needs PyTorch in this environment (pip install torch); `tracelens report` does not"
        ) from exc
    return torch


def _resolve_target(opts: CaptureOptions) -> Callable[[], None]:
    if opts.module:
        argv0 = opts.target

        def run() -> None:
            sys.argv = [argv0, *opts.args]
            sys.path.insert(0, os.getcwd())  # as `python -m` does
            runpy.run_module(opts.target, run_name="__main__", alter_sys=True)

        return run
    script = Path(opts.target)
    if not script.is_file():
        raise CaptureError(f"{script}: no such script")

    def run_script() -> None:
        sys.argv = [str(script), *opts.args]
        sys.path.insert(0, str(script.resolve().parent))
        runpy.run_path(str(script), run_name="__main__")

    return run_script


class _Capture:
    """Glue: step marks, timer ticks and the script's end drive the window; its actions
    drive the recorder. Everything here runs in the script's main thread."""

    def __init__(self, window: Window, recorder: _Recorder) -> None:
        self.window = window
        self.recorder = recorder
        self.t0 = time.perf_counter()
        self.pid = os.getpid()
        self.busy = False
        self.active = False
        self.changed = threading.Event()
        self.on_source: Callable[[str], None] = lambda _s: None
        #: Called when a recording has ended while the script runs (True: the start of the
        #: run, set aside): the trace is written at once (export-at-once).
        self.on_recorded: Callable[[bool], None] = lambda _fallback: None
        #: Called when a recording starts (None: it stopped), for the supervisor.
        self.on_started: Callable[[Recording | None], None] = lambda _rec: None
        self.stop_after = False

    def now(self) -> float:
        return time.perf_counter() - self.t0

    def apply(self, action: Action) -> None:
        if action is Action.START:
            cur = self.window.current
            provisional = cur is not None and cur.kind == "start"
            if self.recorder.prof is not None and not provisional:
                # The start of the run, set aside, goes to disk before the new recording
                # begins (written after, its Python would be recorded too): a crash
                # during the steps then still leaves the start of the run.
                self.recorder.set_aside()
                self.on_started(None)
                if self.active:
                    self.on_recorded(True)
            if not self.recorder.start(cur.first_step if cur else self.window.steps, provisional):
                self.window.start_failed()
            else:
                self.window.started(self.now())
                self.on_started(cur)
        elif action is Action.STOP:
            self.recorder.stop()
            self.on_started(None)
            if self.active:
                self.on_recorded(False)
        elif action is Action.STEP:
            self.recorder.step()
        elif action is Action.SET_ASIDE:
            self.recorder.set_aside()
            if self.active:
                self.on_recorded(True)
        self.changed.set()
        if action is Action.STOP and self.active and self.stop_after and self.recorder.kept is not None:
            from tracelens.capture.window import Phase

            if self.window.phase is not Phase.RECORDING:
                raise RecordingDone()

    def mark(self, source: str) -> None:
        if not self.active or self.busy or os.getpid() != self.pid:
            return  # not capturing, re-entered, or a forked worker (DataLoader)
        self.busy = True
        try:
            before = self.window.source
            if not self.window.accept(source):
                return
            if self.window.source != before:
                self.on_source(source)
            with _deferred_interrupts():
                self.apply(self.window.step(self.now()))
        finally:
            self.busy = False

    def compile_started(self) -> None:
        if not self.active or self.busy or os.getpid() != self.pid:
            return
        self.busy = True
        try:
            if self.window.drop_provisional():
                self.recorder.drop()
                self.on_started(None)
                self.recorder.notes.append(
                    "torch.compile started during the warm-up: the recording of the run's start was dropped"
                )
        finally:
            self.busy = False
            self.changed.set()

    def tick(self) -> None:
        if not self.active or self.busy or os.getpid() != self.pid:
            return
        self.busy = True
        try:
            if self.window.framework is None:
                self.window.framework = loaded_framework(list(sys.modules))
            with _deferred_interrupts():
                self.apply(self.window.tick(self.now()))
        finally:
            self.busy = False
            self.changed.set()


_CURRENT: _Capture | None = None


def step() -> None:
    """Mark the end of one iteration of the profiled program (a no-op when not running
    under `tracelens capture`)."""
    if _CURRENT is not None:
        _CURRENT.mark("explicit")


def _timer(cap: _Capture, main_ident: int, stop: threading.Event) -> None:
    """Wakes the main thread (TICK_SIGNAL) when the window's next deadline passes."""
    while not stop.is_set():
        if cap.window.framework is None:
            # A framework's set-up gets a longer warm-up by time (window.FRAMEWORK_WARMUP_S).
            cap.window.framework = loaded_framework(list(sys.modules))
        deadline = cap.window.next_deadline()
        if deadline is None:
            cap.changed.wait(1.0)
            cap.changed.clear()
            continue
        wait = deadline - cap.now()
        if wait > 0:
            cap.changed.wait(min(wait, 1.0))
            cap.changed.clear()
            continue
        if stop.is_set():
            return
        with contextlib.suppress(OSError, ValueError):
            signal.pthread_kill(main_ident, TICK_SIGNAL)
        cap.changed.wait(TICK_RETRY_S)
        cap.changed.clear()


_COMPILE_HOOK_WARNING = r"Using `torch.compile\(module\)` when there are global hooks"


class _Hooks:
    """optimizer.step() and outermost nn.Module calls as step marks."""

    def __init__(self, torch: Any, cap: _Capture) -> None:
        self.torch = torch
        self.cap = cap
        self.handles: list[Any] = []
        self.forward: list[Any] = []
        self.depth = 0
        try:
            from torch.optim.optimizer import register_optimizer_step_post_hook

            self.handles.append(register_optimizer_step_post_hook(lambda *_a: cap.mark("optimizer")))
        except ImportError:  # torch < 2.0
            pass
        try:
            from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook

            compiling = getattr(getattr(torch, "compiler", None), "is_compiling", lambda: False)

            def pre(_m: Any, _a: Any) -> None:
                if compiling():  # traced by dynamo: a constant, so no graph break
                    return
                if not self.compile_hooked and "torch._dynamo" in sys.modules:
                    self.hook_compile()
                if self.depth == 0:
                    cap.window.step_begun = True
                self.depth += 1

            def post(_m: Any, _a: Any, _r: Any) -> None:
                if compiling():
                    return
                self.depth = max(0, self.depth - 1)
                if self.depth == 0:
                    cap.mark("forward")

            self.forward.append(register_module_forward_pre_hook(pre))
            try:
                self.forward.append(register_module_forward_hook(post, always_call=True))
            except TypeError:  # torch < 2.1: no always_call
                self.forward.append(register_module_forward_hook(post))
        except ImportError:
            pass
        cap.on_source = self._source_changed
        # torch.compile(module) warns that our global hooks fire for its wrapper too; the
        # depth count makes that harmless, and the warning is about tracelens, not the
        # script: keep it out of the script's output.
        warnings.filterwarnings("ignore", message=_COMPILE_HOOK_WARNING, category=UserWarning)
        self.compile_hooked = False
        self.compile_handle: Any = None

    def hook_compile(self) -> None:
        """Once the script has imported torch._dynamo (torch.compile did), learn when a
        compile starts (importing it ourselves costs ~2 s, so only then)."""
        self.compile_hooked = True
        try:
            from torch._dynamo.callback import callback_handler

            def on_start(*_a: Any) -> None:
                self.cap.compile_started()

            self.compile_handle = callback_handler.register_start_callback(on_start)
        except (ImportError, AttributeError):
            pass

    def _source_changed(self, source: str) -> None:
        if source != "forward":
            # optimizer/explicit marks win: drop the global module hooks (they slow
            # every module call a little).
            self.remove_forward()

    def remove_forward(self) -> None:
        for h in self.forward:
            h.remove()
        self.forward.clear()

    def remove(self) -> None:
        if self.compile_handle is not None:
            with contextlib.suppress(Exception):
                from torch._dynamo.callback import callback_handler

                callback_handler.remove_start_callback(self.compile_handle)
            self.compile_handle = None
        self.remove_forward()
        kept = [f for f in warnings.filters if getattr(f[1], "pattern", None) != _COMPILE_HOOK_WARNING]
        warnings.filters.clear()  # type: ignore[attr-defined]
        warnings.filters.extend(kept)  # type: ignore[attr-defined]
        for h in self.handles:
            h.remove()
        self.handles.clear()


@contextlib.contextmanager
def _signals(cap: _Capture) -> Iterator[None]:
    """SIGTERM ends the script like Ctrl-C does (the trace is written); TICK_SIGNAL runs
    the window's timer in the main thread. A second SIGTERM while the first one unwinds
    the script is ignored: Slurm signals every process of the job and the supervisor
    forwards its own, so the script often gets two at once."""
    pid = os.getpid()
    terminating = False

    def on_term(signum: int, _frame: Any) -> None:
        nonlocal terminating
        if os.getpid() != pid:  # a forked child inherited this: behave as the default
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        if terminating:
            return
        terminating = True
        raise Terminated()

    def on_tick(_signum: int, _frame: Any) -> None:
        cap.tick()

    old_term = signal.signal(signal.SIGTERM, on_term)
    old_tick = signal.signal(TICK_SIGNAL, on_tick)
    try:
        yield
    finally:
        signal.signal(TICK_SIGNAL, old_tick)
        signal.signal(signal.SIGTERM, old_term)


@contextlib.contextmanager
def _deferred_interrupts() -> Iterator[None]:
    """While the window changes recordings (the start of the run set aside and exported,
    the steps' recording started, one stopped and written), SIGINT and SIGTERM wait until
    the change is done, then act as they would have. Raised in between, they left neither
    recording: issue 29's sigterm_in_warmup (SIGTERM at 2.5 s, as step 5 begins the
    steps' recording) wrote no trace in 5 of 10 runs on the H200 box ("the profiler
    recorded nothing"). Only the main thread can hold signals; elsewhere this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[int] = []

    def hold(signum: int, _frame: object) -> None:
        pending.append(signum)

    old: dict[int, Any] = {}
    try:
        for sig in (signal.SIGINT, signal.SIGTERM):
            old[int(sig)] = signal.signal(sig, hold)
    except (ValueError, OSError):
        pass
    try:
        yield
    finally:
        for num, h in old.items():
            signal.signal(num, h if h is not None else signal.SIG_DFL)
        for num in dict.fromkeys(pending):
            signal.raise_signal(num)


@contextlib.contextmanager
def _no_interrupts() -> Iterator[None]:
    """While the trace is written, SIGINT and SIGTERM wait: a second Ctrl-C must not
    lose what the first one asked to keep."""
    old = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


class _ScriptExports:
    """Where the script's own torch.profiler wrote its traces (export_chrome_trace, which
    tensorboard_trace_handler calls too): a script that profiles itself ends tracelens's
    recording (one profiler session per process), and its own trace is the one to read."""

    def __init__(self, torch: Any) -> None:
        self.paths: list[str] = []
        self._cls: Any = getattr(getattr(torch.profiler, "profiler", None), "_KinetoProfile", None)
        self._orig: Any = getattr(self._cls, "export_chrome_trace", None)
        if self._cls is None or self._orig is None:
            return
        orig, paths = self._orig, self.paths

        def export_chrome_trace(prof: Any, path: str, *args: Any, **kwargs: Any) -> Any:
            got = orig(prof, path, *args, **kwargs)
            if not any(prof is p for p in _KEEP):  # not one of tracelens's own recordings
                with contextlib.suppress(Exception):
                    paths.append(os.path.abspath(path))
            return got

        self._cls.export_chrome_trace = export_chrome_trace

    def remove(self) -> None:
        if self._cls is not None and self._orig is not None:
            self._cls.export_chrome_trace = self._orig


def capture(
    opts: CaptureOptions,
    echo: Callable[[str], None] = print,
    state: StateSink | None = None,
    workdir: Path | None = None,
) -> CaptureResult:
    """Run the script under the profiler in this process. `state` (the supervisor's
    channel, supervise.py) hears of every recording started and trace written; the
    profiler's raw exports go to `workdir` (the supervisor's folder, which it reads
    after a crash), else to a temporary folder removed at the end."""
    global _CURRENT
    torch = _import_torch()
    from torch.profiler import ProfilerActivity, profile

    if opts.run is not None:  # a torchrun worker: torch's gloo teardown deadlock (ranks.py)
        from tracelens.capture.ranks import keep_process_groups

        keep_process_groups()

    run = _resolve_target(opts)
    # Resolved now: the script may chdir.
    out = (opts.out or default_trace_path(opts.target)).resolve()
    _check_writable(out)
    notes: list[str] = []
    activities = [ProfilerActivity.CPU]
    has_gpu = bool(torch.cuda.is_available())
    if has_gpu:
        activities.append(ProfilerActivity.CUDA)  # also HIP on ROCm builds
    else:
        notes.append("no GPU visible to torch: the trace has CPU activity only")
    # torch's all-threads mode drops the allocator's [memory] events (torch 2.13 CPU: 12
    # with the default config, 0 with profile_all_threads on the same loop), so --memory,
    # which asks for exactly those events, records the profiling thread only.
    main_only = opts.profile_memory or os.environ.get("TRACELENS_CAPTURE_THREADS") == "main"
    config = None if main_only else all_threads_config(torch)
    if opts.profile_memory:
        notes.append(
            "--memory: only the main thread's ops are recorded (torch drops allocator events in all-threads mode)"
        )

    def make(stacks: bool = True) -> Any:
        # The provisional recording of the start runs without Python stacks: under
        # with_stack the imports and model building are millions of Python events, and
        # stopping that recording blocked the script (a CPU Llama generate run: 45 s
        # under capture for 5.7 s unprofiled).
        kwargs: dict[str, Any] = {}
        if config is not None:
            kwargs["experimental_config"] = config
        return profile(
            activities=activities,
            record_shapes=opts.record_shapes,
            with_stack=opts.with_stack and stacks,
            profile_memory=opts.profile_memory,
            **kwargs,
        )

    sampler: NvmlSampler | None = None
    if has_gpu and opts.nvml and torch.version.hip is None:
        sampler = NvmlSampler(opts.nvml_interval_s)
        if not sampler.start():
            notes.append(sampler.note)
            sampler = None
    elif has_gpu and opts.nvml:
        notes.append("ROCm GPU: NVML sampling is NVIDIA-only; no clock/power samples")

    tmp = workdir if workdir is not None else Path(tempfile.mkdtemp(prefix="tracelens-capture-"))
    exports = _ScriptExports(torch)
    try:
        return _run(opts, torch, run, make, out, notes, sampler, tmp, echo, config is not None, state, exports)
    finally:
        _CURRENT = None
        exports.remove()
        if workdir is None:
            shutil.rmtree(tmp, ignore_errors=True)


def _run(
    opts: CaptureOptions,
    torch: Any,
    run: Callable[[], None],
    make: Callable[[bool], Any],
    out: Path,
    notes: list[str],
    sampler: NvmlSampler | None,
    tmp: Path,
    echo: Callable[[str], None],
    all_threads: bool,
    state: StateSink | None = None,
    exports: _ScriptExports | None = None,
) -> CaptureResult:
    global _CURRENT
    has_gpu = bool(torch.cuda.is_available())
    quiet = _Quiet(tmp / "profiler.log", opts.verbose)
    window = Window(opts.limits)
    recorder = _Recorder(torch, make, tmp, quiet, notes)
    cap = _Capture(window, recorder)
    writer = _TraceWriter(opts, torch, out, notes, window, recorder, sampler, all_threads, state)
    writer.now = cap.now
    cap.on_recorded = writer.write_running
    cap.on_started = writer.started
    cap.stop_after = opts.stop_after_recording
    hooks = _Hooks(torch, cap)
    stop_timer = threading.Event()
    timer = threading.Thread(
        target=_timer, args=(cap, threading.get_ident(), stop_timer), name="tracelens-timer", daemon=True
    )
    echo(f"tracelens: {opts.limits.describe()}")

    exit_code = 0
    ended = "end of script"
    saved_argv, saved_path, saved_cwd = list(sys.argv), list(sys.path), os.getcwd()
    if opts.limits.mode in (Mode.TIME, Mode.STEPS):
        recorder.prewarm()  # the default and --all start at once, which does the same
    t0 = time.perf_counter()
    with _signals(cap):
        _CURRENT = cap
        cap.t0 = t0
        cap.active = True
        try:
            cap.apply(window.begin())
            # The window's clock starts once the profiler runs: its first start took 7-52 s
            # of wall time on the loaded 2-core machine (3 s of CPU: Kineto's set-up), which
            # used up the 5 s warm-up by time before the script began, so that the start of
            # the run set aside held 22 ms.
            cap.t0 = t0 = time.perf_counter()
            window.started(0.0)  # the recording of the start, on the script's clock
            if state is not None:  # the supervisor times the script's end from the same start
                state({"event": "started", "epoch_s": time.time()})
            timer.start()
            run()
            _join_script_threads()  # python waits for non-daemon threads before exiting too
        except SystemExit as exc:
            code = exc.code
            exit_code = code if isinstance(code, int) else (0 if code is None else 1)
            if code is not None and not isinstance(code, int):
                print(code, file=sys.stderr)
        except KeyboardInterrupt:
            exit_code, ended = INTERRUPTED_EXIT, "interrupted (Ctrl-C)"
            notes.append("interrupted (Ctrl-C): the trace holds what ran until then")
        except Terminated:
            exit_code, ended = TERMINATED_EXIT, "terminated (SIGTERM)"
            notes.append("terminated (SIGTERM): the trace holds what ran until then")
        except RecordingDone:
            # (the script's own threads are not waited for: the process ends now)
            exit_code, ended = 0, "--stop-after-recording"
            notes.append(
                f"--stop-after-recording: the script was ended at {cap.now():.1f} s, once its recording was written"
            )
        except BaseException as exc:
            # Show the user's exception as Python would (without our frames), then still
            # write the trace.
            _print_user_traceback(exc)
            exit_code, ended = 1, "the script raised an exception"
            notes.append("the script raised an exception; the trace holds what ran until then")
        finally:
            with _no_interrupts():
                cap.active = False
                stop_timer.set()
                cap.changed.set()
                wall = time.perf_counter() - t0
                sys.argv[:], sys.path[:] = saved_argv, saved_path
                os.chdir(saved_cwd)
                hooks.remove()
                try:
                    if has_gpu:
                        torch.cuda.synchronize()
                except Exception:
                    notes.append("torch.cuda.synchronize() failed at the end of the script")
                action = window.finish(wall, ended)
                rec = window.kept
                if (
                    action is Action.STOP
                    and rec is not None
                    and rec.kind == "steps"
                    and rec.last_step == rec.first_step
                    and recorder.fallback is not None
                    and window.provisional is not None
                ):
                    # The script ended right after its warm-up: the start of the run,
                    # set aside, says more than the last partial step.
                    recorder.stop(use_fallback=True)
                    window.kept = window.provisional
                else:
                    cap.apply(action)
                if recorder.kept is None and recorder.fallback is not None and window.provisional is not None:
                    # Nothing better was recorded: the start of the run it is.
                    recorder.export_fallback()
                    window.kept = window.provisional
                recorder.free_fallback()
                samples = sampler.stop() if sampler is not None else None
    with _no_interrupts():
        return _finish(opts, out, notes, window, recorder, quiet, samples, exit_code, wall, writer, exports)
