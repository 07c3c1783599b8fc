"""CPU training steps of ~0.1 s each, for the --window capture test."""

import sys
import time

import torch

model = torch.nn.Linear(16, 16)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
t0 = time.perf_counter()
steps = int(sys.argv[1]) if len(sys.argv) > 1 else 12
for _ in range(steps):
    model(torch.randn(4, 16)).sum().backward()
    time.sleep(0.1)
    opt.step()
    opt.zero_grad()
print(f"done in {time.perf_counter() - t0:.2f} s")
