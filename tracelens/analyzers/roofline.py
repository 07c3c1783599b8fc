"""Roofline: for every kernel, how much work it did, how fast, and what bounds it.

Questions 3 and 6. Each op call's FLOPs and bytes (op_costs) are spread over the
kernels it launched in proportion to their time; kernels are then grouped by name.
Per group: achieved FLOP/s and bytes/s, arithmetic intensity (FLOP per byte), the
roof at that intensity, min(peak FLOP/s, intensity x bandwidth), and the share of it
reached. `bound`:
- latency: kernels too short (LATENCY_US) or reaching under LATENCY_ROOF_SHARE of their
  roof: too little work or parallelism to fill the GPU;
- memory: intensity below the ridge point (peak / bandwidth);
- compute: above it.
Communication kernels (NCCL/RCCL) are left out of the roofline. A kernel whose model
gives more than the peak is reported as a model error, never as > 100 % efficient.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from tracelens.analyzers.base import Category, Finding, Metric, Site, severity_for
from tracelens.analyzers.context import AnalysisContext, fmt_us
from tracelens.analyzers.op_costs import OpCost, op_cost
from tracelens.model.peaks import DevicePeaks, peaks_for
from tracelens.model.trace import TraceModel

#: Kernels shorter than this on average are latency-bound whatever their intensity: the
#: launch and ramp-up of a kernel take a few µs on current GPUs.
LATENCY_US = 4.0
#: Reaching less than this share of the roof means the kernel is not limited by either
#: roof but by latency or too little parallelism.
LATENCY_ROOF_SHARE = 0.1
#: A model giving more than this share of the peak is wrong, not fast.
MODEL_ERROR_SHARE = 1.1
COMM_MARKERS = ("nccl", "rccl", "allreduce", "all_reduce", "allgather", "reduce_scatter", "sendrecv", "multimem")
MAX_SITES = 8
#: Families whose FLOPs belong to the op's main kernel only.
MATH_FAMILIES = frozenset({"matmul", "conv", "attention"})
#: Ops whose kernels are collectives whatever the kernel is called.
COMM_OPS = ("record_param_comms", "c10d::", "nccl:", "symm_mem::", "_c10d_functional::")
#: Kernel-name fragments of tensor-core kernels, which run fp32 matmuls as TF32.
TF32_KERNEL_MARKERS = (
    "tensorop",
    "tf32",
    "s1688",
    "s16816",
    "xmma",
    "nvjet",
    "cutlass_80",
    "cutlass_90",
    "sm80_",
    "sm90_",
)


@dataclass(frozen=True)
class KernelRoof:
    name: str
    count: int
    time_us: float
    flops: float
    bytes: float
    dtype: str
    family: str
    tensor_core: bool
    flops_per_s: float
    bytes_per_s: float
    intensity: float
    roof_flops_per_s: float
    roof_share: float
    bound: str  # memory, compute, latency, communication, unknown


@dataclass(frozen=True)
class Roofline:
    peaks: DevicePeaks | None
    kernels: tuple[KernelRoof, ...]
    modelled_us: float
    unmodelled_us: float
    communication_us: float
    model_errors: int

    @property
    def coverage(self) -> float:
        total = self.modelled_us + self.unmodelled_us
        return self.modelled_us / total if total > 0 else 0.0


def compute_roofline(model: TraceModel, device: int | None, window: tuple[float, float]) -> Roofline:
    memo = model.memo
    key = ("roofline", device, window)
    if key in memo:
        return memo[key]  # type: ignore[no-any-return]
    dev = model.meta.device(device) if device is not None else model.meta.primary_device
    peaks = peaks_for(dev.name if dev else None)
    k = model.kernels()
    if device is not None:
        k = k[k["device"] == device]
    k = k[(k["end"] > window[0]) & (k["ts"] < window[1])]
    names = k["name"].astype(str).to_numpy()
    dur = k["dur"].to_numpy()
    launch = k["launch"].to_numpy()
    op_rows = np.where(launch >= 0, model.arrays.op[np.clip(launch, 0, None)], -1) if len(model.host) else launch
    # Each op's bytes are shared by its kernels in proportion to their time; for math-heavy
    # families the FLOPs go to the op's longest kernel (the GEMM, not the layout
    # transforms cuDNN runs beside it).
    op_time: dict[int, float] = defaultdict(float)
    op_longest: dict[int, int] = {}
    for i, (r, d) in enumerate(zip(op_rows, dur, strict=True)):
        if r >= 0:
            r = int(r)
            op_time[r] += float(d)
            if r not in op_longest or d > dur[op_longest[r]]:
                op_longest[r] = i
    costs: dict[int, OpCost | None] = {}
    groups: dict[str, list[float]] = {}
    meta: dict[str, tuple[str, str, bool]] = {}
    modelled = unmodelled = comm = 0.0
    for i, (name, d, r) in enumerate(zip(names, dur, op_rows, strict=True)):
        d = float(d)
        lname = name.lower()
        if any(m in lname for m in COMM_MARKERS) or (r >= 0 and model.arrays.name(int(r)).startswith(COMM_OPS)):
            comm += d
            continue
        cost = None
        if r >= 0:
            r = int(r)
            if r not in costs:
                try:
                    costs[r] = op_cost(model.arrays.name(r), model.op_shapes(r))
                except (ValueError, TypeError, IndexError, KeyError, ZeroDivisionError):
                    costs[r] = None
            cost = costs[r]
        g = groups.setdefault(name, [0.0, 0.0, 0.0, 0.0, 0.0])
        g[0] += 1
        g[1] += d
        if cost is None or op_time.get(r, 0.0) <= 0:
            unmodelled += d
            continue
        frac = d / op_time[r]
        if cost.family in MATH_FAMILIES:
            g[2] += cost.flops if op_longest.get(r) == i else 0.0
        else:
            g[2] += cost.flops * frac
        g[3] += cost.bytes * frac
        g[4] += d
        meta.setdefault(name, (cost.dtype, cost.family, cost.tensor_core))
        modelled += d
    rows = []
    errors = 0
    for name, (count, time_us, flops, nbytes, mtime) in groups.items():
        dtype, family, tc = meta.get(name, ("", "", False))
        if mtime <= 0 or peaks is None:
            rows.append(KernelRoof(name, int(count), time_us, 0, 0, dtype, family, tc, 0, 0, 0, 0, 0, "unknown"))
            continue
        fps = flops / (mtime * 1e-6)
        bps = nbytes / (mtime * 1e-6)
        ai = flops / nbytes if nbytes > 0 else float("inf")
        # fp32 matmuls and convolutions on tensor-core kernels run TF32.
        tf32 = dtype == "fp32" and tc and any(t in name.lower() for t in TF32_KERNEL_MARKERS)
        peak = peaks.flops.get("tf32", 0.0) if tf32 and "tf32" in peaks.flops else peaks.peak(dtype, tc)
        winograd = "winograd" in name.lower()
        roof = min(peak, ai * peaks.bw) if ai != float("inf") else peak
        share = (fps / roof) if roof > 0 and flops > 0 else (bps / peaks.bw if peaks.bw else 0.0)
        if winograd:
            # Winograd convolutions do fewer multiplies than the direct FLOPs we count:
            # their "FLOP/s" can pass the peak without the model being wrong.
            share = min(share, 1.0)
        # Errors are judged against the datasheet: a measured ceiling (e.g. a copy's) can be
        # beaten a little by other kernels.
        hard_peak = max(peak, peaks.flops.get("tf32" if tf32 else dtype, 0.0))
        hard_bw = max(peaks.bw, peaks.bandwidth)
        if not winograd and (fps > MODEL_ERROR_SHARE * hard_peak or bps > MODEL_ERROR_SHARE * hard_bw):
            errors += 1
            bound = "unknown"
        elif time_us / count < LATENCY_US or share < LATENCY_ROOF_SHARE:
            bound = "latency"
        elif peak and ai < peak / peaks.bw:
            bound = "memory"
        else:
            bound = "compute"
        rows.append(KernelRoof(name, int(count), time_us, flops, nbytes, dtype, family, tc, fps, bps, ai, roof,
                               share, bound))  # fmt: skip
    rows.sort(key=lambda r: -r.time_us)
    result = Roofline(peaks, tuple(rows), modelled, unmodelled, comm, errors)
    memo[key] = result
    return result


def for_context(ctx: AnalysisContext) -> Roofline:
    dev = ctx.gpu_time.primary
    window = (dev.window_start, dev.window_end) if dev else (0.0, ctx.model.span_us)
    return compute_roofline(ctx.model, dev.device if dev else None, window)


def _gain_to_roof(r: KernelRoof) -> float:
    """Time saved if the kernel group ran at its roof."""
    return r.time_us * max(1.0 - r.roof_share, 0.0) if r.roof_share > 0 else 0.0


def _sites(rows: list[KernelRoof], describe: Callable[[KernelRoof], str]) -> tuple[Site, ...]:
    """The costliest kernel groups as finding sites."""
    return tuple(
        Site(description=describe(r), count=r.count, time_us=r.time_us, kernels=(r.name,)) for r in rows[:MAX_SITES]
    )


def analyze(ctx: AnalysisContext) -> list[Finding]:
    roof = for_context(ctx)
    if roof.peaks is None or not roof.kernels:
        return []
    findings = []
    mem = [r for r in roof.kernels if r.bound == "memory"]
    mem_time = sum(r.time_us for r in mem)
    if mem_time > 0:
        elementwise = [r for r in mem if r.family in ("elementwise", "copy")]
        compiled = [r for r in mem if r.family == "compiled"]
        ew_time = sum(r.time_us for r in elementwise)
        copies = [r for r in mem if r.family == "copy"]
        copy_time = sum(r.time_us for r in copies)
        copy_bytes = sum(r.bytes for r in copies)
        # Fusing a chain of elementwise passes into one removes all but one round trip to
        # memory; without chain detection we claim half of the elementwise/copy time.
        gain = 0.5 * ew_time + sum(_gain_to_roof(r) for r in mem if r not in elementwise)
        share = ctx.share(mem_time)
        findings.append(
            Finding(
                category=Category.MEMORY_BOUND,
                severity=severity_for(ctx.share(gain)),
                title=(
                    f"{fmt_us(mem_time)} ({share:.0%}) of the profiled time is in memory-bound kernels, "
                    f"{fmt_us(ew_time)} of it elementwise ops and copies"
                ),
                time_us=mem_time,
                share=share,
                advice=(
                    "These kernels wait on memory, not arithmetic: fuse chains of elementwise ops so data "
                    "makes one round trip instead of one per op (torch.compile does this), avoid copies and "
                    "casts (.contiguous(), .to(dtype) inside the step), keep activations in bf16, and reuse "
                    "buffers in place where autograd allows."
                ),
                expected_gain_us=gain,
                gain_note=(
                    "half the elementwise and copy time (fusing passes; an estimate, no chain detection yet) plus "
                    "the other memory-bound kernels' distance to the bandwidth roof"
                ),
                evidence=(
                    Metric("memory-bound kernel time", mem_time, "us"),
                    Metric("elementwise and copy kernels", ew_time, "us"),
                    Metric("copies and casts", copy_time, "us"),
                    Metric("bytes copied or cast", copy_bytes, "bytes"),
                    Metric("bandwidth roof (bytes/s)", roof.peaks.bw, "bytes_per_s"),
                    Metric("modelled share of kernel time", roof.coverage, "share"),
                    Metric(
                        "compiled (Triton) kernels, modelled from their buffers (FLOPs a guess)",
                        sum(r.time_us for r in compiled),
                        "us",
                    ),
                ),
                sites=_sites(
                    mem,
                    lambda r: (
                        f"{r.family or 'kernel'}: {r.bytes_per_s / 1e9:.0f} GB/s "
                        f"({r.roof_share:.0%} of the roof), {r.intensity:.2f} FLOP/B"
                    ),
                ),
            )
        )
    comp = [r for r in roof.kernels if r.bound == "compute"]
    comp_time = sum(r.time_us for r in comp)
    if comp_time > 0:
        fp32_mm = [r for r in comp if r.tensor_core and r.dtype == "fp32"]
        fp32_time = sum(r.time_us for r in fp32_mm)
        tf32 = roof.peaks.flops.get("tf32", 0.0)
        fp32_gain = fp32_time * (1 - roof.peaks.flops.get("fp32", 0.0) / tf32) if tf32 else 0.0
        eff = sum(r.time_us * r.roof_share for r in comp) / comp_time
        gain = fp32_gain + sum(_gain_to_roof(r) for r in comp if r not in fp32_mm)
        share = ctx.share(comp_time)
        advice = (
            "These kernels are limited by arithmetic: check their efficiency against the peak (the table), "
            "use bf16/fp16 (or fp8 where accuracy allows) so they run on tensor cores, and keep matmul shapes "
            "aligned and wave-friendly (the matmul findings)."
        )
        if fp32_time:
            advice += (
                f" {fmt_us(fp32_time)} of fp32 matmuls run on CUDA cores: "
                "torch.backends.cuda.matmul.allow_tf32 = True (or torch.set_float32_matmul_precision('high')) "
                "moves them to tensor cores."
            )
        findings.append(
            Finding(
                category=Category.COMPUTE_BOUND,
                severity=severity_for(ctx.share(gain)),
                title=(
                    f"{fmt_us(comp_time)} ({share:.0%}) of the profiled time is in compute-bound kernels at "
                    f"{eff:.0%} of their peak on average"
                ),
                time_us=comp_time,
                share=share,
                advice=advice,
                expected_gain_us=gain,
                gain_note="each compute-bound kernel's distance to its roof, plus fp32 matmuls at the TF32 peak",
                evidence=(
                    Metric("compute-bound kernel time", comp_time, "us"),
                    Metric("time-weighted share of the roof", eff, "share"),
                    Metric("fp32 matmul time", fp32_time, "us"),
                    Metric("peak used (bf16 FLOP/s)", roof.peaks.peak("bf16", True), "number"),
                ),
                sites=_sites(
                    comp,
                    lambda r: (
                        f"{r.family or 'kernel'} {r.dtype}: {r.flops_per_s / 1e12:.0f} TFLOP/s "
                        f"({r.roof_share:.0%} of the roof), {r.intensity:.0f} FLOP/B"
                    ),
                ),
            )
        )
    return findings


def bound_of(ctx: AnalysisContext) -> dict[str, str]:
    """Kernel name -> bound, for the report's kernel table."""
    return {r.name: r.bound for r in for_context(ctx).kernels}
