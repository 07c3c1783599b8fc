"""A CUDA memory snapshot's report (`tracelens report snapshot.pickle`, and a trace's
report's `snapshot` part when a snapshot lies beside the trace): the peak, what held it,
where it was allocated. Plain serializable data; made by tracelens.assemble_snapshot."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tracelens.report.findings import PySource

#: The snapshot report's own schema version (schemas/snapshot-v1.schema.json).
SNAPSHOT_SCHEMA_VERSION = 1
#: What a block at the peak was (tracelens.assemble_snapshot says by which rule).
SnapshotCategoryName = Literal[
    "parameters", "gradients", "optimizer_state", "activations", "kv_cache", "temporary", "cuda_graph_pool",
    "cached_free", "input", "autograd_detail", "unknown",
]  # fmt: skip


@dataclass(frozen=True)
class SnapshotCategory:
    """What one kind of memory held at the peak (the categories add up to reserved)."""

    category: SnapshotCategoryName
    bytes: int
    share: float  # of reserved at the peak
    blocks: int


@dataclass(frozen=True)
class SnapshotSite:
    """Bytes live at the peak that were allocated from one source line."""

    source: PySource | None  # the first frame outside PyTorch (None: no Python frames)
    library: PySource | None  # the innermost frame outside torch/ when that is a library's
    bytes: int
    blocks: int
    category: SnapshotCategoryName  # the one holding most of those bytes


@dataclass(frozen=True)
class SnapshotBlock:
    """One allocation live at the peak, with the frames that made it."""

    bytes: int
    requested: int
    category: SnapshotCategoryName
    stream: int
    allocated_at_us: float | None  # from the start of the recording; None when it predates it
    frames: tuple[PySource, ...]  # innermost first, PyTorch's own frames left out


@dataclass(frozen=True)
class SnapshotOom:
    requested: int
    device_free: int
    at_us: float | None
    frames: tuple[PySource, ...]


@dataclass(frozen=True)
class SnapshotTimeline:
    """Allocated and reserved bytes over the recording: the largest value in each bin."""

    ts: tuple[float, ...]  # µs from the first entry (or entry numbers when the snapshot has no times)
    allocated: tuple[float, ...]
    reserved: tuple[float, ...]
    unit: Literal["us", "entry"]  # entry: the snapshot has no times


@dataclass(frozen=True)
class SnapshotSummary:
    path: str
    file_name: str
    file_bytes: int
    device: int
    entries: int  # allocator events recorded for that device
    recorded: bool  # False: the snapshot has no history, only the state at its time
    history_complete: bool  # False: the ring buffer dropped older entries (max_entries)
    span_us: float
    peak_allocated: int
    peak_reserved: int  # reserved at the moment of the allocated peak
    max_reserved: int
    peak_at_us: float | None
    peak_phase: str  # what ran at the peak: the innermost frame outside PyTorch
    end_allocated: int
    end_reserved: int
    fragmentation_at_peak: int  # reserved - allocated at the peak: cached, not usable for the sizes asked
    segments: int
    private_pools: int
    categories: tuple[SnapshotCategory, ...]
    sites: tuple[SnapshotSite, ...]
    largest: tuple[SnapshotBlock, ...]
    timeline: SnapshotTimeline | None
    ooms: tuple[SnapshotOom, ...]
    settings: dict[str, str]
    advice: tuple[str, ...]
    notes: tuple[str, ...]


@dataclass(frozen=True)
class SnapshotReport:
    """`tracelens report snapshot.pickle`: the memory report alone (a trace's report
    carries the same summary as `Report.snapshot` when the snapshot lies beside it)."""

    schema_version: int
    tool: str
    tool_version: str
    generated_at: str
    snapshot: SnapshotSummary
