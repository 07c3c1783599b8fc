"""Replay a dependency graph (derive/graph.py), as measured or with a transform's edits.

Every chain (a thread, a stream) obeys, node by node,

    start[i] = max(end[i-1] + gap[i], S[i])        S: the latest bound from other chains
    end[i]   = max(start[i] + dur[i], E[i])        E: the latest wait on other chains

which is one pass of cumulative sums and a running maximum per chain:
end[i] = A[i] + max(init, max_{j<=i}(b[j] - A[j])) with A the cumulative gap + dur and
b[j] = max(S[j] + dur[j], E[j]). The bounds S and E come from the other chains' current
times, so the chains are solved together by iterating to the fixed point (Jacobi): the
graph is acyclic, so it is reached after as many rounds as a dependency path crosses
chains (a sync costs two: host -> GPU -> host), each round vectorised over all nodes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tracelens.derive.graph import END_END, START_START, DependencyGraph
from tracelens.derive.graph_order import topological_order

#: Jacobi rounds before the replay switches to one pass in dependency order: a round
#: costs a few numpy passes over the nodes, the ordered pass about 1 µs of Python a node.
#: Most transforms converge in 2-15 rounds; traces with a round trip per kernel need
#: thousands (power_gemm: 1984 from a cold start).
JACOBI_ROUNDS = 8
#: Times agree when within this (µs).
TOLERANCE_US = 1e-6


@dataclass
class Edit:
    """A transformed copy of a graph's variable parts; None keeps the graph's own."""

    dur: np.ndarray | None = None
    gap: np.ndarray | None = None
    s_fixed: np.ndarray | None = None
    e_fixed: np.ndarray | None = None
    e_delay: np.ndarray | None = None
    e_alive: np.ndarray | None = None
    chain_tail: np.ndarray | None = None
    #: a factor on each node's gap, applied after the fixes are combined: the host running
    #: faster (transforms/host.warm_host) is a rate on whatever gaps the other fixes leave,
    #: not a fix that claims the nodes (a CUDA graph still replaces the launches there)
    gap_scale: np.ndarray | None = None
    #: extra edges: (src, dst, delay, type) arrays
    extra: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None
    #: a floor on the window's end relative to its start (a throughput bound the graph
    #: cannot express, e.g. DataLoader workers that produce a batch every T/W)
    min_span_us: float = 0.0
    notes: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, g: DependencyGraph) -> Edit:
        """An edit holding copies of everything, ready to change in place."""
        return cls(
            dur=g.dur.copy(),
            gap=g.gap.copy(),
            s_fixed=g.s_fixed.copy(),
            e_fixed=g.e_fixed.copy(),
            e_delay=g.e_delay.copy(),
            e_alive=np.ones(len(g.e_src), dtype=bool),
            chain_tail=g.chain_tail.copy(),
        )


def combine(g: DependencyGraph, edits: list[Edit]) -> Edit:
    """Several fixes at once, each made on its own copy of the graph, most specific first:
    a node's time and gap are those of the first fix that changed them (SDPA replaces the
    attention's kernels; the fusion of the softmax chain inside it does not change them
    again), edges cut by any fix are cut, floors are the highest."""
    if len(edits) == 1:
        return edits[0]
    out = Edit.of(g)
    assert out.dur is not None and out.gap is not None and out.e_alive is not None
    claimed = np.zeros(g.n, dtype=bool)
    for e in edits:
        dur = e.dur if e.dur is not None else g.dur
        gap = e.gap if e.gap is not None else g.gap
        changed = (dur != g.dur) | (gap != g.gap)
        take = changed & ~claimed
        out.dur[take] = dur[take]
        out.gap[take] = gap[take]
        claimed |= changed
        if e.e_alive is not None:
            out.e_alive &= e.e_alive
        for name in ("s_fixed", "e_fixed", "chain_tail"):
            mine = getattr(e, name)
            if mine is not None:
                setattr(out, name, np.minimum(getattr(out, name), mine))
        out.min_span_us = max(out.min_span_us, e.min_span_us)
        if e.gap_scale is not None:
            out.gap_scale = e.gap_scale.copy() if out.gap_scale is None else out.gap_scale * e.gap_scale
    extras = [e.extra for e in edits if e.extra is not None]
    if extras:
        out.extra = tuple(np.concatenate([x[i] for x in extras]) for i in range(4))  # type: ignore[assignment]
    return out


@dataclass(frozen=True)
class Schedule:
    start: np.ndarray
    end: np.ndarray
    window_end: float  # the replayed end of the window (absolute µs)
    span_us: float  # window_end - window_start
    rounds: int
    converged: bool
    #: The longest host thread's time for the window's steps, from before its first call
    #: (the host may have launched the window's work before the window began) to its end.
    host_span_us: float = 0.0

    @property
    def steady_span_us(self) -> float:
        """The window in a loop that runs on: at least as long as the host needs for its
        steps. A host that ran ahead of the GPU (GPU-bound steps) starts the window with
        work already launched; once a fix makes the GPU faster, that lead is spent within
        a few steps and the host sets the pace, which a finite window's replay alone would
        not show (a decode loop whose host was 12 ms ahead: 1.2 ms a step replayed,
        1.4 ms the host needs)."""
        return max(self.span_us, self.host_span_us)


def replay(g: DependencyGraph, edit: Edit | None = None, *, cold: bool = False) -> Schedule:
    """The schedule of `g` with `edit` applied. The iteration starts from the measured
    times (the fixed point of the unedited graph), or with `cold` from nothing at all
    (the tests: it must reach the same schedule)."""
    e = edit or Edit()
    dur = g.dur if e.dur is None else e.dur
    gap = g.gap if e.gap is None else e.gap
    if e.gap_scale is not None:
        gap = gap * e.gap_scale
    s_fixed = g.s_fixed if e.s_fixed is None else e.s_fixed
    e_fixed = g.e_fixed if e.e_fixed is None else e.e_fixed
    delay = g.e_delay if e.e_delay is None else e.e_delay
    tail = g.chain_tail if e.chain_tail is None else e.chain_tail
    src, dst, typ = g.e_src, g.e_dst, g.e_type
    if e.e_alive is not None:
        src, dst, delay, typ = src[e.e_alive], dst[e.e_alive], delay[e.e_alive], typ[e.e_alive]
    if e.extra is not None:
        xs, xd, xl, xt = e.extra
        src, dst = np.concatenate([src, xs]), np.concatenate([dst, xd])
        delay, typ = np.concatenate([delay, xl]), np.concatenate([typ, xt])
    w0 = g.window_start
    n = g.n
    # Relative to the window's start: the running maximum across chains below adds a
    # per-chain offset, which must stay small next to float64's 53 bits.
    s_fixed = s_fixed - w0
    e_fixed = e_fixed - w0
    init = g.chain_init - w0
    start = g.ts - w0 if not cold else np.full(n, -np.inf)
    end = g.end - w0 if not cold else np.full(n, -np.inf)
    solver = _Solver(g, src, dst, delay, typ, gap, dur, s_fixed, e_fixed, init, start, end)
    everything = np.arange(n)
    rounds = solver.solve(everything, JACOBI_ROUNDS)
    converged = rounds >= 0
    if not converged:
        # Many host <-> GPU round trips (fork/join with the autograd thread every step, a
        # launch queue that is always full): solve the nodes block by block in time order,
        # each block to its own fixed point (dependencies run forward in time).
        rounds, converged = JACOBI_ROUNDS, True
        for block in _blocks(g, src, dst):
            r = solver.solve(block, BLOCK_ROUNDS)
            if r < 0:
                converged = False
                break
            rounds += r
    start, end = solver.start, solver.end
    if not converged:
        # Timestamps that contradict the dependencies: one pass in dependency order.
        start, end = _sequential(g, src, dst, delay, typ, gap, dur, s_fixed, e_fixed, init)
        converged = bool(np.isfinite(end).all())
    lasts = g.chain_first[1:] - 1
    host_chain = np.flatnonzero(g.chain_paces)
    host_end = end[lasts[host_chain]] + tail[host_chain] if len(host_chain) else np.empty(0)
    gpu_end = end[g.counted & (g.kind == 1)]
    w_end = max(float(host_end.max(initial=-np.inf)), float(gpu_end.max(initial=-np.inf)))
    # Idle at the window's end that no event explains stays as measured; a throughput
    # floor (e.g. DataLoader workers) bounds the span from below.
    w_end = max(w_end + g.uncovered_tail_us, e.min_span_us)
    host_span = float((host_end - init[host_chain]).max(initial=0.0)) if len(host_chain) else 0.0
    return Schedule(start + w0, end + w0, w_end + w0, w_end, rounds, converged, host_span)


def _sequential(
    g: DependencyGraph,
    src: np.ndarray,
    dst: np.ndarray,
    delay: np.ndarray,
    typ: np.ndarray,
    gap: np.ndarray,
    dur: np.ndarray,
    s_fixed: np.ndarray,
    e_fixed: np.ndarray,
    init: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """The schedule in one pass over the nodes in dependency order (times relative to the
    window's start; -inf for nodes on a cycle)."""
    n = g.n
    order_arr = g.order
    pos = np.empty(n, dtype=np.int64)
    pos[order_arr] = np.arange(len(order_arr))
    if len(order_arr) < n or (len(src) and bool((pos[src] >= pos[dst]).any())):
        # An edit's edges that the graph's own order does not respect.
        order = topological_order(n, g.chain_first, src, dst)
    else:
        order = order_arr.tolist()
    by_dst = np.argsort(dst, kind="stable")
    in_start = np.searchsorted(dst[by_dst], np.arange(n + 1)).tolist()
    e_src = src[by_dst].tolist()
    e_delay = delay[by_dst].tolist()
    e_typ = typ[by_dst].tolist()
    chain = g.chain.tolist()
    first = np.zeros(n, dtype=bool)
    first[g.chain_first[:-1][g.chain_first[:-1] < n]] = True
    first_l = first.tolist()
    init_l = init.tolist()
    gap_l, dur_l = gap.tolist(), dur.tolist()
    sf, ef = s_fixed.tolist(), e_fixed.tolist()
    start = [-np.inf] * n
    end = [-np.inf] * n
    ss, ee = int(START_START), int(END_END)
    for v in order:
        s = (init_l[chain[v]] if first_l[v] else end[v - 1]) + gap_l[v]
        if sf[v] > s:
            s = sf[v]
        e = -np.inf
        for k in range(in_start[v], in_start[v + 1]):
            t = e_typ[k]
            if t == ss:
                x = start[e_src[k]] + e_delay[k]
                if x > s:
                    s = x
            elif t == ee:
                x = end[e_src[k]] + e_delay[k]
                if x > e:
                    e = x
            else:
                x = end[e_src[k]] + e_delay[k]
                if x > s:
                    s = x
        e2 = s + dur_l[v]
        if e2 > e:
            e = e2
        if ef[v] > e:
            e = ef[v]
        start[v] = s
        end[v] = e
    return np.array(start), np.array(end)


#: Nodes per block of the blocked solve, and the rounds a block may take.
BLOCK_NODES = 500
BLOCK_ROUNDS = 400


def _blocks(g: DependencyGraph, src: np.ndarray, dst: np.ndarray) -> list[np.ndarray]:
    """The nodes in blocks of about BLOCK_NODES by measured start time, such that no
    dependency runs from a later block to an earlier one (a clock skew between host and
    device can put a kernel's start before its launch's: it moves to the later block)."""
    n = g.n
    order = np.argsort(g.ts, kind="stable")
    block = np.empty(n, dtype=np.int64)
    block[order] = np.arange(n) // BLOCK_NODES
    n_blocks = int(block.max()) + 1 if n else 0
    chain_off = np.repeat(np.arange(g.n_chains, dtype=np.int64) * (n_blocks + 1), np.diff(g.chain_first))
    for _ in range(64):
        before = block.copy()
        block = np.maximum.accumulate(block + chain_off) - chain_off
        if len(src):
            np.maximum.at(block, dst, block[src])
        if np.array_equal(block, before):
            break
    by_block = np.argsort(block, kind="stable")
    cuts = np.searchsorted(block[by_block], np.arange(n_blocks + 1))
    return [np.sort(by_block[cuts[i] : cuts[i + 1]]) for i in range(n_blocks) if cuts[i + 1] > cuts[i]]


class _Solver:
    """Jacobi rounds over a set of nodes (all of them, or one block), the rest fixed at
    their current times (see the module docstring for the recurrence)."""

    def __init__(
        self,
        g: DependencyGraph,
        src: np.ndarray,
        dst: np.ndarray,
        delay: np.ndarray,
        typ: np.ndarray,
        gap: np.ndarray,
        dur: np.ndarray,
        s_fixed: np.ndarray,
        e_fixed: np.ndarray,
        init: np.ndarray,
        start: np.ndarray,
        end: np.ndarray,
    ) -> None:
        self.g = g
        self.gap, self.dur, self.s_fixed, self.e_fixed, self.init = gap, dur, s_fixed, e_fixed, init
        self.start, self.end = start, end
        order = np.argsort(dst, kind="stable")
        self.src, self.dst, self.delay, self.typ = src[order], dst[order], delay[order], typ[order]
        self.in_start = np.searchsorted(self.dst, np.arange(g.n + 1))
        self.is_first = np.zeros(g.n, dtype=bool)
        self.is_first[g.chain_first[:-1][g.chain_first[:-1] < g.n]] = True
        ts_end = np.concatenate([g.ts, g.end]) - g.window_start if g.n else np.zeros(1)
        self.big = 4.0 * float(np.abs(ts_end).max() + np.abs(gap + dur).sum()) + 1.0

    def solve(self, nodes: np.ndarray, max_rounds: int) -> int:
        """Rounds to the fixed point of `nodes` (in place), or -1 if not within max_rounds."""
        g = self.g
        m = len(nodes)
        if not m:
            return 0
        gap, dur = self.gap[nodes], self.dur[nodes]
        s_fixed, e_fixed = self.s_fixed[nodes], self.e_fixed[nodes]
        # Segments: runs of consecutive nodes of one chain; each starts after the node
        # before it on its chain (already solved, or fixed), or the chain's initial state.
        seg_first = np.ones(m, dtype=bool)
        seg_first[1:] = nodes[1:] != nodes[:-1] + 1
        seg_first |= self.is_first[nodes]
        firsts = np.flatnonzero(seg_first)
        chain = g.chain[nodes]
        a = gap + dur
        A = np.cumsum(a)
        base = np.zeros(len(firsts))
        base[1:] = A[firsts[1:] - 1]
        seg_len = np.diff(np.append(firsts, m))
        A -= np.repeat(base, seg_len)
        offset = np.repeat(np.arange(len(firsts), dtype=np.float64) * self.big, seg_len)
        # Edges into these nodes.
        lo, hi = self.in_start[nodes], self.in_start[nodes + 1]
        counts = hi - lo
        idx = np.repeat(lo - np.cumsum(np.concatenate([[0], counts[:-1]])), counts) + np.arange(counts.sum())
        e_src, e_delay, e_typ = self.src[idx], self.delay[idx], self.typ[idx]
        local = np.repeat(np.arange(m), counts)
        from_start = e_typ == START_START
        to_end = e_typ == END_END
        d_s, d_e = local[~to_end], local[to_end]
        start, end = self.start, self.end
        for r in range(1, max_rounds + 1):
            sv = np.where(from_start, start[e_src], end[e_src]) + e_delay
            S = s_fixed.copy()
            E = e_fixed.copy()
            np.maximum.at(S, d_s, sv[~to_end])
            np.maximum.at(E, d_e, sv[to_end])
            first_nodes = nodes[firsts]
            seg_init = np.where(
                self.is_first[first_nodes], self.init[chain[firsts]], end[np.clip(first_nodes - 1, 0, None)]
            )
            b = np.maximum(S + dur, E)
            c = b - A
            c[firsts] = np.maximum(c[firsts], seg_init)
            new_end = A + (np.maximum.accumulate(c + offset) - offset)
            prev = np.empty(m)
            prev[1:] = new_end[:-1]
            prev[firsts] = seg_init
            new_start = np.maximum(prev + gap, S)
            with np.errstate(invalid="ignore"):  # -inf - -inf in a cold start's first rounds
                done = bool(
                    (np.abs(new_end - end[nodes]) <= TOLERANCE_US).all()
                    and (np.abs(new_start - start[nodes]) <= TOLERANCE_US).all()
                )
            start[nodes] = new_start
            end[nodes] = new_end
            if done:
                return r
        return -1
