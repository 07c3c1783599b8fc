"""`tracelens capture` on CPU (CI has torch's CPU build and no GPU), and the way NVML
samples travel inside the trace. The H200 runs are in test_capture_gpu.py."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tracelens.capture.nvml import SERIES, GpuSamples, SamplerResult
from tracelens.capture.trace_file import counter_events, finish_trace
from tracelens.model import load_trace

DATA = Path(__file__).resolve().parent / "data"


def capture(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tracelens", "capture", "--out-dir", str(tmp_path / "reports"), *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=600,
    )


needs_torch = pytest.mark.skipif(
    subprocess.run([sys.executable, "-c", "import torch"], capture_output=True).returncode != 0,
    reason="torch not installed (pip install torch==2.13.0)",
)


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
    steps = {e["name"] for e in data["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#")}
    assert {"ProfilerStep#0", "ProfilerStep#4"} <= steps  # one per optimizer.step()
    # ... and the report ran on it and says why most questions can't be answered.
    assert (tmp_path / "reports" / "t.pt.trace.html").exists()
    m = load_trace(out)
    assert len(m.steps) >= 5 and m.meta.metadata["tracelens"]["torch_version"]


@needs_torch
def test_capture_survives_an_exception(tmp_path: Path) -> None:
    out = tmp_path / "e.json.gz"
    res = capture(tmp_path, "--no-report", "-o", str(out), str(DATA / "cpu_train.py"), "4", "--raise")
    assert res.returncode == 1
    assert "RuntimeError: planted failure" in res.stderr  # the user's traceback, as python shows it
    assert "raised an exception" in res.stderr
    assert out.exists() and load_trace(out).meta.metadata["tracelens"]["exit_code"] == 1


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
    # The explicit tracelens.capture.step() wins over the optimizer hook once seen: the
    # first optimizer.step() came before it (1), then 6 explicit steps, not 12.
    assert data["tracelens"]["steps_marked"] == 7


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
    src = Path(__file__).resolve().parents[1] / "sample_traces" / "launch_bound.pt.trace.json.gz"
    raw = tmp_path / "raw.json"
    raw.write_bytes(gzip.decompress(src.read_bytes()))
    base_ns = json.loads(raw.read_bytes())["baseTimeNanoseconds"]
    samples = _fake_samples()
    samples.gpus[0].t_ns[:] = [base_ns + 1_000_000 * (i + 1) for i in range(5)]  # 1..5 ms after base
    out = finish_trace(raw, tmp_path / "with.json.gz", samples, {"tracelens_version": "test"})
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


@needs_torch
def test_ctrl_c_writes_the_trace(tmp_path: Path) -> None:
    import signal
    import time

    out = tmp_path / "int.json.gz"
    proc = subprocess.Popen(
        [sys.executable, "-m", "tracelens", "capture", "--no-report", "-o", str(out), str(DATA / "cpu_forever.py")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
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
    assert data["tracelens"]["window_s"] == [0.35, 0.75]


@needs_torch
def test_script_with_its_own_profiler_does_not_crash(tmp_path: Path) -> None:
    res = capture(tmp_path, "--no-report", "-o", str(tmp_path / "p.json.gz"), str(DATA / "uses_profiler.py"))
    assert res.returncode == 0, res.stderr[-2000:]
    assert "inner profiler done" in res.stdout and "used torch.profiler itself" in res.stderr


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


def test_power_throttle_reads_held_counters(tmp_path: Path) -> None:
    """Counter tracks hold their value until the next sample; a trace that writes only
    changes (as trace_file does) must give the same answer as one with every sample."""
    from tracelens.analyzers import power_throttle
    from tracelens.analyzers.context import AnalysisContext

    src = Path(__file__).resolve().parents[1] / "sample_traces" / "power_gemm.pt.trace.json.gz"
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
        return {m.label: m.value for m in f.evidence}

    full, dedup = evidence(src), evidence(held)
    for key in ("time-weighted SM clock while busy (MHz)", "mean power while busy (W)",
                "busy time with a limiting reason"):  # fmt: skip
        assert float(dedup[key]) == pytest.approx(float(full[key]), rel=0.01), key
