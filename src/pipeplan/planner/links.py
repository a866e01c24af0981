"""Message and collective times of a layout on a cluster, in the workload's time unit.

    from pipeplan.planner.links import Links
    links = Links(workload, cluster, send_mode="eager")
    boundary = links.boundary_times(config, sizes, placement)   # per stage boundary
    comm = links.comm(boundary)        # the CommModel the simulator takes
    links.dp_comm(config, static)      # the gradient reduction of the fullest rank

A boundary between two stages on the same rank costs nothing; one between two
ranks costs its link's time for the activation the boundary's last layer sends
(:meth:`~pipeplan.planner.cluster.Cluster.pipeline_link`). The simulator then
sees each boundary's *time* as its message "bytes" over a bandwidth of 1 with no
latency. A link's time is NCCL's achievable point-to-point rate, not its line
rate (:mod:`pipeplan.hardware`); a message between nodes rides one NIC. The
data-parallel gradient reduction is a ring all-reduce at the bus bandwidth of
:meth:`~pipeplan.planner.cluster.Cluster.collective_link` (across nodes NCCL's
rail rule: ``k`` GPUs of the group per node drive ``k`` NICs, up to the
intra-node link), or a reduce-scatter with the
distributed optimizer (:func:`~pipeplan.planner.step.reduction_ms`); how much of
it the backward hides is :mod:`pipeplan.planner.step`'s. Times come back in the
profile's unit (``workload.time_unit`` seconds each; links work in ms).

Send modes: ``"eager"`` (the sender goes on: torch's ``isend``), ``"rendezvous"``
(the sender waits for the receiver to post its receive) and ``"serialized"``:
Megatron-LM's default point-to-point (``overlap_p2p_comm=False``:
``batch_isend_irecv`` then wait) and DeepSpeed's blocking sends, where each
exchange sits on the sending rank's timeline. :meth:`Links.on_timelines` then
adds each boundary's time to the action that sends across it (F to the next
stage, B's input gradient to the previous one) and the message itself costs
nothing more.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..costs import CommModel, StageCosts
from ..plan import RankMemory
from .cluster import Cluster
from .space import Config
from .step import reduction_ms
from .workload import Workload

__all__ = ["Links"]


class Links:
    """Pipeline messages and data-parallel all-reduces of one workload on one cluster.

    Args:
        workload: its send bytes per layer and its time unit.
        cluster: the links between GPUs.
        send_mode: ``"eager"``, ``"rendezvous"`` (:class:`~pipeplan.costs.CommModel`) or
            ``"serialized"`` (module doc).
        distributed: gradients are reduce-scattered (Megatron's distributed
            optimizer), not all-reduced.
    """

    def __init__(self, workload: Workload, cluster: Cluster, send_mode: str, *, distributed: bool = False) -> None:
        self.workload = workload
        self.cluster = cluster
        self.send_mode = send_mode
        self.distributed = distributed

    def boundary_times(self, config: Config, sizes: Sequence[int], placement: Sequence[int]) -> tuple[float, ...]:
        """Message time across each stage boundary, in profile time units."""
        out_bytes = self.workload.profile(config.micro_batch_size).send_bytes
        ends = np.cumsum(sizes)[:-1] - 1
        per_ms = 1e-3 / self.workload.time_unit  # profile time units per millisecond
        times = []
        for s, layer in enumerate(ends):
            a, b = placement[s], placement[s + 1]
            if a == b:
                times.append(0.0)
                continue
            link = self.cluster.pipeline_link(config.pp, config.dp, a, b)
            times.append(link.milliseconds(out_bytes[int(layer)]) * per_ms)
        return tuple(times)

    def comm(self, boundary: Sequence[float]) -> CommModel:
        """The messages of a layout whose boundaries take ``boundary`` (precomputed from their links)."""
        mode = "eager" if self.send_mode == "serialized" else self.send_mode
        return CommModel(latency=0.0, bandwidth=1.0, boundary_bytes=list(boundary) or 0.0,
                         send_mode=mode)  # type: ignore[arg-type]

    def on_timelines(self, costs: StageCosts, boundary: Sequence[float]) -> tuple[StageCosts, tuple[float, ...]]:
        """``costs`` and ``boundary`` as the simulator should see them under this send mode.

        Unchanged unless ``"serialized"`` (module doc): then stage ``s``'s forward
        pays ``boundary[s]`` and its backward (its input-gradient half; W is
        unchanged) ``boundary[s - 1]``, and every boundary costs 0.
        """
        if self.send_mode != "serialized":
            return costs, tuple(boundary)
        last = len(costs.forward) - 1
        forward = [f + (boundary[s] if s < last else 0.0) for s, f in enumerate(costs.forward)]
        received = [boundary[s - 1] if s > 0 else 0.0 for s in range(last + 1)]
        split_input = None if costs.backward_input is None else [i + r for i, r in zip(costs.backward_input, received)]
        backward = [b + r for b, r in zip(costs.backward, received)]
        return (costs.replaced(forward=forward, backward=backward, backward_input=split_input),
                tuple(0.0 for _ in boundary))

    def allreduce(self, config: Config, num_bytes: float) -> float:
        """The gradient reduction of ``num_bytes`` per GPU over data parallel, in profile time units.

        A ring all-reduce, or a reduce-scatter with the distributed optimizer
        (0 at ``dp = 1``). Run without overlap, it is part of the step after the
        pipeline (so a bound may add it; with an overlapping
        :class:`~pipeplan.planner.step.GradientSync` only its last bucket is sure to be).
        """
        if config.dp == 1:
            return 0.0
        link = self.cluster.data_parallel_link(config.pp, config.dp)
        return reduction_ms(link, num_bytes, config.dp, distributed=self.distributed) * 1e-3 / self.workload.time_unit

    def dp_comm(self, config: Config, static: Sequence[RankMemory]) -> float:
        """The gradient reduction of the largest rank's gradients over data parallel, in profile time units."""
        if config.dp == 1:
            return 0.0
        return self.allreduce(config, max(rank.gradients for rank in static))
