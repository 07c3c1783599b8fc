"""Time a program's steps without the profiler, for several configurations in one process.

Each variant runs the script as `__main__` (runpy, as `python SCRIPT ARGS` would) with
the common arguments plus its own; a step ends at every `optimizer.step()` (a global
post hook) or, with `--mark module:NAME[,NAME2...]`, at the end of every outermost call
of a module whose class is one of the NAMEs (a batch of an inference loop). At each step
end a CUDA event is recorded on the current stream, so a step's time is the device
timeline between two step ends: kernels and the idle between them, host-bound gaps
included. The first `--warmup` steps are
skipped; the median, quartiles and mean of the rest are written as JSON. No profiler and
no tracelens import: this is the unprofiled measurement the reports' gains are checked
against.

    python workloads/programs/time_steps.py --name lightning --out t.json \
        --variant "baseline:" --variant "workers8:--workers 8" \
        -- workloads/programs/lightning_fit.py --max-steps 50

A variant's tokens of the form @VAR=VALUE set environment variables for that variant
(e.g. @ACCELERATE_MIXED_PRECISION=bf16, what `accelerate launch --mixed_precision bf16`
sets).

`--capture PATH --capture-steps N-M` also records the first variant's configuration with
`tracelens capture` (the same runner the command uses, `--steps N-M`), in this process
right after that variant's unprofiled run, so the device time of a second Python start,
its imports and CUDA's initialisation is not spent again. The profiler is imported only
then; the process ends without destroying the profile (see tracelens/capture/runner.py).
"""

from __future__ import annotations

import argparse
import json
import os
import runpy
import shlex
import statistics
import sys
import time
import traceback
from typing import Any

import torch


class Marks:
    def __init__(self, module: str | None) -> None:
        self.events: list[Any] = []
        self.host: list[float] = []
        self.module = module
        self.first: float | None = None
        self.t0 = time.perf_counter()
        self.depth = 0
        self.cuda = torch.cuda.is_available()

    def mark(self) -> None:
        if self.cuda:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            self.events.append(ev)
        self.host.append(time.perf_counter())
        if self.first is None:
            self.first = self.host[-1]
            print(f"[time_steps] first step end at {self.first - self.t0:.2f} s", flush=True)

    def install(self) -> list[Any]:
        handles: list[Any] = []
        if self.module is None:
            from torch.optim.optimizer import register_optimizer_step_post_hook

            handles.append(register_optimizer_step_post_hook(lambda *_a: self.mark()))
            return handles
        from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook

        # Several names: whichever of them the library calls through nn.Module.__call__ (a
        # model called by its .forward() directly fires no hook: sentence-transformers 6
        # calls its BertModel so, and the H200 run saw no BertModel mark).
        names = set(self.module.split(","))

        def pre(m: Any, _a: Any) -> None:
            if type(m).__name__ in names:
                self.depth += 1

        def post(m: Any, _a: Any, _r: Any) -> None:
            if type(m).__name__ in names:
                self.depth -= 1
                if self.depth == 0:
                    self.mark()

        handles.append(register_module_forward_pre_hook(pre))
        handles.append(register_module_forward_hook(post))
        return handles


def summarize(marks: Marks, warmup: int) -> dict[str, Any]:
    if marks.cuda:
        torch.cuda.synchronize()
        per = [a.elapsed_time(b) for a, b in zip(marks.events, marks.events[1:], strict=False)]
    else:
        per = [(b - a) * 1e3 for a, b in zip(marks.host, marks.host[1:], strict=False)]
    host = [(b - a) * 1e3 for a, b in zip(marks.host, marks.host[1:], strict=False)]
    steady, steady_host = per[warmup:], host[warmup:]
    out: dict[str, Any] = {"steps_marked": len(marks.host), "steps_timed": len(steady)}
    if len(steady) >= 2:
        q = statistics.quantiles(steady, n=4)
        out.update(
            median_ms=statistics.median(steady), p25_ms=q[0], p75_ms=q[2], mean_ms=statistics.fmean(steady),
            stdev_ms=statistics.stdev(steady), host_median_ms=statistics.median(steady_host),
        )  # fmt: skip
    return out


