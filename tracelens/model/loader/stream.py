"""Streaming input: a trace file as decompressed chunks, and its event array as batches.

The loader never holds the whole JSON: it inflates the file in chunks (ISA-L's inflate
when `isal` is installed, about 2x zlib's speed; zlib otherwise), cuts the
`traceEvents` array at event boundaries and hands msgspec one batch at a time. What it
keeps of a batch is columns, so the JSON's bytes and the decoded events are freed as
soon as the batch is read.

A cut is only ever made just after a `}` that is followed by `,` and `{`. That need not
be an event's end (such bytes can sit inside a string or a nested object), but a wrong
cut is never read wrongly: the bytes before it are then an unterminated string or an
unclosed object, which no JSON decoder accepts, so the batch fails to decode and the cut
moves to an earlier candidate. Anything the stream cannot place (an array-format trace,
a `traceEvents` key it cannot find, an event of an unexpected type) raises `Unstreamable`
and the loader reads the file the whole-buffer way, which handles every odd input.
"""

from __future__ import annotations

import os
import re
import stat
import zlib
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO, NamedTuple, cast

import msgspec

from tracelens.errors import TraceInputError
from tracelens.model.budget import describe

try:  # ISA-L inflate: 0.14 s vs zlib's 0.31 s on a 25 MB gzip of 225 MB JSON (bench/RESULTS.md)
    from isal import isal_zlib as _inflate_mod

    _INFLATE_ERRORS: tuple[type[Exception], ...] = (zlib.error, cast("type[Exception]", _inflate_mod.error))
except ImportError:  # no wheel for this platform: the standard library's zlib
    _inflate_mod = zlib  # type: ignore[assignment,misc,unused-ignore]
    _INFLATE_ERRORS = (zlib.error,)

#: Decompressed bytes handed on at a time: a batch of 1 MB holds about 4k events, whose
#: decoded objects live while the batch is turned into columns. The loader's peak memory
#: on a 225 MB trace: 344 MB with 16 MB batches, 304 MB with 8 MB or 4 MB. On a stack-heavy
#: one (capture_generate, 43 MB of JSON, most of it python_function events, whose decoded
#: objects are ~1.5 KB each) a batch's objects are the peak (issue 30): 8 MB batches
#: peaked at 179 MB (an import-only process: 77 MB) in 0.52 s of CPU, 2 MB at 123 MB in
#: 0.45 s, 1 MB at 118 MB in 0.41 s, 0.5 MB at 117 MB in 0.43 s (smaller batches also stay
#: in the CPU's caches).
CHUNK_BYTES = 2**20
#: Bytes read from the file at a time (the first read, and each read of a plain file is
#: CHUNK_BYTES).
READ_BYTES = 4 * 2**20
#: Compressed bytes handed to the inflater at a time (about 10 MB of JSON).
GZIP_IN_BYTES = 2**20
#: How many cut candidates a batch tries before the stream gives up (each failed try
#: decodes the batch once; real traces need one).
MAX_CUT_TRIES = 8
#: How far into the file the `"traceEvents"` key may start (after deviceProperties and
#: the other leading metadata, a few KB in Kineto's files).
MAX_PREFIX_BYTES = 64 * 2**20
#: How many `]` from the end are tried as the event array's end (Kineto writes a few
#: short keys after it).
MAX_END_TRIES = 64

_GZIP_MAGIC = b"\x1f\x8b"
_BOM = b"\xef\xbb\xbf"
_WS = b" \t\r\n"
_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_raw_top_decoder = msgspec.json.Decoder(dict[str, msgspec.Raw])


#: Bytes read at a time once a file has grown past the size it had when opened.
_READ_STEP = 64 * 2**20


def read_upto(fh: BinaryIO, n: int) -> bytes:
    """At most n bytes from fh. `fh.read(n)` would reserve n bytes up front (4 GiB for
    MAX_JSON_BYTES + 1, where strict overcommit or a ulimit refuses it): this reads what
    the file holds (its size, plus one byte to see it grow), then steps of _READ_STEP."""
    try:
        left = os.fstat(fh.fileno()).st_size - fh.tell()
    except (OSError, ValueError, AttributeError):  # not a real file (io.BytesIO in a test)
        left = _READ_STEP
    step = max(left, 0) + 1
    parts: list[bytes] = []
    while n > 0:
        want = min(n, step)
        chunk = fh.read(want)
        parts.append(chunk)
        n -= len(chunk)
        if len(chunk) < want:
            break  # the end of the file (a regular file's read is short only there)
        step = _READ_STEP
    return parts[0] if len(parts) == 1 else b"".join(parts)


