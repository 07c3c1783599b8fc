"""The timeline's per-stream busy time (the HTML's stream picker): each busy stream of the
primary device, binned like the ledger's timeline."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from tracelens.derive.intervals import covered, merge_intervals
from tracelens.derive.ledger import TIMELINE_BINS
from tracelens.model.trace import TraceModel

if TYPE_CHECKING:
    from tracelens.derive.ledger import DeviceLedger

#: The timeline's per-stream rows: the busiest streams, the rest folded into one row.
MAX_STREAMS = 8


def stream_busy_bins(model: TraceModel, dev: DeviceLedger) -> list[tuple[int | None, np.ndarray]]:
    """Busy µs per timeline bin of each stream of `dev` with busy time in its window (its
    kernels, copies and memsets merged, so each bin's value is at most the bin's width),
    the busiest first; past MAX_STREAMS the rest are one row (stream None, their union).
    Empty when fewer than two streams were busy."""
    act = model.gpu_activity()
    act = act[act["device"].to_numpy() == dev.device]
    ts = np.clip(act["ts"].to_numpy(dtype=float), dev.window_start, dev.window_end)
    end = np.clip(act["end"].to_numpy(dtype=float), dev.window_start, dev.window_end)
    stream = act["stream"].to_numpy()
    keep = end > ts
    ts, end, stream = ts[keep], end[keep], stream[keep]
    edges = np.linspace(dev.window_start, dev.window_end, TIMELINE_BINS + 1)
    rows: list[tuple[int, float, np.ndarray]] = []
    for s in np.unique(stream):
        sel = stream == s
        iv = merge_intervals(ts[sel], end[sel])
        busy = covered(iv, edges)
        if busy.sum() > 0:
            rows.append((int(s), float(busy.sum()), busy))
    if len(rows) < 2:
        return []
    rows.sort(key=lambda r: (-r[1], r[0]))
    out: list[tuple[int | None, np.ndarray]] = [(s, b) for s, _t, b in rows[:MAX_STREAMS]]
    rest = [s for s, _t, _b in rows[MAX_STREAMS:]]
    if rest:
        sel = np.isin(stream, rest)
        out.append((None, covered(merge_intervals(ts[sel], end[sel]), edges)))
    return out
