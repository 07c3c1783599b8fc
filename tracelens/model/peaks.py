"""Device ceilings for the roofline: dense peak FLOP/s per dtype and memory bandwidth.

Datasheet numbers, dense (no 2:4 sparsity), boost clock, SXM/OAM parts unless the name
says PCIe. They are upper bounds: sustained matmul throughput is lower (power limits,
see power_throttle), so where this workplace measured a ceiling it is listed too and the
classification uses the measured one.

Sources (vendor datasheets and whitepapers): NVIDIA V100, T4, A10, A100, L4, L40S, H100,
H200, B200 datasheets; NVIDIA Turing (RTX 2080 Ti) whitepaper; AMD Instinct MI250/MI250X
and MI300X datasheets. Override with TRACELENS_PEAKS='{"bf16": 700e12, "bandwidth": 3e12}'.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

TFLOPS = 1e12
TBPS = 1e12


@dataclass(frozen=True)
class DevicePeaks:
    name: str
    flops: dict[str, float]  # dtype -> FLOP/s: fp32 (CUDA cores), tf32, bf16, fp16, fp8 (tensor cores)
    bandwidth: float  # bytes/s
    source: str
    measured: dict[str, float] = field(default_factory=dict)  # ceilings measured in this workplace

    def peak(self, dtype: str, tensor_core: bool) -> float:
        """The FLOP/s ceiling for an op of this dtype (measured where known, else the
        datasheet): tensor-core dtypes on tensor cores, everything else on CUDA cores."""
        key = "fp32"
        if tensor_core and dtype.startswith("fp8"):
            key = "fp8"
        elif tensor_core and dtype in ("bf16", "fp16"):
            key = dtype
        return self.measured.get(key) or self.flops.get(key) or self.flops.get("fp32", 0.0)

    @property
    def bw(self) -> float:
        return self.measured.get("bandwidth") or self.bandwidth


def _p(fp32: float, tf32: float, bf16: float, fp8: float, bw_tb: float) -> dict[str, float]:
    out = {"fp32": fp32 * TFLOPS, "bf16": bf16 * TFLOPS, "fp16": bf16 * TFLOPS}
    if tf32:
        out["tf32"] = tf32 * TFLOPS
    if fp8:
        out["fp8"] = fp8 * TFLOPS
    return out


#: (substring of deviceProperties name, peaks). More specific names first.
TABLE: tuple[tuple[str, DevicePeaks], ...] = (
    (
        "H200",
        DevicePeaks(
            "H200 SXM",
            _p(67, 495, 989, 1979, 0),
            4.8 * TBPS,
            "NVIDIA H200 datasheet",
            measured={"bf16": 790 * TFLOPS, "fp16": 790 * TFLOPS, "bandwidth": 4.3 * TBPS},
        ),
    ),
    ("H100 PCIe", DevicePeaks("H100 PCIe", _p(51, 378, 756, 1513, 0), 2.0 * TBPS, "NVIDIA H100 datasheet")),
    ("H100", DevicePeaks("H100 SXM", _p(67, 495, 989, 1979, 0), 3.35 * TBPS, "NVIDIA H100 datasheet")),
    ("B200", DevicePeaks("B200", _p(75, 1100, 2250, 4500, 0), 8.0 * TBPS, "NVIDIA B200 datasheet (HGX B200 / 8)")),
    ("A100-PCIE-40GB", DevicePeaks("A100 40GB PCIe", _p(19.5, 156, 312, 0, 0), 1.555 * TBPS, "NVIDIA A100 datasheet")),
    ("A100-SXM4-40GB", DevicePeaks("A100 40GB SXM", _p(19.5, 156, 312, 0, 0), 1.555 * TBPS, "NVIDIA A100 datasheet")),
    ("A100 80GB PCIe", DevicePeaks("A100 80GB PCIe", _p(19.5, 156, 312, 0, 0), 1.935 * TBPS, "NVIDIA A100 datasheet")),
    ("A100", DevicePeaks("A100 80GB SXM", _p(19.5, 156, 312, 0, 0), 2.039 * TBPS, "NVIDIA A100 datasheet")),
    ("L40S", DevicePeaks("L40S", _p(91.6, 183, 362, 733, 0), 0.864 * TBPS, "NVIDIA L40S datasheet")),
    ("L4", DevicePeaks("L4", _p(30.3, 60, 121, 242, 0), 0.3 * TBPS, "NVIDIA L4 datasheet")),
    ("A10", DevicePeaks("A10", _p(31.2, 62.5, 125, 0, 0), 0.6 * TBPS, "NVIDIA A10 datasheet")),
    ("T4", DevicePeaks("T4", _p(8.1, 0, 65, 0, 0), 0.32 * TBPS, "NVIDIA T4 datasheet")),
    ("V100", DevicePeaks("V100 SXM2", _p(15.7, 0, 125, 0, 0), 0.9 * TBPS, "NVIDIA V100 datasheet (fp16 tensor)")),
    ("2080 Ti", DevicePeaks("RTX 2080 Ti", _p(13.4, 0, 107, 0, 0), 0.616 * TBPS, "NVIDIA Turing whitepaper")),
    ("MI300X", DevicePeaks("MI300X", _p(163.4, 653.7, 1307.4, 2614.9, 0), 5.3 * TBPS, "AMD MI300X datasheet")),
    ("MI250X", DevicePeaks("MI250X", _p(95.7, 0, 383, 0, 0), 3.2 * TBPS, "AMD MI250X datasheet")),
    ("MI250", DevicePeaks("MI250", _p(90.5, 0, 362.1, 0, 0), 3.2 * TBPS, "AMD MI250 datasheet")),
)
# bf16 on V100/T4/2080 Ti has no tensor-core path; the fp16 figure is the tensor-core one.


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
            found = DevicePeaks(base.name, flops, bw, base.source + " + TRACELENS_PEAKS", {})
    return found
