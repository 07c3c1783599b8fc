"""The nodes of a window's dependency graph (derive/graph.py): which runtime calls and GPU
activities it holds, in chain order (threads, then streams), and what ran on each chain
before the window began."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tracelens.derive.graph_threads import _thread_key
from tracelens.model.schema import Kind
from tracelens.model.trace import TraceModel

HOST = np.int8(0)
GPU = np.int8(1)

_LAUNCH_KINDS = (int(Kind.RUNTIME), int(Kind.DRIVER))
_NEG = -np.inf


@dataclass(frozen=True)
class WindowNodes:
    """The graph's nodes, sorted by (chain, start, end), and what build_graph needs of the
    model's rows to wire them."""

    kind: np.ndarray  # HOST or GPU per node
    row: np.ndarray  # the model row (host row of a call, model.gpu row of an activity)
    chain: np.ndarray
    ts: np.ndarray
    end: np.ndarray
    act_pos: np.ndarray  # position in model.gpu_activity() of GPU nodes, -1 for host nodes
    chain_first: np.ndarray  # chain c's nodes are chain_first[c]:chain_first[c + 1]
    chain_host: np.ndarray  # per chain: a host thread (else a GPU stream)
    keys: list[tuple[int, int]]  # per chain: (pid, tid) or (device, stream)
    t_uniq: np.ndarray  # the host chains' thread keys
    host_node: dict[int, int]  # host row -> its node
    a_call: np.ndarray  # per activity: the outermost call that launched it, -1 if none
    a_call_ts: np.ndarray  # that call's start (NaN if none)
    # what chain_init needs: the window's calls and all activities
    calls: np.ndarray
    c_key: np.ndarray
    h_end: np.ndarray
    a_dev: np.ndarray
    a_stream: np.ndarray
    a_ts: np.ndarray
    a_end: np.ndarray
    g_sel: np.ndarray
    h_ts_calls: np.ndarray  # the calls' starts

    def chain_init(self, w0: float) -> np.ndarray:
        """Each chain's initial state: the end of what ran on its thread or stream before
        its first node (outside the graph), held between the window's start and that
        node's start."""
        c_ts = self.h_ts_calls
        n_chains = len(self.chain_host)
        out = np.full(n_chains, w0)
        ts = self.ts
        for c in range(n_chains):
            f = int(self.chain_first[c])
            if self.chain_host[c]:
                before = self.calls[(self.c_key == self.t_uniq[c]) & (c_ts < ts[f])]
                last_end = float(self.h_end[before].max()) if len(before) else _NEG
            else:
                dv, st = self.keys[c]
                on = (self.a_dev == dv) & (self.a_stream == st) & (self.a_ts < ts[f]) & ~self.g_sel
                last_end = float(self.a_end[on].max()) if on.any() else _NEG
            out[c] = min(max(last_end, min(w0, ts[f])), ts[f]) if np.isfinite(last_end) else min(w0, ts[f])
        return out


def _outermost_calls(model: TraceModel) -> tuple[np.ndarray, np.ndarray]:
    """Runtime/driver call rows, and for every host row the outermost call at or above it
    (-1 where none): a cuLaunchKernel inside a cudaLaunchKernel belongs to the outer one."""
    kind = model.arrays.kind
    parent = model.arrays.parent
    is_call = np.isin(kind, _LAUNCH_KINDS)
    outer = np.where(is_call, np.arange(len(kind)), -1)
    # Walk up a few levels: calls nest at most two deep in the real traces.
    cur = parent.copy()
    for _ in range(4):
        ok = cur >= 0
        if not ok.any():
            break
        up_call = np.zeros(len(kind), dtype=bool)
        up_call[ok] = is_call[cur[ok]]
        outer = np.where(up_call & (outer >= 0), cur, outer)
        nxt = np.full(len(kind), -1, dtype=np.int64)
        nxt[ok] = parent[cur[ok]]
        cur = nxt
    calls = np.flatnonzero(is_call & (outer == np.arange(len(kind))))
    return calls, outer


