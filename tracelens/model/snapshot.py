"""CUDA memory snapshots: the pickles `torch.cuda.memory._dump_snapshot()` writes (and
PyTorch's memory viz, pytorch.org/memory_viz, reads), as typed records.

The file is a pickle of `torch.cuda.memory._snapshot()`: a dict of plain values (dicts,
lists, strings, numbers, tuples). It is read with a restricted unpickler that resolves
no global at all: a snapshot needs none, and any pickle that names one (a class, a
function: the way a pickle runs code) is refused before anything of it is built.

The structure, as torch documents it (torch/cuda/memory.py, `_snapshot`):

- `segments[]`: the caching allocator's cudaMalloc'd segments at snapshot time
  {`device`, `address`, `total_size`, `stream`, `segment_type`, `segment_pool_id`,
  `allocated_size`, `active_size`, `blocks[]`}; a block is {`address`, `size`,
  `requested_size`, `state` (`active_allocated`, `active_awaiting_free`, `inactive`),
  `frames[]`} (snapshots before torch 2.1 put the frames under `history[0]`);
- `device_traces[device][]`: what `_record_memory_history` recorded, oldest first
  {`action` (`alloc`, `free_requested`, `free_completed`, `segment_alloc`,
  `segment_free`, `segment_map`, `segment_unmap`, `oom`, `snapshot`), `addr`, `size`,
  `stream`, `frames[]`, `time_us` (torch 2.1+), `device_free` (oom), `category` (only
  in snapshots made from a profile by torch.cuda._memory_viz.profile_plot)};
- a frame is {`filename`, `line`, `name`}, innermost first.
"""

from __future__ import annotations

import io
import os
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracelens.errors import TraceInputError

#: File name endings taken for a snapshot rather than a trace (gzip-compressed too:
#: snapshots compress about 20x, so they are kept and attached that way).
SNAPSHOT_SUFFIXES = (".pickle", ".pkl", ".pickle.gz", ".pkl.gz")
#: The most a compressed snapshot may inflate to (a larger one is a decompression bomb,
#: or a snapshot no report needs: memory viz itself loads them whole).
MAX_SNAPSHOT_BYTES = 8 * 2**30
#: Names a snapshot beside a trace may have: `<stem>` is the trace's name without its
#: `.json`/`.json.gz`. `.snapshot.pickle` is what tracelens capture and the README
#: example write; the other two are the names users give `_dump_snapshot`'s file.
BESIDE_SUFFIXES = (".snapshot.pickle", ".memory.pickle", ".pickle", ".snapshot.pickle.gz")
#: The pickle protocol opcode every protocol-2+ pickle starts with.
_PROTO = 0x80


class SnapshotRefused(TraceInputError):
    """A pickle that names a global (a class or function): never loaded."""


class _NoGlobals(pickle.Unpickler):
    """Builds only what pickle's own opcodes build (dict, list, tuple, str, bytes, int,
    float, bool, None); every global lookup is refused, so no constructor, reducer or
    function named by the file ever runs."""

    def find_class(self, module: str, name: str) -> Any:
        raise SnapshotRefused(
            f"not loaded: the pickle names {module[:80]}.{name[:80]}, which a memory snapshot never contains "
            "(a pickle runs code through such names)"
        )

    def persistent_load(self, pid: Any) -> Any:
        raise SnapshotRefused("not loaded: the pickle refers to persistent objects, which a memory snapshot never has")


def looks_like_snapshot(path: str | os.PathLike[str]) -> bool:
    """A `.pickle`/`.pkl` file (the suffix decides: the content is checked on reading)."""
    return str(path).lower().endswith(SNAPSHOT_SUFFIXES)


def snapshot_beside(trace: str | os.PathLike[str]) -> Path | None:
    """The snapshot saved next to a trace (`run.pt.trace.json.gz` -> `run.pt.trace.snapshot.pickle`,
    `run.pt.trace.pickle`, ...), or None."""
    p = Path(trace)
    name = p.name
    for ext in (".json.gz", ".json"):
        if name.endswith(ext):
            name = name[: -len(ext)]
            break
    for suffix in BESIDE_SUFFIXES:
        cand = p.with_name(name + suffix)
        if cand.is_file():
            return cand
    return None


