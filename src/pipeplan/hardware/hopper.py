"""NVIDIA Hopper: the H100 SXM5, Meta's H100 96GB HBM2e (500 W) and the H200 (H100 compute, more and faster HBM).

Peaks, bandwidths and SM counts are NVIDIA datasheet values; memory as
nvidia-smi reports it; GEMM and attention efficiencies from published
benchmarks, the memory-bound ones the A100's fit::

    from pipeplan.hardware import hopper
    hopper.H100_80G.device.peak_flops           # 989.4e12
    hopper.H200_141G.intra_node                 # "nvlink-h100"
"""

from __future__ import annotations

from dataclasses import replace

from .ampere import A100_FIT, LAUNCH_OVERHEAD_MS
from .record import DeviceRecord
from .roofline import Device

__all__ = ["H100_80G", "H100_96G", "H200_141G"]

_MIB = 2**20

_HOPPER = {
    "peak_flops": 989.4e12, "num_sms": 132, "gemm_efficiency": 0.81, "attention_efficiency": 0.3,
    "memory_efficiency": A100_FIT["memory_efficiency"], "random_efficiency": A100_FIT["random_efficiency"],
    "launch_overhead_ms": LAUNCH_OVERHEAD_MS,
    "sources": {
        "peak_flops": "NVIDIA H100/H200 datasheets: 989.4 TFLOP/s dense bf16 (half the 1979 sparse figure)",
        "memory_bandwidth": "NVIDIA datasheets: 3.35 TB/s (H100 SXM5 HBM3), 4.8 TB/s (H200 HBM3e)",
        "num_sms": "NVIDIA H100 whitepaper: 132 SMs (SXM5)",
        "gemm_efficiency": "Bekman, ML Engineering, 'Maximum Achievable Matmul FLOPS' table: 794.5 of 989 "
                           "TFLOP/s bf16 at 2048x2048x13312 (H200 the same), / the fill at k = 13312",
        "attention_efficiency": "Dao 2023 (FlashAttention-2) Fig. 7: 265-326 of 989 TFLOP/s fwd+bwd, H100, d=128, "
                                "seq 2k",
        "memory_efficiency": "the A100 fit (the same eager kernels), not measured on this device",
        "random_efficiency": "the A100 fit", "launch_overhead_ms": "the A100 launch overhead",
        "gemm_fill_k": "as the A100's (CUTLASS sm80/sm90 pipelines of the same depth)",
    },
}

H100_80G = DeviceRecord(
    Device("h100-80g", 81_559 * _MIB, memory_bandwidth=3.35e12, **_HOPPER,  # type: ignore[arg-type]
           description="H100 SXM5 80GB: 989.4 TFLOP/s dense bf16, 3.35 TB/s HBM3, 81559 MiB"),
    intra_node="nvlink-h100", torch_names=(r"H100",))
#: Meta's Grand Teton H100 (torchtitan's H100 benchmark files: benchmarks/llama3_h100_202412_torchtitan.md,
#: asyncTP_llama3_h100_2025-06_torchtitan.md): "96GB HBM2e with 2.4 TB/sec peak memory bandwidth", "the default
#: 500W power limit", peak "between SXM and NVL" (its footnote; torchtitan counts MFU against the SXM's). The
#: SXM's compute record is kept; what the 500 W clocks cost is in the engines' factors fitted on this device
#: (pipeplan.engines._eager), not in the device.
H100_96G = DeviceRecord(
    replace(H100_80G.device, name="h100-96g", memory_bytes=96 * 10**9, memory_bandwidth=2.4e12,
            sources={**H100_80G.device.sources,
                     "memory_bandwidth": "torchtitan benchmarks/llama3_h100_202412_torchtitan.md: 96GB HBM2e, "
                                         "2.4 TB/s, 500 W power limit (Grand Teton)"},
            description="H100 96GB HBM2e at 500 W (Meta's Grand Teton, torchtitan's H100 benchmarks): the SXM5's "
                        "compute, 2.4 TB/s"),
    intra_node="nvlink-h100")
H200_141G = DeviceRecord(
    Device("h200-141g", 143_771 * _MIB, memory_bandwidth=4.8e12, **_HOPPER,  # type: ignore[arg-type]
           description="H200 SXM 141GB: H100 compute, 4.8 TB/s HBM3e, 143771 MiB"),
    intra_node="nvlink-h100", torch_names=(r"H200",))
