"""Scale of the job report: 64, 256 and 1024 synthetic rank traces, read by Dask's
embedded local scheduler and by a `distributed` LocalCluster started separately (a
stand-in for a real cluster); wall time and peak RSS, printed as a table.

The ranks are derived from the H200 gloo captures in sample_traces/ (one job of 3
ranks on one GPU): a job without a straggler is made of copies of the balanced run's
ranks 0 and 2; a job with one planted straggler of copies of the host_slow run's fast
ranks 0 and 2, and its slow rank 1 (a real 15 ms host busy loop per step) at the planted
rank. Each copy gets its own clock offset (up to CLOCK_SKEW_US) and jittered arrivals
(up to JITTER_US before each all-reduce, taken back from its wait inside it, so the
calls still end together, as synchronising collectives do), and its distributedInfo
says its rank and the world size. The benchmark knows what it planted and checks the
report names exactly that rank, and no rank in the job without one.

    python bench/bench_ranks.py                 # 64, 256, 1024 ranks, both schedulers
    python bench/bench_ranks.py --ranks 64 --no-cluster
    python bench/bench_ranks.py --ranks 64 256 --jobs straggler --dask-profiler  # Dask's default workers
    python bench/bench_ranks.py --ranks 64 256 1024 --no-cluster --jobs straggler
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO / "sample_traces"
CLOCK_SKEW_US = 20_000.0
JITTER_US = 200.0
#: Jitter never takes more than this share of a rank's time inside a call (its wait).
JITTER_MAX_SHARE = 0.3
WORKERS = 2


def _load(path: Path) -> dict:  # type: ignore[type-arg]
    with gzip.open(path) as fh:
        return json.load(fh)  # type: ignore[no-any-return]


def _calls(trace: dict) -> list[tuple[float, float]]:  # type: ignore[type-arg]
    """(arrival, end) of each gloo all-reduce in raw trace µs: the op on gloo's thread,
    arriving when the cudaStreamSynchronize inside it (its input's device copy) returns."""
    evs = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    ops = [e for e in evs if str(e.get("name", "")).startswith("gloo:")]
    syncs = [e for e in evs if e.get("name") == "cudaStreamSynchronize"]
    out = []
    for op in ops:
        start, end = float(op["ts"]), float(op["ts"]) + float(op["dur"])
        ends = [
            float(s["ts"]) + float(s["dur"]) for s in syncs if s.get("tid") == op.get("tid") and start <= s["ts"] <= end
        ]
        out.append((max([start, *ends]), end))
    return sorted(out)


def _warp(trace: dict, calls: list[tuple[float, float]], rng: random.Random, jitter: bool) -> dict:  # type: ignore[type-arg]
    """The trace with its clock offset and each call's arrival moved later by a jitter
    that is taken back before the call ends (a piecewise-linear, monotonic time warp)."""
    offset = rng.uniform(-CLOCK_SKEW_US, CLOCK_SKEW_US)
    xs: list[float] = []
    ys: list[float] = []
    for a, e in calls:
        d = min(rng.uniform(0.0, JITTER_US), JITTER_MAX_SHARE * (e - a)) if jitter else 0.0
        xs += [a - 1.0, a, e - 1.0]
        ys += [a - 1.0, a + d, e - 1.0]
    x = np.array(xs)
    y = np.array(ys)
    out = dict(trace)
    events = []
    for ev in trace["traceEvents"]:
        ts = ev.get("ts")
        if not isinstance(ts, int | float):
            events.append(ev)
            continue
        e2 = dict(ev)
        t0 = float(np.interp(ts, x, y, left=ts, right=ts)) if len(x) and x[0] <= ts <= x[-1] else float(ts)
        if ev.get("ph") == "X" and isinstance(ev.get("dur"), int | float):
            end = float(ts) + float(ev["dur"])
            t1 = float(np.interp(end, x, y)) if len(x) and x[0] <= end <= x[-1] else end
            e2["dur"] = round(max(t1 - t0, 0.0), 3)
        e2["ts"] = round(t0 + offset, 3)
        events.append(e2)
    out["traceEvents"] = events
    return out


def make_job(folder: Path, n: int, straggler: int | None, seed: int) -> None:
    """n rank traces in `folder`: copies of real ranks, one planted straggler or none."""
    folder.mkdir(parents=True, exist_ok=True)
    src = "host_slow" if straggler is not None else "balanced"
    fast = [_load(SAMPLES / f"ranks_{src}" / f"rank{r}.pt.trace.json.gz") for r in (0, 2)]
    slow = _load(SAMPLES / "ranks_host_slow" / "rank1.pt.trace.json.gz")
    calls = {id(t): _calls(t) for t in (*fast, slow)}
    rng = random.Random(seed)
    for r in range(n):
        base = slow if r == straggler else fast[r % 2]
        # The straggler keeps its own timing (it arrives last with no wait to jitter).
        t = _warp(base, calls[id(base)], rng, jitter=r != straggler)
        info = dict(t.get("distributedInfo") or {})
        info.update(rank=r, world_size=n)
        t["distributedInfo"] = info
        with gzip.open(folder / f"rank{r}.pt.trace.json.gz", "wt", compresslevel=1) as fh:
            json.dump(t, fh, separators=(",", ":"))


def _run(cmd: list[str], env: dict[str, str]) -> tuple[float, float, subprocess.CompletedProcess[str]]:
    """Wall seconds and the peak RSS (MiB) of the largest process it ran (itself or a
    worker it started and waited for)."""
    # A fresh wrapper process, so the peak is this command's alone.
    wrapper = (
        "import resource, subprocess, sys\n"
        "r = subprocess.run(sys.argv[1:])\n"
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr)\n"
        "sys.exit(r.returncode)\n"
    )
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", wrapper, *cmd], capture_output=True, text=True, env=env, timeout=3600)
    wall = time.perf_counter() - t0
    lines = out.stderr.strip().splitlines()
    peak = float(lines[-1]) / 1024.0 if lines and lines[-1].isdigit() else float("nan")
    return wall, peak, out


