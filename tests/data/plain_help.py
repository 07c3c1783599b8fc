"""A plain-Python script with argparse and no torch: `--help` exits 0, bad options 2."""

import argparse

parser = argparse.ArgumentParser(description="plain script")
parser.add_argument("--n", type=int, default=1)
args = parser.parse_args()
print("n =", args.n)
