"""`tracelens capture` loses nothing when the script dies (issue 29): the supervising
parent, the trace written the moment a recording ends, the script's exit stamped in,
no process left behind, no empty trace, and one table of exit codes. CPU only (torch's
CPU build); bench/capture_scenarios.py runs these and more ways of ending many times."""

from __future__ import annotations

import gzip
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support.cli import capture_state_folders

from tracelens.errors import EXIT_CODES, exit_codes_markdown

DATA = Path(__file__).resolve().parent / "data"
SCENARIO = DATA / "cpu_scenario.py"
README = Path(__file__).resolve().parents[1] / "README.md"

_TORCH = pytest.mark.skipif(
    importlib.util.find_spec("torch") is None, reason="torch not installed (pip install torch==2.13.0)"
)


def needs_torch(test: Callable[..., None]) -> Callable[..., None]:
    """A test that runs a torch script under `tracelens capture`: skipped without torch, and
    in the slow lane (each starts torch in fresh processes, 2-13 s apiece on 2 cores: 39 s
    of the fast lane's test time, its largest share). torch is found without importing it: a subprocess
    that imported it cost every worker 1.2 s of collection."""
    return pytest.mark.slow(_TORCH(test))


def _cmd(out: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "tracelens", "capture", "--no-report", "-o", str(out), *args]


def _run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        _cmd(tmp_path / "t.pt.trace.json.gz", *args), capture_output=True, text=True, cwd=tmp_path, timeout=600
    )


def _meta(path: Path) -> dict[str, Any]:
    meta: dict[str, Any] = json.loads(gzip.decompress(path.read_bytes()))["tracelens"]
    return meta


def _steps(path: Path) -> list[int]:
    data = json.loads(gzip.decompress(path.read_bytes()))
    return sorted(
        {int(e["name"][13:]) for e in data["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#")}
    )


def _session(sid: int) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[3]) == sid and fields[0] != "Z":
                out.append(int(d.name))
    return out


@needs_torch
def test_a_segfault_after_the_recording_keeps_the_trace_and_the_signal(tmp_path: Path) -> None:
    """The script dies of SIGSEGV at step 40, after steps 5-24 were recorded: before the
    supervisor, exit -11 and no trace."""
    res = _run(tmp_path, str(SCENARIO), "--steps", "60", "--end", "segv", "--at", "40")
    assert res.returncode == 128 + signal.SIGSEGV, res.stderr[-3000:]
    assert "killed by SIGSEGV" in res.stderr and "saved: the trace of steps 5-24" in res.stderr
    out = tmp_path / "t.pt.trace.json.gz"
    meta = _meta(out)
    assert meta["exit_code"] == 139 and meta["exit_signal"] == "SIGSEGV" and meta["running"] is False
    assert _steps(out)[0] == 5 and _steps(out)[-1] in (24, 25)
    assert not list(tmp_path.glob(".*.tmp")) and "Traceback" not in res.stderr


@needs_torch
def test_a_crash_during_the_recording_says_what_was_lost(tmp_path: Path) -> None:
    """Killed at step 12, inside the recording of steps 5-24: that recording was in the
    script's memory and is lost; the start of the run, written when it was set aside, is
    kept."""
    res = _run(tmp_path, str(SCENARIO), "--steps", "60", "--end", "kill", "--at", "12")
    assert res.returncode == 128 + signal.SIGKILL, res.stderr[-3000:]
    assert "killed by SIGKILL" in res.stderr and "lost: the recording in progress" in res.stderr
    meta = _meta(tmp_path / "t.pt.trace.json.gz")
    assert meta["exit_signal"] == "SIGKILL" and meta["window"]["recorded"]["kind"] in ("start", "time")


@needs_torch
def test_the_trace_is_on_disk_while_the_script_runs_and_a_kill_loses_nothing(tmp_path: Path) -> None:
    """A never-ending loop: steps 5-24 are on disk soon after they ran (issue 29: nothing
    on disk at 45 s); SIGKILL to every process of the run then loses nothing. The start of
    the run (set aside when the warm-up ended) is on disk first, then replaced by the
    steps."""
    out = tmp_path / "t.pt.trace.json.gz"
    proc = subprocess.Popen(_cmd(out, str(SCENARIO), "--forever"), cwd=tmp_path, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)  # fmt: skip
    try:
        kinds = []
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None:
            if out.exists():
                meta = _meta(out)  # always whole: written atomically
                kinds.append(meta["window"]["recorded"]["kind"])
                if kinds[-1] == "steps":
                    break
            time.sleep(0.5)
        assert kinds, "no trace on disk while the script runs"
        assert kinds[-1] == "steps" and set(kinds) <= {"start", "steps"}, kinds
        assert meta["running"] is True and meta["exit_code"] is None
        assert _steps(out)[0] == 5 and proc.poll() is None
    finally:
        for pid in _session(proc.pid):
            os.kill(pid, signal.SIGKILL)
        proc.communicate(timeout=60)
    assert _steps(out)[0] == 5 and not list(tmp_path.glob(".*.tmp"))


