"""Roofline on H200 captures whose answer is known (workloads/): a large bf16 GEMM is
compute-bound near the measured ceiling, large fp32 elementwise ops and a transposed copy
are memory-bound, a tiny-op loop is latency-bound; no achieved rate passes the peak."""

from __future__ import annotations

import pytest
from conftest import context_of, needs_real, real, report_of, sample

from tracelens.analyzers.op_costs import op_cost
from tracelens.analyzers.roofline import MODEL_ERROR_SHARE, for_context
from tracelens.model.peaks import peaks_for


def test_peak_table() -> None:
    h200 = peaks_for("NVIDIA H200")
    assert h200 is not None and h200.peak("bf16", True) == pytest.approx(790e12)  # measured here
    assert h200.flops["bf16"] == pytest.approx(989e12) and h200.bandwidth == pytest.approx(4.8e12)
    assert peaks_for("NVIDIA H100 80GB HBM3").bandwidth == pytest.approx(3.35e12)  # type: ignore[union-attr]
    assert peaks_for("AMD Instinct MI300X").name == "MI300X"  # type: ignore[union-attr]
    assert peaks_for("Tesla V100-SXM2-32GB").name == "V100 SXM2"  # type: ignore[union-attr]
    assert peaks_for("Some Future GPU") is None


def test_op_models() -> None:
    mm = op_cost("aten::mm", {"Input Dims": [[128, 64], [64, 32]], "Input type": ["c10::BFloat16"] * 2})
    assert mm is not None and mm.flops == 2 * 128 * 64 * 32 and mm.bytes == (128 * 64 + 64 * 32 + 128 * 32) * 2
    # exp(x, out=y): one read, one write, not two reads.
    ex = op_cost("aten::exp", {"Input Dims": [[1000], [1000]], "Input type": ["float", "float"]})
    assert ex is not None and ex.bytes == 8000
    add_ = op_cost("aten::add_", {"Input Dims": [[1000], [1000], []], "Input type": ["float", "float", "Scalar"]})
    assert add_ is not None and add_.bytes == 8000  # in place: reads both, writes into the first
    attn = op_cost(
        "aten::_scaled_dot_product_flash_attention",
        {"Input Dims": [[2, 4, 128, 64]] * 3, "Input type": ["c10::BFloat16"] * 3,
         "Concrete Inputs": ["", "", "", "0.", "True", "False", ""]},
    )  # fmt: skip
    assert attn is not None and attn.flops == pytest.approx(0.5 * 4 * 2 * 4 * 128 * 128 * 64)
    assert op_cost("aten::some_custom_op", {"Input Dims": [[10]], "Input type": ["float"]}) is None


def test_known_cases() -> None:
    gemm = for_context(context_of(sample("gemm_bf16")))
    top = gemm.kernels[0]
    assert top.family == "matmul" and top.bound == "compute" and top.roof_share > 0.9
    ew = for_context(context_of(sample("elementwise_fp32")))
    assert {k.bound for k in ew.kernels if k.family in ("elementwise", "copy")} == {"memory"}
    fastest = max(k.bytes_per_s for k in ew.kernels)
    assert 3.5e12 < fastest < 4.8e12 * MODEL_ERROR_SHARE  # near the H200's bandwidth
    tiny = for_context(context_of(sample("launch_bound")))
    assert {k.bound for k in tiny.kernels} == {"latency"}
    train = for_context(context_of(sample("train_step")))
    # The GEMMs are compute-bound; kernels beside them in the same op (bias, split-K
    # reduction) carry bytes only and come out memory-bound.
    assert {k.bound for k in train.kernels if k.family == "matmul" and k.flops > 0} == {"compute"}
    assert "memory" in {k.bound for k in train.kernels if k.family == "elementwise"}


@pytest.mark.parametrize(
    "name", ["gemm_bf16", "elementwise_fp32", "launch_bound", "train_step", "matmul_sweep", "host_sync_static"]
)
def test_no_rate_above_the_peak(name: str) -> None:
    roof = for_context(context_of(sample(name)))
    assert roof.peaks is not None
    for k in roof.kernels:
        if k.bound in ("memory", "compute", "latency"):
            assert k.bytes_per_s <= MODEL_ERROR_SHARE * roof.peaks.bandwidth, k
            assert k.flops_per_s <= MODEL_ERROR_SHARE * roof.peaks.flops["bf16"], k


@needs_real
def test_coverage_reported_on_real_traces() -> None:
    """Shares of kernel time the models cover (communication excluded), measured today:
    owlv2 1.00, resnet_act_checkpoint (MI300X) 0.72, Qwen 0.66; traces without
    record_shapes have none."""
    owl = for_context(context_of(real("google_owlv2-large-patch14-ensemble__1016001.json.gz")))
    assert owl.coverage > 0.95
    assert for_context(context_of(real("resnet_act_checkpoint.json.gz"))).coverage > 0.6
    nccl = for_context(context_of(real("nccl_data.json.gz")))  # no record_shapes, NCCL-heavy
    assert nccl.coverage == 0.0 and nccl.communication_us > 0


def test_report_kernel_bounds_and_chart() -> None:
    rep = report_of(sample("train_step"))
    bounds = {k.bound for k in rep.kernels}
    assert "compute" in bounds and "memory" in bounds
    assert rep.roofline is not None and rep.roofline.coverage > 0.7
    from tracelens.render import render_html

    assert 'class="roofline"' in render_html(rep)


def test_fusion_and_attention_cases() -> None:
    """workloads/roofline_cases.py on the H200: an eager chain of five elementwise passes
    vs the same function compiled into one Triton kernel, and flash attention forward."""
    path = sample("roofline_cases")
    roof = for_context(context_of(path))
    assert roof.coverage > 0.95
    attention = [k for k in roof.kernels if k.family == "attention"]
    assert attention and all(k.bound == "compute" for k in attention)
    assert 400e12 < attention[0].flops_per_s < 790e12 * MODEL_ERROR_SHARE
    compiled = [k for k in roof.kernels if k.family == "compiled"]
    eager = [k for k in roof.kernels if k.family == "elementwise"]
    assert len(compiled) == 1 and compiled[0].bound == "memory" and compiled[0].bytes_per_s > 3.5e12
    # Fusing saved the round trips: the eager chain took over 2.5x the compiled kernel.
    assert sum(k.time_us for k in eager) > 2.5 * compiled[0].time_us
    # The ceilings measured in the same run agree with the peak table's H200 entry.
    ceilings = context_of(path).model.meta.metadata["tracelens_workload"]["ceilings"]
    assert roof.peaks is not None
    assert ceilings["bf16_mm_flops_per_s"] == pytest.approx(roof.peaks.peak("bf16", True), rel=0.05)
    assert ceilings["copy_bytes_per_s"] == pytest.approx(roof.peaks.bw, rel=0.05)
