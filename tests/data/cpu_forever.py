"""Runs small CPU ops until interrupted (for the Ctrl-C capture test)."""

import time

import torch

x = torch.randn(256, 256)
print("started", flush=True)
while True:
    x = torch.tanh(x @ x)
    time.sleep(0.01)
