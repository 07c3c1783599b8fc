"""Writing the trace file: each finished recording exported as it ends (`_TraceWriter`),
then the files merged, stamped and moved into place once the script is done (`_finish`),
and whatever can be rescued when that fails (`_rescue`). capture/runner.py runs the
script and calls these; trace_file.py holds the file format's own steps."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any, Protocol

from tracelens import __version__
from tracelens.capture.nvml import NvmlSampler, SamplerResult
from tracelens.capture.options import CaptureOptions, CaptureResult, StateSink, log_path
from tracelens.capture.trace_file import finish_trace
from tracelens.capture.window import Mode, Recording, Window
from tracelens.errors import CaptureError


class _RecorderLike(Protocol):
    """The recorder (capture/recorder.py) as the writer reads it."""

    kept: Path | None
    fallback: Path | None
    export_s: float


class _QuietLike(Protocol):
    """The profiler log (capture/recorder.py: _Quiet)."""

    log: Path


class _ExportsLike(Protocol):
    """Where the script's own torch.profiler wrote its traces (capture/runner.py)."""

    paths: list[str]


class _TraceWriter:
    """Writes the trace: the moment a recording ends while the script runs (so that a
    crash, SIGKILL or the OOM killer later loses nothing already recorded), and once
    more at the end with the script's exit."""

    def __init__(
        self,
        opts: CaptureOptions,
        torch: Any,
        out: Path,
        notes: list[str],
        window: Window,
        recorder: _RecorderLike,
        sampler: NvmlSampler | None,
        all_threads: bool,
        state: StateSink | None,
    ) -> None:
        self.opts = opts
        self.torch = torch
        self.out = out
        self.notes = notes
        self.window = window
        self.recorder = recorder
        self.sampler = sampler
        self.all_threads = all_threads
        self.state = state
        self.now: Callable[[], float] = lambda: 0.0
        #: The recording now on disk at `out` (written while the script ran), if any.
        self.on_disk: Recording | None = None

    def metadata(self, rec: Recording | None, exit_code: int | None, wall: float) -> dict[str, Any]:
        torch, opts, lim, window = self.torch, self.opts, self.opts.limits, self.window
        has_gpu = bool(torch.cuda.is_available())
        return {
            "tracelens_version": __version__,
            "torch_version": str(torch.__version__),
            "cuda_version": str(torch.version.cuda or ""),
            "hip_version": str(getattr(torch.version, "hip", "") or ""),
            "command": [opts.target, *opts.args] if not opts.module else ["-m", opts.target, *opts.args],
            "cwd": os.getcwd(),
            # None while the script still runs (a trace written the moment its recording
            # ended); the supervisor fills it in if the script dies before its end.
            "exit_code": exit_code,
            "running": exit_code is None,
            "wall_s": round(wall, 3),
            "steps_marked": window.steps,
            "step_source": window.source,
            "window": {
                "mode": lim.mode.value,
                "limits": {
                    "warmup_steps": lim.warmup_steps,
                    "steps": lim.steps,
                    "duration_s": lim.duration_s,
                    "warmup_s": lim.warmup_s,
                    "max_events": lim.max_events,
                    "window_s": list(lim.window_s) if lim.window_s else None,
                },
                "recorded": asdict(rec) if rec is not None else None,
                # Time recordings a steps recording replaced (what the capture spent
                # recording set-up before the script's steps began).
                "superseded": [asdict(r) for r in window.superseded],
            },
            "with_stack": opts.with_stack,
            "record_shapes": opts.record_shapes,
            "all_threads": self.all_threads,
            "export_s": round(self.recorder.export_s, 3),
            "gpu": torch.cuda.get_device_name(0) if has_gpu else None,
            "notes": list(self.notes),
            **({"counters": self.counters_summary()} if opts.counters is not None else {}),
            # Under torchrun: the run this rank belongs to (capture/ranks.py), also
            # written at the head of the file by finish_trace.
            **({"run": opts.run} if opts.run is not None else {}),
        }

    def counters_summary(self) -> dict[str, Any]:
        """`--counters`' pass without its per-kernel rows (those go top-level)."""
        return {k: v for k, v in (self.opts.counters or {}).items() if k != "kernels"}

    def extra_top(self) -> dict[str, Any] | None:
        """The top-level keys beside the events: `--counters`' full measurements."""
        if self.opts.counters is None:
            return None
        from tracelens.model.counter_metrics import COUNTERS_KEY

        return {COUNTERS_KEY: self.opts.counters}

    def started(self, rec: Recording | None) -> None:
        """Tell the supervisor a recording runs (what a crash now would lose)."""
        if self.state is not None:
            self.state({"event": "recording", "recording": asdict(rec) if rec is not None else None})

    def write_running(self, fallback: bool) -> None:
        """A recording ended while the script runs: write the trace now. The set-aside
        start of the run (`fallback`) is written only while nothing better is on disk."""
        rec = self.window.provisional if fallback else self.window.kept
        raw = self.recorder.fallback if fallback else self.recorder.kept
        if raw is None or rec is None or (fallback and self.on_disk is not None and self.on_disk.kind != "start"):
            return
        now = self.now()
        samples = self.sampler.snapshot() if self.sampler is not None else None
        try:
            meta = self.metadata(rec, None, now)
            stats = finish_trace(
                raw,
                self.out,
                samples,
                meta,
                self.opts.limits.max_events,
                require_events=True,
                extra_top=self.extra_top(),
            )
        except Exception as exc:  # the script goes on; the end writes it again
            self.notes.append(f"writing the trace when the recording ended failed ({type(exc).__name__}: {exc})")
            return
        if not stats.written:
            return
        self.on_disk = rec
        if self.state is not None:
            self.state(
                {
                    "event": "written",
                    "trace": str(self.out),
                    "recorded": asdict(rec),
                    "at_s": round(now, 3),
                    "events": stats.events,
                    "ops": stats.ops,
                    "kernels": stats.kernels,
                    "bytes": stats.bytes,
                    "steps_marked": self.window.steps,
                    "notes": list(self.notes),
                }
            )


