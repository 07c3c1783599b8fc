"""Collecting decoded events into columns: one pass over each batch keeps what the model
needs (host events, GPU activity, metadata), then `finish` makes the TraceModel.
"""

from __future__ import annotations

import dataclasses
import os
from itertools import compress
from operator import attrgetter, not_
from typing import TYPE_CHECKING, Any

import msgspec
import numpy as np

from tracelens.domain import MAX_TRACE_NAME_CHARS
from tracelens.errors import TraceInputError
from tracelens.model.loader.columns import (
    _GPU_IDENTITY,
    _GPU_PIECES,
    _HOST_IDENTITY,
    _HOST_PIECES,
    _INT64_MAX,
    _MAX_TIME_US,
    _capped_names,
    _categorical,
    _drop_repeats,
    _external_id,
    _gpu_frame,
    _host_frame,
    _int64_or_none,
    _int_or_code,
    _ints_or_raw,
    _joined,
    _opt_int,
    _to_int,
    _triples,
)
from tracelens.model.loader.decode import _counter_batch_decoder, _counter_rows, _decode_batch
from tracelens.model.loader.meta import (
    _active_devices,
    _base_time_ns,
    _devices,
    _opt_meta_int,
    _small_metadata,
    _vendor,
    _versions,
    _vintage,
)
from tracelens.model.loader.nest import (
    _assign_steps,
    _gpu_step_windows,
    _is_step_name,
    _link_launches,
    _nest,
    _steps,
    _unlinked_note,
    _with_columns,
)
from tracelens.model.loader.read import MAX_JSON_BYTES, _open_trace, gzip_limits
from tracelens.model.loader.stream import EventStream, Inflow, Share
from tracelens.model.schema import (
    CATEGORY_KINDS,
    GPU_KINDS,
    HOST_KINDS,
    CommArgs,
    EventArgs,
    Kind,
    OpShapes,
    RawEvent,
)
from tracelens.model.trace import TraceMeta, TraceModel

if TYPE_CHECKING:
    # pandas is imported where a function builds frames, not here: the split load's child
    # starts before the report's imports (`start_split_early`) and reads its share without
    # pandas (0.1-0.15 s of import it would otherwise pay before decoding).
    pass


@dataclasses.dataclass
class _Read:
    """What one pass over a file's event stream collected (all of it, or one share)."""

    collector: _Collector
    counters: list[list[tuple[str, str, float, float]]]  # one list per batch taken
    counters_ok: bool
    cuts: int  # batches cut before the array's last one (the stream's count)
    last: bool  # whether the last batch was taken (only the whole read and share 0)
    share: Share | None  # which batches this read decoded (None: all)
    top_bytes: bytes
    file_bytes: int
    json_bytes: int


def _read_stream(path: str | os.PathLike[str], name: str, notes: list[str], share: Share | None) -> _Read:
    fh, _ = _open_trace(path)
    counters: list[list[tuple[str, str, float, float]]] = []
    counters_ok = True
    with fh:
        inflow = Inflow(
            fh,
            name,
            notes,
            limits=gzip_limits,
            max_bytes=MAX_JSON_BYTES,
        )
        stream = EventStream(iter(inflow), share)
        collector = _Collector(name, notes)
        for events, raw in stream.batches(_decode_batch):
            rows: list[tuple[str, str, float, float]] = []
            if collector.add(events) and counters_ok:
                try:
                    rows = _counter_rows(_counter_batch_decoder.decode(raw))
                except (msgspec.MsgspecError, ValueError, TypeError, RecursionError):
                    counters_ok = False
            counters.append(rows)
            del events, raw
    return _Read(
        collector, counters, counters_ok, stream.cuts, stream.last, share, stream.top_bytes, inflow.file_bytes,
        stream.json_bytes,
    )  # fmt: skip


#: Python frames (with_stack's python_function events) kept at most. They are the bulk of
#: stack-heavy traces (53% of the 967k host rows of a transformers generate loop,
#: workloads/capture_large.py) and only name sources, so past this they are dropped, with
#: a note, rather than the load running out of memory. A host row costs 131 bytes of
#: columns: 10M frames are 1.3 GB, about what a trace near MAX_JSON_BYTES holds.
MAX_PYTHON_FRAMES = 10_000_000


