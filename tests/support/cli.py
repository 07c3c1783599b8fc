"""One way to run the `tracelens` command: a fresh interpreter, as a user runs it
(`python -m tracelens ...`), with its output captured as text."""

from __future__ import annotations

import os
import re
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


#: A stage line of the loader (`tracelens: decoded 1,234 events (1.3 s)`): printed when a
#: load has taken over a second and stderr is no terminal, so it appears before an error
#: line on a loaded machine and not on an idle one. It is progress, not a second error.
PROGRESS_LINE = re.compile(r"^tracelens: (?!error: ).+ \(\d+\.\d s\)$")


def error_lines(stderr: str) -> list[str]:
    """The lines of stderr other than the loader's progress lines."""
    return [line for line in stderr.strip().splitlines() if not PROGRESS_LINE.match(line)]


def one_error_line_problem(stderr: str) -> str | None:
    """What breaks the one-error-line rule of an exit 2 (None when it holds): exactly one
    line `tracelens: error: ...`, beside at most the loader's progress lines."""
    lines = error_lines(stderr)
    if len(lines) != 1 or not lines[0].startswith("tracelens: error: "):
        return f"exit 2 without exactly one error line: {stderr[:300]!r}"
    return None
