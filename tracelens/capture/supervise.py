"""`tracelens capture`'s supervising parent: the script runs under the profiler in a
child process (child.py), and this process outlives it, whatever ends it.

Why: a crash of the profiled process (a SIGSEGV inside libtorch, an abort, the OOM
killer, a scheduler's SIGKILL after its grace period) used to take the capture with it:
no trace, an empty reports/ folder (issue 29: 5 of 40 CPU runs). Now

- the child writes the trace the moment each recording ends (runner.py), and says so in
  STATE_DIR/state.json; whatever happens to it later, that file stays;
- this parent waits for the child, records how it ended (exit code or signal, and when),
  and when the child did not finish on its own, stamps that into the trace already
  written (or finishes the last raw export) and says what was saved and what was lost;
- the child runs in a process group of its own, which gets the terminal while it runs
  (as a shell gives its foreground job): Ctrl-C, Ctrl-\\ and Ctrl-Z reach the script and
  its workers exactly as under `python script.py`, and never this process; Ctrl-Z stops
  the capture as a whole and `fg`/`bg` resume it. Signals sent to this process (`kill`,
  `timeout`, Slurm, docker) are passed on to the script;
- processes the script left behind in its process group (a spawn Pool's workers and
  resource tracker, a DataLoader's workers) are waited for, then ended (the parent is the
  child subreaper, Linux), so none outlives the capture.

The exit code is the script's: its own code, or 128 + the signal that ended it, as a
shell reports it (exit_codes.py has the table).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tracelens
from tracelens.capture.child import OPTIONS_FILE, SUPERVISOR_ENV, options_to_json, read_state
from tracelens.capture.runner import CaptureOptions, CaptureResult, default_trace_path
from tracelens.capture.window import Recording
from tracelens.errors import CaptureError, UsageError

#: Signals passed on to the script when this process gets them. The terminal's own
#: (Ctrl-C, Ctrl-\\) go to the child's process group directly, which owns the terminal
#: while the script runs; these come from `kill`, `timeout`, a scheduler.
FORWARDED = (signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2, signal.SIGINT, signal.SIGQUIT)
#: How long processes the script left behind get to exit on their own after it ended
#: (multiprocessing's resource tracker exits once its pipe closes, ~0.1 s on the idle
#: machine, over 1 s on the loaded 2-core one), then after SIGTERM before SIGKILL
#: (the tracker ignores SIGTERM).
LEFTOVER_GRACE_S = 3.0
TERM_GRACE_S = 2.0
PR_SET_CHILD_SUBREAPER = 36
#: How the child is started: `-c` rather than `-m` (whose sys.path[0] would be the
#: current directory, which `python script.py` does not have), with tracelens's own
#: folder on the path just long enough to import it.
_BOOTSTRAP = (
    "import sys\n"
    "if sys.path and sys.path[0] == '': del sys.path[0]\n"
    "sys.path.insert(0, {root!r})\n"
    "try:\n"
    "    import tracelens.capture.child as _c\n"
    "finally:\n"
    "    del sys.path[0]\n"
    "_c.main(sys.argv[1:])\n"
)


@dataclass(frozen=True)
class ChildExit:
    """How the script's process ended."""

    code: int | None  # its exit code, or None when a signal ended it
    signal: int | None
    at_s: float  # seconds after the script started (else after its process started)

    @property
    def shell_code(self) -> int:
        """As a shell reports it: the code, or 128 + the signal."""
        return 128 + self.signal if self.signal is not None else (self.code or 0)

    def describe(self) -> str:
        if self.signal is not None:
            return f"was killed by {signal_name(self.signal)} after {self.at_s:.1f} s"
        return f"exited with code {self.code} after {self.at_s:.1f} s"