_TS, _DUR, _CAT, _NAME = attrgetter("ts"), attrgetter("dur"), attrgetter("cat"), attrgetter("name")


_PID, _TID, _ARGS = attrgetter("pid"), attrgetter("tid"), attrgetter("args")


_PH = attrgetter("ph")


_IS_X = "X".__eq__


_EXT_ID, _EXT_ID_2021 = attrgetter("external_id"), attrgetter("external_id_2021")


_CORRELATION, _CALL_STACK = attrgetter("correlation"), attrgetter("call_stack")
_COLLECTIVE = attrgetter("collective_name")


#: The five shape args of an op, in the order of `_op_shapes`'s key.
_SHAPE_FIELDS = tuple(
    attrgetter(f) for f in ("input_dims", "input_dims_2021", "input_type", "input_strides", "concrete_inputs")
)


_NUL_JOIN = b"\x00".join


_HOST_KIND_CODES = [int(k) for k in HOST_KINDS]


_GPU_KIND_CODES = [int(k) for k in GPU_KINDS]


_OP = int(Kind.CPU_OP)

#: Annotations that keep their shape args like ops: a backend's collective annotation
#: (`nccl:all_to_all`) is the only record of its message size in some 2022 traces.
_SHAPED_ANNOTATIONS = ("nccl:", "gloo:")
_ANNOTATION = int(Kind.USER_ANNOTATION)


def _shaped_rows(evs: list[RawEvent], kinds: np.ndarray) -> np.ndarray:
    """Which host rows of a piece keep their shape args: ops, and collective annotations."""
    shaped = kinds == _OP
    for i in np.flatnonzero(kinds == _ANNOTATION).tolist():
        if evs[i].name.startswith(_SHAPED_ANNOTATIONS):
            shaped[i] = True
    return shaped


def _comm_order(c: CommArgs) -> tuple[float, bool, int, int]:
    return (c.ts, c.on_gpu, c.external_id, c.correlation)


_NO_SHAPES = OpShapes()


#: The shape key of an op with none of the five shape args.
_EMPTY_SHAPES_KEY = b"\x00" * 4


