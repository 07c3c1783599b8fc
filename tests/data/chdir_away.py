"""Changes directory mid-run (capture must still write where it was asked). It runs a
torch op after the move, so there is something to record: a recording with no torch op
writes no trace."""

import os
import sys

import torch

os.makedirs(sys.argv[1], exist_ok=True)
os.chdir(sys.argv[1])
print("now in", os.getcwd())
print(float((torch.ones(4) + 1).sum()))
