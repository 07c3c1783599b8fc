"""Names and colours of the ledger's causes, shared by every renderer (the names are
the domain's: tracelens.domain.CAUSE_LABELS)."""

from __future__ import annotations

from tracelens.domain import CAUSE_LABELS as CAUSE_LABELS
from tracelens.domain import CAUSE_SHORT as CAUSE_SHORT

#: Colours, shared by the bar, the timeline and the legend: greens and blues for busy,
#: warm colours for idle the program causes, greys for the rest.
CAUSE_COLOURS: dict[str, str] = {
    "gpu_busy_compute": "#1f7a45",
    "gpu_busy_memory": "#2e9e5b",
    "gpu_busy_latency": "#7cc495",
    "gpu_busy_unknown": "#a9d8b8",
    "gpu_busy_copy": "#5aa9e6",
    "communication": "#8e6cc9",
    "host_sync": "#d6453d",
    "allocation": "#c2185b",
    "compilation": "#795548",
    "profiler": "#b48ead",
    "harness": "#d8c3e0",
    "startup": "#c8ccd2",
    "launch_overhead": "#f08c2e",
    "host_bound": "#e8c53a",
    "idle_other": "#9aa3ad",
    "unrecorded": "#e4e7eb",
}

#: Colours of a memory snapshot's categories (render/snapshot.py, the _snapshot partials).
SNAPSHOT_COLOURS = {
    "parameters": "#1f6feb",
    "gradients": "#8250df",
    "optimizer_state": "#bf8700",
    "activations": "#2da44e",
    "kv_cache": "#0a7ea4",
    "temporary": "#e16f24",
    "cuda_graph_pool": "#6e7781",
    "cached_free": "#d0d7de",
}
