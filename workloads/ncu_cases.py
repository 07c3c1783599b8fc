"""ncu_cases: the workloads tracelens' roofline is checked against Nsight Compute on.

Each case is one step function, run two ways from the repository root:

    python workloads/ncu_cases.py CASE --mode trace --out DIR   # torch.profiler trace
    ncu --profile-from-start off ... python workloads/ncu_cases.py CASE --mode ncu

``--mode trace`` writes ``DIR/ncu_CASE.pt.trace.json.gz`` through the shared harness
(_profile.py: untraced warm-up, ProfilerStep annotations, shapes and stacks).
``--mode ncu`` runs the same step untraced for warm-up (handles, Inductor compile,
allocator growth), then exactly one step between cudaProfilerStart and cudaProfilerStop, so
``ncu --profile-from-start off`` profiles that one step's kernels and nothing else.
``--mode loop`` runs ``--steps`` steps (default 8) and nothing else, marking each with
``tracelens.capture.step()``, for ``tracelens capture [--counters] --steps 3-5``.
bench/ncu_compare_capture.sh runs both for every case; bench/ncu_compare.py compares
Nsight Compute's verdict per kernel with tracelens' ``bound``.

Cases (sizes on CUDA; ``--device cpu`` shrinks them for a smoke test):
  train      2-layer transformer step (d 1024, SDPA causal), bf16 autocast, AdamW foreach
  encoder    fp32 eval encoder (no TF32), 2 layers d 768, three sequence lengths
  attention  SDPA bf16 forward+backward and eager attention (bmm > softmax > dropout > bmm)
  compiled   torch.compile'd elementwise/norm chain (Triton kernels)
  elementwise plain elementwise ops, a transposed copy, a cast and tiny ops
  gemm       large bf16 GEMMs (8192^3, 4096^3, 2304^2 partial wave), fp32 and TF32 4096^3
  instructions  one kernel per op (GELU and its backward, softmax, layer norm, exp, tanh,
             sigmoid, SiLU, rsqrt, erf, add, mul, ReLU, casts, dropout) in fp32 and bf16 on
             32768 x 1024 tensors: for the instructions each executes per element (ncu's
             InstructionStats), not for the bound comparison
  legacy     ATen's non-vectorised elementwise path (`elementwise_kernel<128, 4>`, taken when an
             operand is broadcast or strided): broadcast copies and strided/broadcast adds and
             muls over 1-4 dimensions (after TensorIterator's coalescing), fp32 and bf16, on
             8M-element tensors shaped unlike the comparison cases: for the instructions each
             executes per element, not for the bound comparison
  onchip     fp32 memory-efficient attention (SDPA without TF32, no grad) at 8 x 16 heads x 256 and
             x 1024 tokens, head dim 64: its L1/shared-memory traffic per FLOP (ncu's
             MemoryWorkloadAnalysis), not for the bound comparison
  spill      fp32 memory-efficient attention at shapes the spill model (roofline.L2_SPILL_MODELS)
             was not fitted on: head dims 32 and 128, cross-attention (128 queries x 1024 keys),
             partial tiles (100 tokens), 2048 tokens: held-out checks of its L2 traffic and bound
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch
import torch.nn.functional as F
from _profile import make_parser, profile_steps, sync
from torch import nn

CASES = (
    "train", "encoder", "attention", "compiled", "elementwise", "gemm", "instructions", "onchip", "legacy", "spill",
)  # fmt: skip


def _train(dev: torch.device, big: bool) -> Callable[[], None]:
    from train_step import TinyLM

    vocab, d, heads, layers, batch, seq = (8192, 1024, 16, 2, 8, 512) if big else (256, 64, 4, 2, 2, 32)
    torch.manual_seed(0)
    model = TinyLM(vocab, d, heads, layers).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1)
    tokens = torch.randint(0, vocab, (batch, seq + 1), device=dev)
    inp, tgt = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()

    def step() -> None:
        with torch.autocast(device_type=dev.type, dtype=torch.bfloat16):
            logits = model(inp)
        loss = F.cross_entropy(logits.float().view(-1, vocab), tgt.view(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


class _EncoderLayer(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln1 = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 4 * d)
        self.fc2 = nn.Linear(4 * d, d)
        self.ln2 = nn.LayerNorm(d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=-1)
        q, k, v = (t.view(b, s, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v)
        x = self.ln1(x + self.proj(a.transpose(1, 2).reshape(b, s, d)))
        return self.ln2(x + self.fc2(F.gelu(self.fc1(x))))


def _encoder(dev: torch.device, big: bool) -> Callable[[], None]:
    torch.backends.cuda.matmul.allow_tf32 = False  # the fp32 CUDA-core roof is what this case checks
    torch.backends.cudnn.allow_tf32 = False
    d, heads, batch = (768, 12, 16) if big else (64, 4, 2)
    lengths = (77, 197, 384) if big else (7, 13, 20)
    torch.manual_seed(0)
    model = nn.Sequential(*[_EncoderLayer(d, heads) for _ in range(2)]).to(dev).eval()
    xs = [torch.randn(batch, s, d, device=dev) for s in lengths]

    def step() -> None:
        with torch.no_grad():
            for x in xs:
                model(x)

    return step


def _attention(dev: torch.device, big: bool) -> Callable[[], None]:
    b, h, s, dh = (4, 16, 2048, 128) if big else (1, 2, 64, 16)
    es = 1024 if big else 32
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    q, k, v = (torch.randn(b, h, s, dh, device=dev, dtype=dtype, requires_grad=True) for _ in range(3))
    eq, ek, ev = (torch.randn(b * h, es, 64 if big else 16, device=dev, dtype=dtype, requires_grad=True)
                  for _ in range(3))  # fmt: skip
    scale = (64 if big else 16) ** -0.5

    def step() -> None:
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        out.sum().backward()
        # Eager attention, as older model code writes it (OWLv2, BERT): bmm > softmax > dropout > bmm
        scores = torch.bmm(eq, ek.transpose(1, 2)) * scale
        probs = F.dropout(torch.softmax(scores, dim=-1), p=0.1, training=True)
        torch.bmm(probs, ev).sum().backward()

    return step


def _compiled(dev: torch.device, big: bool) -> Callable[[], None]:
    rows, cols = (8192, 4096) if big else (64, 128)
    x = torch.randn(rows, cols, device=dev)
    w = torch.randn(cols, device=dev)
    bias = torch.randn(cols, device=dev)

    def chain(x: torch.Tensor) -> torch.Tensor:
        y = F.gelu(x * w + bias)
        y = y - y.mean(dim=-1, keepdim=True)
        y = y * torch.rsqrt(y.pow(2).mean(dim=-1, keepdim=True) + 1e-5)
        return (y + x).to(torch.bfloat16)

    fn = torch.compile(chain)

    def step() -> None:
        fn(x)
        fn(x * 0.5)  # one eager mul between two compiled calls

    return step


def _elementwise(dev: torch.device, big: bool) -> Callable[[], None]:
    side = 8192 if big else 256
    n = side * side  # 64M fp32 elements: 256 MB a tensor
    x = torch.randn(n, device=dev)
    z = torch.randn(n, device=dev)
    w = torch.empty(n, device=dev)
    tiny = torch.randn(4096, device=dev)

    def step() -> None:
        y = x * 1.5 + z
        torch.exp(y, out=w)
        w.add_(x)
        y = torch.addcmul(w, x, z, value=0.5)
        y.view(side, side).t().contiguous()  # transposed copy
        w.copy_(x)  # plain copy
        x.to(torch.bfloat16)  # cast
        for _ in range(3):  # kernels far too small to fill the GPU
            tiny.mul_(1.0001).add_(1e-4)

    return step


def _gemm(dev: torch.device, big: bool) -> Callable[[], None]:
    sizes = ((8192, 8192, 8192), (4096, 4096, 4096), (2304, 2304, 2304), (1792, 1792, 1792)) if big else ((64,) * 3,)
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    pairs = [(torch.randn(m, k, device=dev, dtype=dtype), torch.randn(k, n, device=dev, dtype=dtype))
             for m, n, k in sizes]  # fmt: skip
    f = 4096 if big else 64
    a32, b32 = torch.randn(f, f, device=dev), torch.randn(f, f, device=dev)

    def step() -> None:
        for a, b in pairs:
            torch.mm(a, b)
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.mm(a32, b32)  # fp32 on CUDA cores
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.mm(a32, b32)  # TF32 tensor cores
        torch.backends.cuda.matmul.allow_tf32 = False

    return step


def _instructions(dev: torch.device, big: bool) -> Callable[[], None]:
    rows, cols = (32768, 1024) if big else (64, 128)
    dtypes = (torch.float32, torch.bfloat16) if dev.type == "cuda" else (torch.float32,)
    sets = []
    for dt in dtypes:
        x = torch.randn(rows, cols, device=dev, dtype=dt)
        y = torch.randn(rows, cols, device=dev, dtype=dt)
        w, b = torch.randn(cols, device=dev, dtype=dt), torch.randn(cols, device=dev, dtype=dt)
        sets.append((x, y, w, b))

    def step() -> None:
        for x, y, w, b in sets:
            F.gelu(x)
            torch.ops.aten.gelu_backward(y, x)
            p = torch.softmax(x, dim=-1)
            torch.ops.aten._softmax_backward_data(y, p, -1, x.dtype)
            F.layer_norm(x, (cols,), w, b)
            torch.exp(x)
            torch.tanh(x)
            torch.sigmoid(x)
            F.silu(x)
            torch.rsqrt(p)
            torch.erf(x)
            torch.add(x, y)
            torch.mul(x, 1.5)
            torch.relu(x)
            x.to(torch.bfloat16 if x.dtype == torch.float32 else torch.float32)
            F.dropout(x, p=0.1, training=True)

    return step


def _legacy(dev: torch.device, big: bool) -> Callable[[], None]:
    r, c = (4096, 2048) if big else (32, 16)  # 2-D
    a3, b3, c3 = (32, 256, 1024) if big else (2, 8, 16)  # 3-D
    a4, b4, c4, d4 = (16, 8, 256, 256) if big else (2, 2, 4, 8)  # 4-D
    dtypes = (torch.float32, torch.bfloat16) if dev.type == "cuda" else (torch.float32,)
    sets = []
    for dt in dtypes:
        def t(*shape: int, dt: torch.dtype = dt) -> torch.Tensor:
            return torch.randn(*shape, device=dev, dtype=dt)

        sets.append((t(1), t(1, c), t(r, 1), t(a3, 1, c3), t(a4, 1, c4, 1), t(r, c), t(c, r), t(a3, b3, c3),
                     t(a3, c3, b3), t(a4, b4, c4, d4), t(a4, c4, b4, d4)))  # fmt: skip

    def step() -> None:
        for one, row, col, b3d, b4d, x, xt, y3, y3t, y4, y4p in sets:
            one.expand(r, c).contiguous()  # copy, 1 dim (all strides 0 coalesce)
            row.expand(r, c).contiguous()  # copy, 2 dims
            col.expand(r, c).contiguous()  # copy, 2 dims (column broadcast)
            b3d.expand(a3, b3, c3).contiguous()  # copy, 3 dims
            b4d.expand(a4, b4, c4, d4).contiguous()  # copy, 4 dims
            torch.add(x, xt.t())  # add, 2 dims, one transposed operand
            y3.add_(y3t.transpose(1, 2))  # in-place add, 3 dims (as attention's grad accumulation)
            torch.add(y4, y4p.transpose(1, 2))  # add, 4 dims (last dim contiguous: 3 after coalescing)
            torch.mul(x, row)  # mul by a broadcast row, 2 dims
            torch.mul(y3, b3d)  # mul by a broadcast, 3 dims

    return step


def _onchip(dev: torch.device, big: bool) -> Callable[[], None]:
    batch, heads, dh = (8, 16, 64) if big else (1, 2, 16)
    qkv = [[torch.randn(batch, heads, s, dh, device=dev) for _ in range(3)] for s in ((256, 1024) if big else (16, 32))]

    def step() -> None:
        with torch.no_grad():
            for q, k, v in qkv:
                F.scaled_dot_product_attention(q, k, v)

    return step


#: (batch, heads, queries, keys, head dim) of the `spill` case.
SPILL_SHAPES = ((4, 8, 512, 512, 64), (4, 8, 512, 512, 32), (4, 8, 128, 1024, 64), (2, 16, 2048, 2048, 64),
                (8, 12, 100, 100, 64), (4, 8, 512, 512, 128))  # fmt: skip


def _spill(dev: torch.device, big: bool) -> Callable[[], None]:
    shapes = SPILL_SHAPES if big else ((1, 2, 16, 32, 16),)
    torch.backends.cuda.matmul.allow_tf32 = False
    qkv = [tuple(torch.randn(b, h, n, d, device=dev) for n in (lq, lk, lk)) for b, h, lq, lk, d in shapes]

    def step() -> None:
        with torch.no_grad():
            for q, k, v in qkv:
                F.scaled_dot_product_attention(q, k, v)

    return step


BUILDERS: dict[str, Callable[[torch.device, bool], Callable[[], None]]] = {
    "train": _train,
    "encoder": _encoder,
    "attention": _attention,
    "compiled": _compiled,
    "elementwise": _elementwise,
    "gemm": _gemm,
    "instructions": _instructions,
    "onchip": _onchip,
    "legacy": _legacy,
    "spill": _spill,
}


def main() -> None:
    parser = make_parser(__doc__)
    parser.add_argument("case", choices=CASES)
    parser.add_argument("--mode", choices=("trace", "ncu", "loop"), default="trace")
    args = parser.parse_args()
    dev = torch.device(args.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        sys.exit("CUDA is not available (use --device cpu for a smoke test)")
    step = BUILDERS[args.case](dev, dev.type == "cuda")
    if args.mode == "trace":
        profile_steps(step, name=f"ncu_{args.case}", steps=args.steps or 2, warmup=args.warmup or 1,
                      out_dir=args.out, device=dev, metadata={"case": args.case})  # fmt: skip
        return
    if args.mode == "loop":
        from tracelens.capture import step as mark_step

        for _ in range(args.steps or 8):
            step()
            mark_step()
        sync(dev)
        return
    for _ in range(3):  # warm-up outside the profiled range: compile, handles, allocator
        step()
    sync(dev)
    if dev.type == "cuda":
        torch.cuda.cudart().cudaProfilerStart()
    step()
    sync(dev)
    if dev.type == "cuda":
        torch.cuda.cudart().cudaProfilerStop()
    print(f"[ncu_{args.case}] one step done", file=sys.stderr)


if __name__ == "__main__":
    main()
