"""The command line: outputs, bad input (one clear line, exit 2, no traceback), and
that the input is never modified."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import sample

PY = sys.executable


def run(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PY, "-m", "tracelens", *map(str, args)], capture_output=True, text=True, cwd=cwd, timeout=300
    )


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_help_teaches() -> None:
    out = run("--help")
    assert out.returncode == 0
    assert "tracelens report trace.json.gz" in out.stdout and "tracelens capture train.py" in out.stdout
    sub = run("report", "--help")
    assert sub.returncode == 0 and "--markdown" in sub.stdout and "--json" in sub.stdout


def test_default_outputs_go_to_reports_dir(tmp_path: Path) -> None:
    trace = sample("host_sync_mask")
    before = digest(trace)
    out = run("report", trace, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    stem = "host_sync_mask.pt.trace"
    for ext in ("html", "md", "json"):
        assert (tmp_path / "reports" / f"{stem}.{ext}").stat().st_size > 500
    assert "Primary bottleneck" in out.stdout and "host_sync" in out.stdout
    assert digest(trace) == before  # the input is only read
    # No temp files left behind by the atomic writes.
    assert not [p for p in (tmp_path / "reports").iterdir() if p.name.startswith(".")]


def test_explicit_outputs_only(tmp_path: Path) -> None:
    out = run("report", sample("launch_bound"), "--json", tmp_path / "r.json", "-q")
    assert out.returncode == 0, out.stderr
    assert out.stdout == ""
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["summary"]["primary"] == "launch_overhead"
    assert not (tmp_path / "reports").exists()


BAD_INPUTS = {
    "not_json.json": b"this is not json at all\n",
    "empty.json": b"",
    "no_events.json": b'{"schemaVersion": 1, "deviceProperties": []}',
    "list_of_numbers.json": b"[1, 2, 3]",
    # A Chrome trace from another tool (no PyTorch ops, runtime calls or kernels).
    "other_tool.json": json.dumps(
        {"traceEvents": [{"ph": "X", "name": "v8.compile", "cat": "v8", "pid": 1, "tid": 1, "ts": 1, "dur": 5}]}
    ).encode(),
    "empty_events.json": b'{"traceEvents": []}',
    "scalar.json": b"42",
}


@pytest.mark.parametrize("name", sorted(BAD_INPUTS))
def test_bad_input_one_line_exit_2(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    path.write_bytes(BAD_INPUTS[name])
    before = digest(path)
    out = run("report", path, "--json", tmp_path / "out.json")
    assert out.returncode == 2, (out.returncode, out.stderr)
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tracelens: error:"), out.stderr
    assert "Traceback" not in out.stderr
    assert digest(path) == before
    assert not (tmp_path / "out.json").exists()


def test_truncated_gzip(tmp_path: Path) -> None:
    data = sample("host_sync_mask").read_bytes()
    path = tmp_path / "cut.json.gz"
    path.write_bytes(data[: len(data) // 2])
    out = run("report", path, "--json", tmp_path / "o.json")
    assert out.returncode == 2 and "gzip" in out.stderr and len(out.stderr.strip().splitlines()) == 1


def test_truncated_json(tmp_path: Path) -> None:
    raw = gzip.decompress(sample("host_sync_mask").read_bytes())
    path = tmp_path / "cut.json"
    path.write_bytes(raw[: len(raw) // 3])
    out = run("report", path, "--json", tmp_path / "o.json")
    assert out.returncode == 2 and "truncated" in out.stderr.lower(), out.stderr


def test_directory_and_missing_file(tmp_path: Path) -> None:
    out = run("report", tmp_path)
    assert out.returncode == 2 and "directory" in out.stderr
    out = run("report", tmp_path / "nope.json.gz")
    assert out.returncode == 2 and "no such file" in out.stderr


def test_unwritable_output_is_one_line(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    out = run("report", sample("launch_bound"), "--json", blocker / "sub" / "r.json")
    assert out.returncode == 3, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr


@pytest.mark.skipif(os.name != "posix", reason="posix permissions")
def test_read_only_input_is_fine(tmp_path: Path) -> None:
    path = tmp_path / "ro.json.gz"
    path.write_bytes(sample("launch_bound").read_bytes())
    path.chmod(0o444)
    out = run("report", path, "--md", tmp_path / "r.md", "-q")
    assert out.returncode == 0, out.stderr


def test_base_install_never_pulls_torch() -> None:
    """torch is only needed by `capture` (an extra); `report` must not import it."""
    import tomllib

    meta = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())["project"]
    assert not [d for d in meta["dependencies"] if d.split(">")[0].split("=")[0].strip().lower() == "torch"]
    assert meta["name"] != "tracelens"  # the PyPI name belongs to another project
    out = subprocess.run(
        [PY, "-c", "import sys, tracelens.cli, tracelens.assemble; print('torch' in sys.modules)"],
        capture_output=True,
        text=True,
    )
    assert out.stdout.strip() == "False"
