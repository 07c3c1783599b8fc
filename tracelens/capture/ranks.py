"""`tracelens capture` under torchrun: every worker runs its own capture (torchrun
starts them, does the rendezvous and restarts; tracelens does not do it again), writes
one trace named by its rank into one folder, and rank 0 reports on the set:

    torchrun --nproc-per-node 4 -m tracelens capture train.py --epochs 1

writes reports/train-ranks/rank0.pt.trace.json.gz ... rank3.pt.trace.json.gz and the
job report reports/train-ranks.job.{html,md,json}.

A run's traces are tied to it. Every worker of one launch gets the same run token: one
that the first worker to ask puts into torchrun's own store (the agent's TCPStore at
MASTER_ADDR:MASTER_PORT, which every launch creates afresh), else torchrun's run id and
restart count. The token is written at the head of each trace (`tracelens_run`, the first
key, so reading it costs a few kB) and in its `tracelens` metadata. Rank 0 takes only
traces that carry its token: a file left in the folder by an earlier run (or a trace of
another tool) is never read, and the report says it was there.

A rank that never writes its trace never hangs the report. Each worker keeps a small
heartbeat file beside the traces (`.rank<R>.alive`: token, pid, host, phase) while it
runs. Rank 0 waits for the others' traces for WAIT_FOR_RANKS_S after its own, longer
(up to WAIT_MAX_S) for a rank whose heartbeat is fresh (still running or exporting a
large trace), and not at all for one whose heartbeat stopped (it died: killed, a
segfault) or that said its capture failed. Terminated by torchrun (another worker
failed), it waits TERMINATED_WAIT_S: torchrun kills what is left 30 s after its SIGTERM.
Then it reports on the ranks that arrived, naming the missing ones and why.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import socket
import threading
import time
import uuid
import zlib
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

#: How long rank 0 waits for the other ranks' traces after writing its own when it has
#: no sign of them (no heartbeat: another host without a shared folder, or a rank that
#: never started): their exports finish within seconds of each other when their traces
#: are alike (2 CPU ranks of workloads/ranks/ddp_cpu.py: 0.4 and 9.1 s to write).
WAIT_FOR_RANKS_S = 120.0
#: The longest wait for a rank whose heartbeat is fresh: its capture is alive, exporting
#: a large trace (a 2 GB export took minutes on the H200) or still in its script. A rank
#: hung in its script or in the profiler is given up on at this bound.
WAIT_MAX_S = 600.0
#: Terminated (SIGTERM, Ctrl-C): the others are being stopped too and write their traces
#: within seconds; torchrun sends SIGKILL 30 s after its SIGTERM, so the report must be
#: done well inside that.
TERMINATED_WAIT_S = 5.0
POLL_S = 0.5
#: Heartbeat period, and the age past which a heartbeat means its process is gone
#: (several periods: a loaded machine delays a thread by seconds).
HEARTBEAT_S = 2.0
STALE_S = 20.0
#: Progress lines while waiting, at most one per this many seconds.
SAY_EVERY_S = 15.0
#: torchrun's store answers on localhost in milliseconds; a store that does not answer
#: in this long is not there (the run id is used instead).
STORE_TIMEOUT_S = 10.0
#: The trace's first top-level key, written before the profiler's own (trace_file.py).
RUN_HEAD_KEY = "tracelens_run"
#: How much of a trace's head (decompressed) is read for its run token.
HEAD_BYTES = 16384
TRACE_SUFFIX = ".pt.trace.json.gz"


@dataclass(frozen=True)
class RankEnv:
    rank: int
    world_size: int
    local_rank: int
    run_id: str = ""  # TORCHELASTIC_RUN_ID ("none" or absent outside torchrun's elastic launch)
    restart: int = 0  # TORCHELASTIC_RESTART_COUNT
    master_addr: str = ""
    master_port: int = 0
    agent_store: bool = False  # TORCHELASTIC_USE_AGENT_STORE: torchrun's agent hosts the store


def torchrun_env(environ: dict[str, str] | None = None) -> RankEnv | None:
    """The rank this process is, when torchrun (or another launcher setting RANK and
    WORLD_SIZE, as torch.distributed's env:// does) started it; else None."""
    env = os.environ if environ is None else environ
    try:
        rank, world = int(env["RANK"]), int(env["WORLD_SIZE"])
    except (KeyError, ValueError):
        return None
    if world < 1 or not 0 <= rank < world:
        return None

    def num(key: str) -> int:
        try:
            return int(env.get(key, "0") or 0)
        except ValueError:
            return 0

    run_id = env.get("TORCHELASTIC_RUN_ID", "")
    return RankEnv(
        rank=rank,
        world_size=world,
        local_rank=num("LOCAL_RANK"),
        run_id="" if run_id == "none" else run_id,
        restart=num("TORCHELASTIC_RESTART_COUNT"),
        master_addr=env.get("MASTER_ADDR", ""),
        master_port=num("MASTER_PORT"),
        agent_store=env.get("TORCHELASTIC_USE_AGENT_STORE", "") == "True",
    )


@dataclass(frozen=True)
class RunTag:
    """What ties a trace to its run: the token, where it came from, and who wrote it."""

    token: str
    how: str  # "torchrun's store", "torchrun's run id", "none"
    rank: int
    world_size: int
    run_id: str
    restart: int
    host: str
    pid: int
    started: float  # epoch seconds

    def as_meta(self) -> dict[str, Any]:
        return asdict(self)


def _store_token(env: RankEnv, key: str, proposal: str, timeout_s: float) -> str | None:
    """The token in torchrun's store under `key`, set to `proposal` by the first worker
    to ask (compare_set on an absent key sets it), or None when there is no store."""
    if not (env.agent_store and env.master_addr and env.master_port):
        return None
    try:
        import datetime

        from torch.distributed import TCPStore  # type: ignore[attr-defined]

        store = TCPStore(env.master_addr, env.master_port, is_master=False,
                         timeout=datetime.timedelta(seconds=timeout_s))  # fmt: skip
        got = store.compare_set(key, "", proposal)
        return bytes(got).decode("utf-8", "replace") or None
    except Exception:  # no store there, refused, timed out: fall back to the run id
        return None


def run_tag(
    env: RankEnv,
    store: Callable[[RankEnv, str, str, float], str | None] = _store_token,
    timeout_s: float = STORE_TIMEOUT_S,
) -> RunTag:
    """This worker's run token (the same on every worker of one launch)."""
    key = f"tracelens/run/{env.run_id or 'none'}/{env.restart}"
    token = store(env, key, uuid.uuid4().hex, timeout_s)
    how = "torchrun's store"
    if token is None and env.run_id:
        token, how = f"{env.run_id}/{env.restart}", "torchrun's run id"
    if token is None:
        token, how = "", "none"
    return RunTag(token=token, how=how, rank=env.rank, world_size=env.world_size, run_id=env.run_id,
                  restart=env.restart, host=socket.gethostname(), pid=os.getpid(), started=time.time())  # fmt: skip


def ranks_folder(target: str, out_dir: Path) -> Path:
    stem = Path(target).name[:-3] if target.endswith(".py") else Path(target).stem
    return out_dir / f"{stem}-ranks"


def rank_trace_path(target: str, out_dir: Path, env: RankEnv) -> Path:
    return ranks_folder(target, out_dir) / f"rank{env.rank}{TRACE_SUFFIX}"


def peek_run(path: Path) -> dict[str, Any] | None:
    """The run tag at the head of a trace written by `tracelens capture` under torchrun
    (a few kB decompressed), or None: no tag there (another tool, an older tracelens),
    or not readable."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read(HEAD_BYTES)
        head = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(raw, HEAD_BYTES) if raw[:2] == b"\x1f\x8b" else raw
    except (OSError, zlib.error):
        return None
    text = head.decode("utf-8", "replace")
    prefix = '{"' + RUN_HEAD_KEY + '":'
    if not text.startswith(prefix):
        return None
    try:
        tag, _ = json.JSONDecoder().raw_decode(text, len(prefix))
    except ValueError:
        return None
    return tag if isinstance(tag, dict) else None


def _heartbeat_path(folder: Path, rank: int) -> Path:
    return folder / f".rank{rank}.alive"


class Heartbeat:
    """This worker's `.rank<R>.alive` beside the traces: its run token, pid, host and
    phase ("running", then "written" or "failed"), rewritten every HEARTBEAT_S by a
    daemon thread (atomically: a reader never sees half of it)."""

    def __init__(self, folder: Path, tag: RunTag) -> None:
        self.path = _heartbeat_path(folder, tag.rank)
        self.tag = tag
        self.phase = "running"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="tracelens-heartbeat", daemon=True)

    def start(self) -> Heartbeat:
        self._write()
        self._thread.start()
        return self

    def _write(self) -> None:
        doc = {"token": self.tag.token, "rank": self.tag.rank, "pid": self.tag.pid, "host": self.tag.host,
               "phase": self.phase, "beat": time.time()}  # fmt: skip
        tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
        with contextlib.suppress(OSError):
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(json.dumps(doc))
            os.replace(tmp, self.path)

    def _beat(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            self._write()

    def finish(self, phase: str) -> None:
        self.phase = phase
        self._stop.set()
        self._write()


def _read_heartbeat(folder: Path, rank: int) -> dict[str, Any] | None:
    try:
        doc = json.loads(_heartbeat_path(folder, rank).read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


@dataclass
class Arrival:
    """What rank 0 found: this run's traces, and a line for each rank it did not take."""

    ready: list[Path]
    problems: list[str] = field(default_factory=list)
    waited_s: float = 0.0


def _describe_foreign(path: Path, tag: dict[str, Any] | None) -> str:
    try:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(path.stat().st_mtime))
    except OSError:
        when = "?"
    if tag is None:
        return f"{path.name} (written {when}) carries no run token (another tool or an older tracelens)"
    return f"{path.name} (written {when}) is from another run (token {str(tag.get('token', ''))[:12] or 'none'})"


