"""An accelerate training script, as accelerate's examples write it and as its users start
it (`accelerate launch [--mixed_precision bf16] accelerate_train.py`): a GPT-2 shaped
causal LM (transformers `GPT2LMHeadModel` from a config, 6 layers, hidden 768, random
weights), AdamW with a linear schedule, a DataLoader of synthetic token blocks,
`accelerator.prepare(...)`, `accelerator.backward(loss)`, and the examples' gathered loss
logged every 10 steps. `--profile DIR` wraps the loop in accelerate's own profiler
integration (`ProfileKwargs`, `accelerator.profile()`), which writes a trace there.

    accelerate launch [--mixed_precision bf16] workloads/programs/accelerate_train.py
        [--batch-size 8] [--seq-len 512] [--steps 50] [--profile DIR]
"""

import argparse

import torch
from accelerate import Accelerator
from accelerate.utils import ProfileKwargs
from torch.utils.data import DataLoader, Dataset
from transformers import GPT2Config, GPT2LMHeadModel, get_linear_schedule_with_warmup


class TokenBlocks(Dataset[dict[str, torch.Tensor]]):
    def __init__(self, n: int, seq_len: int, vocab: int) -> None:
        self.n, self.seq_len, self.vocab = n, seq_len, vocab

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        ids = torch.randint(0, self.vocab, (self.seq_len,), generator=torch.Generator().manual_seed(i))
        return {"input_ids": ids, "labels": ids}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=512)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--hidden", type=int, default=768)
    p.add_argument("--profile", default="", help="accelerate's profiler integration writes a trace here")
    args = p.parse_args()
    handlers = []
    if args.profile:
        handlers.append(
            ProfileKwargs(
                activities=["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"],
                schedule_option={"wait": 5, "warmup": 1, "active": 3, "repeat": 1, "skip_first": 0},
                record_shapes=True,
                with_stack=False,
                output_trace_dir=args.profile,
            )
        )
    accelerator = Accelerator(kwargs_handlers=handlers)
    config = GPT2Config(n_layer=args.layers, n_embd=args.hidden, n_head=args.hidden // 64, n_positions=args.seq_len)
    model = GPT2LMHeadModel(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.01)
    loader = DataLoader(TokenBlocks(args.steps * args.batch_size, args.seq_len, config.vocab_size),
                        batch_size=args.batch_size, shuffle=True)  # fmt: skip
    scheduler = get_linear_schedule_with_warmup(optimizer, 10, args.steps)
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
    model.train()

    def train() -> None:
        for step, batch in enumerate(loader):
            loss = model(**batch).loss
            accelerator.backward(loss)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            if prof is not None:
                prof.step()
            if step % 10 == 0:
                accelerator.print(f"step {step} loss {accelerator.gather(loss.detach()).mean().item():.3f}")

    prof = None
    if args.profile:
        with accelerator.profile() as prof:
            train()
    else:
        train()
    accelerator.end_training()


if __name__ == "__main__":
    main()
