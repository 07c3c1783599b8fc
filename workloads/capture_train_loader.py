"""capture_train_loader: a training loop fed by a DataLoader with two worker processes.

A small MLP classifier (4 x Linear 1024, GELU) trained with AdamW on synthetic batches
(256 x 1024 fp32) that a `Dataset` builds on the CPU in `DataLoader(num_workers=2)`
workers and that are copied to the GPU each step. The steps are the optimizer.step()
calls. `--times PATH` writes every step's wall time (JSON) for bench/bench_capture.py.

Run
    tracelens capture workloads/capture_train_loader.py [--steps 60]
"""

import argparse
import json
import time

import torch
from torch.utils.data import DataLoader, Dataset


class Synthetic(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    def __init__(self, n: int, dim: int) -> None:
        self.n, self.dim = n, dim

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        g = torch.Generator().manual_seed(i)
        x = torch.randn(self.dim, generator=g)
        return x, (x[:10].argmax())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--dim", type=int, default=1024)
    parser.add_argument("--times", default="")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    dim = args.dim if args.device == "cuda" else 64
    dev = torch.device(args.device)
    layers: list[torch.nn.Module] = []
    for _ in range(4):
        layers += [torch.nn.Linear(dim, dim), torch.nn.GELU()]
    model = torch.nn.Sequential(*layers, torch.nn.Linear(dim, 10)).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loader = DataLoader(
        Synthetic(args.steps * args.batch, dim), batch_size=args.batch, num_workers=2, pin_memory=dev.type == "cuda",
        persistent_workers=False,
    )  # fmt: skip
    times: list[float] = []
    t = time.perf_counter()
    for x, y in loader:
        x, y = x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if dev.type == "cuda":
            torch.cuda.synchronize()  # per-step wall times for the bench
        now = time.perf_counter()
        times.append(now - t)
        t = now
    print(f"[capture_train_loader] {len(times)} steps, median {sorted(times)[len(times) // 2] * 1e3:.2f} ms")
    if args.times:
        with open(args.times, "w") as fh:
            json.dump(times, fh)


if __name__ == "__main__":
    main()
