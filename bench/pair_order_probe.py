"""Does a torch.profiler session slow the CUDA-event step times measured after it?

issue 25's pairs measure each side's step with CUDA events (workloads/diff_pairs.py), the
after side once the before side has been profiled in the same process. If profiling
leaves overhead behind (CUPTI callbacks, activity buffers), every after side's
unprofiled time is inflated, and the unprofiled prediction errors (all positive:
pinned_u +57%, kv_u +56%, item_u +43%) would be partly that. This probe times both
sides of a pair before any profiling, then after profiling the before side, then after
profiling the after side, in one process, and prints a table (ms per step, median of
the blocks).

    python bench/pair_order_probe.py --pairs item_u,pinned_u,kv_u --out /tmp/probe
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "workloads"))

import torch
from _profile import profile_steps
from diff_pairs import SETTLE_CALLS, STEPS, WARMUP, build, event_blocks


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", default="item_u,pinned_u,kv_u")
    ap.add_argument("--out", default="/tmp/probe")
    args = ap.parse_args()
    dev = torch.device("cuda")
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name(dev)}")
    print("| pair | side | fresh ms | after profiling before ms | after profiling both ms |")
    print("|---|---|---|---|---|")
    for pair in args.pairs.split(","):
        before, after, _meta = build(pair, dev, True)
        for fn in (before, after):
            for _ in range(SETTLE_CALLS):
                fn()
        torch.cuda.synchronize()
        t = {side: [statistics.median(event_blocks(fn, dev))] for side, fn in (("before", before), ("after", after))}
        profile_steps(before, name=f"probe_{pair}_before", steps=STEPS, warmup=WARMUP, out_dir=args.out, device=dev)
        for side, fn in (("before", before), ("after", after)):
            t[side].append(statistics.median(event_blocks(fn, dev)))
        profile_steps(after, name=f"probe_{pair}_after", steps=STEPS, warmup=WARMUP, out_dir=args.out, device=dev)
        for side, fn in (("before", before), ("after", after)):
            t[side].append(statistics.median(event_blocks(fn, dev)))
        for side in ("before", "after"):
            print(f"| {pair} | {side} | " + " | ".join(f"{v:.3f}" for v in t[side]) + " |", flush=True)
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
