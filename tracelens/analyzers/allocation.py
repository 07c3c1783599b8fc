"""allocation: question 5, is allocation (cudaMalloc, allocator churn) in the way?

From the runtime calls: PyTorch's caching allocator makes cudaMalloc rare once a program
reaches its steady state; cudaMalloc/cudaFree in the analysed window mean the cache
keeps missing (changing sizes, a growing tensor, `empty_cache()` in the loop) or pinned
host buffers allocated per step. cudaFree synchronises the device, and both take host
time while the GPU waits for the next launch. The ledger gives the time (idle gaps the
host spent inside allocator calls); here we name the calls, the op and the source that
made them, and the cause. Allocator calls before the window are start-up: counted
apart, never blamed.

From `[memory]` events (profile_memory=True): allocated and reserved bytes over time,
the peak, the churn (bytes allocated per step), fragmentation (reserved minus
allocated) and the ops that allocate most. Traces before ~2022 carry no totals: the
allocated curve is then the running sum of the events, relative to the recording's
start.

Growing tensors: a tensor regrown by torch.cat every step (the seed's KV cache) copies
all of it again; the cat's input grows along one dimension call after call. The bytes
it re-copies are what a preallocated buffer written in place would not copy; the cost
is the cat kernels' GPU time.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from dataclasses import dataclass, field
from itertools import pairwise

import numpy as np

from tracelens.analyzers.base import Category, Fact, Found, Place
from tracelens.derive.context import AnalysisContext
from tracelens.derive.intervals import overlap
from tracelens.derive.memory import MemoryProfile
from tracelens.derive.shapes import ShapeVariation, shape_variation
from tracelens.domain import (
    ALLOC_APIS,
    DTYPE_BYTES,
    FRAGMENTATION_SHARE,
    FREE_APIS,
    HARNESS_MARKERS,
    NO_ENCLOSING_OP,
    PINNED_APIS,
)
from tracelens.model.schema import Kind
from tracelens.model.sources import PySource, op_chain, python_stack, user_source, user_sources
from tracelens.model.trace import TraceModel, name_matches

MAX_SITES = 8


#: Ops that concatenate: a growing cat is the KV-cache pattern.
CAT_OPS = frozenset({"aten::cat", "aten::concat", "aten::concatenate", "aten::stack", "aten::_cat"})


#: A cat site "grows" when its largest input takes at least this many sizes, never
#: shrinking from one call to the next.
MIN_GROWTH_SIZES = 3


_ELEM_RE = re.compile(r"OpaqueType<(\d+)u>")


#: Element types a kernel's name may spell, tried in this order (the first found wins:
#: "double" before "float" and "long" before "int", which they contain).
_NAME_DTYPES = ("double", "c10::BFloat16", "c10::Half", "float", "long", "int")


@dataclass
class CatGrowth:
    op: str
    source: PySource | None
    calls: int = 0
    sizes: list[int] = field(default_factory=list)  # largest input's length along the growing dim
    dim: int = -1
    copied_bytes: float = 0.0  # output bytes written by the cats
    recopied_bytes: float = 0.0  # of it, the old contents copied again
    gpu_us: float = 0.0
    elem_bytes: int = 0
    steps: set[int] = field(default_factory=set)


#: Python frame of torch.cuda.empty_cache() as Kineto names it: "torch/cuda/memory.py(212): empty_cache".
_EMPTY_CACHE_FRAME = re.compile(r"\):\s*empty_cache$")


@dataclass(frozen=True)
class AllocCalls:
    """The allocator calls of the window, by site."""

    calls: int
    frees: int
    host_us: float
    empty_cache: int  # calls made inside torch.cuda.empty_cache()
    pinned: int  # pinned host allocations
    startup_calls: int  # before the window: start-up, not blamed
    startup_host_us: float
    #: (api, enclosing op or what stands for it, source label) -> [GPU idle, calls, host time]
    by_site: dict[tuple[str, str, str], list[float]]
    source_of: dict[tuple[str, str, str], PySource | None]
    harness_frees: int = 0  # frees inside a benchmark harness's flush (domain.HARNESS_MARKERS)
    harness: str = ""  # that harness range's name


@dataclass(frozen=True)
class VaryingSite:
    """The first op site whose shapes change and which makes allocator calls."""

    op: str
    source: PySource | None
    variation: ShapeVariation


@dataclass(frozen=True)
class AllocFacts:
    calls: int  # allocator calls in the window
    idle_us: float  # GPU idle in them
    idle_share: float  # of the window
    host_us: float
    per_step: float
    steps: int
    unit: str  # the report's unit (AnalysisContext.unit): step, iteration, call or window
    empty_cache: int
    pinned: int
    frees: int
    harness_frees: int  # of them, inside a benchmark harness's cache flush ...
    harness: str  # ... this range ("[param|clear_cache]")
    varying: VaryingSite | None
    fragmented: bool  # the cache holds FRAGMENTATION_SHARE of reserved beyond what is allocated at the peak
    growth: CatGrowth | None  # the growing cat re-copying the most
    grow_us: float  # GPU time of every growing cat
    memory: MemoryProfile | None


@dataclass(frozen=True)
class AllocSite:
    """An allocator call site (`api` in `op`), or a growing cat (`growth`)."""

    api: str = ""
    op: str = ""
    growth: CatGrowth | None = None


def analyze(ctx: AnalysisContext) -> list[Found[AllocFacts, AllocSite]]:
    dev = ctx.ledger.primary
    if dev is None:
        return []
    calls = _alloc_calls(ctx)
    mem = ctx.memory_profile
    growth = cat_growth(ctx)
    if (calls is None or not calls.calls) and mem is None and not growth:
        return []
    if calls is None:
        calls = AllocCalls(0, 0, 0.0, 0, 0, 0, 0.0, {}, {})
    idle_us = dev.by_cause.get("allocation", 0.0)
    grow_us = sum(g.gpu_us for g in growth)
    facts = AllocFacts(
        calls=calls.calls,
        idle_us=idle_us,
        idle_share=ctx.share(idle_us),
        host_us=calls.host_us,
        per_step=calls.calls / ctx.n_steps,
        steps=ctx.n_steps,
        unit=ctx.unit,
        empty_cache=calls.empty_cache,
        pinned=calls.pinned,
        frees=calls.frees,
        harness_frees=calls.harness_frees,
        harness=calls.harness,
        varying=_varying_alloc_site(ctx) if calls.calls else None,
        fragmented=bool(
            mem is not None
            and mem.peak_reserved > 0
            and calls.calls
            and mem.fragmentation_at_peak >= FRAGMENTATION_SHARE * mem.peak_reserved
        ),
        growth=max(growth, key=lambda x: x.recopied_bytes) if growth else None,
        grow_us=grow_us,
        memory=mem,
    )
    time_us = idle_us + grow_us
    places = _places(calls, growth)
    return [
        Found(
            category=Category.ALLOCATION,
            time_us=time_us,
            expected_gain_us=time_us,
            facts=facts,
            evidence=_evidence(facts, calls, growth),
            places=places,
            sources=tuple(dict.fromkeys(p.source for p in places if p.source is not None)),
            device=dev.device,
            tags=tuple(
                t
                for t, on in (
                    ("empty_cache", calls.empty_cache),
                    ("growing_tensor", growth),
                    ("memory_events", mem is not None),
                )
                if on
            ),
        )
    ]


def _in_harness(model: TraceModel, rows: list[int]) -> tuple[int, str]:
    """How many of host `rows` run inside a benchmark harness's range (a cache flush,
    domain.HARNESS_MARKERS), and the innermost such range's name."""
    if not rows:
        return 0, ""
    host = model.host
    ann = host.index[
        (host["kind"].to_numpy() == int(Kind.USER_ANNOTATION))
        & name_matches(host["name"], lambda n: any(m in n.lower() for m in HARNESS_MARKERS))
    ].to_numpy()
    if not len(ann):
        return 0, ""
    ts, end = host["ts"].to_numpy(), host["end"].to_numpy()
    n, name = 0, ""
    for r in rows:
        inside = ann[(ts[ann] <= ts[r]) & (end[ann] >= end[r])]
        if len(inside):
            n += 1
            name = model.arrays.name(int(inside[np.argmax(ts[inside])]))
    return n, name


