"""How much JSON a gzip trace may inflate to: bounded by this machine's memory and by the
file's own size field, not by a ratio.

A ratio (the JSON at most 200x the gzip file) let a 2 MB file reach 904 MB of memory
before it was refused (issue 29): a ratio says nothing about what the machine has. Here:

- the budget is what the loader can hold in the memory available now (MemAvailable, a
  container's cgroup limit, the address-space limit), at LOAD_BYTES_PER_JSON_BYTE;
- a gzip file's last four bytes (ISIZE, RFC 1952) are its uncompressed size (mod 2^32):
  a trace that says it is larger than the budget is refused before anything is
  inflated, and one that inflates past what it says (a forged field, a bomb) is refused
  there, ISIZE_SLACK_BYTES later. ISIZE describes the last gzip member only, so once a
  second member begins (concatenated gzip files) only the budget applies.
"""

from __future__ import annotations

import os
import resource
from pathlib import Path

#: Peak memory of a load per byte of JSON, beyond the interpreter and imports: measured
#: on the 2-core machine with TRACELENS_LOAD_PROCESSES=1 as 2.7 (31 MB JSON), 1.4 (56 MB)
#: and ~1 on 200 MB+ (bench/RESULTS.md); 2.0 leaves room for the analysis after it.
LOAD_BYTES_PER_JSON_BYTE = 2.0
#: Memory a report needs whatever the trace (interpreter, numpy, pandas: ~70 MB at
#: import; the analysis and renderers on a small trace: ~150 MB in all).
BASE_BYTES = 150 * 2**20
#: Every machine may read at least this much JSON (about 200 MB of memory).
MIN_BUDGET_BYTES = 64 * 2**20
#: A gzip member may inflate this far past its ISIZE before it is refused (no
#: legitimate file does; the slack covers a BOM or padding counted differently).
ISIZE_SLACK_BYTES = 2**20
_CGROUP_V2 = Path("/sys/fs/cgroup")


def _meminfo_available() -> int | None:
    try:
        with open("/proc/meminfo", "rb") as fh:
            for line in fh:
                if line.startswith(b"MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _cgroup_room() -> int | None:
    """memory.max - memory.current of this process's cgroup (v2), else None."""
    try:
        rel = Path("/proc/self/cgroup").read_text().strip().splitlines()[0].split("::", 1)[1]
        base = _CGROUP_V2 / rel.lstrip("/")
        limit = (base / "memory.max").read_text().strip()
        if limit == "max":
            return None
        return max(int(limit) - int((base / "memory.current").read_text().strip()), 0)
    except (OSError, ValueError, IndexError):
        return None


def _address_space_room() -> int | None:
    try:
        soft, _hard = resource.getrlimit(resource.RLIMIT_AS)
    except (OSError, ValueError):
        return None
    if soft == resource.RLIM_INFINITY or soft <= 0:
        return None
    try:
        with open("/proc/self/statm", "rb") as fh:
            used = int(fh.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        used = 0
    return max(soft - used, 0)


def available_memory() -> int | None:
    """The memory this process can still take: the smallest of what the kernel says is
    available, the cgroup's room and the address-space limit's room (None: unknown)."""
    got = [x for x in (_meminfo_available(), _cgroup_room(), _address_space_room()) if x is not None]
    return min(got) if got else None


def json_budget(cap: int) -> int:
    """JSON bytes a load may reach on this machine now, at most `cap`."""
    room = available_memory()
    if room is None:
        return cap
    return int(min(cap, max(MIN_BUDGET_BYTES, (room - BASE_BYTES) / LOAD_BYTES_PER_JSON_BYTE)))


def gzip_isize(tail: bytes) -> int | None:
    """The uncompressed size a gzip file's trailer states (its last four bytes)."""
    return int.from_bytes(tail[-4:], "little") if len(tail) >= 4 else None


def describe(limit: int, isize_bound: bool) -> str:
    """Why a gzip trace was stopped at `limit` bytes, for the one-line error."""
    if isize_bound:
        return f"more than its gzip size field says ({limit - ISIZE_SLACK_BYTES:,} bytes)"
    return f"more than {limit:,} bytes, what this machine's free memory allows a trace to reach"
