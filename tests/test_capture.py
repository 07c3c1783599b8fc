"""`tracelens capture` on CPU (CI has torch's CPU build and no GPU), and the way NVML
samples travel inside the trace. The H200 runs are in test_capture_gpu.py."""

from __future__ import annotations

import gzip
import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support.cli import argv, capture_state_folders, cli
from support.corpus import DATA, SAMPLES, sample

from tracelens.capture.nvml import SERIES, GpuSamples, SamplerResult
from tracelens.capture.trace_file import counter_events, finish_trace
from tracelens.model import load_trace


def capture(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return cli("capture", "--out-dir", tmp_path / "reports", *args, cwd=tmp_path, timeout=600)


# Found without importing it (an import of torch costs seconds of collection).
needs_torch = pytest.mark.skipif(
    importlib.util.find_spec("torch") is None,
    reason="torch not installed (pip install torch==2.13.0)",
)


@pytest.mark.slow
@needs_torch
def test_capture_cpu_script_passes_exit_code_and_argv(tmp_path: Path) -> None:
    out = tmp_path / "t.pt.trace.json.gz"
    res = capture(tmp_path, "-o", str(out), str(DATA / "cpu_train.py"), "5", "3")
    assert res.returncode == 3, res.stderr
    assert "ran 5 steps as __main__ with argv ['5', '3']" in res.stdout
    assert "CPU activity only" in res.stderr and "trace written" in res.stderr
    data = json.loads(gzip.decompress(out.read_bytes()))
    meta = data["tracelens"]
    assert meta["exit_code"] == 3 and meta["steps_marked"] == 5
    assert meta["command"][1:] == ["5", "3"]
    # 5 steps end with the default warm-up: the trace is the set-aside start of the run.
    assert "ended during its warm-up" in res.stderr and meta["window"]["recorded"]["kind"] == "start"
    steps = {e["name"] for e in data["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#")}
    assert "ProfilerStep#0" in steps  # (how many more fit in the first 3 s depends on the machine)
    # ... and the report ran on it and says why most questions can't be answered.
    assert (tmp_path / "reports" / "t.pt.trace.html").exists()
    m = load_trace(out)
    assert len(m.steps) >= 1 and m.meta.metadata["tracelens"]["torch_version"]


@pytest.mark.slow
@needs_torch
def test_capture_survives_an_exception(tmp_path: Path) -> None:
    out = tmp_path / "e.json.gz"
    res = capture(tmp_path, "--no-report", "-o", str(out), str(DATA / "cpu_train.py"), "4", "--raise")
    assert res.returncode == 1
    assert "RuntimeError: planted failure" in res.stderr  # the user's traceback, as python shows it
    assert "raised an exception" in res.stderr
    assert out.exists() and load_trace(out).meta.metadata["tracelens"]["exit_code"] == 1


@pytest.mark.slow
@needs_torch
def test_steps_window_and_explicit_step_hook(tmp_path: Path) -> None:
    out = tmp_path / "s.json.gz"
    res = capture(
        tmp_path, "--no-report", "--steps", "2-3", "-o", str(out), str(DATA / "cpu_train.py"), "6", "0", "--explicit"
    )
    assert res.returncode == 0, res.stderr
    data = json.loads(gzip.decompress(out.read_bytes()))
    steps = sorted(
        {e["name"] for e in data["traceEvents"] if e.get("cat") == "user_annotation" and "ProfilerStep#" in e["name"]}
    )
    assert steps == ["ProfilerStep#2", "ProfilerStep#3"]
    # The explicit tracelens.capture.step() wins over the optimizer hook (and that over
    # the forward marks) once seen, and the count restarts: 6 explicit steps, not 12 or 18.
    assert data["tracelens"]["steps_marked"] == 6 and data["tracelens"]["step_source"] == "explicit"


@pytest.mark.slow
def test_bad_capture_arguments(tmp_path: Path) -> None:
    res = capture(tmp_path, str(tmp_path / "missing.py"))
    assert res.returncode != 0 and "Traceback" not in res.stderr
    res = capture(tmp_path, "--steps", "5-2", str(DATA / "cpu_train.py"))
    assert res.returncode == 2 and "Traceback" not in res.stderr


def _fake_samples() -> SamplerResult:
    gpu = GpuSamples(index=0, name="NVIDIA H200", uuid="GPU-x", max_sm_mhz=1980, max_mem_mhz=3201, power_limit_w=700.0)
    base = 1_700_000_000_000_000_000
    for i in range(5):
        gpu.t_ns.append(base + i * 10_000_000)
        for key in SERIES:
            gpu.values[key].append({"sm_mhz": 1800.0, "reasons": 4.0}.get(key, 1.0))
    return SamplerResult(gpus=[gpu], interval_s=0.01, driver="580", nvml_version="13", samples=5, busy_s=0.001)


def test_samples_become_counter_tracks_aligned_to_base_time(tmp_path: Path) -> None:
    """finish_trace splices counters into a real trace; the loader reads them back on
    the trace's time base."""
    src = sample("launch_bound")
    raw = tmp_path / "raw.json"
    raw.write_bytes(gzip.decompress(src.read_bytes()))
    base_ns = json.loads(raw.read_bytes())["baseTimeNanoseconds"]
    samples = _fake_samples()
    samples.gpus[0].t_ns[:] = [base_ns + 1_000_000 * (i + 1) for i in range(5)]  # 1..5 ms after base
    out = finish_trace(raw, tmp_path / "with.json.gz", samples, {"tracelens_version": "test"}).path
    events = counter_events(samples, base_ns)
    assert events[0]["ts"] == pytest.approx(1000.0)
    m = load_trace(out)
    c = m.counters
    assert set(c["name"].str.replace("tracelens NVML GPU0 ", "")) >= {
        "SM clock (MHz)",
        "power (W)",
        "clocks event reasons",
    }
    # Same time base as the events: counter ts = sample time - first event time.
    first_abs = m.meta.origin_us
    got = c[c["name"].str.endswith("SM clock (MHz)")]["ts"].min()
    assert got == pytest.approx((base_ns + 1_000_000) / 1000 - first_abs, abs=0.01)
    assert m.meta.metadata["tracelens"]["nvml"]["gpus"][0]["max_sm_mhz"] == 1980
    # The original events are untouched.
    assert len(m.host) == len(load_trace(src).host)


@pytest.mark.slow
@needs_torch
def test_ctrl_c_writes_the_trace(tmp_path: Path) -> None:
    import signal
    import time

    out = tmp_path / "int.json.gz"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tracelens",
            "capture",
            "--all",
            "--no-report",
            "-o",
            str(out),
            str(DATA / "cpu_forever.py"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        preexec_fn=_sigint_as_python_has_it,
    )
    assert proc.stdout is not None
    deadline = time.time() + 120
    while time.time() < deadline and "started" not in proc.stdout.readline():
        pass
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "interrupted" in err and out.exists()
    assert load_trace(out).meta.metadata["tracelens"]["exit_code"] == 130


@pytest.mark.slow
@needs_torch
def test_time_window(tmp_path: Path) -> None:
    out = tmp_path / "w.json.gz"
    res = capture(tmp_path, "--no-report", "--window", "0.35:0.75", "-o", str(out), str(DATA / "cpu_timed.py"), "12")
    assert res.returncode == 0, res.stderr
    data = json.loads(gzip.decompress(out.read_bytes()))
    steps = sorted(
        int(e["name"].split("#")[1])
        for e in data["traceEvents"]
        if e.get("cat") == "user_annotation" and str(e.get("name", "")).startswith("ProfilerStep#")
    )
    # ~0.1 s steps and a 0.4 s window: a handful of steps, neither the first (the
    # profiler warms up before the window) nor the last ones.
    assert steps and steps[0] >= 1 and steps[-1] <= 10 and 2 <= len(steps) <= 6, steps
    assert data["tracelens"]["window"]["limits"]["window_s"] == [0.35, 0.75]
    rec = data["tracelens"]["window"]["recorded"]
    assert rec["t_start"] == pytest.approx(0.35, abs=0.1) and rec["t_end"] == pytest.approx(0.75, abs=0.15)


@pytest.mark.slow
@needs_torch
def test_script_with_its_own_profiler_does_not_crash(tmp_path: Path) -> None:
    res = capture(tmp_path, "--no-report", "-o", str(tmp_path / "p.json.gz"), str(DATA / "uses_profiler.py"))
    assert res.returncode == 0, res.stderr[-2000:]
    assert "inner profiler done" in res.stdout and "torch.profiler itself" in res.stderr
    assert "Traceback" not in res.stderr


@pytest.mark.slow
@needs_torch
def test_relative_output_survives_chdir_and_module_args(tmp_path: Path) -> None:
    res = capture(tmp_path, "--no-report", "-o", "rel/out.json.gz", str(DATA / "chdir_away.py"), "elsewhere")
    assert res.returncode == 0, res.stderr[-2000:]
    assert (tmp_path / "rel" / "out.json.gz").exists()
    pkg = tmp_path / "mypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "__main__.py").write_text("import sys\nprint('ARGS', sys.argv[1:])\nsys.exit(4)\n")
    res = capture(tmp_path, "--no-report", "-o", "m.json.gz", "-m", "mypkg", "a", "--", "--flag")
    assert res.returncode == 4, res.stderr[-2000:]
    assert "ARGS ['a', '--flag']" in res.stdout or "ARGS ['a', '--', '--flag']" in res.stdout


@pytest.mark.slow
def test_power_throttle_reads_held_counters(tmp_path: Path) -> None:
    """Counter tracks hold their value until the next sample; a trace that writes only
    changes (as trace_file does) must give the same answer as one with every sample."""
    from tracelens.analyzers import power_throttle
    from tracelens.derive.context import AnalysisContext

    src = sample("power_gemm")
    data = json.loads(gzip.decompress(src.read_bytes()))
    last: dict[str, object] = {}
    kept = []
    for e in data["traceEvents"]:
        if e.get("ph") == "C":
            value = json.dumps(e["args"])
            if last.get(e["name"]) == value:
                continue
            last[e["name"]] = value
        kept.append(e)
    assert len(kept) < len(data["traceEvents"])
    data["traceEvents"] = kept
    held = tmp_path / "held.json.gz"
    held.write_bytes(gzip.compress(json.dumps(data).encode()))

    def evidence(path: Path) -> dict[str, object]:
        (f,) = power_throttle.analyze(AnalysisContext(load_trace(path)))
        return {e.id: e.value for e in f.evidence}

    full, dedup = evidence(src), evidence(held)
    for key in ("sm_clock_busy_mhz", "power_busy_w", "limited_share"):
        assert float(dedup[key]) == pytest.approx(float(full[key]), rel=0.01), key


# -- issue 12: bounded by default, never lost, exit codes -----------------------------


def _sigint_as_python_has_it() -> None:
    """A test run started in the background by a shell (`pytest &`) ignores SIGINT, and so
    would the capture and its script (as `python script.py` would): give them the
    default, so that the SIGINT the test sends is Ctrl-C."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _meta(path: Path) -> dict[str, Any]:
    meta: dict[str, Any] = json.loads(gzip.decompress(path.read_bytes()))["tracelens"]
    return meta


def _steps_in(path: Path) -> list[int]:
    data = json.loads(gzip.decompress(path.read_bytes()))
    return sorted(
        {
            int(e["name"].split("#")[1])
            for e in data["traceEvents"]
            if str(e.get("name", "")).startswith("ProfilerStep#")
        }
    )


@pytest.mark.slow
@needs_torch
def test_default_records_a_bounded_steady_state(tmp_path: Path) -> None:
    """40 training steps: the default skips 5, records 20, says so, and leaves no
    temporary folder; the profiler's USDT lines go to the log, not the output."""
    out = tmp_path / "d.json.gz"
    res = capture(tmp_path, "--no-report", "-o", str(out), str(DATA / "cpu_train.py"), "40")
    assert res.returncode == 0, res.stderr[-2000:]
    assert "recording steps 5-24 after a warm-up" in res.stderr  # the limits, printed
    assert "USDT" not in res.stderr + res.stdout and "profiler_start" in (tmp_path / "d.capture.log").read_text()
    meta = _meta(out)
    rec = meta["window"]["recorded"]
    # 20 steps, or fewer when the loaded machine made 20 profiled steps last over 10 s.
    assert (rec["kind"], rec["first_step"]) == ("steps", 5) and rec["reason"] in ("20 steps", "10 s"), rec
    assert rec["reason"] == "10 s" or rec["last_step"] == 25
    assert _steps_in(out)[0] == 5 and _steps_in(out)[-1] in (rec["last_step"] - 1, rec["last_step"]), _steps_in(out)
    assert meta["steps_marked"] == 40 and meta["step_source"] == "optimizer"
    assert not capture_state_folders(out)  # other captures may run beside this one (pytest -n)


@pytest.mark.slow
@needs_torch
def test_forward_marks_bound_an_inference_loop_and_max_events_cuts(tmp_path: Path) -> None:
    """No optimizer: outermost nn.Module calls are the steps. --max-events cuts the
    trace at a step boundary and says so."""
    out = tmp_path / "i.json.gz"
    res = capture(tmp_path, "--no-report", "--max-events", "300", "-o", str(out), str(DATA / "cpu_infer.py"), "40")
    assert res.returncode == 0, res.stderr[-2000:]
    meta = _meta(out)
    assert meta["step_source"] == "forward" and meta["steps_marked"] == 40
    assert meta["window"]["recorded"]["first_step"] == 5
    assert meta["recorded"]["dropped_events"] > 0 and "--max-events 300" in res.stderr
    steps = _steps_in(out)
    assert steps[0] == 5 and len(steps) < 20, steps


@pytest.mark.slow
@needs_torch
def test_steps_past_the_end_leave_no_empty_trace(tmp_path: Path) -> None:
    """Nothing recorded: no trace of nothing (issue 29), and the message says why."""
    out = tmp_path / "late.json.gz"
    res = capture(tmp_path, "--steps", "50-60", "-o", str(out), str(DATA / "cpu_train.py"), "8")
    assert res.returncode == 0, res.stderr[-2000:]
    assert "marked 8 steps, so --steps 50-60 recorded nothing" in res.stderr
    assert "no trace written, so there is nothing to report" in res.stderr and "Traceback" not in res.stderr
    assert not out.exists()


@pytest.mark.slow
@needs_torch
@pytest.mark.parametrize(
    ("script", "args", "code"),
    [
        ("syntax_error.py", [], 1),
        ("missing_module.py", [], 1),
        ("plain_help.py", ["--help"], 0),
        ("plain_help.py", ["--bogus"], 2),
    ],
)
def test_python_exit_codes_when_the_script_never_ran_torch(
    tmp_path: Path, script: str, args: list[str], code: int
) -> None:
    path = DATA / script
    if script == "syntax_error.py":  # written here: a file of it would trip the linters
        path = tmp_path / script
        path.write_text('print("before")\ndef broken(:\n    pass\n')
    expected = subprocess.run([sys.executable, str(path), *args], capture_output=True, text=True)
    assert expected.returncode == code
    res = capture(tmp_path, "-o", str(tmp_path / "x.json.gz"), str(path), *args)
    assert res.returncode == code, res.stderr[-2000:]
    assert "internal error" not in res.stderr and "nothing to report" in res.stderr
    assert not (tmp_path / "x.json.gz").exists()  # nothing was recorded: no empty trace


@pytest.mark.slow
@needs_torch
@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
def test_signals_keep_the_trace(tmp_path: Path, sig: str) -> None:
    """What `timeout`, Slurm and docker send (SIGTERM), and Ctrl-C, in the default
    window: the trace of what ran is written, and the exit code is the shell's."""
    import signal
    import time

    out = tmp_path / "sig.json.gz"
    proc = subprocess.Popen(
        argv("capture", "--no-report", "-o", out, DATA / "cpu_forever.py"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        preexec_fn=_sigint_as_python_has_it,
    )
    assert proc.stdout is not None
    deadline = time.time() + 120
    while time.time() < deadline and "started" not in proc.stdout.readline():
        pass
    time.sleep(1.0)
    proc.send_signal(getattr(signal, sig))
    _, err = proc.communicate(timeout=120)
    code = 143 if sig == "SIGTERM" else 130
    assert proc.returncode == code, err[-2000:]
    assert out.exists() and "Traceback" not in err
    meta = _meta(out)
    assert meta["exit_code"] == code and meta["recorded"]["ops"] > 0


@pytest.mark.slow
@needs_torch
def test_all_threads_are_recorded(tmp_path: Path) -> None:
    import torch

    from tracelens.capture.runner import all_threads_config

    if all_threads_config(torch) is None:
        pytest.skip("this torch has no profile_all_threads")
    out = tmp_path / "th.json.gz"
    res = capture(tmp_path, "--all", "--no-report", "-o", str(out), str(DATA / "cpu_threads.py"))
    assert res.returncode == 0, res.stderr[-2000:]
    data = json.loads(gzip.decompress(out.read_bytes()))
    mm = [e for e in data["traceEvents"] if e.get("name") == "aten::mm"]
    assert len(mm) == 100 and len({e["tid"] for e in mm}) == 4
    assert data["tracelens"]["all_threads"] is True


@pytest.mark.slow
@needs_torch
def test_memory_capture_keeps_the_allocator_events(tmp_path: Path) -> None:
    """torch's all-threads mode drops [memory] events; --memory must still record them."""
    out = tmp_path / "mem.json.gz"
    res = capture(tmp_path, "--all", "--memory", "--no-report", "-o", str(out), str(DATA / "cpu_train.py"), "3")
    assert res.returncode == 0, res.stderr[-2000:]
    data = json.loads(gzip.decompress(out.read_bytes()))
    assert sum(e.get("name") == "[memory]" for e in data["traceEvents"]) > 10
    assert data["tracelens"]["all_threads"] is False
    assert len(load_trace(out).memory) > 10


def test_malformed_export_is_salvaged(tmp_path: Path) -> None:
    """A broken byte in one event and a cut-off end (as in the 2.2 GB export of issue
    12): the readable events are kept and the note says what happened."""
    src = sample("host_sync_mask")
    good = gzip.decompress(src.read_bytes())
    n_good = len(json.loads(good)["traceEvents"])
    i = good.find(b'"aten::nonzero"')
    bad = good[:i] + b'"aten::non\x01zero' + good[i + 15 :]
    raw = tmp_path / "bad.json"
    raw.write_bytes(bad[: int(len(bad) * 0.9)])
    stats = finish_trace(raw, tmp_path / "fixed.json.gz", None, {"notes": []})
    assert "malformed" in stats.salvage_note
    data = json.loads(gzip.decompress(stats.path.read_bytes()))
    kept = len(data["traceEvents"])
    assert 0.8 * n_good < kept < n_good and data["tracelens"]["recorded"]["salvaged"] is True
    m = load_trace(stats.path)
    assert len(m.kernels()) > 0


# -- the H200 captures (sample_traces/capture_*.pt.trace.json.gz; no GPU needed) -------

#: Python files of torch.compile's compiler (not its runtime): none may be in the window.
COMPILER_FILES = ("torch/_dynamo/convert_frame.py", "torch/_inductor/compile_fx.py", "torch/_inductor/codegen/")


@pytest.mark.parametrize(
    ("name", "source"),
    [("capture_mask_sum", "explicit"), ("capture_train_loader", "optimizer"), ("capture_compile", "forward")],
)
def test_h200_captures_hold_steps_5_to_24(name: str, source: str) -> None:
    """`tracelens capture` with the default window on the H200: each recorded steps 5-24
    of its script (explicit marks, optimizer steps, outermost module calls)."""
    path = SAMPLES / f"{name}.pt.trace.json.gz"
    if not path.exists():
        pytest.skip(f"{path.name} not committed")
    data = json.loads(gzip.decompress(path.read_bytes()))
    meta = data["tracelens"]
    assert meta["gpu"] == "NVIDIA H200" and meta["step_source"] == source and meta["all_threads"] is True
    rec = meta["window"]["recorded"]
    assert (rec["kind"], rec["first_step"], rec["last_step"], rec["reason"]) == ("steps", 5, 25, "20 steps")
    steps = sorted(
        {int(e["name"][13:]) for e in data["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#")}
    )
    assert steps == list(range(5, 25))
    frames = [e["name"] for e in data["traceEvents"] if e.get("cat") == "python_function"]
    assert not [f for f in frames if f.startswith(COMPILER_FILES)]  # the first compile is outside
    m = load_trace(path)
    assert len(m.steps) == 20 and len(m.kernels()) > 0


def test_h200_dataloader_capture_has_every_threads_ops() -> None:
    path = SAMPLES / "capture_train_loader.pt.trace.json.gz"
    if not path.exists():
        pytest.skip("not committed")
    data = json.loads(gzip.decompress(path.read_bytes()))
    ops = [e for e in data["traceEvents"] if e.get("cat") in ("cpu_op", "user_annotation")]
    by_tid: dict[object, set[str]] = {}
    for e in ops:
        by_tid.setdefault(e["tid"], set()).add(e["name"])
    # the main thread (optimizer), autograd's backward thread and the pin-memory thread
    assert len(by_tid) >= 3
    main = next(t for t, names in by_tid.items() if "Optimizer.step#AdamW.step" in names)
    assert any("aten::pin_memory" in names for t, names in by_tid.items() if t != main)


@pytest.mark.parametrize(
    ("args", "error"),
    [
        ([], "give a script, or -m MODULE"),
        (["--steps", "5-9", "--all", "x.py"], "--steps, --schedule, --window and --all are alternatives"),
        (["--window", "1:2", "--schedule", "1,1,1", "x.py"], "are alternatives"),
        (["--duration", "0", "x.py"], "--duration must be > 0"),
        (["--max-events", "0", "x.py"], "--max-events must be >= 1"),
        (["--counters-steps", "0", "x.py"], "--counters-steps must be >= 1"),
        (["--counters-backend", "nsys", "x.py"], "--counters-backend is auto, ncu or kineto"),
        (["--steps", "9-5", "x.py"], "expected 0 <= N <= M"),
        (["--schedule", "1,1,1,2", "x.py"], "REPEAT must be 1"),
    ],
)
def test_capture_usage_errors_before_anything_runs(args: list[str], error: str) -> None:
    """Each option check of `tracelens capture`, in process (typer's runner): exit 2 with
    the check's message, before a script is looked for (x.py does not exist)."""
    from typer.testing import CliRunner

    from tracelens.cli import app

    res = CliRunner().invoke(app, ["capture", *args])
    assert res.exit_code == 2, res.output
    assert error in " ".join(res.output.split()), res.output


def test_capture_limits_follow_the_options() -> None:
    """The recording's limits from --steps, --schedule, --window, --all, --duration and
    --max-events (cli/capture.py's _limits)."""
    from tracelens.capture.window import MAX_EVENTS, Mode
    from tracelens.cli.capture import _limits

    default = _limits(None, None, None, False, None, None)
    assert default.max_events == MAX_EVENTS and default.mode != Mode.ALL
    by_steps = _limits("5-9", None, None, False, None, None)
    assert (by_steps.mode, by_steps.warmup_steps, by_steps.steps, by_steps.duration_s) == (Mode.STEPS, 5, 5, None)
    by_schedule = _limits(None, "1,2,3", None, False, 4.0, 100)
    assert (by_schedule.warmup_steps, by_schedule.steps, by_schedule.duration_s) == (3, 3, 4.0)
    assert by_schedule.max_events == 100
    whole = _limits(None, None, None, True, None, None)
    assert whole.mode == Mode.ALL and whole.max_events is None and whole.steps is None
    timed = _limits(None, None, "1:3", False, None, None)
    assert timed.mode == Mode.TIME and timed.window_s == (1.0, 3.0)
