"""train_step: a small but realistic transformer training step (bf16 autocast + AdamW).

What it demonstrates
    A 4-layer pre-norm transformer (d_model 1024, 16 heads, MLP 4x with GELU,
    ``scaled_dot_product_attention`` with a causal mask), token embedding and an LM head
    over a 8192-token vocabulary, batch 32 x 512 tokens, under
    ``torch.autocast('cuda', dtype=torch.bfloat16)``. Each step: forward, cross-entropy
    loss, ``loss.backward()``, ``AdamW.step()`` (default foreach implementation),
    ``zero_grad(set_to_none=True)``. No ``.item()`` or other host reads inside the step.
    About 1.5 TFLOP per step, a few ms on an H200.

What an analyzer should find (as designed; the committed capture differs, see Observed)
    A healthy, GPU-bound step: GPU busy for most of each ``ProfilerStep``, no host syncs
    (only the profiler's own ``cudaDeviceSynchronize`` at the end); time dominated by
    bf16 GEMM kernels (``nvjet_*`` / cuBLAS) in forward and backward, then flash/efficient
    attention kernels, elementwise/normalisation kernels, and ``multi_tensor_apply``
    kernels from the foreach AdamW step; forward vs backward vs optimizer phases
    separable via the ``aten::*`` / autograd / ``Optimizer.step#AdamW.step`` annotations.
    A useful baseline for "nothing obviously wrong" and for MFU estimates.

Observed in the committed capture (H200, torch 2.11.0+cu130): host-bound, not GPU-bound
    67.2M parameters; steps ~18 ms of host time vs ~6.3 ms of GPU time, so GPU busy is
    only ~33%: ~290 kernels/step and the profiler's Python tracing (with_stack) of every
    ``nn.Module`` call make the host the bottleneck. No user syncs. Kernel time led by
    ``nvjet_sm90_*`` GEMMs (``aten::mm``/``aten::addmm``), then autocast casts
    (``aten::copy_``), LayerNorm backward, foreach AdamW (``_foreach_*``) and cuDNN
    attention (``aten::_cudnn_attention_backward``). cuBLAS kernels are launched through
    ``cuLaunchKernelEx`` (category ``cuda_driver``), not ``cudaLaunchKernel``. For a
    GPU-bound baseline, raise the batch (e.g. 32 x 512) in a recapture.

Run
    python workloads/train_step.py --out sample_traces
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch
import torch.nn.functional as F
from _profile import parse_args, profile_steps
from torch import nn

NAME = "train_step"


class Block(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 4 * d)
        self.fc2 = nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (t.view(b, s, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, s, d))
        x = x + self.fc2(F.gelu(self.fc1(self.ln2(x))))
        return x


class TinyLM(nn.Module):
    def __init__(self, vocab: int, d: int, heads: int, layers: int) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.emb(idx)
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln_f(x))


def main() -> None:
    args = parse_args(__doc__)
    dev = args.device
    if args.is_cuda:
        vocab, d, heads, layers, batch, seq = 8192, 1024, 16, 4, 32, 512
    else:  # smoke-test size
        vocab, d, heads, layers, batch, seq = 512, 128, 4, 4, 2, 64
    steps = args.steps or 5
    warmup = args.warmup if args.warmup is not None else 2

    torch.manual_seed(0)
    model = TinyLM(vocab, d, heads, layers).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1)
    g = torch.Generator(device=dev).manual_seed(0)
    tokens = torch.randint(0, vocab, (batch, seq + 1), device=dev, generator=g)
    inp, tgt = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
    amp_dtype = torch.bfloat16
    losses = []

    def step() -> None:
        with torch.autocast(device_type=dev.type, dtype=amp_dtype):
            logits = model(inp)
        loss = F.cross_entropy(logits.float().view(-1, vocab), tgt.view(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.detach())  # no .item() inside the step

    n_params = sum(p.numel() for p in model.parameters())
    profile_steps(
        step,
        name=NAME,
        steps=steps,
        warmup=warmup,
        out_dir=args.out,
        device=dev,
        metadata={
            "params": n_params,
            "batch": batch,
            "seq": seq,
            "d_model": d,
            "layers": layers,
            "vocab": vocab,
            "amp_dtype": "bfloat16",
        },
    )
    print(f"[{NAME}] params={n_params / 1e6:.1f}M losses={[round(v, 3) for v in torch.stack(losses).tolist()]}")


if __name__ == "__main__":
    main()
