"""What a capture is asked to do (`CaptureOptions`) and what it returns (`CaptureResult`),
and where its files go: shared by the runner (capture/runner.py), the trace writer
(capture/writer.py), the supervisor and the CLI."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tracelens.capture.nvml import DEFAULT_INTERVAL_S, SamplerResult
from tracelens.capture.trace_file import TraceStats
from tracelens.capture.window import Limits, Recording

#: What the capture tells its supervisor (supervise.py) as it goes: a JSON-able dict
#: each time a trace is written, and the result at the end.
StateSink = Callable[[dict[str, Any]], None]


@dataclass
class CaptureOptions:
    target: str
    args: list[str] = field(default_factory=list)
    module: bool = False
    out: Path | None = None
    record_shapes: bool = True
    with_stack: bool = True
    profile_memory: bool = False
    limits: Limits = field(default_factory=Limits)
    nvml: bool = True
    nvml_interval_s: float = DEFAULT_INTERVAL_S
    #: Show the profiler's own messages instead of writing them to the log file.
    verbose: bool = False
    #: Under torchrun: the run tag that ties this rank's trace to its run (ranks.RunTag).
    run: dict[str, Any] | None = None
    #: End the script once the recording is written (--stop-after-recording).
    stop_after_recording: bool = False
    #: What `--counters`' pass measured (capture/counters.py), written into the trace.
    counters: dict[str, Any] | None = None


@dataclass
class CaptureResult:
    trace: Path | None
    exit_code: int
    notes: list[str]
    steps: int
    wall_s: float
    sampler: SamplerResult | None
    stats: TraceStats | None = None
    recorded: Recording | None = None
    export_s: float = 0.0
    log: Path | None = None


def default_trace_path(target: str, out_dir: Path = Path("reports")) -> Path:
    stem = Path(target).stem if not target.endswith(".py") else Path(target).name[:-3]
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return out_dir / f"{stem}-{stamp}.pt.trace.json.gz"


def log_path(out: Path) -> Path:
    name = out.name
    for suffix in (".pt.trace.json.gz", ".pt.trace.json", ".json.gz", ".json"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
            break
    return out.with_name(name + ".capture.log")
