"""Reading a trace file's bytes: regular files only, gzip detected by its magic, and every
read bounded (at most MAX_JSON_BYTES of JSON, gzip output within what this machine's memory
and the file's own size field allow: model/budget.py): a decompression bomb is refused, not
unpacked. The input file is only ever read.
"""

from __future__ import annotations

import os
import re
import stat
import zlib
from pathlib import Path
from typing import BinaryIO

from tracelens.errors import TraceInputError
from tracelens.model.budget import ISIZE_SLACK_BYTES, describe, gzip_isize, json_budget
from tracelens.model.loader.stream import MAX_LEADING_BYTES, json_start_problem, read_upto

#: Lone surrogates: undecodable bytes of a path (Python's surrogateescape) or a repaired
#: `\ud800` escape. No UTF-8 output can carry them.
_SURROGATE = re.compile("[\ud800-\udfff]")


def _printable(path: str | os.PathLike[str]) -> str:
    """A path as text any UTF-8 stream can carry (undecodable bytes become U+FFFD)."""
    return _SURROGATE.sub("\ufffd", os.fspath(path))


#: How far a gzip trace may inflate is this machine's to say, not a ratio's: see
#: tracelens/model/budget.py (free memory, and the file's own ISIZE field).
#: No trace is decoded beyond this: the loader needs several times the JSON size in
#: memory, so a larger file could only end in an out-of-memory kill. The largest public
#: trace we test on is 56 MB of JSON.
MAX_JSON_BYTES = 4 * 2**30


_GZIP_MAGIC = b"\x1f\x8b"


_BOM = b"\xef\xbb\xbf"


def _open_trace(path: str | os.PathLike[str]) -> tuple[BinaryIO, str]:
    """Open a trace file for reading, or raise TraceInputError.

    Only regular files are read (a FIFO, /dev/zero or a terminal would block or never
    end), and never more than a trace can be: see budget.py and MAX_JSON_BYTES.
    """
    p = Path(path)
    shown = _printable(p)
    try:
        st = os.stat(p)
    except FileNotFoundError:
        raise TraceInputError(f"{shown}: no such file") from None
    except (OSError, ValueError) as exc:
        raise TraceInputError(f"{shown}: cannot read ({getattr(exc, 'strerror', None) or exc})") from exc
    if stat.S_ISDIR(st.st_mode):
        raise TraceInputError(f"{shown}: is a directory, not a trace file")
    if not stat.S_ISREG(st.st_mode):
        raise TraceInputError(f"{shown}: not a regular file (a pipe, device or socket); save the trace to a file first")
    if st.st_size > MAX_JSON_BYTES:
        raise TraceInputError(f"{shown}: {st.st_size:,} bytes is larger than tracelens reads ({MAX_JSON_BYTES:,})")
    try:
        # O_NONBLOCK: should the file have become a FIFO since the stat, open() must not
        # wait for a writer. Readers read one byte past the size allowed, so a file
        # growing under us is noticed rather than read forever.
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        return os.fdopen(fd, "rb"), shown
    except OSError as exc:
        raise TraceInputError(f"{shown}: cannot read ({exc.strerror or exc})") from exc


def read_trace_bytes(path: str | os.PathLike[str], notes: list[str] | None = None) -> tuple[bytes, int]:
    """Return the decompressed JSON bytes and the file's size. Raises TraceInputError."""
    fh, shown = _open_trace(path)
    try:
        with fh:
            data = read_upto(fh, MAX_JSON_BYTES + 1)
    except OSError as exc:
        raise TraceInputError(f"{shown}: cannot read ({exc.strerror or exc})") from exc
    size = len(data)
    if size > MAX_JSON_BYTES:
        raise TraceInputError(f"{shown}: larger than tracelens reads ({MAX_JSON_BYTES:,} bytes)")
    if data[:3] == _BOM:  # a UTF-8 byte-order mark some editors add
        data = data[3:]
    if data[:2] == _GZIP_MAGIC:
        data = _gunzip(data, shown, notes if notes is not None else [])
        if data[:3] == _BOM:  # a BOM inside the gzip stream
            data = data[3:]
    if not _first_byte(data):
        raise TraceInputError(f"{shown}: file is empty")
    return data, size


def _gunzip(data: bytes, shown: str, notes: list[str]) -> bytes:
    """Decompress every gzip member, within what this machine can load and what the file
    says it holds (budget.py). Whitespace or NUL padding after the last member (an
    editor's newline, a block-padded copy) is ignored and noted; anything else there
    is corruption."""
    budget, limit, by_isize = gzip_limits(shown, data[-8:])
    out: list[bytes] = []
    total = 0
    rest = data
    start: bytes | None = b""  # the first bytes, until they are known to begin a JSON document
    while True:
        inflater = zlib.decompressobj(wbits=31)
        try:
            chunk = inflater.decompress(rest, limit - total + 1)
            while chunk:
                total += len(chunk)
                out.append(chunk)
                if start is not None:
                    start += chunk[: MAX_LEADING_BYTES + 1]
                    problem = json_start_problem(start)
                    if problem is not None:
                        raise TraceInputError(f"{shown}: not a JSON trace ({problem})")
                    if start.lstrip(b" \t\r\n"):
                        start = None
                if total > limit:
                    raise TraceInputError(
                        f"{shown}: decompresses to {describe(limit, by_isize)}: not a trace (a decompression bomb?)"
                    )
                chunk = inflater.decompress(inflater.unconsumed_tail, limit - total + 1)
        except zlib.error as exc:
            raise TraceInputError(f"{shown}: truncated or corrupt gzip file ({exc})") from exc
        if not inflater.eof:
            raise TraceInputError(f"{shown}: truncated or corrupt gzip file (the compressed stream ends early)")
        rest = inflater.unused_data
        if rest[:2] == _GZIP_MAGIC:
            limit, by_isize = budget, False  # ISIZE is the last member's: only the budget holds now
            continue  # another member (concatenated gzip files are one stream)
        if rest.strip(b" \t\r\n\x00"):
            raise TraceInputError(f"{shown}: truncated or corrupt gzip file (unexpected bytes after the gzip stream)")
        if rest:
            notes.append(f"{len(rest)} bytes of padding after the gzip stream were ignored")
        return b"".join(out)


def _first_byte(data: bytes) -> bytes:
    """The first non-whitespace byte, without copying a 50 MB buffer to find it."""
    m = re.match(rb"\s*", data)
    end = m.end() if m else 0
    return data[end : end + 1]


def gzip_limits(shown: str, tail: bytes) -> tuple[int, int, bool]:
    """(the machine's budget, the first member's limit, whether that limit is the file's
    ISIZE) for a gzip file ending in `tail`; a file whose ISIZE alone is over the budget
    is refused before anything is inflated. A tail ending in a padding byte is ambiguous
    (padding after the stream, or an ISIZE whose top byte is zero): ISIZE is then not
    used, and the budget alone bounds the inflate."""
    budget = json_budget(MAX_JSON_BYTES)
    isize = gzip_isize(tail) if tail[-1:] not in (b" ", b"\t", b"\r", b"\n", b"\x00") else None
    if isize is None:
        return budget, budget, False
    if isize > budget:
        raise TraceInputError(
            f"{shown}: its gzip size field says {isize:,} bytes of JSON, more than this machine's free memory "
            f"allows a trace to reach ({budget:,} bytes): not loaded (free memory, or decompress it elsewhere)"
        )
    return budget, min(budget, isize + ISIZE_SLACK_BYTES), True
