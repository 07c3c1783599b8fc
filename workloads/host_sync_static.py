"""host_sync_static: the static-shape fix of host_sync_mask.py (same arithmetic, no syncs).

What it demonstrates
    The same per-step computation as ``host_sync_mask.py`` on the same 64M-element fp32
    tensors, written so that nothing leaves the device inside the loop:
      * ``torch.where(mask, y * y, 0)`` and ``mask.sum()`` replace ``y[mask]`` (static
        shape, no ``aten::nonzero``),
      * the Python branch ``if loss.item() > 0`` becomes ``torch.where(loss > 0, ...)``,
      * the loss and the per-step statistics are accumulated in device tensors and read
        once, with a single ``.item()`` / ``.tolist()`` in the *last* profiled step.
    The CPU runs ahead of the GPU, so the launch queue stays full.

What an analyzer should find (as designed; the committed capture differs, see Observed)
    No host syncs in any step except the final read in the last ``ProfilerStep``
    (one ``aten::item`` and one ``.tolist()``); no ``aten::nonzero``; GPU busy nearly the
    whole window with only small launch gaps; per-step GPU time close to that of
    ``host_sync_mask.py`` but a much shorter step wall time. Compare the two traces to
    quantify the cost of the syncs.

Recaptured with 64M elements, ``y * y * mask`` and a pre-read (the first capture, with
16M elements and ``torch.where``, was host-bound and is described below for the record).

First capture (H200, torch 2.11.0+cu130): NOT a clean win
    Syncs drop from 30 to 2 (both in ``ProfilerStep#11``) and ``aten::nonzero`` is gone,
    but the steps are *longer* than in ``host_sync_mask`` (~0.9 ms vs ~0.71 ms) and GPU
    busy is lower (~53% vs ~68%): this version launches 25 kernels/step instead of 20,
    its two ``aten::where`` calls run a non-vectorised ``elementwise_kernel<128, 2, ...>``
    (~77 us each), and under the profiler (with_stack + record_shapes) the host needs
    ~35 us per op, so the loop is host-bound (one ~150 us GPU gap per step). The last step
    is 4.2 ms because the final ``.item()`` first allocates a pinned staging buffer
    (``cudaHostAlloc``, 2.8 ms). For a recapture that shows the fix: larger tensors
    (e.g. 64M elements, so GPU time per step >> host time), ``y * y * mask`` instead of
    ``where`` with a scalar, and one ``.item()`` before profiling to pre-allocate the
    pinned buffer.

Run
    python workloads/host_sync_static.py --out sample_traces
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch
from _profile import parse_args, profile_steps

NAME = "host_sync_static"


def main() -> None:
    args = parse_args(__doc__)
    dev = args.device
    n = (1 << 26) if args.is_cuda else (1 << 18)
    steps = args.steps or 10
    warmup = args.warmup if args.warmup is not None else 2
    untraced = 2
    total_calls = untraced + warmup + steps

    g = torch.Generator(device=dev).manual_seed(0)
    x = torch.randn(n, device=dev, generator=g)
    w = torch.randn(n, device=dev, generator=g)
    b = torch.randn(n, device=dev, generator=g)
    acc = torch.zeros(n, device=dev)
    thresh = 0.25
    loss_sum = torch.zeros((), device=dev)
    stats_sum = torch.zeros(4, device=dev)
    state = {"calls": 0, "result": None}
    # Read once before profiling so the pinned staging buffer that .item()/.tolist()
    # allocate on first use (cudaHostAlloc, ~3 ms) is not charged to the last step.
    _ = (loss_sum.item(), stats_sum.tolist())

    def step() -> None:
        y = torch.sin(x) * w + b
        y = torch.nn.functional.gelu(y)
        mask = y > thresh
        sq_sum = (y * y * mask).sum()  # static shape, no nonzero (the seed's version)
        loss = sq_sum / mask.sum().clamp_min(1)  # mean over the selected elements
        z = torch.lerp(y, y * 0.5 + 1.0, (loss > 0).to(y.dtype))  # device-side branch
        acc.mul_(0.9).add_(z)
        loss_sum.add_(loss)
        stats_sum.add_(torch.stack([z.mean(), z.amax(), z.amin(), loss]))
        state["calls"] += 1
        if state["calls"] == total_calls:  # one read, in the last step only
            state["result"] = (loss_sum.item(), stats_sum.tolist())

    profile_steps(
        step,
        name=NAME,
        steps=steps,
        warmup=warmup,
        out_dir=args.out,
        device=dev,
        untraced_warmup=untraced,
        metadata={"elements": n, "dtype": "float32"},
    )
    print(f"[{NAME}] loss_sum={state['result'][0]:.4f} stats_sum={[round(v, 3) for v in state['result'][1]]}")


if __name__ == "__main__":
    main()
