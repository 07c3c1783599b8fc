"""Writing reports without ever destroying a file the user cares about.

- A regular file is written atomically (temp file in the same directory, then rename), so
  a reader never sees half a report and a failed run never clobbers the last good one.
  SIGINT is held off while the temp file exists, so Ctrl-C never leaves `*.tmp` behind.
- A symlink is written through (its target is replaced, the link stays); a non-regular
  file (a FIFO, /dev/stdout, a terminal) is written in place, never replaced by a rename.
- `-` is standard output.
- An output that is the input trace (the same file, also through links) is refused
  before any work (`check_outputs`).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import stat
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

from tracelens.errors import OutputError, UsageError

_SURROGATE = re.compile("[\ud800-\udfff]")
#: The output path that means standard output.
STDOUT = "-"


def is_stdout(path: str | os.PathLike[str]) -> bool:
    return os.fspath(path) == STDOUT


def display_path(path: str | os.PathLike[str]) -> str:
    """A path as printable text: bytes that are not UTF-8 (kept by Python as lone
    surrogates) become U+FFFD instead of failing the write to a UTF-8 stream."""
    return _SURROGATE.sub("\ufffd", os.fspath(path))


def _identity(path: str | os.PathLike[str]) -> tuple[int, int] | None:
    """(device, inode) of what `path` names after following links; None if it does not exist."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return (st.st_dev, st.st_ino)


def check_outputs(trace: str | os.PathLike[str], outputs: Sequence[str | os.PathLike[str]]) -> None:
    """Refuse (UsageError, exit 2) outputs that would overwrite the input trace, two
    outputs that are the same file, or more than one output on standard output."""
    if sum(is_stdout(p) for p in outputs) > 1:
        raise UsageError("only one report can go to standard output ('-')")
    trace_id = _identity(trace)
    seen: dict[object, str] = {}
    for out in outputs:
        if is_stdout(out):
            continue
        ident = _identity(out)
        if ident is not None and ident == trace_id:
            raise UsageError(f"{display_path(out)}: is the input trace; refusing to overwrite it with a report")
        # A new file is identified by its resolved path; an existing one by its inode
        # (two different links to one file are the same output).
        key: object = ident if ident is not None else os.path.realpath(out)
        if key in seen:
            same = "is given twice" if seen[key] == display_path(out) else f"is the same file as {seen[key]}"
            raise UsageError(f"{display_path(out)}: {same}; give each report its own path")
        seen[key] = display_path(out)


def check_writable(outputs: Sequence[str | os.PathLike[str]]) -> None:
    """Refuse (UsageError, exit 2) before any work an output that cannot be written: an
    existing directory, a path under a file, or a folder this user may not write in
    (the nearest existing one: missing folders are created)."""
    for out in outputs:
        if is_stdout(out):
            continue
        target = Path(out)
        if target.is_dir():
            raise UsageError(f"{display_path(out)}: is a directory; give a file name for the report")
        folder = target.parent
        while not folder.exists() and folder != folder.parent:
            if folder.is_symlink():  # a dangling link: mkdir would fail on it
                raise UsageError(f"{display_path(folder)}: is a broken link; cannot create the report's folder")
            folder = folder.parent
        if not folder.is_dir():
            raise UsageError(f"{display_path(folder)}: is not a directory; cannot write {display_path(out)}")
        if not os.access(folder, os.W_OK | os.X_OK):
            raise UsageError(f"{display_path(folder)}: cannot write there (permission denied)")
        if target.exists() and not target.is_file() and not os.access(target, os.W_OK):
            raise UsageError(f"{display_path(out)}: cannot write (permission denied)")


def write_report(path: str | os.PathLike[str], text: str | bytes) -> str:
    """Write one report (text, or bytes as they are); return how to name it to the user."""
    if is_stdout(path):
        try:
            if isinstance(text, bytes):
                sys.stdout.flush()
                sys.stdout.buffer.write(text)
            else:
                sys.stdout.write(text)
            sys.stdout.flush()
        except OSError as exc:
            raise OutputError(f"standard output: cannot write ({exc.strerror or exc})") from exc
        return "standard output"
    target = Path(path)
    try:
        st = os.stat(target)  # follows links: what the path finally names
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise OutputError(f"{display_path(target)}: cannot write ({exc.strerror or exc})") from exc
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise OutputError(f"{display_path(target)}: is a directory")
    if st is not None and not stat.S_ISREG(st.st_mode):
        _write_in_place(target, text)  # /dev/stdout, a FIFO, a terminal
        return display_path(path)
    if target.is_symlink():
        # Write through the link: replace the file it points to, keep the link itself.
        target = Path(os.path.realpath(target))
    write_atomic(target, text, mode=stat.S_IMODE(st.st_mode) if st is not None else None)
    return display_path(path)


def _write_in_place(target: Path, text: str | bytes) -> None:
    """A FIFO, device or terminal: open and write it; a rename would replace the node."""
    try:
        with open(target, "wb") as fh:
            fh.write(text if isinstance(text, bytes) else text.encode("utf-8", "replace"))
    except OSError as exc:
        raise OutputError(f"{display_path(target)}: cannot write ({exc.strerror or exc})") from exc


