"""Memory- and compute-bound kernels (questions 3 and 6), from the roofline
(tracelens.derive.roofline): fusible chains, copies and casts and the distance to the
bandwidth roof; the distance to the compute roofs, fp32 matmuls off tensor cores and
instruction-bound elementwise kernels.
"""

from __future__ import annotations

from collections.abc import Callable

from tracelens.analyzers.base import Category, Finding, Metric, Site, severity_for
from tracelens.analyzers.context import AnalysisContext
from tracelens.derive.fusion import FUSIBLE_FAMILIES
from tracelens.derive.kernel_models import L2_ROOF_NAME, legacy_coefficients
from tracelens.derive.roofline import KernelRoof, Roofline, for_context
from tracelens.domain import fmt_us
from tracelens.model.sources import user_source

MAX_SITES = 8


MAX_CHAINS = 8


def _gain_to_roof(r: KernelRoof) -> float:
    """Time saved if the kernel group ran at the rate it can sustain: the ceiling measured
    on this GPU where there is one (790 TFLOP/s bf16, 4.3 TB/s on the H200: the datasheet
    roof is not reachable on random data under the power cap), else the datasheet roof."""
    if r.roof_share <= 0 or r.roof_value <= 0:
        return 0.0
    reachable = min(r.measured_ceiling, r.roof_value) if r.measured_ceiling > 0 else r.roof_value
    return r.bound_us * max(1.0 - r.roof_share * r.roof_value / reachable, 0.0)


def _ledger_capped(ctx: AnalysisContext, cause: str, kernel_us: float) -> float:
    dev = ctx.ledger.primary
    return min(kernel_us, dev.by_cause.get(cause, 0.0)) if dev is not None else kernel_us


def _sites(rows: list[KernelRoof], describe: Callable[[KernelRoof], str]) -> tuple[Site, ...]:
    """The costliest kernel groups as finding sites."""
    return tuple(
        Site(description=describe(r), count=r.count, time_us=r.bound_us, kernels=(r.name,)) for r in rows[:MAX_SITES]
    )


def analyze(ctx: AnalysisContext) -> list[Finding]:
    roof = for_context(ctx)
    if roof.peaks is None or not roof.kernels:
        return []
    found = (_memory_finding(ctx, roof), _compute_finding(ctx, roof))
    return [f for f in found if f is not None]


