"""What the Trainer's per-step helpers cost without the profiler, and with it.

The H200 report of `hf_trainer.py` (sample trace prog_trainer, `tracelens capture` with
Python stacks) names "Python code in num_parameters()" (transformers/modeling_utils.py) as
most of the host-bound idle: 24.1 ms over 5 steps, 4.8 ms a step, and `train()` 12.7 ms
(2.5 ms a step). The Trainer calls both every step: its `floating_point_ops(inputs)` ->
`model.num_parameters(exclude_embeddings=True)` for its FLOP count, and `model.train()`. This
times those two calls on the same model (hf_trainer.py's defaults: a Llama-shaped LM, 8
layers, hidden 512) unprofiled and under torch.profiler with tracelens capture's settings
(CPU + CUDA activity, shapes, Python stacks), so the culprit's real cost per step (the
most a fix could save) sits beside what the profiled trace showed. No tracelens import.

    python workloads/programs/trainer_host_probe.py --out probe.json [--calls 30]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
from transformers import LlamaConfig, LlamaForCausalLM


def per_call_ms(fn: Callable[[], Any], calls: int) -> list[float]:
    out = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1e3)
    return out


def summary(ms: list[float]) -> dict[str, float]:
    q = statistics.quantiles(ms, n=4)
    return {"median_ms": statistics.median(ms), "p25_ms": q[0], "p75_ms": q[2], "calls": len(ms)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--calls", type=int, default=30)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--seq-len", type=int, default=512)
    p.add_argument("--batch-size", type=int, default=8)
    a = p.parse_args()
    config = LlamaConfig(
        vocab_size=32000, hidden_size=a.hidden, intermediate_size=a.hidden * 11 // 4, num_hidden_layers=a.layers,
        num_attention_heads=a.hidden // 64, num_key_value_heads=a.hidden // 64, max_position_embeddings=a.seq_len,
    )  # fmt: skip
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = LlamaForCausalLM(config).to(device)
    ids = torch.randint(0, config.vocab_size, (a.batch_size, a.seq_len), device=device)
    # Trainer.floating_point_ops(inputs) = 6 * input_ids.numel() * num_parameters(exclude_embeddings=True)
    # (transformers 5.x; the model no longer has a floating_point_ops of its own).
    calls: dict[str, Callable[[], Any]] = {
        "trainer_floating_point_ops": lambda: 6 * ids.numel() * model.num_parameters(exclude_embeddings=True),
        "model_train": lambda: model.train(),
    }
    gpu = torch.cuda.get_device_name(0) if device == "cuda" else "cpu"
    res: dict[str, Any] = {"torch": torch.__version__, "device": gpu, "calls_per_config": a.calls}
    for name, fn in calls.items():
        per_call_ms(fn, 3)  # warm
        res[f"{name}/unprofiled"] = summary(per_call_ms(fn, a.calls))
    acts = [torch.profiler.ProfilerActivity.CPU]
    if device == "cuda":
        acts.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=acts, record_shapes=True, with_stack=True):
        for name, fn in calls.items():
            per_call_ms(fn, 3)
            res[f"{name}/profiled_with_stack"] = summary(per_call_ms(fn, a.calls))
    for name in calls:
        print(f"[probe] {name}: {res[f'{name}/unprofiled']['median_ms']:.3f} ms unprofiled, "
              f"{res[f'{name}/profiled_with_stack']['median_ms']:.3f} ms profiled with stacks", flush=True)  # fmt: skip
    with open(a.out, "w") as fh:
        json.dump(res, fh, indent=1)


if __name__ == "__main__":
    main()