def signal_name(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


def _become_subreaper() -> bool:
    """Orphans of the script (a Pool worker whose parent was killed) are re-parented to
    this process instead of init, so they can be found and ended (Linux)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        return bool(ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def _terminal() -> int | None:
    """The fd of this process's terminal when its process group is the terminal's
    foreground group (an interactive run), else None (CI, a pipe, a background job)."""
    for fd in (0, 1, 2):
        with contextlib.suppress(OSError):
            if os.isatty(fd) and os.tcgetpgrp(fd) == os.getpgrp():
                return fd
    return None


def _give_terminal(fd: int | None, pgrp: int) -> None:
    """Make `pgrp` the terminal's foreground group. SIGTTOU is blocked meanwhile: a
    background group that sets the foreground would be stopped by it."""
    if fd is None:
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTTOU})
    try:
        with contextlib.suppress(OSError):
            os.tcsetpgrp(fd, pgrp)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


@contextlib.contextmanager
def _forwarding(pid: int) -> Iterator[list[int]]:
    """Pass signals sent to this process on to the child while it runs; yields the
    signals received."""
    got: list[int] = []

    def forward(signum: int, _frame: Any) -> None:
        got.append(signum)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)

    old: dict[int, Any] = {}
    for sig in FORWARDED:
        with contextlib.suppress(OSError, ValueError):
            old[sig] = signal.signal(sig, forward)
    try:
        yield got
    finally:
        for signum, handler in old.items():
            signal.signal(signum, handler)


def _proc_table() -> dict[int, tuple[int, int, str, str]]:
    """pid -> (parent pid, process group, state, command name), from /proc."""
    table: dict[int, tuple[int, int, str, str]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return table
    for name in entries:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                raw = fh.read().decode("utf-8", "replace")
        except OSError:
            continue
        comm = raw[raw.find("(") + 1 : raw.rfind(")")]
        fields = raw[raw.rfind(")") + 2 :].split()
        if len(fields) < 3:
            continue
        table[int(name)] = (int(fields[1]), int(fields[2]), fields[0], comm)
    return table


def _descendants(group: int) -> list[tuple[int, str]]:
    """Live descendants of this process in process group `group`, the script's (one that
    moved to a group or session of its own was detached on purpose, as a daemon is)."""
    table = _proc_table()
    me = os.getpid()
    found: list[tuple[int, str]] = []
    frontier = {me}
    while frontier:
        nxt = {pid for pid, (ppid, _g, _s, _c) in table.items() if ppid in frontier}
        for pid in nxt:
            _ppid, pgrp, st, comm = table[pid]
            if pgrp == group and st not in ("Z", "X"):
                found.append((pid, comm))
        frontier = nxt
    return found


def _reap() -> None:
    """Collect every exited child (re-parented orphans included)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def end_leftovers(group: int, grace_s: float = LEFTOVER_GRACE_S) -> list[str]:
    """Wait up to `grace_s` for what the script left in its process group to exit, then
    SIGTERM, then SIGKILL it; the names of the processes that had to be ended."""
    deadline = time.monotonic() + grace_s
    while True:
        _reap()
        left = _descendants(group)
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    if not left:
        return []
    ended = [comm for _pid, comm in left]
    for sig, wait_s in ((signal.SIGTERM, TERM_GRACE_S), (signal.SIGKILL, 1.0)):
        for pid, _comm in left:
            with contextlib.suppress(OSError):
                os.kill(pid, sig)
        deadline = time.monotonic() + wait_s
        while left and time.monotonic() < deadline:
            time.sleep(0.05)
            _reap()
            left = _descendants(group)
        if not left:
            break
    _reap()
    return ended


def _wait(pid: int, tty: int | None) -> int:
    """The child's exit status (signals meanwhile are handled by `_forwarding`). When the
    script is stopped (Ctrl-Z, SIGSTOP) the capture stops with it, as a shell job would,
    and resumes it when it is continued itself (`fg`: with the terminal, `bg`: without)."""
    while True:
        try:
            got, status = os.waitpid(pid, os.WUNTRACED)
        except ChildProcessError:
            return 0
        if got != pid:
            continue
        if not os.WIFSTOPPED(status):
            return status
        if tty is not None and os.WSTOPSIG(status) in (signal.SIGTTIN, signal.SIGTTOU):
            with contextlib.suppress(OSError):
                if os.tcgetpgrp(tty) != pid:  # it read the terminal before it had it
                    _give_terminal(tty, pid)
                    os.killpg(pid, signal.SIGCONT)
                    continue
        _give_terminal(tty, os.getpgrp())
        os.kill(os.getpid(), signal.SIGSTOP)  # our shell sees the job stop; `fg`/`bg` continue us
        if tty is not None and _terminal() is not None:
            _give_terminal(tty, pid)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGCONT)


#: The state folder's owners (this process and the script's): who may still use it.
OWNER_FILE = "owner.json"
STATE_PREFIX = "tracelens-capture-"
#: A state folder without an owner file (an older tracelens, or a capture killed before
#: writing it) is another run's once it is this old.
UNOWNED_STALE_S = 3600.0


