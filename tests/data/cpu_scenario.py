"""A CPU training loop that ends in the way it is told, for the capture scenarios
(bench/capture_scenarios.py, tests/test_capture_supervisor.py).

usage: cpu_scenario.py [--steps N | --forever] [--end HOW] [--at STEP] [--code C]
                       [--pool] [--sleep S] [--own-profiler PATH] [--print-pid] [--device D]

HOW (at step STEP, default the last): exit (sys.exit(C)), raise, segv (a real SIGSEGV),
kill (SIGKILL to itself), abort (SIGABRT), os_exit (os._exit(C), no atexit).
--pool starts a spawn multiprocessing.Pool(1) first and uses it every step (one worker:
each imports torch again, 1.5 s of CPU).
"""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import sys
import time

import torch


def _square(x: int) -> int:
    return x * x


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--forever", action="store_true")
    ap.add_argument("--end", default="exit", choices=("exit", "raise", "segv", "kill", "abort", "os_exit"))
    ap.add_argument("--at", type=int, default=None)
    ap.add_argument("--code", type=int, default=0)
    ap.add_argument("--pool", action="store_true")
    ap.add_argument("--sleep", type=float, default=0.02)
    ap.add_argument("--own-profiler", default=None)
    ap.add_argument("--print-pid", action="store_true")
    ap.add_argument("--device", default="cpu", help="cuda: the same loop on the GPU (the H200 check)")
    args = ap.parse_args()
    if args.print_pid:
        print(f"pid {os.getpid()}", flush=True)
    pool = None
    if args.pool:
        import multiprocessing as mp

        pool = mp.get_context("spawn").Pool(1)
    dev = torch.device(args.device)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    at = args.at if args.at is not None else args.steps
    prof = None
    if args.own_profiler:
        acts = [torch.profiler.ProfilerActivity.CPU]
        if dev.type == "cuda":
            acts.append(torch.profiler.ProfilerActivity.CUDA)
        prof = torch.profiler.profile(activities=acts)
        prof.start()
    print("started", flush=True)
    i = 0
    while args.forever or i < args.steps:
        loss = model(torch.randn(16, 32, device=dev)).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        if pool is not None:
            pool.map(_square, range(4))
        if prof is not None:
            prof.step()
        time.sleep(args.sleep)
        i += 1
        if not args.forever and i == at and args.end != "exit":
            _end(args.end, args.code)
    if prof is not None:
        prof.stop()
        prof.export_chrome_trace(args.own_profiler)
        print(f"own trace {args.own_profiler}", flush=True)
    if pool is not None:
        pool.close()
        pool.join()
    print(f"ran {i} steps", flush=True)
    sys.exit(args.code)


def _end(how: str, code: int) -> None:
    sys.stdout.flush()
    if how == "raise":
        raise RuntimeError("planted failure")
    if how == "segv":
        ctypes.string_at(0)  # reads address 0: SIGSEGV
    if how == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if how == "abort":
        os.abort()
    if how == "os_exit":
        os._exit(code)


if __name__ == "__main__":
    main()
