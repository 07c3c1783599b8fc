"""The few machine constants the replay's transforms (tracelens/derive/transforms) use, measured
on this GPU without the profiler. Prints one JSON object.

    python workloads/replay_constants.py > constants.json

- pin_gbps: torch.Tensor.pin_memory() of a 19 MB fp32 batch on the host (what pinning on
  the training thread costs);
- h2d_pageable_gbps / h2d_pinned_gbps: `.to("cuda")` from pageable memory and from pinned
  memory with non_blocking=True (CUDA events);
- graph_launch_us: host time of one cudaGraphLaunch of a 200-kernel graph (perf_counter,
  no sync between replays), and graph_kernel_gap_us: the replay's time per kernel minus
  the kernels' own time when run eagerly back to back, over 200 tiny kernels;
- compiled_call_us: host time of one call of a torch.compile'd 5-op elementwise chain on
  a small tensor (the guard check and launch a compiled region costs per call).
"""

from __future__ import annotations

import json
import statistics
import time

import torch


def _median_ms(fn, repeats: int = 20) -> float:  # type: ignore[no-untyped-def]
    out = []
    for _ in range(repeats):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        out.append(a.elapsed_time(b))
    return statistics.median(out)


def main() -> None:
    out: dict[str, float | str] = {}
    for part in (_copies, _graph, _compiled):
        try:
            part(out)
        except Exception as exc:  # one failing measurement must not lose the others
            out[f"{part.__name__}_error"] = f"{type(exc).__name__}: {exc}"
    print(json.dumps(out, indent=1))


def _copies(out: dict[str, float | str]) -> None:
    if not torch.cuda.is_available():
        raise RuntimeError("no CUDA")
    dev = torch.device("cuda")
    out.update({"device": torch.cuda.get_device_name(), "torch": torch.__version__})
    cpu = torch.randn(32, 3, 224, 224)
    nbytes = cpu.numel() * 4
    times = []
    for _ in range(10):
        t0 = time.perf_counter()
        p = cpu.pin_memory()
        times.append(time.perf_counter() - t0)
    out["pin_gbps"] = nbytes / statistics.median(times) / 1e9
    pinned = p
    for _ in range(3):
        cpu.to(dev)
        pinned.to(dev, non_blocking=True)
    out["h2d_pageable_gbps"] = nbytes / (_median_ms(lambda: cpu.to(dev)) * 1e-3) / 1e9
    out["h2d_pinned_gbps"] = nbytes / (_median_ms(lambda: pinned.to(dev, non_blocking=True)) * 1e-3) / 1e9


def _graph(out: dict[str, float | str]) -> None:
    dev = torch.device("cuda")
    small = torch.randn(1024, device=dev)

    def tiny() -> None:
        y = small
        for _ in range(50):
            y = torch.cos(torch.sin(torch.mul(torch.add(y, 0.01), 0.999)))

    graph = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        tiny()
    torch.cuda.current_stream().wait_stream(s)
    with torch.cuda.graph(graph):
        tiny()
    for _ in range(5):
        graph.replay()
    torch.cuda.synchronize()
    n = 50
    t0 = time.perf_counter()
    for _ in range(n):
        graph.replay()
    host = (time.perf_counter() - t0) / n
    torch.cuda.synchronize()
    out["graph_launch_us"] = host * 1e6
    replay_ms = _median_ms(graph.replay)
    out["graph_replay_us"] = replay_ms * 1e3
    out["graph_kernels"] = 200
    out["graph_us_per_kernel"] = replay_ms * 1e3 / 200


def _compiled(out: dict[str, float | str]) -> None:
    small = torch.randn(1024, device="cuda")

    def chain(t: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(t * 1.5 + 0.5) * 0.5 + 1.0

    compiled = torch.compile(chain)
    for _ in range(3):
        compiled(small)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(200):
        compiled(small)
    out["compiled_call_us"] = (time.perf_counter() - t0) / 200 * 1e6
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(200):
        chain(small)
    out["eager_chain_call_us"] = (time.perf_counter() - t0) / 200 * 1e6
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
