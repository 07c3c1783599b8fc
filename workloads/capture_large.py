"""capture_large: the two large traces of the performance benchmark (issue 13).

--what train
    train_step's transformer (workloads/train_step.py) at 12 layers, batch 8 x 512,
    40 recorded steps (+2 warm-up), record_shapes and with_stack, through the same
    harness as every sample trace: ~250 MB of JSON, ~800k events.
--what generate
    A Llama-architecture decoder from a `transformers.LlamaConfig` (random weights, no
    download: 8 layers, hidden 1024, 16 heads), bf16, one greedy `generate` of
    --new-tokens tokens at batch 1, profiled whole with record_shapes and with_stack: the
    stack-heavy decode loop `tracelens capture` users bring (~150 MB, mostly Python frames).

--what compile
    The same transformer (6 layers) under `torch.compile` (Inductor): the first
    compiled steps are left out by the harness's warm-up, so the trace is the compiled
    loop's many Triton kernels, recorded with shapes and stacks.
--what streams
    A two-stream training loop: each step's next batch is copied host -> device on a
    side stream from pinned memory while the transformer trains on the default stream
    (an event orders the two), and a gloo all-reduce of one gradient bucket per step in
    a single-process group, so the trace has two GPU streams, memcpy on one, kernels on
    the other, and a collective.

The traces are large: keep them out of git (bench/bench_scale.py --extra reads them from
/work/bench_data). Run from the repository root:

    python workloads/capture_large.py --what train --out /tmp/large
    python workloads/capture_large.py --what generate --out /tmp/large
"""

from __future__ import annotations

import argparse
import gzip
import os
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile


def train(out: Path, device: torch.device, steps: int) -> None:
    from _profile import profile_steps
    from train_step import TinyLM

    vocab, d, heads, layers, batch, seq = 8192, 1024, 16, 12, 8, 512
    if device.type != "cuda":  # smoke-test size
        vocab, d, heads, layers, batch, seq = 512, 128, 4, 2, 2, 32
    torch.manual_seed(0)
    model = TinyLM(vocab, d, heads, layers).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1)
    tokens = torch.randint(0, vocab, (batch, seq + 1), device=device)
    inp, tgt = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()

    def step() -> None:
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
            logits = model(inp)
        loss = F.cross_entropy(logits.float().view(-1, vocab), tgt.view(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    profile_steps(
        step,
        name="large_train",
        steps=steps,
        warmup=2,
        out_dir=out,
        device=device,
        metadata={"layers": layers, "d_model": d, "batch": batch, "seq": seq, "vocab": vocab},
    )


def compiled(out: Path, device: torch.device, steps: int) -> None:
    from _profile import profile_steps
    from train_step import TinyLM

    vocab, d, heads, layers, batch, seq = 8192, 1024, 16, 6, 8, 512
    if device.type != "cuda":
        vocab, d, heads, layers, batch, seq = 512, 128, 4, 2, 2, 32
    torch.manual_seed(0)
    model = TinyLM(vocab, d, heads, layers).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1)
    fwd = torch.compile(model)
    tokens = torch.randint(0, vocab, (batch, seq + 1), device=device)
    inp, tgt = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()

    def step() -> None:
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
            logits = fwd(inp)
        loss = F.cross_entropy(logits.float().view(-1, vocab), tgt.view(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(3):  # the compile itself stays out of the trace
        step()
    profile_steps(
        step,
        name="large_compile",
        steps=steps,
        warmup=2,
        out_dir=out,
        device=device,
        metadata={"layers": layers, "d_model": d, "batch": batch, "seq": seq, "compiled": True},
    )


def streams(out: Path, device: torch.device, steps: int) -> None:
    import torch.distributed as dist
    from _profile import profile_steps
    from train_step import TinyLM

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    dist.init_process_group("gloo", rank=0, world_size=1)
    vocab, d, heads, layers, batch, seq = 8192, 1024, 16, 8, 8, 512
    if device.type != "cuda":
        vocab, d, heads, layers, batch, seq = 512, 128, 4, 2, 2, 32
    torch.manual_seed(0)
    model = TinyLM(vocab, d, heads, layers).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1)
    cuda = device.type == "cuda"
    side = torch.cuda.Stream() if cuda else None
    host = [torch.randint(0, vocab, (batch, seq + 1)) for _ in range(2)]
    if cuda:
        host = [h.pin_memory() for h in host]
    state = {"i": 0, "next": host[0].to(device)}
    bucket = next(p for p in model.parameters() if p.dim() == 2)

    def step() -> None:
        tokens = state["next"]
        state["i"] += 1
        if side is not None:
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                state["next"] = host[state["i"] % 2].to(device, non_blocking=True)
            torch.cuda.current_stream().wait_stream(side)
        else:
            state["next"] = host[state["i"] % 2].to(device)
        inp, tgt = tokens[:, :-1], tokens[:, 1:]
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
            logits = model(inp)
        loss = F.cross_entropy(logits.float().reshape(-1, vocab), tgt.reshape(-1))
        loss.backward()
        if bucket.grad is not None:
            dist.all_reduce(bucket.grad)
        opt.step()
        opt.zero_grad(set_to_none=True)

    try:
        profile_steps(
            step,
            name="large_streams",
            steps=steps,
            warmup=2,
            out_dir=out,
            device=device,
            metadata={"layers": layers, "d_model": d, "batch": batch, "seq": seq, "streams": 2, "gloo": True},
        )
    finally:
        dist.destroy_process_group()


def generate(out: Path, device: torch.device, new_tokens: int) -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    small = device.type != "cuda"
    cfg = LlamaConfig(
        vocab_size=32000 if not small else 1000,
        hidden_size=1024 if not small else 128,
        intermediate_size=(1024 if not small else 128) * 11 // 4,
        num_hidden_layers=8 if not small else 2,
        num_attention_heads=16 if not small else 4,
        num_key_value_heads=16 if not small else 4,
        max_position_embeddings=4096,
    )
    torch.manual_seed(0)
    dtype = torch.bfloat16 if not small else torch.float32
    model = LlamaForCausalLM(cfg).to(device=device, dtype=dtype).eval()
    prompt = torch.randint(0, cfg.vocab_size, (1, 64), device=device)

    def run(n: int) -> None:
        with torch.no_grad():
            model.generate(
                prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=n, min_new_tokens=n,
                do_sample=False, pad_token_id=0,
            )  # fmt: skip

    run(4)  # untraced warm-up: handles, allocator, lazy loading
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    t0 = time.perf_counter()
    with profile(activities=activities, record_shapes=True, with_stack=True) as prof:
        run(new_tokens)
    print(f"[capture_large] generate {new_tokens} tokens in {time.perf_counter() - t0:.1f} s", flush=True)
    out.mkdir(parents=True, exist_ok=True)
    plain = out / "large_generate.pt.trace.json"
    prof.export_chrome_trace(str(plain))
    with open(plain, "rb") as src, gzip.open(f"{plain}.gz", "wb", compresslevel=9) as dst:
        shutil.copyfileobj(src, dst, 16 * 2**20)
    plain.unlink()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--what", choices=("train", "generate", "compile", "streams"), required=True)
    ap.add_argument("--out", type=Path, default=Path("/tmp/large"))
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--new-tokens", type=int, default=256)
    args = ap.parse_args()
    device = torch.device(args.device)
    if args.what == "train":
        train(args.out, device, args.steps)
    elif args.what == "compile":
        compiled(args.out, device, args.steps)
    elif args.what == "streams":
        streams(args.out, device, args.steps)
    else:
        generate(args.out, device, args.new_tokens)


if __name__ == "__main__":
    main()