#: A trace's JSON starts with `{` or `[` (after whitespace and a BOM). An inflated gzip
#: stream that does not within this many bytes is refused before more is inflated: a
#: gzip of zeros or of spaces is a bomb, not a trace, and the whole-buffer reader would
#: otherwise inflate all of it before the JSON decoder said so (issue 29).
MAX_LEADING_BYTES = 2**20


def json_start_problem(prefix: bytes) -> str | None:
    """What is wrong with the start of a trace's decompressed bytes, None when it is fine
    or cannot be told yet (only whitespace so far, under MAX_LEADING_BYTES)."""
    p = prefix[3:] if prefix[:3] == _BOM else prefix
    stripped = p.lstrip(_WS)
    if stripped:
        return None if stripped[:1] in (b"{", b"[") else f"its decompressed bytes begin with {stripped[:1]!r}"
    if len(p) > MAX_LEADING_BYTES:
        return f"its decompressed bytes begin with over {MAX_LEADING_BYTES:,} bytes of whitespace"
    return None


class Unstreamable(Exception):
    """The stream cannot read this file; the whole-buffer path must."""


class _Compressed:
    """A gzip file's bytes as the inflater reads them: `view[a:b]` and `len(view)` over the
    whole file (`size` bytes), its start held and the rest read on demand with `more(n)`
    (None: all of it is held). Slices are asked for in file order, so what lies before
    the last slice's start is dropped."""

    def __init__(self, held: bytes, size: int, more: Callable[[int], bytes] | None) -> None:
        self._buf = memoryview(held)
        self._base = 0  # file offset of _buf[0]
        self._more = more
        self.size = size if more is not None else len(held)

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, where: slice) -> memoryview:
        lo = where.start or 0
        if lo - self._base >= len(self._buf) // 2 and lo > self._base:
            self._buf = memoryview(bytes(self._buf[lo - self._base :]))  # drop what was read
            self._base = lo
        if self._more is not None:
            if where.stop is None:  # the rest: to the end of the file, as it is now
                parts = [bytes(self._buf)]
                while got := self._more(_READ_STEP):
                    parts.append(got)
                self._buf, self._more = memoryview(b"".join(parts)), None
                self.size = self._base + len(self._buf)
            elif (need := min(where.stop, self.size) - (self._base + len(self._buf))) > 0:
                got = self._more(max(need, GZIP_IN_BYTES))
                self._buf = memoryview(bytes(self._buf) + got)
                if len(got) < max(need, GZIP_IN_BYTES):  # the file ended early
                    self.size = min(self.size, self._base + len(self._buf))
        hi = min(where.stop if where.stop is not None else self.size, self.size)
        return self._buf[lo - self._base : max(hi - self._base, lo - self._base)]


