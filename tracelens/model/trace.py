"""The typed, columnar trace model every analyzer reads.

One `TraceModel` per trace file. Times are float microseconds from the trace's first
event (`origin_us` converts back to absolute epoch time). Row references between
tables are integer positions (-1 = none), so joins are numpy indexing, not merges.

host (one row per host-side X event: ops, annotations, runtime/driver calls, Python
frames), columns:
    kind            int8  `Kind`
    name            category (interned)
    pid, tid        int64 (string tids such as "25738" are parsed; others get codes)
    ts, dur, end    float64 µs
    external_id     int64  links an op to the runtime calls and kernels it caused
    correlation     int64  links a runtime call to its GPU activity
    parent          int64  the enclosing host event on the same thread
    op              int64  innermost CPU_OP at or above this row (self for an op)
    op_root         int64  outermost CPU_OP at or above this row
    range_root      int64  outermost CPU_OP or annotation (not ProfilerStep) at or above
    range_inner     int64  innermost CPU_OP or annotation (not ProfilerStep) at or above
    py_frame        int64  innermost PYTHON frame at or above this row
    step            int64  ProfilerStep number containing this row, -1 if none
    call_stack      object the 2021-2022 `Call stack` string where present, else None
    shapes          object the op's EventArgs, whose `Input Dims`/`Input type`/
                           `Input Strides`/`Concrete Inputs` stay raw JSON until
                           `op_shapes` decodes them

gpu (one row per kernel, memcpy, memset, GPU sync record, GPU annotation), columns:
    kind, name, device, stream, ts, dur, end, correlation, external_id,
    launch          int64  host row of the runtime/driver call that launched it
    step            int64  step of the launch (or -1)
    op, op_root, range_root  int64  the launch's host `op`, `op_root` and `range_root`
                           (the kernel -> op link, made once: -1 where none launched it)
    grid_x/y/z, block_x/y/z, registers, shared_memory, bytes   (-1 where absent)
    sync_kind       category, for GPU_SYNC rows

steps: step, cpu_ts, cpu_end, gpu_ts, gpu_end (NaN where the step launched nothing)
memory: ts, bytes, total_allocated, total_reserved, device_type, device_id, addr
counters: name, series, ts, value (long format: one row per sample per series)
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
import numpy as np

from tracelens.model.schema import CommArgs, Kind
from tracelens.report.findings import PySource

if TYPE_CHECKING:  # only annotations here: the split load's early child runs without pandas
    import pandas as pd


def name_matches(names: pd.Series, predicate: Callable[[str], bool]) -> np.ndarray:
    """Boolean mask of a categorical name column, evaluating `predicate` once per
    distinct name instead of once per row."""
    cats = names.cat.categories
    # The categories as a list: iterating the Index itself reads each item through pandas
    # (~1 µs each; 6 % of large_streams' analysis over the ~50 calls of a report).
    ok = np.fromiter(
        (bool(predicate(c if type(c) is str else str(c))) for c in cats.tolist()), dtype=bool, count=len(cats)
    )
    # One gather: code -1 (a missing name) picks the appended False.
    return np.append(ok, False)[names.cat.codes.to_numpy()]


@dataclass(frozen=True)
class DeviceInfo:
    """One GPU as described by the trace's `deviceProperties` (or inferred)."""

    index: int
    name: str
    vendor: str  # "nvidia", "amd" or "unknown"
    compute_capability: tuple[int, int] | None = None
    num_sms: int | None = None
    total_memory_bytes: int | None = None
    properties: dict[str, Any] = field(default_factory=dict)


def _alike(devices: tuple[DeviceInfo, ...]) -> bool:
    """One device, or several with the same name, SM count and architecture."""
    first = devices[0]
    return all(
        (d.name, d.num_sms, d.compute_capability) == (first.name, first.num_sms, first.compute_capability)
        for d in devices
    )


