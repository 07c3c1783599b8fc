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
