"""A script that runs torch.profiler itself (capture must not crash on it)."""

import torch
from torch.profiler import profile

with profile() as p:
    torch.randn(64, 64) @ torch.randn(64, 64)
print("inner profiler done")
