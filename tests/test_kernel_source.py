"""Kernel to source: Inductor-generated Triton kernels get the compiled module the trace
names and, where it is readable, the line of their `def`; cuBLAS/aten kernels get none.
Real sample: sample_traces/capture_compile (torch.compile'd MLP on the H200, with stacks)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from support.corpus import model_of, report_of, sample

from tracelens.derive.kernel_source import kernel_identifier, kernel_sources

REPO = Path(__file__).resolve().parents[1]
MODULE = "/tmp/torchinductor_root/ll/cllk44rh7nmhxvieufnofcwtd6xpxjw3hukro6xvdfsxaiizpsft.py"


@pytest.mark.slow
def test_inductor_kernels_name_their_compiled_module() -> None:
    rep = report_of(sample("capture_compile"))
    got = {k.kernel: k for k in rep.kernel_sources}
    triton = [k.name for k in rep.kernels if k.name.startswith("triton_")]
    assert triton and set(triton) <= set(got)
    for name in triton:
        src = got[name]
        assert (src.kind, src.file, src.function) == ("inductor", MODULE, name)
        assert src.launched_from is not None and src.launched_from.function == "call"
        # the module is on the H200, not here: the line is not made up
        assert src.line is None and not src.found
    # cuBLAS GEMMs called from the same compiled module are not its kernels
    assert not any(k.startswith("nvjet") for k in got)


def test_a_readable_copy_of_the_module_gives_the_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    copy = tmp_path / "ll" / Path(MODULE).name
    copy.parent.mkdir()
    lines = ["import triton", "", "", "@triton.jit", "def triton_poi_fused_gelu_1(in_ptr0, out_ptr0, xnumel, XBLOCK):",
             "    pass", "", "def call(args):", "    pass"]  # fmt: skip
    copy.write_text("\n".join(lines) + "\n")
    monkeypatch.setenv("TRACELENS_SOURCES", str(tmp_path))
    found = {k.kernel: k for k in kernel_sources(model_of(sample("capture_compile")), ["triton_poi_fused_gelu_1"])}
    src = found["triton_poi_fused_gelu_1"]
    assert src.found and src.line == 5
    assert src.file == MODULE  # the file as the trace names it; the copy only lent its line


def test_kernel_identifier() -> None:
    assert kernel_identifier("void vllm::rms_norm_kernel<c10::BFloat16, 8>(float*, int)") == "rms_norm_kernel"
    assert kernel_identifier("triton_poi_fused_add_0") == "triton_poi_fused_add_0"
    assert kernel_identifier("void (anonymous namespace)::multimem_all_reduce_kernel<c10::BFloat16, 16>(x)") == (
        "multimem_all_reduce_kernel"
    )


@pytest.mark.slow
def test_traces_without_such_kernels_have_none() -> None:
    assert report_of(sample("host_sync_mask")).kernel_sources == ()


IND = Path(__file__).parent / "data" / "inputs" / "inductor"


@pytest.mark.slow
def test_h200_inductor_and_user_triton_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch.compile'd MLP + a hand-written @triton.jit kernel (workloads/inputs/
    inductor_kernels.py), traced with stacks on the H200; the compiled modules Inductor
    wrote are kept in tests/data/inputs/inductor/cache."""
    trace = IND / "inductor_kernels.pt.trace.json.gz"
    names = ["triton_per_fused_native_layer_norm_0", "triton_poi_fused_gelu_view_1", "scale_shift_kernel",
             "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_bias_TNN"]  # fmt: skip
    monkeypatch.delenv("TRACELENS_SOURCES", raising=False)
    away = {k.kernel: k for k in kernel_sources(model_of(trace), names)}
    assert away["triton_per_fused_native_layer_norm_0"].file.endswith(
        "cache/h5/ch5gokgxfzeezjhnsgftbona53iiepjabckw25dx6jzkdhjeaqgm.py"
    )
    assert not away["triton_per_fused_native_layer_norm_0"].found
    monkeypatch.setenv("TRACELENS_SOURCES", os.pathsep.join([str(IND / "cache"), str(REPO / "workloads" / "inputs")]))
    got = {k.kernel: k for k in kernel_sources(model_of(trace), names)}
    ln = got["triton_per_fused_native_layer_norm_0"]
    text = (IND / "cache" / "h5" / "ch5gokgxfzeezjhnsgftbona53iiepjabckw25dx6jzkdhjeaqgm.py").read_text().splitlines()
    assert ln.found and text[ln.line - 1].startswith("def triton_per_fused_native_layer_norm_0(")  # type: ignore[operator]
    gelu = got["triton_poi_fused_gelu_view_1"]
    assert gelu.found and text[gelu.line - 1].startswith("def triton_poi_fused_gelu_view_1(")  # type: ignore[operator]
    user = got["scale_shift_kernel"]
    src = (REPO / "workloads" / "inputs" / "inductor_kernels.py").read_text().splitlines()
    assert user.kind == "triton" and user.found
    assert src[user.line - 1].startswith("def scale_shift_kernel(")  # type: ignore[operator]
    assert src[user.line - 2] == "@triton.jit"  # type: ignore[operator]
    assert user.launched_from is not None and user.launched_from.function == "scale_shift"
    assert "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_bias_TNN" not in got  # cuBLAS: not the user's
