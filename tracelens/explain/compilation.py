"""The words of the compilation finding."""

from __future__ import annotations

from tracelens.analyzers.base import Found
from tracelens.analyzers.compilation import RECOMPILE_LIMIT, CompileFacts, CompileSite
from tracelens.domain import PerUnit, pct, per_unit
from tracelens.explain.base import Words

LABELS = {
    "compiled_frames": "compiled frames",
    "graph_calls_per_step": "compiled-graph calls per step",
    "recompiles": "recompilations in the window",
    "compiles": "compiles started in the window",
    "compile_host_us": "host time compiling in the window",
    "idle_us": "GPU idle while compiling",
    "triton_kernels": "Triton kernels in the window",
    "break_sync_idle_us": "GPU idle at the breaks' host syncs (the host syncs finding's time)",
    "graph_launches": "cudaGraphLaunch calls in the window",
}


def _place(p: CompileSite) -> str:
    if p.op:
        return f"eager {p.op} between compiled graphs"
    return f"Torch-Compiled Region: {p.frame}/{p.compile} (compile #{p.compile + 1} of frame {p.frame})"


def _recompiles(f: CompileFacts, idle_us: float, share: float, unit: PerUnit) -> tuple[str, list[str]]:
    n_rec = max(len(f.recompiles), f.compiles)
    title = (
        f"torch.compile recompiles {n_rec} time(s) inside the window"
        + (
            f" (frame {', '.join(map(str, f.recompiled_frames))} reaches compile #{f.max_compile})"
            if f.recompiled_frames
            else ""
        )
        + (
            f": the GPU idles {per_unit(idle_us, unit)} ({pct(share)} of the analysed time) while Dynamo and "
            "Inductor run"
            if idle_us > 0
            else ": the GPU does not idle while Dynamo and Inductor run"
        )
    )
    advice = [
        "A guard fails every step (usually a new input shape under dynamic=False): mark the varying "
        "dimension dynamic (torch.compile(dynamic=True) or torch._dynamo.mark_dynamic(x, dim)), or pad "
        "inputs to a few bucket sizes so each compiles once in the warm-up. TORCH_LOGS=recompiles names "
        "the failing guard."
    ]
    if f.max_compile + 1 >= RECOMPILE_LIMIT:
        advice.append(
            f"Frame recompiles reach Dynamo's limit ({RECOMPILE_LIMIT}, "
            "torch._dynamo.config.recompile_limit): after it the frame runs eagerly, uncompiled."
        )
    return title, advice


def _breaks(f: CompileFacts, unit: PerUnit) -> tuple[str, str]:
    dd, linked = f.data_dependent, f.break_sync_idle_us
    title = (
        f"graph breaks: {f.graph_calls_per_step:.0f} compiled graphs per {f.unit} with eager "
        f"{', '.join(f.breaks[:4])} between them" + (f" (data-dependent: {', '.join(dd)})" if dd else "")
    )
    advice = "Eager ops split the compiled graph: " + (
        f"{', '.join(dd)} has a data-dependent output shape (x[mask], nonzero, .item()), which Dynamo "
        "cannot trace and which waits for the GPU"
        + (f" ({per_unit(linked, unit)} of GPU idle, counted in the host syncs finding)" if linked else "")
        + ". Keep shapes static (torch.where(mask, x, 0) and a masked reduction instead of x[mask]), "
        "or set torch._dynamo.config.capture_dynamic_output_shape_ops = True."
        if dd
        else "fix the graph break (TORCH_LOGS=graph_breaks names it) so the step is one graph."
    )
    return title, advice


def words(found: Found[CompileFacts, CompileSite], share: float, unit: PerUnit) -> Words:
    f = found.facts
    advice: list[str] = []
    title_parts: list[str] = []
    if f.compiled:
        if f.recompiles or f.compiles:
            title, tips = _recompiles(f, found.time_us, share, unit)
            title_parts.append(title)
            advice += tips
        if f.breaks:
            title, tip = _breaks(f, unit)
            title_parts.append(title)
            advice.append(tip)
        if not title_parts:
            title_parts.append(
                f"Compiled with torch.compile ({f.frames} frame(s), {f.graph_calls_per_step:.0f} compiled "
                f"graph call(s) per {f.unit}): no recompiles or graph breaks inside the window"
                if f.frames
                else f"Compiled code ({f.triton_kernels:,} Triton kernels in the window): no compile inside it"
            )
    if f.graph_launches:
        title_parts.append(f"the step replays CUDA graphs ({f.graph_launches:,} cudaGraphLaunch calls)")
        advice.append("The step already replays CUDA graphs: nothing to capture again.")
    title = "; ".join(title_parts)
    if not title.startswith("torch"):
        title = title[0].upper() + title[1:]
    return Words(
        title=title,
        advice="\n".join(advice) if advice else "Nothing to change here: the compiled step runs without recompiling.",
        gain_note="the GPU idle while torch.compile compiles inside the window: gone when every shape compiles "
        "once, in the warm-up",
        labels=LABELS,
        places=[_place(p.facts) for p in found.places],
    )