def _alloc_calls(ctx: AnalysisContext) -> AllocCalls | None:
    """The window's allocator calls by site, and the start-up's (None: no allocator call at all)."""
    dev = ctx.ledger.primary
    model = ctx.model
    host = model.host
    is_call = np.isin(host["kind"].to_numpy(), [int(Kind.RUNTIME), int(Kind.DRIVER)])
    all_rows = host.index[is_call & name_matches(host["name"], ALLOC_APIS.__contains__)].to_numpy()
    if dev is None or not len(all_rows):
        return None
    ts = host["ts"].to_numpy()
    end = host["end"].to_numpy()
    rows = all_rows[(end[all_rows] > dev.window_start) & (ts[all_rows] < dev.window_end)]
    before = all_rows[ts[all_rows] < dev.window_start]
    gaps = dev.gaps_of("allocation")
    iv = gaps[["start", "end"]].to_numpy() if len(gaps) else np.empty((0, 2))
    idle_in = overlap(iv, ts[rows], end[rows]) if len(iv) and len(rows) else np.zeros(len(rows))
    by_site: dict[tuple[str, str, str], list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
    src_of: dict[tuple[str, str, str], PySource | None] = {}
    empty_cache = 0
    pinned = 0
    for r, idle in zip(rows, idle_in, strict=True):
        api = model.arrays.name(int(r))
        ops = op_chain(model, int(r))
        # empty_cache() is no aten op: its Python frame (with_stack) or an op name says so.
        # (The function, not any frame that mentions it: a script named empty_cache_loop.py
        # is on every frame's path.)
        in_empty_cache = any(o.endswith("empty_cache") for o in ops) or any(
            _EMPTY_CACHE_FRAME.search(f) for f in python_stack(model, int(r), limit=8)
        )
        if in_empty_cache:
            empty_cache += 1
        if api.startswith(PINNED_APIS):
            pinned += 1
        src = user_source(model, int(r))
        where = ops[0] if ops else ("torch.cuda.empty_cache()" if in_empty_cache else NO_ENCLOSING_OP)
        key = (api, where, src.label if src else "")
        by_site[key][0] += float(idle)
        by_site[key][1] += 1
        by_site[key][2] += float(end[r] - ts[r])
        src_of[key] = src
    frees = [int(r) for r in rows if model.arrays.name(int(r)).startswith(FREE_APIS)]
    harness_frees, harness = _in_harness(model, frees)
    return AllocCalls(
        calls=len(rows),
        frees=len(frees),
        harness_frees=harness_frees,
        harness=harness,
        host_us=float((end[rows] - ts[rows]).sum()) if len(rows) else 0.0,
        empty_cache=empty_cache,
        pinned=pinned,
        startup_calls=len(before),
        startup_host_us=float((end[before] - ts[before]).sum()) if len(before) else 0.0,
        by_site=dict(by_site),
        source_of=src_of,
    )


def _places(calls: AllocCalls, growth: list[CatGrowth]) -> tuple[Place[AllocSite], ...]:
    ranked = sorted(calls.by_site.items(), key=lambda kv: (kv[1][0], kv[1][2]), reverse=True)[:MAX_SITES]
    sites = [
        Place(
            count=int(n), time_us=idle, facts=AllocSite(api=api, op=op), host_us=h, ops=(op,), api=api,
            source=calls.source_of[(api, op, label)], kind="empty_cache" if "empty_cache" in op else "allocator_call",
        )
        for (api, op, label), (idle, n, h) in ranked
    ]  # fmt: skip
    for g in growth[:MAX_SITES]:
        sites.append(
            Place(
                count=g.calls, time_us=g.gpu_us, facts=AllocSite(growth=g), ops=(g.op,), source=g.source,
                steps=tuple(sorted(g.steps)), kind="growing_cat",
            )
        )  # fmt: skip
    return tuple(sites)


def _evidence(f: AllocFacts, calls: AllocCalls, growth: list[CatGrowth]) -> tuple[Fact, ...]:
    evidence = [
        Fact("idle_us", f.idle_us, "us"),
        Fact("calls", f.calls, "count"),
        Fact("frees", f.frees, "count"),
        Fact("host_us", f.host_us, "us"),
        Fact("empty_cache_calls", f.empty_cache, "count"),
        Fact("pinned_allocations", f.pinned, "count"),
        Fact("startup_calls", calls.startup_calls, "count"),
        Fact("startup_host_us", calls.startup_host_us, "us", total=False),
    ]
    if growth:
        evidence += [
            Fact("cat_copied_bytes", sum(g.copied_bytes for g in growth), "bytes"),
            Fact("cat_recopied_bytes", sum(g.recopied_bytes for g in growth), "bytes"),
            Fact("cat_gpu_us", f.grow_us, "us"),
        ]
    mem = f.memory
    if mem is not None:
        evidence += [
            Fact("peak_allocated_relative" if mem.relative else "peak_allocated", mem.peak_allocated, "bytes"),
            Fact("peak_reserved", mem.peak_reserved, "bytes"),
            Fact("allocated_per_step", mem.allocated_per_step, "bytes"),
            Fact("freed_per_step", mem.freed_per_step, "bytes"),
            Fact("fragmentation_at_peak", mem.fragmentation_at_peak, "bytes"),
            Fact("memory_events", mem.events, "count"),
        ]
        evidence += [Fact(f"allocated_by.{i}", b, "bytes") for i, (_, b, _, _) in enumerate(mem.top_ops[:5])]
    return tuple(evidence)


def _varying_alloc_site(ctx: AnalysisContext) -> VaryingSite | None:
    sites = [s for s in ctx.shape_sites if s.alloc_calls > 0]
    if not sites:
        return None
    s = sites[0]
    return VaryingSite(s.op, s.source, shape_variation(s.shapes))


def cat_growth(ctx: AnalysisContext) -> list[CatGrowth]:
    """cat/stack sites whose largest input grows along one dimension call after call."""
    dev = ctx.ledger.primary
    model = ctx.model
    host = model.host
    if dev is None or not len(host):
        return []
    kind = host["kind"].to_numpy()
    ts = host["ts"].to_numpy()
    is_cat = (kind == int(Kind.CPU_OP)) & name_matches(host["name"], CAT_OPS.__contains__)
    rows = np.flatnonzero(is_cat & (ts >= dev.window_start) & (ts < dev.window_end))
    # Where the GPU trails the host, the window's cat kernels were launched by ops that ran
    # on the host before the window began (a decode loop whose host is 12 ms ahead): those
    # ops are the window's too.
    g_ts = model.gpu["ts"].to_numpy()
    launch = model.gpu["launch"].to_numpy()
    ran = (launch >= 0) & (g_ts >= dev.window_start) & (g_ts < dev.window_end)
    if ran.any():
        ops = model.arrays.op[launch[ran]]
        ops = np.unique(ops[ops >= 0])
        rows = np.union1d(rows, ops[is_cat[ops]])
    if not len(rows):
        return []
    rows = rows[np.argsort(ts[rows], kind="stable")]
    sites: dict[tuple[str, str], CatGrowth] = {}
    shapes_of: dict[tuple[str, str], list[tuple[int, list[list[int]]]]] = defaultdict(list)
    shaped: list[tuple[int, list[list[int]]]] = []
    for r in rows.tolist():
        dims = model.op_shapes(r).get("Input Dims")
        tensors = dims[0] if isinstance(dims, list) and dims and isinstance(dims[0], list) else None
        if not tensors or not all(isinstance(t, list) and t and all(isinstance(x, int) for x in t) for t in tensors):
            continue
        shaped.append((r, tensors))
    labels: dict[int, str] = {}  # by the source object's id: one label string per object
    for (r, tensors), src in zip(shaped, user_sources(model, [r for r, _ in shaped]), strict=True):
        label = ""
        if src is not None:
            label = labels.get(id(src), "")
            if not label:
                label = labels[id(src)] = src.label
        key = (model.arrays.name(r), label)
        sites.setdefault(key, CatGrowth(key[0], src))
        shapes_of[key].append((r, tensors))
    launch_gpu = _cat_kernels(model, dev.window_start, dev.window_end)
    spans = sorted(ctx.window.steps, key=lambda s: s.start_us)
    starts = np.array([s.start_us for s in spans]) if spans else np.empty(0)
    out: list[CatGrowth] = []
    for key, calls in shapes_of.items():
        g = sites[key]
        # math.prod: the exact element count of a list of Python ints (np.prod made an
        # array per tensor, a third of this analyzer's time on large_generate).
        big = [max(t, key=math.prod) for _, t in calls]
        ranks = {len(d) for d in big}
        if len(ranks) != 1:
            continue
        n = ranks.pop()
        moving = [i for i in range(n) if len({d[i] for d in big}) > 1]
        if len(moving) != 1:
            continue
        dim = moving[0]
        sizes = [d[dim] for d in big]
        if len(set(sizes)) < MIN_GROWTH_SIZES or any(b < a for a, b in pairwise(sizes)):
            continue
        g.dim, g.sizes, g.calls = dim, sizes, len(calls)
        for (row, tensors), largest in zip(calls, big, strict=True):
            elem, gpu = launch_gpu.get(row, (0, 0.0))
            g.elem_bytes = g.elem_bytes or elem
            numel = sum(math.prod(t) for t in tensors)
            e = elem or g.elem_bytes or 4
            g.copied_bytes += numel * e
            g.recopied_bytes += math.prod(largest) * e
            g.gpu_us += gpu
            if len(starts):
                g.steps.add(spans[max(int(np.searchsorted(starts, ts[row], side="right")) - 1, 0)].index)
        out.append(g)
    out.sort(key=lambda x: -x.recopied_bytes)
    return out


def _cat_kernels(model: TraceModel, w0: float, w1: float) -> dict[int, tuple[int, float]]:
    """Per cat op row: the element size its kernel's name shows and its kernels' GPU time."""
    gpu = model.gpu
    launch = gpu["launch"].to_numpy()
    ok = (launch >= 0) & (gpu["ts"].to_numpy() >= w0) & (gpu["ts"].to_numpy() < w1)
    if not ok.any():
        return {}
    arr = model.arrays
    # The cat ops' kernels picked in numpy (by the op's name code), then walked in order.
    is_cat = np.array([n in CAT_OPS for n in arr.name_table], dtype=bool)
    kernels = np.flatnonzero(ok)
    ops = arr.op[launch[kernels]]
    mine = ops >= 0
    mine[mine] = is_cat[arr.name_codes[ops[mine]]]
    codes = gpu["name"].cat.codes.to_numpy()
    table = [str(c) for c in gpu["name"].cat.categories]
    dur = gpu["dur"].to_numpy()
    out: dict[int, tuple[int, float]] = {}
    for j, r in zip(kernels[mine].tolist(), ops[mine].tolist(), strict=True):
        elem, t = out.get(r, (0, 0.0))
        out[r] = (elem or _elem_bytes(table[codes[j]]), t + float(dur[j]))
    return out


def _elem_bytes(kernel: str) -> int:
    m = _ELEM_RE.search(kernel)
    if m:
        return int(m.group(1))
    for word in _NAME_DTYPES:
        if word in kernel:
            return DTYPE_BYTES[word]
    return 0
