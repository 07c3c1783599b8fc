"""Run a user's script under torch.profiler with the NVML sampler beside it.

The script runs as `__main__` in this process (runpy), with `sys.argv` set to the script
and its arguments, as `python script.py args` would. Its exit code and exceptions pass
through; the trace is written whatever happens (Ctrl-C included). torch is imported
here and nowhere else in tracelens.
"""

from __future__ import annotations

import os
import runpy
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tracelens import __version__
from tracelens.capture.nvml import DEFAULT_INTERVAL_S, NvmlSampler, SamplerResult
from tracelens.capture.trace_file import finish_trace
from tracelens.errors import CaptureError

#: Exit code when the user interrupts the script, as a shell reports SIGINT.
INTERRUPTED_EXIT = 130


@dataclass
class CaptureOptions:
    target: str
    args: list[str] = field(default_factory=list)
    module: bool = False
    out: Path | None = None
    record_shapes: bool = True
    with_stack: bool = True
    profile_memory: bool = False
    # (wait, warmup, active, repeat) of torch.profiler.schedule, or None for the whole run
    schedule: tuple[int, int, int, int] | None = None
    # (start, end) seconds after the script starts; checked at step boundaries
    window_s: tuple[float, float] | None = None
    nvml: bool = True
    nvml_interval_s: float = DEFAULT_INTERVAL_S


@dataclass
class CaptureResult:
    trace: Path | None
    exit_code: int
    notes: list[str]
    steps: int
    wall_s: float
    sampler: SamplerResult | None


class _StepHook:
    """Marks profiler steps. Scripts may call `tracelens.capture.step()` once per
    iteration; otherwise every optimizer.step() is a step (training scripts get
    ProfilerStep#N markers for free). The explicit call wins once seen."""

    def __init__(self) -> None:
        self.prof: Any = None
        self.steps = 0
        self.explicit = False

    def step(self, explicit: bool) -> None:
        if self.prof is None:
            return
        if explicit:
            self.explicit = True
        elif self.explicit:
            return
        self.steps += 1
        self.prof.step()


_HOOK = _StepHook()


def step() -> None:
    """Mark the end of one iteration of the profiled program (a no-op when not running
    under `tracelens capture`)."""
    _HOOK.step(explicit=True)


def default_trace_path(target: str, out_dir: Path = Path("reports")) -> Path:
    stem = Path(target).stem if not target.endswith(".py") else Path(target).name[:-3]
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return out_dir / f"{stem}-{stamp}.pt.trace.json.gz"


def _check_writable(out: Path) -> None:
    """Fail before running the script, not after, when the trace cannot be written."""
    parent = out.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CaptureError(f"{parent}: cannot create the output directory ({exc.strerror or exc})") from exc
    if not os.access(parent, os.W_OK):
        raise CaptureError(f"{parent}: not writable")


def _profiler_still_on(torch: Any) -> bool:
    try:
        return bool(torch._C._autograd._profiler_enabled())
    except Exception:  # private API moved: assume it is on
        return True


def _join_script_threads() -> None:
    import threading

    for t in threading.enumerate():
        if t is not threading.current_thread() and not t.daemon and t.name != "tracelens-nvml":
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


