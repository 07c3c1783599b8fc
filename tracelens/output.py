"""Writing reports: atomically (temp file in the same directory, then rename), so a
reader never sees half a report and a failed run never clobbers the last good one."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

from tracelens.errors import OutputError


def write_atomic(path: str | os.PathLike[str], text: str) -> Path:
    target = Path(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"{target.parent}: cannot create directory ({exc.strerror or exc})") from exc
    if target.is_dir():
        raise OutputError(f"{target}: is a directory")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=str(target.parent))
    except OSError as exc:
        raise OutputError(f"{target.parent}: cannot write ({exc.strerror or exc})") from exc
    try:
        os.chmod(tmp, public_mode())
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as fh:
            fh.write(text)
        os.replace(tmp, target)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise OutputError(f"{target}: cannot write ({exc.strerror or exc})") from exc
    return target


def public_mode() -> int:
    """The mode a plain open() would give a new file (mkstemp makes it 0600)."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def default_stem(trace_path: str | os.PathLike[str]) -> str:
    """`run.pt.trace.json.gz` -> `run.pt.trace`."""
    name = Path(trace_path).name
    for suffix in (".gz", ".json"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    return name or "trace"
