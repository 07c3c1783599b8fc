"""What a GPU's links can carry: the ceiling a collective's bus bandwidth is checked
against.

nccl-tests' bus bandwidth (busbw) is the rate each rank's busiest link carried, so it is
compared with one link set's peak in one direction: NVLink's per-GPU total for ranks on
one node (NVSwitch systems give every GPU its full NVLink bandwidth to the others),
PCIe's for GPUs without NVLink, the network interface's for ranks on different nodes.
A busbw above the NVLink peak cannot be true whatever the topology (no GPU carries more);
above the network's usual per-GPU rate it is suspect when the ranks span nodes.

Datasheet numbers, per GPU, one direction:
- NVLink 2 (V100 SXM2): 6 links x 25 GB/s = 150 GB/s (NVIDIA V100 datasheet: 300 GB/s
  both ways).
- NVLink 3 (A100 SXM4; PG509 is the A100 SXM4 board): 12 x 25 = 300 GB/s (600 GB/s both
  ways, A100 datasheet).
- NVLink 4 (H100/H200 SXM): 18 x 25 = 450 GB/s (900 GB/s both ways).
- NVLink 5 (B200/GB200): 18 x 50 = 900 GB/s (1.8 TB/s both ways).
- AMD MI300X: 7 Infinity Fabric links x 64 GB/s = 448 GB/s (896 GB/s peer aggregate);
  MI250/MI250X: 8 x 50 = 400 GB/s (800 GB/s aggregate).
- PCIe x16: Gen3 16 GB/s, Gen4 32 GB/s, Gen5 64 GB/s.
- Network: 400 Gb/s (50 GB/s) per GPU, one InfiniBand NDR or 400 GbE NIC per GPU, the
  usual H100/H200 cluster; 200 Gb/s (25 GB/s) HDR on A100 clusters.
"""

from __future__ import annotations

from dataclasses import dataclass

GB = 1e9


@dataclass(frozen=True)
class LinkPeak:
    name: str  # "NVLink 4", "PCIe Gen4 x16", ...
    bytes_per_s: float  # per GPU, one direction
    source: str


#: Name fragments (lower case) -> the GPU's fastest link to its peers on one node, in
#: match order (PCIe parts before their SXM names).
_LINKS: tuple[tuple[tuple[str, ...], LinkPeak], ...] = (
    (("h100 pcie", "h100-pcie", "h100 nvl"), LinkPeak("PCIe Gen5 x16", 64 * GB, "PCIe 5.0 x16, one direction")),
    (("a100-pcie", "a100 pcie", "a100 80gb pcie"), LinkPeak("PCIe Gen4 x16", 32 * GB, "PCIe 4.0 x16, one direction")),
    (("v100-pcie", "v100 pcie"), LinkPeak("PCIe Gen3 x16", 16 * GB, "PCIe 3.0 x16, one direction")),
    (("b200", "gb200", "b100"), LinkPeak("NVLink 5", 900 * GB, "18 links x 50 GB/s (NVIDIA B200 datasheet)")),
    (("h200", "h100", "gh200", "h800", "h20"), LinkPeak("NVLink 4", 450 * GB, "18 links x 25 GB/s (NVIDIA H100/H200)")),
    (("a100", "pg509", "a800"), LinkPeak("NVLink 3", 300 * GB, "12 links x 25 GB/s (NVIDIA A100 datasheet)")),
    (("v100",), LinkPeak("NVLink 2", 150 * GB, "6 links x 25 GB/s (NVIDIA V100 datasheet)")),
    (("mi300",), LinkPeak("Infinity Fabric", 448 * GB, "7 links x 64 GB/s (AMD Instinct MI300X)")),
    (("mi250",), LinkPeak("Infinity Fabric", 400 * GB, "8 links x 50 GB/s (AMD Instinct MI250X)")),
    (
        ("t4", "a10", "l4", "l40", "rtx", "geforce", "quadro", "a40", "a30"),
        LinkPeak("PCIe Gen4 x16", 32 * GB, "PCIe 4.0 x16, one direction (no NVLink assumed)"),
    ),
)
#: The network's usual rate per GPU between nodes.
NETWORK = LinkPeak("network", 50 * GB, "400 Gb/s per GPU (one NDR InfiniBand / 400 GbE NIC per GPU)")


def link_peak(gpu_name: str | None) -> LinkPeak | None:
    """The fastest link a GPU of this name has to its peers on one node, or None."""
    if not gpu_name:
        return None
    low = gpu_name.lower()
    for markers, peak in _LINKS:
        if any(m in low for m in markers):
            return peak
    return None


def spans_nodes(group_size: int | None, gpus_on_node: int) -> bool | None:
    """Whether a group of this size cannot fit on one node of `gpus_on_node` GPUs (the
    trace's deviceProperties list the node's GPUs); None when either is unknown."""
    if not group_size or gpus_on_node <= 0:
        return None
    return group_size > gpus_on_node