def _finish(
    opts: CaptureOptions,
    out: Path,
    notes: list[str],
    window: Window,
    recorder: _RecorderLike,
    quiet: _QuietLike,
    samples: SamplerResult | None,
    exit_code: int,
    wall: float,
    writer: _TraceWriter,
    exports: _ExportsLike | None,
) -> CaptureResult:
    lim = opts.limits
    rec = window.kept if recorder.kept is not None else None
    own = list(dict.fromkeys(exports.paths)) if exports is not None else []
    if own:
        shown = ", ".join(own[:3]) + (f" and {len(own) - 3} more" if len(own) > 3 else "")
        notes.append(f"the script wrote its own profiler trace ({shown}): `tracelens report {own[-1]}` explains it")
    if rec is None:
        if lim.mode is Mode.STEPS:
            last = lim.warmup_steps + (lim.steps or 1) - 1
            notes.append(
                f"the script marked {window.steps} steps, so --steps {lim.warmup_steps}-{last} recorded nothing "
                f"(try --steps 1-{max(window.steps, 1)})"
            )
        elif lim.mode is Mode.TIME and lim.window_s is not None:
            notes.append(
                f"the script ended after {wall:.1f} s, before --window {lim.window_s[0]:g}:{lim.window_s[1]:g} began"
            )
        elif not any("torch.profiler itself" in n for n in notes):
            notes.append("the profiler recorded nothing")
    elif rec.kind == "start":
        notes.append(
            f"the script ended during its warm-up ({window.steps} steps marked, {wall:.1f} s): "
            f"the trace holds its first {(rec.t_end or wall):.1f} s, start-up included, without Python stacks "
            "(use --all or --steps to record them)"
        )
    elif rec.kind == "time" and window.steps == 0 and lim.mode is Mode.DEFAULT:
        notes.append(
            f"the script marked no steps: recorded {rec.t_start:.1f}-{(rec.t_end or wall):.1f} s of the run "
            "(mark iterations with tracelens.capture.step() to record whole steps)"
        )
    log = None
    if quiet.log.exists() and quiet.log.stat().st_size:
        log = log_path(out)
        with contextlib.suppress(OSError):
            shutil.copyfile(quiet.log, log)
    if rec is None:
        # No trace of nothing: an empty file next to a note would only be reported on.
        # (A trace written while the script ran stays: it is what was recorded.)
        trace: Path | None = None
        if writer.on_disk is not None and out.exists():
            trace, rec = out, writer.on_disk
            notes.append(f"kept the trace written at {rec.t_end or 0:.1f} s ({rec.kind} recording)")
            _restamp_quietly(out, {"exit_code": exit_code, "running": False, "wall_s": round(wall, 3),
                                   "steps_marked": window.steps, "notes": list(notes)})  # fmt: skip
            stats = None
        else:
            stats = None
        return CaptureResult(trace, exit_code, notes, window.steps, wall, samples, stats, rec, recorder.export_s, log)
    try:
        meta = writer.metadata(rec, exit_code, wall)
        stats = finish_trace(
            recorder.kept,
            out,
            samples,
            meta,
            max_events=lim.max_events,
            require_events=True,
            extra_top=writer.extra_top(),
        )
    except Exception as exc:
        kept = _rescue(recorder.kept, out)
        where = f"; the profiler's own export is kept at {kept}" if kept else ""
        if writer.on_disk is not None and out.exists():
            where += f"; the trace written at {writer.on_disk.t_end or 0:.1f} s is at {out}"
        raise CaptureError(f"{out}: cannot write the trace ({type(exc).__name__}: {exc}){where}") from exc
    if not stats.written:
        # The recording held no torch op (the script never ran one): no trace of nothing.
        notes.append("the recording held no torch op")
        if writer.on_disk is not None and out.exists():
            return CaptureResult(out, exit_code, notes, window.steps, wall, samples, None, writer.on_disk,
                                 recorder.export_s, log)  # fmt: skip
        return CaptureResult(None, exit_code, notes, window.steps, wall, samples, None, rec, recorder.export_s, log)
    if stats.salvage_note:
        notes.append(stats.salvage_note)
    if stats.dropped_events:
        notes.append(f"--max-events {lim.max_events:,}: dropped the last {stats.dropped_events:,} events")
    return CaptureResult(out, exit_code, notes, window.steps, wall, samples, stats, rec, recorder.export_s, log)


def _restamp_quietly(path: Path, updates: dict[str, Any]) -> None:
    from tracelens.capture.trace_file import restamp

    with contextlib.suppress(Exception):  # the trace as written stays valid
        restamp(path, updates)


def _rescue(raw: Path | None, out: Path) -> Path | None:
    """Move the raw export next to the output when finishing it failed."""
    if raw is None or not raw.exists():
        return None
    target = out.with_name(out.name.removesuffix(".gz") + ".raw.json")
    try:
        shutil.move(str(raw), target)
    except OSError:
        return None
    return target
