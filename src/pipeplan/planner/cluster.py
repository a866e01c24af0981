"""The cluster a plan runs on: how many GPUs, their memory and speed, and the links between them.

    from pipeplan.planner import Cluster, Link
    cluster = Cluster(num_gpus=8, memory_bytes=80e9, peak_flops=989e12,
                      intra_node=Link(latency=2e-6, bandwidth=450e9), gpus_per_node=8)
    cluster.link_between(0, 8)          # the inter-node link

Layout (what the planner assumes about where ranks sit): the ``pp`` ranks of one
pipeline are consecutive GPUs, so a pipeline fills a node before it crosses to
the next; the ``dp`` replicas of a stage are ``pp`` GPUs apart. A pipeline
boundary between GPU ``g`` and ``g + 1`` uses :attr:`Cluster.intra_node` when
both are on one node and :attr:`Cluster.inter_node` otherwise; a data-parallel
group uses the inter-node link as soon as ``pp · dp`` exceeds a node.

Links are in seconds and bytes per second; :meth:`Link.seconds` gives one
message's time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .._validation import positive_int
from ..errors import InvalidInputError

__all__ = ["Link", "Cluster"]


def _positive(field: str, value: object, *, allow_inf: bool = False) -> float:
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        number = math.nan
    if not (number > 0 and (allow_inf or math.isfinite(number))):
        raise InvalidInputError(f"{field} must be a {'' if allow_inf else 'finite '}number > 0, got {value!r}")
    return number


@dataclass(frozen=True)
class Link:
    """A point-to-point link: ``latency`` seconds plus ``bytes / bandwidth``.

    Args:
        latency: seconds per message, >= 0.
        bandwidth: bytes per second per GPU, > 0 (``inf``: size is free).
    """

    latency: float = 0.0
    bandwidth: float = math.inf

    def __post_init__(self) -> None:
        if not (isinstance(self.latency, (int, float)) and 0 <= self.latency < math.inf):
            raise InvalidInputError(f"link latency must be a finite number of seconds >= 0, got {self.latency!r}")
        _positive("link bandwidth", self.bandwidth, allow_inf=True)

    def seconds(self, num_bytes: float) -> float:
        """Time of one message of ``num_bytes``."""
        return self.latency + num_bytes / self.bandwidth

    def allreduce_seconds(self, num_bytes: float, group: int) -> float:
        """Ring all-reduce of ``num_bytes`` per rank over ``group`` ranks.

        ``2 (g − 1) / g · bytes / bandwidth + 2 (g − 1) · latency`` (a
        reduce-scatter then an all-gather; zero for ``g = 1``).
        """
        if group <= 1:
            return 0.0
        steps = 2 * (group - 1)
        return steps * self.latency + steps / group * num_bytes / self.bandwidth


@dataclass(frozen=True)
class Cluster:
    """GPUs of one kind and the links between them.

    Args:
        num_gpus: GPUs to plan for.
        memory_bytes: memory of one GPU, bytes.
        peak_flops: dense bf16 FLOP/s of one GPU, for MFU (``None``: MFU unknown).
        intra_node: the link between GPUs of one node (NVLink).
        inter_node: the link between nodes (InfiniBand / RoCE); default the same
            as ``intra_node``.
        gpus_per_node: GPUs per node.
        name: the GPU's name, for reports.
    """

    num_gpus: int
    memory_bytes: float
    peak_flops: float | None = None
    intra_node: Link = Link()
    inter_node: Link | None = None
    gpus_per_node: int = 8
    name: str = "gpu"

    def __post_init__(self) -> None:
        positive_int("num_gpus", self.num_gpus)
        positive_int("gpus_per_node", self.gpus_per_node)
        _positive("memory_bytes", self.memory_bytes)
        if self.peak_flops is not None:
            _positive("peak_flops", self.peak_flops)

    @property
    def between_nodes(self) -> Link:
        """The inter-node link."""
        return self.inter_node if self.inter_node is not None else self.intra_node

    def link_between(self, gpu_a: int, gpu_b: int) -> Link:
        """The link a message between two GPUs (global indices) uses."""
        same = gpu_a // self.gpus_per_node == gpu_b // self.gpus_per_node
        return self.intra_node if same else self.between_nodes

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
