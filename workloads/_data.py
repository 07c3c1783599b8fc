"""Shared pieces of host_bound_pageable.py and host_bound_pinned.py: the CPU-side batch
builder (numpy: random uint8 "images", normalisation, horizontal flip) and the small conv
net both scripts run. Kept in one place so the two traces compare like for like."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

BATCH_SHAPE_CUDA = (32, 3, 160, 160)  # 2.46M fp32 = 9.8 MB per batch, ~3-5 ms of CPU work
BATCH_SHAPE_CPU = (8, 3, 64, 64)  # smoke-test size

_MEAN = np.array([0.485, 0.456, 0.406], np.float32).reshape(1, 3, 1, 1)
_STD = np.array([0.229, 0.224, 0.225], np.float32).reshape(1, 3, 1, 1)


def make_batch(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Decode-and-augment stand-in: real CPU work, returns a contiguous fp32 NCHW array."""
    img = rng.integers(0, 256, size=shape, dtype=np.uint8)
    a = img.astype(np.float32)
    a *= 1.0 / 255.0
    a -= _MEAN
    a /= _STD
    return np.ascontiguousarray(a[:, :, :, ::-1])  # horizontal flip


def make_model(device: torch.device) -> nn.Module:
    """Small conv net: ~70 GFLOP per 32x3x160x160 batch (~1 ms on an H200)."""

    def block(cin: int, cout: int, stride: int) -> nn.Sequential:
        return nn.Sequential(
            nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True)
        )

    model = nn.Sequential(
        block(3, 64, 2),  # 80x80
        block(64, 64, 1),
        block(64, 64, 1),
        block(64, 128, 2),  # 40x40
        block(128, 128, 1),
        block(128, 128, 1),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(128, 256),
        nn.ReLU(inplace=True),
        nn.Linear(256, 1000),
    )
    return model.to(device).eval()
