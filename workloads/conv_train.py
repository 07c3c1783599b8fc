"""conv_train: a ResNet-style convolutional training step (bf16 autocast, channels_last).

What it demonstrates
    The roofline's convolution models on a current torch: ``aten::convolution`` with its
    stride, padding and dilation in ``Concrete Inputs``, ``aten::convolution_backward``
    with its ``output_mask`` (the first layer's input needs no gradient), batch norm
    forward and backward, ReLU, max pooling, adaptive average pooling, a linear head and
    foreach SGD with momentum. Batch 64 at 112x112: 3x3 and 1x1 convolutions from 64 to
    512 channels, strides 1 and 2, large enough for cuDNN's tensor-core kernels.

What an analyzer should find
    Convolution kernels compute-bound (bf16 tensor cores) below the measured ceiling;
    batch norm, ReLU and the residual adds memory-bound, in fusible chains
    (batch_norm > add > relu); no achieved rate above the peak; the roofline covering
    nearly all kernel time.

Run
    python workloads/conv_train.py --out sample_traces
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch
import torch.nn.functional as F
from _profile import parse_args, profile_steps
from torch import nn

NAME = "conv_train"


class Bottleneck(nn.Module):
    def __init__(self, cin: int, width: int, stride: int) -> None:
        super().__init__()
        cout = width * 4
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.down = (
            nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout))
            if stride != 1 or cin != cout
            else nn.Identity()
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.conv1(x)))
        y = F.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return F.relu(y + self.down(x))


class SmallResNet(nn.Module):
    def __init__(self, classes: int = 1000) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(3, 2, 1)
        )
        self.layers = nn.Sequential(
            Bottleneck(64, 64, 1), Bottleneck(256, 64, 1), Bottleneck(256, 128, 2), Bottleneck(512, 128, 1),
            Bottleneck(512, 256, 2), Bottleneck(1024, 256, 1),
        )  # fmt: skip
        self.head = nn.Linear(1024, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layers(self.stem(x))
        return self.head(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def main() -> None:
    args = parse_args(__doc__)
    dev = args.device
    batch, size = (64, 112) if args.is_cuda else (2, 32)
    steps = args.steps or 4
    warmup = args.warmup if args.warmup is not None else 2
    torch.manual_seed(0)
    model = SmallResNet().to(dev).to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    g = torch.Generator(device=dev).manual_seed(0)
    images = torch.randn(batch, 3, size, size, device=dev, generator=g).to(memory_format=torch.channels_last)
    labels = torch.randint(0, 1000, (batch,), device=dev, generator=g)

    def step() -> None:
        with torch.autocast(device_type=dev.type, dtype=torch.bfloat16):
            loss = F.cross_entropy(model(images), labels)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    profile_steps(
        step, name=NAME, steps=steps, warmup=warmup, out_dir=args.out, device=dev,
        metadata={"batch": batch, "image": size, "params": sum(p.numel() for p in model.parameters())},
    )  # fmt: skip


if __name__ == "__main__":
    main()
