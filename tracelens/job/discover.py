"""Which files are the ranks of a job: a folder, a glob, several files, or an fsspec URL
prefix (s3://bucket/run/, gs://..., hf://...) when the filesystem package is installed.

A rank's number comes from its trace's `distributedInfo` when the map reads it; the file
name gives a fallback here (rank3.json, rank-3.pt.trace.json.gz, trace_3.json.gz).
"""

from __future__ import annotations

import glob
import os
import re
from pathlib import Path

import msgspec

from tracelens.errors import TraceInputError
from tracelens.job.model import RankInput

#: What a trace file is called.
TRACE_SUFFIXES = (".json", ".json.gz")
#: A rank number in a file name: "rank3", "rank-3", "rank_3", "rank.3" (any case)...
_RANK_WORD = re.compile(r"rank[-_.]?(\d+)", re.IGNORECASE)
#: ...else a number standing alone before the suffix ("worker_3.json", "trace-12.pt.trace.json").
_TRAILING = re.compile(r"[-_.](\d{1,5})(?:\.pt\.trace)?\.json(?:\.gz)?$", re.IGNORECASE)
_GLOB_CHARS = re.compile(r"[*?\[]")


def is_url(text: str) -> bool:
    return "://" in text and not text.startswith("file://")


def rank_from_name(name: str) -> int | None:
    base = name.rsplit("/", 1)[-1]
    m = _RANK_WORD.search(base)
    if m:
        return int(m.group(1))
    m = _TRAILING.search(base)
    return int(m.group(1)) if m else None


def _is_trace_name(name: str) -> bool:
    return name.lower().endswith(TRACE_SUFFIXES) and not name.startswith(".")


def _natural(path: str) -> tuple[object, ...]:
    """Sort rank2 before rank10."""
    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", path))


def expand(inputs: list[str]) -> list[str]:
    """The trace files named by folders, globs, files and URL prefixes, in natural order,
    each once. Raises TraceInputError when something names nothing."""
    out: list[str] = []
    for item in inputs:
        if is_url(item):
            out.extend(_expand_url(item))
            continue
        if item.startswith("file://"):
            item = item[len("file://") :]
        p = Path(item)
        if p.is_dir():
            found = sorted(
                (str(c) for c in p.iterdir() if c.is_file() and _is_trace_name(c.name) and ".report." not in c.name),
                key=_natural,
            )
            if not found:
                raise TraceInputError(f"{item}: is a directory with no .json or .json.gz trace in it")
            out.extend(found)
        elif _GLOB_CHARS.search(item) and not p.exists():
            found = sorted((f for f in glob.glob(item) if os.path.isfile(f)), key=_natural)
            if not found:
                raise TraceInputError(f"{item}: no file matches")
            out.extend(found)
        else:
            out.append(item)  # a file, or a missing one: the loader says which
    return list(dict.fromkeys(out))


def _expand_url(url: str) -> list[str]:
    try:
        import fsspec
    except ImportError:
        raise TraceInputError(
            f"{url}: reading a URL needs fsspec (pip install fsspec and the filesystem's package)"
        ) from None
    try:
        fs, _, paths = fsspec.get_fs_token_paths(url)
        protocol = fs.protocol[0] if isinstance(fs.protocol, tuple | list) else fs.protocol
        found: list[str] = []
        for p in paths:
            if fs.isdir(p):
                found.extend(f for f in fs.find(p) if _is_trace_name(f.rsplit("/", 1)[-1]))
            elif _is_trace_name(p.rsplit("/", 1)[-1]):
                found.append(p)
    except ImportError as exc:  # the filesystem's own package (s3fs, gcsfs, huggingface_hub)
        raise TraceInputError(f"{url}: {exc}") from exc
    except (OSError, ValueError) as exc:
        raise TraceInputError(f"{url}: cannot list ({exc})") from exc
    if not found:
        raise TraceInputError(f"{url}: no .json or .json.gz trace there")
    return sorted((f"{protocol}://{f}" if "://" not in f else f for f in found), key=_natural)


def rank_inputs(files: list[str]) -> list[RankInput]:
    return [RankInput(path=f, name_rank=rank_from_name(f)) for f in files]


class _Top(msgspec.Struct):
    distributedInfo: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)


def peek_rank(path: str) -> int | None:
    """The rank in a local trace's distributedInfo, without building its model (None when
    absent or unreadable: the full read reports the problem)."""
    from tracelens.model.loader import read_trace_bytes

    try:
        data, _ = read_trace_bytes(path)
        top = msgspec.json.decode(data, type=_Top)
        if not len(top.distributedInfo):
            return None
        info = msgspec.json.decode(top.distributedInfo)
    except (TraceInputError, msgspec.MsgspecError, ValueError, RecursionError):
        return None
    rank = info.get("rank") if isinstance(info, dict) else None
    return int(rank) if isinstance(rank, int) and not isinstance(rank, bool) else None


def looks_like_ranks(inputs: list[RankInput]) -> bool:
    """Whether several files are ranks of one job: their names give distinct ranks, or
    their traces say which rank they are."""
    if len(inputs) < 2:
        return False
    named = [i.name_rank for i in inputs]
    if all(r is not None for r in named) and len(set(named)) == len(named):
        return True
    peeked = [peek_rank(i.path) if not is_url(i.path) else i.name_rank for i in inputs]
    return sum(r is not None for r in peeked) >= 2
