"""Calibrates `tracelens diff`'s "different programs" check: how much two traces' kernels,
top-level ops and Python source files overlap, for before/after pairs of one program
(a fix) and for every pair of unrelated samples.

    python bench/like_for_like.py            # prints the table and the separation

The check (tracelens/derive/compare.py) calls two traces different programs when their kernel
and op-shape overlaps are both below PROGRAM_OVERLAP_MIN and their source functions do
not tie them; this prints where each pair falls.
"""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tracelens.derive.compare import (  # noqa: E402
    PROGRAM_OVERLAP_MIN,
    SAME_FUNCTIONS_MIN,
    ProgramSignature,
    different_programs,
    little_in_common,
    program_signature,
    signature_overlap,
)
from tracelens.model import load_trace  # noqa: E402

SAMPLES = REPO / "sample_traces"
REAL = REPO.parent / "shared" / "real_traces"
#: Before/after pairs of one program (the fixes of workloads/diff_pairs.py, the dyn_*
#: fixes, the pinned-memory and sync fixes, one script captured two ways, the 2021
#: DataLoader workers pair).
SAME_PROGRAM = [
    ("capture_mask_sum", "plain_mask_sum"),
    ("diff_align_before", "diff_align_after"),
    ("diff_compile_before", "diff_compile_after"),
    ("diff_graph_before", "diff_graph_after"),
    ("diff_repeat_before", "diff_repeat_after"),
    ("dyn_empty_cache", "dyn_empty_cache_fixed"),
    ("dyn_graph_break", "dyn_graph_break_fixed"),
    ("dyn_kv_cat", "dyn_kv_static"),
    ("dyn_ragged", "dyn_ragged_fixed"),
    ("dyn_recompile", "dyn_recompile_fixed"),
    ("host_bound_pageable", "host_bound_pinned"),
    ("host_sync_mask", "host_sync_static"),
    ("kineto/worker0.1623143089861.pt.trace.json.gz", "kineto/worker0.1623212756351.pt.trace.json.gz"),
]
#: Pairs of different programs (different models or workloads).
DIFFERENT = [
    ("gemm_bf16", "train_step"),  # issue 29's example
    ("elementwise_fp32", "conv_train"),
    ("host_sync_mask", "gemm_bf16"),
    ("launch_bound", "train_step"),
    ("plain_hf_generate", "conv_train"),
    ("train_step", "conv_train"),
    ("plain_hf_generate", "train_step"),
    ("power_gemm", "host_bound_pinned"),
    ("dyn_kv_cat", "conv_train"),
    ("capture_train_loader", "plain_hf_generate"),
    ("plain_gloo_wait", "train_step"),
    ("elementwise_fp32", "gemm_bf16"),
    ("plain_tiny_loop", "train_step"),
    ("light_idle", "conv_train"),
    ("host_bound_pageable", "plain_hf_generate"),
    ("HolisticTraceAnalysis/rank0.json.gz", "TraceLens/eager_trace.json.gz"),
    ("TraceLens/resnet_act_checkpoint.json.gz", "TraceLens/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"),
    ("kineto/worker0.pt.trace.json.gz", "param/resnet_kineto.json.gz"),
    ("kineto/worker0.pt.trace.json.gz", "TraceLens/resnet_act_checkpoint.json.gz"),
    ("param/resnet_kineto.json.gz", "TraceLens/resnet_act_checkpoint.json.gz"),
    (
        "TraceLens/google_owlv2-large-patch14-ensemble__1016001.json.gz",
        "TraceLens/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",
    ),
]


def _path(name: str) -> Path:
    return REAL / name if "/" in name else SAMPLES / f"{name}.pt.trace.json.gz"


def main() -> int:
    sigs: dict[str, ProgramSignature] = {}

    def sig(name: str) -> ProgramSignature | None:
        if name not in sigs and _path(name).exists():
            sigs[name] = program_signature(load_trace(_path(name)))
        return sigs.get(name)

    print(f"machine: {platform.node()}, {os.cpu_count()} CPUs, python {platform.python_version()}")
    print(
        f"different programs: kernels < {PROGRAM_OVERLAP_MIN} and op shapes < {PROGRAM_OVERLAP_MIN} and "
        f"functions < {SAME_FUNCTIONS_MIN} (or no stacks)\n"
    )
    print("| pair | truth | kernels | op shapes | functions | called |\n|---|---|---:|---:|---:|---|")
    wrong = 0
    for truth, pairs in (("same", SAME_PROGRAM), ("different", DIFFERENT)):
        for a, b in pairs:
            sa, sb = sig(a), sig(b)
            if sa is None or sb is None:
                continue
            ov = signature_overlap(sa, sb)
            called = "different" if different_programs(ov) else ("little in common" if little_in_common(ov) else "same")
            wrong += truth == "same" and called == "different"
            f = f"{ov[2]:.2f}" if ov[2] is not None else "-"
            names = f"{a.split('/')[-1][:40]} / {b.split('/')[-1][:40]}"
            print(f"| {names} | {truth} | {ov[0]:.2f} | {ov[1]:.2f} | {f} | {called} |")
    print(f"\nsame-program pairs called different programs: {wrong}")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
