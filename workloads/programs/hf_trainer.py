"""A transformers `Trainer` run, as the library's example scripts (run_clm.py) start it:
`HfArgumentParser` over `TrainingArguments`, so every Trainer flag works on the command
line (`--bf16 True`, `--per_device_train_batch_size 16`, `--torch_compile True`,
`--dataloader_num_workers 4` ...). The model is a Llama-shaped causal LM from a config
(8 layers, hidden 512, random weights) on synthetic token blocks. `--torch_profile DIR`
adds the torch.profiler TrainerCallback from transformers' documentation, which writes a
trace there.

    python workloads/programs/hf_trainer.py --output_dir /tmp/out [--max_steps 60]
        [--per_device_train_batch_size 8] [--bf16 True] [--tf32 True] [--torch_profile DIR]
"""

import tempfile
from dataclasses import dataclass, field

import torch
from torch.utils.data import Dataset
from transformers import (
    HfArgumentParser,
    LlamaConfig,
    LlamaForCausalLM,
    Trainer,
    TrainerCallback,
    TrainingArguments,
)


@dataclass
class ScriptArguments:
    seq_len: int = 512
    layers: int = 8
    hidden: int = 512
    torch_profile: str = field(default="", metadata={"help": "write a torch.profiler trace of steps 6-8 here"})


class TokenBlocks(Dataset[dict[str, torch.Tensor]]):
    def __init__(self, n: int, seq_len: int, vocab: int) -> None:
        self.n, self.seq_len, self.vocab = n, seq_len, vocab

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        ids = torch.randint(0, self.vocab, (self.seq_len,), generator=torch.Generator().manual_seed(i))
        return {"input_ids": ids, "labels": ids.clone()}


class ProfCallback(TrainerCallback):
    """transformers' documented recipe: step the profiler at every step's end."""

    def __init__(self, prof: torch.profiler.profile) -> None:
        self.prof = prof

    def on_step_end(self, args, state, control, **kwargs):  # type: ignore[no-untyped-def]
        self.prof.step()


def main() -> None:
    parser = HfArgumentParser((ScriptArguments, TrainingArguments))
    defaults = ["--output_dir", tempfile.mkdtemp(prefix="hf-trainer-"), "--max_steps", "60", "--report_to", "none",
                "--save_strategy", "no", "--logging_steps", "10", "--per_device_train_batch_size", "8"]  # fmt: skip
    import sys

    script, args = parser.parse_args_into_dataclasses(args=defaults + sys.argv[1:])
    config = LlamaConfig(
        vocab_size=32000, hidden_size=script.hidden, intermediate_size=script.hidden * 11 // 4,
        num_hidden_layers=script.layers, num_attention_heads=script.hidden // 64,
        num_key_value_heads=script.hidden // 64, max_position_embeddings=script.seq_len,
    )  # fmt: skip
    model = LlamaForCausalLM(config)
    data = TokenBlocks(args.max_steps * args.per_device_train_batch_size * 2, script.seq_len, config.vocab_size)
    trainer = Trainer(model=model, args=args, train_dataset=data)
    if script.torch_profile:
        acts = [torch.profiler.ProfilerActivity.CPU]
        if torch.cuda.is_available():
            acts.append(torch.profiler.ProfilerActivity.CUDA)
        with torch.profiler.profile(
            activities=acts,
            schedule=torch.profiler.schedule(skip_first=3, wait=1, warmup=1, active=3, repeat=1),
            on_trace_ready=torch.profiler.tensorboard_trace_handler(script.torch_profile, use_gzip=True),
            record_shapes=True,
        ) as prof:
            trainer.add_callback(ProfCallback(prof))
            trainer.train()
    else:
        trainer.train()


if __name__ == "__main__":
    main()
