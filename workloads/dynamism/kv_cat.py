"""A decode loop that grows its KV cache with torch.cat: every new token copies the
whole cache again (the copied bytes grow with every step).

4 layers, batch 8, 16 heads of 64, bf16 (per token 32 KiB of K and V a layer), a
512-token prompt then 64 decode steps of one token. With --static the cache is
preallocated for the whole generation and each step writes one slot in place.

Run
    tracelens capture --memory workloads/dynamism/kv_cat.py [--static]
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

LAYERS, BATCH, HEADS, HEAD_DIM = 4, 8, 16, 64
PROMPT, NEW_TOKENS = 512, 64


class DecodeLayer(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        dim = HEADS * HEAD_DIM
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.out = torch.nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, cache: dict[str, torch.Tensor], pos: int, static: bool) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, HEADS, HEAD_DIM).permute(2, 0, 3, 1, 4)
        if static:
            cache["k"][:, :, pos : pos + s] = k
            cache["v"][:, :, pos : pos + s] = v
            k_all, v_all = cache["k"][:, :, : pos + s], cache["v"][:, :, : pos + s]
        else:
            k_all = torch.cat([cache["k"], k], dim=2)  # copies the whole cache every token
            v_all = torch.cat([cache["v"], v], dim=2)
            cache["k"], cache["v"] = k_all, v_all
        a = F.scaled_dot_product_attention(q, k_all, v_all)
        return x + self.out(a.transpose(1, 2).reshape(b, s, d))


class Decoder(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(DecodeLayer() for _ in range(LAYERS))

    def forward(self, x: torch.Tensor, caches: list[dict[str, torch.Tensor]], pos: int, static: bool) -> torch.Tensor:
        for layer, cache in zip(self.layers, caches, strict=True):
            x = layer(x, cache, pos, static)
        return x


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--static", action="store_true", help="preallocated cache written in place")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = p.parse_args()
    dev = args.device
    dtype = torch.bfloat16 if dev == "cuda" else torch.float32
    torch.manual_seed(0)
    model = Decoder().to(dev, dtype).eval()
    total = PROMPT + NEW_TOKENS
    shape = (BATCH, HEADS, total if args.static else 0, HEAD_DIM)
    caches = [
        {"k": torch.zeros(shape, device=dev, dtype=dtype), "v": torch.zeros(shape, device=dev, dtype=dtype)}
        for _ in range(LAYERS)
    ]
    x = torch.randn(BATCH, PROMPT, HEADS * HEAD_DIM, device=dev, dtype=dtype)
    with torch.no_grad():
        h = model(x, caches, 0, args.static)
        tok = h[:, -1:]
        for i in range(NEW_TOKENS):
            tok = model(tok, caches, PROMPT + i, args.static)
    print("done")


if __name__ == "__main__":
    main()
