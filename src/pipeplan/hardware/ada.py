"""NVIDIA Ada: the L40S (GDDR6, no NVLink: PCIe inside a node).

Peak, bandwidth and SM count from NVIDIA's datasheet and whitepaper; the
efficiencies are assumed (no published L40S measurement; ``pipeplan calibrate``
measures one)::

    from pipeplan.hardware import ada
    ada.L40S.intra_node                         # "pcie-gen4"
"""

from __future__ import annotations

from .ampere import A100_FIT, LAUNCH_OVERHEAD_MS
from .record import DeviceRecord
from .roofline import Device

__all__ = ["L40S"]

_MIB = 2**20

L40S = DeviceRecord(
    Device("l40s", 46_068 * _MIB, 362.05e12, memory_bandwidth=864e9, num_sms=142, gemm_efficiency=0.75,
           attention_efficiency=0.4, memory_efficiency=A100_FIT["memory_efficiency"],
           random_efficiency=A100_FIT["random_efficiency"], launch_overhead_ms=LAUNCH_OVERHEAD_MS,
           description="L40S 48GB GDDR6: 362.05 TFLOP/s dense bf16, 864 GB/s, 46068 MiB",
           sources={"peak_flops": "NVIDIA L40S datasheet: 362.05 TFLOP/s dense bf16",
                    "memory_bandwidth": "NVIDIA L40S datasheet: 864 GB/s GDDR6",
                    "num_sms": "NVIDIA Ada whitepaper: 142 SMs (L40S)",
                    "gemm_efficiency": "assumed (no published L40S matmul measurement found; run "
                                       "`pipeplan calibrate`): below the A100's 0.87 and H100's 0.80 MAMF",
                    "attention_efficiency": "assumed between the A100 and H100 FlashAttention-2 figures",
                    "memory_efficiency": "the A100 fit", "random_efficiency": "the A100 fit",
                    "launch_overhead_ms": "the A100 launch overhead", "gemm_fill_k": "as the A100's"}),
    intra_node="pcie-gen4", torch_names=(r"L40S",))
