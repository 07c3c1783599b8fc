"""`tracelens capture` attacked as a hostile user would: 22 ways a script ends (or is
ended), each run many times on this machine, counting what was lost.

    nice -n 10 python bench/capture_scenarios.py --runs 50 --out /tmp/scen.jsonl
    python bench/capture_scenarios.py --table /tmp/scen.jsonl
    python bench/capture_scenarios.py --only sigterm_12s,raise --runs 50 --extra=--no-stack

Each run is a fresh `python -m tracelens capture` in its own session (so its process
group can be signalled as Slurm does and checked for leftovers) on
tests/data/cpu_scenario.py. A run is "ok" when nothing was lost: the exit code is the
script's (128 + signal for a signal), the trace is on disk, whole, with the torch ops that
were recorded and the script's exit in its metadata, no traceback of tracelens's own,
and no process of the capture is alive after it exits. Every run is one JSON line in
--out; --table prints the counts (scenario x outcome) with the machine's load.
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
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "tests" / "data" / "cpu_scenario.py"
#: Longest a run may take before it is counted as a hang (the longest scenario signals at
#: 15 s; torch's import alone takes 3-8 s on the loaded 2-core machine).
RUN_TIMEOUT_S = 180.0
#: A process of the capture's group still alive this long after the capture exited is
#: left behind (the spawn Pool's resource tracker exits within ~0.1 s of its parent).
LEFTOVER_GRACE_S = 2.0


@dataclass
class Act:
    """Something done to the running capture: at `at_s` seconds after the script printed
    "started" (its model is built and its loop begins), send `sig` to `whom` ("capture":
    the command's process, "script": the script's own process, from its `pid N` line;
    "group": every process of the run, as Slurm or a cgroup's OOM kill does), or with
    sig 0, only check that the trace is already on disk."""

    at_s: float
    sig: int
    whom: str = "capture"


@dataclass
class Scenario:
    name: str
    args: list[str]  # the script's
    code: int | None  # expected exit code (None: the capture itself was killed)
    options: list[str] = field(default_factory=list)  # capture's
    acts: list[Act] = field(default_factory=list)
    trace: bool = True  # a trace must be written
    ops: bool = True  # ... holding torch ops
    exit_in_trace: bool = True  # ... with the script's exit in its metadata
    script: str | None = None  # another script path (relative to the run folder)
    source: Path = SCRIPT  # the script run (copied to `script` when that is given)
    check: Callable[[dict[str, Any]], list[str]] | None = None
    user_traceback: bool = False  # the script's own traceback is expected on stderr
    #: How long a process of the run may outlive the capture's exit: the script killed
    #: with the supervisor still writes its trace (PR_SET_PDEATHSIG) before it exits.
    grace_s: float = LEFTOVER_GRACE_S


def _own_profiler(r: dict[str, Any]) -> list[str]:
    out = []
    if "own.json" not in r["stderr"]:
        out.append("the message does not point at the script's own trace")
    return out


def _one_line_error(r: dict[str, Any]) -> list[str]:
    lines = [ln for ln in r["stderr"].strip().splitlines() if ln.strip()]
    return [] if len(lines) == 1 and lines[0].startswith("tracelens: error:") else [f"not one error line: {lines!r}"]


def _on_disk(r: dict[str, Any]) -> list[str]:
    return [] if r.get("on_disk_before_end") else ["no trace on disk while the script was still running"]


SCENARIOS: list[Scenario] = [
    Scenario("ends_in_warmup", ["--steps", "3"], 0),
    Scenario("steps_default", ["--steps", "40"], 0),
    Scenario("exit_code", ["--steps", "8", "--code", "3"], 3),
    Scenario("raise", ["--steps", "12", "--end", "raise"], 1, user_traceback=True),
    Scenario("segv_after_recording", ["--steps", "60", "--end", "segv", "--at", "40"], 128 + 11),
    Scenario("segv_while_recording", ["--steps", "60", "--end", "segv", "--at", "12"], 128 + 11),
    Scenario("abort", ["--steps", "60", "--end", "abort", "--at", "40"], 128 + 6),
    Scenario("kill_self", ["--steps", "60", "--end", "kill", "--at", "40"], 128 + 9),
    Scenario("os_exit", ["--steps", "60", "--end", "os_exit", "--code", "7", "--at", "40"], 7),
    Scenario("sigterm_12s", ["--forever"], 143, acts=[Act(12.0, signal.SIGTERM)]),
    Scenario("sigint_12s", ["--forever"], 130, acts=[Act(12.0, signal.SIGINT)]),
    Scenario("sigterm_group_12s", ["--forever"], 143, acts=[Act(12.0, signal.SIGTERM, "group")]),
    Scenario("sigterm_in_warmup", ["--forever", "--sleep", "0.5"], 143, acts=[Act(2.5, signal.SIGTERM)]),
    Scenario("sigkill_script_15s", ["--forever", "--print-pid"], 128 + 9, acts=[Act(15.0, signal.SIGKILL, "script")]),
    Scenario(
        "sigkill_all_15s",
        ["--forever"],
        None,
        acts=[Act(15.0, signal.SIGKILL, "group")],
        exit_in_trace=False,
    ),
    Scenario(
        "forever_on_disk",
        ["--forever"],
        143,
        acts=[Act(11.0, 0), Act(12.0, signal.SIGTERM)],
        check=_on_disk,
    ),
    Scenario(
        "duration_3_kill",
        ["--forever"],
        None,
        options=["--duration", "3"],
        acts=[Act(14.0, 0), Act(15.0, signal.SIGKILL, "group")],
        exit_in_trace=False,
        check=_on_disk,
    ),
    Scenario("stop_after_recording", ["--forever"], 0, options=["--stop-after-recording"]),
    Scenario("space_in_path", ["--steps", "30"], 0, script="dir with spaces/cpu scenario.py"),
    Scenario("own_profiler", ["--steps", "10", "--own-profiler", "own.json"], 0, trace=False, check=_own_profiler),
    Scenario("missing_script", [], 2, trace=False, script="no_such_script.py", check=_one_line_error),
    Scenario("spawn_pool", ["--steps", "30", "--pool"], 0),
]
#: Not among the 22: a loop with no step marks at all (no optimizer, no module call), so
#: the default window records by time (5 s warm-up, 10 s), for the SIGSEGV hunt.
NO_MARKS = REPO / "tests" / "data" / "cpu_forever.py"
THREADED = REPO / "tests" / "data" / "cpu_threaded_loop.py"
EXTRA_SCENARIOS: list[Scenario] = [
    Scenario("threads_steps", ["--steps", "80"], 0, source=THREADED),
    Scenario("ends_right_after_warmup", ["--steps", "7"], 0),
    Scenario("raise_at_step_1", ["--steps", "12", "--end", "raise", "--at", "1"], 1, user_traceback=True),
    Scenario("threads_sigterm_12s", ["--forever"], 143, acts=[Act(12.0, signal.SIGTERM)], source=THREADED),
    Scenario("nomarks_sigterm_12s", [], 143, acts=[Act(12.0, signal.SIGTERM)], source=NO_MARKS),
    Scenario("nomarks_sigint_12s", [], 130, acts=[Act(12.0, signal.SIGINT)], source=NO_MARKS),
    # `kill -9` of the tracelens process alone (the supervisor): the script gets SIGTERM
    # (PR_SET_PDEATHSIG), ends as under SIGTERM and writes its trace.
    Scenario(
        "sigkill_capture_15s",
        ["--forever"],
        None,
        acts=[Act(15.0, signal.SIGKILL, "capture")],
        exit_in_trace=False,
        grace_s=60.0,
    ),
]


def _load_meta(path: Path) -> tuple[dict[str, Any] | None, int, str]:
    """(the trace's tracelens metadata, its cpu_op count, a problem) for a written trace."""
    try:
        raw = path.read_bytes()
        data = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    except (OSError, ValueError, EOFError) as exc:
        return None, 0, f"the trace is not whole ({type(exc).__name__}: {str(exc)[:120]})"
    events = data.get("traceEvents", []) if isinstance(data, dict) else []
    ops = sum(1 for e in events if isinstance(e, dict) and e.get("cat") == "cpu_op")
    meta = data.get("tracelens") if isinstance(data, dict) else None
    return (meta if isinstance(meta, dict) else None), ops, ""


def _session_alive(sid: int) -> list[int]:
    """Live processes of the run's session (the capture, the script in its own process
    group, whatever the script started)."""
    pids = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # fields: state ppid pgrp session ...; a zombie is not alive
        if int(fields[3]) == sid and fields[0] != "Z":
            pids.append(int(d.name))
    return pids


def _state_dirs_of(trace: Path) -> list[str]:
    """The supervisor's state folders (tempdir/tracelens-capture-*) of the run writing
    `trace` that are still there: each holds the profiler's raw export, as large as the
    trace's JSON, so one left behind per killed run fills /tmp."""
    out = []
    for d in Path(tempfile.gettempdir()).glob("tracelens-capture-*"):
        try:
            if json.loads((d / "options.json").read_text()).get("out") == str(trace.resolve()):
                out.append(str(d))
        except (OSError, ValueError):
            continue
    return out


def run_one(
    sc: Scenario,
    extra: list[str],
    nice: int,
    keep: Path | None,
    report: bool = False,
    script_args: tuple[str, ...] = (),
) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="tl-scen-"))
    script = sc.source
    if sc.script is not None:
        script = work / sc.script
        if sc.script != "no_such_script.py":
            script.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(sc.source, script)
    trace = work / "reports" / "t.pt.trace.json.gz"
    quiet = [] if report else ["--no-report"]
    cmd = ["nice", "-n", str(nice), sys.executable, "-m", "tracelens", "capture", *quiet, "-o", str(trace),
           *sc.options, *extra, str(script), *sc.args, *script_args]  # fmt: skip
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("TRACELENS_DEBUG", None)
    t0 = time.monotonic()
    proc = subprocess.Popen(
        cmd, cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    pgid = proc.pid
    result: dict[str, Any] = {"scenario": sc.name, "extra": [*extra, *script_args], "problems": []}
    script_pid: int | None = None
    out_lines: list[str] = []
    started = threading.Event()

    def read_out() -> None:
        nonlocal script_pid
        assert proc.stdout is not None
        for line in proc.stdout:
            out_lines.append(line)
            if line.startswith("pid ") and script_pid is None:
                script_pid = int(line.split()[1])
            if line.startswith("started"):
                started.set()

    reader = threading.Thread(target=read_out, daemon=True)
    reader.start()
    err_chunks: list[str] = []
    err_reader = threading.Thread(target=lambda: err_chunks.append(proc.stderr.read() if proc.stderr else ""))
    err_reader.daemon = True
    err_reader.start()
    t_started: float | None = None
    if sc.acts:
        # Acts are timed from the script's "started" line: on a loaded machine torch's
        # import alone takes 5-30 s, and a signal then would only test the import.
        deadline = t0 + RUN_TIMEOUT_S
        while time.monotonic() < deadline and proc.poll() is None and not started.wait(0.05):
            pass
        t_started = time.monotonic()
        result["started_after_s"] = round(t_started - t0, 2)
    for act in sc.acts:
        wait = act.at_s - (time.monotonic() - (t_started or t0))
        if wait > 0:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=wait)
        if proc.poll() is not None:
            result["problems"].append(f"ended before {act.at_s:g} s (exit {proc.returncode})")
            break
        if act.sig == 0:
            result["on_disk_before_end"] = trace.exists() and _load_meta(trace)[2] == ""
            continue
        try:
            if act.whom == "group":  # as Slurm, the OOM killer of a cgroup, docker: every process of the run
                for pid in _session_alive(pgid):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, act.sig)
            elif act.whom == "script":
                os.kill(script_pid if script_pid is not None else proc.pid, act.sig)
            else:
                proc.send_signal(act.sig)
        except ProcessLookupError:
            pass
    try:
        proc.wait(timeout=max(RUN_TIMEOUT_S - (time.monotonic() - t0), 1.0))
    except subprocess.TimeoutExpired:
        result["problems"].append(f"hang: still running after {RUN_TIMEOUT_S:.0f} s")
        os.killpg(pgid, signal.SIGKILL)
        proc.wait()
    wall = time.monotonic() - t0
    deadline = time.monotonic() + sc.grace_s
    while _session_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = _session_alive(pgid)
    if left:
        result["problems"].append(f"{len(left)} process(es) of the capture left behind")
        for pid in left:
            with_suppress(lambda p=pid: os.kill(p, signal.SIGKILL))
    reader.join(timeout=5)
    err_reader.join(timeout=5)
    stderr = "".join(err_chunks)
    rc = proc.returncode
    code = 128 - rc if rc < 0 else rc  # as a shell reports a signal
    result.update(rc=code, wall_s=round(wall, 2), stderr=stderr[-4000:], stdout_tail="".join(out_lines)[-500:])
    if sc.code is not None and code != sc.code:
        result["problems"].append(f"exit {code}, expected {sc.code}")
    if code in (128 + 11, -11) and sc.code != 128 + 11:
        result["crash"] = "SIGSEGV"
    if "Traceback" in stderr and not sc.user_traceback:
        result["problems"].append("a traceback on stderr")
    if "internal error" in stderr:
        result["problems"].append("internal error")
    leftovers = [p.name for p in (work / "reports").glob(".*.tmp")] if (work / "reports").exists() else []
    if leftovers:
        result["problems"].append(f"temp files left: {leftovers}")
    states = _state_dirs_of(trace)
    if states and any(a.whom == "group" and a.sig == signal.SIGKILL for a in sc.acts):
        # Every process of the run was SIGKILLed: nobody could remove the folder then; the
        # next capture's start does (supervise.clean_dead_state_dirs), as checked here.
        sys.path.insert(0, str(REPO))
        from tracelens.capture.supervise import clean_dead_state_dirs

        clean_dead_state_dirs()
        result["state_removed_by_next_capture"] = True
        states = _state_dirs_of(trace)
    if states:
        result["problems"].append(f"the capture's state folder left behind: {states}")
        for d in states:
            shutil.rmtree(d, ignore_errors=True)
    if sc.trace:
        if not trace.exists():
            result["problems"].append("no trace written")
        else:
            meta, ops, bad = _load_meta(trace)
            result["ops"] = ops
            if bad:
                result["problems"].append(bad)
            elif sc.ops and ops == 0:
                result["problems"].append("the trace holds no torch ops")
            if meta is not None:
                result["trace_exit"] = meta.get("exit_code")
                result["trace_signal"] = meta.get("exit_signal")
                if sc.exit_in_trace and sc.code is not None and meta.get("exit_code") != sc.code:
                    result["problems"].append(f"the trace says exit {meta.get('exit_code')}, expected {sc.code}")
            elif not bad:
                result["problems"].append("the trace has no tracelens metadata")
    elif trace.exists():
        meta, ops, _ = _load_meta(trace)
        if ops == 0:
            result["problems"].append("an empty trace was written")
    if sc.check is not None:
        result["problems"].extend(sc.check(result))
    result["ok"] = not result["problems"]
    if keep is not None and not result["ok"]:
        dest = keep / f"{sc.name}-{int(time.time() * 1000)}"
        shutil.copytree(work, dest, ignore=shutil.ignore_patterns("*.py"), dirs_exist_ok=True)
        result["kept"] = str(dest)
    shutil.rmtree(work, ignore_errors=True)
    return result


