"""A tiny CPU training script for `tracelens capture` tests (no GPU needed).

usage: cpu_train.py STEPS [EXIT_CODE] [--explicit] [--raise]
"""

import sys

import torch

steps = int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1].isdigit() else 4
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for i in range(steps):
    loss = model(torch.randn(16, 32)).pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
    if "--explicit" in sys.argv:
        import tracelens.capture

        tracelens.capture.step()
    if "--raise" in sys.argv and i == 1:
        raise RuntimeError("planted failure")
print(f"ran {steps} steps as {__name__} with argv {sys.argv[1:]}")
if len(sys.argv) > 2 and sys.argv[2].isdigit():
    sys.exit(int(sys.argv[2]))
