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
are on one node in every replica and :attr:`Cluster.inter_node` otherwise; a
data-parallel group uses the inter-node link as soon as ``pp · dp`` exceeds a node.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from .. import hardware
from .._validation import positive_int
from ..errors import InvalidInputError
from ..hardware import Device, Link
from ..limits import MAX_GPUS

__all__ = ["Cluster", "allreduce_ms", "ring_pass_ms"]


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

    def data_parallel_link(self, pp: int, dp: int) -> Link:
        """The link a data-parallel group (GPUs ``pp`` apart) is limited by."""
        return self.intra_node if pp * dp <= self.gpus_per_node else self.between_nodes
