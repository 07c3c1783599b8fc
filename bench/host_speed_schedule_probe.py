"""Which part of the workloads' profiling makes a before side's host slower?

In the fresh-process pairs (sample_traces/pairs) the before side of kv, ragged, sdpa_u and
empty_cache runs its host ops 1.4-2x slower than the after side, op for op (kv: a
ProfilerStep's host 4.4 ms vs 2.5 ms, with no wait in either), but bench/host_speed_probe.py
(build, 5 calls, a plain profiler around back-to-back steps) sees no difference (kv 2.1
vs 2.6 ms). The workload does three things the probe does not: the CUDA-event blocks
before profiling (50 more calls: kv's cache grows), the untraced warm-up, and the
profiler's schedule with prof.step() after each step. This probe runs one pair side per
fresh process in each variant and prints the host (enqueue) time of a step, median µs
over the recorded steps, from perf_counter around the call:

- none: settle + event blocks, then 8 back-to-back unprofiled steps;
- plain: settle + event blocks, then a plain profiler (shapes, stacks) around 8 steps;
- sched: settle + event blocks, then workloads/_profile.profile_steps' settings;
- sched_noevents: settle, then profile_steps' settings (no event blocks);
- sched_nostack: as sched, with_stack off.

    python bench/host_speed_schedule_probe.py --pairs kv,ragged,sdpa_u,empty_cache
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "workloads"))

VARIANTS = ("none", "plain", "sched", "sched_noevents", "sched_nostack")


def one(pair: str, side: str, variant: str) -> None:
    import torch
    from _profile import UNTRACED_WARMUP
    from diff_pairs import SETTLE_CALLS, STEPS, WARMUP, build, event_blocks
    from torch.profiler import ProfilerActivity, profile, schedule

    dev = torch.device("cuda")
    before, after, _ = build(pair, dev, True)
    fn = before if side == "before" else after
    for _ in range(SETTLE_CALLS):
        fn()
    torch.cuda.synchronize()
    gpu_ms = statistics.median(event_blocks(fn, dev)) if variant != "sched_noevents" else float("nan")
    host: list[float] = []

    def timed() -> None:
        t0 = time.perf_counter()
        fn()
        host.append((time.perf_counter() - t0) * 1e6)

    acts = [ProfilerActivity.CPU, ProfilerActivity.CUDA]
    if variant == "none":
        for _ in range(STEPS + WARMUP):
            timed()
        torch.cuda.synchronize()
        rec = host[WARMUP:]
    elif variant == "plain":
        with profile(activities=acts, record_shapes=True, with_stack=True):
            for _ in range(STEPS + WARMUP):
                timed()
            torch.cuda.synchronize()
        rec = host[WARMUP:]
    else:
        for _ in range(UNTRACED_WARMUP):
            fn()
        torch.cuda.synchronize()
        sched = schedule(wait=0, warmup=WARMUP, active=STEPS, repeat=1)
        with profile(
            activities=acts, record_shapes=True, with_stack=variant != "sched_nostack", schedule=sched
        ) as prof:
            for _ in range(WARMUP + STEPS):
                timed()
                prof.step()
            torch.cuda.synchronize()
        rec = host[WARMUP:]
    print(
        f"| {pair} | {side} | {variant} | {statistics.median(rec):.0f} | {min(rec):.0f} | {max(rec):.0f} "
        f"| {gpu_ms:.2f} |",
        flush=True,
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", default="kv,ragged,sdpa_u,empty_cache")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--one", nargs=3, metavar=("PAIR", "SIDE", "VARIANT"))
    args = ap.parse_args()
    if args.one:
        one(*args.one)
        return
    print("| pair | side | variant | host µs a step (median) | min | max | event ms a step |")
    print("|---|---|---|---|---|---|---|", flush=True)
    for pair in args.pairs.split(","):
        for side in ("before", "after"):
            for variant in args.variants.split(","):
                cmd = [sys.executable, os.path.abspath(__file__), "--one", pair, side, variant]
                subprocess.run(cmd, check=False)


if __name__ == "__main__":
    main()
