"""capture_long_loop: a 5-minute training loop, for stopping with SIGTERM.

Transformer-encoder layers (d 1024, 4 layers, batch 16 x 256, bf16 autocast) trained with
AdamW for SECONDS seconds (default 300), printing a line every 10 s. Under
`timeout -s TERM 30 tracelens capture workloads/capture_long_loop.py` (what Slurm,
docker and systemd do) the recording (steps 5-24) is long over when the signal comes;
the trace must still be written and the exit code must be 143.

Run
    timeout -s TERM 30 tracelens capture workloads/capture_long_loop.py
"""

import argparse
import time

import torch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=300.0)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    cuda = args.device == "cuda"
    d, b, s = (1024, 16, 256) if cuda else (64, 2, 16)
    layer = torch.nn.TransformerEncoderLayer(d, 16 if cuda else 4, 4 * d, batch_first=True)
    model = torch.nn.TransformerEncoder(layer, 4, enable_nested_tensor=False).to(args.device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(b, s, d, device=args.device)
    t0 = last = time.perf_counter()
    steps = 0
    while time.perf_counter() - t0 < args.seconds:
        with torch.autocast(args.device, dtype=torch.bfloat16, enabled=cuda):
            loss = model(x).float().pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        steps += 1
        if time.perf_counter() - last >= 10:
            last = time.perf_counter()
            print(f"[capture_long_loop] {steps} steps, {last - t0:.0f} s", flush=True)
    print(f"[capture_long_loop] done: {steps} steps")


if __name__ == "__main__":
    main()
