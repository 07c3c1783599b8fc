"""`tracelens capture` under torchrun: every worker runs its own capture (torchrun
starts them, does the rendezvous and restarts; tracelens does not do it again), writes
one trace named by its rank into one folder, and rank 0 reports on the set once all
ranks' traces are there:

    torchrun --nproc-per-node 4 -m tracelens capture train.py --epochs 1

writes reports/train-ranks/rank0.pt.trace.json.gz ... rank3.pt.trace.json.gz and the
job report reports/train-ranks.job.{html,md,json}.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

#: How long rank 0 waits for the other ranks' traces after writing its own: their
#: exports finish within seconds of each other (same steps, same trace sizes); a rank
#: that died writes nothing, and the report goes on without it (reported missing).
WAIT_FOR_RANKS_S = 120.0
POLL_S = 0.5


@dataclass(frozen=True)
class RankEnv:
    rank: int
    world_size: int
    local_rank: int


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
    return RankEnv(rank=rank, world_size=world, local_rank=int(env.get("LOCAL_RANK", "0") or 0))


def ranks_folder(target: str, out_dir: Path) -> Path:
    stem = Path(target).name[:-3] if target.endswith(".py") else Path(target).stem
    return out_dir / f"{stem}-ranks"


def rank_trace_path(target: str, out_dir: Path, env: RankEnv) -> Path:
    return ranks_folder(target, out_dir) / f"rank{env.rank}.pt.trace.json.gz"


def wait_for_ranks(
    folder: Path, world_size: int, echo: Callable[[str], None], timeout_s: float = WAIT_FOR_RANKS_S
) -> list[Path]:
    """The rank traces in `folder` once all `world_size` are written (traces are written
    atomically, so one that exists is whole), or whatever is there after the timeout."""
    want = [folder / f"rank{r}.pt.trace.json.gz" for r in range(world_size)]
    deadline = time.monotonic() + timeout_s
    said = False
    while True:
        present = [p for p in want if p.exists()]
        if len(present) == len(want) or time.monotonic() > deadline:
            break
        if not said:
            echo(f"waiting for the other ranks' traces ({len(present)} of {world_size} written)")
            said = True
        time.sleep(POLL_S)
    if len(present) < len(want):
        echo(f"{world_size - len(present)} rank traces did not appear within {timeout_s:.0f} s: reporting without them")
    return present