def with_suppress(fn: Callable[[], object]) -> None:
    with contextlib.suppress(OSError):
        fn()


def _machine() -> str:
    load = os.getloadavg()
    try:
        import torch

        tv = torch.__version__
    except ImportError:
        tv = "no torch"
    return (
        f"{platform.node()} {os.cpu_count()} CPUs, load {load[0]:.1f}/{load[1]:.1f}/{load[2]:.1f}, "
        f"python {platform.python_version()}, torch {tv}"
    )


def table(path: Path) -> str:
    rows: dict[tuple[str, str], dict[str, int]] = {}
    problems: dict[tuple[str, str], dict[str, int]] = {}
    machines: list[str] = []
    for line in path.read_text().splitlines():
        r = json.loads(line)
        if "machine" in r:
            when = "at start"
            if "started" not in r:
                when = f"at end ({r.get('skipped', 0)} runs not started, {r.get('jobs')} at a time)"
            machines.append(f"{r['machine']} {when}")
            continue
        key = (r["scenario"], " ".join(r.get("extra", [])) or "-")
        c = rows.setdefault(key, {"runs": 0, "ok": 0, "segv": 0})
        c["runs"] += 1
        c["ok"] += bool(r["ok"])
        c["segv"] += r.get("crash") == "SIGSEGV"
        for p in r["problems"]:
            d = problems.setdefault(key, {})
            short = p.split(" (")[0][:70]
            d[short] = d.get(short, 0) + 1
    out = [*(f"machine: {m}" for m in machines), "",
           "| scenario | options | runs | ok | lost something | SIGSEGV | problems |",
           "|---|---|---:|---:|---:|---:|---|"]  # fmt: skip
    for (name, extra), c in rows.items():
        probs = "; ".join(f"{k} x{v}" for k, v in sorted(problems.get((name, extra), {}).items()))
        out.append(f"| {name} | {extra} | {c['runs']} | {c['ok']} | {c['runs'] - c['ok']} | {c['segv']} | {probs} |")
    total = sum(c["runs"] for c in rows.values())
    ok = sum(c["ok"] for c in rows.values())
    out.append(f"\n{total} runs, {ok} ok, {total - ok} lost something")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    global RUN_TIMEOUT_S
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--runs", type=int, default=1, help="runs of each scenario")
    ap.add_argument("--only", default=None, help="comma-separated scenario names")
    ap.add_argument("--extra", action="append", default=[], help="extra capture options (repeatable)")
    ap.add_argument(
        "--script-arg",
        action="append",
        default=[],
        help="more arguments to the script (--script-arg=--device --script-arg=cuda: the same scenarios on the GPU)",
    )
    ap.add_argument("--nice", type=int, default=10)
    ap.add_argument("--jobs", type=int, default=1, help="runs at a time (each in its own session)")
    ap.add_argument("--out", type=Path, default=None, help="append one JSON line per run here")
    ap.add_argument("--keep", type=Path, default=None, help="copy the folders of failed runs here")
    ap.add_argument("--table", type=Path, default=None, help="print the counts table of a --out file and exit")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--report", action="store_true", help="let capture report on each trace (default: --no-report)")
    ap.add_argument(
        "--budget-s",
        type=float,
        default=None,
        help="start no run after this many seconds: as many rounds as fit, counted per scenario",
    )
    ap.add_argument(
        "--run-timeout", type=float, default=None, help=f"a run past this is a hang (default {RUN_TIMEOUT_S:.0f} s)"
    )
    args = ap.parse_args(argv)
    if args.run_timeout is not None:
        RUN_TIMEOUT_S = args.run_timeout
    # Started in the background by a shell (`cmd &`), this process ignores SIGINT, and so
    # would every capture it starts: give them Python's own handling back (a handler,
    # unlike SIG_IGN, is reset to the default by exec).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    if args.list:
        print("\n".join(s.name for s in SCENARIOS))
        return 0
    if args.table is not None:
        print(table(args.table))
        return 0
    chosen = [s for s in SCENARIOS if args.only is None or s.name in args.only.split(",")]
    chosen += [s for s in EXTRA_SCENARIOS if args.only is not None and s.name in args.only.split(",")]
    out = args.out.open("a") if args.out else None
    if out:
        out.write(json.dumps({"machine": _machine(), "started": time.strftime("%Y-%m-%d %H:%M:%S")}) + "\n")
    failed = 0
    # Interleaved (round after round of every scenario), so a change in the machine's load
    # hits every scenario alike.
    todo = [(i, sc) for i in range(args.runs) for sc in chosen]
    lock = threading.Lock()
    t_begin = time.monotonic()
    skipped = 0

    def one(item: tuple[int, Scenario]) -> None:
        nonlocal failed, skipped
        i, sc = item
        if args.budget_s is not None and time.monotonic() - t_begin > args.budget_s:
            with lock:
                skipped += 1
            return
        r = run_one(sc, args.extra, args.nice, args.keep, args.report, tuple(args.script_arg))
        with lock:
            failed += not r["ok"]
            tag = "ok" if r["ok"] else "LOST: " + "; ".join(r["problems"])
            print(f"[{i + 1}/{args.runs}] {sc.name}: exit {r['rc']} in {r['wall_s']:.1f} s: {tag}", flush=True)
            if out:
                out.write(json.dumps(r) + "\n")
                out.flush()

    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max(args.jobs, 1)) as pool:
        list(pool.map(one, todo))
    if skipped:
        print(f"{skipped} runs not started: the budget of {args.budget_s:g} s was spent", flush=True)
    if out:
        out.write(json.dumps({"machine": _machine(), "ended": time.strftime("%Y-%m-%d %H:%M:%S"),
                              "skipped": skipped, "jobs": args.jobs}) + "\n")  # fmt: skip
        out.close()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
