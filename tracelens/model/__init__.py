"""Trace model: one loader for every Kineto vintage, typed columnar tables.

The names below are imported when first used (PEP 562): `tracelens capture` reads
`tracelens.model.schema` in the user's own process and in its supervisor, and the loader
behind `load_trace` (numpy, the decoders: 110-120 ms of imports on the dev machine) is
not needed there.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tracelens.model.loader import load_trace
    from tracelens.model.schema import Kind
    from tracelens.model.trace import DeviceInfo, TraceMeta, TraceModel

__all__ = ["DeviceInfo", "Kind", "TraceMeta", "TraceModel", "load_trace"]

_HOME = {
    "load_trace": "tracelens.model.loader",
    "Kind": "tracelens.model.schema",
    "DeviceInfo": "tracelens.model.trace",
    "TraceMeta": "tracelens.model.trace",
    "TraceModel": "tracelens.model.trace",
}


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value