@dataclass(frozen=True)
class TraceMeta:
    """What the trace says about itself and how it was read."""

    path: str
    file_bytes: int
    json_bytes: int
    n_events: int
    vintage: str
    origin_us: float  # absolute epoch µs of t=0
    base_time_ns: int | None
    vendor: str
    devices: tuple[DeviceInfo, ...]
    active_devices: tuple[int, ...]
    rank: int | None
    world_size: int | None
    versions: dict[str, str]
    metadata: dict[str, Any]
    notes: tuple[str, ...]
    #: Events of categories tracelens does not analyse, by category (`mtia_ccp_events`,
    #: `cuda_profiler_range`, ...): what the trace holds beyond CUDA/ROCm activity.
    other_categories: dict[str, int] = field(default_factory=dict)

    def device(self, index: int) -> DeviceInfo | None:
        for dev in self.devices:
            if dev.index == index:
                return dev
        # Under HIP/CUDA_VISIBLE_DEVICES the kernels' device ids need not be the ids
        # deviceProperties lists (one MI300X VF entry, id 0, for kernels on device 2):
        # one entry, or entries all alike, describe every device of the trace.
        if self.devices and _alike(self.devices):
            return replace(self.devices[0], index=index)
        return None

    @property
    def device_note(self) -> str:
        """How the kernels' device was matched to deviceProperties, when not by its id
        (empty when it was)."""
        listed = {d.index for d in self.devices}
        missing = [i for i in self.active_devices if i not in listed]
        if not missing or not self.devices:
            return ""
        dev = self.device(missing[0])
        if dev is None:
            return (
                f"The kernels run on device {missing[0]}, which the trace's deviceProperties do not list; "
                "its peaks are unknown."
            )
        ids = ", ".join(str(d.index) for d in self.devices[:4])
        return (
            f"The kernels run on device {missing[0]}; the trace's deviceProperties list device {ids} "
            f"({dev.name}), remapped ids as under HIP/CUDA_VISIBLE_DEVICES: those properties are used."
        )

    @property
    def primary_device(self) -> DeviceInfo | None:
        """The busiest GPU that has properties, for headers and peak tables."""
        for idx in self.active_devices:
            dev = self.device(idx)
            if dev is not None:
                return dev
        return self.devices[0] if self.devices else None


@dataclass(frozen=True)
class HostArrays:
    """numpy views of the host table for per-row walks (pandas indexing costs ~10 µs a
    call; these cost ~0.1 µs)."""

    kind: np.ndarray
    parent: np.ndarray
    op: np.ndarray
    py_frame: np.ndarray
    name_codes: np.ndarray
    name_table: list[str]
    call_stack: np.ndarray
    shapes: np.ndarray
    #: `parent` for Python-level walks: a chain walk indexes it ~10 times per kernel, and
    #: this indexing with Python ints is several times faster than numpy scalar indexing.
    #: An int64 array.array, not a list: 8 bytes a row, not a pointer and an int object
    #: (large_compile: 2.6 MB, not 12.7), and no slower to walk.
    parent_list: Sequence[int]

    def name(self, row: int) -> str:
        return self.name_table[self.name_codes.item(row)]


@dataclass
class SourceCaches:
    """What tracelens.model.sources works out per trace (user frames, parsed source files,
    the calling line of each frame), one typed slot per kind of answer. The trace does not
    change after loading, so nothing here goes stale; a model made from another (with
    `dataclasses.replace`) starts with empty caches."""

    user_source_row: dict[int, PySource | None] = field(default_factory=dict)
    user_frame_src: dict[int, PySource | None] = field(default_factory=dict)
    user_frames: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray] | None] = field(default_factory=dict)
    user_frame: dict[int, tuple[int, int]] = field(default_factory=dict)
    frame_of_name: dict[int, PySource | None] = field(default_factory=dict)
    machinery_file: dict[str, bool] = field(default_factory=dict)
    has_call_stacks: dict[str, bool] = field(default_factory=dict)
    user_call_stack: dict[str, PySource | None] = field(default_factory=dict)
    nearest_call_stack: dict[int, str | None] = field(default_factory=dict)
    call_line: dict[tuple[str, tuple[str, str], int, int, bool], PySource] = field(default_factory=dict)
    #: Every host row's start and the first non-Python event's (callsite._running_at_start).
    frames_at_start: tuple[np.ndarray, float] | None = None
    callee_key: dict[int, tuple[str, str] | None] = field(default_factory=dict)
    frame_slots: np.ndarray | None = None  # callsite.frame_slots
    callee_ordinals: dict[str, Any] = field(default_factory=dict)  # callsite._Ordinals
    source_dirs: dict[str, list[Path]] = field(default_factory=dict)
    parsed_sources: dict[str, Any] = field(default_factory=dict)  # sources._Parsed or None


