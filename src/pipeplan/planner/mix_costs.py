"""What one sample of each shape of a mix costs under a plan: per stage, per message, and the tails.

    from pipeplan.planner.mix_costs import _Costs, _tails
    costs = _Costs(shaped, workload, options.engine_costs, cluster.device)  # per mix shape, the planned one
    forward, backward, weight = costs.shapes(plan)      # [shape, stage], one sample's share (profile units)
    message, planned_message = costs.messages(plan, schedule, cluster)   # [shape, boundary], [boundary]
    tails = _tails(schedule, {"F": f, "B": b, "I": i, "W": w})           # per rank: the chain after its last action

The costs :func:`~pipeplan.planner.mix_rank.rank_on_mix` times plans with: each shape's
workload at the plan's tensor-parallel degree, micro-batch size and per-stage recompute,
divided by the micro-batch size, with the engine's pipeline costs where it has them
(cached per plan shape); each stage boundary's message
on the link the search prices it with, one sample's share of it (:meth:`_Costs.messages`);
messages folded onto the sender's timeline for ``serialized`` sends (:func:`_serialized`);
and, for the bound, the longest chain of actions after each rank's last one
(:func:`_tails`). The module doc of :mod:`pipeplan.planner.mix_rank` states how they are
used. Torch-free.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..plan import Plan, Recompute
from ..schedule import Schedule
from .cluster import Cluster
from .engine_costs import EngineCosts
from .workload import Workload


class _Costs:
    """Per-sample stage costs of each shape, per (tp, micro-batch size, per-stage recompute, partition); cached."""

    def __init__(self, shape_workloads: Sequence[Workload], planned: Workload,
                 engine_costs: EngineCosts | None = None, device: Any = None) -> None:
        self.workloads = list(shape_workloads)
        self.planned = planned
        self.engine_costs = engine_costs
        self.device = device
        self._tp: dict[tuple[int, int], Workload] = {}
        self._stages: dict[tuple[Any, ...], tuple[np.ndarray, np.ndarray, np.ndarray]] = {}

    def _workload(self, index: int, tp: int) -> Workload:
        """Shape ``index`` (``-1``: the planned shape) at tensor-parallel degree ``tp``."""
        key = (index, tp)
        if key not in self._tp:
            base = self.planned if index < 0 else self.workloads[index]
            self._tp[key] = base.with_tensor_parallel(tp)
        return self._tp[key]

    def stage(self, index: int, plan: Plan) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(forward, backward, weight)`` per stage of one sample of shape ``index`` (``-1``: planned) under ``plan``.

        Each stage's costs are :meth:`~pipeplan.planner.workload.Workload.stage_costs` under its
        own mode (Megatron-LM's ``block:N`` / ``uniform:N`` by the stage's place, as the
        search's layouts); beside a pipeline (``pp > 1``) with the engine's pipeline costs
        (:meth:`~pipeplan.planner.engine_costs.EngineCosts.pipeline_for` the plan's data-parallel
        mode, applied as :class:`~pipeplan.planner.layout.Layouts` does, on ``device``): the
        factor on forward and backward, and the accumulation pass, a per-microbatch cost,
        carried as ``1/b`` of it per sample.
        """
        none: Recompute = "none"
        modes: tuple[Recompute, ...] = tuple(plan.recompute) or (none,) * len(plan.layers_per_stage)
        pipeline = None
        if self.engine_costs is not None and self.device is not None and plan.pp > 1:
            pipeline = self.engine_costs.pipeline_for(plan.dp_mode)
        key = (index, plan.tp, plan.micro_batch_size, modes, tuple(plan.layers_per_stage),
               None if pipeline is None else pipeline.key)
        cached = self._stages.get(key)
        if cached is None:
            workload = self._workload(index, plan.tp)
            sizes = tuple(plan.layers_per_stage)
            per_mode = {mode: workload.stage_costs(plan.micro_batch_size, mode, sizes) for mode in set(modes)}
            if pipeline is not None:
                trainable = workload.profile(plan.micro_batch_size).trainable_params
                ends = [0, *np.cumsum(sizes).tolist()]
                params = [float(sum(trainable[ends[s]:ends[s + 1]])) for s in range(len(sizes))]
                per_mode = {mode: pipeline.applied(costs, params, self.device, workload.time_unit)
                            for mode, costs in per_mode.items()}
            scale = 1.0 / plan.micro_batch_size
            forward, backward, weight = (
                np.array([getattr(per_mode[mode], part)[s] for s, mode in enumerate(modes)]) * scale
                for part in ("forward", "backward", "weight"))
            cached = self._stages[key] = (forward, backward, weight)
        return cached

    def messages(self, plan: Plan, schedule: Schedule, cluster: Cluster) -> tuple[np.ndarray, np.ndarray]:
        """``[shape, boundary]`` and ``[boundary]`` (planned): one sample's share of each stage boundary's message.

        A microbatch's message across boundary ``s`` takes the link's latency plus its bytes
        (the sum of its samples' ``send_bytes`` after the boundary's last layer) over the link's
        bandwidth, on the link :meth:`~pipeplan.planner.cluster.Cluster.pipeline_link` gives
        (as :meth:`~pipeplan.planner.links.Links.boundary_times`); each of its ``b`` samples
        carries ``latency / b`` plus its own bytes' time. Stages on one rank: 0. Profile time units.
        """
        none: Recompute = "none"
        modes: tuple[Recompute, ...] = tuple(plan.recompute) or (none,) * len(plan.layers_per_stage)
        b = plan.micro_batch_size
        ends = np.cumsum(plan.layers_per_stage)[:-1] - 1
        links = cluster.for_tensor_parallel(plan.tp)
        rows = []
        for index in [*range(len(self.workloads)), -1]:
            workload = self._workload(index, plan.tp)
            per_ms = 1e-3 / workload.time_unit
            row = []
            for s, layer in enumerate(ends):
                a, c = schedule.placement[s], schedule.placement[s + 1]
                if a == c:
                    row.append(0.0)
                    continue
                link = links.pipeline_link(plan.pp, plan.dp, a, c)
                sent = float(workload.profile(b, modes[s]).send_bytes[int(layer)])
                row.append(link.milliseconds(sent) * per_ms / b)  # latency / b + the sample's bytes' time
            rows.append(row)
        table = np.asarray(rows, dtype=float).reshape(len(rows), len(ends))
        return table[:-1], table[-1]

    def shapes(self, plan: Plan) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``[shape, stage]`` forward, backward and weight of one sample of each mix shape under ``plan``."""
        parts = [self.stage(index, plan) for index in range(len(self.workloads))]
        forward, backward, weight = (np.stack([part[k] for part in parts]) for k in range(3))
        return forward, backward, weight


def _uniform(per_sample: np.ndarray, size: int, count: int) -> np.ndarray:
    """``[stage, microbatch]``: ``size`` samples of cost ``per_sample[stage]`` in each of ``count`` microbatches."""
    return np.repeat((size * per_sample)[:, None], count, axis=1)


def _tails(schedule: Schedule, durations: dict[str, np.ndarray]) -> np.ndarray:
    """Per rank, the longest chain of actions after its last one (``durations[kind][stage]``; messages free).

    Every action of the chain waits for the one before it (its rank's next action or a consumer of
    its output), so at any costs no smaller the step ends at least this long after the rank's last
    action ends. Computed backwards over the actions (Kahn's order on the reversed graph).
    """
    successors: dict[Any, list[Any]] = {}
    remaining: dict[Any, int] = {}
    for order in schedule.orders:
        for position, action in enumerate(order):
            after = list(schedule.consumers(action))
            if position + 1 < len(order):
                after.append(order[position + 1])
            successors[action] = after
    for action, after in successors.items():
        remaining[action] = len(after)
    predecessors: dict[Any, list[Any]] = {action: [] for action in successors}
    for action, after in successors.items():
        for other in after:
            predecessors.setdefault(other, []).append(action)
    tail = dict.fromkeys(successors, 0.0)
    ready = [action for action, count in remaining.items() if count == 0]
    while ready:
        action = ready.pop()
        through = tail[action] + float(durations[action.kind][action.stage])
        for before in predecessors.get(action, ()):
            if through > tail[before]:
                tail[before] = through
            remaining[before] -= 1
            if remaining[before] == 0:
                ready.append(before)
    return np.asarray([tail[order[-1]] if order else 0.0 for order in schedule.orders])


def _serialized(forward: np.ndarray, backward: np.ndarray, message: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``[shape, stage]`` costs with each boundary's message on the sender's timeline (``serialized``).

    As :meth:`~pipeplan.planner.links.Links.on_timelines`: stage ``s``'s forward pays the message
    after it, its backward (the input-gradient part) the one before it.
    """
    forward, backward = forward.copy(), backward.copy()
    forward[:, :-1] += message
    backward[:, 1:] += message
    return forward, backward