class Inflow:
    """The file's decompressed bytes, in pieces of about CHUNK_BYTES, BOMs removed.

    Enforces the same limits, and raises the same errors, as the whole-buffer reader:
    `limits(shown, the file's last bytes)` gives (the machine's budget, the first gzip
    member's limit, whether that is the file's ISIZE; loader.gzip_limits), `max_bytes`
    read from the file; padding after the last gzip member is noted, anything else there
    is corruption. `file_bytes` counts what was read.
    """

    def __init__(
        self,
        fh: BinaryIO,
        shown: str,
        notes: list[str],
        *,
        limits: Callable[[str, bytes], tuple[int, int, bool]],
        max_bytes: int,
    ) -> None:
        self._fh = fh
        self._shown = shown
        self._notes = notes
        self._limits = limits
        self._max = max_bytes
        self.file_bytes = 0

    def _read(self, n: int) -> bytes:
        data = read_upto(self._fh, n)
        self.file_bytes += len(data)
        if self.file_bytes > self._max:
            raise TraceInputError(f"{self._shown}: larger than tracelens reads ({self._max:,} bytes)")
        return data

    def __iter__(self) -> Iterator[bytes]:
        head = self._read(READ_BYTES)
        if head[:3] == _BOM:
            head = head[3:]
        if head[:2] != _GZIP_MAGIC:
            while head:
                yield head
                head = self._read(CHUNK_BYTES)
            return
        # gzip: a regular file is read GZIP_IN_BYTES at a time as the inflater needs it
        # (a split load's two processes each held the whole compressed file: 2 x 23.5 MB of
        # a 209 MB trace's 315 MB peak); anything else is read whole (it is 10-30x smaller
        # than the JSON).
        left = self._left()
        if left is None or left > self._max + 1 - self.file_bytes:
            data = head + self._read(self._max + 1 - self.file_bytes)
            yield from self._gunzip(_Compressed(data, len(data), None), data[-8:])
        else:
            yield from self._gunzip(_Compressed(head, len(head) + left, self._read), self._tail(head, left))

    def _tail(self, head: bytes, left: int) -> bytes:
        """The file's last 8 bytes (the gzip trailer), read without moving the file."""
        if left == 0:
            return head[-8:]
        try:
            end = os.pread(self._fh.fileno(), 8, self._fh.tell() + max(left - 8, 0))
        except (OSError, ValueError, AttributeError):
            return b""
        return (head + end)[-8:] if left < 8 else end

    def _left(self) -> int | None:
        """Bytes of a regular file after what was read, or None for anything else."""
        try:
            st = os.fstat(self._fh.fileno())
            if not stat.S_ISREG(st.st_mode):
                return None
            return max(st.st_size - self._fh.tell(), 0)
        except (OSError, ValueError, AttributeError):  # not a real file (io.BytesIO in a test)
            return None

    def _gunzip(self, data: _Compressed, tail: bytes) -> Iterator[bytes]:
        shown = self._shown
        budget, limit, by_isize = self._limits(shown, tail)
        total = 0
        # The compressed bytes are fed GZIP_IN_BYTES at a time: handing the inflater the
        # whole rest each time makes it copy that rest into `unconsumed_tail` on every
        # call, quadratic in the file (19 GB of copies for a 190 MB gzip).
        view = data
        pos = 0
        pending: bytes | memoryview = b""
        first = True
        start: bytes | None = b""  # the first bytes, until they are known to begin a JSON document
        while True:  # one gzip member per pass
            inflater = _inflate_mod.decompressobj(wbits=31)
            try:
                while not inflater.eof:
                    if not len(pending) and pos < len(view):
                        pending = view[pos : pos + GZIP_IN_BYTES]
                        pos += len(pending)
                    piece = inflater.decompress(pending, min(CHUNK_BYTES, limit - total + 1))
                    pending = inflater.unconsumed_tail
                    if piece:
                        total += len(piece)
                        if total > limit:
                            raise TraceInputError(
                                f"{shown}: decompresses to {describe(limit, by_isize)}: not a trace (a "
                                "decompression bomb?)"
                            )
                        if first and piece[:3] == _BOM:
                            piece = piece[3:]
                        first = False
                        if start is not None:
                            start += bytes(piece[: MAX_LEADING_BYTES + 1])
                            problem = json_start_problem(start)
                            if problem is not None:
                                raise TraceInputError(f"{shown}: not a JSON trace ({problem})")
                            if start.lstrip(_WS):
                                start = None
                        yield piece
                    elif not len(pending) and pos >= len(view):
                        break  # no input left and nothing more came out
            except _INFLATE_ERRORS as exc:
                # The whole-buffer reader words the error (zlib's text, not ISA-L's).
                raise Unstreamable("corrupt gzip") from exc
            if not inflater.eof:
                raise Unstreamable("truncated gzip")
            after = bytes(inflater.unused_data)
            if (after + bytes(view[pos : pos + 2]))[:2] == _GZIP_MAGIC:
                pending = after  # another member (concatenated gzip files are one stream)
                limit, by_isize = budget, False  # ISIZE is the last member's: the budget alone now
                continue
            rest = after + bytes(view[pos:])
            if rest.strip(b" \t\r\n\x00"):
                raise TraceInputError(
                    f"{shown}: truncated or corrupt gzip file (unexpected bytes after the gzip stream)"
                )
            if rest:
                self._notes.append(f"{len(rest)} bytes of padding after the gzip stream were ignored")
            return


