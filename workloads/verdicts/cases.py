"""Traces for the verdict rules of issues 24 and 34: each case is one small program
whose trace has the pattern a rule is about, recorded with plain torch.profiler (CPU and
CUDA activities, shapes, Python stacks) and no tracelens code.

    python workloads/verdicts/cases.py --out DIR [--device cpu] [--only NAME,...]

Cases (trace `verdict_<name>.pt.trace.json.gz`):
- rf_steps: steps marked only by `record_function(f"step_{i}")`, 24 layers each (the
  layers repeat inside the step), one `.item()` at the end of every step.
- train_step_annot: an AdamW MLP whose iterations are `record_function("train_step")`.
- optimizer_only: the same loop with no marks at all: one `Optimizer.step` per step.
- graph_capture: a serving engine's start-up: CUDA graphs of a 16-layer decode body
  captured for 8 batch sizes (torch.cuda.graph: each capture syncs, collects and calls
  empty_cache first); no replay.
- engine_copy: one engine step `record_function("execute_model")` after the set-up:
  a forward, then the result copied to the host (`.cpu()`, pageable) and `.tolist()`.
- attn_bmm_fp32: timesformer-style attention, fp32: bmm -> mul (scale) -> softmax -> bmm.
- attn_baddbmm_half: fp16 `baddbmm(bias, q, k^T, alpha=scale)` -> softmax -> bmm.
- attn_matmul4d: bf16 4-D `q @ k^T / sqrt(d)` -> masked_fill -> softmax -> `@ v`.
- compile_once: one call of a torch.compile'd 4-block MLP (compiled before the trace).
"""

from __future__ import annotations

import argparse
import gzip
import math
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile, record_function


def _profiler(cuda: bool) -> profile:
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    return profile(activities=acts, record_shapes=True, with_stack=True)


def _export(prof: profile, out: Path, name: str) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    final = out / f"verdict_{name}.pt.trace.json.gz"
    fd, tmp = tempfile.mkstemp(prefix=name, suffix=".json", dir=out)
    os.close(fd)
    try:
        prof.export_chrome_trace(tmp)
        with open(tmp, "rb") as src, gzip.open(final, "wb", compresslevel=9) as dst:
            shutil.copyfileobj(src, dst, length=1 << 20)
    finally:
        os.remove(tmp)
    return final


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def _mlp(width: int, depth: int, dev: torch.device, dtype: torch.dtype = torch.float32) -> nn.Sequential:
    layers: list[nn.Module] = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.GELU()]
    return nn.Sequential(*layers).to(dev, dtype)


# -- steps ---------------------------------------------------------------------------------
def rf_steps(dev: torch.device, out: Path) -> Path:
    width = 512 if dev.type == "cuda" else 64
    layers = [nn.Linear(width, width).to(dev) for _ in range(24)]
    x = torch.randn(64, width, device=dev)

    def step() -> float:
        h = x
        for lin in layers:
            h = torch.nn.functional.gelu(lin(h)) + h
        return float(h.mean().item())

    for _ in range(2):
        step()
    _sync(dev)
    with _profiler(dev.type == "cuda") as prof:
        for i in range(8):
            with record_function(f"step_{i}"):
                step()
        _sync(dev)
    return _export(prof, out, "rf_steps")


def _train_parts(dev: torch.device) -> tuple[nn.Module, torch.optim.Optimizer, torch.Tensor, torch.Tensor]:
    width = 1024 if dev.type == "cuda" else 64
    model = _mlp(width, 4, dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(256, width, device=dev)
    y = torch.randn(256, width, device=dev)
    return model, opt, x, y


def _train_once(model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor) -> None:
    opt.zero_grad(set_to_none=True)
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()


def train_step_annot(dev: torch.device, out: Path) -> Path:
    model, opt, x, y = _train_parts(dev)
    for _ in range(2):
        _train_once(model, opt, x, y)
    _sync(dev)
    with _profiler(dev.type == "cuda") as prof:
        for _ in range(6):
            with record_function("train_step"):
                _train_once(model, opt, x, y)
        _sync(dev)
    return _export(prof, out, "train_step_annot")


def optimizer_only(dev: torch.device, out: Path) -> Path:
    model, opt, x, y = _train_parts(dev)
    for _ in range(2):
        _train_once(model, opt, x, y)
    _sync(dev)
    with _profiler(dev.type == "cuda") as prof:
        for _ in range(6):
            _train_once(model, opt, x, y)
        _sync(dev)
    return _export(prof, out, "optimizer_only")


# -- serving engine ------------------------------------------------------------------------
def graph_capture(dev: torch.device, out: Path) -> Path:
    if dev.type != "cuda":
        print("graph_capture: CUDA only, skipped")
        return out
    width = 1024
    body = nn.Sequential(*[m for _ in range(16) for m in (nn.Linear(width, width), nn.SiLU())]).to(dev, torch.bfloat16)
    sizes = (1, 2, 4, 8, 16, 32, 64, 128)
    static = {bs: torch.randn(bs, width, device=dev, dtype=torch.bfloat16) for bs in sizes}
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), torch.no_grad():
        for bs in sizes:  # warm-up on a side stream, as torch.cuda.graph's docs ask
            body(static[bs])
    torch.cuda.current_stream().wait_stream(side)
    _sync(dev)
    graphs = {}
    with _profiler(True) as prof:
        with torch.no_grad():
            for bs in sizes[::-1]:  # vLLM captures the largest batch first
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g):
                    body(static[bs])
                graphs[bs] = g
        _sync(dev)
    return _export(prof, out, "graph_capture")


