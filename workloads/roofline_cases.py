"""roofline_cases: the roofline's known answers, captured together, plus the ceilings.

Three profiled regions (record_function names), each repeated a few times:
  * ``eager_chain``: y = gelu(x * w + b) * 0.5 + x on 64M bf16 elements, eager: five
    memory-bound passes over the data;
  * ``compiled_chain``: the same function under torch.compile: Inductor fuses it into
    one Triton kernel (one read of x, w, b, one write);
  * ``attention_fwd``: scaled_dot_product_attention forward, bf16, B=8, H=16, L=2048,
    D=128, causal and not: compute-bound flash attention.
Before profiling it measures, with CUDA events, the ceilings the roofline uses: a
device-to-device copy of 4 GiB (bytes read + written per second) and an 8192^3 bf16
matmul on random data; they are stored in the trace metadata under `tracelens_workload`.

Run (on a CUDA machine):
    python workloads/roofline_cases.py --out sample_traces
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import statistics
import tempfile

import torch
import torch.nn.functional as F


def event_ms(fn, reps: int = 10) -> float:  # type: ignore[no-untyped-def]
    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def measure_copy(dev: str) -> float:
    """Device-to-device copy of 4 GiB: bytes read + written per second."""
    src = torch.empty(1 << 30, device=dev, dtype=torch.float32)
    dst = torch.empty_like(src)
    ms = event_ms(lambda: dst.copy_(src))
    return 2 * src.numel() * 4 / (ms * 1e-3)


def measure_mm(dev: str, g: torch.Generator) -> float:
    """8192^3 bf16 matmul on random data: FLOP/s."""
    a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16, generator=g)
    b = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16, generator=g)
    ms = event_ms(lambda: torch.mm(a, b))
    return 2 * 8192**3 / (ms * 1e-3)


def chain(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return F.gelu(x * w + b) * 0.5 + x


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="sample_traces")
    args = ap.parse_args()
    dev = "cuda"
    # Ceilings (helpers, so the big buffers are freed on return).
    copy_bps = measure_copy(dev)
    g = torch.Generator(device=dev).manual_seed(0)
    mm_flops = measure_mm(dev, g)
    ceilings = {"copy_bytes_per_s": copy_bps, "bf16_mm_flops_per_s": mm_flops}
    print(f"ceilings: copy {copy_bps / 1e12:.2f} TB/s, bf16 mm {mm_flops / 1e12:.0f} TFLOP/s", flush=True)

    n = 1 << 26
    x = torch.randn(n, device=dev, dtype=torch.bfloat16, generator=g)
    w = torch.randn(n, device=dev, dtype=torch.bfloat16, generator=g)
    b = torch.randn(n, device=dev, dtype=torch.bfloat16, generator=g)
    compiled = torch.compile(chain)
    for _ in range(3):
        compiled(x, w, b)  # compile outside the profiler
    q = torch.randn(8, 16, 2048, 128, device=dev, dtype=torch.bfloat16, generator=g)
    k = torch.randn_like(q)
    v = torch.randn_like(q)
    for causal in (False, True):
        F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    torch.cuda.synchronize()
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=acts, record_shapes=True) as prof:
        for _ in range(3):
            with torch.profiler.record_function("eager_chain"):
                chain(x, w, b)
            with torch.profiler.record_function("compiled_chain"):
                compiled(x, w, b)
            for causal in (False, True):
                with torch.profiler.record_function(f"attention_fwd_causal_{causal}"):
                    F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        torch.cuda.synchronize()
        prof.add_metadata_json(
            "tracelens_workload",
            json.dumps({"workload": "roofline_cases", "torch": torch.__version__, "ceilings": ceilings}),
        )
    os.makedirs(args.out, exist_ok=True)
    dst_path = os.path.join(args.out, "roofline_cases.pt.trace.json.gz")
    with tempfile.TemporaryDirectory() as tmp:
        raw = os.path.join(tmp, "t.json")
        prof.export_chrome_trace(raw)
        with open(raw, "rb") as fin, gzip.open(dst_path, "wb", compresslevel=9) as fout:
            shutil.copyfileobj(fin, fout)
    print(f"wrote {dst_path}: {os.path.getsize(dst_path) / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
