"""Issue 18: the terminal summary at 80 columns, NO_COLOR, -q and the live progress bar."""

from __future__ import annotations

import io
import os
import pty
import re
import subprocess
import time
from pathlib import Path

import pytest
from support.cli import argv, cli
from support.corpus import REAL_TRACES, report_of, sample

from tracelens.render.terminal import render_terminal, terminal_width, use_colour

ANSI = re.compile(r"\x1b\[")
WIDTH = 80


def traces() -> list[Path]:
    owl = [p for p in REAL_TRACES if p.name.startswith("google_owlv2")]
    return [sample("train_step"), sample("power_gemm"), sample("host_sync_mask"), *owl]


@pytest.mark.slow
@pytest.mark.parametrize("trace", traces(), ids=lambda p: p.name.split(".")[0])
def test_80_columns_no_color(trace: Path, tmp_path: Path) -> None:
    """Lines of 150-600 characters used to wrap mid-word with no indent."""
    out = cli("report", trace, "--out-dir", tmp_path, env={"NO_COLOR": "1", "COLUMNS": str(WIDTH)})
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) > 15
    too_long = [line for line in lines if len(line) > WIDTH]
    assert not too_long, too_long
    assert not ANSI.search(out.stdout + out.stderr)
    # Hanging indents: a wrapped "Fix:" goes on under its text, not at column 0.
    # (power_gemm has no primary since its power cap is the machine's, not a fix: no Fix line)
    fix = next((i for i, line in enumerate(lines) if line.startswith("  Fix: ")), None)
    assert fix is not None or "power_gemm" in trace.name
    if fix is not None:
        assert lines[fix + 1].startswith(" " * len("  Fix: ")) or lines[fix + 1] == ""
    # Continuation lines are indented; only section starts sit at column 0.
    starts = ("tracelens", "GPU busy", "Primary", "No primary", "In diagnostic", "Findings", "Reports", "NVIDIA",
              "Tesla")  # fmt: skip
    assert all(line.startswith((" ", *starts)) or not line for line in lines), lines


def test_colour_only_when_wanted(monkeypatch: pytest.MonkeyPatch) -> None:
    class TTY(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    assert use_colour(TTY()) and not use_colour(io.StringIO())
    monkeypatch.setenv("NO_COLOR", "1")
    assert not use_colour(TTY())
    rep = report_of(sample("host_sync_mask"))
    assert ANSI.search(render_terminal(rep, colour=True))
    plain = render_terminal(rep, colour=False)
    assert not ANSI.search(plain)
    # Colour never changes the layout: the same text once the codes are stripped.
    assert re.sub(r"\x1b\[[0-9;]*m", "", render_terminal(rep, colour=True)) == plain


def test_width_follows_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    rep = report_of(sample("train_step"))
    for width in (40, 60, 100):
        text = render_terminal(rep, ["reports/a-very-long-name-" + "x" * 70 + ".html"], width=width)
        assert max(len(line) for line in text.splitlines()) <= width
    monkeypatch.setenv("COLUMNS", "132")
    assert terminal_width(io.StringIO()) == 120  # capped: prose past that is hard to read
    monkeypatch.delenv("COLUMNS")
    assert terminal_width(io.StringIO()) == WIDTH  # not a terminal: 80


@pytest.mark.slow
def test_quiet_prints_nothing(tmp_path: Path) -> None:
    """-q used to silence the summary but not the progress lines."""
    slow = [p for p in REAL_TRACES if p.name.startswith("google_owlv2")] or [sample("plain_hf_generate")]
    out = cli("report", slow[0], "--out-dir", tmp_path, "-q")
    assert out.returncode == 0 and out.stdout == "" and out.stderr == "", out.stderr


@pytest.mark.slow
@pytest.mark.skipif(os.name != "posix", reason="needs a pty")
def test_live_progress_bar_on_a_terminal(tmp_path: Path) -> None:
    """On a terminal, stderr shows a bar that moves during the load and the analysis
    (not a line after each stage); it is not shown when stderr is not a terminal."""
    master, slave = pty.openpty()
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "100"}
    env.pop("NO_COLOR", None)
    trace = sample("plain_hf_generate")
    proc = subprocess.Popen(
        argv("report", trace, "--json", tmp_path / "r.json"),
        stdout=subprocess.PIPE, stderr=slave, env=env,
    )  # fmt: skip
    os.close(slave)
    seen = b""
    deadline = time.time() + 240
    while time.time() < deadline:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # the child closed the pty
            break
        if not chunk:
            break
        seen += chunk
    proc.wait(timeout=60)
    os.close(master)
    assert proc.returncode == 0
    text = seen.decode("utf-8", "replace")
    assert "tracelens: " in text and ("analysing" in text or "writing the reports" in text), text[-2000:]
    assert "━" in text  # rich's bar
    # Not a terminal: no bar, no escape codes.
    out = cli("report", trace, "--json", tmp_path / "r2.json")
    assert "━" not in out.stderr and not ANSI.search(out.stderr)
