"""The cluster a plan runs on: how many GPUs of which kind, and the links between them.

    from pipeplan import hardware
    from pipeplan.planner import Cluster
    cluster = Cluster.of("h100-80g", num_gpus=32)     # NVLink in a node, InfiniBand NDR between
    cluster.memory_bytes, cluster.pipeline_link(pp=4, dp=8, rank_a=0, rank_b=1).name

The device and link numbers are :mod:`pipeplan.hardware`'s presets (sources in
docs/presets.md). Layout (what the planner assumes about where ranks sit): the
``pp`` ranks of one pipeline are consecutive GPUs, so a pipeline fills a node
before it crosses to the next, and the ``dp`` replicas of a stage are ``pp``
GPUs apart. A pipeline boundary uses :attr:`Cluster.intra_node` when both ranks
are on one node in every replica and :attr:`Cluster.inter_node` otherwise (one
message on one NIC). Every collective over a group of GPUs is priced on
:meth:`Cluster.collective_link` (the one owner): the intra-node link while the
group fits one node; across nodes, NCCL's rail rule below.

**Collectives across nodes (the rail rule).** NCCL builds its rings as channels,
one channel per NIC rail, and each channel's ring crosses each node once; a node
whose ``k`` GPUs are in the group therefore drives ``k`` NICs at once, and the
collective's bus bandwidth between nodes is ``min(k × per-NIC busbw, intra-node
busbw)`` (the ring's hops inside a node run on the intra-node link). ``k`` is the
group's GPUs per node, ``gpus_per_node // stride`` for members ``stride`` GPUs
apart: a data-parallel group at ``tp · pp`` apart (the ``tp · pp`` such groups of a
node share its NICs) has ``gpus_per_node / (tp · pp)`` on each node; HSDP's
replication across nodes has 1. Sources: NVIDIA/nccl issue #412 (sjeaugey, NVIDIA):
an all-reduce over 8-A100 nodes with one HDR NIC each reaches 24 GB/s busbw
between nodes, and "you can add more NICs and you should get more bandwidth, up
to 160GB/s which is the NVLink intra-node bandwidth of your system";
NVIDIA/nccl-tests issue #119: 3 nodes of 8 A100 with 4 HDR NICs each, all_reduce
busbw 84.8 GB/s on average and ~96 GB/s at its peak, against the 4 × 25 GB/s of
its NICs; nccl-tests #175: 2 such nodes, 86 GB/s; NVIDIA/nccl #495: 8 × 100 Gb/s
RoCE NICs per A100 node reach 75 GB/s (600 Gb/s). Pipeline messages stay one NIC
per message (:meth:`Cluster.pipeline_link`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from .. import hardware
from .._validation import positive_int
from ..errors import InvalidInputError
from ..hardware import Device, Link
from ..limits import MAX_GPUS

__all__ = ["Cluster", "allreduce_ms", "ring_pass_ms", "rail_bus_bandwidth"]


def rail_bus_bandwidth(nic: Link, intra: Link, gpus_per_node_in_group: int) -> float:
    """Bus bandwidth between nodes of a collective with ``k`` of its GPUs on each node, bytes/s (module doc).

    NCCL runs one ring channel per NIC rail and each channel crosses each node
    once (NVIDIA/nccl #412, nccl-tests #119), so ``k`` GPUs of a node drive ``k``
    NICs: ``min(k × nic.bus_bandwidth, intra.bus_bandwidth)``, the intra-node link
    bounding the ring's hops inside a node. ``k = 1`` has no such hop:
    ``nic.bus_bandwidth``. Where the intra-node link is slower than one NIC (PCIe
    nodes) ``k ≥ 2`` gets the intra-node rate, below one NIC's.
    """
    k = positive_int("gpus_per_node_in_group", gpus_per_node_in_group)
    if k == 1:
        return nic.bus_bandwidth
    return min(k * nic.bus_bandwidth, intra.bus_bandwidth)


def ring_pass_ms(link: Link, num_bytes: float, group: int) -> float:
    """One ring pass over ``group`` ranks, in milliseconds: a reduce-scatter or an all-gather.

    ``num_bytes`` is the whole buffer on each rank (what a reduce-scatter reads,
    what an all-gather writes). ``g − 1`` steps, each moving ``bytes / g`` at the
    link's collective bus bandwidth (:attr:`~pipeplan.hardware.Link.bus_bandwidth`):
    ``(g − 1) · (latency + bytes / (g · bus_bandwidth))``; zero for ``g = 1``. With
    nccl-tests' definition of bus bandwidth this is the measured time of either.
    """
    if group <= 1:
        return 0.0
    return (group - 1) * (link.latency_ms + 1e3 * num_bytes / (group * link.bus_bandwidth))


def allreduce_ms(link: Link, num_bytes: float, group: int) -> float:
    """Ring all-reduce of ``num_bytes`` per rank over ``group`` ranks, in milliseconds.

    A reduce-scatter, then an all-gather (:func:`ring_pass_ms`):
    ``2 (g − 1) · (latency + bytes / (g · bus_bandwidth))``; zero for ``g = 1``.
    """
    return 2.0 * ring_pass_ms(link, num_bytes, group)


@dataclass(frozen=True)
class Cluster:
    """GPUs of one kind and the links between them.

    Args:
        num_gpus: GPUs to plan for.
        device: the GPU (:class:`pipeplan.hardware.Device`): memory, peak FLOP/s and
            the per-operator cost model that times its kernels.
        intra_node: the link between GPUs of one node.
        inter_node: the link between nodes (default ``intra_node``).
        gpus_per_node: GPUs per node.
    """

    num_gpus: int
    device: Device
    intra_node: Link
    inter_node: Link | None = None
    gpus_per_node: int = 8

    def __post_init__(self) -> None:
        positive_int("num_gpus", self.num_gpus, maximum=MAX_GPUS, why="more than any cluster; a typo?")
        positive_int("gpus_per_node", self.gpus_per_node)
        if self.num_gpus > self.gpus_per_node and self.num_gpus % self.gpus_per_node:
            raise InvalidInputError(
                f"{self.num_gpus} GPUs do not fill whole nodes of {self.gpus_per_node} GPUs "
                "(gpus_per_node must divide the GPU count)"
            )

    @classmethod
    def of(
        cls,
        gpu: str,
        num_gpus: int,
        *,
        intra_node: str | None = None,
        inter_node: str = "ib-ndr",
        gpus_per_node: int = 8,
        achievable_fraction: float | None = None,
    ) -> Cluster:
        """A cluster of preset devices and links (by name; see :mod:`pipeplan.hardware`).

        ``intra_node`` defaults to the device record's own link inside a node.
        """
        device = hardware.device(gpu, achievable_fraction=achievable_fraction)
        intra = hardware.link(intra_node) if intra_node else hardware.get(gpu).intra_node_link
        return cls(num_gpus, device, intra, hardware.link(inter_node), gpus_per_node)

    @property
    def memory_bytes(self) -> float:
        """Memory of one GPU, bytes."""
        return self.device.memory_bytes

    @property
    def peak_flops(self) -> float:
        """Dense bf16 FLOP/s of one GPU (MFU is against this)."""
        return self.device.peak_flops

    @property
    def between_nodes(self) -> Link:
        """The inter-node link."""
        return self.inter_node if self.inter_node is not None else self.intra_node

    def for_tensor_parallel(self, tp: int) -> Cluster:
        """The cluster of ``tp``-GPU tensor-parallel groups: each group acts as one device of the pipeline and data
        parallelism (GPUs are laid out ``tp`` innermost, inside a node; every GPU of a group sends its own
        share of a message on its own link)."""
        if tp == 1:
            return self
        if self.gpus_per_node % tp and self.num_gpus % tp:
            raise InvalidInputError(f"tp={tp} must divide the GPUs of a node ({self.gpus_per_node})")
        node = min(self.gpus_per_node, self.num_gpus)
        if node % tp:
            raise InvalidInputError(f"tp={tp} must divide the GPUs of a node ({node}): tensor parallelism stays "
                                    "inside a node")
        return replace(self, num_gpus=self.num_gpus // tp, gpus_per_node=max(1, self.gpus_per_node // tp))

    def pipeline_link(self, pp: int, dp: int, rank_a: int, rank_b: int) -> Link:
        """The link between pipeline ranks ``rank_a`` and ``rank_b`` (0-based within a pipeline).

        Inter-node as soon as the pair sits on two nodes in any of the ``dp``
        pipelines (the step waits for the slowest replica).
        """
        for replica in range(dp):
            gpu_a, gpu_b = replica * pp + rank_a, replica * pp + rank_b
            if gpu_a // self.gpus_per_node != gpu_b // self.gpus_per_node:
                return self.between_nodes
        return self.intra_node

    def collective_link(self, group: int, stride: int) -> Link:
        """The link a collective over ``group`` GPUs ``stride`` apart runs on: every collective's one owner.

        Inside one node (``group · stride ≤ gpus_per_node``): :attr:`intra_node`.
        Across nodes: :attr:`between_nodes` with its bus bandwidth by the rail
        rule (module doc, :func:`rail_bus_bandwidth`) for ``k = max(1,
        gpus_per_node // stride)`` GPUs of the group per node (the fewest any node
        holds; the slowest node gates the ring); its latency and point-to-point
        bandwidth are the inter-node link's. ``k = 1``: :attr:`between_nodes` itself.
        """
        positive_int("group", group)
        positive_int("stride", stride)
        if group * stride <= self.gpus_per_node:
            return self.intra_node
        nic = self.between_nodes
        k = min(group, max(1, self.gpus_per_node // stride))
        if k == 1:
            return nic
        bus = rail_bus_bandwidth(nic, self.intra_node, k)
        return replace(nic, name=f"{nic.name} x{k} rails", allreduce_bandwidth=bus,
                       description=f"{nic.description}; {k} GPUs of the group per node: NCCL's rings over {k} NIC "
                                   f"rails, bus bandwidth {bus / 1e9:.0f} GB/s (planner/cluster.py)")

    def data_parallel_link(self, pp: int, dp: int) -> Link:
        """The link a data-parallel group (``dp`` GPUs ``pp`` apart) runs its collectives on (:meth:`collective_link`)."""
        return self.collective_link(dp, pp)