@dataclass(frozen=True)
class Frame:
    filename: str
    line: int
    name: str


@dataclass(frozen=True)
class Block:
    address: int
    size: int
    requested_size: int
    state: str  # active_allocated, active_awaiting_free, inactive
    frames: tuple[Frame, ...]


@dataclass(frozen=True)
class Segment:
    device: int
    address: int
    total_size: int
    stream: int
    segment_type: str  # small, large
    pool_id: tuple[int, int]  # (0, 0): the default pool; else a private pool (CUDA graphs, MemPool)
    allocated_size: int
    active_size: int
    blocks: tuple[Block, ...]


@dataclass(frozen=True)
class TraceEntry:
    action: str
    addr: int
    size: int
    stream: int
    frames: tuple[Frame, ...]
    time_us: float | None
    pool_id: tuple[int, int]
    device_free: int | None = None  # oom: what CUDA still had free
    category: str | None = None  # profile-derived snapshots only


@dataclass(frozen=True)
class MemorySnapshot:
    path: str
    file_bytes: int
    segments: tuple[Segment, ...]
    traces: dict[int, tuple[TraceEntry, ...]]  # device -> entries, oldest first
    settings: dict[str, str]  # allocator_settings (PYTORCH_CUDA_ALLOC_CONF), stringified
    notes: tuple[str, ...]

    @property
    def devices(self) -> tuple[int, ...]:
        found = {s.device for s in self.segments} | {d for d, t in self.traces.items() if t}
        return tuple(sorted(found))


def _int(v: Any, default: int = 0) -> int:
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        return v
    if isinstance(v, float) and v == v and abs(v) < 2**63:
        return int(v)
    return default


def _str(v: Any) -> str:
    return v if isinstance(v, str) else "" if v is None else str(v)


def _frames(raw: Any, cache: dict[tuple[str, int, str], Frame]) -> tuple[Frame, ...]:
    if not isinstance(raw, list):
        return ()
    out: list[Frame] = []
    for f in raw:
        if not isinstance(f, dict):
            continue
        key = (_str(f.get("filename")), _int(f.get("line")), _str(f.get("name")))
        fr = cache.get(key)
        if fr is None:
            fr = cache[key] = Frame(*key)
        out.append(fr)
    return tuple(out)


def _pool(v: Any) -> tuple[int, int]:
    if isinstance(v, (tuple, list)) and len(v) == 2:
        return (_int(v[0]), _int(v[1]))
    return (0, 0)


def _block(raw: dict[str, Any], cache: dict[tuple[str, int, str], Frame]) -> Block:
    frames = raw.get("frames")
    if frames is None:  # before torch 2.1: the allocation's frames under history[0]
        hist = raw.get("history")
        frames = hist[0].get("frames") if isinstance(hist, list) and hist and isinstance(hist[0], dict) else None
    return Block(
        address=_int(raw.get("address")),
        size=_int(raw.get("size")),
        requested_size=_int(raw.get("requested_size"), _int(raw.get("size"))),
        state=_str(raw.get("state")),
        frames=_frames(frames, cache),
    )


def _entry(raw: dict[str, Any], cache: dict[tuple[str, int, str], Frame]) -> TraceEntry:
    t = raw.get("time_us")
    action = _str(raw.get("action"))
    return TraceEntry(
        action="free_completed" if action == "free" else action,  # pre-2.1 spelling
        addr=_int(raw.get("addr")),
        size=_int(raw.get("size")),
        stream=_int(raw.get("stream")),
        frames=_frames(raw.get("frames"), cache),
        time_us=float(t) if isinstance(t, (int, float)) and not isinstance(t, bool) else None,
        pool_id=_pool(raw.get("pool_id")),
        device_free=_int(raw["device_free"]) if "device_free" in raw else None,
        category=_str(raw["category"]) if isinstance(raw.get("category"), str) else None,
    )


