"""`tracelens capture --counters`: per-kernel hardware counters from a second, short pass.

Counters are collected by replaying each kernel (Nsight Compute and CUPTI's range profiler
both serialise kernels and run each several times, one set of counters per pass), which
would distort a timeline. So the script runs twice: first a short counters pass, ended as
soon as its steps are measured, then the ordinary timing pass, untouched. The counters land
in the timing pass's trace under the top-level key `tracelens_counters`
(model/counter_metrics.py); `tracelens report` pairs them with that trace's kernels.

The counters pass measures the same steps the timing pass records first (step W of
`--steps W-..`, the warm-up step count by default), `--counters-steps` of them. Backends:

- `ncu` (Nsight Compute on PATH, or $TRACELENS_NCU): the script runs under
  `ncu --profile-from-start off --metrics ...`; tracelens calls cudaProfilerStart/Stop
  around the steps, so only their kernels are replayed.
- `kineto`: torch.profiler's CUPTI range profiler. Kineto compiled it only for CUDA <= 12.6
  and removed it in 2026-06; where it is absent torch records no ranges and this says so.

Where the driver lets only admin users read GPU performance counters
(NVreg_RestrictProfilingToAdminUsers=1, shown as `RmProfilingAdminOnly: 1` in
/proc/driver/nvidia/params) the pass is skipped with that reason, and capture goes on.

The child process is `python -m tracelens.capture.counters CONFIG.json`: the script as
`__main__`, with the same step marks as the timing pass (capture/runner.py).
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tracelens.capture.window import Limits, Mode
from tracelens.model.counter_metrics import (
    CAPTURE_METRICS,
    COUNTERS_FORMAT,
    KINETO_METRICS,
    RANGE_CATEGORY,
    tensor_flop_metrics,
)

#: Steps measured by default: one steady-state step holds every kernel a training step
#: launches; each is replayed several times (~0.1-0.5 s a kernel under Nsight Compute).
COUNTERS_STEPS = 1
#: Kernels measured at most (Nsight Compute's --launch-count): bounds the pass's time on a
#: step of thousands of kernels (a Llama decode token launches ~700).
MAX_KERNELS = 2000
#: The pass is stopped after this long, and capture goes on without counters.
TIMEOUT_S = 900.0
#: Seconds of a --window (time-based) capture measured, from the window's start.
TIME_WINDOW_S = 2.0
#: The environment variable naming the Nsight Compute binary.
NCU_ENV = "TRACELENS_NCU"
#: Nsight Compute's message when the driver forbids profiling to this user.
NCU_PERMISSION_ERROR = "ERR_NVGPUCTRPERM"
#: CUPTI's, as Kineto logs it.
CUPTI_PERMISSION_ERROR = "CUPTI_ERROR_INSUFFICIENT_PRIVILEGES"
PARAMS_FILE = Path("/proc/driver/nvidia/params")
#: Tensor-path counters asked for at most (each costs replay passes).
MAX_TENSOR_METRICS = 12
NOT_PERMITTED = (
    "GPU performance counters are restricted to admin users on this machine "
    "(NVreg_RestrictProfilingToAdminUsers=1{detail}): no counters were collected. Run as root, or have the "
    "nvidia module loaded with NVreg_RestrictProfilingToAdminUsers=0 (https://developer.nvidia.com/ERR_NVGPUCTRPERM)"
)


@dataclass
class CountersResult:
    """What the counters pass collected: `data` is the trace's `tracelens_counters` value
    (None when nothing was measured), `notes` what to tell the user either way."""

    data: dict[str, Any] | None
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    log: Path | None = None


def counters_log_path(trace: Path) -> Path:
    """`<trace>.counters.log` beside the trace: the counters pass's output."""
    from tracelens.capture.runner import log_path

    capture_log = log_path(trace)
    return capture_log.with_name(capture_log.name.removesuffix(".capture.log") + ".counters.log")


def find_ncu() -> str | None:
    return os.environ.get(NCU_ENV) or shutil.which("ncu")