def reset_globals(saved: dict[str, Any], compiled: bool) -> None:
    """Undo what a variant set process-wide (TF32 flags, dynamo caches, accelerate's
    singleton state) so the next variant starts as a fresh process would."""
    torch.backends.cuda.matmul.allow_tf32 = saved["matmul_tf32"]
    torch.backends.cudnn.allow_tf32 = saved["cudnn_tf32"]
    torch.backends.cudnn.benchmark = saved["cudnn_benchmark"]
    torch.set_float32_matmul_precision(saved["matmul_precision"])
    if compiled and "torch._dynamo" in sys.modules:
        torch._dynamo.reset()
    if "accelerate" in sys.modules:
        from accelerate.state import AcceleratorState, GradientState, PartialState

        AcceleratorState._reset_state(True)
        GradientState._reset_state()
        PartialState._reset_state()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--name", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--variant", action="append", required=True, help="NAME:ARGS")
    p.add_argument("--mark", default="optimizer", help="optimizer, or module:CLASSNAME")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--capture", default="", help="also `tracelens capture` the first variant into this trace")
    p.add_argument("--capture-steps", default="5-9")
    p.add_argument("--capture-variant", default="", help="capture this variant (after timing it), not the first")
    p.add_argument(
        "--capture-first", action="store_true", help="capture the first variant instead of timing it, before the others"
    )
    p.add_argument("script_and_args", nargs=argparse.REMAINDER)
    a = p.parse_args()
    rest = a.script_and_args[1:] if a.script_and_args[:1] == ["--"] else a.script_and_args
    script, common = rest[0], rest[1:]
    module = a.mark.split(":", 1)[1] if a.mark.startswith("module:") else None
    saved = {
        "matmul_tf32": torch.backends.cuda.matmul.allow_tf32,
        "cudnn_tf32": torch.backends.cudnn.allow_tf32,
        "cudnn_benchmark": torch.backends.cudnn.benchmark,
        "matmul_precision": torch.get_float32_matmul_precision(),
    }
    results: dict[str, Any] = {
        "program": a.name, "script": script, "common_args": common, "warmup_steps": a.warmup, "mark": a.mark,
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None, "variants": {},
    }  # fmt: skip
    script_dir = os.path.dirname(os.path.abspath(script))
    captured = False
    variants = list(a.variant)
    if a.capture and a.capture_first:
        captured = True
        name, _, argstr = variants.pop(0).partition(":")
        tokens = shlex.split(argstr)
        env = dict(t[1:].split("=", 1) for t in tokens if t.startswith("@"))
        os.environ.update(env)
        cargs = [*common, *(t for t in tokens if not t.startswith("@"))]
        results["capture"] = {"variant": name, **capture(script, cargs, a.capture, a.capture_steps)}
        for k in env:
            os.environ.pop(k, None)
        reset_globals(saved, False)
        write(a.out, results)
    for spec in variants:
        name, _, argstr = spec.partition(":")
        tokens = shlex.split(argstr)
        env = dict(t[1:].split("=", 1) for t in tokens if t.startswith("@"))
        vargs = [t for t in tokens if not t.startswith("@")]
        old_env = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        marks = Marks(module)
        handles = marks.install()
        sys.argv = [script, *common, *vargs]
        sys.path.insert(0, script_dir)
        t0 = time.perf_counter()
        err = None
        try:
            runpy.run_path(script, run_name="__main__")
        except SystemExit as exc:
            if exc.code not in (None, 0):
                err = f"SystemExit({exc.code})"
        except Exception as exc:
            traceback.print_exc()
            err = f"{type(exc).__name__}: {exc}"
        wall = time.perf_counter() - t0
        for h in handles:
            h.remove()
        sys.path.remove(script_dir)
        res = summarize(marks, a.warmup)
        first_s = round(marks.first - t0, 2) if marks.first is not None else None
        res.update(args=vargs, env=env, wall_s=round(wall, 2), first_mark_s=first_s, error=err)
        results["variants"][name] = res
        write(a.out, results)  # at once: a run cut short keeps what it timed
        med = res.get("median_ms")
        print(f"[time_steps] {a.name}/{name}: " + (f"median {med:.2f} ms" if med else "no steady steps")
              + f" over {res['steps_timed']} steps, first step end at {first_s} s, wall {wall:.1f} s"
              + (f", ERROR {err}" if err else ""),
              flush=True)  # fmt: skip
        for k, v in old_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        reset_globals(saved, "--compile" in vargs)
        if a.capture and not captured and (not a.capture_variant or name == a.capture_variant):
            captured = True
            os.environ.update(env)
            results["capture"] = {"variant": name, **capture(script, [*common, *vargs], a.capture, a.capture_steps)}
            write(a.out, results)
            for k in env:
                os.environ.pop(k, None)
            reset_globals(saved, False)
    if captured:
        from tracelens.capture.runner import exit_process

        exit_process(0)


def capture(script: str, args: list[str], out: str, steps: str) -> dict[str, Any]:
    """`tracelens capture --steps STEPS -o OUT SCRIPT ARGS --no-report`, in this process."""
    from pathlib import Path

    from tracelens.capture.runner import CaptureOptions
    from tracelens.capture.runner import capture as run_capture
    from tracelens.capture.window import Limits, Mode

    lo, hi = (int(x) for x in steps.split("-"))
    limits = Limits(mode=Mode.STEPS, warmup_steps=lo, steps=hi - lo + 1, duration_s=None)
    t0 = time.perf_counter()
    try:
        res = run_capture(CaptureOptions(target=script, args=args, out=Path(out), limits=limits))
    except Exception as exc:
        traceback.print_exc()
        return {"error": f"{type(exc).__name__}: {exc}"}
    wall = time.perf_counter() - t0
    for note in res.notes:
        print(f"[time_steps] capture note: {note}", flush=True)
    st = res.stats
    print(f"[time_steps] captured {out}: exit {res.exit_code}, {wall:.1f} s, "
          f"{(st.bytes / 1e6 if st else 0):.1f} MB, {(st.events if st else 0):,} events", flush=True)  # fmt: skip
    return {"trace": out, "exit_code": res.exit_code, "wall_s": round(wall, 2), "notes": res.notes,
            "bytes": st.bytes if st else None, "events": st.events if st else None}  # fmt: skip


def write(path: str, results: dict[str, Any]) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as fh:
        json.dump(results, fh, indent=1)
    os.replace(tmp, path)


if __name__ == "__main__":
    main()