def _gunzip(data: bytes, shown: str) -> bytes:
    import zlib

    inflater = zlib.decompressobj(wbits=31)
    try:
        out = inflater.decompress(data, MAX_SNAPSHOT_BYTES + 1)
    except zlib.error as exc:
        raise TraceInputError(f"{shown}: truncated or corrupt gzip file ({exc})") from None
    if len(out) > MAX_SNAPSHOT_BYTES:
        raise TraceInputError(f"{shown}: decompresses to more than {MAX_SNAPSHOT_BYTES:,} bytes")
    if not inflater.eof:
        raise TraceInputError(f"{shown}: truncated or corrupt gzip file (the compressed stream ends early)")
    return out


def decode_snapshot(data: bytes, shown: str = "snapshot") -> dict[str, Any]:
    """The snapshot dict from a pickle's bytes (gzip-compressed or not), or a one-line
    TraceInputError."""
    if data[:2] == b"\x1f\x8b":
        data = _gunzip(data, shown)
    if not data:
        raise TraceInputError(f"{shown}: the file is empty")
    if data[0] != _PROTO and data[:1] not in (b"(", b"}", b"]"):
        raise TraceInputError(
            f"{shown}: not a pickle (a memory snapshot is the file torch.cuda.memory._dump_snapshot writes)"
        )
    try:
        obj = _NoGlobals(io.BytesIO(data)).load()
    except SnapshotRefused as exc:
        raise SnapshotRefused(f"{shown}: {exc}") from None
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, IndexError, KeyError, OverflowError,
            MemoryError, RecursionError, AttributeError, UnicodeDecodeError) as exc:  # fmt: skip
        raise TraceInputError(f"{shown}: not a readable pickle ({type(exc).__name__})") from None
    if not isinstance(obj, dict) or "segments" not in obj:
        raise TraceInputError(
            f"{shown}: a pickle, but not a CUDA memory snapshot "
            "(no 'segments'; torch.cuda.memory._dump_snapshot writes one)"
        )
    return obj


def snapshot_from_dict(obj: dict[str, Any], path: str = "", file_bytes: int = 0) -> MemorySnapshot:
    cache: dict[tuple[str, int, str], Frame] = {}
    notes: list[str] = []
    segs: list[Segment] = []
    raw_segments = obj.get("segments")
    for s in raw_segments if isinstance(raw_segments, list) else []:
        if not isinstance(s, dict):
            continue
        blocks = tuple(_block(b, cache) for b in s.get("blocks") or [] if isinstance(b, dict))
        segs.append(
            Segment(
                device=_int(s.get("device")),
                address=_int(s.get("address")),
                total_size=_int(s.get("total_size")),
                stream=_int(s.get("stream")),
                segment_type=_str(s.get("segment_type")),
                pool_id=_pool(s.get("segment_pool_id")),
                allocated_size=_int(
                    s.get("allocated_size"), sum(b.size for b in blocks if b.state.startswith("active"))
                ),
                active_size=_int(s.get("active_size")),
                blocks=blocks,
            )
        )
    traces: dict[int, tuple[TraceEntry, ...]] = {}
    raw_traces = obj.get("device_traces")
    for dev, entries in enumerate(raw_traces if isinstance(raw_traces, list) else []):
        if isinstance(entries, list) and entries:
            traces[dev] = tuple(_entry(e, cache) for e in entries if isinstance(e, dict))
    if not any(traces.values()):
        notes.append(
            "no allocation history in the snapshot (recorded without torch.cuda.memory._record_memory_history, "
            "or with enabled='state'): only the state at snapshot time"
        )
    settings_raw = obj.get("allocator_settings")
    settings = {str(k): str(v) for k, v in settings_raw.items()} if isinstance(settings_raw, dict) else {}
    return MemorySnapshot(
        path=path, file_bytes=file_bytes, segments=tuple(segs), traces=traces, settings=settings, notes=tuple(notes)
    )


def load_snapshot(path: str | os.PathLike[str]) -> MemorySnapshot:
    """Read a memory snapshot pickle; bad input is a one-line TraceInputError."""
    p = Path(path)
    shown = p.name
    if p.is_dir():
        raise TraceInputError(f"{shown}: is a directory, not a memory snapshot")
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        raise TraceInputError(f"{shown}: no such file") from None
    except OSError as exc:
        raise TraceInputError(f"{shown}: cannot be read ({exc.strerror or type(exc).__name__})") from None
    return snapshot_from_dict(decode_snapshot(data, shown), str(p), len(data))
