"""A plain script (no profiler, no step marks): a Llama-architecture model from
`transformers`, built from a config with random weights (no download), generating tokens
at batch 1. The steady state is the decode loop: launch-bound at batch 1.
"""

from __future__ import annotations

import torch

NEW_TOKENS = 24
CALLS = 2


def main() -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    device = "cuda" if torch.cuda.is_available() else "cpu"
    cfg = LlamaConfig(
        vocab_size=32000,
        hidden_size=1024,
        intermediate_size=2816,
        num_hidden_layers=4,
        num_attention_heads=16,
        num_key_value_heads=16,
        max_position_embeddings=2048,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).to(device=device, dtype=torch.bfloat16 if device == "cuda" else torch.float32)
    model.eval()
    prompt = torch.randint(0, cfg.vocab_size, (1, 32), device=device)
    with torch.no_grad():
        for _ in range(CALLS):
            out = model.generate(prompt, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False)
    print("generated", out.shape)


if __name__ == "__main__":
    main()
