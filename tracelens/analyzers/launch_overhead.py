"""launch_overhead: the GPU idles between tiny kernels because the host can't launch
them fast enough.

Question 2 of the diagnostic order. In eager mode every op costs the host 5-30 µs
(Python, aten dispatch, cudaLaunchKernel); a kernel that runs for 2 µs leaves the GPU
waiting for the next one. the ledger marks a gap "launch_overhead" when the next launch call began
after the GPU drained and the gap is short; this analyzer adds up those gaps, finds the
stretches where they dominate, and names the code that issues them.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracelens.analyzers.base import Category, Fact, Found, Place
from tracelens.derive.context import AnalysisContext
from tracelens.domain import LAUNCH_APIS, NO_ENCLOSING_OP
from tracelens.model.schema import Kind
from tracelens.model.sources import PySource, user_sources
from tracelens.model.trace import name_matches

#: Kernels shorter than this cannot hide the host's per-launch cost (launch API median
#: is 3-12 µs in the real traces), so a stream of them is launch-bound by construction.
TINY_KERNEL_US = 10.0

#: A launch-bound region: at least this many kernels in a row...
REGION_MIN_KERNELS = 20
#: ...where launch gaps are at least this share of the region's span.
REGION_MIN_LAUNCH_SHARE = 0.3

#: Replayed from a CUDA graph, kernels start back to back with about this gap (the
#: device's own kernel-to-kernel latency on recent GPUs), which bounds the gain.
GRAPH_REPLAY_GAP_US = 1.0

MAX_SITES = 8

#: Ops whose launch storms have a known one-line fix (tracelens.explain words it), checked
#: against the op names of the costliest sites.
KNOWN_FIX_OPS = ("zero_grad", "Optimizer.step", "AccumulateGrad")


@dataclass(frozen=True)
class LaunchFacts:
    gaps: int
    median_kernel_us: float
    tiny_share: float  # of the kernels under TINY_KERNEL_US
    host_per_kernel_us: float  # host time per kernel in the launch-bound regions (0: none)
    graph_launches: int
    known_fixes: tuple[str, ...]  # KNOWN_FIX_OPS met at the costliest sites


@dataclass(frozen=True)
class Launcher:
    op: str  # the outermost op that launched the kernels after the gaps


def analyze(ctx: AnalysisContext) -> list[Found[LaunchFacts, Launcher]]:
    dev = ctx.ledger.primary
    if dev is None:
        return []
    model = ctx.model
    gaps = dev.gaps
    launch_gaps = dev.gaps_of("launch_overhead")
    launch_idle = float(launch_gaps["dur"].sum())
    if launch_idle <= 0:
        return []

    gpu = model.gpu
    act = gpu[
        (gpu["device"] == dev.device)
        & gpu["kind"].isin([int(Kind.KERNEL), int(Kind.MEMCPY), int(Kind.MEMSET)])
        & (gpu["end"] > dev.window_start)
        & (gpu["ts"] < dev.window_end)
    ]
    kernels = act[act["kind"] == Kind.KERNEL]
    n_kernels = len(kernels)
    kdur = kernels["dur"].to_numpy()
    tiny_share = float((kdur < TINY_KERNEL_US).mean()) if n_kernels else 0.0
    median_kernel = float(np.median(kdur)) if n_kernels else 0.0

    host = model.host
    calls = host[(host["kind"] == Kind.RUNTIME) | (host["kind"] == Kind.DRIVER)]
    launch_calls = calls[name_matches(calls["name"], LAUNCH_APIS.__contains__)]
    in_window = launch_calls[(launch_calls["ts"] >= dev.window_start) & (launch_calls["ts"] <= dev.window_end)]
    launches_per_s = len(in_window) / (dev.window_us / 1e6) if dev.window_us > 0 else 0.0
    median_launch_api = float(in_window["dur"].median()) if len(in_window) else 0.0  # no launch calls recorded

    regions = dev.regions
    in_region = launch_gaps["in_region"].to_numpy(dtype=bool) if "in_region" in launch_gaps else np.zeros(0, bool)
    region_launch_idle = float(launch_gaps["dur"].to_numpy()[in_region].sum()) if len(in_region) else 0.0
    region_kernels = sum(n for _, _, n in regions)
    region_span = sum(b - a for a, b, _ in regions)
    # Host time per kernel in the launch-bound regions: what each kernel costs the host to
    # launch. The region's gaps the ledger gives other causes (a time.sleep, one slow piece
    # of host work, a sync) are no launch work: light_idle's 20 sleeps of 50 ms made it
    # "2615.9 µs of host time per kernel" for kernels launched ~35 µs apart.
    if "in_region" in gaps and len(gaps):
        other = gaps["in_region"].to_numpy(dtype=bool) & (gaps["cause"].to_numpy() != "launch_overhead")
        region_span -= float(gaps["dur"].to_numpy()[other].sum())
    host_per_kernel = max(region_span, 0.0) / region_kernels if region_kernels else 0.0
    graphs = int(name_matches(in_window["name"], lambda n: "GraphLaunch" in n).sum()) if len(in_window) else 0

    # Where the launch gaps come from: the code that launched the kernel after each gap.
    places = _places(ctx, launch_gaps)
    gain = max(launch_idle - len(launch_gaps) * GRAPH_REPLAY_GAP_US, 0.0)
    known = tuple(
        key
        for key in KNOWN_FIX_OPS
        if any(key in op for place in places[:3] if place.time_us > 0.2 * launch_idle for op in place.ops)
    )
    facts = LaunchFacts(
        gaps=len(launch_gaps),
        median_kernel_us=median_kernel,
        tiny_share=tiny_share,
        host_per_kernel_us=host_per_kernel,
        graph_launches=graphs,
        known_fixes=known,
    )
    return [
        Found(
            category=Category.LAUNCH_OVERHEAD,
            time_us=launch_idle,
            expected_gain_us=gain,
            facts=facts,
            evidence=(
                Fact("launch_gap_us", launch_idle, "us"),
                Fact("launch_gaps", len(launch_gaps), "count"),
                Fact("kernels", n_kernels, "count"),
                Fact("median_kernel_us", median_kernel, "us", total=False),
                Fact("tiny_kernel_share", tiny_share, "share"),
                Fact("launches_per_s", launches_per_s, "per_s"),
                Fact("median_launch_call_us", median_launch_api, "us", total=False),
                Fact("launch_bound_regions", len(regions), "count"),
                Fact("region_kernels", region_kernels, "count"),
                Fact("region_host_per_kernel_us", host_per_kernel, "us", total=False),
                Fact("region_launch_gap_us", region_launch_idle, "us"),
                Fact("graph_launches", graphs, "count"),
            ),
            places=places,
            sources=tuple(dict.fromkeys(p.source for p in places if p.source is not None)),
            device=dev.device,
        )
    ]


def _places(ctx: AnalysisContext, launch_gaps: pd.DataFrame) -> tuple[Place[Launcher], ...]:
    model = ctx.model
    host = model.host
    op_root = host["op_root"].to_numpy()
    gpu_codes = model.gpu["name"].cat.codes.to_numpy()
    gpu_table = [str(c) for c in model.gpu["name"].cat.categories]
    lrows = launch_gaps["launch_row"].to_numpy()
    nrows = launch_gaps["next_row"].to_numpy()
    durs = launch_gaps["dur"].to_numpy().astype(np.float64)
    valid = lrows >= 0
    if not bool(valid.any()):
        return ()
    lrows, nrows, durs = lrows[valid], nrows[valid], durs[valid]
    roots = op_root[lrows]
    kernel_codes = gpu_codes[np.clip(nrows, 0, None)] if len(gpu_codes) else nrows
    # Per anchor (the launch's outermost op, else the launch): its site key and source,
    # worked out once, in the order the gaps first meet them; a decode loop launches
    # from the same few thousand ops' rows.
    anchors = np.where(roots >= 0, roots, lrows)
    distinct, first, inverse = np.unique(anchors, return_index=True, return_inverse=True)
    key_id: dict[tuple[str, str], int] = {}
    keys: list[tuple[str, str]] = []
    anchor_key = np.empty(len(distinct), dtype=np.int64)
    slots = np.argsort(first, kind="stable")
    srcs: list[PySource | None] = user_sources(model, distinct[slots])
    labels: dict[int, str] = {}  # by the source object's id: one label string per object
    for slot, src in zip(slots.tolist(), srcs, strict=True):
        root = int(roots[first[slot]])  # as the first gap with this anchor has it
        op_name = model.arrays.name(root) if root >= 0 else NO_ENCLOSING_OP
        label = ""
        if src is not None:
            label = labels.get(id(src), "")
            if not label:
                label = labels[id(src)] = src.label
        key = (op_name, label)
        anchor_key[slot] = key_id.setdefault(key, len(key_id))
        if len(keys) < len(key_id):
            keys.append(key)
    src_at = np.empty(len(distinct), dtype=np.int64)
    src_at[np.argsort(first, kind="stable")] = np.arange(len(distinct))
    gap_key = anchor_key[inverse.reshape(-1)]
    # Sums in gap order, as the per-gap loop added them (bincount adds in input order).
    idle = np.bincount(gap_key, weights=durs, minlength=len(keys))
    count = np.bincount(gap_key, minlength=len(keys))
    # A key's source is that of the last gap's anchor with the key.
    last = len(gap_key) - 1 - np.unique(gap_key[::-1], return_index=True)[1]
    gap_anchor = inverse.reshape(-1)
    src_of = {k: srcs[int(src_at[gap_anchor[g]])] for k, g in enumerate(last.tolist())}
    ranked = sorted(range(len(keys)), key=lambda k: float(idle[k]), reverse=True)[:MAX_SITES]
    launched = nrows >= 0
    sites = []
    for k in ranked:
        op, _ = keys[k]
        kernels = Counter(gpu_table[c] for c in kernel_codes[launched & (gap_key == k)].tolist())
        sites.append(
            Place(
                count=int(count[k]),
                facts=Launcher(op),
                time_us=float(idle[k]),
                ops=(op,),
                source=src_of[k],
                kernels=tuple(name for name, _ in kernels.most_common(3)),
            )
        )
    return tuple(sites)
