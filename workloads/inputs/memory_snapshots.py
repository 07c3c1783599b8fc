"""CUDA memory snapshots (`torch.cuda.memory._record_memory_history` / `_dump_snapshot`),
the pickles PyTorch's memory viz reads (issue 32).

Writes into --out:

- ``mem_train.pt.trace.json.gz`` and, beside it, ``mem_train.pt.trace.snapshot.pickle``:
  a 2-layer transformer (d 1024, batch 8x512, bf16 autocast, AdamW) built, then 4
  training steps, with the allocator's history recorded from before the model is built
  (parameters, gradients, optimizer state and activations all appear), the last 3 steps
  also under torch.profiler (``profile_memory=True``);
- ``mem_generate.snapshot.pickle``: a Llama-architecture model from a config (random
  weights, 8 layers, hidden 1024) generating 64 tokens for 4 prompts of 128 tokens with
  the dynamic KV cache, history recorded from before the model is built.

Python frames only (``stacks="python"``) keep the pickles small.

    python workloads/inputs/memory_snapshots.py --out /tmp/mem
"""

from __future__ import annotations

import argparse
import gzip
import shutil
import sys
import tempfile
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.profiler import ProfilerActivity, profile, schedule

MAX_ENTRIES = 40000


class Block(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.fc1, self.fc2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).unbind(2)
        a = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


def train(out: Path, dev: torch.device) -> None:
    torch.cuda.memory._record_memory_history(max_entries=MAX_ENTRIES, stacks="python")
    model = nn.Sequential(nn.Embedding(32000, 1024), Block(1024, 16), Block(1024, 16), nn.Linear(1024, 32000)).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    tokens = torch.randint(0, 32000, (8, 513), device=dev)

    def step() -> None:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(tokens[:, :-1])
            loss = F.cross_entropy(logits.float().flatten(0, 1), tokens[:, 1:].flatten())
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    step()
    acts = [ProfilerActivity.CPU, ProfilerActivity.CUDA]
    with profile(
        activities=acts,
        record_shapes=True,
        with_stack=True,
        profile_memory=True,
        schedule=schedule(wait=0, warmup=0, active=3, repeat=1),
    ) as prof:
        for _ in range(3):
            step()
            prof.step()
        torch.cuda.synchronize()
    tmp = Path(tempfile.mkdtemp()) / "t.json"
    prof.export_chrome_trace(str(tmp))
    with open(tmp, "rb") as src, gzip.open(out / "mem_train.pt.trace.json.gz", "wb", compresslevel=9) as dst:
        shutil.copyfileobj(src, dst)
    torch.cuda.memory._dump_snapshot(str(out / "mem_train.pt.trace.snapshot.pickle"))
    torch.cuda.memory._record_memory_history(enabled=None)
    print("train peak", torch.cuda.max_memory_allocated(), "reserved", torch.cuda.max_memory_reserved(), flush=True)


def generate(out: Path, dev: torch.device) -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.cuda.memory._record_memory_history(max_entries=MAX_ENTRIES, stacks="python")
    cfg = LlamaConfig(
        hidden_size=1024,
        intermediate_size=2816,
        num_hidden_layers=8,
        num_attention_heads=16,
        num_key_value_heads=16,
        vocab_size=32000,
        max_position_embeddings=1024,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).to(dev, torch.bfloat16).eval()
    ids = torch.randint(0, 32000, (4, 128), device=dev)
    with torch.inference_mode():
        model.generate(ids, max_new_tokens=64, min_new_tokens=64, do_sample=False)
    torch.cuda.synchronize()
    torch.cuda.memory._dump_snapshot(str(out / "mem_generate.snapshot.pickle"))
    torch.cuda.memory._record_memory_history(enabled=None)
    print("generate peak", torch.cuda.max_memory_allocated(), "reserved", torch.cuda.max_memory_reserved(), flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="mem")
    ap.add_argument("--only", choices=["train", "generate"], default=None)
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if not torch.cuda.is_available():
        sys.exit("memory snapshots need CUDA (the CPU build records no allocator history)")
    dev = torch.device("cuda")
    if args.only in (None, "train"):
        train(out, dev)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    if args.only in (None, "generate"):
        generate(out, dev)
    return 0


if __name__ == "__main__":
    sys.exit(main())