def _memory_finding(ctx: AnalysisContext, roof: Roofline) -> Finding | None:
    """The memory-bound kernels: fusible chains, copies and casts, distance to the bandwidth roof."""
    assert roof.peaks is not None
    mem = [r for r in roof.kernels if r.bound == "memory"]
    # The ledger's share of the window: kernels overlapping on several streams count once.
    mem_time = _ledger_capped(ctx, "gpu_busy_memory", sum(r.bound_us for r in mem))
    if mem_time <= 0:
        return None
    elementwise = [r for r in mem if r.family in ("elementwise", "copy")]
    compiled = [r for r in mem if r.family == "compiled"]
    ew_time = sum(r.bound_us for r in elementwise)
    copies = [r for r in mem if r.family == "copy"]
    copy_time = sum(r.bound_us for r in copies)
    copy_bytes = sum(r.bytes for r in copies)
    # A chain of n passes fused makes about one: it saves all but its longest kernel.
    # Other memory-bound kernels can at best reach the bandwidth roof.
    chains = roof.chains
    chain_saved = sum(c.saved_us for c in chains)
    gain = chain_saved + sum(_gain_to_roof(r) for r in mem if r.family not in FUSIBLE_FAMILIES)
    share = ctx.share(mem_time)
    chain_sites = tuple(
        Site(
            description=(
                f"{len(c.ops)} passes back to back: {' > '.join(op.split('::')[-1] for op in c.ops[:6])}"
                f"{' > ...' if len(c.ops) > 6 else ''}; "
                f"fused, about one pass ({fmt_us(c.saved_us)} saved)"
            ),
            count=c.count,
            time_us=c.time_us,
            ops=c.ops,
            source=user_source(ctx.model, c.first_row),
            kernels=c.kernels,
            kind="fusion_chain",
        )
        for c in chains[:MAX_CHAINS]
    )
    kernel_sites = _sites(mem, _memory_site)
    spilling = [r for r in mem if r.roof_name == L2_ROOF_NAME]
    return Finding(
        category=Category.MEMORY_BOUND,
        severity=severity_for(ctx.share(gain)),
        title=(
            f"{fmt_us(mem_time)} ({share:.0%}) of the profiled time is in memory-bound kernels; "
            f"{sum(c.count for c in chains)} chains of back-to-back elementwise/norm passes could fuse"
            if chains
            else f"{fmt_us(mem_time)} ({share:.0%}) of the profiled time is in memory-bound kernels, "
            f"{fmt_us(ew_time)} of it elementwise ops and copies"
        ),
        time_us=mem_time,
        share=share,
        advice=(
            "These kernels wait on memory, not arithmetic: fuse chains of elementwise ops so data "
            "makes one round trip instead of one per op (torch.compile does this; the chains are listed "
            "with their source), avoid copies and casts (.contiguous(), .to(dtype) inside the step), keep "
            "activations in bf16, and reuse buffers in place where autograd allows."
            + (
                f" {fmt_us(sum(r.bound_us for r in spilling))} is fp32 memory-efficient attention spilling "
                "registers: its spills fill the L2 port while DRAM idles. Run attention in bf16/fp16 "
                "(torch.autocast), where SDPA picks the flash or cuDNN kernels, which keep their tiles on chip."
                if spilling
                else ""
            )
        ),
        expected_gain_us=gain,
        gain_note=(
            "each chain of back-to-back passes fused into one (all but its longest kernel saved; on the "
            "H200 eager-vs-compiled case this over-estimated the saving by 11%) plus the other "
            "memory-bound kernels' distance to the bandwidth roof"
        ),
        evidence=(
            Metric("memory-bound kernel time", mem_time, "us"),
            Metric("elementwise and copy kernels", ew_time, "us"),
            Metric("time in fusible chains", sum(c.time_us for c in chains), "us"),
            Metric("saved by fusing the chains (estimate)", chain_saved, "us"),
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
        sites=(chain_sites + kernel_sites)[:MAX_SITES],
    )


def _compute_finding(ctx: AnalysisContext, roof: Roofline) -> Finding | None:
    """The compute-bound kernels: distance to their roofs, fp32 matmuls off tensor cores,
    instruction-bound elementwise kernels."""
    assert roof.peaks is not None
    comp = [r for r in roof.kernels if r.bound == "compute"]
    comp_time = _ledger_capped(ctx, "gpu_busy_compute", sum(r.bound_us for r in comp))
    if comp_time <= 0:
        return None
    tf32 = roof.peaks.flops.get("tf32", 0.0)
    # fp32 matmuls and convolutions on CUDA cores, on a GPU that has TF32 (not V100/T4).
    fp32_mm = [r for r in comp if r.tensor_core and r.unit == "fp32" and r.dtype == "fp32"] if tf32 else []
    fp32_time = sum(r.bound_us for r in fp32_mm)
    fp32_gain = fp32_time * (1 - roof.peaks.flops.get("fp32", 0.0) / tf32) if tf32 else 0.0
    eff = sum(r.bound_us * r.roof_share for r in comp) / comp_time
    # A kernel in a fusion chain is the memory finding's to gain from (fusing removes
    # its pass): counting its distance to the roof here too would count it twice.
    in_chains = {name for c in roof.chains for name in c.kernels}
    gain = fp32_gain + sum(_gain_to_roof(r) for r in comp if r not in fp32_mm and r.name not in in_chains)
    share = ctx.share(comp_time)
    advice = (
        "These kernels are limited by arithmetic: check their efficiency against the peak (the table), "
        "use bf16/fp16 (or fp8 where accuracy allows) so they run on tensor cores, and keep matmul shapes "
        "aligned and wave-friendly (the matmul findings)."
    )
    issue_bound = [r for r in comp if r.unit == "issue"]
    if issue_bound:
        # The non-vectorised path's count grows by 12-14 instructions an element for
        # every dimension it cannot merge (LEGACY_INSTRUCTIONS): there the layout is the cost.
        strided = [r for r in issue_bound if legacy_coefficients(r.name) is not None]
        strided_us = sum(r.bound_us for r in strided)
        examples = (
            " (GELU's erf, softmax's exp, layer norm's Welford division)" if len(strided) < len(issue_bound) else ""
        )
        advice += (
            f" {fmt_us(sum(r.bound_us for r in issue_bound))} of them are elementwise/norm kernels that run out of "
            f"instruction issue, not FLOPs or bandwidth{examples}: fusing them into the neighbouring kernels "
            "(torch.compile, a fused epilogue) removes their separate passes; tensor cores do not help them."
        )
        if strided:
            advice += (
                f" {fmt_us(strided_us)} of those run ATen's non-vectorised path because an operand is broadcast "
                "or strided (a transposed or sliced view), and most of their instructions compute offsets, one "
                "set per dimension that cannot be merged. Fusing is the fix there too; where one strided view "
                "feeds several ops, a single .contiguous() upstream moves them to the vectorised path."
            )
    if fp32_time:
        advice += (
            f" {fmt_us(fp32_time)} of fp32 matmuls run on CUDA cores: "
            "torch.backends.cuda.matmul.allow_tf32 = True (or torch.set_float32_matmul_precision('high')) "
            "moves them to tensor cores."
        )
    return Finding(
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
        gain_note=(
            "each compute-bound kernel's distance to its roof (kernels in a fusion chain are left to the "
            "memory finding), plus fp32 matmuls at the TF32 peak"
        ),
        evidence=(
            Metric("compute-bound kernel time", comp_time, "us"),
            Metric("time-weighted share of the roof", eff, "share"),
            Metric("fp32 matmul time", fp32_time, "us"),
            Metric("peak used (bf16 FLOP/s)", roof.peaks.peak("bf16", True), "number"),
        ),
        sites=_sites(comp, _compute_site),
    )


def _memory_site(r: KernelRoof) -> str:
    if r.roof_name == L2_ROOF_NAME:
        return (
            f"{r.family or 'kernel'} {r.dtype}: register spills through L2 at {r.l2_share:.0%} of the L2 write port; "
            f"DRAM {r.bytes_per_s / 1e9:.0f} GB/s"
        )
    return (
        f"{r.family or 'kernel'}: {r.bytes_per_s / 1e9:.0f} GB/s "
        f"({r.roof_share:.0%} of the roof), {r.intensity:.2f} FLOP/B"
    )


def _compute_site(r: KernelRoof) -> str:
    if r.unit == "issue":
        # Instruction-bound: the FLOP count says little (erf, exp, conversions are not FLOPs).
        return (
            f"{r.family or 'kernel'} {r.dtype}: instruction-bound, {r.instructions / (r.time_us * 1e-6) / 1e12:.1f} T "
            f"instructions/s ({r.roof_share:.0%} of the issue roof)"
            + ("; non-vectorised: a broadcast or strided operand" if legacy_coefficients(r.name) is not None else "")
        )
    return (
        f"{r.family or 'kernel'} {r.dtype}: {r.flops_per_s / 1e12:.0f} TFLOP/s "
        f"({r.roof_share:.0%} of the roof), {r.intensity:.0f} FLOP/B"
    )


def bound_of(ctx: AnalysisContext) -> dict[str, str]:
    """Kernel name -> bound, for the report's kernel table."""
    return {r.name: r.bound for r in for_context(ctx).kernels}
