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

import re
from collections import defaultdict
from dataclasses import dataclass, field
from itertools import pairwise

import numpy as np

from tracelens.analyzers.base import Category, Finding, Metric, Site, severity_for
from tracelens.derive.context import AnalysisContext
from tracelens.derive.intervals import overlap
from tracelens.derive.shapes import describe_shapes
from tracelens.domain import ALLOC_APIS, DTYPE_BYTES, FRAGMENTATION_SHARE, FREE_APIS, PINNED_APIS, fmt_us
from tracelens.model.schema import Kind
from tracelens.model.sources import PySource, op_chain, python_stack, user_source
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


def analyze(ctx: AnalysisContext) -> list[Finding]:
    dev = ctx.ledger.primary
    if dev is None:
        return []
    model = ctx.model
    host = model.host
    is_call = np.isin(host["kind"].to_numpy(), [int(Kind.RUNTIME), int(Kind.DRIVER)])
    all_rows = host.index[is_call & name_matches(host["name"], ALLOC_APIS.__contains__)].to_numpy()
    ts = host["ts"].to_numpy()
    end = host["end"].to_numpy()
    in_win = (end[all_rows] > dev.window_start) & (ts[all_rows] < dev.window_end) if len(all_rows) else all_rows
    rows = all_rows[in_win] if len(all_rows) else all_rows
    before = all_rows[ts[all_rows] < dev.window_start] if len(all_rows) else all_rows
    mem = ctx.memory_profile
    growth = cat_growth(ctx)
    if not len(rows) and mem is None and not growth:
        return []
    idle_us = dev.by_cause.get("allocation", 0.0)
    gaps = dev.gaps[dev.gaps["cause"] == "allocation"]
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
        where = ops[0] if ops else ("torch.cuda.empty_cache()" if in_empty_cache else "(no enclosing op)")
        key = (api, where, src.label if src else "")
        by_site[key][0] += float(idle)
        by_site[key][1] += 1
        by_site[key][2] += float(end[r] - ts[r])
        src_of[key] = src
    host_us = float((end[rows] - ts[rows]).sum()) if len(rows) else 0.0
    startup_host_us = float((end[before] - ts[before]).sum()) if len(before) else 0.0
    n_free = sum(1 for r in rows if model.arrays.name(int(r)).startswith(FREE_APIS))
    per_step = len(rows) / ctx.n_steps
    grow_us = sum(g.gpu_us for g in growth)
    time_us = idle_us + grow_us
    share = ctx.share(time_us)
    advice: list[str] = []
    title_parts: list[str] = []
    if len(rows):
        title_parts.append(
            f"GPU idles {fmt_us(idle_us)} ({ctx.share(idle_us):.0%} of the window) while the host is in "
            f"{len(rows):,} allocator calls ({fmt_us(host_us)} of host time)"
        )
        advice.append(
            "The caching allocator should make allocator calls rare in the steady state; here they keep happening"
            + (f" ({per_step:.1f} per {ctx.unit})." if ctx.n_steps > 1 and ctx.unit != "window" else ".")
        )
        if empty_cache:
            advice.append(
                f"torch.cuda.empty_cache() runs in the loop ({empty_cache} of the calls are inside it): remove it; it "
                "hands memory back to the driver only for the next step to ask for it again."
            )
        if pinned:
            advice.append(
                f"{pinned} pinned host buffers are allocated inside the window (cudaHostAlloc): allocate them once "
                "and reuse them (or let a DataLoader with pin_memory=True keep its pool)."
            )
        varying = _varying_alloc_sites(ctx)
        if varying:
            advice.append(
                f"Allocation sizes keep changing ({varying}): the cache cannot reuse blocks of other sizes. Pad to a "
                "few bucket sizes, or preallocate the largest buffer and reuse it."
            )
        advice.append(
            "Preallocate buffers that grow (a static KV cache instead of torch.cat), and run a warm-up step before "
            "measuring."
        )
        if n_free:
            advice.append(f"{n_free} of the calls free device memory: cudaFree synchronises the whole device.")
    if mem is not None and mem.peak_reserved > 0 and len(rows):
        frag = mem.fragmentation_at_peak
        if frag >= FRAGMENTATION_SHARE * mem.peak_reserved:
            advice.append(
                f"The cache holds {_gib(frag)} more than is allocated at the peak ({frag / mem.peak_reserved:.0%} of "
                "reserved): fragmentation. PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True lets the cache grow "
                "segments instead of calling cudaMalloc for new ones."
            )
    if growth:
        g = max(growth, key=lambda x: x.recopied_bytes)
        title_parts.append(
            f"{g.op} {g.source.where if g.source else ''} regrows a tensor every call (dim {g.dim}: "
            f"{min(g.sizes)}..{max(g.sizes)}), copying {_gib(g.copied_bytes)} in {g.calls} calls, "
            f"{_gib(g.recopied_bytes)} of it old contents again ({fmt_us(grow_us)} of GPU time)"
        )
        advice.append(
            f"Preallocate the tensor {g.op} keeps regrowing at its final size (a static KV cache) and write each "
            f"step's slice in place (cache[:, :, pos] = new or index_copy_): that stops {_gib(g.recopied_bytes)} of "
            f"copies in this window ({_gib(g.recopied_bytes / max(ctx.n_steps, 1))} per {ctx.unit}, growing with every "
            "step)."
        )
    if not title_parts and mem is not None:
        title_parts.append(
            f"No allocator calls in the window; memory peaks at {_gib(mem.peak_allocated)} allocated"
            + (
                f" ({_gib(mem.peak_reserved)} reserved)"
                if mem.peak_reserved
                else " (relative to the recording's start)"
            )
            + f", churning {_gib(mem.allocated_per_step)} per {ctx.unit}"
        )
        advice.append("Nothing to change for allocation: the caching allocator serves every request.")
    if not title_parts:
        return []
    ranked = sorted(by_site.items(), key=lambda kv: (kv[1][0], kv[1][2]), reverse=True)[:MAX_SITES]
    sites = [
        Site(
            description=f"{api} in {op}", count=int(n), time_us=idle, host_us=h, ops=(op,), api=api,
            source=src_of[(api, op, label)], kind="empty_cache" if "empty_cache" in op else "allocator_call",
        )
        for (api, op, label), (idle, n, h) in ranked
    ]  # fmt: skip
    for g in growth[:MAX_SITES]:
        sites.append(
            Site(
                description=f"{g.op} grows dim {g.dim} from {min(g.sizes)} to {max(g.sizes)}: {_gib(g.copied_bytes)} "
                f"copied, {_gib(g.recopied_bytes)} of it again",
                count=g.calls, time_us=g.gpu_us, ops=(g.op,), source=g.source, steps=tuple(sorted(g.steps)),
                kind="growing_cat",
            )
        )  # fmt: skip
    evidence = [
        Metric("GPU idle in allocator calls", idle_us, "us"),
        Metric("allocator calls in the window", len(rows), "count"),
        Metric("of them frees (device-wide syncs)", n_free, "count"),
        Metric("host time in them", host_us, "us"),
        Metric("torch.cuda.empty_cache() calls", empty_cache, "count"),
        Metric("pinned host allocations in the window", pinned, "count"),
        Metric("allocator calls in start-up (not blamed)", len(before), "count"),
        Metric("host time in start-up allocator calls (not blamed)", startup_host_us, "us"),
    ]
    if growth:
        evidence += [
            Metric("bytes copied by growing cats", sum(g.copied_bytes for g in growth), "bytes"),
            Metric("of them re-copied old contents (a static buffer saves)", sum(g.recopied_bytes for g in growth),
                   "bytes"),
            Metric("GPU time of the growing cats", grow_us, "us"),
        ]  # fmt: skip
    if mem is not None:
        evidence += [
            Metric("peak allocated" + (" (relative)" if mem.relative else ""), mem.peak_allocated, "bytes"),
            Metric("peak reserved", mem.peak_reserved, "bytes"),
            Metric("bytes allocated per step (churn)", mem.allocated_per_step, "bytes"),
            Metric("bytes freed per step", mem.freed_per_step, "bytes"),
            Metric("reserved minus allocated at the peak (fragmentation)", mem.fragmentation_at_peak, "bytes"),
            Metric("[memory] events in the window", mem.events, "count"),
        ]
        evidence += [Metric(f"allocated by {op}", b, "bytes") for op, b, _, _ in mem.top_ops[:5]]
    gain_note = "the idle spent in allocator calls, gone when the cache serves every allocation"
    if growth:
        gain_note += "; plus the growing cats' GPU time, gone with a preallocated buffer written in place"
    return [
        Finding(
            category=Category.ALLOCATION,
            severity=severity_for(share),
            title="; ".join(title_parts),
            time_us=time_us,
            share=share,
            advice="\n".join(advice),
            expected_gain_us=time_us,
            gain_note=gain_note,
            evidence=tuple(evidence),
            sites=tuple(sites),
            sources=tuple(dict.fromkeys(s.source for s in sites if s.source is not None)),
            device=dev.device,
            tags=tuple(
                t
                for t, on in (
                    ("empty_cache", empty_cache),
                    ("growing_tensor", growth),
                    ("memory_events", mem is not None),
                )
                if on
            ),
        )
    ]


