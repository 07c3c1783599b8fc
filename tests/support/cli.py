"""One way to run the `tracelens` command: a fresh interpreter, as a user runs it
(`python -m tracelens ...`), with its output captured as text."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

PY = sys.executable
#: Generous: a report of a large public trace on a loaded 2-core machine takes ~10 s;
#: only a hang should reach this.
TIMEOUT_S = 300


def argv(*args: str | Path) -> list[str]:
    """The command line of `tracelens ARGS...` (for Popen, signals and FIFOs)."""
    return [PY, "-m", "tracelens", *map(str, args)]


def cli(
    *args: str | Path,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    timeout: float = TIMEOUT_S,
) -> subprocess.CompletedProcess[str]:
    """Run `tracelens ARGS...` to completion; `env` is added to this process's environment."""
    full = {**os.environ, **env} if env else None
    return subprocess.run(argv(*args), capture_output=True, text=True, cwd=cwd, env=full, timeout=timeout)


def error_lines(stderr: str) -> list[str]:
    """The lines of stderr. (Progress goes to a terminal only, so a failing run's stderr
    in a pipe is its error alone: issue 29 had a loader stage line before the error.)"""
    return stderr.strip().splitlines()


def one_error_line_problem(stderr: str) -> str | None:
    """What breaks the one-error-line rule of an exit 2 (None when it holds): exactly one
    line `tracelens: error: ...`, and nothing else."""
    lines = error_lines(stderr)
    if len(lines) != 1 or not lines[0].startswith("tracelens: error: "):
        return f"exit 2 without exactly one error line: {stderr[:300]!r}"
    return None


def capture_state_folders(out: Path) -> list[Path]:
    """The supervisor state folders in the temp dir that belong to the capture writing `out`
    (found by their options.json: other captures may run beside it, under pytest -n)."""
    import contextlib
    import json
    import tempfile

    found = []
    for d in Path(tempfile.gettempdir()).glob("tracelens-capture-*"):
        with contextlib.suppress(OSError, ValueError):
            if json.loads((d / "options.json").read_text()).get("out") == str(out.resolve()):
                found.append(d)
    return found
