"""Fusion chains: back-to-back memory-bound passes from different ops on one stream, within
one step, that a fusing compiler (torch.compile's Inductor) would make one pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from tracelens.derive.kernel_costs import _Attribution
from tracelens.model.trace import TraceModel

#: Kernel families a fusing compiler (torch.compile's Inductor) merges into one pass.
FUSIBLE_FAMILIES = frozenset({"elementwise", "copy", "norm", "reduction"})


#: Adjacent passes join a chain only if their bytes are within this factor of each other:
#: a pass over a tensor and a tiny scalar op beside it are not one fusion.
CHAIN_SIZE_RATIO = 4.0


#: Longer runs are split: fusing compilers bound a kernel's size, and a run of hundreds of
#: passes is a loop, not one expression (the claim stays that of a bounded fusion).
CHAIN_MAX_PASSES = 16


@dataclass(frozen=True)
class FusionChain:
    """Back-to-back memory-bound kernels on one stream, each a full pass over memory,
    grouped by the ops that launched them. Fused, the chain makes about one pass: the
    time saved is estimated as all but its longest kernel."""

    ops: tuple[str, ...]  # launching op of each pass, in order
    count: int  # occurrences
    time_us: float
    saved_us: float
    bytes: float
    first_row: int  # host row of the first pass's op (for its Python source)
    kernels: tuple[str, ...]
    #: Each occurrence's passes as model.gpu rows, and each pass's bytes (for the replay's
    #: fusion transform, derive/transforms/fusion.py).
    occurrences: tuple[tuple[tuple[int, ...], ...], ...] = ()
    occurrence_bytes: tuple[tuple[float, ...], ...] = ()


def _kernel_steps(model: TraceModel, k: pd.DataFrame, iterations: tuple[float, ...]) -> np.ndarray:
    """Each kernel's step: the detected iteration (host start times) its launch falls in when
    the window is made of detected iterations (a trace without ProfilerSteps, or `tracelens
    capture`'s one step around the whole run), else its launch's ProfilerStep, else -1."""
    steps = k["step"].to_numpy() if "step" in k.columns else np.full(len(k), -1)
    launch = k["launch"].to_numpy()
    if not iterations or not len(model.host):
        return steps
    ts = model.host["ts"].to_numpy()[np.clip(launch, 0, None)]
    found = np.searchsorted(np.asarray(iterations, dtype=float), ts, side="right") - 1
    return np.where((launch >= 0) & (found >= 0), found, -1)


def _fusion_chains(
    model: TraceModel, k: pd.DataFrame, att: _Attribution, iterations: tuple[float, ...] = ()
) -> tuple[FusionChain, ...]:
    """Maximal runs of consecutive fusible kernels on each stream (no other kernel between
    them), of comparable size, two passes or more."""
    order = np.lexsort((k["ts"].to_numpy(), k["stream"].to_numpy(), k["device"].to_numpy()))
    # Python lists, not numpy arrays: the walk below reads single items (a numpy scalar
    # costs an object and slower arithmetic each; the values are the same floats and ints).
    streams = (k["device"].to_numpy() * 1_000_003 + k["stream"].to_numpy())[order].tolist()
    # A chain ends at a step (iteration) boundary: fusing compilers fuse within one
    # iteration's graph, and a chain spanning iterations over-states the saving (14.7 ms
    # claimed vs 11.6 ms measured eager-vs-compiled on a 5-iteration elementwise loop).
    steps = _kernel_steps(model, k, iterations)[order].tolist()
    dur = k["dur"].to_numpy(dtype=float)[order].tolist()
    names = k["name"].astype(str).to_numpy()[order]
    nbytes = att.bytes[order].tolist()
    owner = att.owner[order].tolist()
    fusible_family = np.zeros(len(order), dtype=bool)
    for i, m in att.meta.items():
        fusible_family[i] = m[1] in FUSIBLE_FAMILIES
    fusible = ((att.source == 1) & fusible_family)[order].tolist()
    rows = k.index.to_numpy()[order].tolist()
    groups: dict[tuple[str, ...], list[Any]] = {}

    def close(run: list[int]) -> None:
        # Kernels of one op call are one pass (batch norm backward's reduce and apply
        # kernels are one algorithm, not a fusion the user can ask for).
        passes: list[list[int]] = []
        for j in run:
            if passes and owner[passes[-1][-1]] == owner[j]:
                passes[-1].append(j)
            else:
                passes.append([j])
        for start in range(0, len(passes), CHAIN_MAX_PASSES):
            add(passes[start : start + CHAIN_MAX_PASSES])

    def add(passes: list[list[int]]) -> None:
        if len(passes) < 2:
            return
        ops = tuple(model.arrays.name(int(owner[p[0]])) for p in passes)
        times = [float(sum(dur[j] for j in p)) for p in passes]
        g = groups.setdefault(
            ops, [0, 0.0, 0.0, 0.0, int(owner[passes[0][0]]), tuple(names[p[0]] for p in passes), [], []]
        )
        g[0] += 1
        g[1] += sum(times)
        g[2] += sum(times) - max(times)
        g[3] += float(sum(nbytes[j] for p in passes for j in p))
        g[6].append(tuple(tuple(int(rows[j]) for j in p) for p in passes))
        g[7].append(tuple(float(sum(nbytes[j] for j in p)) for p in passes))

    run: list[int] = []
    for j in range(len(order)):
        joins = (
            fusible[j]
            and run
            and streams[j] == streams[run[-1]]
            and steps[j] == steps[run[-1]]
            and nbytes[j] > 0
            and max(nbytes[j], nbytes[run[-1]]) <= CHAIN_SIZE_RATIO * min(nbytes[j], nbytes[run[-1]])
        )
        if joins:
            run.append(j)
            continue
        close(run)
        run = [j] if fusible[j] and nbytes[j] > 0 else []
    close(run)
    chains = [
        FusionChain(ops, int(g[0]), g[1], g[2], g[3], g[4], g[5], tuple(g[6]), tuple(g[7])) for ops, g in groups.items()
    ]
    chains.sort(key=lambda c: -c.saved_us)
    return tuple(chains)


def saved_across_syncs(model: TraceModel, chains: tuple[FusionChain, ...], sync_rows: np.ndarray) -> float:
    """Of the chains' estimated saving, the part in occurrences whose passes a host sync
    separates (a blocking call between the launches of the first and the last pass):
    torch.compile breaks its graph at the sync, so only those fusions wait on removing
    it; a chain launched between two syncs fuses inside one graph as it is."""
    if not chains or not len(sync_rows) or not len(model.host):
        return 0.0
    h_ts = model.host["ts"].to_numpy(dtype=np.float64)
    sync_ts = np.sort(h_ts[sync_rows])
    launch = model.gpu["launch"].to_numpy()
    cut = 0.0
    for c in chains:
        if not c.occurrences:
            continue
        each = c.saved_us / len(c.occurrences)
        for occ in c.occurrences:
            at = [h_ts[launch[r]] for p in occ for r in p if launch[r] >= 0]
            if len(at) < 2:
                continue
            k = int(np.searchsorted(sync_ts, min(at), side="right"))
            if k < len(sync_ts) and sync_ts[k] < max(at):
                cut += each
    return cut
