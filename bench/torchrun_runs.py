"""Issue 33's check, many times: `torchrun --nproc-per-node 2 -m tracelens capture
workloads/ranks/ddp_cpu.py` (a 40-step DDP loop on gloo; rank 1 spends 20 ms of Python a
step before its forward), each run in a fresh folder holding a stale rank 1 trace of an
earlier run (planted, an hour old), each within a bounded time.

    nice -n 10 python bench/torchrun_runs.py --runs 50 --jobs 4 --out /tmp/tr.jsonl
    python bench/torchrun_runs.py --runs 50 --jobs 6 --device cuda --out /tmp/tr.jsonl   (one GPU)
    python bench/torchrun_runs.py --table /tmp/tr.jsonl

A run is "ok" when: torchrun exits 0 within --run-timeout; the job report
(`reports/ddp_cpu-ranks.job.json`) is on this run's two ranks (both traces carry one run
token, not the planted one; no rank failed or missing); the straggler named first is
rank 1 with a reason (not "unknown"); and no process of the run outlives it. Each run is
one JSON line in --out (what was named, its cost and reason, the wall time); --table
prints the counts with the machine's load.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tracelens.capture.ranks import peek_run, write_gz_head  # noqa: E402

# The live processes of a run's session: the scenarios harness's own reader of /proc.
sys.path.insert(0, str(Path(__file__).resolve().parent))
from capture_scenarios import _session_alive  # noqa: E402

SCRIPT = REPO / "workloads" / "ranks" / "ddp_cpu.py"
STALE_TOKEN = "tok-of-an-earlier-run"
SLOW_RANK = 1


def _plant(folder: Path) -> Path:
    """A rank 1 trace of an earlier run, as tracelens capture writes one (its run tag first)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"rank{SLOW_RANK}.pt.trace.json.gz"
    with gzip.open(path, "wb") as fh:
        write_gz_head(fh, {"token": STALE_TOKEN, "rank": SLOW_RANK, "world_size": 2})
        fh.write(b'"traceEvents":[]}')
    old = time.time() - 3600
    os.utime(path, (old, old))
    return path


def _launcher() -> list[str]:
    exe = Path(sys.executable).parent / "torchrun"
    if exe.is_file():
        return [str(exe)]
    found = shutil.which("torchrun")
    return [found] if found else [sys.executable, "-m", "torch.distributed.run"]


