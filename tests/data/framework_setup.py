"""A program whose framework set-up outlasts the capture's time-based warm-up (5 s):
it imports a framework (a stand-in module named `lightning`, so the test needs none),
spends SETUP_S seconds building before its first module call, then trains STEPS steps.
The set-up mostly sleeps (what the warm-up counts is wall time, so it need not use the
CPU a test on a shared 2-core machine needs), with a little Python between the sleeps.

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
while time.perf_counter() < deadline:  # set-up, no module call
    sum(i * i for i in range(1_000))
    time.sleep(0.01)
model = torch.nn.Linear(16, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(steps):
    model(torch.randn(8, 16)).pow(2).mean().backward()
    opt.step()
    opt.zero_grad()