def _gib(b: float) -> str:
    b = float(b)
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(b) >= size:
            return f"{b / size:.1f} {unit}"
    return f"{b:.0f} B"


def _varying_alloc_sites(ctx: AnalysisContext) -> str:
    sites = [s for s in ctx.shape_sites if s.alloc_calls > 0]
    if not sites:
        return ""
    s = sites[0]
    return f"{s.op}{' ' + s.source.where if s.source else ''}: {describe_shapes(s.shapes)}"


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
    for r in rows:
        dims = model.op_shapes(int(r)).get("Input Dims")
        tensors = dims[0] if isinstance(dims, list) and dims and isinstance(dims[0], list) else None
        if not tensors or not all(isinstance(t, list) and t and all(isinstance(x, int) for x in t) for t in tensors):
            continue
        src = user_source(model, int(r))
        key = (model.arrays.name(int(r)), src.label if src else "")
        sites.setdefault(key, CatGrowth(key[0], src))
        shapes_of[key].append((int(r), tensors))
    launch_gpu = _cat_kernels(model, dev.window_start, dev.window_end)
    spans = sorted(ctx.window.steps, key=lambda s: s.start_us)
    starts = np.array([s.start_us for s in spans]) if spans else np.empty(0)
    out: list[CatGrowth] = []
    for key, calls in shapes_of.items():
        g = sites[key]
        big = [max(t, key=lambda d: int(np.prod(d))) for _, t in calls]
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
            numel = sum(int(np.prod(t)) for t in tensors)
            e = elem or g.elem_bytes or 4
            g.copied_bytes += numel * e
            g.recopied_bytes += int(np.prod(largest)) * e
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
