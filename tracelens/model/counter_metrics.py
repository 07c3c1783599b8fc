"""The per-kernel hardware counters tracelens asks for and reads (issue 35), defined once.

Two producers write them, and both are read through this vocabulary:

- Kineto's CUPTI range profiler (torch.profiler with `experimental_config=
  _ExperimentalConfig(profiler_metrics=[...], profiler_measure_per_kernel=True)`): one
  `cuda_profiler_range` event per kernel, the metric values as its args. Kineto compiled it
  only for CUDA <= 12.6 and removed it in 2026-06 (pytorch/kineto#1437); a trace of that
  mode has no kernel events at all (torch asks Kineto for the ranges and CPU activity only).
- `tracelens capture --counters`: a second short pass of the script under Nsight Compute
  (`ncu --metrics ...`), its per-kernel rows written into the trace under the top-level key
  `tracelens_counters` (COUNTERS_KEY; format below).

Metric names are CUPTI/Nsight Compute names (`unit__counter.rollup`), the same for both.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

#: Top-level trace key of `tracelens capture --counters`. Its value:
#: {"format": 1, "source": "ncu" | "kineto", "tool": str, "metrics": [str], "steps": [first,
#:  last] | null, "replay": "kernel", "cache_control": str, "clock_control": str,
#:  "notes": [str], "kernels": [{"name": str, "grid": [x, y, z] | null, "block": [x, y, z] | null,
#:  "stream": int | null, "replay_us": float | null, "values": {metric: number}}]}
#: in the order the kernels were launched.
COUNTERS_KEY = "tracelens_counters"
COUNTERS_FORMAT = 1
#: The Kineto category of the range profiler's events.
RANGE_CATEGORY = "cuda_profiler_range"

_SASS = "smsp__sass_thread_inst_executed_op_"
#: CUDA-core floating-point instruction counters: (metric, precision, FLOPs per thread
#: instruction). An FMA is two FLOPs. Half-precision counts are of thread instructions
#: (an HFMA2 that does two lanes' work counts once, as in Nsight Compute's own roofline).
CUDA_CORE_FLOP_METRICS: tuple[tuple[str, str, int], ...] = tuple(
    (f"{_SASS}{p}{op}_pred_on.sum", prec, 2 if op == "fma" else 1)
    for p, prec in (("d", "fp64"), ("f", "fp32"), ("h", "fp16"))
    for op in ("add", "mul", "fma")
)
#: The roofline unit (peaks.UNIT_NAMES) bounding each CUDA-core precision: half-precision
#: instructions issue at the fp32 FMA rate (one thread instruction per lane per clock), and
#: the peak table has no fp64 roof (fp64 FLOPs are reported, not judged).
CUDA_CORE_ROOFS = {"fp32": "fp32", "fp16": "fp32", "fp64": "fp64"}
DRAM_READ = "dram__bytes_read.sum"
DRAM_WRITE = "dram__bytes_write.sum"
#: Warp instructions executed; thread instructions (the roofline's issue roof counts those,
#: Nsight Compute's InstructionStats x 32) are 32 per warp instruction.
WARP_INSTRUCTIONS = "smsp__inst_executed.sum"
THREADS_PER_WARP = 32
#: Tensor-pipe instructions (Kineto's alias `kineto__tensor_core_insts`): that a kernel used
#: tensor cores, not how many FLOPs (an instruction's FLOPs depend on its MMA shape).
TENSOR_INSTRUCTIONS = "sm__inst_executed_pipe_tensor.sum"
#: The kernel's duration in the profiler's replay: not its time on the timeline.
REPLAY_DURATION = "gpu__time_duration.sum"
#: Kineto's aliases, expanded by Kineto itself into the metrics above.
KINETO_ALIASES = {
    "kineto__cuda_core_flops": tuple(m for m, _p, _f in CUDA_CORE_FLOP_METRICS),
    "kineto__tensor_core_insts": (TENSOR_INSTRUCTIONS,),
}
#: Tensor-core math counters, by instruction (op), operand (src) and accumulator (dst) type,
#: e.g. `sm__ops_path_tensor_op_hgmma_src_bf16_dst_fp32.sum`. Which exist depends on the GPU
#: (Nsight Compute's --query-metrics lists them; the H200's are per op: hgmma, hmma, igmma,
#: imma, bgmma, bmma, with _sparsity_off/_sparsity_on variants, and one without op for fp8).
#: They overlap (a counter without dst sums its dst variants; _sparsity_off repeats the
#: plain one), so `tensor_flop_metrics` picks a set that counts each op once.
TENSOR_OPS_RE = re.compile(
    r"^(?:sm|smsp)__ops_path_tensor_(?:op_([a-z0-9]+)_)?src_([a-z0-9]+)(?:_dst_([a-z0-9]+))?(?:_sparsity_(on|off))?\.sum$"
)
#: FLOPs per counted tensor-path op: the ops are FLOPs (a multiply-add counts two). Measured on
#: the H200 (Nsight Compute 2025.3.1): torch.mm of 4096^3 bf16 counted 137,438,953,472 hgmma
#: bf16 ops = 2 x 4096^3 exactly, and of 4096^3 TF32 the same; 8192^3 counted 1.0156 x 2 x 8192^3,
#: the 320-row tiles' padding (26 x 320 = 8320 rows).
TENSOR_FLOPS_PER_OP = 1.0
#: Tensor-core operand types to the roofline's units (peaks.UNIT_NAMES).
TENSOR_SRC_UNITS = {
    "bf16": "bf16",
    "fp16": "fp16",
    "tf32": "tf32",
    "fp8": "fp8",
    "e4m3": "fp8",
    "e5m2": "fp8",
    "int8": "int8",
    "s8": "int8",
    "u8": "int8",
    "fp64": "fp64",
}

#: What `capture --counters` asks Nsight Compute for, before the tensor-path metrics its
#: --query-metrics offers are added.
CAPTURE_METRICS: tuple[str, ...] = (
    *(m for m, _p, _f in CUDA_CORE_FLOP_METRICS),
    DRAM_READ,
    DRAM_WRITE,
    WARP_INSTRUCTIONS,
    TENSOR_INSTRUCTIONS,
    REPLAY_DURATION,
)
#: What the Kineto backend asks torch for (its aliases are expanded by Kineto).
KINETO_METRICS: tuple[str, ...] = (
    "kineto__cuda_core_flops",
    "kineto__tensor_core_insts",
    DRAM_READ,
    DRAM_WRITE,
    WARP_INSTRUCTIONS,
)


def tensor_unit(metric: str) -> str | None:
    """The roofline unit of a tensor-path counter (`sm__ops_path_tensor_op_hgmma_src_bf16_dst_fp32.sum`
    -> "bf16"), or None when it is not one (or a sparse variant, not counted)."""
    m = TENSOR_OPS_RE.match(metric)
    if m is None or m.group(4) == "on":
        return None
    return TENSOR_SRC_UNITS.get(m.group(2))


def tensor_flop_metrics(names: Iterable[str]) -> list[str]:
    """Of these metric names (`.sum` rollups), the tensor-path counters that together count
    every dense tensor-core op once: per operand type the counters without op where there
    are some (they cover all ops), else one per op; per op the counter without dst where
    there is one (it sums the dst variants), else each dst; the plain counter rather than
    its _sparsity_off twin. Sparse (_sparsity_on) and int1 counters are left out."""
    parsed = []
    for name in names:
        m = TENSOR_OPS_RE.match(name)
        if m is None or m.group(4) == "on" or TENSOR_SRC_UNITS.get(m.group(2)) is None:
            continue
        parsed.append((m.group(2), m.group(1), m.group(3), m.group(4), name))
    out = []
    for src in sorted({p[0] for p in parsed}):
        of_src = [p for p in parsed if p[0] == src]
        generic = [p for p in of_src if p[1] is None]
        for op in sorted({p[1] or "" for p in (generic or of_src)}):
            of_op = [p for p in (generic or of_src) if (p[1] or "") == op]
            no_dst = [p for p in of_op if p[2] is None]
            for dst in sorted({p[2] or "" for p in (no_dst or of_op)}):
                twins = [p for p in (no_dst or of_op) if (p[2] or "") == dst]
                plain = [p for p in twins if p[3] is None]
                out.append((plain or twins)[0][4])
    return out
