"""Before/after pairs for `tracelens diff` (issue 17), each a known change.

    python workloads/diff_pairs.py --out sample_traces          # all pairs on CUDA
    python workloads/diff_pairs.py --device cpu --out /tmp/cpu  # smoke test

Pairs (the trace names end in _before / _after):
- diff_compile: an eager chain of five elementwise passes on 1G bf16 elements, then the
  same function under torch.compile (one fused Triton kernel).
- diff_graph: 200 tiny ops on a 1024-element tensor per step, eager, then replayed from a
  CUDA graph captured once (torch.cuda.graph).
- diff_align: bf16 torch.mm with K=4095, then K=4096 (M=N=4096).
- diff_repeat: diff_compile's eager step captured a second time (the diff must say
  "within noise").
Each step's time is also measured with CUDA events outside the profiler and stored in
the trace's metadata (`event_step_ms`), the ground truth the diff is checked against.
"""

from __future__ import annotations

import torch
from _profile import parse_args, profile_steps

STEPS = 6
WARMUP = 2
EVENT_REPEATS = 20


def event_ms(fn, device: torch.device) -> float:  # type: ignore[no-untyped-def]
    """Median step time over EVENT_REPEATS with CUDA events (wall clock on the CPU)."""
    import statistics
    import time

    times = []
    for _ in range(EVENT_REPEATS):
        if device.type == "cuda":
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            torch.cuda.synchronize()
            times.append(a.elapsed_time(b))
        else:
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def run(name: str, fn, device: torch.device, out: str, meta: dict[str, object]) -> None:  # type: ignore[no-untyped-def]
    for _ in range(3):
        fn()
    meta = {**meta, "event_step_ms": event_ms(fn, device)}
    profile_steps(fn, name=name, steps=STEPS, warmup=WARMUP, out_dir=out, device=device, metadata=meta)


def main() -> None:
    args = parse_args(__doc__)
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    # 2 GiB of bf16: the eager chain (5 passes) takes ~5 ms, the fused kernel ~1 ms, both
    # longer than torch.compile's per-call host cost under the profiler (~0.9 ms with
    # stacks), so the GPU, not the profiled host, sets the step time.
    n = (1 << 30) if cuda else (1 << 14)
    dtype = torch.bfloat16 if cuda else torch.float32
    x = torch.randn(n, device=dev, dtype=dtype)
    keep: list[torch.Tensor] = [x]

    def chain(t: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(t * 1.5 + 0.5) * 0.5 + 1.0

    def eager() -> None:
        keep[0] = chain(x)

    compiled_chain = torch.compile(chain) if cuda else chain

    def compiled() -> None:
        keep[0] = compiled_chain(x)

    run("diff_compile_before", eager, dev, args.out, {"pair": "compile", "side": "eager"})
    run("diff_compile_after", compiled, dev, args.out, {"pair": "compile", "side": "compiled"})
    run("diff_repeat_before", eager, dev, args.out, {"pair": "repeat", "side": "first"})
    run("diff_repeat_after", eager, dev, args.out, {"pair": "repeat", "side": "second"})

    small = torch.randn(1024, device=dev)
    c = torch.full((1024,), 0.999, device=dev)
    out_small = [small]

    def tiny() -> None:
        y = small
        for _ in range(50):
            y = torch.cos(torch.sin(torch.mul(torch.add(y, 0.01), c)))
        out_small[0] = y

    run("diff_graph_before", tiny, dev, args.out, {"pair": "graph", "side": "eager"})
    if cuda:
        graph = torch.cuda.CUDAGraph()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            tiny()
        torch.cuda.current_stream().wait_stream(s)
        with torch.cuda.graph(graph):
            tiny()
        replay = graph.replay
    else:
        replay = tiny
    run("diff_graph_after", replay, dev, args.out, {"pair": "graph", "side": "cuda_graph"})

    m = 4096 if cuda else 256
    a = torch.randn(m, m - 1, device=dev, dtype=dtype)
    b = torch.randn(m - 1, m, device=dev, dtype=dtype)
    a2 = torch.randn(m, m, device=dev, dtype=dtype)
    b2 = torch.randn(m, m, device=dev, dtype=dtype)
    res = [a]

    def mis() -> None:
        for _ in range(4):
            res[0] = a @ b

    def ali() -> None:
        for _ in range(4):
            res[0] = a2 @ b2

    run("diff_align_before", mis, dev, args.out, {"pair": "align", "side": "K=4095"})
    run("diff_align_after", ali, dev, args.out, {"pair": "align", "side": "K=4096"})


if __name__ == "__main__":
    main()
