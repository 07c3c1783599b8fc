"""`tracelens.record(steps=...)`: record steps N-M of a hand-written loop, then report.

    import tracelens

    with tracelens.record(steps="5-24") as rec:
        for batch in loader:
            train_step(batch)
            rec.step()

The recording uses `tracelens capture`'s settings (CPU and GPU activity, shapes, Python
stacks, every thread's ops, NVML clocks and power beside it) and its window policy
(`capture.window.Window` in steps mode): the work before the first `step()` is step 0,
steps N..M are recorded as ProfilerStep#N..#M, and the recording stops at the (M+1)-th
step mark (the trace is written then) or when the block ends. Without `rec.step()` calls the block's
`optimizer.step()` calls are the steps. The trace is written atomically to `out`
(default `reports/<name>-<time>.pt.trace.json.gz`); the report is then made in a
separate process (`python -m tracelens report`) when the block ends, so that its memory and imports stay
out of the training process, and its reports go to `out_dir`.

torch is imported when the recording starts, not before.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tracelens import __version__
from tracelens.capture.window import MAX_EVENTS, STEPS, WARMUP_STEPS, Action, Limits, Mode, Phase, Window
from tracelens.errors import CaptureError

#: The steps recorded when none are given: the same as `tracelens capture`'s default.
DEFAULT_STEPS = (WARMUP_STEPS, WARMUP_STEPS + STEPS - 1)
#: Longest wait for the report's process: a million-event trace reports in well under a
#: minute on the development machine; a report that hangs must not hold the program.
REPORT_TIMEOUT_S = 600.0


def parse_steps(steps: str | tuple[int, int] | range) -> tuple[int, int]:
    """'5-24', (5, 24) or range(5, 25) as (first, last), both included."""
    if isinstance(steps, range):
        if steps.step != 1 or len(steps) == 0:
            raise ValueError(f"steps: a range of consecutive steps, not {steps!r}")
        return steps.start, steps.stop - 1
    if isinstance(steps, str):
        lo, sep, hi = steps.partition("-")
        try:
            first, last = (int(lo), int(hi)) if sep else (int(lo), int(lo))
        except ValueError:
            raise ValueError(f"steps: 'N-M' (e.g. '5-24'), not {steps!r}") from None
    else:
        first, last = steps
    if first < 0 or last < first:
        raise ValueError(f"steps: 0 <= N <= M, not {first}-{last}")
    return first, last


@dataclass
class RecordSettings:
    steps: tuple[int, int] = DEFAULT_STEPS
    out: Path | None = None
    out_dir: Path = Path("reports")
    report: bool = True
    record_shapes: bool = True
    with_stack: bool = True
    nvml: bool = True
    max_events: int | None = MAX_EVENTS
    #: Names the default trace file and says in the trace's metadata who recorded it.
    name: str = "record"
    integration: str = "record"
    #: optimizer.step() calls count as steps until the first explicit step() (off for the
    #: framework callbacks, whose own hooks are the steps).
    optimizer_steps: bool = True
    notes: list[str] = field(default_factory=list)

    def trace_path(self) -> Path:
        if self.out is not None:
            return self.out
        return self.out_dir / f"{self.name}-{time.strftime('%Y%m%d-%H%M%S')}.pt.trace.json.gz"


class StepRecorder:
    """Starts torch.profiler at step N, marks ProfilerStep boundaries, stops after step M,
    writes the trace and has it reported. `start()`, `step()` and `stop()` are what the
    integrations call; `stop()` is safe to call twice and when nothing was recorded."""

    def __init__(self, settings: RecordSettings | None = None) -> None:
        self.settings = settings or RecordSettings()
        first, last = self.settings.steps
        self.window = Window(Limits(mode=Mode.STEPS, warmup_steps=first, steps=last - first + 1, duration_s=None))
        self.trace: Path | None = None
        self.report_dir: Path | None = None
        self.explicit = False
        self._recorder: Any = None
        self._sampler: Any = None
        self._hook: Any = None
        self._tmp: Path | None = None
        self._t0 = 0.0
        self._started = False
        self._stopped = False

    # -- the recording -----------------------------------------------------------------
    def start(self) -> StepRecorder:
        if self._started:
            return self
        from tracelens.capture.recorder import _Quiet, _Recorder, all_threads_config
        from tracelens.capture.runner import _import_torch

        torch = _import_torch()
        from torch.profiler import ProfilerActivity, profile

        self._started = True
        self._tmp = Path(tempfile.mkdtemp(prefix="tracelens-record-"))
        out = self.settings.trace_path().resolve()
        out.parent.mkdir(parents=True, exist_ok=True)
        if not os.access(out.parent, os.W_OK):
            raise CaptureError(f"{out.parent}: not writable")
        self.trace = out
        has_gpu = bool(torch.cuda.is_available())
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if has_gpu else [])
        config = all_threads_config(torch)
        s = self.settings

        def make(stacks: bool = True) -> Any:
            kwargs: dict[str, Any] = {"experimental_config": config} if config is not None else {}
            return profile(
                activities=activities, record_shapes=s.record_shapes, with_stack=s.with_stack and stacks, **kwargs
            )

        self._torch = torch
        self._recorder = _Recorder(torch, make, self._tmp, _Quiet(self._tmp / "profiler.log", False), s.notes)
        if has_gpu and s.nvml and torch.version.hip is None:
            from tracelens.capture.nvml import NvmlSampler

            sampler = NvmlSampler()
            if sampler.start():
                self._sampler = sampler
            else:
                s.notes.append(sampler.note)
        if s.optimizer_steps:
            from torch.optim.optimizer import register_optimizer_step_post_hook

            self._hook = register_optimizer_step_post_hook(lambda *_a: self._mark("optimizer"))
        self._t0 = time.perf_counter()
        self._apply(self.window.begin())
        return self

    def step(self) -> None:
        """The end of one step (explicit marks win over optimizer.step() calls)."""
        if not self.explicit:
            self.explicit = True
            if self._hook is not None:
                self._hook.remove()
                self._hook = None
        self._mark("explicit")

    def _mark(self, source: str) -> None:
        if not self._started or self._stopped or not self.window.accept(source):
            return
        self._apply(self.window.step(time.perf_counter() - self._t0))
        if self.window.phase is Phase.DONE:
            self.stop()  # the trace is written now; the report waits for close()

    def _apply(self, action: Action) -> None:
        rec = self._recorder
        if action is Action.START:
            cur = self.window.current
            if not rec.start(cur.first_step if cur else self.window.steps):
                self.window.start_failed()
        elif action is Action.STOP:
            rec.stop()
        elif action is Action.STEP:
            rec.step()

    def stop(self) -> Path | None:
        """End the recording (if it still runs) and write the trace: its path, or None
        when nothing was recorded. The report is made by `close()`."""
        if not self._started or self._stopped:
            return self.trace if self._stopped else None
        self._stopped = True
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        torch = self._torch
        wall = time.perf_counter() - self._t0
        with contextlib.suppress(Exception):
            if torch.cuda.is_available():
                torch.cuda.synchronize()
        self._apply(self.window.finish(wall, "end of recording"))
        samples = self._sampler.stop() if self._sampler is not None else None
        try:
            return self._write(wall, samples)
        finally:
            if self._tmp is not None:
                shutil.rmtree(self._tmp, ignore_errors=True)

    def _write(self, wall: float, samples: Any) -> Path | None:
        from tracelens.capture.trace_file import finish_trace

        s, rec, torch = self.settings, self._recorder, self._torch
        first, last = s.steps
        if rec.kept is None or self.trace is None:
            _say(
                f"recorded nothing: {self.window.steps} steps were marked, steps {first}-{last} were asked for "
                "(mark steps with rec.step(), or ask for fewer)"
            )
            self.trace = None
            return None
        kept = self.window.kept
        has_gpu = bool(torch.cuda.is_available())
        metadata: dict[str, Any] = {
            "tracelens_version": __version__,
            "torch_version": str(torch.__version__),
            "cuda_version": str(torch.version.cuda or ""),
            "hip_version": str(getattr(torch.version, "hip", "") or ""),
            "command": list(sys.argv),
            "cwd": os.getcwd(),
            "integration": s.integration,
            "wall_s": round(wall, 3),
            "steps_marked": self.window.steps,
            "step_source": self.window.source,
            "window": {
                "mode": "steps",
                "limits": {"warmup_steps": first, "steps": last - first + 1, "max_events": s.max_events},
                "recorded": asdict(kept) if kept is not None else None,
            },
            "with_stack": s.with_stack,
            "record_shapes": s.record_shapes,
            "all_threads": True,
            "export_s": round(rec.export_s, 3),
            "gpu": torch.cuda.get_device_name(0) if has_gpu else None,
            "notes": s.notes,
        }
        finish_trace(rec.kept, self.trace, samples, metadata, max_events=s.max_events)
        recorded = f"steps {kept.first_step}-{(kept.last_step or kept.first_step + 1) - 1}" if kept else "a recording"
        _say(f"recorded {recorded}: {self.trace}")
        for note in s.notes:
            _say(note)
        return self.trace

    def close(self) -> Path | None:
        """Stop (if not yet) and make the report on the trace (once)."""
        trace = self.stop()
        if trace is not None and self.settings.report and self.report_dir is None:
            self.report_dir = self.settings.out_dir
            report(trace, self.settings.out_dir)
        return trace

    # -- as a context manager ------------------------------------------------------------
    def __enter__(self) -> StepRecorder:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.close()


def report(trace: Path, out_dir: Path) -> int:
    """`tracelens report TRACE --out-dir OUT_DIR` in its own process; its exit code (the
    trace is kept whatever happens)."""
    cmd = [sys.executable, "-m", "tracelens", "report", str(trace), "--out-dir", str(out_dir)]
    try:
        return subprocess.run(cmd, timeout=REPORT_TIMEOUT_S, check=False).returncode
    except (OSError, subprocess.TimeoutExpired) as exc:
        _say(f"the report failed ({type(exc).__name__}: {exc}); the trace is kept at {trace}")
        return 1


def _say(message: str) -> None:
    print(f"tracelens: {message}", file=sys.stderr, flush=True)


def record(
    steps: str | tuple[int, int] | range = DEFAULT_STEPS,
    *,
    out: str | Path | None = None,
    out_dir: str | Path = "reports",
    report: bool = True,
    record_shapes: bool = True,
    with_stack: bool = True,
    nvml: bool = True,
    max_events: int | None = MAX_EVENTS,
    name: str | None = None,
) -> StepRecorder:
    """A recorder of steps N-M, to use as `with tracelens.record(steps="5-24") as rec:`
    with `rec.step()` at the end of every iteration."""
    settings = RecordSettings(
        steps=parse_steps(steps),
        out=Path(out) if out is not None else None,
        out_dir=Path(out_dir),
        report=report,
        record_shapes=record_shapes,
        with_stack=with_stack,
        nvml=nvml,
        max_events=max_events,
        name=name or _script_name(),
    )
    return StepRecorder(settings)


def _script_name() -> str:
    argv0 = sys.argv[0] if sys.argv and sys.argv[0] else "record"
    stem = Path(argv0).name
    return stem[:-3] if stem.endswith(".py") else (stem or "record")
