"""A torchvision detection model's training step, as torchvision's detection reference
(references/detection/engine.py `train_one_epoch`) runs it: Faster R-CNN (ResNet-50 FPN,
random weights) in train mode, a list of images and target dicts (boxes, labels) from a
DataLoader with the references' `collate_fn`, the summed loss dict, SGD with momentum,
the first epoch's linear warm-up, and the reference's per-step `loss.item()` check.

    python workloads/programs/detection_train.py [--batch-size 4] [--workers 0]
        [--amp] [--jitter 0] [--steps 40] [--model fasterrcnn_resnet50_fpn]
"""

import argparse
import math

import torch
import torchvision
from torch.utils.data import DataLoader, Dataset


class SyntheticDetection(Dataset[tuple[torch.Tensor, dict[str, torch.Tensor]]]):
    """COCO-like samples: an image of a few hundred pixels a side and 1-8 boxes."""

    def __init__(self, n: int, size: int, jitter: int) -> None:
        self.n, self.size, self.jitter = n, size, jitter

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        g = torch.Generator().manual_seed(i)
        h = self.size + int(torch.randint(-self.jitter, self.jitter + 1, (1,), generator=g))
        w = self.size + int(torch.randint(-self.jitter, self.jitter + 1, (1,), generator=g))
        img = torch.rand(3, h, w, generator=g)
        k = int(torch.randint(1, 9, (1,), generator=g))
        xy = torch.rand(k, 2, generator=g) * torch.tensor([w * 0.7, h * 0.7])
        wh = 16 + torch.rand(k, 2, generator=g) * torch.tensor([w * 0.3, h * 0.3])
        boxes = torch.cat([xy, xy + wh], dim=1)
        labels = torch.randint(1, 91, (k,), generator=g)
        return img, {"boxes": boxes, "labels": labels}


def collate_fn(batch: list[tuple[torch.Tensor, dict[str, torch.Tensor]]]) -> tuple[tuple, tuple]:  # type: ignore[type-arg]
    return tuple(zip(*batch, strict=False))  # type: ignore[return-value]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="fasterrcnn_resnet50_fpn")
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--size", type=int, default=512)
    p.add_argument("--jitter", type=int, default=64, help="image sides vary by up to this many pixels")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--amp", action="store_true")
    args = p.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = torchvision.models.get_model(args.model, weights=None, weights_backbone=None, num_classes=91)
    model.to(device).train()
    params = [q for q in model.parameters() if q.requires_grad]
    # The reference's 0.02 is for 16 images a step (8 GPUs x 2); scaled to this batch.
    optimizer = torch.optim.SGD(params, lr=0.02 * args.batch_size / 16, momentum=0.9, weight_decay=1e-4)
    # The reference's warm-up in the first epoch (random weights diverge without it).
    warmup = torch.optim.lr_scheduler.LinearLR(optimizer, start_factor=0.001, total_iters=1000)
    scaler = torch.amp.GradScaler(device.type) if args.amp else None
    loader = DataLoader(
        SyntheticDetection(args.steps * args.batch_size, args.size, args.jitter),
        batch_size=args.batch_size, shuffle=True, num_workers=args.workers, collate_fn=collate_fn,
    )  # fmt: skip
    for i, (images, targets) in enumerate(loader):
        images = [im.to(device) for im in images]
        targets = [{k: v.to(device) for k, v in t.items()} for t in targets]
        with torch.autocast(device.type, enabled=scaler is not None):
            loss_dict = model(images, targets)
            losses = sum(loss for loss in loss_dict.values())
        loss_value = losses.item()  # the reference logs (and checks) every step's loss
        if not math.isfinite(loss_value):
            raise SystemExit(f"Loss is {loss_value}, stopping training")
        optimizer.zero_grad()
        if scaler is not None:
            scaler.scale(losses).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            losses.backward()
            optimizer.step()
        warmup.step()
        if i % 10 == 0:
            print(f"step {i} loss {loss_value:.3f}")


if __name__ == "__main__":
    main()
