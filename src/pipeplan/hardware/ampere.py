"""NVIDIA Ampere: the A100 SXM4 in its 40 GB and 80 GB versions.

Peaks, bandwidths and SM counts are NVIDIA datasheet values; memory as
nvidia-smi reports it. The efficiencies are the A100's fit to the zero-bubble
paper's Table 9 (:data:`A100_FIT`, ``benchmarks/cost_model.py --fit``); the
Hopper and Ada records reuse the memory-bound ones::

    from pipeplan.hardware import ampere
    ampere.A100_80G.device.gemm_efficiency      # 0.883
    ampere.A100_80G.intra_node                  # "nvlink-a100"
"""

from __future__ import annotations

from .record import DeviceRecord
from .roofline import Device

__all__ = ["A100_FIT", "LAUNCH_OVERHEAD_MS", "A100_40G", "A100_80G"]

_MIB = 2**20

#: Constants of the A100's per-operator model, fitted by benchmarks/cost_model.py --fit.
A100_FIT = {"gemm_efficiency": 0.883, "memory_efficiency": 0.55, "random_efficiency": 0.245}
#: A kernel's fixed cost, ms (cited, not fitted: see the sources below).
LAUNCH_OVERHEAD_MS = 0.004
_A100 = {
    "peak_flops": 312e12, "num_sms": 108, "attention_efficiency": 0.6, "launch_overhead_ms": LAUNCH_OVERHEAD_MS,
    **A100_FIT,
    "sources": {
        "peak_flops": "NVIDIA A100 datasheet: 312 TFLOP/s dense bf16/fp16 tensor",
        "memory_bandwidth": "NVIDIA A100 datasheet: 1,555 GB/s (40GB HBM2), 2,039 GB/s (80GB HBM2e)",
        "num_sms": "NVIDIA A100 whitepaper: 108 SMs",
        "gemm_tile": "a 128 x 128 output tile, CUTLASS's and cuBLAS's common tensor-core tile",
        "gemm_efficiency": "fitted to Qi et al. 2024 (Zero Bubble PP) Table 9, 1.5B and 6.2B T_W "
                           "(benchmarks/cost_model.py --fit)",
        "memory_efficiency": "fitted to Qi et al. 2024 Table 9, 1.5B and 6.2B T_F and T_B",
        "random_efficiency": "fitted to Qi et al. 2024 Table 9, 1.5B and 6.2B T_F and T_B (dropout-mask kernels)",
        "launch_overhead_ms": "a kernel's fixed cost on the GPU, a few microseconds (NVIDIA, 'CUDA Graphs', "
                              "developer blog 2019: ~4 us launch overhead per kernel); not fitted",
        "attention_efficiency": "Dao 2023 (FlashAttention-2) Fig. 4: 155-203 of 312 TFLOP/s fwd+bwd, A100, "
                                "d=128, seq 2k-16k",
        "gemm_fill_k": "CUTLASS's sm80 GEMM main loop: 4 pipeline stages of a 32-deep K block before the first MMA",
    },
}

A100_40G = DeviceRecord(
    Device("a100-40g", 40_960 * _MIB, memory_bandwidth=1555e9, **_A100,  # type: ignore[arg-type]
           description="A100 SXM4 40GB: 312 TFLOP/s dense bf16, 1,555 GB/s HBM2, 40960 MiB"),
    intra_node="nvlink-a100", torch_names=(r"A100(?!.*80\s*GB)",))
A100_80G = DeviceRecord(
    Device("a100-80g", 81_920 * _MIB, memory_bandwidth=2039e9, **_A100,  # type: ignore[arg-type]
           description="A100 SXM4 80GB: 312 TFLOP/s dense bf16, 2,039 GB/s HBM2e, 81920 MiB"),
    intra_node="nvlink-a100", torch_names=(r"A100.*80\s*GB",))
