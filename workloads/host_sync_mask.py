"""host_sync_mask: host synchronisations from data-dependent shapes and Python branching.

What it demonstrates
    The seed post's case. Each step does a few elementwise ops on a 64M-element fp32
    tensor (~0.3 ms of GPU work on an H200), then
      * boolean-mask indexing ``y[mask]``: ``aten::index`` > ``aten::nonzero`` must learn
        the output size on the host -> ``cudaMemcpyAsync`` + ``cudaStreamSynchronize``
        (4-byte ``Memcpy DtoH (Device -> Pinned)``),
      * ``if loss.item() > 0:``: ``aten::item`` > ``aten::_local_scalar_dense`` -> another
        sync, and Python control flow that depends on a device value,
      * ``stats.tolist()`` of a 4-element tensor -> ``Memcpy DtoH (Device -> Pageable)``
        and a third sync.
    Every sync drains the queue: the CPU waits for all GPU work so far, then the GPU idles
    while the CPU launches the next kernels.

What an analyzer should find
    ~3 user-caused host syncs per ``ProfilerStep`` (nonzero, item, tolist), each
    attributed to its Python call site in this file; GPU idle gaps right after each sync;
    a GPU busy fraction clearly below ``host_sync_static.py`` for the same arithmetic.
    The fix is ``host_sync_static.py`` (where/mask multiply, device-side accumulation).

Observed in the committed capture (H200, torch 2.11.0+cu130)
    Steps ~0.71 ms (first 1.08 ms); GPU busy ~68% of the step window; 20 kernels/step;
    30 ``cudaStreamSynchronize`` (3/step), 20 ``Memcpy DtoH (Device -> Pinned)`` and 10
    ``Memcpy DtoH (Device -> Pageable)``; the largest GPU gaps (95-170 us) follow each
    step's ``.tolist()`` copy.

Run
    python workloads/host_sync_mask.py --out sample_traces
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch
from _profile import parse_args, profile_steps

NAME = "host_sync_mask"


def main() -> None:
    args = parse_args(__doc__)
    dev = args.device
    n = (1 << 26) if args.is_cuda else (1 << 18)  # 64M fp32 = 256 MiB per tensor
    steps = args.steps or 10
    warmup = args.warmup if args.warmup is not None else 2

    g = torch.Generator(device=dev).manual_seed(0)
    x = torch.randn(n, device=dev, generator=g)
    w = torch.randn(n, device=dev, generator=g)
    b = torch.randn(n, device=dev, generator=g)
    acc = torch.zeros(n, device=dev)
    thresh = 0.25
    state: dict[str, list[float]] = {}

    def step() -> None:
        y = torch.sin(x) * w + b  # a few elementwise kernels
        y = torch.nn.functional.gelu(y)
        mask = y > thresh
        sel = y[mask]  # nonzero -> sync (data-dependent size)
        loss = (sel * sel).mean()
        if loss.item() > 0:  # noqa: SIM108  (.item() -> sync; Python branch on a device value)
            z = y * 0.5 + 1.0
        else:
            z = y
        acc.mul_(0.9).add_(z)
        stats = torch.stack([z.mean(), z.amax(), z.amin(), loss]).tolist()  # -> sync (pageable DtoH)
        state["last"] = stats

    profile_steps(
        step,
        name=NAME,
        steps=steps,
        warmup=warmup,
        out_dir=args.out,
        device=dev,
        metadata={"elements": n, "dtype": "float32"},
    )
    print(f"[{NAME}] last stats: {[round(v, 4) for v in state['last']]}")


if __name__ == "__main__":
    main()
