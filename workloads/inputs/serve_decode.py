"""A serving-style decode loop in CUDA-graph mode, traced the way vLLM/SGLang trace it.

A 4-layer decoder (d 2048, 16 heads of 128, SwiGLU 5632, vocab 32000, bf16) with a
static KV cache of MAX_KV positions per request. One CUDA graph per batch size
(1, 8, 32) is captured with the profiler on, each written as its own capture trace,
``capture_traces/bs_<bs>_rank0.json.gz`` (SGLang's naming; vLLM writes the same kind of
file under ``capture_traces/``), its capture inside a ``capture_<bs>_decode`` range
(vLLM's annotation). Then ``serve_decode.pt.trace.json.gz`` records 48 decode steps
replayed from those graphs (16 at bs 8, 16 at bs 32, 16 at bs 1), each inside SGLang's
per-forward annotation with its attention sizes,
``step[DECODE bs=B g_sq=B g_sk=ΣN_KV g_sqsq=ΣN_Q² g_sqsk=ΣN_Q·N_KV]``. No ProfilerStep
marks: serving traces have none.

The attention is SDPA over the whole static cache with a mask of the valid positions,
so its kernel reads MAX_KV positions per request whatever the requests hold; the
annotation says how many they hold.

    python workloads/inputs/serve_decode.py --out /tmp/serve           # CUDA
    python workloads/inputs/serve_decode.py --device cpu --out /tmp/s  # smoke test
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.profiler import ProfilerActivity, profile, record_function

LAYERS, DIM, HEADS, HEAD_DIM, FFN, VOCAB, MAX_KV = 4, 2048, 16, 128, 5632, 32000, 2048
BATCH_SIZES = (1, 8, 32)


class Decoder(nn.Module):
    def __init__(self, layers: int, dim: int, heads: int, ffn: int, vocab: int) -> None:
        super().__init__()
        self.heads, self.hd = heads, dim // heads
        self.embed = nn.Embedding(vocab, dim)
        self.qkv = nn.ModuleList([nn.Linear(dim, 3 * dim, bias=False) for _ in range(layers)])
        self.o = nn.ModuleList([nn.Linear(dim, dim, bias=False) for _ in range(layers)])
        self.gate_up = nn.ModuleList([nn.Linear(dim, 2 * ffn, bias=False) for _ in range(layers)])
        self.down = nn.ModuleList([nn.Linear(ffn, dim, bias=False) for _ in range(layers)])
        self.lm_head = nn.Linear(dim, vocab, bias=False)

    @staticmethod
    def rms(x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6).to(x.dtype)

    def forward(
        self, tokens: torch.Tensor, seq_lens: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor
    ) -> torch.Tensor:
        bs = tokens.shape[0]
        x = self.embed(tokens).unsqueeze(1)  # [bs, 1, d]
        rows = torch.arange(bs, device=tokens.device)
        valid = torch.arange(k_cache.shape[3], device=tokens.device)[None, :] <= seq_lens[:, None]
        mask = valid[:, None, None, :]  # [bs, 1, 1, MAX_KV]
        for i in range(len(self.qkv)):
            h = self.rms(x)
            q, k, v = self.qkv[i](h).view(bs, 1, 3, self.heads, self.hd).unbind(2)
            k_cache[i, rows, :, seq_lens] = k[:, 0]
            v_cache[i, rows, :, seq_lens] = v[:, 0]
            a = F.scaled_dot_product_attention(q.transpose(1, 2), k_cache[i, :bs], v_cache[i, :bs], attn_mask=mask)
            x = x + self.o[i](a.transpose(1, 2).reshape(bs, 1, -1))
            g, u = self.gate_up[i](self.rms(x)).chunk(2, dim=-1)
            x = x + self.down[i](F.silu(g) * u)
        nxt = self.lm_head(self.rms(x))[:, 0].argmax(-1)
        tokens.copy_(nxt)
        seq_lens.add_(1)
        return nxt


def export(prof: Any, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp()) / "t.json"
    prof.export_chrome_trace(str(tmp))
    with open(tmp, "rb") as src, gzip.open(path, "wb", compresslevel=9) as dst:
        shutil.copyfileobj(src, dst)
    shutil.rmtree(tmp.parent, ignore_errors=True)
    print(f"wrote {path} ({path.stat().st_size} bytes)", flush=True)


def step_name(bs: int, kv_lens: list[int]) -> str:
    """SGLang's per-forward annotation with its roofline aggregates (decode: N_Q = 1)."""
    sk = sum(kv_lens)
    return f"step[DECODE bs={bs} g_sq={bs} g_sk={sk} g_sqsq={bs} g_sqsk={sk}]"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="serve_decode")
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args()
    out = Path(args.out)
    cuda = args.device.startswith("cuda")
    dev = torch.device(args.device)
    layers, dim, heads, ffn, vocab, max_kv = (
        (LAYERS, DIM, HEADS, FFN, VOCAB, MAX_KV) if cuda else (2, 128, 4, 256, 1000, 64)
    )
    torch.manual_seed(0)
    model = Decoder(layers, dim, heads, ffn, vocab).to(dev, torch.bfloat16).eval()
    bmax = max(BATCH_SIZES)
    k_cache = torch.zeros(layers, bmax, heads, max_kv, dim // heads, device=dev, dtype=torch.bfloat16)
    v_cache = torch.zeros_like(k_cache)
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    graphs: dict[int, Any] = {}
    statics: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
    with torch.inference_mode():
        for bs in BATCH_SIZES:
            tokens = torch.randint(0, vocab, (bs,), device=dev)
            seq_lens = torch.full((bs,), 8, device=dev, dtype=torch.long)
            statics[bs] = (tokens, seq_lens)
            if not cuda:
                model(tokens, seq_lens, k_cache, v_cache)
                continue
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(2):
                    model(tokens, seq_lens, k_cache, v_cache)
            torch.cuda.current_stream().wait_stream(side)
            seq_lens.fill_(8)
            g = torch.cuda.CUDAGraph()
            with (
                profile(activities=acts, record_shapes=True, with_stack=True) as prof,
                record_function(f"capture_{bs}_decode"),
                torch.cuda.graph(g),
            ):
                model(tokens, seq_lens, k_cache, v_cache)
            export(prof, out / "capture_traces" / f"bs_{bs}_rank0.json.gz")
            graphs[bs] = g
        if not cuda:
            print("cpu smoke test ok", flush=True)
            return 0
        torch.cuda.synchronize()
        plan = [(8, 16), (32, 16), (1, 16)]
        gen = torch.Generator().manual_seed(1)
        with profile(activities=acts, record_shapes=True, with_stack=True) as prof:
            for bs, n in plan:
                tokens, seq_lens = statics[bs]
                start = torch.randint(64, max_kv - 64 - n, (bs,), generator=gen)
                seq_lens.copy_(start)
                kv = start.tolist()
                for _ in range(n):
                    with record_function(step_name(bs, [x + 1 for x in kv])):
                        graphs[bs].replay()
                    kv = [x + 1 for x in kv]
                torch.cuda.synchronize()
        export(prof, out / "serve_decode.pt.trace.json.gz")
        meta = {"layers": layers, "dim": dim, "heads": heads, "head_dim": dim // heads, "max_kv": max_kv, "plan": plan}
        (out / "serve_decode.json").write_text(json.dumps(meta))
    return 0


if __name__ == "__main__":
    sys.exit(main())
