"""Changes directory mid-run (capture must still write where it was asked)."""

import os
import sys

os.makedirs(sys.argv[1], exist_ok=True)
os.chdir(sys.argv[1])
print("now in", os.getcwd())