@needs_torch
def test_a_kill_9_of_tracelens_itself_keeps_the_trace_and_leaves_nothing(tmp_path: Path) -> None:
    """`kill -9` of the supervisor alone: the script gets SIGTERM (PR_SET_PDEATHSIG), ends
    as under SIGTERM and writes its trace; the supervisor's state folder (the profiler's
    raw export inside) is not left in the temp dir, nor any process."""
    out = tmp_path / "t.pt.trace.json.gz"

    proc = subprocess.Popen(_cmd(out, str(SCENARIO), "--forever"), cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, start_new_session=True)  # fmt: skip
    assert proc.stdout is not None
    for line in proc.stdout:  # the script's loop has begun
        if line.startswith("started"):
            break
    mine = capture_state_folders(out)
    # Killed once steps 5-24 are on disk (a fixed 10 s wait before: the loop never ends, so
    # waiting longer changes nothing); the trace the script writes at its SIGTERM then says
    # running False, which the one on disk now does not.
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and not (out.exists() and _meta(out)["window"]["recorded"]["kind"] == "steps"):
        time.sleep(0.2)
    assert _meta(out)["running"] is True, "the steps' trace was not on disk while the script ran"
    proc.kill()
    proc.wait(timeout=60)
    deadline = time.monotonic() + 120
    while _session(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _session(proc.pid) == [], "the script outlived its supervisor's kill -9 by two minutes"
    meta = _meta(out)
    assert meta["recorded"]["ops"] > 0 and meta["running"] is False
    assert mine and not capture_state_folders(out), "the state folder was left in the temp dir"


@needs_torch
def test_stop_after_recording_ends_a_loop_that_never_ends(tmp_path: Path) -> None:
    res = _run(tmp_path, "--stop-after-recording", str(SCENARIO), "--forever")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "--stop-after-recording" in res.stderr
    out = tmp_path / "t.pt.trace.json.gz"
    assert _steps(out)[0] == 5 and _meta(out)["exit_code"] == 0


@needs_torch
def test_a_spawn_pool_leaves_no_process_behind(tmp_path: Path) -> None:
    proc = subprocess.Popen(_cmd(tmp_path / "t.pt.trace.json.gz", str(SCENARIO), "--steps", "30", "--pool"),
                            cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)  # fmt: skip
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-3000:]
    assert _session(proc.pid) == [], "processes of the capture outlived it"


@needs_torch
def test_the_scripts_own_profiler_gets_no_empty_trace(tmp_path: Path) -> None:
    res = _run(tmp_path, str(SCENARIO), "--steps", "10", "--own-profiler", "own.json")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "tracelens report" in res.stderr and str(tmp_path / "own.json") in res.stderr
    out = tmp_path / "t.pt.trace.json.gz"
    if out.exists():  # a recording of its own steps may survive; never an empty one
        assert _meta(out)["recorded"]["ops"] > 0


def test_a_missing_script_is_one_line_and_exit_2(tmp_path: Path) -> None:
    res = _run(tmp_path, "no_such_script.py")
    assert res.returncode == 2
    assert res.stderr.strip().splitlines() == ["tracelens: error: no_such_script.py: no such script"]


def test_every_exit_code_is_in_one_table() -> None:
    """The table in errors.py is the README's and the end of `--help`'s."""
    assert exit_codes_markdown() in README.read_text()
    codes = [c for c, _ in EXIT_CODES]
    assert codes[:5] == ["0", "1", "2", "3", "4"] and "128+S" in codes
    for args in (["--help"], ["capture", "--help"]):
        res = subprocess.run([sys.executable, "-m", "tracelens", *args], capture_output=True, text=True, timeout=120)
        assert res.returncode == 0
        assert "Exit codes:" in res.stdout and "128+S" in res.stdout and "SIGSEGV" in res.stdout


def test_sigterm_while_the_window_changes_recordings_waits_until_the_change_is_done() -> None:
    """Issue 29's sigterm_in_warmup on the H200 box: SIGTERM raised while step 5 set the
    start of the run aside and started the steps' recording left neither (5 of 10 runs
    wrote no trace). Inside the change the signal is held, then acts as it would have."""
    from tracelens.capture.runner import _deferred_interrupts

    got: list[str] = []

    def on_term(_signum: int, _frame: object) -> None:
        raise RuntimeError("terminated")

    old = signal.signal(signal.SIGTERM, on_term)
    try:
        with pytest.raises(RuntimeError, match="terminated"), _deferred_interrupts():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)  # the handler would run here, between two bytecodes
            got.append("the change finished")
        assert got == ["the change finished"]
        assert signal.getsignal(signal.SIGTERM) is on_term  # the handler is back
    finally:
        signal.signal(signal.SIGTERM, old)


def test_state_folders_of_dead_captures_are_removed_at_the_next_start(tmp_path: Path) -> None:
    """Issue 29 on the H200 box: a SIGKILL of every process of a run (sigkill_all_15s,
    duration_3_kill) left the supervisor's state folder in /tmp in 20 of 20 runs: nobody
    is left to remove it. The next capture removes folders whose owners are all gone
    (pid and start time), never one whose owner lives or one just made."""
    from tracelens.capture.supervise import UNOWNED_STALE_S, _proc_start, _write_owner, clean_dead_state_dirs

    def folder(name: str) -> Path:
        d = tmp_path / f"tracelens-capture-{name}"
        d.mkdir()
        (d / "recording1.json").write_text("{}")
        return d

    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(done.stdout)
    live = folder("live")
    _write_owner(live, [os.getpid()])
    dead = folder("dead")
    (dead / "owner.json").write_text(json.dumps({"owners": [[dead_pid, 12345]]}))
    reused = folder("reused")  # this pid, but another start time: the owner is gone
    (reused / "owner.json").write_text(json.dumps({"owners": [[os.getpid(), (_proc_start(os.getpid()) or 0) + 1]]}))
    fresh = folder("fresh")  # no owner file yet (a capture starting this moment)
    old = folder("old")  # no owner file, older than the bound
    t = time.time() - UNOWNED_STALE_S - 60
    os.utime(old, (t, t))
    removed = clean_dead_state_dirs(tmp_path)
    assert sorted(p.name for p in removed) == sorted(p.name for p in (dead, reused, old))
    assert live.is_dir() and fresh.is_dir() and not dead.exists() and not old.exists()
