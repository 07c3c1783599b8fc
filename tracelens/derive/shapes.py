"""Shape sites: the op sites whose input shapes change inside the window (a shape that
varies per step defeats compiled graphs, CUDA graphs and the caching allocator), each
with its calls, distinct shapes, the host time its new shapes cost and the allocator
calls beside them; and the CUDA-graph launches of the window.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import msgspec
import numpy as np

from tracelens.derive.intervals import overlap
from tracelens.derive.ledger import DeviceLedger
from tracelens.derive.window import Window
from tracelens.domain import ALLOC_APIS, COMPILE_BOOKKEEPING, GRAPH_LAUNCH_APIS
from tracelens.model.schema import Kind
from tracelens.model.sources import PySource, user_sources
from tracelens.model.trace import TraceModel, name_matches

if TYPE_CHECKING:  # the context is made of this module: imported for its type only
    pass

#: Outermost ops looked at for shapes (a record_shapes trace of a big model has
#: hundreds of thousands; the window's first ones tell the story).
MAX_OP_ROWS = 200_000


#: A first call with a new shape that costs this much more host time than a repeat of
#: the op is planning for the shape (cuDNN's plan build, cuBLAS's heuristics), not
#: dispatch jitter: one eager op's dispatch is 5-30 µs.
NEW_SHAPE_MIN_EXCESS_US = 500.0


#: An op site "changes shape" when it shows at least this many distinct input shapes
#: inside the window.
MIN_DISTINCT_SHAPES = 2


@dataclass
class ShapeSite:
    """One op site whose input shapes change inside the window."""

    op: str
    source: PySource | None
    shapes: list[bytes] = field(default_factory=list)  # raw Input Dims per call in the window
    steps: set[int] = field(default_factory=set)
    calls: int = 0
    new_calls: int = 0  # calls with a shape the trace had not shown before
    new_steps: set[int] = field(default_factory=set)  # the steps those calls are in
    excess_us: float = 0.0  # host time of new-shape calls beyond a repeat's
    idle_us: float = 0.0  # GPU idle (host-bound) while the host was in those calls
    alloc_calls: int = 0
    #: The window's calls (model.host rows, as `shapes`), and the new-shape calls' excess
    #: host time as (row, µs): what the replay's static-shapes transform removes.
    rows: list[int] = field(default_factory=list)
    excess: list[tuple[int, float]] = field(default_factory=list)

    @property
    def distinct(self) -> int:
        return len(set(self.shapes))


def _step_of(window: Window, ts: np.ndarray) -> np.ndarray:
    spans = sorted(window.steps, key=lambda s: s.start_us)
    if not spans:
        return np.zeros(len(ts), dtype=np.int64)
    starts = np.array([s.start_us for s in spans])
    k = np.clip(np.searchsorted(starts, ts, side="right") - 1, 0, None)
    return np.array([s.index for s in spans], dtype=np.int64)[k]


def shape_sites(model: TraceModel, dev: DeviceLedger | None, window: Window) -> list[ShapeSite]:
    """Op sites whose input shapes change inside `dev`'s window, most costly first."""
    if dev is None:
        return []
    host = model.host
    kind = host["kind"].to_numpy()
    rows_all = np.arange(len(host))
    root = host["op_root"].to_numpy()
    is_op = (kind == int(Kind.CPU_OP)) & (root == rows_all)
    is_op &= ~name_matches(host["name"], lambda n: n.startswith(COMPILE_BOOKKEEPING))
    rows = np.flatnonzero(is_op)[:MAX_OP_ROWS]
    if not len(rows):
        return []
    shapes_col = host["shapes"].to_numpy()
    ts = host["ts"].to_numpy()
    dur = host["dur"].to_numpy()
    names = model.arrays
    w0, w1 = dev.window_start, dev.window_end
    # Every outermost op in time order: a shape is new for an op name the first time the
    # trace shows it (warm-up included, so the window's repeats are repeats).
    order = rows[np.argsort(ts[rows], kind="stable")]
    calls = _shape_calls(shapes_col[order], names.name_codes[order])
    if calls is None:
        return []
    keep, dims_code, dims_list, new_all = calls
    order, codes = order[keep], names.name_codes[order][keep].astype(np.int64)
    t_all = ts[order]
    in_window = (w0 <= t_all) & (t_all < w1)
    if not bool(in_window.any()):
        return []
    # Names with MIN_DISTINCT_SHAPES or more distinct dims among the window's calls.
    n_dims = len(dims_list)
    pairs = np.unique(codes[in_window] * n_dims + dims_code[in_window])
    per_code = np.bincount(pairs // n_dims)
    table = names.name_table
    vary_code = np.zeros(len(table), dtype=bool)
    vary_code[: len(per_code)] = per_code >= MIN_DISTINCT_SHAPES
    varying = {table[c] for c in np.flatnonzero(vary_code).tolist()}
    if not varying:
        return []
    of_varying = vary_code[codes]
    repeat_durs: dict[str, list[float]] = defaultdict(list)
    repeats = ~new_all & of_varying
    for code, d in zip(codes[repeats].tolist(), dur[order[repeats]].tolist(), strict=True):
        repeat_durs[table[code]].append(float(d))
    # The window's calls of the varying names, in time order.
    picked_at = in_window & of_varying
    picked = [
        (r, table[code], dims_list[k], bool(nw))
        for r, code, k, nw in zip(
            order[picked_at].tolist(),
            codes[picked_at].tolist(),
            dims_code[picked_at].tolist(),
            new_all[picked_at].tolist(),
            strict=True,
        )
    ]
    baseline = {
        n: float(np.median(repeat_durs[n])) if repeat_durs[n] else min(dur[r] for r, m, _, _ in picked if m == n)
        for n in varying
    }
    gaps = dev.gaps_of("host_bound")
    gap_iv = gaps[["start", "end"]].to_numpy() if len(gaps) else np.empty((0, 2))
    alloc_rows = np.flatnonzero(
        np.isin(kind, [int(Kind.RUNTIME), int(Kind.DRIVER)]) & name_matches(host["name"], ALLOC_APIS.__contains__)
    )
    alloc_by_root: dict[int, int] = defaultdict(int)
    for a in root[alloc_rows].tolist():
        if a >= 0:
            alloc_by_root[a] += 1
    picked_rows = np.array([r for r, _, _, _ in picked], dtype=np.int64)
    steps = _step_of(window, ts[picked_rows])
    sites: dict[tuple[str, str], ShapeSite] = {}
    labels: dict[int, str] = {}  # by the source object's id: one label string per object
    srcs = user_sources(model, picked_rows)
    # Per call as Python floats (the same values), and the host-bound idle inside each
    # call in one pass (`overlap` per call was most of this loop on a decode trace).
    picked_dur = dur[picked_rows].tolist()
    picked_ts = ts[picked_rows]
    idle_in = overlap(gap_iv, picked_ts, picked_ts + dur[picked_rows]).tolist() if len(gap_iv) else None
    for i, ((r, name, dims, new), step, src) in enumerate(zip(picked, steps.tolist(), srcs, strict=True)):
        label = ""
        if src is not None:
            label = labels.get(id(src), "")
            if not label:
                label = labels[id(src)] = src.label
        site_key = (name, label)
        site = sites.get(site_key)
        if site is None:
            site = sites[site_key] = ShapeSite(name, src)
        site.shapes.append(dims)
        site.rows.append(r)
        site.steps.add(int(step))
        site.calls += 1
        site.alloc_calls += alloc_by_root.get(r, 0)
        if new:
            site.new_calls += 1
            site.new_steps.add(int(step))
            excess = picked_dur[i] - baseline[name]
            if excess > 0:
                site.excess.append((r, excess))  # all of it: one shape makes every call a repeat
            if excess >= NEW_SHAPE_MIN_EXCESS_US:
                site.excess_us += excess
                idle = idle_in[i] if idle_in is not None else 0.0
                site.idle_us += min(idle, excess)
    # A site whose shapes are new only in the window's first step calls the op with the
    # same few shapes every step (a 2021 ResNet trace: images and labels copied by one
    # `.to(device)` line, [32, 3, 224, 224] and [32]): nothing changes from step to step.
    # With one step (or none) there is nothing to compare, so every varying site counts.
    first = int(steps.min()) if len(steps) else 0
    several = len({int(s) for s in steps}) > 1
    out = [s for s in sites.values() if s.distinct >= MIN_DISTINCT_SHAPES and (not several or s.new_steps - {first})]
    out.sort(key=lambda s: (s.idle_us, s.distinct, s.calls), reverse=True)
    return out


def _shape_calls(
    records: np.ndarray, codes: np.ndarray
) -> tuple[np.ndarray, np.ndarray, list[bytes], np.ndarray] | None:
    """For ops in time order (their shape-args records and name codes): which have input
    dims (keep), each kept op's dims as an index into the distinct dims (dims_code, dims),
    and whether it is the first op of its name with those dims (new). None when no op has
    dims. The loader shares one record among the ops with the same shape args, so dims
    are read once per record (found by identity), not once per op."""
    if not len(records):
        return None
    ids = np.fromiter(map(id, records), dtype=np.uint64, count=len(records))
    uniq, first, inverse = np.unique(ids, return_index=True, return_inverse=True)
    index: dict[bytes, int] = {}
    rec_dims = np.full(len(uniq), -1, dtype=np.int64)
    for i, at in enumerate(first.tolist()):
        args = records[at]
        if args is None:
            continue
        dims = bytes(args.input_dims) or bytes(args.input_dims_2021)
        if dims and dims != b"[]":
            rec_dims[i] = index.setdefault(dims, len(index))
    per_op = rec_dims[inverse.reshape(-1)]
    keep = per_op >= 0
    if not bool(keep.any()):
        return None
    dims_code = per_op[keep]
    key = codes[keep].astype(np.int64) * len(index) + dims_code
    new = np.zeros(len(key), dtype=bool)
    new[np.unique(key, return_index=True)[1]] = True  # the first op of each (name, dims)
    return keep, dims_code, list(index), new


def _tensor_dims(raw: bytes) -> list[tuple[int, ...] | None]:
    """Each input's dims (None for an input that is not a tensor)."""
    try:
        dims = msgspec.json.decode(raw)
    except msgspec.DecodeError:
        return []
    return [
        tuple(d) if isinstance(d, list) and d and all(isinstance(x, int) for x in d) else None
        for d in (dims if isinstance(dims, list) else [])
    ]


@dataclass(frozen=True)
class ShapeVariation:
    """How an op site's input shapes vary: one dim of one input taking several values
    (`dim` set: "dim 2 of [8, 8, N, 64] takes 10 values (64..512)"), or several shapes
    (`examples`: the first few). `arg` names the input that varies where the op has
    several and it is not the first (attention's query can stay [8, 16, 1, 64] while its
    key grows)."""

    count: int  # distinct input shapes (of the varying input where one is named)
    arg: int | None = None  # 0-based index of the varying input (None: the first, or the only one)
    dim: int | None = None  # the one dim that moves
    pattern: tuple[int, ...] = ()  # the varying input's dims, the moving one as its first value
    values: tuple[int, ...] = ()  # the moving dim's values, sorted
    examples: tuple[tuple[int, ...], ...] = ()  # a few distinct shapes of the varying input
    varying_input: bool = False  # the shapes are of one input (else: of the op's inputs as a whole)


def shape_variation(shapes: list[bytes]) -> ShapeVariation:
    """What varies among an op site's raw Input Dims: the tensor input taking the most
    distinct dims (in a decode step the query goes 32 -> 1 once while the key grows every
    step; the first on ties), and in it the one dim that moves, if one does."""
    sets = [d for d in (_tensor_dims(s) for s in dict.fromkeys(shapes)) if any(x is not None for x in d)]
    if not sets:
        return ShapeVariation(count=len(set(shapes)))
    width = max(len(d) for d in sets)
    varying = [
        i for i in range(width) if all(i < len(d) and d[i] is not None for d in sets) and len({d[i] for d in sets}) > 1
    ]
    arg = max(varying, key=lambda i: len({d[i] for d in sets}), default=None)
    if arg is None:
        return ShapeVariation(count=len(set(shapes)))
    dims = [t for d in sets if (t := d[arg]) is not None]
    named = arg if width > 1 and arg > 0 else None
    if len({len(d) for d in dims}) == 1:
        moving = [j for j in range(len(dims[0])) if len({d[j] for d in dims}) > 1]
        if len(moving) == 1:
            j = moving[0]
            vals = tuple(sorted({d[j] for d in dims}))
            return ShapeVariation(count=len(vals), arg=named, dim=j, pattern=dims[0], values=vals, varying_input=True)
    distinct = list(dict.fromkeys(dims))
    return ShapeVariation(count=len(distinct), arg=named, examples=tuple(distinct[:3]), varying_input=True)


def graph_launches(model: TraceModel, dev: DeviceLedger | None) -> int:
    """CUDA-graph launches on the host inside `dev`'s window."""
    host = model.host
    if dev is None or not len(host):
        return 0
    kind = host["kind"].to_numpy()
    ts = host["ts"].to_numpy()
    sel = np.isin(kind, [int(Kind.RUNTIME), int(Kind.DRIVER)]) & name_matches(
        host["name"], GRAPH_LAUNCH_APIS.__contains__
    )
    return int((sel & (ts >= dev.window_start) & (ts < dev.window_end)).sum())