class _Collector:
    """Turns batches of decoded events into column pieces, then one TraceModel.

    What is kept of an event is its columns (numbers in numpy arrays, names interned, an
    op's shape args as one shared compact record per distinct set), so a batch's JSON
    and decoded objects can be freed once `add` returns. Everything that depends on more
    than one event (the time origin, string-id codes, the notes' counts) is done in
    `finish`, over all batches, so the model does not depend on where batches end.
    """

    def __init__(self, name: str, notes: list[str]) -> None:
        self.name = name
        self.notes = notes
        self.n_events = 0
        self.has_counters = False
        self.kind_cache: dict[str, Kind] = {}
        #: Events of categories tracelens does not analyse (Kind.OTHER), counted by category:
        #: an MTIA trace's `mtia_ccp_events`, a range-profiler trace's `cuda_profiler_range`.
        self.other_categories: dict[str, int] = {}
        self.dropped = 0
        self.py_frames = 0
        self.py_dropped = 0
        self.any_op = False
        self.long_names = [0, 0]  # host, gpu
        self.name_tables: tuple[dict[str, int], dict[str, int]] = ({}, {})
        self.host_step: list[bool] = []  # per host name code: a ProfilerStep#N
        self.shapes: dict[bytes, OpShapes] = {}
        self.host: dict[str, list[Any]] = {k: [] for k in _HOST_PIECES}
        self.gpu: dict[str, list[Any]] = {k: [] for k in _GPU_PIECES}
        self.memory: list[tuple[float | int | None, ...]] = []
        self.threads: list[tuple[int | str, int | str, str]] = []
        # Collectives' records (rare: a few per step), matched to their rows by id later.
        self.comm: list[CommArgs] = []
        # (len(memory), len(threads)) after each batch: where a batch's rows end, so a
        # split read can put two collectors' batches in file order.
        self.marks: list[tuple[int, int]] = []

    def add(self, events: list[RawEvent]) -> bool:
        """Take one batch; returns whether it held counter events ("ph": "C")."""
        self.n_events += len(events)
        counters = False
        # Complete events ("X") are picked out at C speed (compress over a map of
        # comparisons); only the rest (flows, instants, metadata) are looked at in Python.
        is_x = list(map(_IS_X, map(_PH, events)))
        xs: list[RawEvent] = list(compress(events, is_x))
        for e in compress(events, map(not_, is_x)):
            ph = e.ph
            if ph == "i":
                if e.name == "[memory]" and (a := e.args) is not None:
                    self.memory.append(
                        (
                            e.ts,
                            *map(
                                _int64_or_none,
                                (a.mem_bytes, a.total_allocated, a.total_reserved, a.device_type, a.device_id, a.addr),
                            ),
                        )
                    )
            elif ph == "M":
                if e.name == "thread_name" and e.args is not None and e.args.name:
                    self.threads.append((e.pid, e.tid, e.args.name))
            elif ph == "C":
                counters = True
        # Events without a finite time cannot be placed; one of them must not poison the origin.
        n = len(xs)
        ts = np.fromiter(map(_TS, xs), dtype=np.float64, count=n)
        dur = np.fromiter(map(_DUR, xs), dtype=np.float64, count=n)
        with np.errstate(invalid="ignore"):
            ok = np.isfinite(ts) & np.isfinite(dur) & (np.abs(ts) < _MAX_TIME_US) & (np.abs(dur) < _MAX_TIME_US)
        if not ok.all():
            keep = np.flatnonzero(ok)
            self.dropped += n - len(keep)
            xs = [xs[i] for i in keep.tolist()]
            ts, dur, n = ts[keep], dur[keep], len(keep)
        cats = list(map(_CAT, xs))
        cache = self.kind_cache
        for cat in set(cats).difference(cache):
            cache[cat] = CATEGORY_KINDS.get(cat.lower(), Kind.OTHER)
        kinds = np.fromiter(map(cache.__getitem__, cats), dtype=np.int8, count=n)
        for i in np.flatnonzero(kinds == Kind.OTHER).tolist():
            self.other_categories[cats[i]] = self.other_categories.get(cats[i], 0) + 1
        self.any_op = self.any_op or bool((kinds == Kind.CPU_OP).any())
        is_host = np.isin(kinds, _HOST_KIND_CODES)
        is_gpu = np.isin(kinds, _GPU_KIND_CODES)
        host_ev = list(compress(xs, is_host.tolist()))
        gpu_ev = list(compress(xs, is_gpu.tolist()))
        host_kinds = kinds[is_host]
        # 2021 traces file ProfilerStep#N under `Operator`: it is an annotation, not an op.
        host_codes = self._codes(list(map(_NAME, host_ev)), 0)
        is_step = np.asarray(self.host_step, dtype=bool)[host_codes] if len(host_codes) else np.zeros(0, bool)
        host_kinds = np.where(is_step, np.int8(Kind.USER_ANNOTATION), host_kinds).astype(np.int8)
        host_ts, host_dur = ts[is_host], dur[is_host]
        is_py = host_kinds == Kind.PYTHON
        n_py = int(is_py.sum())
        room = max(MAX_PYTHON_FRAMES - self.py_frames, 0)
        if n_py > room:
            # Past the cap, Python frames are dropped (and counted for a note) rather than
            # the load running out of memory: they only name sources, ops and kernels stay.
            drop = np.flatnonzero(is_py)[room:]
            keep = np.ones(len(host_ev), dtype=bool)
            keep[drop] = False
            self.py_dropped += len(drop)
            kept = np.flatnonzero(keep).tolist()
            host_ev = [host_ev[i] for i in kept]
            host_codes = host_codes[keep]
            host_kinds, host_ts, host_dur = host_kinds[keep], host_ts[keep], host_dur[keep]
            n_py = room
        self.py_frames += n_py
        self._add_host(host_ev, host_kinds, host_ts, host_dur, host_codes)
        self._add_gpu(gpu_ev, kinds[is_gpu], ts[is_gpu], dur[is_gpu])
        self.has_counters = self.has_counters or counters
        self.marks.append((len(self.memory), len(self.threads)))
        return counters

    def _codes(self, names: list[str], which: int) -> np.ndarray:
        """Names as codes into this table's names (host 0, GPU 1), in first-seen order;
        `finish` sorts them into categories. Per-name facts are worked out per new name."""
        names, cut = _capped_names(names)
        self.long_names[which] += cut
        table = self.name_tables[which]
        for name in set(names).difference(table):
            table[name] = len(table)
            if which == 0:
                self.host_step.append(_is_step_name(name))
        return np.fromiter(map(table.__getitem__, names), dtype=np.int64, count=len(names))

    def _op_shapes(self, a: EventArgs) -> OpShapes:
        # One bytes key per op, the five raw fields joined by NUL: a JSON value cannot hold
        # a raw NUL (msgspec rejects one), so the key is unambiguous; five separate copies
        # are made only for a set not seen before.
        key = b"\x00".join((a.input_dims, a.input_dims_2021, a.input_type, a.input_strides, a.concrete_inputs))
        found = self.shapes.get(key)
        if found is None:
            fields = (
                bytes(a.input_dims),
                bytes(a.input_dims_2021),
                bytes(a.input_type),
                bytes(a.input_strides),
                bytes(a.concrete_inputs),
            )
            found = self.shapes[key] = OpShapes(*fields) if any(fields) else _NO_SHAPES
        return found

    def _add_host(
        self, evs: list[RawEvent], kinds: np.ndarray, ts: np.ndarray, dur: np.ndarray, codes: np.ndarray
    ) -> None:
        args = list(map(_ARGS, evs))
        h = self.host
        h["kind"].append(kinds)
        h["name"].append(codes)
        h["pid"].append(_ints_or_raw(list(map(_PID, evs))))
        h["tid"].append(_ints_or_raw(list(map(_TID, evs))))
        h["ts"].append(ts)
        h["dur"].append(np.where(np.isfinite(dur) & (dur > 0), dur, 0.0))
        self._keep_comm(evs, args, on_gpu=False)
        shaped = _shaped_rows(evs, kinds)
        if None in args:  # events without args (rare): row by row
            h["external_id"].append(_opt_int([_external_id(a) for a in args]))
            h["correlation"].append(_opt_int([a.correlation if a is not None else None for a in args]))
            h["call_stack"].append([(a.call_stack or None) if a is not None else None for a in args])
            shape = self._op_shapes
            h["shapes"].append(
                [shape(a) if k and a is not None else None for a, k in zip(args, shaped.tolist(), strict=True)]
            )
            return
        # Every event has args: each field is read with a C-level map over them.
        ext = list(map(_EXT_ID, args))
        if None in ext:
            old = list(map(_EXT_ID_2021, args))
            if old.count(None) != len(old):  # the 2021 spelling somewhere
                ext = [x if x is not None else y for x, y in zip(ext, old, strict=True)]
        h["external_id"].append(_opt_int(ext))
        h["correlation"].append(_opt_int(list(map(_CORRELATION, args))))
        stacks = list(map(_CALL_STACK, args))
        if "" in stacks:
            stacks = [s or None for s in stacks]
        h["call_stack"].append(stacks)
        # Ops keep their shape args (raw JSON, decoded when an analyzer asks), one shared
        # record per distinct set: a loop's ops repeat the same few hundred shapes.
        h["shapes"].append(self._shapes_of(args, shaped))

    def _keep_comm(self, evs: list[RawEvent], args: list[EventArgs | None], on_gpu: bool) -> None:
        """Keep the collective records of a piece (events whose args name a collective)."""
        names = list(map(_COLLECTIVE, args)) if None not in args else [a and a.collective_name for a in args]
        if names.count(None) == len(names):
            return
        for i, coll in enumerate(names):
            if coll is None:
                continue
            a, e = args[i], evs[i]
            assert a is not None
            ext = _external_id(a)
            self.comm.append(
                CommArgs(
                    on_gpu=on_gpu, name=e.name, external_id=ext if ext is not None else -1,
                    correlation=a.correlation if a.correlation is not None else -1, ts=e.ts, collective=str(coll),
                    in_nelems=a.in_msg_nelems, out_nelems=a.out_msg_nelems, group_size=a.group_size, dtype=a.dtype,
                    pg_name=None if a.pg_name is None else str(a.pg_name), pg_desc=a.pg_desc, pg_ranks=a.pg_ranks,
                    seq=_to_int(a.seq),
                )
            )  # fmt: skip

    def _shapes_of(self, args: list[EventArgs], is_op: np.ndarray) -> list[OpShapes | None]:
        """The shapes column of a piece whose events all have args: None but for ops."""
        ops = list(compress(args, is_op.tolist()))
        keys = list(map(_NUL_JOIN, zip(*(map(get, ops) for get in _SHAPE_FIELDS), strict=True)))
        found = list(map(self.shapes.get, keys))
        if None in found:
            for i, rec in enumerate(found):
                if rec is None:
                    found[i] = self._op_shapes(ops[i])
        out: list[OpShapes | None] = [None] * len(args)
        for i, rec in zip(np.flatnonzero(is_op).tolist(), found, strict=True):
            out[i] = rec
        return out

    def _add_gpu(self, evs: list[RawEvent], kinds: np.ndarray, ts: np.ndarray, dur: np.ndarray) -> None:
        n = len(evs)
        args = list(map(_ARGS, evs))
        self._keep_comm(evs, args, on_gpu=True)
        g = self.gpu
        g["kind"].append(kinds)
        g["name"].append(self._codes(list(map(_NAME, evs)), 1))
        g["pid"].append(_ints_or_raw(list(map(_PID, evs))))
        g["tid"].append(_ints_or_raw(list(map(_TID, evs))))
        g["ts"].append(ts)
        g["dur"].append(np.where(np.isfinite(dur) & (dur > 0), dur, 0.0))
        # Ids beyond int64 (a device of 2**70) are no ids: fall back to pid/tid (in finish).
        g["device"].append(
            np.fromiter(
                (
                    a.device if a is not None and a.device is not None and 0 <= a.device < _INT64_MAX else -1
                    for a in args
                ),
                dtype=np.int64,
                count=n,
            )
        )
        g["stream"].append(
            np.fromiter(
                (
                    a.stream if a is not None and isinstance(a.stream, int) and 0 <= a.stream < _INT64_MAX else -1
                    for a in args
                ),
                dtype=np.int64,
                count=n,
            )
        )
        g["grid"].append(_triples([a.grid if a is not None else None for a in args]))
        g["block"].append(_triples([a.block if a is not None else None for a in args]))
        g["correlation"].append(_opt_int([a.correlation if a is not None else None for a in args]))
        g["external_id"].append(_opt_int([_external_id(a) for a in args]))
        g["registers"].append(_opt_int([a.registers_per_thread if a is not None else None for a in args]))
        g["shared_memory"].append(_opt_int([a.shared_memory if a is not None else None for a in args]))
        g["bytes"].append(_opt_int([_to_int(a.bytes) if a is not None else None for a in args]))
        g["sync_kind"].append([a.cuda_sync_kind if a is not None else None for a in args])

    def _note_long_names(self, which: int) -> None:
        cut = self.long_names[which]
        if cut:
            self.notes.append(f"{cut} names longer than {MAX_TRACE_NAME_CHARS:,} characters were shortened")

    def finish(self, top: dict[str, msgspec.Raw], *, file_bytes: int, json_bytes: int) -> TraceModel:
        import pandas as pd

        name, notes = self.name, self.notes
        if self.dropped:
            notes.append(f"{self.dropped} events without a finite ts/dur were ignored")
        if self.py_dropped:
            notes.append(
                f"{self.py_dropped:,} Python frames (with_stack) past the first {MAX_PYTHON_FRAMES:,} were dropped to "
                "bound memory: ops and kernels after them have no Python source"
            )
        # Column by column, each one's pieces freed once joined (peak memory).
        h = {k: _joined(self.host.pop(k)) for k in list(self.host)}
        g = {k: _joined(self.gpu.pop(k)) for k in list(self.gpu)}
        if not len(g["kind"]) and not self.any_op:
            raise TraceInputError(
                f"{name}: no PyTorch CPU ops, runtime calls or GPU kernels found: not a torch.profiler (Kineto) trace"
            )
        all_ts = np.concatenate([h["ts"], g["ts"]])
        origin = float(all_ts.min()) if len(all_ts) else 0.0
        del all_ts
        # Host first, then GPU, as the notes have always come.
        self._note_long_names(0)
        host = _host_frame(h, _categorical(h["name"], self.name_tables[0]), origin)
        h.clear()  # the frame holds its own copies
        self._note_long_names(1)
        gpu = _gpu_frame(g, _categorical(g["name"], self.name_tables[1]), origin)
        g.clear()
        host, host_repeats = _drop_repeats(host, _HOST_IDENTITY)
        gpu, gpu_repeats = _drop_repeats(gpu, _GPU_IDENTITY)
        if host_repeats or gpu_repeats:
            notes.append(f"{host_repeats + gpu_repeats} exact repeats of events were ignored (each event counted once)")
        host = _with_columns(host, _nest(host))

        steps = _steps(host, notes)
        host = _with_columns(host, {"step": _assign_steps(host["ts"].to_numpy(), steps)})
        gpu = _with_columns(gpu, _link_launches(host, gpu))
        unlinked = _unlinked_note(gpu)
        if unlinked:
            notes.append(unlinked)
        steps = _gpu_step_windows(steps, gpu)
        cols = ["ts", "bytes", "total_allocated", "total_reserved", "device_type", "device_id", "addr"]
        memory = pd.DataFrame([(r[0] - origin, *r[1:]) for r in self.memory], columns=cols)  # type: ignore[operator]
        for c in cols[1:]:
            memory[c] = pd.to_numeric(memory[c], errors="coerce").astype("Int64")
        counters = pd.DataFrame({"name": [], "series": [], "ts": [], "value": []})

        meta_dict = _small_metadata(top)
        vendor = _vendor(host, gpu)
        devices = _devices(top, vendor)
        active = _active_devices(gpu)
        if not devices and active:
            # Only where GPU work ran: a CPU-only trace has no GPU to name (issue 27).
            notes.append("no deviceProperties in the trace: GPU model and SM count unknown")
        dist = meta_dict.get("distributedInfo") if isinstance(meta_dict.get("distributedInfo"), dict) else {}
        assert isinstance(dist, dict)
        base_ns = _base_time_ns(top)
        origin_abs = origin + (base_ns / 1000.0 if base_ns else 0.0)
        meta = TraceMeta(
            path=name,
            file_bytes=file_bytes,
            json_bytes=json_bytes,
            n_events=self.n_events,
            vintage=_vintage(self.kind_cache, base_ns),
            origin_us=origin_abs,
            base_time_ns=base_ns,
            vendor=vendor,
            devices=devices,
            active_devices=active,
            rank=_opt_meta_int(dist.get("rank")),
            world_size=_opt_meta_int(dist.get("world_size")),
            versions=_versions(meta_dict),
            metadata=meta_dict,
            notes=tuple(notes),
            other_categories=dict(self.other_categories),
        )
        threads: dict[tuple[int, int], str] = {}
        for pid, tid, tname in self.threads:
            threads[(int(_int_or_code([pid])[0]), int(_int_or_code([tid])[0]))] = tname
        return TraceModel(
            meta=meta, host=host, gpu=gpu, steps=steps, memory=memory, counters=counters, thread_names=threads,
            comm_args=sorted(self.comm, key=_comm_order),
        )  # fmt: skip
