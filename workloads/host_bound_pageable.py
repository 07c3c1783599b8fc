"""host_bound_pageable: a data-loading loop where the GPU waits for the host.

What it demonstrates
    Each step builds a batch on the CPU *inside the step* (numpy: random uint8 images of
    shape [32, 3, 160, 160], fp32 conversion, normalisation, flip: a few ms of CPU work),
    copies it to the GPU from pageable memory with a plain ``.to('cuda')``
    (``non_blocking=False``, no ``pin_memory``), then runs a small conv net forward
    (~1 ms of GPU work). The copy shows as ``Memcpy HtoD (Pageable -> Device)`` and is
    synchronous for the host; while the CPU prepares the next batch nothing is queued,
    so the GPU idles.

What an analyzer should find
    Long GPU idle gaps in every ``ProfilerStep`` that line up with CPU time spent outside
    ``aten::*`` ops (Python/numpy work under ``make_batch``); ``Memcpy HtoD
    (Pageable -> Device)`` of ~9.8 MB per step at low bandwidth, with the launching
    ``cudaMemcpyAsync`` blocking the host for the copy's duration; low GPU busy
    fraction. Verdict: host/input bound. The fix (``host_bound_pinned.py``): prepare
    batches ahead, pin them, copy with ``non_blocking=True``.

Observed in the committed capture (H200, torch 2.11.0+cu130)
    Steps ~13 ms; GPU busy ~13%; 6 ``Memcpy HtoD (Pageable -> Device)`` of 9.8 MB at
    ~12 GB/s (~0.8 ms each), the host blocked ~0.9 ms in each ``cudaMemcpyAsync`` followed
    by a ``cudaStreamSynchronize`` (6 in all).

Run
    python workloads/host_bound_pageable.py --out sample_traces
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np
import torch
from _data import BATCH_SHAPE_CPU, BATCH_SHAPE_CUDA, make_batch, make_model
from _profile import parse_args, profile_steps

NAME = "host_bound_pageable"


def main() -> None:
    args = parse_args(__doc__)
    dev = args.device
    shape = BATCH_SHAPE_CUDA if args.is_cuda else BATCH_SHAPE_CPU
    steps = args.steps or 6
    warmup = args.warmup if args.warmup is not None else 2

    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    model = make_model(dev)
    outputs = []

    @torch.no_grad()
    def step() -> None:
        batch = torch.from_numpy(make_batch(rng, shape))  # CPU work, pageable memory
        x = batch.to(dev)  # synchronous pageable HtoD copy
        out = model(x)
        outputs.append(out.argmax(dim=1))  # stays on the device
        del outputs[:-2]

    profile_steps(
        step,
        name=NAME,
        steps=steps,
        warmup=warmup,
        out_dir=args.out,
        device=dev,
        metadata={"batch_shape": list(shape), "pinned": False, "non_blocking": False},
    )


if __name__ == "__main__":
    main()