def run_one(
    index: int,
    device: str,
    steps: int | None,
    timeout_s: float,
    nice: int,
    extra: list[str],
    keep: Path | None,
    keep_traces: bool = False,
) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="tl-torchrun-"))
    out_dir = work / "reports"
    folder = out_dir / "ddp_cpu-ranks"
    _plant(folder)
    script_args = ["--device", device] + (["--steps", str(steps)] if steps else [])
    cmd = ["nice", "-n", str(nice), *_launcher(), "--standalone", "--nproc-per-node", "2", "-m", "tracelens",
           "capture", "--out-dir", str(out_dir), *extra, str(SCRIPT), *script_args]  # fmt: skip
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("TRACELENS_DEBUG", None)
    r: dict[str, Any] = {"run": index, "device": device, "problems": []}
    t0 = time.monotonic()
    proc = subprocess.Popen(
        cmd, cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    chunks: list[str] = []
    reader = threading.Thread(target=lambda: chunks.append(proc.stdout.read() if proc.stdout else ""), daemon=True)
    reader.start()
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        r["problems"].append(f"hang: still running after {timeout_s:.0f} s")
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10)
        for pid in _session_alive(proc.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        proc.wait()
    r["wall_s"] = round(time.monotonic() - t0, 2)
    r["rc"] = proc.returncode
    deadline = time.monotonic() + 5.0
    while _session_alive(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = _session_alive(proc.pid)
    if left:
        r["problems"].append(f"{len(left)} process(es) of the run left behind")
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    reader.join(timeout=5)
    log = "".join(chunks)
    r["log_tail"] = log[-3000:]
    if proc.returncode != 0 and not r["problems"]:
        r["problems"].append(f"torchrun exit {proc.returncode}")
    if "Traceback" in log:
        r["problems"].append("a traceback in the output")
    tokens = {}
    for rank in (0, 1):
        tag = peek_run(folder / f"rank{rank}.pt.trace.json.gz")
        tokens[rank] = tag.get("token") if isinstance(tag, dict) else None
    r["tokens_differ"] = tokens[0] != tokens[1]
    if tokens[0] is None or tokens[1] is None or tokens[0] != tokens[1]:
        r["problems"].append(f"the two traces are not of one run (run tags {tokens})")
    if STALE_TOKEN in tokens.values():
        r["problems"].append("the planted stale trace is still there (rank 1's fresh trace not written over it)")
    job_path = out_dir / "ddp_cpu-ranks.job.json"
    if not job_path.is_file():
        r["problems"].append("no job report")
    else:
        try:
            doc = json.loads(job_path.read_text())
        except ValueError as exc:
            doc = None
            r["problems"].append(f"the job report is not JSON ({exc})")
        if isinstance(doc, dict):
            job = doc.get("job") or {}
            r["ranks"] = job.get("ranks")
            r["failed"] = doc.get("failed")
            r["alignment_error_us"] = job.get("alignment_error_us")
            r["counted_collectives"] = job.get("counted_collectives")
            r["job_problems"] = job.get("problems")
            st = job.get("stragglers") or []
            keys = ("rank", "late_share", "cost_us", "reason", "reason_label", "reason_us", "profiler_us", "own_us")
            r["stragglers"] = [{k: s.get(k) for k in keys} for s in st]
            # The trace read for each rank is its final one: the steps the ranks' reports
            # analysed overlap (a trace a rank wrote while it ran, the start of the run
            # set aside, has steps 1-5 where the other rank's final one has 5-24).
            step_sets = [{st.get("step") for st in rk.get("steps") or []} for rk in doc.get("ranks") or []]
            r["steps_by_rank"] = [sorted(x for x in ss if isinstance(x, int)) for ss in step_sets]
            if len(step_sets) == 2 and all(step_sets) and not step_sets[0] & step_sets[1]:
                r["problems"].append(f"the ranks' analysed steps do not overlap ({r['steps_by_rank']})")
            if job.get("ranks") != 2:
                r["problems"].append(f"the job report is on {job.get('ranks')} ranks, not 2")
            if doc.get("failed"):
                r["problems"].append(f"ranks failed or missing: {str(doc.get('failed'))[:200]}")
            if any("another run" in str(p) and "read" in str(p) and "not read" not in str(p)
                   for p in job.get("problems") or []):  # fmt: skip
                r["problems"].append("the report read a trace of another run")
            if not st:
                r["problems"].append("no straggler named")
            elif st[0].get("rank") != SLOW_RANK:
                r["problems"].append(f"straggler named: rank {st[0].get('rank')}, not rank {SLOW_RANK}")
            elif st[0].get("reason") in (None, "unknown") or not st[0].get("reason_label"):
                r["problems"].append(f"rank {SLOW_RANK} named without a reason ({st[0].get('reason')})")
    r["ok"] = not r["problems"]
    if keep is not None and not r["ok"]:
        dest = keep / f"run{index}"
        skip = () if keep_traces else ("*.pt.trace.json.gz",)
        shutil.copytree(work, dest, dirs_exist_ok=True, ignore=shutil.ignore_patterns(*skip))
        r["kept"] = str(dest)
    shutil.rmtree(work, ignore_errors=True)
    return r


def _machine() -> str:
    load = os.getloadavg()
    try:
        import torch

        tv = torch.__version__
        gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    except ImportError:
        tv, gpu = "no torch", "?"
    return (
        f"{platform.node()} {os.cpu_count()} CPUs, {gpu}, load {load[0]:.1f}/{load[1]:.1f}/{load[2]:.1f}, "
        f"python {platform.python_version()}, torch {tv}"
    )


def table(path: Path) -> str:
    machines: list[str] = []
    runs = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    rows = [r for r in runs if "run" in r]
    for r in runs:
        if "machine" in r:
            when = "at start" if "started" in r else f"at end ({r.get('skipped', 0)} runs not started)"
            machines.append(f"{r['machine']} {when}")
    ok = sum(bool(r["ok"]) for r in rows)
    problems: dict[str, int] = {}
    for r in rows:
        for p in r["problems"]:
            short = p.split(" (")[0][:80]
            problems[short] = problems.get(short, 0) + 1
    walls = sorted(r["wall_s"] for r in rows)
    named = [r["stragglers"][0] for r in rows if r.get("stragglers")]
    slow = [s for s in named if s.get("rank") == SLOW_RANK]
    reasons: dict[str, int] = {}
    for s in slow:
        reasons[str(s.get("reason"))] = reasons.get(str(s.get("reason")), 0) + 1
    costs = sorted((s.get("cost_us") or 0) / 1e3 for s in slow)
    out = [*(f"machine: {m}" for m in machines), ""]
    out.append(f"{len(rows)} runs, {ok} ok, {len(rows) - ok} with a problem")
    if walls:
        out.append(f"wall time: median {walls[len(walls) // 2]:.1f} s, max {walls[-1]:.1f} s")
    out.append(f"rank {SLOW_RANK} named first in {len(slow)} of {len(rows)}; reasons: {reasons}")
    if costs:
        mid = costs[len(costs) // 2]
        out.append(f"its cost per step: median {mid:.1f} ms, range {costs[0]:.1f}-{costs[-1]:.1f} ms")
    out += ["", "| problem | runs |", "|---|---:|"]
    out += [f"| {k} | {v} |" for k, v in sorted(problems.items(), key=lambda kv: -kv[1])]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=1, help="runs at a time (a loaded machine)")
    ap.add_argument("--device", default="cpu", help="ddp_cpu.py's --device (cuda: both ranks on GPU 0)")
    ap.add_argument("--steps", type=int, default=None, help="ddp_cpu.py's --steps (its default: 40)")
    ap.add_argument("--run-timeout", type=float, default=300.0, help="a run past this is a hang")
    ap.add_argument("--budget-s", type=float, default=None, help="start no run after this many seconds")
    ap.add_argument("--extra", action="append", default=[], help="extra capture options (repeatable)")
    ap.add_argument("--nice", type=int, default=10)
    ap.add_argument("--out", type=Path, default=None, help="append one JSON line per run here")
    ap.add_argument("--keep", type=Path, default=None, help="copy failed runs' folders (logs, reports) here")
    ap.add_argument("--keep-traces", action="store_true", help="... with their traces")
    ap.add_argument("--table", type=Path, default=None, help="print the counts of a --out file and exit")
    args = ap.parse_args(argv)
    if args.table is not None:
        print(table(args.table))
        return 0
    out = args.out.open("a") if args.out else None
    if out:
        out.write(json.dumps({"machine": _machine(), "started": time.strftime("%Y-%m-%d %H:%M:%S")}) + "\n")
        out.flush()
    lock = threading.Lock()
    t_begin = time.monotonic()
    failed = skipped = 0

    def one(i: int) -> None:
        nonlocal failed, skipped
        if args.budget_s is not None and time.monotonic() - t_begin > args.budget_s:
            with lock:
                skipped += 1
            return
        r = run_one(i, args.device, args.steps, args.run_timeout, args.nice, args.extra, args.keep, args.keep_traces)
        with lock:
            failed += not r["ok"]
            tag = "ok" if r["ok"] else "PROBLEM: " + "; ".join(r["problems"])
            st = (r.get("stragglers") or [{}])[0]
            print(f"[{i + 1}/{args.runs}] exit {r['rc']} in {r['wall_s']:.1f} s, straggler {st.get('rank')} "
                  f"({st.get('reason')}, {(st.get('cost_us') or 0) / 1e3:.1f} ms): {tag}", flush=True)  # fmt: skip
            if out:
                out.write(json.dumps(r) + "\n")
                out.flush()

    with ThreadPoolExecutor(max(args.jobs, 1)) as pool:
        list(pool.map(one, range(args.runs)))
    if skipped:
        print(f"{skipped} runs not started: the budget of {args.budget_s:g} s was spent", flush=True)
    if out:
        out.write(json.dumps({"machine": _machine(), "ended": time.strftime("%Y-%m-%d %H:%M:%S"),
                              "skipped": skipped}) + "\n")  # fmt: skip
        out.close()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