def engine_copy(dev: torch.device, out: Path) -> Path:
    cuda = dev.type == "cuda"
    width, rows = (8192, 8192) if cuda else (256, 256)
    dtype = torch.bfloat16 if cuda else torch.float32
    with _profiler(cuda) as prof:
        # set-up: weights made on the host and moved to the device (start-up)
        weights = [torch.randn(width, width, dtype=dtype).to(dev) for _ in range(4)]
        x = torch.randn(rows, width, dtype=dtype).to(dev)
        _sync(dev)
        with record_function("execute_model"):
            h = x
            for _ in range(3):
                for w in weights:
                    h = torch.mm(h, w).clamp_(-1, 1)
            logits = h.float().cpu()  # blocking copy to pageable memory
            ids = h[:, :8].argmax(-1).tolist()
        _sync(dev)
    print(f"engine_copy: {logits.shape} {len(ids)}")
    return _export(prof, out, "engine_copy")


# -- eager attention -----------------------------------------------------------------------
def _attn_loop(name: str, dev: torch.device, out: Path, fn: Callable[[], torch.Tensor]) -> Path:
    for _ in range(2):
        fn()
    _sync(dev)
    with _profiler(dev.type == "cuda") as prof:
        for i in range(4):
            with record_function(f"step_{i}"):
                fn()
        _sync(dev)
    return _export(prof, out, name)


def attn_bmm_fp32(dev: torch.device, out: Path) -> Path:
    cuda = dev.type == "cuda"
    bh, t, d = (96, 1024, 64) if cuda else (4, 64, 16)
    proj = nn.Linear(d, 3 * d).to(dev)
    x = torch.randn(bh, t, d, device=dev)
    scale = d**-0.5

    def fn() -> torch.Tensor:
        h = x
        for _ in range(6):
            q, k, v = proj(h).chunk(3, dim=-1)
            attn = torch.bmm(q, k.transpose(1, 2)) * scale
            attn = attn.softmax(dim=-1)
            h = torch.bmm(attn, v) + h
        return h

    return _attn_loop("attn_bmm_fp32", dev, out, fn)


def attn_baddbmm_half(dev: torch.device, out: Path) -> Path:
    cuda = dev.type == "cuda"
    bh, t, d = (96, 1024, 64) if cuda else (4, 64, 16)
    dtype = torch.float16 if cuda else torch.float32
    proj = nn.Linear(d, 3 * d).to(dev, dtype)
    x = torch.randn(bh, t, d, device=dev, dtype=dtype)
    bias = torch.zeros(bh, t, t, device=dev, dtype=dtype)
    scale = d**-0.5

    def fn() -> torch.Tensor:
        h = x
        for _ in range(6):
            q, k, v = proj(h).chunk(3, dim=-1)
            attn = torch.baddbmm(bias, q, k.transpose(1, 2), beta=1.0, alpha=scale)
            attn = attn.softmax(dim=-1)
            h = torch.bmm(attn, v) + h
        return h

    return _attn_loop("attn_baddbmm_half", dev, out, fn)


def attn_matmul4d(dev: torch.device, out: Path) -> Path:
    cuda = dev.type == "cuda"
    b, heads, t, d = (8, 12, 1024, 64) if cuda else (1, 2, 64, 16)
    dtype = torch.bfloat16 if cuda else torch.float32
    proj = nn.Linear(d, 3 * d).to(dev, dtype)
    x = torch.randn(b, heads, t, d, device=dev, dtype=dtype)
    mask = torch.ones(t, t, device=dev, dtype=torch.bool).triu(1)

    def fn() -> torch.Tensor:
        h = x
        for _ in range(6):
            q, k, v = proj(h).chunk(3, dim=-1)
            attn = (q @ k.transpose(-2, -1)) / math.sqrt(d)
            attn = attn.masked_fill(mask, float("-inf")).softmax(dim=-1)
            h = attn @ v + h
        return h

    return _attn_loop("attn_matmul4d", dev, out, fn)


# -- torch.compile -------------------------------------------------------------------------
def compile_once(dev: torch.device, out: Path) -> Path:
    cuda = dev.type == "cuda"
    width = 2048 if cuda else 64

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm = nn.LayerNorm(width)
            self.up = nn.Linear(width, 4 * width)
            self.down = nn.Linear(4 * width, width)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))) * 0.5)

    model = nn.Sequential(*[Block() for _ in range(4)]).to(dev, torch.bfloat16 if cuda else torch.float32)
    x = torch.randn(4096 if cuda else 16, width, device=dev, dtype=next(model.parameters()).dtype)
    compiled = torch.compile(model)
    with torch.no_grad():
        for _ in range(3):
            compiled(x)
        _sync(dev)
        with _profiler(cuda) as prof:
            compiled(x)
            _sync(dev)
    return _export(prof, out, "compile_once")


CASES: dict[str, Callable[[torch.device, Path], Path]] = {
    f.__name__: f
    for f in (
        rf_steps,
        train_step_annot,
        optimizer_only,
        graph_capture,
        engine_copy,
        attn_bmm_fp32,
        attn_baddbmm_half,
        attn_matmul4d,
        compile_once,
    )
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="sample_traces")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--only", default="", help="comma-separated case names")
    args = ap.parse_args()
    dev = torch.device(args.device)
    names = [n for n in args.only.split(",") if n] or list(CASES)
    failed = 0
    for name in names:
        t0 = time.perf_counter()
        try:
            path = CASES[name](dev, Path(args.out))
            size = path.stat().st_size if path.is_file() else 0
            print(f"{name}: {time.perf_counter() - t0:.1f} s -> {path} ({size / 1e3:.0f} KB)", flush=True)
        except Exception as exc:  # one failing case must not lose the others
            failed += 1
            print(f"{name}: FAILED {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