@dataclass(frozen=True)
class TraceModel:
    meta: TraceMeta
    host: pd.DataFrame
    gpu: pd.DataFrame
    steps: pd.DataFrame
    memory: pd.DataFrame
    counters: pd.DataFrame
    thread_names: dict[tuple[int, int], str]
    #: The collectives' own records (record_param_comms ops and NCCL kernels that name a
    #: collective: message sizes, dtype, process group), in file time order.
    comm_args: list[CommArgs] = field(default_factory=list)
    #: What the steps are: torch.profiler's ProfilerStep#N, or the user's own marks that
    #: derive/steps.py found in a trace without them (their label, for the reports).
    step_marks: str = "ProfilerStep"
    #: What one step is called in the reports ("step"; "call" for one compiled call).
    step_unit: str = "step"
    #: Per-kernel hardware counter sets the trace holds (model/counters.py), as read.
    kernel_counters: tuple[Any, ...] = ()

    # -- convenience views -------------------------------------------------------------
    @property
    def span_us(self) -> float:
        """Wall time covered by host and GPU events."""
        ends = [df["end"].max() for df in (self.host, self.gpu) if len(df)]
        return float(max(ends)) if ends else 0.0

    def kernels(self) -> pd.DataFrame:
        return self.gpu[self.gpu["kind"] == Kind.KERNEL]

    def gpu_activity(self) -> pd.DataFrame:
        """Kernels, copies and memsets: what makes a GPU busy. A shallow copy of the one
        selection (copy-on-write: a caller's change to it stays its own), not the selection
        made again: a report asks ~15 times (2-3 ms each on large_streams)."""
        return self._gpu_activity.copy(deep=False)

    @cached_property
    def _gpu_activity(self) -> pd.DataFrame:
        k = self.gpu["kind"]
        return self.gpu[(k == Kind.KERNEL) | (k == Kind.MEMCPY) | (k == Kind.MEMSET)]

    @cached_property
    def arrays(self) -> HostArrays:
        names = self.host["name"]
        return HostArrays(
            kind=self.host["kind"].to_numpy(),
            parent=self.host["parent"].to_numpy(),
            op=self.host["op"].to_numpy(),
            py_frame=self.host["py_frame"].to_numpy(),
            name_codes=names.cat.codes.to_numpy(),
            name_table=[str(c) for c in names.cat.categories],
            call_stack=self.host["call_stack"].to_numpy(),
            shapes=self.host["shapes"].to_numpy(),
            parent_list=_int64_array(self.host["parent"].to_numpy()),
        )

    @cached_property
    def source_caches(self) -> SourceCaches:
        """What tracelens.model.sources works out for this trace, kept with it."""
        return SourceCaches()

    @cached_property
    def _decoded_shapes(self) -> dict[Any, dict[str, Any]]:
        return {}

    def op_shapes(self, row: int) -> dict[str, Any]:
        """Decoded shape args of one host row (`Input Dims`, `Input type`, ...).

        Decoded once per distinct set of shape args (the loader shares one record among
        the ops that have the same), so the dict returned is shared: read it, never change it.
        """
        args = self.arrays.shapes[row]
        if args is None:
            return {}
        try:
            found = self._decoded_shapes.get(args)
        except TypeError:  # an unhashable args record (a model built by hand)
            return _decode_shapes(args)
        if found is None:
            found = self._decoded_shapes[args] = _decode_shapes(args)
        return found

    def host_chain(self, row: int) -> list[int]:
        """Host rows from `row` up to its outermost ancestor, innermost first."""
        parent = self.arrays.parent_list
        chain: list[int] = []
        row = int(row)
        while row >= 0 and len(chain) < 512:
            chain.append(row)
            row = parent[row]
        return chain


def _int64_array(values: np.ndarray) -> array[int]:
    out = array("q")
    out.frombytes(np.ascontiguousarray(values, dtype=np.int64).tobytes())
    return out


class SharedShapes(dict[str, Any]):
    """Decoded shape args shared by the op calls that have the same ones, with the cost
    worked out from them alone (derive.op_costs.op_cost's, per (op name, type hint))."""

    __slots__ = ("op_costs",)

    def __init__(self) -> None:
        super().__init__()
        self.op_costs: dict[tuple[str, str | None], Any] = {}  # derive.op_costs.OpCost or None


def _decode_shapes(args: Any) -> dict[str, Any]:
    out = SharedShapes()
    for key, attr in (
        ("Input Dims", "input_dims"),
        ("Input Dims", "input_dims_2021"),
        ("Input type", "input_type"),
        ("Input Strides", "input_strides"),
        ("Concrete Inputs", "concrete_inputs"),
    ):
        raw = getattr(args, attr)
        if len(raw) and key not in out:
            try:
                out[key] = msgspec.json.decode(raw)
            except msgspec.ValidationError:  # a number out of float range (1e400): no shapes
                continue
    return out