def _proc_start(pid: int) -> int | None:
    """The process's start time (clock ticks since boot, /proc/PID/stat), or None when
    there is no such process: with the pid, it tells a live owner from a reused pid."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[19]) if len(fields) > 19 and fields[0] != "Z" else None


def _write_owner(state_dir: Path, pids: list[int]) -> None:
    doc = {"owners": [[p, _proc_start(p)] for p in pids]}
    with contextlib.suppress(OSError):
        tmp = state_dir / (OWNER_FILE + ".tmp")
        tmp.write_text(json.dumps(doc))
        os.replace(tmp, state_dir / OWNER_FILE)


def clean_dead_state_dirs(tmp: Path | None = None, now: float | None = None) -> list[Path]:
    """Remove the state folders of captures that are gone (issue 29: a SIGKILL of every
    process of a run, as Slurm or a cgroup's OOM kill does, leaves nobody to remove it,
    and it holds the profiler's raw export, as large as the trace's JSON). A folder is
    gone when none of its owners (the supervisor and the script's process) lives, the
    same pid and start time; one without an owner file when older than UNOWNED_STALE_S.
    Run at each capture's start; returns what it removed."""
    base = tmp if tmp is not None else Path(tempfile.gettempdir())
    when = time.time() if now is None else now
    removed = []
    for d in base.glob(STATE_PREFIX + "*"):
        try:
            if not d.is_dir() or d.is_symlink() or d.stat().st_uid != os.getuid():
                continue
            try:
                owners = json.loads((d / OWNER_FILE).read_text()).get("owners", [])
            except FileNotFoundError:
                if when - d.stat().st_mtime < UNOWNED_STALE_S:
                    continue
                owners = []
            alive = any(
                isinstance(o, list) and len(o) == 2 and isinstance(o[0], int) and _proc_start(o[0]) == o[1]
                and o[1] is not None
                for o in owners
            )  # fmt: skip
        except (OSError, ValueError, AttributeError):
            continue
        if not alive:
            shutil.rmtree(d, ignore_errors=True)
            removed.append(d)
    return removed


def check_target(opts: CaptureOptions) -> None:
    """A missing script is a bad command line (exit 2), found before anything starts."""
    if opts.module:
        return
    script = Path(opts.target)
    if not script.exists():
        raise UsageError(f"{opts.target}: no such script")
    if not script.is_file():
        raise UsageError(f"{opts.target}: not a file (give the script to run)")


def supervise(opts: CaptureOptions, echo: Callable[[str], None]) -> CaptureResult:
    """Run the capture in a child process and outlive it (see the module's docstring)."""
    from tracelens.capture.runner import _check_writable
    from tracelens.output import clean_stale_temps

    check_target(opts)
    out = (opts.out or default_trace_path(opts.target)).resolve()
    _check_writable(out)
    clean_stale_temps(out.parent)
    clean_dead_state_dirs()
    opts.out = out
    state_dir = Path(tempfile.mkdtemp(prefix=STATE_PREFIX))
    try:
        _write_owner(state_dir, [os.getpid()])
        (state_dir / OPTIONS_FILE).write_text(json.dumps(options_to_json(opts)))
        _become_subreaper()
        root = str(Path(tracelens.__file__).resolve().parents[1])
        flags: list[str] = subprocess._args_from_interpreter_flags()  # type: ignore[attr-defined]
        cmd = [sys.executable, *flags, "-c", _BOOTSTRAP.format(root=root), str(state_dir)]
        env = dict(os.environ, **{SUPERVISOR_ENV: str(os.getpid())})
        tty = _terminal()
        t0 = time.monotonic()
        try:
            # Its own process group (its pgid is its pid), given the terminal at once: the
            # child imports torch for seconds before it could read the terminal.
            child = subprocess.Popen(cmd, env=env, process_group=0)
        except OSError as exc:
            raise CaptureError(f"cannot start {sys.executable} for the script ({exc.strerror or exc})") from exc
        _write_owner(state_dir, [os.getpid(), child.pid])
        _give_terminal(tty, child.pid)
        try:
            with _forwarding(child.pid):
                status = _wait(child.pid, tty)
        finally:
            _give_terminal(tty, os.getpgrp())
        ended = time.monotonic() - t0
        sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
        state = read_state(state_dir) or {}
        # Times are said from the script's start, as the recording's are.
        started = state.get("started_epoch_s")
        at = time.time() - started if isinstance(started, int | float) else ended
        how = ChildExit(None if sig is not None else os.WEXITSTATUS(status), sig, max(at, 0.0))
        leftovers = end_leftovers(child.pid)
        return _result(opts, out, how, state, state_dir, leftovers, echo)
    finally:
        shutil.rmtree(state_dir, ignore_errors=True)


def _result(
    opts: CaptureOptions,
    out: Path,
    how: ChildExit,
    state: dict[str, Any],
    state_dir: Path,
    leftovers: list[str],
    echo: Callable[[str], None],
) -> CaptureResult:
    from tracelens.output import clean_stale_temps

    clean_stale_temps(out.parent)  # a write the child was killed in
    extra: list[str] = []
    if leftovers:
        names = ", ".join(sorted(set(leftovers)))
        extra.append(f"ended {len(leftovers)} process(es) the script left running ({names})")
    error = state.get("error")
    if error is not None and how.signal is None:
        exc = CaptureError(str(error))
        exc.exit_code = int(state.get("exit_code", CaptureError.exit_code))
        raise exc
    done = state.get("done")
    if isinstance(done, dict) and how.signal is None:
        return _from_json(done, how.shell_code if how.code != done.get("exit_code") else None, extra)
    # The child did not finish on its own: a signal (SIGSEGV, SIGKILL, the OOM killer),
    # os._exit, or a crash while it wrote the trace.
    return _salvage(opts, out, how, state, state_dir, extra)


def _from_json(d: dict[str, Any], code: int | None, extra: list[str]) -> CaptureResult:
    from tracelens.capture.trace_file import TraceStats

    rec = d.get("recorded")
    st = d.get("stats")
    trace = Path(d["trace"]) if d.get("trace") else None
    stats = None
    if st is not None and trace is not None:
        stats = TraceStats(trace, bytes=st["bytes"], events=st["events"], ops=st["ops"], kernels=st["kernels"],
                           seconds=st["seconds"])  # fmt: skip
    return CaptureResult(
        trace=trace,
        exit_code=int(d["exit_code"]) if code is None else code,
        notes=[*d.get("notes", []), *extra],
        steps=int(d.get("steps", 0)),
        wall_s=float(d.get("wall_s", 0.0)),
        sampler=None,
        stats=stats,
        recorded=Recording(**rec) if isinstance(rec, dict) else None,
        export_s=float(d.get("export_s", 0.0)),
        log=Path(d["log"]) if d.get("log") else None,
    )


def _salvage(
    opts: CaptureOptions, out: Path, how: ChildExit, state: dict[str, Any], state_dir: Path, extra: list[str]
) -> CaptureResult:
    from tracelens.capture.trace_file import TraceStats, finish_trace, restamp

    written = state.get("written")
    recording = state.get("recording")  # a recording running when the script ended
    notes = list((written or {}).get("notes", []))
    head = f"the script {how.describe()}"
    updates: dict[str, Any] = {
        "exit_code": how.shell_code,
        "exit_signal": signal_name(how.signal) if how.signal is not None else None,
        "running": False,
        "ended_at_s": round(how.at_s, 3),
    }
    lost = ""
    if isinstance(recording, dict):  # still running when the script died: it was in the script's memory
        lost = (
            f"; lost: the recording in progress (from {recording.get('t_start', 0):.1f} s, step "
            f"{recording.get('first_step', 0)} on), which was in the script's memory"
        )
    if written and out.exists():
        rec = written["recorded"]
        what = _recording_words(rec)
        notes.append(f"{head}; saved: the trace of {what}, written at {written['at_s']:.1f} s{lost}")
        notes.extend(extra)
        updates["notes"] = notes
        size = 0
        try:
            size = restamp(out, updates)
        except Exception as exc:  # the trace as written is whole; only the stamp is missing
            notes.append(f"could not add the script's exit to the trace ({type(exc).__name__}: {exc})")
        stats = TraceStats(out, bytes=size or out.stat().st_size, events=int(written.get("events", 0)),
                           ops=int(written.get("ops", 0)), kernels=int(written.get("kernels", 0)))  # fmt: skip
        return CaptureResult(out, how.shell_code, notes, int(written.get("steps_marked", 0)), how.at_s, None,
                             stats, Recording(**rec), 0.0, None)  # fmt: skip
    raws = sorted(state_dir.glob("recording*.json"), key=lambda p: p.stat().st_mtime)
    if raws:
        # Exported but not yet written when the child died: finish it here (a cut-off
        # export is salvaged event by event by finish_trace).
        meta = {"command": [opts.target, *opts.args], "cwd": os.getcwd(), **updates}
        notes.append(f"{head} while writing its trace; saved: what the profiler had exported{lost}")
        notes.extend(extra)
        meta["notes"] = notes
        try:
            stats = finish_trace(raws[-1], out, None, meta, max_events=opts.limits.max_events)
            if stats.salvage_note:
                notes.append(stats.salvage_note)
            return CaptureResult(out, how.shell_code, notes, 0, how.at_s, None, stats, None, 0.0, None)
        except Exception as exc:
            notes.append(f"the export could not be read ({type(exc).__name__}: {exc})")
    if how.signal is None and not recording and not written:
        notes.append(f"{head} before tracelens recorded anything")
    else:
        notes.append(f"{head}; nothing had been written yet{lost or ' (nothing was recorded)'}")
    notes.extend(extra)
    return CaptureResult(None, how.shell_code, notes, 0, how.at_s, None)


def _recording_words(rec: dict[str, Any]) -> str:
    first, last = rec.get("first_step"), rec.get("last_step")
    t0, t1 = rec.get("t_start", 0.0), rec.get("t_end") or 0.0
    if rec.get("kind") == "steps" and first is not None and last is not None and last > first:
        return f"steps {first}-{last - 1} ({t0:.1f}-{t1:.1f} s)"
    if rec.get("kind") == "start":
        return f"the start of the run (0-{t1:.1f} s)"
    return f"{t0:.1f}-{t1:.1f} s of the run"