class Misaligned(Exception):
    """A split read (`EventStream(share=...)`) met a batch that did not decode where the
    first candidate cut it: the serial read, which tries earlier cuts, must redo the load."""


class Share(NamedTuple):
    """One process's part of a split load. Of the batches before the array's end, part 1
    decodes `taken` of every `of` (spread evenly: batch i when i * taken % of < taken),
    part 0 the others and the end. Both parts of one load are made with the same
    `taken`/`of`."""

    part: int
    taken: int = 1
    of: int = 2

    def owner(self, i: int) -> int:
        """The part that decodes batch i (i < the stream's `cuts`)."""
        return 1 if (i * self.taken) % self.of < self.taken else 0


class EventStream:
    """Cuts the `traceEvents` array of a JSON object into batches of whole events.

    Iterate `batches(decode)` to get `decode(batch_bytes)` for each batch (batch_bytes is
    a JSON array of events); afterwards `top_bytes` is the file with the array emptied,
    for the metadata keys, and `json_bytes` the decompressed size.

    `share=Share(part, ...)` reads one share of a split load: two processes each run the
    same stream over the same file, and batch i (counted in `cuts`) is decoded only by the
    process whose `part` is `share.owner(i)`; the last batch (the array's end) only by
    part 0 (which also puts the shares together).
    Without decoding, a share cannot try an earlier cut when one proves wrong, so each
    batch is cut at the last candidate only and any failure to decode raises `Misaligned`
    (the serial read then decides). The cuts are a function of the bytes alone, so every
    share cuts the same batches.
    """

    def __init__(self, source: Iterator[bytes], share: Share | None = None) -> None:
        self._source = source
        self._share = share
        self.json_bytes = 0
        self.top_bytes = b""
        self.cuts = 0  # batches cut before the last one
        self.last = False  # whether the array's last batch held events (and was yielded)

    def _more(self) -> bytes | None:
        piece = next(self._source, None)
        if piece is not None:
            self.json_bytes += len(piece)
        return piece

    def batches(self, decode: Callable[[bytes], Any]) -> Iterator[Any]:
        buf = b""
        while True:  # the prefix: everything up to the array's `[`
            m = _KEY.search(buf)
            if m is not None:
                break
            if len(buf) > MAX_PREFIX_BYTES:
                raise Unstreamable("no traceEvents key near the start")
            piece = self._more()
            if piece is None:
                raise Unstreamable("no traceEvents key")
            buf += piece
        prefix = buf[: m.start()]
        if prefix.lstrip(_WS)[:1] != b"{":
            raise Unstreamable("top level is not an object")
        _check_prefix(prefix)
        buf = buf[m.end() :]
        share = self._share
        done = False
        while not done:
            piece = self._more()
            if piece is None:
                done = True
                piece = b""
            elif len(buf) + len(piece) < CHUNK_BYTES // 2:
                buf += piece
                continue  # a small first piece: batch it with the next
            if done:
                if share is not None and share.part:
                    return  # the array's end is part 0's
                events_end, suffix = _array_end(buf, decode)
                if events_end is not None:
                    self.last = True
                    yield events_end
                    del events_end
                self.top_bytes = prefix + b'"traceEvents": []' + suffix
                return
            # buf (what the last cut left: part of one event, as a rule) and the new
            # piece are joined only for the batch's own copy, not into a buffer first.
            if share is None:
                out, buf = _cut(buf, piece, decode)
            else:
                mine = share.owner(self.cuts) == share.part
                out, buf = _cut_at_last(buf, piece, decode if mine else None)
                if out is _NOT_CUT:
                    continue
                self.cuts += 1
                if not mine:
                    continue
            if out is not None:
                yield out
                del out  # before the next batch is decoded: one batch alive at a time


def _check_prefix(prefix: bytes) -> None:
    """The bytes before the `"traceEvents"` key must be an object's opening and whole
    key/value pairs, or the key found is inside some value."""
    body = prefix.rstrip(_WS)
    if body.endswith(b","):
        body = body[:-1]
    elif body.lstrip(_WS) != b"{":
        raise Unstreamable("traceEvents is not a key of the top-level object")
    try:
        _raw_top_decoder.decode(body + b"}")
    except (msgspec.DecodeError, RecursionError) as exc:
        raise Unstreamable("traceEvents is not a key of the top-level object") from exc


