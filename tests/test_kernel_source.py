"""Kernel to source: Inductor-generated Triton kernels get the compiled module the trace
names and, where it is readable, the line of their `def`; cuBLAS/aten kernels get none.
Real sample: sample_traces/capture_compile (torch.compile'd MLP on the H200, with stacks)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from support.corpus import model_of, needs_real, real, report_of, sample

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
    # vLLM's SFINAE return type: the `>` of `(8)>(0)` closes no template
    enable_if = ("std::enable_if<(((8)>(0)))&&vllm::_typeConvert<c10::BFloat16>::exists, void>::type "
                 "vllm::fused_add_rms_norm_kernel<c10::BFloat16, 8>(c10::BFloat16*, long, int)")  # fmt: skip
    assert kernel_identifier(enable_if) == "fused_add_rms_norm_kernel"


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


#: A stand-in for vLLM's csrc/layernorm_kernels.cu, written here in the shape of its
#: definitions (a SFINAE return type on its own line before the name; a plain one).
_LAYERNORM_CU = """#include <torch/all.h>
namespace vllm {
template <typename scalar_t, int VEC_SIZE, int NUM_DIMS>
__global__ void rms_norm_kernel(scalar_t* __restrict__ out, const scalar_t* __restrict__ input) {
  // ...
}

template <typename scalar_t, int width>
__global__ std::enable_if_t<(width > 0) && _typeConvert<scalar_t>::exists>
fused_add_rms_norm_kernel(scalar_t* __restrict__ input, const int64_t input_stride) {
  // ...
}
}  // namespace vllm
"""


@pytest.mark.slow
@needs_real
def test_vllm_extension_kernels_name_their_custom_op(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """TraceLens's vLLM trace (B200, with stacks): the kernels of vLLM's compiled `_C`
    extension get their custom op and the Python call that launched it, and with the .cu
    sources under TRACELENS_SOURCES their `__global__` line. PyTorch's own symmetric-memory
    all-reduce (`symm_mem::multimem_all_reduce_`) and the NCCL kernel of vLLM's Python
    custom op `vllm::all_gather` are not an extension's source (both were before)."""
    trace = real("eager_trace.json.gz")
    model = model_of(trace)
    names = [str(n) for n in model.gpu["name"].cat.categories]
    monkeypatch.delenv("TRACELENS_SOURCES", raising=False)
    monkeypatch.chdir(tmp_path)
    away = {k.function: k for k in kernel_sources(model, names) if k.kind == "extension"}
    assert {"rms_norm_kernel", "fused_add_rms_norm_kernel", "rotary_embedding_kernel"} <= set(away)
    rms = away["rms_norm_kernel"]
    assert rms.library == "_C::rms_norm" and not rms.found and rms.line is None and rms.file == ""
    assert rms.launched_from is not None and rms.launched_from.file.endswith("vllm/_custom_ops.py")
    assert away["fused_add_rms_norm_kernel"].library == "_C::fused_add_rms_norm"
    assert away["reshape_and_cache_flash_kernel"].library == "_C_cache_ops::reshape_and_cache_flash"
    assert "multimem_all_reduce_kernel" not in away
    assert not any(k.function.startswith("nccl") for k in away.values())

    csrc = tmp_path / "src" / "csrc"
    csrc.mkdir(parents=True)
    (csrc / "layernorm_kernels.cu").write_text(_LAYERNORM_CU)
    monkeypatch.setenv("TRACELENS_SOURCES", str(tmp_path / "src"))
    got = {k.function: k for k in kernel_sources(model, names) if k.kind == "extension"}
    lines = _LAYERNORM_CU.splitlines()
    for ident in ("rms_norm_kernel", "fused_add_rms_norm_kernel"):
        k = got[ident]
        assert k.found and k.file == str(csrc / "layernorm_kernels.cu")
        assert lines[k.line - 1].startswith("__global__")  # type: ignore[operator]
    assert not got["rotary_embedding_kernel"].found  # its .cu is not there: no line made up
