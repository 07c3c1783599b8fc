"""Cut a captured trace down to the size a committed sample may have (< 300 KB gzipped).

    python workloads/dynamism/trim_trace.py IN OUT --steps A-B [--drop-compiler-ops]

Keeps the events that lie inside ProfilerStep#A .. ProfilerStep#B (both whole), the
GPU activity their launches caused, metadata and counter samples; drops the rest (the
steps before and after, as if the profiler had recorded fewer steps). With
--drop-compiler-ops it also drops the CPU ops that run inside torch.compile's own
`(dynamo_timed)` ranges and launch nothing (the fake-tensor aten ops of tracing and
lowering, tens of thousands per compile): the compile ranges themselves, and every
runtime call and kernel, stay.
"""

from __future__ import annotations

import argparse
import gzip
import json
from bisect import bisect_right


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("src")
    p.add_argument("dst")
    p.add_argument("--steps", required=True)
    p.add_argument("--drop-compiler-ops", action="store_true")
    a = p.parse_args()
    lo, hi = (int(x) for x in a.steps.split("-"))
    with gzip.open(a.src, "rt") as fh:
        trace = json.load(fh)
    evs = trace["traceEvents"]
    steps = {
        int(e["name"][13:]): e
        for e in evs
        if e.get("ph") == "X" and e.get("cat") == "user_annotation" and e.get("name", "").startswith("ProfilerStep#")
    }
    t0 = float(steps[lo]["ts"])
    t1 = float(steps[hi]["ts"]) + float(steps[hi]["dur"])
    host_cats = {"cpu_op", "user_annotation", "cuda_runtime", "cuda_driver", "python_function"}
    kept_corr: set[int] = set()
    for e in evs:
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and t0 <= float(e.get("ts", 0)) <= t1:
            c = (e.get("args") or {}).get("correlation")
            if c is not None:
                kept_corr.add(int(c))
    compile_iv: list[tuple[float, float]] = []
    if a.drop_compiler_ops:
        compile_iv = sorted(
            (float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0)))
            for e in evs
            if e.get("ph") == "X" and str(e.get("name", "")).endswith("(dynamo_timed)")
        )
    starts = [s for s, _ in compile_iv]

    def in_compile(ts: float) -> bool:
        k = bisect_right(starts, ts) - 1
        return any(compile_iv[j][0] <= ts < compile_iv[j][1] for j in range(max(k - 64, 0), k + 1))

    out = []
    for e in evs:
        ph, cat = e.get("ph"), e.get("cat")
        if ph in ("M", "C"):
            out.append(e)
            continue
        ts = float(e.get("ts", 0))
        inside = t0 <= ts and ts + float(e.get("dur", 0) or 0) <= t1 + 1
        if cat in host_cats or cat == "ac2g" or ph == "i":
            if not inside:
                continue
            if (
                a.drop_compiler_ops
                and cat == "cpu_op"
                and not str(e.get("name", "")).endswith("(dynamo_timed)")
                and not str(e.get("name", "")).startswith(("Torch-Compiled Region", "TorchDynamo"))
                and in_compile(ts)
            ):
                continue
            out.append(e)
        else:  # GPU rows: kept when their launch is
            c = (e.get("args") or {}).get("correlation")
            if (c is not None and int(c) in kept_corr) or (c is None and inside):
                out.append(e)
    trace["traceEvents"] = out
    trace.setdefault("tracelens", {})["trimmed"] = f"trim_trace.py --steps {a.steps}" + (
        " --drop-compiler-ops" if a.drop_compiler_ops else ""
    )
    with gzip.open(a.dst, "wt", compresslevel=9) as fh:
        json.dump(trace, fh, separators=(",", ":"))


if __name__ == "__main__":
    main()
