"""Device and link presets: memory, dense bf16 FLOP/s, and point-to-point links.

A :class:`Device` turns FLOPs into time at ``peak_flops × achievable_fraction``
(the fraction a real training step reaches; you may override it), and a
:class:`Link` turns bytes into time as ``latency + bytes / bandwidth``, producing
the simulator's :class:`~pipeplan.costs.CommModel`::

    >>> from pipeplan import hardware
    >>> gpu = hardware.device("h100-80g", achievable_fraction=0.45)
    >>> gpu.achievable_flops, gpu.memory_bytes
    (445230000000000.0, 85520809984)
    >>> hardware.link("nvlink-h100").comm_model(boundary_bytes=[2e7, 2e7, 2e7])
    CommModel(latency=0.005, bandwidth=450000000.0, boundary_bytes=(20000000.0, 20000000.0, 20000000.0),
              send_mode='eager')

Units: bytes, FLOP/s, bytes per millisecond for ``comm_model`` (pipeplan's CLI
times are milliseconds). The numbers and their sources are listed in
docs/presets.md; ``achievable_fraction`` defaults to 0.4, a planning assumption
(large-model training reports 35–55 % of peak on these GPUs), not a measurement.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from ._validation import non_negative_float, positive_float
from .costs import CommModel, SendMode
from .errors import InvalidInputError

__all__ = ["Device", "Link", "DEVICES", "LINKS", "device", "link", "device_names", "link_names"]

_MIB = 2**20


@dataclass(frozen=True)
class Device:
    """One accelerator (or a CPU) as the planner sees it.

    Attributes:
        name: preset name.
        memory_bytes: memory a process can allocate, bytes (what ``nvidia-smi`` reports).
        peak_flops: dense bf16 tensor-core FLOP/s (no structured sparsity).
        achievable_fraction: fraction of ``peak_flops`` a training step reaches, in (0, 1].
        description: where the numbers come from.
    """

    name: str
    memory_bytes: float
    peak_flops: float
    achievable_fraction: float = 0.4
    description: str = ""

    def __post_init__(self) -> None:
        positive_float(f"{self.name}.memory_bytes", self.memory_bytes, unit="bytes")
        positive_float(f"{self.name}.peak_flops", self.peak_flops, unit="FLOP/s")
        fraction = positive_float("achievable_fraction", self.achievable_fraction)
        if fraction > 1:
            raise InvalidInputError(f"achievable_fraction must be in (0, 1], got {self.achievable_fraction!r}")

    @property
    def achievable_flops(self) -> float:
        """``peak_flops × achievable_fraction``, FLOP/s: the rate times are computed at."""
        return self.peak_flops * self.achievable_fraction

    def milliseconds(self, flops: float) -> float:
        """Time of ``flops`` at the achievable rate, in ms."""
        return 1e3 * flops / self.achievable_flops


@dataclass(frozen=True)
class Link:
    """A point-to-point link between two ranks: ``latency + bytes / bandwidth``.

    Attributes:
        name: preset name.
        latency_ms: fixed time per message, milliseconds.
        bandwidth: bytes per second in one direction.
        description: where the numbers come from.
    """

    name: str
    latency_ms: float
    bandwidth: float
    description: str = ""

    def __post_init__(self) -> None:
        non_negative_float(f"{self.name}.latency_ms", self.latency_ms)
        positive_float(f"{self.name}.bandwidth", self.bandwidth, unit="bytes/s")

    def milliseconds(self, num_bytes: float) -> float:
        """Time of one message of ``num_bytes``, in ms."""
        return self.latency_ms + 1e3 * non_negative_float("num_bytes", num_bytes) / self.bandwidth

    def comm_model(
        self, boundary_bytes: float | Sequence[float] = 0.0, *, send_mode: SendMode = "eager"
    ) -> CommModel:
        """The simulator's :class:`CommModel` for this link, in milliseconds."""
        return CommModel(latency=self.latency_ms, bandwidth=self.bandwidth / 1e3,
                         boundary_bytes=boundary_bytes, send_mode=send_mode)


# Dense (non-sparse) bf16 tensor-core peaks from NVIDIA's datasheets; memory as nvidia-smi reports it.
DEVICES: dict[str, Device] = {
    d.name: d
    for d in (
        Device("a100-40g", 40_960 * _MIB, 312e12,
               description="A100 SXM4 40GB: 312 TFLOP/s dense bf16 (NVIDIA A100 datasheet), 40960 MiB"),
        Device("a100-80g", 81_920 * _MIB, 312e12,
               description="A100 SXM4 80GB: 312 TFLOP/s dense bf16 (NVIDIA A100 datasheet), 81920 MiB"),
        Device("h100-80g", 81_559 * _MIB, 989.4e12,
               description="H100 SXM5 80GB: 989.4 TFLOP/s dense bf16 (NVIDIA H100 datasheet, half of the "
                           "1979 sparse figure), 81559 MiB"),
        Device("h200-141g", 143_771 * _MIB, 989.4e12,
               description="H200 SXM 141GB: same compute as H100 SXM (NVIDIA H200 datasheet), 143771 MiB"),
        Device("l40s", 46_068 * _MIB, 362.05e12,
               description="L40S 48GB GDDR6: 362.05 TFLOP/s dense bf16 (NVIDIA L40S datasheet), 46068 MiB"),
        Device("cpu", 64 * 2**30, 1e12, achievable_fraction=1.0,
               description="a nominal CPU host (1 TFLOP/s, 64 GiB) for small planning runs and tests; "
                           "not a measurement of any machine"),
    )
}

# One direction of each link; latencies are order-of-magnitude NCCL point-to-point figures.
LINKS: dict[str, Link] = {
    link_.name: link_
    for link_ in (
        Link("nvlink-a100", 0.005, 300e9, "NVLink 3 (A100): 600 GB/s total, 300 GB/s each way"),
        Link("nvlink-h100", 0.005, 450e9, "NVLink 4 (H100/H200): 900 GB/s total, 450 GB/s each way"),
        Link("pcie-gen4", 0.010, 32e9, "PCIe 4.0 x16 (L40S has no NVLink): ~32 GB/s each way"),
        Link("ib-hdr", 0.010, 25e9, "InfiniBand HDR, 200 Gb/s per GPU: 25 GB/s each way"),
        Link("ib-ndr", 0.010, 50e9, "InfiniBand NDR, 400 Gb/s per GPU: 50 GB/s each way"),
        Link("roce-400g", 0.015, 50e9, "RoCE v2 at 400 Gb/s per GPU: 50 GB/s each way"),
    )
}


def device_names() -> list[str]:
    """Names of the device presets."""
    return list(DEVICES)


def link_names() -> list[str]:
    """Names of the link presets."""
    return list(LINKS)


def device(name: str, *, achievable_fraction: float | None = None) -> Device:
    """The device preset ``name``, optionally with another ``achievable_fraction``.

    Raises:
        InvalidInputError: an unknown name (the message lists the presets) or a
            fraction outside (0, 1].
    """
    if name not in DEVICES:
        raise InvalidInputError(f"gpu must be one of {', '.join(DEVICES)}, got {name!r}")
    preset = DEVICES[name]
    if achievable_fraction is None:
        return preset
    return replace(preset, achievable_fraction=achievable_fraction)


def link(name: str) -> Link:
    """The link preset ``name``.

    Raises:
        InvalidInputError: an unknown name (the message lists the presets).
    """
    if name not in LINKS:
        raise InvalidInputError(f"link must be one of {', '.join(LINKS)}, got {name!r}")
    return LINKS[name]