@contextlib.contextmanager
def _sigint_held() -> Iterator[None]:
    """Hold SIGINT (it is delivered when the block ends) while a temp file exists."""
    can_mask = hasattr(signal, "pthread_sigmask")
    if can_mask:
        old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        if can_mask:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)


#: Every temp file tracelens writes is named `.<name>~tl<host><pid>.<random>.tmp`, so a
#: later run can tell its own leftovers (a kill -9 during a write) from anyone else's.
TEMP_MARK = "~tl"
TEMP_SUFFIX = ".tmp"
#: Longest file name on ext4, XFS, btrfs, APFS and NTFS (bytes, 255 UTF-16 units on NTFS).
NAME_MAX_BYTES = 255
#: A temp file of another machine (a shared folder) is stale once untouched this long: a
#: write in progress touches its file every few milliseconds.
FOREIGN_STALE_S = 3600.0
_TEMP_RE = re.compile(r"^\..*~tl([0-9a-f]{4})(\d+)\.[^.]+\.tmp$")


def _host_tag() -> str:
    import socket
    import zlib

    return f"{zlib.crc32(socket.gethostname().encode()) & 0xFFFF:04x}"


def temp_prefix(name: str) -> str:
    """The mkstemp prefix of a temp file for `name` (mkstemp adds 8 random characters and
    the suffix): the name is cut so that the whole temp name fits NAME_MAX_BYTES (a
    250-character report name is legal; its temp name must be too)."""
    tag = f"{TEMP_MARK}{_host_tag()}{os.getpid()}."
    room = NAME_MAX_BYTES - len(b".") - len(tag.encode()) - 8 - len(TEMP_SUFFIX)
    stem = name.encode("utf-8", "surrogateescape")[:room].decode("utf-8", "ignore")
    return f".{stem}{tag}"


def make_temp(target: Path) -> tuple[int, str]:
    """A new temp file beside `target` (fd, path), named by temp_prefix."""
    return tempfile.mkstemp(prefix=temp_prefix(target.name), suffix=TEMP_SUFFIX, dir=str(target.parent))


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process: alive
        return True
    return True


def clean_stale_temps(folder: str | os.PathLike[str]) -> list[str]:
    """Remove tracelens's own temp files in `folder` left by a run that was killed
    mid-write (its process is gone; on another machine: untouched for an hour). Returns
    the names removed. Never fails: a folder that cannot be listed is left alone."""
    import time

    removed: list[str] = []
    here = _host_tag()
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return removed
    for entry in entries:
        m = _TEMP_RE.match(entry.name)
        if m is None:
            continue
        host, pid = m.group(1), int(m.group(2))
        try:
            if not entry.is_file(follow_symlinks=False):
                continue
            if host == here:
                if pid == os.getpid() or _pid_alive(pid):
                    continue
            elif time.time() - entry.stat(follow_symlinks=False).st_mtime < FOREIGN_STALE_S:
                continue
            os.unlink(entry.path)
            removed.append(entry.name)
        except OSError:
            continue
    return removed


def write_atomic(path: str | os.PathLike[str], text: str | bytes, mode: int | None = None) -> Path:
    """Temp file beside `path`, then rename over it. `mode` defaults to what a plain
    open() would give a new file; an existing file keeps its own."""
    target = Path(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"{display_path(target.parent)}: cannot create directory ({exc.strerror or exc})") from exc
    if target.is_dir():
        raise OutputError(f"{display_path(target)}: is a directory")
    # Encode first: a failure here (it cannot happen with errors="replace", but a
    # MemoryError can) must not leave a temp file.
    data = text if isinstance(text, bytes) else text.encode("utf-8", "replace")
    with _sigint_held():
        try:
            fd, tmp = make_temp(target)
        except OSError as exc:
            raise OutputError(f"{display_path(target.parent)}: cannot write ({exc.strerror or exc})") from exc
        try:
            os.chmod(tmp, public_mode() if mode is None else mode)
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.replace(tmp, target)
        except BaseException as exc:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            if isinstance(exc, OSError):
                raise OutputError(f"{display_path(target)}: cannot write ({exc.strerror or exc})") from exc
            raise
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


def read_trace_bytes(path: str | os.PathLike[str]) -> bytes:
    """The trace's JSON as bytes (gunzipped when it is gzip): for the annotated copy."""
    import gzip

    try:
        with open(path, "rb") as fh:
            raw = fh.read()
        return gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
    except (OSError, EOFError) as exc:
        raise OutputError(f"{display_path(path)}: cannot read the trace again ({exc})") from exc


def perfetto_bytes(path: str | os.PathLike[str], json_bytes: bytes) -> bytes:
    """gzip for a `.gz` path (Perfetto and chrome://tracing open both), else as is."""
    import gzip

    return gzip.compress(json_bytes, compresslevel=6, mtime=0) if os.fspath(path).endswith(".gz") else json_bytes
