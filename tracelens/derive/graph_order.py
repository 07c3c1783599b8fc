"""An order of the dependency graph's nodes that respects every dependency (Kahn's
algorithm over the chain predecessors and the edges), for derive/graph.py's
DependencyGraph.order and derive/replay.py's ordered pass."""

from __future__ import annotations

import numpy as np


def topological_order(n: int, chain_first: np.ndarray, src: np.ndarray, dst: np.ndarray) -> list[int]:
    """Kahn's algorithm over the node-level dependencies (chain predecessor, edges). A
    node left out is on a cycle (timestamps that contradict the dependencies)."""
    indeg = np.bincount(dst, minlength=n).astype(np.int64)
    first = np.zeros(n, dtype=bool)
    first[chain_first[:-1][chain_first[:-1] < n]] = True
    indeg += ~first  # the chain predecessor
    order_e = np.argsort(src, kind="stable")
    out_start = np.searchsorted(src[order_e], np.arange(n + 1))
    out_dst = dst[order_e].tolist()
    starts = out_start.tolist()
    deg = indeg.tolist()
    is_last = np.ones(n, dtype=bool)
    is_last[chain_first[1:] - 1] = True
    nxt = np.arange(1, n + 1)
    nxt[chain_first[1:][chain_first[1:] <= n] - 1] = -1
    nxt_l = nxt.tolist()
    ready = [int(v) for v in np.flatnonzero(indeg == 0).tolist()]
    order: list[int] = []
    push, pop = ready.append, ready.pop
    while ready:
        v = pop()
        order.append(v)
        for k in range(starts[v], starts[v + 1]):
            w = out_dst[k]
            deg[w] -= 1
            if deg[w] == 0:
                push(w)
        w = nxt_l[v]
        if w >= 0:
            deg[w] -= 1
            if deg[w] == 0:
                push(w)
    return order
