"""An inference loop with no optimizer: steps are the outermost nn.Module calls.

usage: cpu_infer.py STEPS
"""

import sys

import torch

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 30
model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.GELU(), torch.nn.Linear(64, 8))
x = torch.randn(8, 64)
with torch.no_grad():
    for _ in range(steps):
        y = model(x)
        x = x + 0.01 * y.sum()
print("inference done")
