"""capture_llama_generate: a new user's first `tracelens capture`, on a Hugging Face model.

A Llama-architecture decoder built from a `transformers.LlamaConfig` with random
weights (no download: 8 layers, hidden 1024, 16 heads, vocabulary 32000), in bf16 on the
GPU, calling `model.generate(...)` CALLS times at batch 1 (greedy, NEW_TOKENS tokens
each). Issue 12: under the old capture (record everything) the 16-layer version of this
script made a 2.2 GB trace and failed. Under the default window the warm-up is the
model's building plus the first decode tokens (each outermost forward is a step), then
20 tokens are recorded.

Run
    tracelens capture workloads/capture_llama_generate.py [--calls 3] [--new-tokens 32]
"""

import argparse
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=3)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    small = args.device == "cpu"  # CPU smoke test: a toy size
    cfg = LlamaConfig(
        vocab_size=32000 if not small else 1000,
        hidden_size=args.hidden if not small else 128,
        intermediate_size=(args.hidden if not small else 128) * 11 // 4,
        num_hidden_layers=args.layers if not small else 2,
        num_attention_heads=16 if not small else 4,
        num_key_value_heads=16 if not small else 4,
        max_position_embeddings=2048,
    )
    torch.manual_seed(0)
    t0 = time.perf_counter()
    dtype = torch.bfloat16 if args.device == "cuda" else torch.float32
    model = LlamaForCausalLM(cfg).to(device=args.device, dtype=dtype).eval()
    print(f"[capture_llama_generate] built in {time.perf_counter() - t0:.1f} s", flush=True)
    prompt = torch.randint(0, cfg.vocab_size, (1, 64), device=args.device)
    for i in range(args.calls):
        t = time.perf_counter()
        with torch.no_grad():
            out = model.generate(
                prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=args.new_tokens,
                min_new_tokens=args.new_tokens, do_sample=False, pad_token_id=0,
            )  # fmt: skip
        dt = time.perf_counter() - t
        print(f"[capture_llama_generate] call {i}: {out.shape[1] - prompt.shape[1]} tokens in {dt:.2f} s", flush=True)


if __name__ == "__main__":
    main()
