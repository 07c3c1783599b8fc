"""The process that runs the user's script under the profiler, started by the
supervisor (supervise.py) as

    python -P -c "<bootstrap>" STATE_DIR

It reads its options from STATE_DIR/options.json, runs `runner.capture`, and tells the
supervisor how far it got through STATE_DIR/state.json (rewritten atomically each time a
trace is written, and once more with the result). It ends with the script's exit code
without destroying the profiler's objects (runner.exit_process).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from tracelens.capture.runner import CaptureOptions, CaptureResult, capture, exit_process
from tracelens.capture.window import Limits, Mode
from tracelens.errors import TracelensError

OPTIONS_FILE = "options.json"
STATE_FILE = "state.json"
#: The supervisor's pid, so a child whose supervisor died can tell (PR_SET_PDEATHSIG).
SUPERVISOR_ENV = "TRACELENS_SUPERVISOR_PID"
PR_SET_PDEATHSIG = 1


def options_to_json(opts: CaptureOptions) -> dict[str, Any]:
    d = asdict(opts)
    d["out"] = str(opts.out) if opts.out is not None else None
    d["limits"]["mode"] = opts.limits.mode.value
    return d


def options_from_json(d: dict[str, Any]) -> CaptureOptions:
    lim = dict(d.pop("limits"))
    lim["mode"] = Mode(lim["mode"])
    if lim.get("window_s") is not None:
        lim["window_s"] = tuple(lim["window_s"])
    out = d.pop("out")
    return CaptureOptions(**d, out=Path(out) if out else None, limits=Limits(**lim))


def write_state(state_dir: Path, payload: dict[str, Any]) -> None:
    """state.json, replaced atomically: the supervisor reads either the old or the new one."""
    tmp = state_dir / (STATE_FILE + ".new")
    tmp.write_text(json.dumps(payload, default=str))
    os.replace(tmp, state_dir / STATE_FILE)


def read_state(state_dir: Path) -> dict[str, Any] | None:
    try:
        got = json.loads((state_dir / STATE_FILE).read_text())
    except (OSError, ValueError):
        return None
    return got if isinstance(got, dict) else None


def result_to_json(r: CaptureResult) -> dict[str, Any]:
    st = r.stats
    return {
        "trace": str(r.trace) if r.trace is not None else None,
        "exit_code": r.exit_code,
        "notes": r.notes,
        "steps": r.steps,
        "wall_s": r.wall_s,
        "recorded": asdict(r.recorded) if r.recorded is not None else None,
        "export_s": r.export_s,
        "log": str(r.log) if r.log is not None else None,
        "stats": None
        if st is None
        else {"bytes": st.bytes, "events": st.events, "ops": st.ops, "kernels": st.kernels, "seconds": st.seconds},
    }


def _die_with_supervisor() -> None:
    """SIGTERM this process when the supervisor dies (a kill -9 of `tracelens capture`):
    the script then ends as under SIGTERM and writes its own trace (Linux only)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
    except (OSError, AttributeError):
        return
    want = os.environ.get(SUPERVISOR_ENV)
    if want and want.isdigit() and os.getppid() != int(want):  # it died before prctl
        os.kill(os.getpid(), signal.SIGTERM)


def main(argv: list[str]) -> None:
    state_dir = Path(argv[0])
    opts = options_from_json(json.loads((state_dir / OPTIONS_FILE).read_text()))
    supervisor = os.getppid()
    _die_with_supervisor()
    os.environ.pop(SUPERVISOR_ENV, None)  # the script's own children are not ours to tell

    seen: dict[str, Any] = {}

    def state(payload: dict[str, Any]) -> None:
        """Each event updates its part: `recording` (running now, or None), `written`
        (the trace on disk), `done` (the result) or `error`."""
        event = payload.get("event")
        if event == "started":
            seen["started_epoch_s"] = payload.get("epoch_s")
        elif event == "recording":
            seen["recording"] = payload.get("recording")
        elif event == "written":
            seen["written"] = payload
        elif event == "done":
            seen["done"] = payload.get("result")
        elif event == "error":
            seen["error"], seen["exit_code"] = payload.get("error"), payload.get("exit_code")
        with contextlib.suppress(OSError):
            write_state(state_dir, seen)

    def echo(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    try:
        result = capture(opts, echo=echo, state=state, workdir=state_dir)
    except TracelensError as exc:
        state({"event": "error", "error": str(exc), "exit_code": exc.exit_code})
        _orphaned_cleanup(state_dir, supervisor)
        exit_process(exc.exit_code)
    state({"event": "done", "result": result_to_json(result)})
    _orphaned_cleanup(state_dir, supervisor)
    exit_process(result.exit_code)


def _orphaned_cleanup(state_dir: Path, supervisor: int) -> None:
    """With the supervisor dead (kill -9 of `tracelens capture`), nobody else removes the
    state folder, and it holds the profiler's raw export (as large as the trace's JSON):
    the trace is written by now, so remove it. (A supervisor alive removes it itself.)"""
    if os.getppid() != supervisor:
        shutil.rmtree(state_dir, ignore_errors=True)
