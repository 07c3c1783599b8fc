"""A PyTorch Lightning `fit`, as its users write it: a LightningModule (a small ResNet-style
image classifier), a LightningDataModule over a synthetic image dataset whose
`__getitem__` does per-sample CPU work (decode-like noise + augmentation), and
`Trainer(...).fit(model, datamodule)`. Defaults are Lightning's and a typical first
script's: fp32, `num_workers=0`, no pinned memory.

    python workloads/programs/lightning_fit.py [--workers N] [--precision bf16-mixed]
        [--pin-memory] [--batch-size B] [--max-steps S] [--compile]
"""

import argparse
import tempfile

import lightning as L
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset


class SyntheticImages(Dataset[tuple[torch.Tensor, int]]):
    """Stands in for an image folder: each sample is made and augmented on the CPU."""

    def __init__(self, n: int, size: int) -> None:
        self.n, self.size = n, size

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        g = torch.Generator().manual_seed(i)
        img = torch.rand(3, self.size + 32, self.size + 32, generator=g)  # "decoded" image
        top, left = torch.randint(0, 32, (2,), generator=g).tolist()
        img = img[:, top : top + self.size, left : left + self.size]  # random crop
        if torch.rand(1, generator=g).item() < 0.5:
            img = img.flip(-1)
        img = (img - 0.45) / 0.225  # normalize
        return img.contiguous(), i % 100


class Images(L.LightningDataModule):
    def __init__(self, batch_size: int, workers: int, pin_memory: bool, size: int) -> None:
        super().__init__()
        self.batch_size, self.workers, self.pin_memory, self.size = batch_size, workers, pin_memory, size

    def train_dataloader(self) -> DataLoader[tuple[torch.Tensor, int]]:
        return DataLoader(
            SyntheticImages(50_000, self.size),
            batch_size=self.batch_size,
            shuffle=True,
            num_workers=self.workers,
            pin_memory=self.pin_memory,
            persistent_workers=self.workers > 0,
        )


def block(cin: int, cout: int, stride: int) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, stride, 1, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU(inplace=True),
        nn.Conv2d(cout, cout, 3, 1, 1, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU(inplace=True),
    )


class Classifier(L.LightningModule):
    def __init__(self, width: int = 64, lr: float = 1e-3) -> None:
        super().__init__()
        self.save_hyperparameters()
        w = width
        self.net = nn.Sequential(
            block(3, w, 2), block(w, 2 * w, 2), block(2 * w, 4 * w, 2), block(4 * w, 8 * w, 2),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8 * w, 100),
        )  # fmt: skip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=self.hparams.lr)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--pin-memory", action="store_true")
    p.add_argument("--precision", default="32-true")
    p.add_argument("--max-steps", type=int, default=60)
    p.add_argument("--size", type=int, default=128)
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--compile", action="store_true")
    p.add_argument("--profile-dir", default="", help="Lightning's own PyTorchProfiler writes its trace here")
    args = p.parse_args()
    model: L.LightningModule = Classifier(args.width)
    if args.compile:
        model = torch.compile(model)  # type: ignore[assignment]
    profiler = None
    if args.profile_dir:
        from lightning.pytorch.profilers import PyTorchProfiler

        profiler = PyTorchProfiler(dirpath=args.profile_dir, filename="fit", export_to_chrome=True, record_shapes=True)
    trainer = L.Trainer(
        max_steps=args.max_steps,
        precision=args.precision,
        default_root_dir=tempfile.mkdtemp(prefix="lightning-fit-"),
        enable_checkpointing=False,
        logger=False,
        profiler=profiler,
    )
    trainer.fit(model, datamodule=Images(args.batch_size, args.workers, args.pin_memory, args.size))


if __name__ == "__main__":
    main()
