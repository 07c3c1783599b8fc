"""capture_mask_sum: three host syncs in one function, for exact source lines.

A plain script (no tracelens harness): run it under `tracelens capture`. Each step of
`masked_mean` makes three host synchronisations, each from a different construct:
``x[mask]`` (boolean-mask indexing: aten::index > aten::nonzero must learn the output
size), ``if total:`` (a tensor's truth value: aten::is_nonzero > aten::item) and
``.item()``. torch.profiler records only the function's `def` line; the report must name
the line of each construct (tests/test_sources.py checks the H200 capture of this file,
sample_traces/capture_mask_sum.pt.trace.json.gz, against the line numbers below).

Run
    tracelens capture workloads/capture_mask_sum.py [--steps N] [--device cpu]
"""

import argparse

import torch

try:
    from tracelens.capture import step as mark_step
except ImportError:  # run without tracelens on the path

    def mark_step() -> None:
        pass


def masked_mean(x: torch.Tensor, w: torch.Tensor, thresh: float) -> float:
    y = torch.sin(x) * w
    mask = y > thresh
    sel = y[mask]  # LINE_INDEX: aten::index -> aten::nonzero -> sync
    total = sel.sum()
    if total:  # LINE_TRUTH: aten::is_nonzero -> aten::item -> sync
        y = y * 0.5
    return (y.mean() + total).item()  # LINE_ITEM: aten::item -> sync


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    n = (1 << 24) if args.device == "cuda" else (1 << 14)
    g = torch.Generator(device=args.device).manual_seed(0)
    x = torch.randn(n, device=args.device, generator=g)
    w = torch.randn(n, device=args.device, generator=g)
    acc = 0.0
    for _ in range(args.steps):
        acc += masked_mean(x, w, 0.25)
        mark_step()
    print(f"[capture_mask_sum] {args.steps} steps, acc {acc:.4f}")


if __name__ == "__main__":
    main()