def wait_for_ranks(
    folder: Path,
    tag: RunTag,
    echo: Callable[[str], None],
    *,
    terminated: bool = False,
    timeout_s: float = WAIT_FOR_RANKS_S,
    max_s: float = WAIT_MAX_S,
    now: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    stopped: Callable[[], bool] = lambda: False,
) -> Arrival:
    """This run's rank traces in `folder`, once all `tag.world_size` are there or the
    wait is over for every missing one (see the module's docstring for the bounds)."""
    t0 = now()
    arrived: dict[int, Path] = {}
    foreign: dict[int, str] = {}
    peeked: dict[int, tuple[float, int, bool]] = {}  # rank -> (mtime, size, ours)
    status: dict[int, str] = {}
    early: dict[int, Path] = {}  # rank -> this run's trace, written while the rank still ran
    said_at = -SAY_EVERY_S
    base = TERMINATED_WAIT_S if terminated else timeout_s
    while True:
        if stopped():  # SIGTERM while waiting (torchrun stopping the job): wait no longer
            terminated, base = True, min(base, TERMINATED_WAIT_S)
        waited = now() - t0
        for r in range(tag.world_size):
            if r in arrived:
                continue
            path = folder / f"rank{r}{TRACE_SUFFIX}"
            try:
                st = path.stat()
            except OSError:
                st = None
            if st is not None:
                key = (st.st_mtime, st.st_size)
                if r not in peeked or peeked[r][:2] != key:
                    head = peek_run(path)
                    # Without a token nothing tells runs apart: a file there is taken.
                    ours = head is not None and head.get("token") == tag.token if tag.token else True
                    peeked[r] = (*key, ours)
                    if not ours:
                        foreign[r] = _describe_foreign(path, head)
                        # Said when seen, not only when the rank never arrives: the file
                        # is usually replaced by this run's a moment later.
                        echo(f"{foreign[r]}: not read; waiting for this run's rank {r}")
            beat = _read_heartbeat(folder, r)
            if beat is None or beat.get("token") != tag.token:
                status[r] = "none"
            elif beat.get("phase") == "failed":
                status[r] = "failed"
            elif beat.get("phase") == "written":
                status[r] = "written"
            elif time.time() - float(beat.get("beat", 0.0)) > STALE_S:
                status[r] = "dead"
            else:
                status[r] = "alive"
            if st is not None and peeked[r][2]:
                foreign.pop(r, None)
                if status[r] == "alive" and tag.token:
                    # This run's trace, but its rank still runs: what it wrote so far (the
                    # start of the run set aside, or a recording exported at once), which
                    # its final trace replaces. Taken only if the final one never comes.
                    if r not in early:
                        echo(f"rank {r}'s trace so far is on disk; waiting for its final one")
                    early[r] = path
                    continue
                arrived[r] = path
                early.pop(r, None)
                continue
        missing = [r for r in range(tag.world_size) if r not in arrived]
        still = [r for r in missing if status.get(r) not in ("failed", "dead")
                 and waited < (max_s if status.get(r) == "alive" and not terminated else base)]  # fmt: skip
        if not still:
            break
        if waited - said_at >= SAY_EVERY_S:
            said_at = waited
            parts = [f"rank {r} ({'its capture is running' if status.get(r) == 'alive' else 'no sign of it yet'})"
                     for r in still[:8]]  # fmt: skip
            extra = f" and {len(still) - 8} more" if len(still) > 8 else ""
            echo(f"waiting for this run's traces ({len(arrived)} of {tag.world_size} written): "
                 + ", ".join(parts) + extra + (f"; {waited:.0f} s so far" if waited >= 1 else ""))  # fmt: skip
        sleep(POLL_S)
    waited = now() - t0
    problems: list[str] = []
    partial: list[str] = []
    for r in range(tag.world_size):
        if r in arrived:
            continue
        if r in early:  # never finished within the wait: what it wrote while running is kept
            arrived[r] = early[r]
            partial.append(
                f"rank {r}: its capture was still running after {waited:.0f} s; its trace as written while it ran "
                "(an early part of the run, or the recording before the script's end) is used"
            )
            continue
        why = {
            "failed": "its capture failed before writing a trace",
            "dead": "its process stopped without writing a trace (killed or crashed)",
            "alive": f"its capture was still running after {waited:.0f} s (hung, or still exporting)",
        }.get(status.get(r, "none"), f"no trace of this run and no sign of the rank within {waited:.0f} s")
        line = f"rank {r}: {why}"
        if r in foreign:
            line += f"; {foreign[r]}: not read"
        problems.append(line)
    if problems:
        echo(f"{len(problems)} of {tag.world_size} ranks' traces did not arrive: reporting on the others ("
             + "; ".join(problems[:4]) + (" ..." if len(problems) > 4 else "") + ")")  # fmt: skip
    for line in partial:
        echo(line)
    problems += partial
    if not tag.token and arrived:
        problems.append(
            "the traces carry no run token (no torchrun store or run id): files in the folder are taken as this run's"
        )
    return Arrival(ready=[arrived[r] for r in sorted(arrived)], problems=problems, waited_s=waited)


