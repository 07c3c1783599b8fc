"""What torch.profiler adds to the host per event it records: Python frames (with_stack)
and torch ops, on this machine.

Each case runs the same loop unprofiled and under `profile(activities=[CPU],
with_stack=...)`, counts the events of each kind in the exported trace, and divides the
extra wall time by them. The job report uses the result to say when ranks that record
very different numbers of events (one busy in Python under with_stack) are slowed by the
profiler itself by different amounts (tracelens/job/overhead.py).

    python bench/profiler_overhead.py [--json out.json]

Prints a table (machine, load, versions) and, with --json, writes the numbers.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path


def _py_loop(n: int) -> int:
    """n iterations of pure Python with one Python call and one builtin call each (what a
    tokenizer or a busy loop does: every call is a python_function event under with_stack)."""

    def f(x: int) -> int:
        return (x * 31 + 7) % 1_000_003

    acc = 0
    for _ in range(n):
        acc = f(acc)
        acc = abs(acc)
    return acc


def _op_loop(n: int) -> None:
    import torch

    a = torch.ones(16)
    for _ in range(n):
        a.mul_(1.0)


def _count(trace: Path) -> dict[str, int]:
    with open(trace, "rb") as fh:
        head = fh.read(2)
    opener = gzip.open if head == b"\x1f\x8b" else open
    with opener(trace, "rt") as fh:
        doc = json.load(fh)
    out: dict[str, int] = {}
    for e in doc.get("traceEvents", []):
        if e.get("ph") == "X":
            out[e.get("cat", "")] = out.get(e.get("cat", ""), 0) + 1
    return out


def _measure(work: Callable[[int], object], n: int, stack: bool, repeats: int) -> dict[str, float]:
    import torch
    from torch.profiler import ProfilerActivity, profile

    plain = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        work(n)
        plain.append(time.perf_counter() - t0)
    profd = []
    counts: dict[str, int] = {}
    for _ in range(repeats):
        with profile(activities=[ProfilerActivity.CPU], with_stack=stack) as prof:
            t0 = time.perf_counter()
            work(n)
            profd.append(time.perf_counter() - t0)
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "t.json"
            prof.export_chrome_trace(str(path))
            counts = _count(path)
    events = counts.get("python_function", 0) + counts.get("cpu_op", 0)
    extra = statistics.median(profd) - statistics.median(plain)
    return {
        "n": n,
        "plain_s": round(statistics.median(plain), 4),
        "profiled_s": round(statistics.median(profd), 4),
        "python_events": counts.get("python_function", 0),
        "op_events": counts.get("cpu_op", 0),
        "us_per_event": round(extra / events * 1e6, 3) if events else float("nan"),
        "torch": torch.__version__,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", type=Path)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    import torch

    torch.set_num_threads(1)
    cases = {
        "python, with_stack": _measure(_py_loop, 20_000, True, args.repeats),
        "python, no stack": _measure(_py_loop, 20_000, False, args.repeats),
        "torch ops, with_stack": _measure(_op_loop, 5_000, True, args.repeats),
        "torch ops, no stack": _measure(_op_loop, 5_000, False, args.repeats),
    }
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"machine: {platform.node()} {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"load {load:.1f}; python {platform.python_version()}, torch {torch.__version__}")  # fmt: skip
    print(f"{'case':24} {'plain s':>8} {'profiled s':>10} {'py events':>10} {'op events':>10} {'us/event':>9}")
    for name, c in cases.items():
        print(f"{name:24} {c['plain_s']:8.3f} {c['profiled_s']:10.3f} {c['python_events']:10d} {c['op_events']:10d} "
              f"{c['us_per_event']:9.2f}")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps({"load": load, "cases": cases}, indent=1))


if __name__ == "__main__":
    main()