def _cluster(env: dict[str, str], dask_profiler: bool) -> tuple[subprocess.Popen[str], str]:
    """A LocalCluster in its own process. Its workers run without Dask's statistical
    profiler unless `dask_profiler`: the profiler keeps the call trees it samples every
    10 ms, so a worker's memory grows with the time it computes (helper mem28b,
    2026-12-02: 129 / 142 / 158 MiB after 64 / 256 / 512 tasks with it, 111 / 112 / 113
    without), which is Dask's memory, not tracelens'; tracelens says so when a
    --scheduler's workers have it on."""
    env = dict(env, DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED=str(dask_profiler))
    code = (
        "import time\n"
        "from distributed import LocalCluster\n"
        f"c = LocalCluster(n_workers={WORKERS}, threads_per_worker=1, processes=True, memory_limit='2GiB', "
        "dashboard_address=None)\n"
        "print(c.scheduler_address, flush=True)\n"
        "time.sleep(1e6)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None
    address = proc.stdout.readline().strip()
    return proc, address


def _worker_peak_mib(address: str) -> float:
    from distributed import Client

    with Client(address) as client:
        peaks = client.run(lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
    return max(peaks.values()) / 1024.0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--ranks", type=int, nargs="*", default=[64, 256, 1024])
    p.add_argument("--no-cluster", action="store_true", help="skip the distributed LocalCluster runs")
    p.add_argument("--dask-profiler", action="store_true", help="the cluster's workers keep Dask's profiler on")
    p.add_argument("--keep", type=Path, default=None, help="keep the synthetic traces here")
    p.add_argument("--jobs", nargs="*", default=["straggler", "none"], help="which jobs (straggler, none)")
    args = p.parse_args()
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    root = args.keep or Path(tempfile.mkdtemp(prefix="tracelens-bench-ranks-"))
    rows = []
    failures = []
    try:
        for n in args.ranks:
            planted = (n * 7) // 11  # somewhere in the middle, not rank 0 or n-1
            jobs = {"straggler": (root / f"job{n}_straggler", planted), "none": (root / f"job{n}_none", None)}
            jobs = {k: v for k, v in jobs.items() if k in args.jobs}
            t0 = time.perf_counter()
            for folder, strag in jobs.values():
                if not folder.exists():
                    make_job(folder, n, strag, seed=n)
            gen_s = time.perf_counter() - t0
            for kind, (folder, strag) in jobs.items():
                modes = (
                    [("embedded", [])] if kind == "none" or args.no_cluster else [("embedded", []), ("cluster", None)]
                )
                for mode, extra in modes:
                    proc = None
                    if extra is None:
                        proc, address = _cluster(env, args.dask_profiler)
                        extra = ["--scheduler", address]
                    out_json = root / f"job{n}_{kind}_{mode}.json"
                    cmd = [sys.executable, "-m", "tracelens", "report", str(folder), "--json", str(out_json), "-q",
                           "--workers", str(WORKERS), *extra]  # fmt: skip
                    load_before = os.getloadavg()[0]
                    wall, peak, res = _run(cmd, env)
                    load = (load_before, os.getloadavg()[0])
                    worker_peak = _worker_peak_mib(extra[1]) if proc is not None else peak
                    if proc is not None:
                        proc.terminate()
                        proc.wait(timeout=60)
                    if res.returncode != 0:
                        failures.append(f"{n} {kind} {mode}: exit {res.returncode}: {res.stderr[-500:]}")
                        continue
                    doc = json.loads(out_json.read_text())
                    found = [s["rank"] for s in doc["job"]["stragglers"]]
                    want = [strag] if strag is not None else []
                    ok = found == want
                    if not ok:
                        failures.append(f"{n} {kind} {mode}: planted {want}, found {found}")
                    rows.append((n, kind, mode, wall, peak, worker_peak, doc["job"]["ranks"], want, found, ok,
                                 doc["job"]["alignment_error_us"], gen_s, load))  # fmt: skip
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    # The machine's load beside each run: on a shared machine the times are upper bounds.
    print(f"machine: {os.cpu_count()} cores; load: the 1-minute load average before and after each run")
    print(f"| ranks | job | scheduler ({WORKERS} workers) | wall s | s/rank | peak RSS MiB (client) | "
          "peak RSS MiB (worker) | planted | found | ok | alignment error µs | load before/after |")  # fmt: skip
    print("| ---: | --- | --- | ---: | ---: | ---: | ---: | --- | --- | --- | ---: | ---: |")
    for n, kind, mode, wall, peak, wpeak, ranks, want, found, ok, err, _gen, (lb, la) in rows:
        print(f"| {n} | {kind} | {mode} | {wall:.1f} | {wall / ranks:.3f} | {peak:.0f} | {wpeak:.0f} | {want} | "
              f"{found} | {'yes' if ok else 'NO'} | {err:.0f} | {lb:.1f} / {la:.1f} |")  # fmt: skip
    for f in failures:
        print("FAIL:", f)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