def profiling_restricted(params: Path = PARAMS_FILE, euid: int | None = None) -> bool:
    """Whether the NVIDIA driver lets only admin users read performance counters and this
    process is not one (root is allowed either way)."""
    uid = os.geteuid() if euid is None else euid
    if uid == 0:
        return False
    try:
        text = params.read_text()
    except OSError:
        return False
    m = re.search(r"^RmProfilingAdminOnly:\s*(\d+)", text, re.MULTILINE)
    return m is not None and m.group(1) != "0"


def counters_limits(limits: Limits, steps: int) -> Limits:
    """The counters pass's window: the first `steps` steps of the timing pass's window
    (by time for a --window capture)."""
    if limits.mode is Mode.TIME and limits.window_s is not None:
        start = limits.window_s[0]
        return Limits(
            mode=Mode.TIME, window_s=(start, start + TIME_WINDOW_S), steps=None, duration_s=None, max_events=None
        )
    first = 1 if limits.mode is Mode.ALL else limits.warmup_steps
    return Limits(mode=Mode.STEPS, warmup_steps=first, steps=steps, duration_s=None, max_events=None)


# --------------------------------------------------------------------------------------
# Nsight Compute's output
# --------------------------------------------------------------------------------------
_NAME_RE = re.compile(r"^([a-z][a-z0-9_]*__[a-z0-9_]+)\s")


def available_metrics(query_output: str) -> set[str]:
    """Base metric names (no rollup suffix) listed by `ncu --query-metrics`."""
    return {m.group(1) for line in query_output.splitlines() if (m := _NAME_RE.match(line.strip() + " "))}


def choose_metrics(available: set[str]) -> list[str]:
    """CAPTURE_METRICS that the GPU offers, plus its tensor-path math counters (dense ones:
    the `sparsity_on` variants are skipped). With no list (the query failed) the
    CAPTURE_METRICS are asked for as they are."""
    if not available:
        return list(CAPTURE_METRICS)
    chosen = [m for m in CAPTURE_METRICS if m.rsplit(".", 1)[0] in available]
    return chosen + tensor_flop_metrics(f"{b}.sum" for b in sorted(available))[:MAX_TENSOR_METRICS]


#: Units in Nsight Compute's raw page, to bytes, nanoseconds and plain counts.
_UNIT_SCALE = {
    "byte": 1.0,
    "kbyte": 1e3,
    "mbyte": 1e6,
    "gbyte": 1e9,
    "tbyte": 1e12,
    "nsecond": 1.0,
    "usecond": 1e3,
    "msecond": 1e6,
    "second": 1e9,
    "ns": 1.0,
    "us": 1e3,
    "ms": 1e6,
}
_TRIPLE_RE = re.compile(r"\(\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*\)")


def _triple(text: str) -> list[int] | None:
    m = _TRIPLE_RE.search(text or "")
    return [int(g) for g in m.groups()] if m else None


def _number(text: str) -> float | None:
    try:
        return float(text.replace(",", ""))
    except (AttributeError, ValueError):
        return None


def parse_ncu_raw(text: str, metrics: list[str]) -> list[dict[str, Any]]:
    """Nsight Compute's `--csv --page raw` output (other lines, the program's or ncu's own,
    are skipped) as `tracelens_counters` kernel records, in its ID (launch) order."""
    lines = [ln for ln in text.splitlines() if ln.startswith('"')]
    rows = list(csv.reader(io.StringIO("\n".join(lines))))
    header_at = next((i for i, r in enumerate(rows) if "ID" in r and "Kernel Name" in r), None)
    if header_at is None:
        return []
    header = rows[header_at]
    col = {h: i for i, h in enumerate(header)}
    units = rows[header_at + 1] if header_at + 1 < len(rows) else []
    has_units = bool(units) and not (_number(units[col["ID"]]) is not None)
    out: list[dict[str, Any]] = []
    for r in rows[header_at + (2 if has_units else 1) :]:
        if len(r) < len(header) or r[col["ID"]] == "ID":
            continue
        values: dict[str, float] = {}
        for m in metrics:
            i = col.get(m)
            if i is None:
                continue
            v = _number(r[i])
            if v is None:
                continue
            unit = units[i].strip().lower() if has_units and i < len(units) else ""
            values[m] = v * _UNIT_SCALE.get(unit, 1.0)
        stream = _number(r[col["Stream"]]) if "Stream" in col else None
        dur = values.get("gpu__time_duration.sum")
        out.append(
            {
                "name": r[col["Kernel Name"]],
                "grid": _triple(r[col["Grid Size"]]) if "Grid Size" in col else None,
                "block": _triple(r[col["Block Size"]]) if "Block Size" in col else None,
                "stream": int(stream) if stream is not None else None,
                "replay_us": dur / 1e3 if dur is not None else None,
                "values": values,
            }
        )
    return out