def capture(opts: CaptureOptions, echo: Callable[[str], None] = print) -> CaptureResult:
    torch = _import_torch()
    from torch.profiler import ProfilerAction, ProfilerActivity, profile, schedule

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

    sampler: NvmlSampler | None = None
    if has_gpu and opts.nvml and torch.version.hip is None:
        sampler = NvmlSampler(opts.nvml_interval_s)
        if not sampler.start():
            notes.append(sampler.note)
            sampler = None
    elif has_gpu and opts.nvml:
        notes.append("ROCm GPU: NVML sampling is NVIDIA-only; no clock/power samples")

    tmpdir = tempfile.mkdtemp(prefix="tracelens-capture-")
    raw = Path(tmpdir) / "trace.json"
    exported: list[Path] = []

    def on_ready(p: Any) -> None:
        p.export_chrome_trace(str(raw))
        exported.append(raw)

    started = time.perf_counter()
    if opts.schedule is not None:
        wait, warmup, active, repeat = opts.schedule
        sched = schedule(wait=wait, warmup=warmup, active=active, repeat=repeat)
    elif opts.window_s is not None:
        t_start, t_end = opts.window_s
        state = {"saved": False, "first": -1.0}

        # A time window decided at each step boundary (the schedule is consulted only when
        # a step ends). Before the window the profiler stays warmed up, so starting to
        # record is cheap; the window's length is counted from the first recorded step.
        def sched(_step: int) -> Any:
            now = time.perf_counter() - started
            if state["saved"]:
                return ProfilerAction.NONE
            if now < t_start:
                return ProfilerAction.WARMUP
            if state["first"] < 0:
                state["first"] = now
            if now - state["first"] < t_end - t_start:
                return ProfilerAction.RECORD
            state["saved"] = True
            return ProfilerAction.RECORD_AND_SAVE
    else:
        # Record everything, but through a schedule so step() adds ProfilerStep#N marks.
        def sched(_step: int) -> Any:
            return ProfilerAction.RECORD

    prof = profile(
        activities=activities,
        schedule=sched,
        on_trace_ready=on_ready,
        record_shapes=opts.record_shapes,
        with_stack=opts.with_stack,
        profile_memory=opts.profile_memory,
    )
    hook_handle = None
    try:
        from torch.optim.optimizer import register_optimizer_step_post_hook

        hook_handle = register_optimizer_step_post_hook(lambda *_a: _HOOK.step(explicit=False))
    except ImportError:  # torch < 2.0
        pass

    exit_code = 0
    saved_argv, saved_path, saved_cwd = list(sys.argv), list(sys.path), os.getcwd()
    t0 = time.perf_counter()
    prof.start()
    _HOOK.prof, _HOOK.steps, _HOOK.explicit = prof, 0, False
    try:
        run()
        _join_script_threads()  # python waits for non-daemon threads before exiting too
    except SystemExit as exc:
        code = exc.code
        exit_code = code if isinstance(code, int) else (0 if code is None else 1)
        if code is not None and not isinstance(code, int):
            print(code, file=sys.stderr)
    except KeyboardInterrupt:
        exit_code = INTERRUPTED_EXIT
        notes.append("interrupted (Ctrl-C): the trace holds what ran until then")
    except BaseException as exc:
        # Show the user's exception as Python would (without our frames), then still
        # write the trace.
        _print_user_traceback(exc)
        exit_code = 1
        notes.append("the script raised an exception; the trace holds what ran until then")
    finally:
        _HOOK.prof = None
        wall = time.perf_counter() - t0
        sys.argv[:], sys.path[:] = saved_argv, saved_path
        os.chdir(saved_cwd)
        if hook_handle is not None:
            hook_handle.remove()
        try:
            if has_gpu:
                torch.cuda.synchronize()
        except Exception:
            notes.append("torch.cuda.synchronize() failed at the end of the script")
        if _profiler_still_on(torch):
            try:
                prof.stop()
            except Exception as exc:
                notes.append(f"the profiler failed to stop cleanly: {exc}")
        else:
            # The script ran torch.profiler itself, which ends the (process-wide) session
            # ours was recording; exporting it then crashes inside the profiler.
            notes.append(
                "the script used torch.profiler itself, which ended tracelens's profiling session: "
                "no trace could be kept (profile the script with one or the other)"
            )
        samples = sampler.stop() if sampler is not None else None

    if not exported:
        if any("used torch.profiler itself" in n for n in notes):
            return CaptureResult(None, exit_code, notes, _HOOK.steps, wall, samples)
        notes.append(
            "the profiler recorded nothing (the schedule's active steps were never reached: "
            f"the script marked {_HOOK.steps} steps)"
        )
        return CaptureResult(None, exit_code, notes, _HOOK.steps, wall, samples)
    metadata = {
        "tracelens_version": __version__,
        "torch_version": str(torch.__version__),
        "cuda_version": str(torch.version.cuda or ""),
        "hip_version": str(getattr(torch.version, "hip", "") or ""),
        "command": [opts.target, *opts.args] if not opts.module else ["-m", opts.target, *opts.args],
        "cwd": os.getcwd(),
        "exit_code": exit_code,
        "wall_s": round(wall, 3),
        "steps_marked": _HOOK.steps,
        "schedule": list(opts.schedule) if opts.schedule else None,
        "window_s": list(opts.window_s) if opts.window_s else None,
        "gpu": torch.cuda.get_device_name(0) if has_gpu else None,
        "notes": notes,
    }
    try:
        path = finish_trace(raw, out, samples, metadata)
    except OSError as exc:
        raise CaptureError(f"{out}: cannot write the trace ({exc.strerror or exc})") from exc
    finally:
        raw.unlink(missing_ok=True)
        Path(tmpdir).rmdir()
    return CaptureResult(path, exit_code, notes, _HOOK.steps, wall, samples)
