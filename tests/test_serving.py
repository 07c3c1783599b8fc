"""Serving frameworks' step annotations (vLLM, SGLang, ATOM) and what they give the
roofline: attention over packed tokens and a paged KV cache, modelled from the step's
Σ N_Q·N_KV. Real sample: TraceLens's vLLM trace (B200, TP8, eager), whose roofline
modelled 24% of its kernel time before (the MoE GEMMs and paged attention)."""

from __future__ import annotations

import pytest
from support.corpus import real, report_of

from tracelens.derive.graph_costs import attention_cost
from tracelens.derive.serving import parse_step


@pytest.mark.parametrize(
    ("name", "phase", "sum_qk", "sum_kv", "sizes", "graph_batch"),
    [
        ("step[DECODE bs=64 g_sq=64 g_sk=100032 g_sqsq=64 g_sqsk=100032]", "decode", 100032, 100032, True, 64),
        ("step[EXTEND bs=1 toks=1025 c_sqsq=1050625 c_sqsk=1050625 c_sk=1025]", "prefill", 1050625, 1025, True, 1025),
        (
            "step[MIXED bs=66 c=2 g=64 c_sq=2048 c_sk=2048 c_sqsq=2097152 c_sqsk=2097152 g_sq=64 g_sk=65600 "
            "g_sqsq=64 g_sqsk=65600]",
            "mixed",
            2097152 + 65600,
            2048 + 65600,
            True,
            2112,
        ),
        ("step[DECODE bs=8]", "decode", 0, 0, False, 8),
        (
            "execute_64_context_0(sq0sk0sqsq0sqsk0)_generation_64(sq64sk131072sqsq64sqsk131072)",
            "decode",
            131072,
            131072,
            True,
            64,
        ),
        ("execute_context_2(6144)_generation_3(3)", "mixed", 0, 0, False, 6147),
        ("execute_context_1(888_788544)_generation_0(0)", "prefill", 788544, 888, True, 888),
        ("decode[bs=117/128 tok=117 d=117]", "decode", 0, 0, False, 128),
        (
            "prefill[bs=2 tok=14721 ctx=[7803, 6918] sqsq=108745533 sqsk=108745533 sk=14721]",
            "prefill",
            108745533,
            14721,
            True,
            14721,
        ),
    ],
)
def test_step_annotations(name: str, phase: str, sum_qk: int, sum_kv: int, sizes: bool, graph_batch: int) -> None:
    s = parse_step(name)
    assert s is not None
    assert (s.phase, s.sum_qk, s.sum_kv, s.has_sizes, s.graph_batch) == (phase, sum_qk, sum_kv, sizes, graph_batch)


@pytest.mark.parametrize("name", ["ProfilerStep#3", "step", "stepper", "execute_model", "decode_tokens", "prefill"])
def test_other_ranges_are_not_steps(name: str) -> None:
    assert parse_step(name) is None


def test_attention_cost_of_a_prefill_and_a_decode() -> None:
    shapes = {
        "Input Dims": [[888, 8, 64], [888, 1, 64], [888, 1, 64], [888, 8, 64]],
        "Input type": ["c10::Float8_e4m3fn", "c10::BFloat16", "c10::BFloat16", "c10::BFloat16"],
    }
    pre = parse_step("execute_context_1(888_788544)_generation_0(0)")
    assert pre is not None
    c = attention_cost(shapes, pre, "fmhaSm100aKernel_QkvE4m3OBfloat16H64PagedKvCausalP16VarSeq")
    assert c is not None and c.family == "attention" and c.dtype == "fp8_e4m3"
    # causal self-attention of 888 tokens: half the 888^2 square, 4 FLOPs per head-dim MAC
    assert c.flops == pytest.approx(4 * 8 * 64 * 888 * 888 / 2)
    # q (fp8) and o (bf16) once, K and V of 888 positions in an fp8 cache
    assert c.bytes == pytest.approx(888 * 8 * 64 * (1 + 2) + 888 * 1 * 64 * 2 * 1)
    dec = parse_step("step[DECODE bs=4 g_sq=4 g_sk=4000 g_sqsq=4 g_sqsk=4000]")
    assert dec is not None
    d4 = {"Input Dims": [[4, 8, 64], [4, 1, 64], [4, 1, 64], [4, 8, 64]], "Input type": ["c10::BFloat16"] * 4}
    c = attention_cost(d4, dec, "paged_attention_v2_kernel")
    assert c is not None and c.flops == pytest.approx(4 * 8 * 64 * 4000)  # decode: nothing causal to halve
    assert c.bytes == pytest.approx(4 * 8 * 64 * 4 + 4000 * 64 * 2 * 2)


@pytest.mark.slow
def test_vllm_trace_attention_gets_a_roofline() -> None:
    rep = report_of(real("eager_trace.json.gz"))
    assert rep.serving is not None and rep.serving.framework == "vllm"
    assert rep.serving.with_sizes == 1 and rep.serving.phases[0].phase == "prefill"
    assert rep.serving.attention_modelled_share > 0.7  # the fmha kernels (the rest: the cache writes)
    fmha = [p for p in rep.roofline.points if p.name.startswith("fmhaSm100a")] if rep.roofline else []
    assert fmha and all(p.family == "attention" and p.dtype == "fp8_e4m3" for p in fmha)
    # 807 MFLOP of fp8 attention in ~15 µs: far from the 4.5 PFLOP/s roof, latency-bound
    assert all(p.bound == "latency" and 0 < p.roof_share < 0.05 for p in fmha)
    assert rep.roofline is not None and rep.roofline.coverage > 0.28  # 0.24 before the step sizes were read
