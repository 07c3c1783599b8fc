"""Framework loops whose steps are marked only by the framework's own code, recorded with
plain torch.profiler (CPU, CUDA, shapes, Python stacks) around the whole call:

    python workloads/verdicts/frameworks.py --out DIR [--device cpu] [--only lightning,trainer]

- lightning: a LightningModule MLP, `Trainer.fit` for 12 steps (no Lightning profiler:
  the steps are its Python frames, run_training_batch / optimizer_step, and one
  Optimizer.step per step).
- trainer: a transformers `Trainer.train` of a 2-layer BERT from a config (random weights,
  synthetic tokens) for 12 steps (its training_step frames, accelerate's backward).
"""

from __future__ import annotations

import argparse
import gzip
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile


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


def _profiler(cuda: bool) -> profile:
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    return profile(activities=acts, record_shapes=True, with_stack=True)


def lightning(dev: torch.device, out: Path) -> Path:
    try:
        import lightning.pytorch as pl
    except ImportError:
        import pytorch_lightning as pl  # type: ignore[no-redef]
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    class Net(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Sequential(nn.Linear(512, 1024), nn.GELU(), nn.Linear(1024, 512))

        def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
            x, y = batch
            return nn.functional.mse_loss(self.net(x), y)

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.AdamW(self.parameters(), lr=1e-3)

    data = TensorDataset(torch.randn(64 * 16, 512), torch.randn(64 * 16, 512))
    accel = "gpu" if dev.type == "cuda" else "cpu"

    def trainer(steps: int) -> pl.Trainer:
        return pl.Trainer(
            max_steps=steps,
            accelerator=accel,
            devices=1,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
        )

    model = Net()
    trainer(3).fit(model, DataLoader(data, batch_size=64))  # warm-up, untraced
    with _profiler(dev.type == "cuda") as prof:
        trainer(12).fit(model, DataLoader(data, batch_size=64))
    return _export(prof, out, "lightning")


def trainer(dev: torch.device, out: Path) -> Path:
    from torch.utils.data import Dataset
    from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments

    cfg = BertConfig(
        hidden_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=1024,
        vocab_size=1000,
        max_position_embeddings=128,
    )
    model = BertForSequenceClassification(cfg)

    class Tokens(Dataset):  # type: ignore[type-arg]
        def __len__(self) -> int:
            return 64 * 20

        def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
            g = torch.Generator().manual_seed(i)
            return {"input_ids": torch.randint(0, 1000, (128,), generator=g), "labels": torch.tensor(i % 2)}

    def args(steps: int, d: str) -> TrainingArguments:
        return TrainingArguments(
            output_dir=d,
            max_steps=steps,
            per_device_train_batch_size=32,
            report_to=[],
            save_strategy="no",
            logging_steps=1000,
            use_cpu=dev.type != "cuda",
            dataloader_num_workers=0,
            disable_tqdm=True,
        )

    with tempfile.TemporaryDirectory() as d:
        Trainer(model=model, args=args(3, d), train_dataset=Tokens()).train()  # warm-up, untraced
        t = Trainer(model=model, args=args(12, d), train_dataset=Tokens())
        with _profiler(dev.type == "cuda") as prof:
            t.train()
    return _export(prof, out, "trainer")


CASES = {"lightning": lightning, "trainer": trainer}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="sample_traces")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--only", default="")
    a = ap.parse_args()
    failed = 0
    for name in [n for n in a.only.split(",") if n] or list(CASES):
        t0 = time.perf_counter()
        try:
            path = CASES[name](torch.device(a.device), Path(a.out))
            print(
                f"{name}: {time.perf_counter() - t0:.1f} s -> {path} ({path.stat().st_size / 1e3:.0f} KB)", flush=True
            )
        except Exception as exc:
            failed += 1
            print(f"{name}: FAILED {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
