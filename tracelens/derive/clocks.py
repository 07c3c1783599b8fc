"""The GPU clock, power and temperature samples `tracelens capture` stores in the trace
(NVML counter tracks), per GPU, and what the capture recorded about each GPU (its
maximum clock, power limit).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from tracelens.derive.intervals import covered
from tracelens.model.schema import NVML_TRACK_PREFIX as TRACK_PREFIX
from tracelens.model.trace import TraceModel


@dataclass(frozen=True)
class Series:
    ts: np.ndarray
    values: np.ndarray

    def step_weights(self, busy: np.ndarray, end: float) -> np.ndarray:
        """Busy time inside each sample's hold interval [ts[i], ts[i+1])."""
        edges = np.append(self.ts, max(end, float(self.ts[-1]) + 1e-3))
        return covered(busy, edges)

    def at(self, t: np.ndarray) -> np.ndarray:
        """Sample-and-hold value at times t (the first sample before t; the first sample
        for times before it)."""
        idx = np.clip(np.searchsorted(self.ts, t, side="right") - 1, 0, len(self.ts) - 1)
        return self.values[idx]


def clock_tracks(model: TraceModel, device: int) -> dict[str, Series]:
    """The NVML counter tracks of one GPU, keyed by quantity ("SM clock (MHz)", ...)."""
    c = model.counters
    if c.empty:
        return {}
    prefix = f"{TRACK_PREFIX}{device} "
    sel = c[c["name"].astype(str).str.startswith(prefix)]
    out: dict[str, Series] = {}
    for name, grp in sel.groupby("name", sort=False):
        g = grp.sort_values("ts", kind="stable")
        out[str(name)[len(prefix) :]] = Series(g["ts"].to_numpy(dtype=float), g["value"].to_numpy(dtype=float))
    return out


def nvml_gpu_meta(model: TraceModel, device: int) -> dict[str, Any]:
    meta = model.meta.metadata.get("tracelens")
    if not isinstance(meta, dict):
        return {}
    nvml = meta.get("nvml")
    if not isinstance(nvml, dict):
        return {}
    for g in nvml.get("gpus", []):
        if isinstance(g, dict) and g.get("index") == device:
            return g
    return {}