def ranges_from_export(path: Path) -> list[dict[str, Any]]:
    """`cuda_profiler_range` events of a torch.profiler export as kernel records."""
    with open(path, "rb") as f:
        data = json.load(f)
    out: list[dict[str, Any]] = []
    for e in data.get("traceEvents") or []:
        if not isinstance(e, dict) or e.get("cat") != RANGE_CATEGORY:
            continue
        raw_args = e.get("args")
        args: dict[str, Any] = raw_args if isinstance(raw_args, dict) else {}
        values = {str(k): float(v) for k, v in args.items() if isinstance(v, int | float) and not isinstance(v, bool)}
        dur = e.get("dur")
        out.append(
            {
                "name": str(e.get("name", "")),
                "grid": None,
                "block": None,
                "stream": None,
                "replay_us": float(dur) if isinstance(dur, int | float) else None,
                "values": values,
            }
        )
    return out


# --------------------------------------------------------------------------------------
# the parent side
# --------------------------------------------------------------------------------------
def _child_config(target: str, args: list[str], module: bool, limits: Limits, backend: str, work: Path) -> Path:
    cfg = {
        "target": target,
        "args": args,
        "module": module,
        "limits": {
            "mode": limits.mode.value,
            "warmup_steps": limits.warmup_steps,
            "steps": limits.steps,
            "window_s": list(limits.window_s) if limits.window_s else None,
        },
        "backend": backend,
        "metrics": list(KINETO_METRICS),
        "done": str(work / "done.json"),
        "export": str(work / "kineto.json"),
        "cwd": os.getcwd(),
    }
    path = work / "config.json"
    path.write_text(json.dumps(cfg))
    return path