def _is_cut(buf: bytes, comma: int) -> bool:
    """Whether `},` at comma-1 is followed by whitespace and `{`."""
    j = comma + 1
    n = len(buf)
    while j < n and buf[j] in _WS:
        j += 1
    return j < n and buf[j] == 0x7B  # "{"


def _last_cut(piece: bytes) -> int:
    """The position of the last `}` of piece that is followed by `,` and `{`, or -1."""
    pos = len(piece)
    while True:
        pos = piece.rfind(b"},", 0, pos)
        if pos < 0 or _is_cut(piece, pos + 1):
            return pos


def _cut(head: bytes, piece: bytes, decode: Callable[[bytes], Any]) -> tuple[Any, bytes]:
    """Decode the longest run of whole events at the start of head + piece; return it and
    the rest. The last candidate is looked for in piece first (it is the last of the two
    when piece has one); the joined bytes are searched only when that one fails."""
    pos = _last_cut(piece)
    if pos >= 0:
        try:
            out = decode(b"".join((b"[", head, memoryview(piece)[: pos + 1], b"]")))
        except msgspec.ValidationError as exc:
            raise Unstreamable("an event of an unexpected type") from exc
        except msgspec.DecodeError:
            pass  # inside a string after all: the tries below start again from the end
        except RecursionError as exc:
            raise Unstreamable("deep nesting") from exc
        else:
            return out, piece[pos + 2 :]
    return _cut_joined(head + piece, decode)


def _cut_joined(buf: bytes, decode: Callable[[bytes], Any]) -> tuple[Any, bytes]:
    """Decode the longest run of whole events at the start of buf; return it and the rest."""
    pos = len(buf)
    for _ in range(MAX_CUT_TRIES):
        while True:
            pos = buf.rfind(b"},", 0, pos)
            if pos < 0:
                return None, buf  # no candidate yet: wait for more bytes
            if _is_cut(buf, pos + 1):
                break
        try:
            out = decode(b"".join((b"[", memoryview(buf)[: pos + 1], b"]")))  # one copy, not two
        except msgspec.ValidationError as exc:
            raise Unstreamable("an event of an unexpected type") from exc
        except msgspec.DecodeError:
            continue  # a `},{` inside a string or a nested object: try an earlier one
        except RecursionError as exc:
            raise Unstreamable("deep nesting") from exc
        rest = buf[pos + 2 :]
        return out, rest
    raise Unstreamable("no event boundary found")


#: What `_cut_at_last` returns when buf holds no cut yet.
_NOT_CUT = object()


def _cut_at_last(head: bytes, piece: bytes, decode: Callable[[bytes], Any] | None) -> tuple[Any, bytes]:
    """A share's cut of head + piece: the events before the last candidate, decoded when
    `decode` is given (None when this share skips the batch); `_NOT_CUT` and the joined
    bytes while they hold no candidate."""
    pos = _last_cut(piece)
    if pos < 0:
        buf = head + piece
        pos = _last_cut(buf)
        if pos < 0:
            return _NOT_CUT, buf
        head, piece = b"", buf
    out = None
    if decode is not None:
        try:
            out = decode(b"".join((b"[", head, memoryview(piece)[: pos + 1], b"]")))
        except (msgspec.MsgspecError, RecursionError) as exc:
            raise Misaligned from exc
    return out, piece[pos + 2 :]


def _array_end(buf: bytes, decode: Callable[[bytes], Any]) -> tuple[Any, bytes]:
    """The last events and what follows the array: the first `]` from the right that
    closes a list of whole events ends it (a `]` further right leaves bytes after the
    list, one further left an unclosed event)."""
    pos = len(buf)
    for _ in range(MAX_END_TRIES):
        pos = buf.rfind(b"]", 0, pos)
        if pos < 0:
            break
        body = buf[:pos].strip(_WS)
        if not body:
            return None, buf[pos + 1 :]
        try:
            out = decode(b"[" + body + b"]")
        except msgspec.ValidationError as exc:
            raise Unstreamable("an event of an unexpected type") from exc
        except msgspec.DecodeError:
            continue
        except RecursionError as exc:
            raise Unstreamable("deep nesting") from exc
        return out, buf[pos + 1 :]
    raise Unstreamable("the event array's end was not found")
