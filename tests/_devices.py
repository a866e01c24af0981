"""A valid per-operator device for the device-file and calibration tests."""

from __future__ import annotations

from pipeplan import hardware

__all__ = ["example_device"]


def example_device(**changes: object) -> hardware.Device:
    """A valid per-operator Device with H100-like numbers and two measured GEMMs."""
    values: dict[str, object] = {
        "name": "h100-80g", "memory_bytes": 85_520_809_984.0, "peak_flops": 989.4e12,
        "memory_bandwidth": 3.35e12, "gemm_efficiency": 0.72, "attention_efficiency": 0.55,
        "memory_efficiency": 0.85, "launch_overhead_ms": 0.004, "num_sms": 132, "gemm_tile": (128, 128),
        "gemm_table": (hardware.GemmPoint(m=16, n=4096, k=4096, efficiency=0.05),
                       hardware.GemmPoint(m=8192, n=4096, k=4096, efficiency=0.74)),
        "description": "test device", "sources": {"peak_flops": "NVIDIA H100 datasheet"},
    }
    values.update(changes)
    return hardware.Device(**values)  # type: ignore[arg-type]
