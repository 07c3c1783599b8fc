"""`tracelens capture` on a real NVIDIA GPU (run by hand on the H200; skipped in CI).

python -m pytest -m gpu tests/test_capture_gpu.py
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from support.cli import cli
from support.corpus import REPO

from tracelens.analyzers import power_throttle
from tracelens.derive.clocks import clock_tracks
from tracelens.derive.context import AnalysisContext
from tracelens.model import load_trace


def _has_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available()) and torch.version.hip is None


pytestmark = [pytest.mark.gpu, pytest.mark.slow]


@pytest.fixture(autouse=True)
def _cuda_present() -> None:
    """Asked when a test runs, not at import: importing torch costs seconds of every
    collection, and these tests are deselected unless -m gpu asks for them."""
    if not _has_cuda():
        pytest.skip("needs an NVIDIA GPU")


def _capture(tmp_path: Path, out: Path, *args: str) -> None:
    # --all: these check phases across the whole run, not the default steady-state window
    res = cli("capture", "--all", "--no-report", "-o", out, *args, cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]


def phase_clock(path: Path, phase: str) -> float:
    """Time-weighted SM clock over the kernels launched inside record_function(phase)."""
    m = load_trace(path)
    tracks = clock_tracks(m, m.meta.active_devices[0])
    sm = tracks["SM clock (MHz)"]
    host = m.host
    ann = host[(host["name"] == phase)].index
    assert len(ann), phase
    k = m.kernels()
    k = k[k["launch"] >= 0]
    root = host["range_root"].to_numpy()[k["launch"].to_numpy()]
    k = k[np.isin(root, ann.to_numpy())]
    mid = (k["ts"].to_numpy() + k["end"].to_numpy()) / 2
    return float(np.average(sm.at(mid), weights=k["dur"].to_numpy()))


def test_power_capped_gemm_is_reported_as_throttled(tmp_path: Path) -> None:
    out = tmp_path / "power.json.gz"
    _capture(tmp_path, out, "--no-stack", "--no-shapes", str(REPO / "workloads" / "power_gemm.py"), "--seconds", "5")
    m = load_trace(out)
    (f,) = power_throttle.analyze(AnalysisContext(m))
    assert "sw_power_cap" in f.tags
    random_mhz, zeros_mhz = phase_clock(out, "random"), phase_clock(out, "zeros")
    assert random_mhz < zeros_mhz, (random_mhz, zeros_mhz)


def test_light_idle_script_is_not_throttled(tmp_path: Path) -> None:
    out = tmp_path / "light.json.gz"
    _capture(tmp_path, out, str(REPO / "workloads" / "light_idle.py"))
    m = load_trace(out)
    assert len(m.counters) > 0
    assert power_throttle.analyze(AnalysisContext(m)) == []
