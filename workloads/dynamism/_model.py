"""The small transformer block the dynamism workloads share (random weights, no download)."""

from __future__ import annotations

import torch
import torch.nn.functional as F


class Block(torch.nn.Module):
    """Pre-norm attention + MLP on (batch, seq, dim)."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1 = torch.nn.LayerNorm(dim)
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.proj = torch.nn.Linear(dim, dim)
        self.norm2 = torch.nn.LayerNorm(dim)
        self.fc1 = torch.nn.Linear(dim, 4 * dim)
        self.fc2 = torch.nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, s, d))
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


class Encoder(torch.nn.Module):
    def __init__(self, dim: int = 512, heads: int = 8, layers: int = 2) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList(Block(dim, heads) for _ in range(layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for blk in self.blocks:
            x = blk(x)
        return x


def setup(device: str) -> tuple[str, torch.dtype]:
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    torch.manual_seed(0)
    return device, dtype
