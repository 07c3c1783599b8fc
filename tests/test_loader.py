"""The one loader on every trace vintage we have: 17 public traces (2021-2026, V100 to
B200, MI250, MI300X) and the H200 captures in sample_traces/."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import REAL_TRACES, SAMPLE_TRACES, model_of, needs_real, real, sample

from tracelens.model import Kind

# ProfilerStep# counts on the CPU side, from shared/real_traces/SOURCES.md.
EXPECTED_STEPS = {
    "worker0.pt.trace.json.gz": 6,
    "worker0.1623143089861.pt.trace.json.gz": 6,
    "worker0.1623212756351.pt.trace.json.gz": 6,
    "control.json.gz": 6,
    "df_index_resolver.json.gz": 5,
    "sampled_rank-0.json.gz": 2,
    "sampled_rank-1.json.gz": 2,
    "rank0.json.gz": 5,
    "resnet_kineto.json.gz": 0,
    "benchmark_result_2869224_1695835535_trace.json.gz": 0,
    "rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz": 5,
    "nccl_data.json.gz": 3,
    "Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz": 1,
    "google_owlv2-large-patch14-ensemble__1016001.json.gz": 1,
    "eager_trace.json.gz": 0,
    "mi250_minitoy_train_ROCm6_2_kineto.json.gz": 2,
    "resnet_act_checkpoint.json.gz": 3,
}
# Kernel counts (cat kernel/Kernel), from SOURCES.md.
EXPECTED_KERNELS = {
    "worker0.pt.trace.json.gz": 9564,
    "control.json.gz": 8568,
    "df_index_resolver.json.gz": 19370,
    "google_owlv2-large-patch14-ensemble__1016001.json.gz": 4330,
    "eager_trace.json.gz": 768,
    "resnet_act_checkpoint.json.gz": 2995,
    "mi250_minitoy_train_ROCm6_2_kineto.json.gz": 14,
}


@needs_real
@pytest.mark.parametrize("path", REAL_TRACES, ids=lambda p: p.name)
def test_every_real_trace_loads(path: Path) -> None:
    m = model_of(path)
    assert len(m.host) > 0 and len(m.gpu) > 0
    assert (m.host["dur"] >= 0).all() and (m.gpu["dur"] >= 0).all()
    # Times are relative to the first event: small, non-negative.
    assert m.host["ts"].min() >= 0 and m.gpu["ts"].min() >= 0
    assert m.span_us > 0
    assert len(m.steps) == EXPECTED_STEPS[path.name]
    if path.name in EXPECTED_KERNELS:
        assert len(m.kernels()) == EXPECTED_KERNELS[path.name]
    # Most kernels are linked to the runtime/driver call that launched them.
    launched = (m.kernels()["launch"] >= 0).mean()
    assert launched > 0.6, launched
    # Parents enclose their children (the nesting sweep is right).
    h = m.host
    p = h["parent"].to_numpy()
    has = p >= 0
    assert (h["ts"].to_numpy()[has] >= h["ts"].to_numpy()[p[has]] - 1e-6).all()


@pytest.mark.parametrize("path", SAMPLE_TRACES, ids=lambda p: p.name)
def test_every_sample_trace_loads(path: Path) -> None:
    m = model_of(path)
    assert m.meta.vendor == "nvidia"
    dev = m.meta.primary_device
    assert dev is not None and dev.name == "NVIDIA H200" and dev.num_sms == 132
    assert dev.compute_capability == (9, 0)
    if path.name.startswith("plain_"):  # whole-run captures of plain scripts: one step, the whole run
        assert len(m.steps) == 1
    elif path.name not in ("matmul_sweep.pt.trace.json.gz", "roofline_cases.pt.trace.json.gz"):  # no steps
        assert len(m.steps) >= 3
    assert m.meta.base_time_ns is not None


@needs_real
def test_2021_vintage_string_tids_and_lowercase_keys() -> None:
    m = model_of(real("worker0.pt.trace.json.gz"))
    assert "2021" in m.meta.vintage
    # GPU rows were tid "stream 7": parsed to stream 7; external ids came from "external id".
    assert set(m.gpu["stream"].unique()) == {7}
    assert (m.gpu["external_id"] >= 0).mean() > 0.9
    # ProfilerStep# under cat Operator is an annotation, not an op.
    steps = m.host[m.host["name"].astype(str).str.startswith("ProfilerStep#")]
    assert (steps["kind"] == Kind.USER_ANNOTATION).all()
    assert any("no deviceProperties" in n for n in m.meta.notes)


@needs_real
def test_2021_call_stack_strings_give_sources() -> None:
    from tracelens.model.sources import user_source

    m = model_of(real("worker0.1623143089861.pt.trace.json.gz"))
    ops = m.host[(m.host["kind"] == Kind.CPU_OP) & m.host["call_stack"].notna()]
    src = user_source(m, int(ops.index[0]))
    assert src is not None and src.file.endswith(".py") and src.line is not None


@needs_real
def test_amd_traces() -> None:
    m = model_of(real("resnet_act_checkpoint.json.gz"))
    assert m.meta.vendor == "amd"
    assert m.meta.primary_device is not None and "MI300X" in m.meta.primary_device.name
    assert m.meta.rank == 0 and m.meta.world_size == 8
    names = m.host[m.host["kind"] == Kind.RUNTIME]["name"].astype(str)
    assert names.str.startswith("hip").mean() > 0.9
    mi250 = model_of(real("mi250_minitoy_train_ROCm6_2_kineto.json.gz"))
    assert mi250.meta.vendor == "amd"


@needs_real
def test_base_time_and_ns_display_unit() -> None:
    new = model_of(real("google_owlv2-large-patch14-ensemble__1016001.json.gz"))
    assert new.meta.base_time_ns == 1751410836000000000
    # Absolute time of the first event is July 2025 (epoch µs).
    assert 1.75e15 < new.meta.origin_us < 1.76e15
    ns = model_of(real("rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"))
    assert ns.meta.metadata.get("displayTimeUnit") == "ns"
    assert 1.71e15 < ns.meta.origin_us < 1.72e15  # April 2024, µs despite "ns"
    assert 0 < ns.span_us < 10e6


@needs_real
def test_python_function_tree_and_cuda_graph_launches() -> None:
    m = model_of(real("google_owlv2-large-patch14-ensemble__1016001.json.gz"))
    py = m.host[m.host["kind"] == Kind.PYTHON]
    assert len(py) == 65313
    # Runtime calls sit under Python frames.
    rt = m.host[m.host["kind"] == Kind.RUNTIME]
    assert (rt["py_frame"] >= 0).mean() > 0.9
    # rank0.json: one cudaGraphLaunch feeds many kernels (flows are not 1:1).
    g = model_of(real("rank0.json.gz"))
    per_launch = g.gpu[g.gpu["launch"] >= 0].groupby("launch").size()
    assert per_launch.max() > 1


def test_sample_trace_links_kernels_to_ops() -> None:
    m = model_of(sample("train_step"))
    k = m.kernels()
    linked = k[k["launch"] >= 0]
    ops = m.host["op"].to_numpy()[linked["launch"].to_numpy()]
    assert (ops >= 0).mean() > 0.95
    # cuBLAS launches through the driver API (cuLaunchKernelEx) are linked too.
    launchers = m.host["kind"].to_numpy()[linked["launch"].to_numpy()]
    assert (launchers == Kind.DRIVER).any()
    assert np.isfinite(m.steps["gpu_ts"]).all()
