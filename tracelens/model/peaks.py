"""Device roofs for the roofline: dense peak FLOP/s per execution unit and memory bandwidth.

Datasheet numbers, dense (no 2:4 sparsity), boost clock, SXM/OAM parts unless the name
says PCIe. The datasheet peak is the roof every kernel is judged against: an achieved rate
above it means the FLOP or byte model is wrong, never that the kernel is fast. Where this
workplace measured a sustained ceiling (random data, the card's own clocks and power cap)
it is kept beside the roof, for display only.

Units (keys of `flops`): fp32 (CUDA cores, FFMA), tf32, bf16, fp16, fp8, int8 (tensor cores;
int8 in TOPS). A key that is absent means the GPU has no such unit: V100, T4 and the RTX
2080 Ti have neither TF32 nor bf16 tensor cores (bf16 runs on CUDA cores there), the A100,
A10 and the AMD MI250(X) no fp8. For AMD parts fp32 is the matrix-core FP32 rate (the
upper bound of the two FP32 paths). Override with
TRACELENS_PEAKS='{"bf16": 700e12, "bandwidth": 3e12}'.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

TFLOPS = 1e12
TBPS = 1e12

#: Display names of the units.
UNIT_NAMES = {
    "fp32": "fp32 CUDA cores",
    "tf32": "TF32 tensor cores",
    "tf32x3": "TF32 tensor cores, 3 per fp32 product (3xTF32)",
    "bf16": "bf16 tensor cores",
    "fp16": "fp16 tensor cores",
    "fp8": "fp8 tensor cores",
    "int8": "int8 tensor cores",
    "issue": "instruction issue (all SM pipes)",
}
#: Kernel-name fragments of fp32 matmul/conv kernels that run on TF32 tensor cores
#: (cuBLAS/cuDNN xmma names spell the operand types, CUTLASS's s1688/s16816 are TF32 MMA shapes).
TF32_MARKERS = ("tf32", "s1688", "s16816", "xmma_tf32")
#: ... and of those that run on CUDA cores (FFMA), whatever else the name says.
FFMA_MARKERS = ("ffma", "sgemm", "simt", "scudnn", "_f32f32_f32f32_f32", "cutlassf_f32", "cutlassb_f32")
#: fp32 kernels that multiply on TF32 tensor cores three times per product (CUTLASS's
#: OpMultiplyAddFastF32, fp32 accuracy): PyTorch's memory-efficient attention for fp32 on
#: compute capability 8.0 and later (mem_eff_attention/gemm_kernel_utils.h, DefaultGemmType
#: for float), whatever allow_tf32 says. Nsight Compute shows its tensor pipe busy (25% of
#: cycles on the `onchip` case's 256-token launch). Their roof is a third of TF32's.
TF32X3_MARKERS = ("fmha_cutlassf_f32", "fmha_cutlassb_f32")
TF32X3_ARCH_SUFFIXES = ("_sm80", "_sm86", "_sm89", "_sm90", "_sm100", "_sm120")
TF32X3_PASSES = 3.0


@dataclass(frozen=True)
class DevicePeaks:
    name: str
    flops: dict[str, float]  # unit -> datasheet FLOP/s (int8: OP/s)
    bandwidth: float  # datasheet bytes/s
    source: str
    measured: dict[str, float] = field(default_factory=dict)  # sustained ceilings measured in this workplace
    #: Thread instructions the SMs can issue per second (one warp instruction per scheduler
    #: per clock: SMs x 4 x 32 x boost clock), the roof of kernels limited by instruction
    #: count rather than FLOPs or bytes (erf, exp, conversions, index math). 0: not known.
    issue: float = 0.0
    #: Bytes/s the crossbar can carry into L2 (Nsight Compute's lts__xbar2lts): one 32-byte
    #: write sector or one read request (a 128-byte line) per cycle per L2 slice. The roof of
    #: kernels whose traffic stays on chip, as register spills do. 0: not known.
    l2_write: float = 0.0

    def unit_for(self, dtype: str, tensor_core: bool, kernel: str = "") -> str:
        """The execution unit whose peak is the roof for an op of this dtype on this GPU:
        tensor-core work (matmul, conv, attention) on the dtype's tensor cores where the GPU
        has them, fp32 matmuls on TF32 only when the kernel's name says so, everything else
        (and what the GPU cannot run on tensor cores) on the fp32 CUDA cores."""
        low = kernel.lower()
        if not tensor_core:
            return "fp32"
        if dtype == "fp32" and "tf32" in self.flops and any(m in low for m in TF32X3_MARKERS):
            arch = low.split("(", 1)[0]
            if any(arch.endswith(s) or s + "(" in low for s in TF32X3_ARCH_SUFFIXES):
                return "tf32x3"
        if dtype == "fp32":
            tf32 = any(m in low for m in TF32_MARKERS) and not any(m in low for m in FFMA_MARKERS)
            return "tf32" if tf32 and "tf32" in self.flops else "fp32"
        if dtype.startswith("fp8"):
            return next((u for u in ("fp8", "fp16") if u in self.flops), "fp32")
        if dtype in ("bf16", "fp16", "int8") and dtype in self.flops:
            return dtype
        return "fp32"

    def roof(self, dtype: str, tensor_core: bool, kernel: str = "") -> tuple[str, float]:
        """(unit, datasheet FLOP/s) of the compute roof for this kernel."""
        unit = self.unit_for(dtype, tensor_core, kernel)
        return unit, self.unit_peak(unit)

    def unit_peak(self, unit: str) -> float:
        """The datasheet FLOP/s of a unit (3xTF32: a third of TF32's); 0 if the GPU has none."""
        if unit == "tf32x3":
            return self.flops.get("tf32", 0.0) / TF32X3_PASSES
        return self.flops.get(unit, 0.0)

    def peak(self, dtype: str, tensor_core: bool) -> float:
        """The datasheet FLOP/s roof for an op of this dtype."""
        return self.roof(dtype, tensor_core)[1]

    @property
    def bw(self) -> float:
        """The bandwidth roof: the datasheet figure."""
        return self.bandwidth


def _p(fp32: float, tf32: float, bf16: float, fp16: float, fp8: float, int8: float) -> dict[str, float]:
    """TFLOP/s (TOPS for int8) per unit; 0 = the GPU has no such unit."""
    units = {"fp32": fp32, "tf32": tf32, "bf16": bf16, "fp16": fp16, "fp8": fp8, "int8": int8}
    return {k: v * TFLOPS for k, v in units.items() if v}


_HOPPER = _p(67, 494.7, 989.4, 989.4, 1978.9, 1978.9)
#: H100/H200 SXM: 132 SMs x 4 schedulers x 32 lanes x 1.98 GHz boost. Nsight Compute's SM
#: throughput of ATen's elementwise kernels on the H200 equals their issue-slot use (GELU
#: bf16: 68% for 3.16e7 warp instructions in 45 us, i.e. 1.955 GHz: the clock holds there).
_HOPPER_ISSUE = 132 * 4 * 32 * 1.98e9
#: H200: Nsight Compute's L2 peak (lts__t_bytes.sum.peak_sustained) is 9,024 B per L2 cycle,
#: 64 B per slice, and its crossbar port takes 32 B per slice per cycle, so 4,512 B/cycle at
#: the L2 clock (1.65-1.71 GHz under Nsight Compute, 1.70 taken). Checked on the fp32
#: memory-efficient attention at 256 and 1024 tokens (bench/ncu_compare_memory.sh, `onchip`
#: case): writes/32 B plus reads/128 B against this port predict lts__xbar2lts_cycles_active
#: at 57.4% and 70.7%, Nsight Compute measured 58.0% and 71.5%.
_H200_L2_WRITE = 4512 * 1.70e9
_A100 = _p(19.5, 156, 312, 312, 0, 624)

#: (substring of deviceProperties name, peaks). More specific names first.
TABLE: tuple[tuple[str, DevicePeaks], ...] = (
    (
        "H200",
        DevicePeaks(
            "H200 SXM", _HOPPER, 4.8 * TBPS, "NVIDIA H200 Tensor Core GPU datasheet (H200 SXM column, dense)",
            # torch.mm 8192^3 bf16 on random data and a device-to-device copy (read + write),
            # lent H200, 2026-11 (gpu-trace-facts.md).
            measured={"bf16": 790 * TFLOPS, "fp16": 790 * TFLOPS, "bandwidth": 4.3 * TBPS},
            issue=_HOPPER_ISSUE,
            l2_write=_H200_L2_WRITE,
        ),
    ),
    ("H100 PCIe", DevicePeaks("H100 PCIe", _p(51, 378, 756, 756, 1513, 1513), 2.0 * TBPS,
                              "NVIDIA H100 Tensor Core GPU datasheet (H100 PCIe column, dense)")),
    ("H100 NVL", DevicePeaks("H100 NVL", _p(60, 418, 835, 835, 1671, 1671), 3.9 * TBPS,
                             "NVIDIA H100 Tensor Core GPU datasheet (H100 NVL column, dense)")),
    ("H100", DevicePeaks("H100 SXM", _HOPPER, 3.35 * TBPS,
                         "NVIDIA H100 Tensor Core GPU datasheet (H100 SXM column, dense)", issue=_HOPPER_ISSUE)),
    ("B200", DevicePeaks("B200", _p(75, 1100, 2250, 2250, 4500, 4500), 8.0 * TBPS,
                         "NVIDIA HGX B200 datasheet (8-GPU figures / 8, dense)")),
    ("A100-PCIE-40GB", DevicePeaks("A100 40GB PCIe", _A100, 1.555 * TBPS, "NVIDIA A100 Tensor Core GPU datasheet")),
    ("A100-SXM4-40GB", DevicePeaks("A100 40GB SXM", _A100, 1.555 * TBPS, "NVIDIA A100 Tensor Core GPU datasheet")),
    ("A100 80GB PCIe", DevicePeaks("A100 80GB PCIe", _A100, 1.935 * TBPS, "NVIDIA A100 Tensor Core GPU datasheet")),
    ("A100", DevicePeaks("A100 80GB SXM", _A100, 2.039 * TBPS, "NVIDIA A100 Tensor Core GPU datasheet")),
    # A100-PG509-200 (HTA's traces) is an A100 SXM module: caught by "A100".
    ("L40S", DevicePeaks("L40S", _p(91.6, 183, 362, 362, 733, 733), 0.864 * TBPS, "NVIDIA L40S datasheet")),
    ("L4", DevicePeaks("L4", _p(30.3, 60, 121, 121, 242, 242), 0.3 * TBPS, "NVIDIA L4 datasheet")),
    ("A10", DevicePeaks("A10", _p(31.2, 62.5, 125, 125, 0, 250), 0.6 * TBPS, "NVIDIA A10 datasheet")),
    ("T4", DevicePeaks("T4", _p(8.1, 0, 0, 65, 0, 130), 0.32 * TBPS, "NVIDIA T4 datasheet")),
    ("V100 PCIe", DevicePeaks("V100 PCIe", _p(14, 0, 0, 112, 0, 0), 0.9 * TBPS, "NVIDIA V100 datasheet (PCIe)")),
    # DGXS (DGX Station) and SXM2 V100s run at the SXM2 clocks.
    ("V100", DevicePeaks("V100 SXM2", _p(15.7, 0, 0, 125, 0, 0), 0.9 * TBPS, "NVIDIA V100 datasheet (SXM2)")),
    ("2080 Ti", DevicePeaks("RTX 2080 Ti", _p(13.4, 0, 0, 107.6, 0, 215.2), 0.616 * TBPS,
                            "NVIDIA Turing architecture whitepaper (RTX 2080 Ti, fp16 accumulate)")),
    ("MI300X", DevicePeaks("MI300X", _p(163.4, 653.7, 1307.4, 1307.4, 2614.9, 2614.9), 5.3 * TBPS,
                           "AMD Instinct MI300X datasheet (dense)")),
    ("MI250X", DevicePeaks("MI250X", _p(95.7, 0, 383, 383, 0, 383), 3.2 * TBPS, "AMD Instinct MI250X datasheet")),
    ("MI250", DevicePeaks("MI250", _p(90.5, 0, 362.1, 362.1, 0, 362.1), 3.2 * TBPS, "AMD Instinct MI250 datasheet")),
)  # fmt: skip


#: Parts known by their architecture fields, for a trace whose device name is empty
#: (AMD's serving traces write ""): (compute capability, SM/CU count, least memory
#: GiB, part name as the table spells it). gfx942 with 304 CUs is the MI300X (also its VF),
#: Hopper with 132 SMs an H100 SXM (80 GiB) or H200 (141 GiB), and so on.
ARCH_PARTS: tuple[tuple[tuple[int, int], int, float, str], ...] = (
    ((9, 4), 304, 0.0, "AMD Instinct MI300X"),
    ((10, 0), 148, 0.0, "NVIDIA B200"),
    ((9, 0), 132, 120.0, "NVIDIA H200"),
    ((9, 0), 132, 0.0, "NVIDIA H100 80GB HBM3"),
    ((8, 0), 108, 60.0, "NVIDIA A100-SXM4-80GB"),
    ((8, 0), 108, 0.0, "NVIDIA A100-SXM4-40GB"),
    ((7, 0), 80, 0.0, "Tesla V100-SXM2"),
)
#: Names that say nothing of the part.
GENERIC_NAMES = ("", "(unnamed gpu)", "amd radeon graphics")


def infer_part(
    name: str, compute_capability: tuple[int, int] | None, num_sms: int | None, memory_bytes: int | None
) -> str | None:
    """The part a device with an empty (or generic) name is, from its architecture
    fields, or None when they fit no known part."""
    if name.strip().lower() not in GENERIC_NAMES or compute_capability is None or num_sms is None:
        return None
    gib = (memory_bytes or 0) / 2**30
    for cc, sms, min_gib, part in ARCH_PARTS:
        if cc == compute_capability and sms == num_sms and gib >= min_gib:
            return part
    return None


def peaks_for(device_name: str | None) -> DevicePeaks | None:
    """The table entry whose key appears in the device's name, with any override from
    the TRACELENS_PEAKS environment variable applied."""
    found = None
    if device_name:
        for key, peaks in TABLE:
            if key.lower() in device_name.lower():
                found = peaks
                break
    override = os.environ.get("TRACELENS_PEAKS")
    if override:
        try:
            values = json.loads(override)
        except json.JSONDecodeError:
            values = {}
        if isinstance(values, dict):
            base = found or DevicePeaks(device_name or "override", {}, 0.0, "override")
            flops = dict(base.flops)
            flops.update({k: float(v) for k, v in values.items() if k != "bandwidth"})
            bw = float(values.get("bandwidth", base.bandwidth))
            found = DevicePeaks(base.name, flops, bw, base.source + " + TRACELENS_PEAKS", {}, base.issue, base.l2_write)
    return found
