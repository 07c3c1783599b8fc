"""A training loop with two threads running torch ops beside it all the time (as a
DataLoader's pin-memory thread and a metrics thread do), for the capture crash hunt:
recordings start, stop and export while other threads are inside torch.

usage: cpu_threaded_loop.py [--steps N | --forever] [--threads K]
"""

from __future__ import annotations

import argparse
import threading
import time

import torch


def background(stop: threading.Event) -> None:
    x = torch.randn(64, 64)
    while not stop.is_set():
        x = torch.tanh(x @ x) * 0.5
        y = x.sum(dim=0).softmax(0)
        del y
        time.sleep(0.001)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--forever", action="store_true")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    stop = threading.Event()
    workers = [threading.Thread(target=background, args=(stop,), daemon=True) for _ in range(args.threads)]
    for w in workers:
        w.start()
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    print("started", flush=True)
    i = 0
    try:
        while args.forever or i < args.steps:
            loss = model(torch.randn(16, 32)).pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            time.sleep(0.01)
            i += 1
    finally:
        stop.set()
        for w in workers:
            w.join()
    print(f"ran {i} steps", flush=True)


if __name__ == "__main__":
    main()