#: The script's process groups, kept alive until the process exits (see below).
_KEPT_GROUPS: list[Any] = []


def keep_process_groups() -> bool:
    """Keep every process group the script destroys alive until tracelens ends the
    process (`exit_process`: os._exit, no destructors), so that none is destroyed while
    Python runs.

    Why: torch's autograd stashes a Python object in the thread-local state on every
    backward (`_engine_run_backward`: `_stash_obj_in_tls("context", ...)`, torch 2.13),
    and gloo's work objects carry a copy of that state to the worker threads. When the
    last reference to a ProcessGroupGloo goes with the DDP Reducer that holds it (the
    script's model freed as its main() returns), the main thread runs the group's
    destructor holding the GIL and joins the worker threads, while a worker destroying
    its last work object waits for the GIL to drop that Python object: a deadlock. Seen in
    1 of 12 runs of `torchrun --nproc-per-node 2 -m tracelens capture ddp_cpu.py` on the
    loaded 2-core machine (py-spy: main thread in ~ProcessGroupGloo -> std::thread::join
    from ~Reducer, worker in ~AsyncBarrierWork -> ~ThreadLocalState -> gil_scoped_acquire);
    the rank never exited and torchrun waited for it. Returns whether it is in place."""
    try:
        import torch.distributed as dist
        from torch.distributed import distributed_c10d as c10d
    except ImportError:
        return False
    original = getattr(c10d, "destroy_process_group", None)
    if original is None:
        return False
    if getattr(original, "_tracelens_keeps_groups", False):
        return True

    @functools.wraps(original)
    def destroy_process_group(group: Any = None) -> Any:
        world = getattr(c10d, "_world", None)
        with contextlib.suppress(Exception):
            _KEPT_GROUPS.extend(list(getattr(world, "pg_map", {}) or {}))
        if group is not None:
            _KEPT_GROUPS.append(group)
        return original(group)

    destroy_process_group._tracelens_keeps_groups = True  # type: ignore[attr-defined]
    c10d.destroy_process_group = destroy_process_group
    dist.destroy_process_group = destroy_process_group
    return True


def write_gz_head(fh: Any, tag: dict[str, Any] | None) -> None:
    """Write the JSON object's opening brace and, for a rank's trace, the run tag as its
    first key (so `peek_run` finds it in the first bytes)."""
    fh.write(b"{")
    if tag:
        fh.write(b'"' + RUN_HEAD_KEY.encode() + b'":' + json.dumps(tag, separators=(",", ":")).encode() + b",")


__all__ = [
    "Arrival",
    "Heartbeat",
    "RankEnv",
    "RunTag",
    "keep_process_groups",
    "peek_run",
    "rank_trace_path",
    "ranks_folder",
    "run_tag",
    "torchrun_env",
    "wait_for_ranks",
    "write_gz_head",
]
