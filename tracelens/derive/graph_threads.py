"""The dependency graph's thread keys and its thread -> thread edges: the autograd
engine's fork and join around the ranges where one thread waits for another (split from
derive/graph.py, issue 26, to keep that module under the size limit)."""

from __future__ import annotations

import numpy as np

from tracelens.model.trace import TraceModel, name_matches

#: Host ranges in which a thread waits for another thread's work (the autograd engine's
#: backward runs on its own device threads while the caller waits in run_backward, or in
#: the `## backward ##` range TorchRec's and HTA's training loops put around
#: loss.backward(): HTA's control.json, whose 2022 profiler records no run_backward).
THREAD_WAIT_MARKERS = ("run_backward", "## backward ##")


def _thread_key(pid: np.ndarray, tid: np.ndarray) -> np.ndarray:
    return pid.astype(np.int64) * (1 << 32) + (tid.astype(np.int64) & 0xFFFFFFFF)


def _thread_waits(
    model: TraceModel,
    ts: np.ndarray,
    end: np.ndarray,
    kind: np.ndarray,
    chain: np.ndarray,
    chain_first: np.ndarray,
    chain_host: np.ndarray,
    keys: list[tuple[int, int]],
    w0: float,
    w1: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Fork/join edges around host ranges where one thread waits for another
    (THREAD_WAIT_MARKERS): the other thread's first call in the range depends on the
    waiting thread's last call before it (fork), and the waiting thread's first call after
    the range on the other's last call in it (join). Returns edge sources, targets,
    delays, and (node, own gap) rows for the nodes whose chain gap shrinks to the
    thread's own work."""
    host = model.host
    wait_rows = np.flatnonzero(
        name_matches(host["name"], lambda s: any(m in s for m in THREAD_WAIT_MARKERS))
        & (host["ts"].to_numpy() < w1)
        & (host["end"].to_numpy() > w0)
    )
    empty = np.empty(0, np.int64)
    if not len(wait_rows):
        return empty, empty, np.empty(0), np.empty((0, 2))
    host_chains = np.flatnonzero(chain_host)
    chain_of_key = {keys[c]: c for c in host_chains.tolist()}
    pid = host["pid"].to_numpy()
    tid = host["tid"].to_numpy()
    # The threads that run the backward: autograd's functions or kernel launches on them.
    # Other threads busy during the range (a DataLoader's pin-memory thread) are no part of
    # it and neither fork nor join (capture_train_loader: the pin thread's calls inside the
    # backward made the training thread wait for its next batch's pinning).
    worker = name_matches(
        host["name"], lambda s: s.startswith("autograd::engine::evaluate_function") or "LaunchKernel" in s
    )
    w_rows = np.flatnonzero(worker)
    w_key = _thread_key(pid[w_rows], tid[w_rows])
    w_ts = host["ts"].to_numpy(dtype=np.float64)[w_rows]
    srcs: list[int] = []
    dsts: list[int] = []
    delays: list[float] = []
    own: list[tuple[int, float]] = []
    seen: set[tuple[float, float]] = set()
    all_ts = host["ts"].to_numpy(dtype=np.float64)
    all_end = host["end"].to_numpy(dtype=np.float64)
    for r in wait_rows.tolist():
        r0, r1 = float(all_ts[r]), float(all_end[r])
        if (r0, r1) in seen:  # a Python frame and the op of the same call
            continue
        seen.add((r0, r1))
        c = chain_of_key.get((int(pid[r]), int(tid[r]) & 0xFFFFFFFF))
        if c is None:
            continue
        lo, hi = int(chain_first[c]), int(chain_first[c + 1])
        mine_ts = ts[lo:hi]
        i_before = lo + int(np.searchsorted(mine_ts, r0, side="right")) - 1  # last node starting before the range
        i_after = lo + int(np.searchsorted(mine_ts, r1, side="left"))  # first node after it
        for o in host_chains.tolist():
            if o == c:
                continue
            mine = w_key == _thread_key(np.array([keys[o][0]]), np.array([keys[o][1]]))[0]
            if not ((w_ts[mine] >= r0) & (w_ts[mine] < r1)).any():
                continue
            olo, ohi = int(chain_first[o]), int(chain_first[o + 1])
            o_ts = ts[olo:ohi]
            first = olo + int(np.searchsorted(o_ts, r0, side="left"))
            last = olo + int(np.searchsorted(o_ts, r1, side="right")) - 1
            if first > last or first >= ohi:
                continue
            if i_before >= lo and end[i_before] <= ts[first]:
                srcs.append(i_before)
                dsts.append(first)
                delays.append(ts[first] - end[i_before])
                own.append((first, 0.0))
            if i_after < hi and end[last] <= ts[i_after]:
                srcs.append(last)
                dsts.append(i_after)
                delays.append(ts[i_after] - end[last])
                # The waiting thread's own work: before it entered the range and after it left.
                prev_end = end[i_after - 1] if i_after - 1 >= lo else r0
                work = max(r0 - prev_end, 0.0) + max(ts[i_after] - r1, 0.0)
                own.append((i_after, min(work, ts[i_after] - prev_end)))
    return (
        np.array(srcs, dtype=np.int64),
        np.array(dsts, dtype=np.int64),
        np.array(delays, dtype=np.float64),
        np.array(own, dtype=np.float64).reshape(-1, 2),
    )
