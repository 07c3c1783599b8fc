"""tracelens's integrations (tracelens.record, the Lightning callback, the transformers
TrainerCallback) on CPU: each records exactly the steps asked for, with capture's
settings, and names itself in the trace. The programs run in a subprocess
(tests/data/integrations_run.py), as a user's training run would; Lightning and
transformers tests skip when the framework is not installed."""

from __future__ import annotations

import gzip
import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tracelens.integrations.record import DEFAULT_STEPS, parse_steps

DATA = Path(__file__).resolve().parent / "data"

needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch not installed")


def run(tmp_path: Path, mode: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    trace = tmp_path / f"{mode}.pt.trace.json.gz"
    res = subprocess.run(
        [sys.executable, str(DATA / "integrations_run.py"), mode, str(trace), str(tmp_path / "reports")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=600,
    )
    return res, trace


def recorded(trace: Path) -> tuple[dict[str, Any], list[str]]:
    data = json.loads(gzip.decompress(trace.read_bytes()))
    steps = sorted(
        {e["name"] for e in data["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#")},
        key=lambda n: int(n.split("#")[1]),
    )
    return data["tracelens"], steps


def test_parse_steps() -> None:
    assert parse_steps("5-24") == (5, 24) == parse_steps(range(5, 25)) == parse_steps((5, 24))
    assert parse_steps("7") == (7, 7)
    assert DEFAULT_STEPS == (5, 24)  # the same as `tracelens capture`'s default
    for bad in ("x-3", "4-2", "-1-2", range(3, 3)):
        with pytest.raises(ValueError):
            parse_steps(bad)  # type: ignore[arg-type]


@pytest.mark.slow
def test_record_is_lazy() -> None:
    """`import tracelens` and the integrations package import no torch."""
    code = "import sys, tracelens, tracelens.integrations; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


@pytest.mark.slow
@needs_torch
def test_record_steps_then_report(tmp_path: Path) -> None:
    res, trace = run(tmp_path, "record")
    assert res.returncode == 0, res.stderr
    meta, steps = recorded(trace)
    assert steps == ["ProfilerStep#2", "ProfilerStep#3"]
    assert meta["integration"] == "record" and meta["step_source"] == "explicit"
    assert meta["with_stack"] and meta["record_shapes"] and meta["window"]["recorded"]["first_step"] == 2
    assert "recorded steps 2-3" in res.stderr
    # The report was made when the block ended, beside the trace's name.
    assert (tmp_path / "reports" / "record.pt.trace.md").exists(), res.stderr


@pytest.mark.slow
@needs_torch
def test_record_counts_optimizer_steps_without_marks(tmp_path: Path) -> None:
    res, trace = run(tmp_path, "record-optimizer")
    assert res.returncode == 0, res.stderr
    meta, steps = recorded(trace)
    assert steps == ["ProfilerStep#2", "ProfilerStep#3"] and meta["step_source"] == "optimizer"
    assert not (tmp_path / "reports").exists()  # report=False


@pytest.mark.slow
@needs_torch
def test_record_says_when_nothing_was_recorded(tmp_path: Path) -> None:
    res, trace = run(tmp_path, "record-short")
    assert res.returncode == 0, res.stderr
    assert not trace.exists()
    assert "recorded nothing: 6 steps were marked, steps 10-12 were asked for" in res.stderr


@pytest.mark.slow
@needs_torch
@pytest.mark.skipif(importlib.util.find_spec("lightning") is None, reason="lightning not installed")
def test_lightning_callback_records_batches(tmp_path: Path) -> None:
    res, trace = run(tmp_path, "lightning")
    assert res.returncode == 0, res.stderr
    meta, steps = recorded(trace)
    assert steps == ["ProfilerStep#2", "ProfilerStep#3"]
    assert meta["integration"] == "lightning" and meta["step_source"] == "explicit"


@pytest.mark.slow
@needs_torch
@pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="transformers not installed")
def test_trainer_callback_records_optimizer_steps(tmp_path: Path) -> None:
    res, trace = run(tmp_path, "trainer")
    assert res.returncode == 0, res.stderr
    meta, steps = recorded(trace)
    assert steps == ["ProfilerStep#2", "ProfilerStep#3"]
    assert meta["integration"] == "transformers"


@pytest.mark.slow
@needs_torch
def test_capture_waits_for_a_frameworks_steps(tmp_path: Path) -> None:
    """`tracelens capture` of a framework program whose set-up takes longer than the 5 s
    time-based warm-up records its steps 5-24, not 10 s of its set-up (on the H200 the
    set-up recording made a Lightning fit reach step 5 at 41 s, 14 s unprofiled)."""
    # The program with the framework and the positive control without it run at once:
    # their 7 s set-ups mostly sleep.
    runs: dict[str, tuple[Path, subprocess.Popen[str]]] = {}
    for name, extra in (("framework", []), ("plain", ["--no-framework"])):
        out = tmp_path / f"{name}.pt.trace.json.gz"
        cmd = [sys.executable, "-m", "tracelens", "capture", "--no-report", "--no-stack", "-o", str(out),
               str(DATA / "framework_setup.py"), "7", "30", *extra]  # fmt: skip
        pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
        runs[name] = (out, subprocess.Popen(cmd, text=True, cwd=tmp_path, **pipes))
    for _, proc in runs.values():
        _, stderr = proc.communicate(timeout=600)
        assert proc.returncode == 0, stderr
    meta, steps = recorded(runs["framework"][0])
    assert meta["window"]["recorded"]["kind"] == "steps", meta["window"]
    assert steps[0] == "ProfilerStep#5" and len(steps) == 20
    assert meta["window"]["superseded"] == []  # no time recording of the set-up
    # The positive control: without the framework the set-up is recorded by time (then
    # superseded by the steps).
    meta, steps = recorded(runs["plain"][0])
    assert [r["kind"] for r in meta["window"]["superseded"]] == ["time"] and len(steps) == 20
