"""Is the host's own work slower in a program that blocks on pageable copies?

The fresh-process pairs (sample_traces/pairs) show the before program's host ops 1.4-1.7x
slower than the after program's, op for op (pinned: aten::conv2d 726 vs 440 µs a step).
This probe runs the pinned pair's conv net forward after a pageable `.to()` and after a
pinned non_blocking one, in one fresh process per side, and times the forward's host
(enqueue) time with perf_counter, unprofiled and under torch.profiler (the workloads'
settings: record_shapes, with_stack), and prints a table (median µs over 30 steps).

    python bench/host_speed_probe.py          # both sides, each in its own process

`python bench/host_speed_probe.py profiled-table`: five pairs' sides under the profiler,
host time a step with the GPU drained first and back to back (GPU behind).

Then each side of six pairs (workloads/diff_pairs.py), unprofiled, in a process of its
own: the step's host time with the GPU drained before it, and back to back.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "workloads"))

STEPS = 30


def side(kind: str, stack: bool) -> None:
    import torch
    from _data import make_model
    from torch.profiler import ProfilerActivity, profile

    dev = torch.device("cuda")
    model = make_model(dev).eval()
    cpu = [torch.randn(32, 3, 224, 224) for _ in range(4)]
    src = [t.pin_memory() for t in cpu] if kind == "pinned" else cpu

    def step(i: int) -> tuple[float, float]:
        t0 = time.perf_counter()
        x = src[i % 4].to(dev, non_blocking=kind == "pinned")
        t1 = time.perf_counter()
        with torch.no_grad():
            model(x)
        t2 = time.perf_counter()
        return (t1 - t0) * 1e6, (t2 - t1) * 1e6

    for i in range(5):
        step(i)
    torch.cuda.synchronize()
    plain = [step(i) for i in range(STEPS)]
    torch.cuda.synchronize()
    acts = [ProfilerActivity.CPU, ProfilerActivity.CUDA]
    with profile(activities=acts, record_shapes=True, with_stack=stack):
        prof = [step(i) for i in range(STEPS)]
        torch.cuda.synchronize()
    for name, rows in (("unprofiled", plain), (f"profiled stack={stack}", prof)):
        copy = statistics.median(r[0] for r in rows)
        fwd = statistics.median(r[1] for r in rows)
        print(f"| {kind} | {name} | {copy:.0f} | {fwd:.0f} |", flush=True)


def _settled_side(pair: str, which: str) -> Callable[[], object]:
    """One side's step of a diff pair on CUDA, run 5 times and the GPU drained."""
    import torch
    from diff_pairs import build

    before, after, _ = build(pair, torch.device("cuda"), True)
    fn = before if which == "before" else after
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    return fn


def pair_side(pair: str, which: str) -> None:
    """A diff pair's side: its step's host (enqueue) time, the GPU drained before each
    step, and back to back (the host may run ahead), unprofiled."""
    import torch

    fn = _settled_side(pair, which)
    drained = []
    for _ in range(STEPS):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        drained.append((time.perf_counter() - t0) * 1e6)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(STEPS):
        fn()
    ahead = (time.perf_counter() - t0) * 1e6 / STEPS
    torch.cuda.synchronize()
    total = (time.perf_counter() - t0) * 1e6 / STEPS
    print(f"| {pair} | {which} | {statistics.median(drained):.0f} | {ahead:.0f} | {total:.0f} |", flush=True)


def profiled_side(pair: str, which: str) -> None:
    """A diff pair's side under torch.profiler (record_shapes, with_stack, as the workloads
    profile): the step's host time with the GPU drained before each step, and back to
    back while the GPU runs behind, from perf_counter around each call."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    fn = _settled_side(pair, which)
    acts = [ProfilerActivity.CPU, ProfilerActivity.CUDA]
    with profile(activities=acts, record_shapes=True, with_stack=True):
        drained, ahead = [], []
        for _ in range(STEPS // 3):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            fn()
            drained.append((time.perf_counter() - t0) * 1e6)
        torch.cuda.synchronize()
        for _ in range(STEPS // 3):
            t0 = time.perf_counter()
            fn()
            ahead.append((time.perf_counter() - t0) * 1e6)
        torch.cuda.synchronize()
    print(f"| {pair} | {which} | {statistics.median(drained):.0f} | {statistics.median(ahead):.0f} |", flush=True)


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "profiled":
        profiled_side(sys.argv[2], sys.argv[3])
        return
    if len(sys.argv) > 1 and sys.argv[1] == "profiled-table":
        print("| pair | side | profiled host µs a step, GPU drained first | back to back (GPU behind) |")
        print("|---|---|---|---|", flush=True)
        for pair in ("kv", "kv_u", "sdpa_u", "empty_cache", "graph"):
            for which in ("before", "after"):
                subprocess.run([sys.executable, os.path.abspath(__file__), "profiled", pair, which], check=False)
        return
    if len(sys.argv) > 2 and sys.argv[1] == "pair":
        pair_side(sys.argv[2], sys.argv[3])
        return
    if len(sys.argv) > 1:
        side(sys.argv[1], sys.argv[2] == "1")
        return
    print("| copy | run | copy call µs | forward enqueue µs |")
    print("|---|---|---|---|", flush=True)
    for kind in ("pageable", "pinned"):
        for stack in ("1", "0"):
            subprocess.run([sys.executable, os.path.abspath(__file__), kind, stack], check=True)
    print("\n| pair | side | host µs a step, GPU drained first | back to back, host | back to back, with the GPU |")
    print("|---|---|---|---|---|", flush=True)
    for pair in ("pinned", "kv", "sdpa_u", "pinned_u", "kv_u", "graph"):
        for which in ("before", "after"):
            subprocess.run([sys.executable, os.path.abspath(__file__), "pair", pair, which], check=False)


if __name__ == "__main__":
    main()
