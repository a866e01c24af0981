"""A test-only stand-in for the per-operator ``hardware.Device`` until it lands in hardware.py.

    from _device_standin import per_operator_device   # a pytest fixture
    def test_x(per_operator_device): ...                     # hardware.Device/GemmPoint are the new shape

The fixture installs the stand-in only while ``pipeplan.hardware`` has no ``GemmPoint``
(the per-operator interface); once the real one is there it does nothing, so the
tests run against the real class unchanged. ``achievable_flops`` bridges to the
flat cost model of today's ``models/spec.py`` (``peak × (achievable_fraction or
gemm_efficiency)``); it is not part of the interface.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

import pytest

from pipeplan import hardware

__all__ = ["StandInDevice", "StandInGemmPoint", "per_operator_device", "example_device"]


@dataclass(frozen=True)
class StandInGemmPoint:
    m: int
    n: int
    k: int
    efficiency: float


@dataclass(frozen=True)
class StandInDevice:
    name: str
    memory_bytes: float
    peak_flops: float
    memory_bandwidth: float
    gemm_efficiency: float
    attention_efficiency: float
    memory_efficiency: float
    launch_overhead_ms: float
    random_efficiency: float = 0.4
    num_sms: int = 108
    gemm_tile: tuple[int, int] = (128, 128)
    gemm_table: tuple[StandInGemmPoint, ...] = ()
    achievable_fraction: float | None = None
    description: str = ""
    sources: Mapping[str, str] = field(default_factory=dict)

    @property
    def achievable_flops(self) -> float:
        return self.peak_flops * (self.achievable_fraction or self.gemm_efficiency)

    def milliseconds(self, flops: float) -> float:
        return 1e3 * flops / self.achievable_flops


@pytest.fixture
def per_operator_device(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """``hardware.Device`` and ``hardware.GemmPoint`` with the per-operator fields, for one test."""
    if not hasattr(hardware, "GemmPoint"):
        monkeypatch.setattr(hardware, "Device", StandInDevice)
        monkeypatch.setattr(hardware, "GemmPoint", StandInGemmPoint, raising=False)
    yield


def example_device(**changes: object) -> object:
    """A valid per-operator Device (of whichever class is installed), H100-like numbers."""
    values: dict[str, object] = {
        "name": "h100-80g", "memory_bytes": 85_520_809_984.0, "peak_flops": 989.4e12,
        "memory_bandwidth": 3.35e12, "gemm_efficiency": 0.72, "attention_efficiency": 0.55,
        "memory_efficiency": 0.85, "launch_overhead_ms": 0.004, "num_sms": 132, "gemm_tile": (128, 128),
        "gemm_table": (hardware.GemmPoint(m=16, n=4096, k=4096, efficiency=0.05),  # type: ignore[attr-defined]
                       hardware.GemmPoint(m=8192, n=4096, k=4096, efficiency=0.74)),  # type: ignore[attr-defined]
        "description": "test device", "sources": {"peak_flops": "NVIDIA H100 datasheet"},
    }
    values.update(changes)
    return hardware.Device(**values)  # type: ignore[arg-type]
