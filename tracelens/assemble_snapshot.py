"""What a CUDA memory snapshot says: the peak, what held it, where it was allocated.

The allocator's history (`device_traces`) is replayed the way PyTorch's memory viz
replays it: from the state at snapshot time backwards to the state when recording
began (blocks alive then are ones the history never saw allocated), then forwards,
entry by entry, keeping allocated bytes (alloc .. free_completed) and reserved bytes
(segment_alloc/map .. segment_free/unmap). The peak is the largest allocated total; the
blocks alive at that entry are grouped by category and by source line.

Categories, first rule that holds (memory viz has none; these are what
torch.profiler's memory timeline calls its categories, read from the frames):

- a category the snapshot itself carries (made from a profile) is kept;
- `cuda_graph_pool`: the block lies in a private pool (CUDA-graph capture, MemPool);
- `optimizer_state`: allocated in `torch/optim/` by the optimizer's state initialisation
  (`_init_group`, `_init_*`, `__setstate__`) or alive until the end; other optimizer
  allocations are `temporary` (foreach intermediates);
- `parameters`: allocated while a module was built, moved or loaded (`nn.Module.__init__`,
  `_apply`/`to`/`cuda`, `reset_parameters`, `torch/nn/init.py`, `load_state_dict`,
  `from_pretrained`) or alive before recording began;
- `gradients`: allocated with no Python frame (autograd's device thread runs backward in
  C++) or under `backward()`, and freed by `zero_grad` or alive at the end;
- `kv_cache`: allocated in a KV cache (`transformers/cache_utils.py`, `past_key_values`);
- `activations`: allocated inside a module's forward (a `forward` frame);
- `temporary`: anything else (backward intermediates, copies, workspaces).

`cached_free` is reserved minus allocated at the peak: segments the cache holds but no
tensor uses (fragmentation when requests of other sizes cannot use it).
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Literal

from tracelens.domain import FRAGMENTATION_SHARE
from tracelens.model.snapshot import Frame, MemorySnapshot, TraceEntry
from tracelens.model.sources import PySource, is_machinery, short_path
from tracelens.report import (
    SnapshotBlock,
    SnapshotCategory,
    SnapshotOom,
    SnapshotSite,
    SnapshotSummary,
    SnapshotTimeline,
)
from tracelens.report.snapshot_report import SnapshotCategoryName

#: Source lines and largest blocks listed (the JSON and the text alike).
MAX_SITES = 15
MAX_LARGEST = 10
#: Frames kept per listed block (innermost first, PyTorch's own left out).
MAX_BLOCK_FRAMES = 8
#: Points in the allocated/reserved-over-time series (as the trace report's memory chart).
TIMELINE_BINS = 240
#: A category holding this share of reserved at the peak is worth advice of its own.
ADVICE_SHARE = 0.3

#: The categories torch.profiler's memory timeline gives (a snapshot made from a profile
#: carries them), by their spelling there.
_PROFILE_CATEGORIES: dict[str, SnapshotCategoryName] = {
    "parameter": "parameters", "optimizer_state": "optimizer_state", "input": "input", "temporary": "temporary",
    "activation": "activations", "gradient": "gradients", "autograd_detail": "autograd_detail", "unknown": "unknown",
}  # fmt: skip
_ALLOC = "alloc"
_FREED = "free_completed"
_SEG_ADD = ("segment_alloc", "segment_map")
_SEG_DROP = ("segment_free", "segment_unmap")
_OPTIM_STATE_FUNCS = ("_init_group", "__setstate__", "_init_state", "_init_")
_PARAM_FUNCS = frozenset(
    {"_apply", "to", "cuda", "reset_parameters", "load_state_dict", "_load_from_state_dict", "from_pretrained",
     "_load_state_dict_into_meta_model", "_load_pretrained_model", "to_empty", "__init__", "materialize"}
)  # fmt: skip
_KV_FILES = ("cache_utils.py",)
_KV_NAMES = ("past_key_values", "kv_cache", "key_cache", "value_cache")


def _is_torch(f: Frame) -> bool:
    p = short_path(f.filename)
    return p.startswith("torch/") or ("/torch/" in p and "site-packages" in f.filename)


def _pysource(f: Frame) -> PySource:
    return PySource(file=short_path(f.filename), line=f.line, function=f.name)


def _user_frame(frames: tuple[Frame, ...]) -> Frame | None:
    """The innermost frame of the program itself (not PyTorch, stdlib or a library's
    entry machinery, by the rules the trace report uses for Python stacks)."""
    for f in frames:
        installed = "site-packages" in f.filename or "dist-packages" in f.filename
        if not installed and not is_machinery(short_path(f.filename)):
            return f
    return None


def _library_frame(frames: tuple[Frame, ...]) -> Frame | None:
    """The innermost frame outside PyTorch when it is an installed library's (transformers'
    cache_utils.py, say): it says more than the user line that called the library."""
    for f in frames:
        if _is_torch(f) or f.filename.startswith("<"):
            continue
        if "site-packages" in f.filename or "dist-packages" in f.filename:
            return f
        return None
    return None


def _in(frames: Iterable[Frame], part: str) -> bool:
    return any(part in f.filename for f in frames)


def category_of(
    alloc: TraceEntry | None, frames: tuple[Frame, ...], pool: tuple[int, int], free: TraceEntry | None, predates: bool
) -> SnapshotCategoryName:
    """The category of one block (module docstring, in rule order)."""
    if alloc is not None and alloc.category:
        return _PROFILE_CATEGORIES.get(alloc.category, "unknown")
    if pool != (0, 0):
        return "cuda_graph_pool"
    if predates and not frames:
        return "parameters"
    optim = [f for f in frames if "torch/optim/" in f.filename.replace("\\", "/")]
    if optim:
        if any(f.name.startswith(_OPTIM_STATE_FUNCS) for f in optim) or free is None:
            return "optimizer_state"
        return "temporary"
    nn_frames = [f for f in frames if "torch/nn/" in f.filename.replace("\\", "/") or "modeling_utils" in f.filename]
    # `__init__` counts only in torch/nn (a layer building its weight), and never under a
    # forward that happens to run inside some __init__.
    building = any(f.name in _PARAM_FUNCS for f in nn_frames) or _in(frames, "torch/nn/init.py")
    if building and not any(f.name == "forward" for f in frames):
        return "parameters"
    freed_by_zero_grad = free is not None and any(f.name == "zero_grad" for f in free.frames)
    if (not frames or any(f.name in ("backward", "_engine_run_backward") for f in frames)) and (
        free is None or freed_by_zero_grad
    ):
        return "gradients"
    if any(f.filename.endswith(_KV_FILES) for f in frames) or any(n in f.name for f in frames for n in _KV_NAMES):
        return "kv_cache"
    if any(f.name == "forward" for f in frames):
        return "activations"
    return "temporary"


class _Site:
    """The bytes live at the peak from one (user frame, library frame) pair."""

    __slots__ = ("blocks", "by_category", "bytes", "lib", "user")

    def __init__(self, user: Frame | None, lib: Frame | None) -> None:
        self.user, self.lib = user, lib
        self.bytes = self.blocks = 0
        self.by_category: dict[SnapshotCategoryName, int] = defaultdict(int)


class _Live:
    __slots__ = ("addr", "alloc", "frames", "free", "pool", "predates", "size", "stream", "t")

    def __init__(
        self,
        addr: int,
        size: int,
        frames: tuple[Frame, ...],
        stream: int,
        pool: tuple[int, int],
        t: float | None,
        alloc: TraceEntry | None,
        predates: bool,
    ) -> None:
        self.addr, self.size, self.frames, self.stream, self.pool = addr, size, frames, stream, pool
        self.t, self.alloc, self.predates = t, alloc, predates
        self.free: TraceEntry | None = None


def _device(snap: MemorySnapshot) -> int:
    """The device with the most recorded history, else the most reserved memory."""
    if any(snap.traces.values()):
        return max(snap.traces, key=lambda d: (len(snap.traces[d]), -d))
    reserved: dict[int, int] = defaultdict(int)
    for s in snap.segments:
        reserved[s.device] += s.total_size
    return max(reserved, key=lambda d: (reserved[d], -d)) if reserved else 0


def _at_peak(
    entries: Sequence[TraceEntry], start_live: dict[int, _Live], end_live: dict[int, _Live], peak_i: int
) -> tuple[dict[int, _Live], str]:
    """The blocks alive at the peak (each with the entry that later freed it), and what
    the program was running then."""
    at_peak: dict[int, _Live] = dict(start_live)
    for e in entries[: peak_i + 1]:
        if e.action == _ALLOC:
            at_peak[e.addr] = _Live(e.addr, e.size, e.frames, e.stream, e.pool_id, e.time_us, e, False)
        elif e.action == _FREED:
            at_peak.pop(e.addr, None)
    if not entries:
        at_peak = dict(end_live)
    pending = dict(at_peak)
    for e in entries[peak_i + 1 :]:
        if e.action in ("free_requested", _FREED):
            freed = pending.pop(e.addr, None)
            if freed is not None:
                freed.free = e
    # What the program was running at the peak: the peak's own allocation's frames, else
    # (an allocation with none: autograd's device thread, C++) the latest before it with a
    # frame of the program's, which is the main thread's line (loss.backward(), say).
    where = None
    for e in entries[peak_i::-1] if 0 <= peak_i < len(entries) else ():
        where = _user_frame(e.frames) or _library_frame(e.frames)
        if where is not None:
            break
    peak_phase = f"{short_path(where.filename)}:{where.line} {where.name}" if where else ""
    return at_peak, peak_phase


def _by_category(
    at_peak: dict[int, _Live], peak_res: int, peak_alloc: int
) -> tuple[tuple[SnapshotCategory, ...], tuple[SnapshotSite, ...], dict[int, SnapshotCategoryName], int]:
    """The peak by category and by source line: (categories, sites, each block's
    category, the reserved memory free at the peak)."""
    cats: dict[SnapshotCategoryName, list[int]] = defaultdict(lambda: [0, 0])
    sites: dict[tuple[object, ...], _Site] = {}
    cat_of: dict[int, SnapshotCategoryName] = {}
    for live_b in at_peak.values():
        c = category_of(live_b.alloc, live_b.frames, live_b.pool, live_b.free, live_b.predates)
        cat_of[live_b.addr] = c
        cats[c][0] += live_b.size
        cats[c][1] += 1
        user = _user_frame(live_b.frames)
        lib = _library_frame(live_b.frames)
        site = sites.get((user, lib))
        if site is None:
            site = sites[(user, lib)] = _Site(user, lib)
        site.bytes += live_b.size
        site.blocks += 1
        site.by_category[c] += live_b.size
    free_cached = max(peak_res - peak_alloc, 0)
    if free_cached:
        cats["cached_free"] = [free_cached, 0]
    total = max(peak_res, peak_alloc, 1)
    categories = tuple(
        SnapshotCategory(category=c, bytes=v[0], share=v[0] / total, blocks=v[1])
        for c, v in sorted(cats.items(), key=lambda kv: (-kv[1][0], kv[0]))
    )
    site_out = tuple(
        SnapshotSite(
            source=_pysource(x.user) if x.user is not None else None,
            library=_pysource(x.lib) if x.lib is not None else None,
            bytes=x.bytes,
            blocks=x.blocks,
            category=max(x.by_category.items(), key=lambda kv: kv[1])[0],
        )
        for x in sorted(sites.values(), key=lambda x: -x.bytes)[:MAX_SITES]
    )
    return categories, site_out, cat_of, free_cached


def _largest(
    at_peak: dict[int, _Live], cat_of: dict[int, SnapshotCategoryName], t0: float | None
) -> tuple[SnapshotBlock, ...]:
    """The largest blocks alive at the peak."""
    return tuple(
        SnapshotBlock(
            bytes=b.size,
            requested=b.alloc.size if b.alloc is not None else b.size,
            category=cat_of[b.addr],
            stream=b.stream,
            allocated_at_us=_rel(b.t, t0),
            frames=_shown_frames(b.frames),
        )
        for b in sorted(at_peak.values(), key=lambda b: (-b.size, b.addr))[:MAX_LARGEST]
    )


def summarize_snapshot(snap: MemorySnapshot) -> SnapshotSummary:
    dev = _device(snap)
    segs = [s for s in snap.segments if s.device == dev]
    entries = snap.traces.get(dev, ())
    notes = list(snap.notes)
    # -- the state at snapshot time ---------------------------------------------------
    end_live: dict[int, _Live] = {}
    end_reserved = 0
    seg_pool: dict[int, tuple[int, int]] = {}
    for seg in segs:
        end_reserved += seg.total_size
        seg_pool[seg.address] = seg.pool_id
        for blk in seg.blocks:
            if blk.state.startswith("active"):
                end_live[blk.address] = _Live(
                    blk.address, blk.size, blk.frames, seg.stream, seg.pool_id, None, None, True
                )
    end_allocated = sum(b.size for b in end_live.values())
    # -- backwards to the state when recording began ------------------------------------
    start_live = dict(end_live)
    start_reserved = end_reserved
    for e in reversed(entries):
        if e.action == _ALLOC:
            start_live.pop(e.addr, None)
        elif e.action == _FREED:
            start_live[e.addr] = _Live(e.addr, e.size, e.frames, e.stream, e.pool_id, None, None, True)
        elif e.action in _SEG_ADD:
            start_reserved -= e.size
        elif e.action in _SEG_DROP:
            start_reserved += e.size
    history_complete = not start_live and start_reserved <= 0
    if entries and not history_complete:
        notes.append(
            f"{len(start_live)} blocks ({_mb(sum(b.size for b in start_live.values()))}) were allocated before the "
            "recorded history begins (recording started late, or max_entries dropped older entries): counted from "
            "the start, their frames are those of their free where it was recorded"
        )
    start_reserved = max(start_reserved, 0)
    # -- forwards: totals per entry, the peak -------------------------------------------
    live = dict(start_live)
    allocated = sum(b.size for b in live.values())
    reserved = start_reserved
    t0 = next((e.time_us for e in entries if e.time_us is not None), None)
    peak_i, peak_alloc, peak_res, max_res = -1, allocated, reserved, reserved
    series_t: list[float] = []
    series_a: list[float] = []
    series_r: list[float] = []
    ooms: list[SnapshotOom] = []
    for i, e in enumerate(entries):
        if e.action == _ALLOC:
            live[e.addr] = _Live(e.addr, e.size, e.frames, e.stream, e.pool_id, e.time_us, e, False)
            allocated += e.size
        elif e.action == _FREED:
            gone = live.pop(e.addr, None)
            allocated -= gone.size if gone is not None else e.size
        elif e.action in _SEG_ADD:
            reserved += e.size
        elif e.action in _SEG_DROP:
            reserved -= e.size
        elif e.action == "oom":
            ooms.append(
                SnapshotOom(
                    requested=e.size,
                    device_free=e.device_free or 0,
                    at_us=_rel(e.time_us, t0),
                    frames=_shown_frames(e.frames),
                )
            )
        max_res = max(max_res, reserved)
        if allocated > peak_alloc:
            peak_i, peak_alloc, peak_res = i, allocated, reserved
        rel = _rel(e.time_us, t0)
        series_t.append(rel if rel is not None else float(i))
        series_a.append(float(allocated))
        series_r.append(float(reserved))
    if not entries:
        peak_alloc, peak_res, max_res = end_allocated, end_reserved, end_reserved
    at_peak, peak_phase = _at_peak(entries, start_live, end_live, peak_i)
    categories, site_out, cat_of, free_cached = _by_category(at_peak, peak_res, peak_alloc)
    largest = _largest(at_peak, cat_of, t0)
    timeline = _binned(series_t, series_a, series_r, "us" if t0 is not None else "entry") if entries else None
    span = (series_t[-1] - series_t[0]) if entries and t0 is not None else 0.0
    summary = SnapshotSummary(
        path=snap.path,
        file_name=os.path.basename(snap.path),
        file_bytes=snap.file_bytes,
        device=dev,
        entries=len(entries),
        recorded=bool(entries),
        history_complete=history_complete,
        span_us=span,
        peak_allocated=int(peak_alloc),
        peak_reserved=int(peak_res),
        max_reserved=int(max_res),
        peak_at_us=_rel(entries[peak_i].time_us, t0) if 0 <= peak_i < len(entries) else None,
        peak_phase=peak_phase,
        end_allocated=int(end_allocated),
        end_reserved=int(end_reserved),
        fragmentation_at_peak=int(free_cached),
        segments=len(segs),
        private_pools=len({s.pool_id for s in segs if s.pool_id != (0, 0)}),
        categories=categories,
        sites=site_out,
        largest=largest,
        timeline=timeline,
        ooms=tuple(ooms),
        settings=dict(snap.settings),
        advice=(),
        notes=tuple(notes),
    )
    return _with_advice(summary)


def _rel(t: float | None, t0: float | None) -> float | None:
    return None if t is None or t0 is None else t - t0


def _mb(n: float) -> str:
    return f"{n / 1e6:.1f} MB"


def _shown_frames(frames: tuple[Frame, ...]) -> tuple[PySource, ...]:
    keep = [f for f in frames if not _is_torch(f)] or list(frames[:1])
    return tuple(_pysource(f) for f in keep[:MAX_BLOCK_FRAMES])


def _binned(ts: list[float], alloc: list[float], res: list[float], unit: Literal["us", "entry"]) -> SnapshotTimeline:
    """The largest allocated and reserved value in each of TIMELINE_BINS equal bins."""
    n = len(ts)
    if n <= TIMELINE_BINS:
        return SnapshotTimeline(ts=tuple(ts), allocated=tuple(alloc), reserved=tuple(res), unit=unit)
    lo, hi = ts[0], ts[-1]
    width = (hi - lo) / TIMELINE_BINS or 1.0
    out_t: list[float] = []
    out_a: list[float] = []
    out_r: list[float] = []
    best_a = best_r = -1.0
    current = 0
    for t, a, r in zip(ts, alloc, res, strict=True):
        b = min(int((t - lo) / width), TIMELINE_BINS - 1)
        if b != current and best_a >= 0:
            out_t.append(lo + (current + 0.5) * width)
            out_a.append(best_a)
            out_r.append(best_r)
            best_a = best_r = -1.0
        current = b
        best_a, best_r = max(best_a, a), max(best_r, r)
    out_t.append(lo + (current + 0.5) * width)
    out_a.append(best_a)
    out_r.append(best_r)
    return SnapshotTimeline(ts=tuple(out_t), allocated=tuple(out_a), reserved=tuple(out_r), unit=unit)


def _with_advice(s: SnapshotSummary) -> SnapshotSummary:
    """What an expert reading memory viz would say next, from the categories at the peak."""
    from dataclasses import replace

    share = {c.category: c.share for c in s.categories}
    tips: list[str] = []
    if s.ooms:
        o = s.ooms[0]
        tips.append(
            f"The allocator ran out of memory ({len(s.ooms)} time(s)): {_mb(o.requested)} asked with "
            f"{_mb(o.device_free)} free on the device; the categories at the peak say what to cut."
        )
    if s.peak_reserved and s.fragmentation_at_peak >= FRAGMENTATION_SHARE * s.peak_reserved:
        tips.append(
            f"{_mb(s.fragmentation_at_peak)} of the {_mb(s.peak_reserved)} reserved at the peak is cached but unused "
            "(fragmentation): PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True lets segments grow instead of "
            "splitting, and steadier tensor sizes let cached blocks be reused."
        )
    if share.get("activations", 0) >= ADVICE_SHARE:
        tips.append(
            "Activations hold the largest part of the peak: activation checkpointing "
            "(torch.utils.checkpoint) of the largest blocks, a smaller micro-batch with gradient accumulation, or "
            "bf16 autocast cut it."
        )
    if share.get("optimizer_state", 0) >= ADVICE_SHARE:
        tips.append(
            "Optimizer state holds the largest part of the peak (AdamW keeps two fp32 tensors per parameter): a "
            "sharded optimizer (FSDP/ZeRO), bf16 or 8-bit states cut it."
        )
    if share.get("kv_cache", 0) >= ADVICE_SHARE:
        tips.append(
            "The KV cache holds the largest part of the peak: a preallocated static cache sized to the longest "
            "sequence (or a paged cache) stops it from growing by reallocation."
        )
    if share.get("temporary", 0) >= ADVICE_SHARE:
        tips.append(
            "Short-lived temporaries make the peak: the source lines below allocate them; in-place ops, fusion "
            "(torch.compile) or freeing references earlier lower it."
        )
    return replace(s, advice=tuple(tips))


def snapshot_of_trace(trace_path: str) -> tuple[SnapshotSummary | None, str | None]:
    """The summary of the memory snapshot saved beside a trace (model/snapshot.py,
    `snapshot_beside`), or why it was not read: a trace's report never fails over it."""
    from tracelens.errors import TraceInputError
    from tracelens.model.snapshot import load_snapshot, snapshot_beside

    if not trace_path:
        return None, None
    path = snapshot_beside(trace_path)
    if path is None:
        return None, None
    try:
        return summarize_snapshot(load_snapshot(path)), None
    except TraceInputError as exc:
        return None, f"The memory snapshot beside the trace was not read: {exc}"
