"""A program whose framework set-up outlasts the capture's time-based warm-up (5 s):
it imports a framework (a stand-in module named `lightning`, so the test needs none),
spends SETUP_S seconds building before its first module call, then trains STEPS steps.

usage: framework_setup.py SETUP_S STEPS [--no-framework]
"""

import sys
import time
import types

if "--no-framework" not in sys.argv:  # as `import lightning` does, before torch's import
    sys.modules.setdefault("lightning", types.ModuleType("lightning"))

import torch

setup_s, steps = float(sys.argv[1]), int(sys.argv[2])
deadline = time.perf_counter() + setup_s
while time.perf_counter() < deadline:  # Python-heavy set-up, no module call
    sum(i * i for i in range(10_000))
model = torch.nn.Linear(16, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(steps):
    model(torch.randn(8, 16)).pow(2).mean().backward()
    opt.step()
    opt.zero_grad()
