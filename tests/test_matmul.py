"""Matmul shapes on H200 captures (gemm_misaligned, matmul_sweep: workloads/) and a real
trace: alignment verdicts, fallback kernels, tiles and waves, and predicted wave
efficiency against measured throughput."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from support.corpus import REPO, context_of, model_of, needs_real, real, report_of, sample, whole_context_of

from tracelens.analyzers import misaligned_matmul, wave_quantization
from tracelens.derive.matmuls import Tile, matmul_rows, parse_tile, shape_of, tiles_for, waves_of
from tracelens.domain import severity_for
from tracelens.render import render_html, render_json

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from matmul_sweep_check import correlations

#: Dense bf16 peak of an H200 SXM (datasheet, 989 TFLOP/s): no measured rate may exceed it.
H200_BF16_PEAK = 989.0


def test_tile_parsing() -> None:
    assert parse_tile("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT") == Tile(256, 128, "name")
    assert parse_tile("void cutlass::Kernel2<cutlass_75_tensorop_bf16_s1688gemm_bf16_256x128_nn_align1>(x)") == Tile(
        256, 128, "name"
    )
    assert parse_tile("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1") == Tile(
        128, 128, "name"
    )
    assert parse_tile("ampere_sgemm_128x64_tn") == Tile(128, 64, "name")
    assert parse_tile("triton_tem_fused_mm_0") is None
    # The seed's example: 1792 vs 1793 on an A100 (108 SMs) with 256x128 tiles.
    t = Tile(256, 128, "name")
    full = waves_of(tiles_for(1792, 1792, 1, t, -1, True), 108)
    over = waves_of(tiles_for(1793, 1793, 1, t, -1, True), 108)
    assert full[2] > over[2]


def test_layouts_from_strides() -> None:
    s = shape_of("aten::mm", {"Input Dims": [[64, 32], [32, 16]], "Input type": ["float", "float"],
                              "Input Strides": [[1, 64], [16, 1]]})  # fmt: skip
    assert s is not None and s.layout == "TN" and s.lda == 64 and s.ldb == 16 and s.itemsize == 4


@pytest.mark.parametrize("name", ["gemm_misaligned", "matmul_sweep"])
def test_every_misaligned_shape_flagged_and_no_aligned_one(name: str) -> None:
    rows = matmul_rows(model_of(sample(name)))
    assert rows
    for r in rows:
        odd = any(x % 8 for x in (r.m, r.n, r.k))
        # M odd alone costs nothing (gpu-trace-facts.md): only K and N matter for row-major A@B.
        k_or_n_odd = bool(r.k % 8 or r.n % 8)
        assert r.aligned == (not k_or_n_odd), r
        assert r.fallback_kernel == k_or_n_odd, r
        if odd:
            assert "cutlass_75" in r.kernel and "align1" in r.kernel
        assert 0 < r.tflops < H200_BF16_PEAK, r
    ctx = context_of(sample(name))
    (f,) = misaligned_matmul.analyze(ctx)
    assert severity_for(ctx.share(f.time_us)).value in ("high", "medium")
    # The slowdown is measured against an aligned peer in the same trace: 4-6x here.
    top = f.places[0].facts
    assert isinstance(top, misaligned_matmul.MisalignedShape)
    assert top.peer_tflops is not None and 3 < top.slowdown <= misaligned_matmul.MAX_SLOWDOWN
    # The padding: to a multiple of 8 bf16 elements (16 bytes), each misaligned dim padded.
    assert top.pad_to == 8 and top.pads and all(v % 8 == 0 for _, v in top.pads)
    assert {d for d, _ in top.pads} == {d.dim for d in top.row.misaligned_dims}


def test_predicted_wave_efficiency_tracks_measured_throughput() -> None:
    """Square bf16 sweeps on the H200, shapes >= 2048 (bench/matmul_sweep_check.py). With
    slots = SMs x CTAs/SM (not the persistent kernel's grid): r = 0.73 raw, 0.84 detrended
    on matmul_sweep (was 0.62 / 0.83 with grid slots), 0.81 / 0.86 on wave_sweep."""
    corr = correlations(sample("matmul_sweep"), sample("matmul_sweep").with_name("matmul_sweep.measured.json"), 2048)
    raw, detrended, n = corr["kernel TFLOP/s in the trace"]
    assert n >= 30
    assert raw > 0.7 and detrended > 0.8
    sweep = REPO / "tests" / "data" / "wave_sweep.pt.trace.json.gz"
    raw, detrended, n = correlations(sweep, sweep.with_name("wave_sweep.measured.json"), 2048)[
        "kernel TFLOP/s in the trace"
    ]
    assert n >= 15 and raw > 0.75 and detrended > 0.8


def test_partial_waves_flagged_with_cost(monkeypatch: pytest.MonkeyPatch) -> None:
    """wave_sweep on the H200: 2304^2 makes 216 tiles of 192x128 on 132 SMs (1.64 waves,
    82%) and 1792^2 98 tiles of 256x128 (under one wave: 26% of the SMs idle); both are
    flagged with their cost once their time matters (each runs twice in the sweep)."""
    monkeypatch.setattr(wave_quantization, "MIN_SHARE", 0.0)
    (f,) = wave_quantization.analyze(context_of(REPO / "tests" / "data" / "wave_sweep.pt.trace.json.gz"))
    by_shape = {(p.facts.row.m, p.facts.row.n, p.facts.row.k): p for p in f.places}
    site = by_shape[(2304, 2304, 2304)]
    assert site.facts.row.waves == pytest.approx(1.64, abs=0.005)
    assert site.facts.row.wave_efficiency == pytest.approx(0.82, abs=0.005) and site.time_us > 0
    rows = {(r.m, r.n, r.k): r for r in matmul_rows(model_of(REPO / "tests" / "data" / "wave_sweep.pt.trace.json.gz"))}
    small = rows[(1792, 1792, 1792)]
    assert small.waves < 1 and small.wave_efficiency < 0.8  # judged although under one wave
    assert rows[(2432, 2432, 2432)].wave_efficiency > rows[(2304, 2304, 2304)].wave_efficiency + 0.1


@pytest.mark.slow
@needs_real
def test_wave_quantization_on_qwen_prefill() -> None:
    """Qwen1.5-0.5B on an H100 (132 SMs): 8944 tokens x 1024 features make 560 tiles of
    128x128 = 4.24 waves; the fifth wave is 24% full."""
    (f,) = wave_quantization.analyze(context_of(real("Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz")))
    top = f.places[0].facts
    assert (top.row.m, top.row.n) == (8944, 1024) and top.row.waves == pytest.approx(4.24, abs=0.005)
    # 66 x 128 rows: exactly 4 waves, one fewer (less time)
    assert wave_quantization.FullWaveShape("M", 8448, 4, smaller=True) in top.nearest


def test_small_or_exact_shapes_not_flagged() -> None:
    rows = {(r.m, r.n, r.k): r for r in matmul_rows(model_of(sample("matmul_sweep")))}
    assert rows[(2048, 2048, 2048)].wave_efficiency == pytest.approx(128 / 132, abs=0.01)  # 128 tiles, 132 SMs
    assert rows[(2304, 2304, 2304)].wave_efficiency < 0.85  # 216 tiles on 132 SMs
    # The sweep runs each shape 3 times: nothing costs enough to be worth a finding.
    assert wave_quantization.analyze(whole_context_of(sample("matmul_sweep"))) == []


@pytest.mark.slow
@needs_real
def test_owlv2_attention_bmm_on_odd_sequence_length() -> None:
    """OWLv2 on an H100: attention batched matmuls over 5185 tokens run on the Turing
    align1 fallback at ~50-70 TFLOP/s while the aligned projections reach 500-750."""
    # They are eager attention's matmuls: SDPA removes them, so they are not a padding
    # finding any more (the memory finding leads with scaled_dot_product_attention).
    ctx = context_of(real("google_owlv2-large-patch14-ensemble__1016001.json.gz"))
    rows = [r for r in matmul_rows(ctx.model) if r.m == 5185 or r.n == 5185]
    assert rows and any(not r.aligned for r in rows)
    assert misaligned_matmul.analyze(ctx) == []


def test_report_carries_matmul_table() -> None:
    rep = report_of(sample("gemm_misaligned"))
    assert rep.summary.primary == "misaligned_matmul"
    data = render_json(rep)
    assert '"matmuls"' in data and '"wave_efficiency"' in data
    html = render_html(rep)
    assert "Matmul shapes" in html and "align1" in html


@pytest.mark.slow
@needs_real
def test_unshaped_unaligned_gemms_from_kernel_names() -> None:
    """HTA's rank0 (A100) runs 117 ms of TF32 GEMMs on CUTLASS align1 kernels under compiled
    autograd functions that record no shapes: the kernel-name model (dtype, tile, operand
    alignment) finds them, gives them the TF32 roof, and the padding finding lists them."""
    ctx = context_of(real("rank0.json.gz"))
    (f,) = misaligned_matmul.analyze(ctx)
    fallbacks = [p.facts for p in f.places if isinstance(p.facts, misaligned_matmul.FallbackKernel)]
    fallbacks = [k for k in fallbacks if "s1688gemm" in k.kernel]
    # fp32 on tensor cores: TF32, on kernels built for 1-element alignment
    assert len(fallbacks) >= 3 and all(k.dtype == "fp32" and k.align_elements == 1 for k in fallbacks)
    assert f.facts.total_us / 1e3 == pytest.approx(117.6, abs=0.05)
    rows = [k for k in ctx.roofline.kernels if "s1688gemm" in k.name]
    assert rows and all(k.family == "matmul" and k.unit == "tf32" for k in rows)
    assert any(k.flops == 0 and k.roof_name == "TF32 tensor cores" for k in rows)