def _ncu_version(ncu: str) -> str:
    try:
        out = subprocess.run([ncu, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return "Nsight Compute (version unknown)"
    m = re.search(r"Version\s+([0-9][0-9.]*)", out)
    return f"Nsight Compute {m.group(1)}" if m else "Nsight Compute (version unknown)"


def _query(ncu: str) -> str:
    try:
        return subprocess.run([ncu, "--query-metrics"], capture_output=True, text=True, timeout=120).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def ncu_command(ncu: str, metrics: list[str], max_kernels: int, log: Path, child: list[str]) -> list[str]:
    """Nsight Compute over the child: only the kernels between cudaProfilerStart/Stop,
    the GPU's own clocks (no locking: the timing pass runs at them too), the raw page as
    CSV into `log` (so the script's own output stays apart)."""
    return [
        ncu,
        "--profile-from-start",
        "off",
        "--target-processes",
        "application-only",
        "--clock-control",
        "none",
        "--metrics",
        ",".join(metrics),
        "--csv",
        "--page",
        "raw",
        "--launch-count",
        str(max_kernels),
        "--log-file",
        str(log),
        *child,
    ]


#: Nsight Compute's complaints about a metric it does not know (the pass is retried once
#: with the metrics every GPU since Volta has).
_BAD_METRIC_MARKERS = ("failed to find metric", "invalid metric", "unknown metric")


def _run_child(cmd: list[str], out_path: Path, timeout_s: float) -> tuple[int | None, str]:
    """Run the pass; (exit code or None when it could not run or ran too long, why not)."""
    try:
        with open(out_path, "wb") as out:
            proc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return None, f"the counters pass ran past {timeout_s:g} s and was stopped"
    except OSError as exc:
        return None, f"the counters pass could not start ({exc})"
    return proc.returncode, ""


def _counters_data(
    backend: str,
    tool: str,
    metrics: list[str],
    done: dict[str, Any],
    window: Limits,
    seconds: float,
    kernels: list[Any],
) -> dict[str, Any]:
    """What the pass measured, as the trace's `tracelens_counters` value."""
    first, last = done.get("first_step"), done.get("last_step")
    return {
        "format": COUNTERS_FORMAT,
        "source": backend,
        "tool": tool,
        "metrics": metrics or list(KINETO_METRICS),
        "steps": [first, last] if isinstance(first, int) and isinstance(last, int) else None,
        "window": {
            "mode": window.mode.value,
            "first_step": window.warmup_steps,
            "steps": window.steps,
            "window_s": list(window.window_s) if window.window_s else None,
        },
        "replay": "kernel",
        "cache_control": "all" if backend == "ncu" else "none",
        "clock_control": "none" if backend == "ncu" else "default",
        "seconds": seconds,
        "notes": [],
        "kernels": kernels,
    }


def run_counters_pass(
    target: str,
    args: list[str],
    module: bool,
    limits: Limits,
    steps: int = COUNTERS_STEPS,
    backend: str = "auto",
    log: Path | None = None,
    echo: Any = print,
    timeout_s: float = TIMEOUT_S,
    max_kernels: int = MAX_KERNELS,
) -> CountersResult:
    """Run the script once under the counters backend for `steps` steps of the timing
    window; never raises for a failed pass (the notes say why)."""
    t0 = time.perf_counter()
    result = CountersResult(None, log=log)
    if profiling_restricted():
        result.notes.append(NOT_PERMITTED.format(detail=", RmProfilingAdminOnly: 1 in " + str(PARAMS_FILE)))
        return result
    ncu = find_ncu()
    if backend == "auto":
        backend = "ncu" if ncu else "kineto"
    if backend == "ncu" and not ncu:
        result.notes.append(f"--counters-backend ncu: no `ncu` on PATH (or ${NCU_ENV}): no counters were collected")
        return result
    window = counters_limits(limits, steps)
    if window.mode is Mode.STEPS:
        what = (
            f"step {window.warmup_steps}"
            if steps == 1
            else f"steps {window.warmup_steps}-{window.warmup_steps + steps - 1}"
        )
    else:
        what = f"{TIME_WINDOW_S:g} s from {window.window_s[0] if window.window_s else 0:g} s"
    work = Path(tempfile.mkdtemp(prefix="tracelens-counters-"))
    try:
        config = _child_config(target, args, module, window, backend, work)
        child = [sys.executable, "-m", "tracelens.capture.counters", str(config)]
        out_path = log or (work / "counters.log")
        ncu_log = work / "ncu.csv"
        metrics: list[str] = []
        tool = "torch.profiler (CUPTI range profiler)"
        echo(
            f"tracelens: counters pass ({backend}): running the script for {what}, each kernel replayed "
            "(the timing pass follows)"
        )
        if backend == "ncu":
            assert ncu is not None
            tool = _ncu_version(ncu)
            metrics = choose_metrics(available_metrics(_query(ncu)))
            rc, why = _run_child(ncu_command(ncu, metrics, max_kernels, ncu_log, child), out_path, timeout_s)
            said = (ncu_log.read_text(errors="replace") if ncu_log.exists() else "").lower()
            if rc is not None and any(m in said for m in _BAD_METRIC_MARKERS):
                metrics = [m for m in CAPTURE_METRICS if m.startswith(("smsp__sass", "dram__"))]
                result.notes.append("Nsight Compute refused a metric; measured again with FLOP and DRAM counters only")
                rc, why = _run_child(ncu_command(ncu, metrics, max_kernels, ncu_log, child), out_path, timeout_s)
        else:
            rc, why = _run_child(child, out_path, timeout_s)
        if rc is None:
            result.notes.append(f"{why}: no counters")
            return result
        text = out_path.read_text(errors="replace")
        ncu_text = ncu_log.read_text(errors="replace") if ncu_log.exists() else ""
        if log is not None and ncu_text:
            # Nsight Compute's own report, kept beside the pass's log.
            with contextlib.suppress(OSError):
                shutil.copyfile(ncu_log, log.with_name(log.name.removesuffix(".log") + ".ncu.csv"))
        done = _read_done(work / "done.json")
        if NCU_PERMISSION_ERROR in text + ncu_text or CUPTI_PERMISSION_ERROR in text:
            result.notes.append(NOT_PERMITTED.format(detail=""))
            return result
        if backend == "ncu":
            kernels = parse_ncu_raw(ncu_text, metrics) or parse_ncu_raw(text, metrics)
        else:
            export = work / "kineto.json"
            kernels = ranges_from_export(export) if export.exists() else []
        if not done.get("measured"):
            result.notes.append(
                f"the counters pass ended (exit {rc}) before {what} was measured"
                + (f" ({done['note']})" if done.get("note") else "")
            )
        if not kernels:
            if backend == "kineto":
                why = (
                    "this torch records no CUPTI range-profiler counters (Kineto built it only for CUDA <= 12.6 "
                    "and removed it in 2026-06): install Nsight Compute (ncu) for --counters"
                )
            else:
                why = f"Nsight Compute measured no kernels (exit {rc})"
                tail = " | ".join(ln.strip() for ln in (ncu_text or text).splitlines()[-3:] if ln.strip())
                if tail:
                    why += f"; it said: {tail[:400]}"
            result.notes.append(f"no counters: {why}" + (f"; the pass's output is in {log}" if log else ""))
            return result
        seconds = round(time.perf_counter() - t0, 1)
        result.data = _counters_data(backend, tool, metrics, done, window, seconds, kernels)
        if backend == "ncu" and len(kernels) >= max_kernels:
            result.data["notes"].append(
                f"the first {max_kernels:,} kernels of the steps were measured (--launch-count)"
            )
        result.notes.append(f"counters: {len(kernels):,} kernels measured by {tool} in {seconds:g} s ({what})")
        return result
    finally:
        result.seconds = time.perf_counter() - t0
        shutil.rmtree(work, ignore_errors=True)


def _read_done(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


# --------------------------------------------------------------------------------------
# the child side: the script with the step marks, counters on for the window's steps
# --------------------------------------------------------------------------------------
class CountersDone(BaseException):
    """Raised in the script once its steps are measured, to end it early (a BaseException,
    so the script's `except Exception` does not swallow it)."""


class _CounterRecorder:
    """The runner's recorder interface (start/stop/step/set_aside/drop), turning counters
    on for the window: cudaProfilerStart/Stop under Nsight Compute, or a torch.profiler
    session with the range profiler's metrics."""

    def __init__(self, torch: Any, cfg: dict[str, Any]) -> None:
        self.torch = torch
        self.cfg = cfg
        self.backend = str(cfg["backend"])
        self.prof: Any = None
        self.first_step: int | None = None
        self.on = False
        self.note = ""

    def _sync(self) -> None:
        with contextlib.suppress(Exception):
            if self.torch.cuda.is_available():
                self.torch.cuda.synchronize()

    def start(self, step_num: int, provisional: bool = False) -> bool:
        self._sync()
        try:
            if self.backend == "ncu":
                if self.torch.cuda.is_available():
                    self.torch.cuda.cudart().cudaProfilerStart()
            else:
                from torch.profiler import ProfilerActivity, profile

                config = self.torch._C._profiler._ExperimentalConfig(
                    profiler_metrics=list(self.cfg["metrics"]), profiler_measure_per_kernel=True
                )
                acts = [ProfilerActivity.CPU]
                if self.torch.cuda.is_available():
                    acts.append(ProfilerActivity.CUDA)
                self.prof = profile(activities=acts, experimental_config=config)
                self.prof.start()
        except Exception as exc:
            self.note = f"counters could not start ({type(exc).__name__}: {exc})"
            return False
        self.first_step, self.on = step_num, True
        return True

    def step(self) -> None:
        return None

    def set_aside(self) -> None:
        return None

    def drop(self) -> None:
        return None

    def stop(self, last_step: int | None = None) -> None:
        if not self.on:
            return
        self._sync()
        self.on = False
        try:
            if self.backend == "ncu":
                if self.torch.cuda.is_available():
                    self.torch.cuda.cudart().cudaProfilerStop()
            elif self.prof is not None:
                self.prof.stop()
                self.prof.export_chrome_trace(str(self.cfg["export"]))
        except Exception as exc:
            self.note = f"counters could not stop cleanly ({type(exc).__name__}: {exc})"
        self.finish(True, last_step)
        raise CountersDone()

    def finish(self, measured: bool, last_step: int | None = None) -> None:
        done = {"measured": measured, "first_step": self.first_step, "last_step": last_step, "note": self.note}
        Path(str(self.cfg["done"])).write_text(json.dumps(done))


def child_main(config_path: str) -> int:
    """The counters pass's process: the script as __main__ under the runner's step marks."""
    from tracelens.capture import runner
    from tracelens.capture.window import Window

    cfg = json.loads(Path(config_path).read_text())
    os.chdir(cfg["cwd"])
    torch = runner._import_torch()
    lim = cfg["limits"]
    limits = Limits(
        mode=Mode(lim["mode"]),
        warmup_steps=int(lim["warmup_steps"]),
        steps=lim["steps"],
        duration_s=None,
        max_events=None,
        window_s=tuple(lim["window_s"]) if lim["window_s"] else None,
    )
    window = Window(limits)
    recorder = _CounterRecorder(torch, cfg)
    opts = runner.CaptureOptions(target=cfg["target"], args=list(cfg["args"]), module=bool(cfg["module"]))
    run = runner._resolve_target(opts)

    cap = runner._Capture(window, recorder)  # type: ignore[arg-type]
    original_apply = cap.apply

    def apply(action: Any) -> None:
        from tracelens.capture.window import Action

        if action is Action.STOP:
            # Recording.last_step is the mark count at the stop: the last step measured is the one before.
            last = window.kept.last_step if window.kept is not None else None
            recorder.stop(last - 1 if last is not None else None)
            return
        original_apply(action)

    cap.apply = apply  # type: ignore[method-assign]
    hooks = runner._Hooks(torch, cap)
    stop_timer = threading.Event()
    timer = threading.Thread(
        target=runner._timer, args=(cap, threading.get_ident(), stop_timer), name="tracelens-timer", daemon=True
    )
    code = 0
    with runner._signals(cap):
        runner._CURRENT = cap
        cap.t0 = time.perf_counter()
        cap.active = True
        try:
            cap.apply(window.begin())
            timer.start()
            run()
            if recorder.on:  # the script ended inside the window: what ran was measured
                cap.apply(window.finish(time.perf_counter() - cap.t0, "end of script"))
        except CountersDone:
            pass
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 0
            if recorder.on:
                with contextlib.suppress(CountersDone):
                    recorder.stop(window.steps - 1)
        except BaseException as exc:
            runner._print_user_traceback(exc)
            code = 1
            if recorder.on:
                with contextlib.suppress(CountersDone):
                    recorder.stop(window.steps - 1)
        finally:
            cap.active = False
            stop_timer.set()
            cap.changed.set()
            hooks.remove()
    if recorder.first_step is None:
        recorder.note = recorder.note or f"the script marked {window.steps} steps"
        recorder.finish(False)
    return code


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: python -m tracelens.capture.counters CONFIG.json", file=sys.stderr)
        sys.exit(2)
    cfg_backend = json.loads(Path(sys.argv[1]).read_text()).get("backend")
    rc = child_main(sys.argv[1])
    sys.stdout.flush()
    sys.stderr.flush()
    if cfg_backend == "kineto":
        # A destroyed torch.profiler session can crash the process (runner._KEEP): skip finalising.
        os._exit(rc)
    # Under Nsight Compute the process ends normally: its injection library finishes at exit.
    sys.exit(rc)
