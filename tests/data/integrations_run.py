"""CPU programs for tests/test_integrations.py: each mode trains a tiny model with one of
tracelens's integrations and prints nothing of its own.

usage: integrations_run.py MODE OUT_TRACE OUT_DIR
MODE: record (tracelens.record + rec.step()), record-optimizer (no rec.step()),
record-short (asks for more steps than run), lightning, trainer.
"""

import sys
from pathlib import Path

import torch

mode, trace, out_dir = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])


def tiny() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))


if mode.startswith("record"):
    import tracelens

    model = tiny()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    steps = "10-12" if mode == "record-short" else "2-3"
    with tracelens.record(steps=steps, out=trace, out_dir=out_dir, report=mode == "record") as rec:
        for _ in range(6):
            model(torch.randn(8, 16)).pow(2).mean().backward()
            opt.step()
            opt.zero_grad()
            if mode != "record-optimizer":
                rec.step()
elif mode == "lightning":
    import lightning as L
    from torch.utils.data import DataLoader, TensorDataset

    from tracelens.integrations.lightning import TracelensCallback

    class Tiny(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = tiny()

        def training_step(self, batch: list[torch.Tensor], _i: int) -> torch.Tensor:
            return self.net(batch[0]).pow(2).mean()

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    data = DataLoader(TensorDataset(torch.randn(64, 16)), batch_size=8)
    cb = TracelensCallback(steps="2-3", out=trace, out_dir=out_dir, report=False)
    trainer = L.Trainer(max_steps=6, callbacks=[cb], logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, accelerator="cpu",
                        default_root_dir=str(out_dir))  # fmt: skip
    trainer.fit(Tiny(), data)
    assert cb.trace == trace.resolve(), cb.trace
elif mode == "trainer":
    from torch.utils.data import Dataset
    from transformers import Trainer, TrainingArguments

    from tracelens.integrations.transformers import TracelensTrainerCallback

    class Rows(Dataset[dict[str, torch.Tensor]]):
        def __len__(self) -> int:
            return 64

        def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
            return {"x": torch.randn(16)}

    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = tiny()

        def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
            return {"loss": self.net(x).pow(2).mean()}

    cb = TracelensTrainerCallback(steps="2-3", out=trace, out_dir=out_dir, report=False)
    args = TrainingArguments(output_dir=str(out_dir / "hf"), max_steps=6, per_device_train_batch_size=8,
                             report_to="none", save_strategy="no", use_cpu=True, disable_tqdm=True,
                             remove_unused_columns=False)  # fmt: skip
    Trainer(model=Model(), args=args, train_dataset=Rows(), callbacks=[cb]).train()
    assert cb.trace == trace.resolve(), cb.trace
else:
    raise SystemExit(f"unknown mode {mode}")
