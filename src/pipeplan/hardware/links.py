"""Links: what a message costs between two ranks, at the rates NCCL reaches.

A :class:`Link` turns bytes into time as ``latency + bytes / bandwidth`` and
gives the simulator's :class:`~pipeplan.costs.CommModel`; the presets are what
nccl-tests measured on each interconnect, not its line rate::

    >>> from pipeplan import hardware
    >>> hardware.link("ib-ndr").milliseconds(46e6)  # 46 MB at 46 GB/s, + 20 us
    1.02
    >>> hardware.link("nvlink-h100").comm_model(boundary_bytes=[2e7, 2e7, 2e7])
    CommModel(latency=0.003, bandwidth=80000000.0, boundary_bytes=(20000000.0, 20000000.0, 20000000.0),
              send_mode='eager')

Units: bytes, bytes/s; times in milliseconds, bytes per millisecond for ``comm_model``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .._validation import non_negative_float, positive_float
from ..costs import CommModel, SendMode
from ..errors import InvalidInputError

__all__ = ["Link", "LINKS", "link", "link_names"]


@dataclass(frozen=True)
class Link:
    """A point-to-point link between two ranks: ``latency + bytes / bandwidth``.

    The numbers are what NCCL reaches on the link (nccl-tests), not its line
    rate: point-to-point ``send``/``recv`` at pipeline-message sizes (a few to a
    few hundred MB) for ``bandwidth``, and the all-reduce *bus* bandwidth
    (nccl-tests' ``busbw``) for collectives, which reach a different rate.

    Attributes:
        name: preset name.
        latency_ms: fixed time per message (and per ring step of a collective), milliseconds.
        bandwidth: bytes per second one point-to-point message reaches, one direction.
        description: where the numbers come from.
        allreduce_bandwidth: bus bandwidth of an all-reduce (also used for a
            reduce-scatter or an all-gather), bytes/s; ``None``: ``bandwidth``.
            A ring all-reduce of ``S`` bytes over ``g`` ranks then takes
            ``2 (g - 1) / g · S / allreduce_bandwidth`` (nccl-tests' definition of busbw).
    """

    name: str
    latency_ms: float
    bandwidth: float
    description: str = ""
    allreduce_bandwidth: float | None = None

    def __post_init__(self) -> None:
        non_negative_float(f"{self.name}.latency_ms", self.latency_ms)
        positive_float(f"{self.name}.bandwidth", self.bandwidth, unit="bytes/s")
        if self.allreduce_bandwidth is not None:
            positive_float(f"{self.name}.allreduce_bandwidth", self.allreduce_bandwidth, unit="bytes/s")

    @property
    def bus_bandwidth(self) -> float:
        """The collectives' bus bandwidth, bytes/s: ``allreduce_bandwidth``, else ``bandwidth``."""
        return self.bandwidth if self.allreduce_bandwidth is None else self.allreduce_bandwidth

    def milliseconds(self, num_bytes: float) -> float:
        """Time of one message of ``num_bytes``, in ms."""
        return self.latency_ms + 1e3 * non_negative_float("num_bytes", num_bytes) / self.bandwidth

    def comm_model(
        self, boundary_bytes: float | Sequence[float] = 0.0, *, send_mode: SendMode = "eager"
    ) -> CommModel:
        """The simulator's :class:`CommModel` for this link, in milliseconds."""
        return CommModel(latency=self.latency_ms, bandwidth=self.bandwidth / 1e3,
                         boundary_bytes=boundary_bytes, send_mode=send_mode)


# One direction of each link, at what NCCL reaches (nccl-tests), not the line rate. Point-to-point
# ``bandwidth`` is nccl-tests sendrecv at pipeline-message sizes; ``allreduce_bandwidth`` is
# all_reduce_perf's busbw at large sizes. Sources (each also in docs/presets.md):
#  [#149]  github.com/NVIDIA/nccl-tests/issues/149 (NVIDIA, sjeaugey): A100 NVLink3 SM copies reach
#          ~20 of each link's 25 GB/s (128-byte payloads), ~230 GB/s all-reduce busbw on 8 A100s.
#  [#175]  github.com/NVIDIA/nccl-tests/issues/175: 8x A100 SXM one node, all_reduce busbw 232.5 GB/s.
#  [#331]  github.com/NVIDIA/nccl-tests/issues/331: sendrecv between two A100s over 4 NVLink3 links
#          (100 GB/s line rate) peaks at 72 GB/s (at 2 GB); 9.85 us for 8 bytes.
#  [#268]  github.com/NVIDIA/nccl-tests/issues/268: sendrecv between two H100s over NVLink4: 80 GB/s in
#          the default configuration, rising only at GB sizes to a ~180 GB/s plateau.
#  [#1487] github.com/NVIDIA/nccl/issues/1487: nccl-tests sendrecv latency between two NVLink H100s ~3 us.
#  [#272]  github.com/NVIDIA/nccl-tests/issues/272: 8x H200 NVLink4, all_reduce busbw 475 GB/s (NVLS);
#  [#290]  github.com/NVIDIA/nccl-tests/issues/290 (NVIDIA, AddyLaddy): 476 GB/s is the expected H100
#          single-node all-reduce; NDR 400 Gb/s gives 46-48 GB/s per NIC.
#  [#412]  github.com/NVIDIA/nccl/issues/412 (NVIDIA, sjeaugey): HDR 200 Gb/s: 24 GB/s busbw per NIC.
#  [#150]  github.com/NVIDIA/nccl-tests/issues/150: A100 over HDR, one GPU per node, 8-byte all_reduce 19-20 us.
#  [#495]  github.com/NVIDIA/nccl/issues/495: RoCE, 8x 100 Gb/s NICs reach 600 of 800 Gb/s (75 %),
#          "roughly matching our expectation" (NVIDIA, kwen2501).
#  [#214]  github.com/NVIDIA/nccl-tests/issues/214: sendrecv between two nodes (A40, Ethernet) 31-34 us
#          for <= 8 KB.
#  [bam54] github.com/ZaidQureshi/bam/issues/54: PCIe 4.0 x16 measured peak 25 of 32 GB/s.
#  [#1639] github.com/NVIDIA/nccl/issues/1639 (NVIDIA, sjeaugey on 8 PCIe GPUs): PCIe all-reduce is bound
#          by what CPU and memory deliver; 28 GB/s busbw over PCIe 5 (64 GB/s line) is "impressive".
# Derived (not measured on that link, say so): nvlink-a100 p2p = [#268]'s 80 GB/s x NVLink3/NVLink4
# (300/450) = 53 GB/s; pcie-gen4 all-reduce = [#1639]'s 44 % of line rate x 32 GB/s = 14 GB/s;
# roce-400g = [#495]'s 75 % of 50 GB/s = 37.5 GB/s. Not fitted to any training measurement: the
# zero-bubble paper's T_comm (A100 NVLink, 28.3 MB in 0.601 ms: 47 GB/s) is a check (docs/presets.md).
LINKS: dict[str, Link] = {
    link_.name: link_
    for link_ in (
        Link("nvlink-a100", 0.010, 53e9,
             "NVLink 3 (A100, 300 GB/s each way): NCCL sendrecv ~53 GB/s (nccl-tests #268 scaled by "
             "300/450), all-reduce busbw 230 GB/s (nccl-tests #149, #175), 10 us (nccl-tests #331)",
             allreduce_bandwidth=230e9),
        Link("nvlink-h100", 0.003, 80e9,
             "NVLink 4 (H100/H200, 450 GB/s each way): NCCL sendrecv 80 GB/s (nccl-tests #268), all-reduce "
             "busbw 475 GB/s with NVLS (nccl-tests #272, #290), 3 us (nccl #1487)",
             allreduce_bandwidth=475e9),
        Link("pcie-gen4", 0.010, 25e9,
             "PCIe 4.0 x16 (L40S has no NVLink; 32 GB/s line rate): 25 GB/s measured peak (bam #54), "
             "all-reduce busbw ~14 GB/s (nccl #1639 scaled to Gen4)",
             allreduce_bandwidth=14e9),
        Link("ib-hdr", 0.020, 24e9,
             "InfiniBand HDR, 200 Gb/s per GPU: 24 GB/s per NIC (nccl #412), 20 us (nccl-tests #150)"),
        Link("ib-ndr", 0.020, 46e9,
             "InfiniBand NDR, 400 Gb/s per GPU: 46-48 GB/s per NIC (nccl-tests #290), 20 us (as HDR)"),
        Link("roce-400g", 0.030, 37.5e9,
             "RoCE v2 at 400 Gb/s per GPU: ~75 % of line rate, 37.5 GB/s (nccl #495), 30 us (nccl-tests #214)"),
    )
}



def link_names() -> list[str]:
    """Names of the link presets."""
    return list(LINKS)


def link(name: str) -> Link:
    """The link preset ``name``.

    Raises:
        InvalidInputError: an unknown name (the message lists the presets).
    """
    if name not in LINKS:
        raise InvalidInputError(f"link must be one of {', '.join(LINKS)}, got {name!r}")
    return LINKS[name]
