"""allocation: the GPU idles while the host is inside the allocator's runtime calls.

Question 5 of the diagnostic order, from the runtime calls (the `[memory]`-event view of
churn and fragmentation is not built yet). PyTorch's caching allocator makes cudaMalloc
rare once a program reaches its steady state; cudaMalloc/cudaFree in the analysed window
mean the cache keeps missing (changing sizes, a growing tensor, `empty_cache()` in the
loop) or pinned host buffers allocated per step. cudaFree synchronises the device, and
both take host time while the GPU waits for the next launch. The ledger gives the time
(idle gaps the host spent mostly inside allocator calls); here we name the calls, the op
and the source that made them.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from tracelens.analyzers.base import Category, Finding, Metric, Site, severity_for
from tracelens.analyzers.context import AnalysisContext, fmt_us
from tracelens.derive.apis import ALLOC_APIS
from tracelens.derive.ledger import overlap
from tracelens.model.schema import Kind
from tracelens.model.sources import PySource, op_chain, user_source
from tracelens.model.trace import name_matches

MAX_SITES = 8
#: Calls that free device memory: they wait for the device to finish with it.
FREE_APIS = ("cudaFree", "hipFree", "cuMemFree_v2")


def analyze(ctx: AnalysisContext) -> list[Finding]:
    dev = ctx.ledger.primary
    if dev is None:
        return []
    idle_us = dev.by_cause.get("allocation", 0.0)
    model = ctx.model
    host = model.host
    is_call = np.isin(host["kind"].to_numpy(), [int(Kind.RUNTIME), int(Kind.DRIVER)])
    rows = host.index[is_call & name_matches(host["name"], ALLOC_APIS.__contains__)].to_numpy()
    ts = host["ts"].to_numpy()
    end = host["end"].to_numpy()
    rows = rows[(end[rows] > dev.window_start) & (ts[rows] < dev.window_end)] if len(rows) else rows
    if not len(rows):
        return []
    gaps = dev.gaps[dev.gaps["cause"] == "allocation"]
    iv = gaps[["start", "end"]].to_numpy() if len(gaps) else np.empty((0, 2))
    idle_in = overlap(iv, ts[rows], end[rows]) if len(iv) else np.zeros(len(rows))
    by_site: dict[tuple[str, str, str], list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
    src_of: dict[tuple[str, str, str], PySource | None] = {}
    empty_cache = 0
    for r, idle in zip(rows, idle_in, strict=True):
        api = model.arrays.name(int(r))
        ops = op_chain(model, int(r))
        if any("empty_cache" in o for o in ops):
            empty_cache += 1
        src = user_source(model, int(r))
        key = (api, ops[0] if ops else "(no enclosing op)", src.label if src else "")
        by_site[key][0] += float(idle)
        by_site[key][1] += 1
        by_site[key][2] += float(end[r] - ts[r])
        src_of[key] = src
    host_us = float((end[rows] - ts[rows]).sum())
    n_free = sum(1 for r in rows if model.arrays.name(int(r)).startswith(FREE_APIS))
    per_step = len(rows) / ctx.n_steps
    share = ctx.share(idle_us)
    advice = [
        "The caching allocator should make allocator calls rare in the steady state; here they keep happening "
        f"({per_step:.1f} per step)." if ctx.n_steps > 1 else
        "The caching allocator should make allocator calls rare in the steady state; here they keep happening.",
    ]  # fmt: skip
    if empty_cache:
        advice.append(
            f"torch.cuda.empty_cache() runs in the loop ({empty_cache} calls): remove it; it hands memory back to "
            "the driver only for the next step to ask for it again."
        )
    advice.append(
        "Keep shapes stable (pad to a few bucket sizes) so cached blocks are reused, preallocate buffers that grow "
        "(a static KV cache instead of torch.cat), allocate pinned host buffers once, and run a warm-up step before "
        "measuring. Where memory is fragmented, PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True lets the cache "
        "grow segments instead of calling cudaMalloc."
    )
    if n_free:
        advice.append(f"{n_free} of the calls free device memory: cudaFree synchronises the whole device.")
    ranked = sorted(by_site.items(), key=lambda kv: (kv[1][0], kv[1][2]), reverse=True)[:MAX_SITES]
    sites = tuple(
        Site(
            description=f"{api} in {op}", count=int(n), time_us=idle, host_us=h, ops=(op,), api=api,
            source=src_of[(api, op, label)],
        )
        for (api, op, label), (idle, n, h) in ranked
    )  # fmt: skip
    return [
        Finding(
            category=Category.ALLOCATION,
            severity=severity_for(share),
            title=(
                f"GPU idles {fmt_us(idle_us)} ({share:.0%} of the window) while the host is in {len(rows):,} "
                f"allocator calls ({fmt_us(host_us)} of host time)"
            ),
            time_us=idle_us,
            share=share,
            advice="\n".join(advice),
            expected_gain_us=idle_us,
            gain_note="the idle spent in allocator calls, gone when the cache serves every allocation",
            evidence=(
                Metric("GPU idle in allocator calls", idle_us, "us"),
                Metric("allocator calls in the window", len(rows), "count"),
                Metric("of them frees (device-wide syncs)", n_free, "count"),
                Metric("host time in them", host_us, "us"),
                Metric("torch.cuda.empty_cache() calls", empty_cache, "count"),
            ),
            sites=sites,
            sources=tuple(dict.fromkeys(s.source for s in sites if s.source is not None)),
            device=dev.device,
        )
    ]