def select_window_nodes(model: TraceModel, w0: float, w1: float, h1: float) -> WindowNodes | None:
    """The nodes of [w0, w1] (host side ending at h1): GPU activities starting in the
    window or launched by a window call (not those launched after h1: the next window's),
    and the outermost runtime calls from the first launch of that work to h1. None when
    there is none."""
    host = model.host
    h_ts = host["ts"].to_numpy(dtype=np.float64)
    h_end = host["end"].to_numpy(dtype=np.float64)
    h_pid = host["pid"].to_numpy()
    h_tid = host["tid"].to_numpy()
    calls, outer = _outermost_calls(model)
    if not len(calls):
        return None
    act = model.gpu_activity()
    if act.empty:
        return None
    a_rows = act.index.to_numpy()
    a_ts = act["ts"].to_numpy(dtype=np.float64)
    a_end = act["end"].to_numpy(dtype=np.float64)
    a_dev = act["device"].to_numpy().astype(np.int64)
    a_stream = act["stream"].to_numpy().astype(np.int64)
    a_launch = act["launch"].to_numpy().astype(np.int64)
    # The outermost call that launched each activity.
    a_call = np.where(a_launch >= 0, outer[np.clip(a_launch, 0, None)], -1)
    a_call_ts = np.where(a_call >= 0, h_ts[np.clip(a_call, 0, None)], np.nan)

    # -- GPU nodes: activities starting in the window, or launched by a window call
    c_ts = h_ts[calls]
    launched_in = (a_call >= 0) & (a_call_ts >= w0) & (a_call_ts < h1)
    g_sel = (a_ts >= w0) & ((a_ts < w1) | launched_in)
    # Activities launched by calls after the window belong to the next window.
    g_sel &= ~((a_call >= 0) & (a_call_ts >= h1))
    if not g_sel.any():
        return None
    # -- host nodes: outermost calls from the first launch of the window's GPU work (where
    # the GPU trails the host, the host launched it before the window began: it is the
    # host the GPU catches up with when it gets faster) to the window's host end
    first_launch = np.nanmin(a_call_ts[g_sel]) if np.isfinite(a_call_ts[g_sel]).any() else w0
    h0 = min(w0, float(first_launch))
    in_win = (c_ts >= h0) & (c_ts < h1)
    hrows = calls[in_win]
    gidx = np.flatnonzero(g_sel)

    # Chains: threads, then streams.
    c_key = _thread_key(h_pid[calls], h_tid[calls])
    t_key = c_key[in_win]
    s_key = a_dev[gidx] * (1 << 32) + (a_stream[gidx] & 0xFFFFFFFF)
    t_uniq, t_inv = np.unique(t_key, return_inverse=True)
    s_uniq, s_inv = np.unique(s_key, return_inverse=True)
    n_host, n_gpu = len(hrows), len(gidx)
    chain = np.concatenate([t_inv, len(t_uniq) + s_inv]).astype(np.int64)
    ts = np.concatenate([h_ts[hrows], a_ts[gidx]])
    end = np.concatenate([h_end[hrows], a_end[gidx]])
    order = np.lexsort((end, ts, chain))
    chain, ts, end = chain[order], ts[order], end[order]
    kind = np.concatenate([np.zeros(n_host, np.int8), np.ones(n_gpu, np.int8)])[order]
    row = np.concatenate([hrows, a_rows[gidx]])[order]
    act_pos = np.concatenate([np.full(n_host, -1), gidx])[order]  # position in `act` of GPU nodes
    n_chains = len(t_uniq) + len(s_uniq)
    chain_first = np.searchsorted(chain, np.arange(n_chains + 1))
    chain_host = np.arange(n_chains) < len(t_uniq)
    keys = [(int(k >> 32), int(k & 0xFFFFFFFF)) for k in t_uniq.tolist()] + [
        (int(k >> 32), int(k & 0xFFFFFFFF)) for k in s_uniq.tolist()
    ]
    host_idx = np.flatnonzero(kind == HOST)
    host_node = dict(zip(row[host_idx].tolist(), host_idx.tolist(), strict=True))
    return WindowNodes(
        kind=kind,
        row=row,
        chain=chain,
        ts=ts,
        end=end,
        act_pos=act_pos,
        chain_first=chain_first,
        chain_host=chain_host,
        keys=keys,
        t_uniq=t_uniq,
        host_node=host_node,
        a_call=a_call,
        a_call_ts=a_call_ts,
        calls=calls,
        c_key=c_key,
        h_end=h_end,
        a_dev=a_dev,
        a_stream=a_stream,
        a_ts=a_ts,
        a_end=a_end,
        g_sel=g_sel,
        h_ts_calls=c_ts,
    )
