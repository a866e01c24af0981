"""The planner's search: the fastest plans that fit, a Megatron-LM baseline, and why others do not fit.

    from pipeplan.planner import Cluster, Workload, search
    result = search(workload, Cluster.of("h100-80g", num_gpus=8), global_batch=256)
    best = result.plans[0]; best.step_time, result.ratio(best)   # vs Megatron's default

For each :class:`~pipeplan.planner.space.Config` (pp × dp, micro-batch size,
schedule, v, recompute mode) the search:

1. solves the **exact** min-max partition of the layers into ``pp · v`` stages
   (:func:`pipeplan.partition_layers`) under the memory the schedule's in-flight
   counts imply, per rank where a rank holds several stages; for ``adaptive``
   over chunks it instead cuts chunks in a loop whose *rank* loads are even
   (:func:`pipeplan.partition.placement.place_chunks`), which the cost-aware order needs;
2. **relaxes recompute** stage by stage: a stage solved under ``"full"`` or
   ``"selective"`` goes back to the cheapest mode whose rank still fits;
3. computes a **lower bound** on the step time (:func:`step_time_lower_bound`)
   and skips the candidate when it cannot beat the ``top``-th plan found so far;
4. otherwise builds the schedule (cached for fixed templates), **simulates** it
   with the links' communication, reads each rank's activation peak off the
   timeline, and keeps the plan or the reason it does not fit.

Configurations are visited in order of a bound that needs no partition
(``m · T / pp`` with the pipeline fill, ``m ·`` the least heaviest rank, one
microbatch's chain: :func:`fill_bound`, :mod:`pipeplan.planner.bounds`); once that bound reaches the ``top``-th best step time
every later configuration is skipped at once, and ``m ·`` the least slowest
stage rules out more before any memory-constrained partition is solved. Pruning only drops
candidates that provably cannot enter the top list, so the best plan is the best
of the space (``exhaustive=True`` evaluates everything; a test compares them).
"""

from __future__ import annotations

import heapq
import math
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import numpy as np

from .._validation import positive_int
from ..costs import CommModel, StageCosts
from ..errors import InfeasiblePlanError, InvalidInputError, PipeplanError
from ..layers import LayerProfile
from ..partition import even_split, inflight_per_stage, partition_layers
from ..partition.placement import fixed_pattern, place_chunks
from ..schedule import Schedule
from ..schedules import build_schedule, schedule_options
from ..schedules.zb_v import zb_v_placement
from ..simulate import simulate
from .bounds import LayerTimes, least_max_load
from .cluster import Cluster, allreduce_ms
from .memory import OptimizerBytes
from .plan import RECOMPUTE_MODES, Plan, RankMemory, Recompute
from .space import Config, SearchSpace
from .workload import Workload

__all__ = ["search", "SearchResult", "SearchStats", "Rejection", "step_time_lower_bound", "evaluate_layout",
           "fill_bound", "space_lower_bound", "DEFAULT_HEADROOM"]

Progress = Callable[[int, int], None]
_TIE = 1e-12
#: the share of a GPU's memory the search leaves free by default (see :func:`search`)
DEFAULT_HEADROOM = 0.1
#: adaptive may hold at most this many times its template's peak activations (and never more than the budget)
_ADAPTIVE_HEADROOM = 2.0


@dataclass(frozen=True)
class Rejection:
    """A configuration that does not fit, and why.

    Attributes:
        config: what was tried.
        reason: one line naming the rank (or stage) and the bytes over capacity.
        needed_bytes: the smallest per-GPU memory this configuration needs, when known.
        at_least_bytes: a lower bound on it (weights and optimizer state alone).
    """

    config: Config
    reason: str
    needed_bytes: float | None = None
    at_least_bytes: float | None = None


@dataclass
class SearchStats:
    """What the search did.

    Attributes:
        candidates: configurations in the space.
        partitions: exact partitions solved.
        simulated: schedules simulated.
        pruned: candidates skipped by a lower bound.
        rejected: candidates that do not fit memory (or cannot be built).
        cache_hits: layouts or simulations reused.
        seconds: wall time of the search.
        complete: ``False`` when the budget stopped it (the plans are the best so far).
    """

    candidates: int = 0
    partitions: int = 0
    simulated: int = 0
    pruned: int = 0
    rejected: int = 0
    cache_hits: int = 0
    seconds: float = 0.0
    complete: bool = True

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready counts."""
        return dict(self.__dict__)


@dataclass(frozen=True)
class SearchResult:
    """Ranked plans that fit, the Megatron-LM default and the best one-knob changes.

    Attributes:
        plans: the best plans that fit, fastest first.
        baseline: Megatron-LM's default for the best plan's GPUs and batch: an
            even split, 1F1B, the same micro-batch size and ``m``, no recompute
            (``baseline.fits`` says whether it fits).
        one_knob: the best plan that changes one knob of the baseline, by knob
            (``"partition"``, ``"schedule"``, ``"micro_batch_size"``,
            ``"recompute"``, ``"pp"``).
        rejected: configurations that do not fit, with the reason.
        stats: counts and time.
        lower_bound: a bound no plan of the space beats (see :func:`space_lower_bound`).
        single_stage_bound: the same over the one-stage-per-rank configurations
            only (it includes their pipeline fill).
    """

    plans: tuple[Plan, ...]
    baseline: Plan | None
    one_knob: dict[str, Plan]
    rejected: tuple[Rejection, ...]
    stats: SearchStats
    lower_bound: float
    single_stage_bound: float = math.inf
    rerun: Callable[[Sequence[str]], SearchResult] | None = field(default=None, repr=False, compare=False)

    @property
    def best(self) -> Plan:
        """The fastest plan that fits."""
        return self.plans[0]

    def best_for(self, engine: str) -> tuple[Plan, int | None]:
        """The fastest plan ``engine`` can run, and its index in :attr:`plans`.

        The first of :attr:`plans` the engine's export accepts; when none is, the
        best plan of the same search over only the schedules the engine runs
        (:data:`pipeplan.planner.export.ENGINE_SCHEDULES`), with index ``None``.

        Raises:
            InvalidInputError: an unknown engine, or the search's own schedules
                leave none the engine runs.
            InfeasiblePlanError: no plan the engine runs fits.
        """
        from .export import ENGINE_SCHEDULES, export_refusal

        if engine not in ENGINE_SCHEDULES:
            raise InvalidInputError(f"engine must be one of {', '.join(ENGINE_SCHEDULES)}, got {engine!r}")
        for index, plan in enumerate(self.plans):
            if not export_refusal(plan, engine):
                return plan, index
        allowed = ENGINE_SCHEDULES[engine]
        if self.rerun is None or allowed is None:
            raise InvalidInputError(f"{engine} can run none of these plans: {export_refusal(self.plans[0], engine)}")
        try:
            return self.rerun(allowed).best, None
        except InvalidInputError as error:
            raise InvalidInputError(f"{engine} runs only {', '.join(allowed)}, and {error}") from None

    def ratio(self, plan: Plan) -> float | None:
        """Baseline step time ÷ ``plan``'s (> 1: faster than Megatron's default)."""
        if self.baseline is None or self.baseline.step_time is None or not plan.step_time:
            return None
        return self.baseline.step_time / plan.step_time

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready result (plans without exports; the CLI adds them)."""
        return {
            "plans": [dict(p.to_dict(), ratio_to_baseline=self.ratio(p)) for p in self.plans],
            "baseline": None if self.baseline is None else self.baseline.to_dict(),
            "one_knob": {k: dict(p.to_dict(), ratio_to_baseline=self.ratio(p)) for k, p in self.one_knob.items()},
            "lower_bound": self.lower_bound,
            "single_stage_bound": self.single_stage_bound,
            "rejected": [
                {"config": _config_dict(r.config), "reason": r.reason, "needed_bytes": r.needed_bytes}
                for r in self.rejected[:50]
            ],
            "search": self.stats.to_dict(),
        }


def _config_dict(config: Config) -> dict[str, Any]:
    return {
        "pp": config.pp, "dp": config.dp, "micro_batch_size": config.micro_batch_size,
        "microbatches": config.num_microbatches, "schedule": config.schedule,
        "virtual_stages": config.virtual_stages, "recompute": config.recompute,
    }


# ------------------------------------------------------------------ the bound
def step_time_lower_bound(
    costs: StageCosts, boundary: Sequence[float], placement: Sequence[int], num_microbatches: int, *, split: bool
) -> float:
    """A pipeline makespan no order of these actions can beat.

    For rank ``r`` whose lowest stage is ``s_r``: it cannot start before the
    first microbatch reaches ``s_r`` (``head_r = Σ_{s < s_r} F_s`` plus the
    messages on the way) and it has ``W_r = m · Σ_{s on r} (F_s + B_s)`` of work.
    With a full backward, every action of ``r`` precedes the backward of ``s_r``
    for the last microbatch, after which the gradient still travels down to
    stage 0 (``tail_r = Σ_{s < s_r} B_s`` plus messages). With a split backward
    only the input-gradient parts (``B − W``) are chained that way, and stage 0's
    ``W`` follows. The bound is ``max_r`` of those; for uniform 1F1B it equals
    the makespan ``(m + P − 1)(F + B)``.
    """
    forward = np.asarray(costs.forward)
    backward = np.asarray(costs.backward)
    weight = np.asarray(costs.weight)
    chained = backward - weight if split else backward
    num_stages = len(forward)
    crossing = np.array(
        [boundary[s] if placement[s] != placement[s + 1] else 0.0 for s in range(num_stages - 1)]
    )
    head = np.concatenate([[0.0], np.cumsum(forward[:-1] + crossing)])
    tail = np.concatenate([[0.0], np.cumsum(chained[:-1] + crossing)])
    best = 0.0
    for rank in range(max(placement) + 1):
        stages = [s for s, r in enumerate(placement) if r == rank]
        low = stages[0]
        work = num_microbatches * float(forward[stages].sum() + backward[stages].sum())
        if split:
            chain = num_microbatches * float(forward[stages].sum() + chained[stages].sum()) + tail[low]
            chain += float(weight[0]) if low > 0 else 0.0
            bound = head[low] + max(work, chain)
        else:
            bound = head[low] + work + tail[low]
        best = max(best, bound)
    return best


# ------------------------------------------------------------------ layouts
@dataclass(frozen=True)
class _Layout:
    """A partition with its costs: everything the simulation needs."""

    sizes: tuple[int, ...]
    placement: tuple[int, ...]
    recompute: tuple[Recompute, ...]
    costs: StageCosts
    boundary: tuple[float, ...]
    static: tuple[RankMemory, ...]  # activations 0
    activation_bound: tuple[float, ...]  # per rank, from in-flight counts


class _Evaluator:
    """Partitions, costs, bounds and simulations for one workload and cluster, with caches."""

    def __init__(
        self, workload: Workload, cluster: Cluster, capacity: float | None, optimizer: str | float, send_mode: str
    ) -> None:
        self.workload = workload
        self.cluster = cluster
        self.capacity = capacity
        self.optimizer = optimizer
        self.send_mode = send_mode
        self.stats = SearchStats()
        # ranks with several stages: each stage gets an even share of the capacity (one
        # solve); "exact" searches the splits (seconds per call at 70 layers)
        self.rank_capacity: Literal["exact", "even"] = "even"
        self._layouts: dict[tuple[Any, ...], _Layout | Rejection | None] = {}
        self._templates: dict[tuple[Any, ...], Schedule] = {}
        self._plans: dict[tuple[Any, ...], Plan | Rejection] = {}
        self._inflight: dict[tuple[Any, ...], tuple[tuple[int, ...], tuple[int, ...]]] = {}
        self._free: dict[tuple[Any, ...], tuple[int, ...]] = {}
        self._chunks: dict[tuple[Any, ...], tuple[int, ...]] = {}
        self._times: dict[int, LayerTimes] = {}
        self.bounds: dict[tuple[Any, ...], float] = {}

    # ------------------------------------------------------------ pieces
    def bytes_per_param(self, dp: int) -> OptimizerBytes:
        return OptimizerBytes.for_optimizer(self.optimizer, dp)

    def layer_static_bytes(self, micro: int, dp: int) -> np.ndarray:
        """Bytes of weights, gradients and optimizer state per layer."""
        per = self.bytes_per_param(dp)
        profile = self.workload.profile(micro)
        params = np.asarray(profile.params)
        return params * per.weights + np.asarray(profile.trainable_params) * (per.gradients + per.optimizer)

    def memory_profile(self, micro: int, mode: Recompute, dp: int) -> tuple[LayerProfile, float]:
        """The profile the partitioner sees: params scaled so ``bytes_per_param`` × params is each layer's static bytes."""
        profile = self.workload.profile(micro, mode)
        per = self.bytes_per_param(dp)
        if profile.trainable_params == profile.params:
            return profile, per.per_trainable
        scaled = self.layer_static_bytes(micro, dp) / per.per_trainable
        return (
            LayerProfile(profile.forward, profile.backward, profile.weight, activation_bytes=profile.activation_bytes,
                         params=scaled.tolist(), names=profile.names, first_extra=profile.first_extra,
                         last_extra=profile.last_extra, first_extra_bytes=profile.first_extra_bytes,
                         last_extra_bytes=profile.last_extra_bytes),
            per.per_trainable,
        )

    def schedule_options(self, config: Config) -> dict[str, Any]:
        return {"virtual_stages": config.virtual_stages} if config.schedule == "interleaved" else {}

    def inflight(self, config: Config, num_microbatches: int | None = None) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """Peak in-flight microbatches per stage and the placement, read off the schedule's orders.

        Adaptive and ``pp = 1`` use 1F1B's counts (adaptive is bounded by the
        per-rank memory limit it is given instead). Adaptive over chunks in a loop
        counts one microbatch per stage, the least any order holds
        (:func:`~pipeplan.schedules.adaptive.minimum_memory_limit`).
        """
        if config.chunked_adaptive:
            return (1,) * config.num_stages, fixed_pattern("interleaved", config.pp, config.virtual_stages)
        name = "1f1b" if config.schedule == "adaptive" or config.pp == 1 else config.schedule
        micro = config.num_microbatches if num_microbatches is None else num_microbatches
        key = (name, config.num_stages, micro, config.virtual_stages)
        if key not in self._inflight:
            shape = replace(config, schedule=name, num_microbatches=micro)
            counts = inflight_per_stage(name, config.num_stages, micro, **self.schedule_options(shape))
            self._inflight[key] = (tuple(counts), tuple(self.template(shape).placement))
        return self._inflight[key]

    def template(self, config: Config) -> Schedule:
        """A fixed schedule (not cost-aware), built once per shape."""
        key = (config.schedule, config.num_stages, config.num_microbatches, config.virtual_stages)
        built = self._templates.get(key)
        if built is None:
            built = build_schedule(config.schedule, num_stages=config.num_stages,
                                   num_microbatches=config.num_microbatches, **self.schedule_options(config))
            self._templates[key] = built
        else:
            self.stats.cache_hits += 1
        return built

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

    def dp_comm(self, config: Config, static: Sequence[RankMemory]) -> float:
        """All-reduce of the largest rank's gradients over data parallel, in profile time units."""
        if config.dp == 1:
            return 0.0
        link = self.cluster.data_parallel_link(config.pp, config.dp)
        largest = max(rank.gradients for rank in static)
        return allreduce_ms(link, largest, config.dp) * 1e-3 / self.workload.time_unit

    # ------------------------------------------------------------ layout
    def layout(
        self, config: Config, sizes: Sequence[int], placement: Sequence[int], recompute: Sequence[Recompute]
    ) -> _Layout:
        """Costs, messages and static memory of a given partition and recompute assignment."""
        micro = config.micro_batch_size
        per_mode = {mode: self.workload.profile(micro, mode).stage_costs(sizes) for mode in set(recompute)}
        pick = lambda attr: [getattr(per_mode[mode], attr)[s] for s, mode in enumerate(recompute)]  # noqa: E731
        costs = StageCosts(pick("forward"), pick("backward"), pick("weight"), activation_bytes=pick("activation_bytes"))
        static = self.static_memory(config, sizes, placement)
        counts, _ = self.inflight(config)
        bound = [0.0] * config.pp
        for s, rank in enumerate(placement):
            bound[rank] += counts[s] * costs.activation_bytes[s]
        return _Layout(tuple(sizes), tuple(placement), tuple(recompute), costs,
                       self.boundary_times(config, sizes, placement), static, tuple(bound))

    def static_memory(self, config: Config, sizes: Sequence[int], placement: Sequence[int]) -> tuple[RankMemory, ...]:
        per = self.bytes_per_param(config.dp)
        profile = self.workload.profile(config.micro_batch_size)
        params = np.asarray(profile.params)
        trainable_params = np.asarray(profile.trainable_params)
        bounds = np.concatenate([[0], np.cumsum(sizes)])
        weights = [0.0] * config.pp
        grads = [0.0] * config.pp
        extras = [0.0] * config.pp
        for s, rank in enumerate(placement):
            weights[rank] += float(params[bounds[s]:bounds[s + 1]].sum())
            grads[rank] += float(trainable_params[bounds[s]:bounds[s + 1]].sum())
        extras[placement[0]] += profile.first_extra_bytes
        extras[placement[-1]] += profile.last_extra_bytes
        return tuple(
            RankMemory(per.weights * weights[r] + extras[r], per.gradients * grads[r], per.optimizer * grads[r], 0.0)
            for r in range(config.pp)
        )

    def partitioned(self, config: Config) -> _Layout | Rejection | None:
        """The exact partition of ``config`` with recompute relaxed per stage (cached).

        Returns ``None`` when ``config`` recomputes although the partition without
        recompute already fits: such a configuration is not in the space (recompute
        is tried only where memory needs it).
        """
        counts, placement = self.inflight(config)
        key = (config.pp, config.dp, config.micro_batch_size, config.recompute, config.num_stages, counts, placement)
        if key in self._layouts:
            self.stats.cache_hits += 1
            return self._layouts[key]
        result: _Layout | Rejection | None
        static = self._static_bound(config)
        if self.capacity is not None and static > self.capacity * (1 + 1e-9):
            result = Rejection(config, f"weights and optimizer state alone need at least {_gb(static)} on the "
                                       f"fullest rank (pp={config.pp})", at_least_bytes=static)
            self._layouts[key] = result
            return result
        if config.chunked_adaptive:
            result = self._balanced_chunks(config, placement)
            self._layouts[key] = result
            return result
        free = self._unconstrained(config, "none", counts, placement)
        if free is not None:
            result = free if config.recompute == "none" else None
        elif config.recompute != "full" and "full" in self.workload.recompute_modes and isinstance(
            lightest := self.partitioned(replace(config, recompute="full")), Rejection
        ):
            # full recompute holds the fewest bytes on every stage of every partition:
            # where it does not fit, nothing lighter in time does
            result = replace(lightest, config=config)
        else:
            result = self._partition(config, counts, placement)
        self._layouts[key] = result
        return result

    def _balanced_chunks(self, config: Config, placement: tuple[int, ...]) -> _Layout | Rejection | None:
        """Chunks in a loop with even rank loads (:func:`~pipeplan.partition.placement.place_chunks`), for adaptive.

        A fixed template wants equal stages, so its partition is the min-max one;
        the cost-aware order only needs every rank's sum of chunks to be even,
        which lumpy layers (tiny vision layers before heavy decoder layers) allow
        far better. Memory: the weights and optimizer state plus one microbatch on
        each of a rank's stages must fit; the order then keeps within the rest. A
        recompute mode is tried only where that does not fit without recompute.
        """
        if config.recompute != "none" and isinstance(self.partitioned(replace(config, recompute="none")), _Layout):
            return None
        key = (config.micro_batch_size, config.recompute, config.pp, config.virtual_stages, config.num_microbatches)
        sizes = self._chunks.get(key)
        if sizes is None:
            self.stats.partitions += 1
            profile = self.workload.profile(config.micro_batch_size, config.recompute)
            # fill and drain grow by about (P − 1) chunks: trade balance for small chunks at that rate
            weight = (config.pp - 1) / config.num_microbatches
            sizes = place_chunks(profile, config.pp, config.virtual_stages, pattern="interleaved",
                                 chunk_weight=weight).layers_per_stage
            self._chunks[key] = sizes
        layout = self.layout(config, sizes, placement, (config.recompute,) * config.num_stages)
        over = self._over_capacity(layout)
        if over is None:
            return layout
        rank, total = over
        return Rejection(config, f"rank {rank} holds {_gb(total)} with one microbatch on each of its "
                                 f"{config.virtual_stages} stages, {_gb(total - (self.capacity or 0))} over", total)

    def _static_bound(self, config: Config) -> float:
        """Bytes some rank must hold whatever the partition: ``max(static ÷ pp, largest layer)``."""
        profile = self.workload.profile(config.micro_batch_size)
        static = self.layer_static_bytes(config.micro_batch_size, config.dp)
        total = float(static.sum()) + profile.first_extra_bytes + profile.last_extra_bytes
        return max(total / config.pp, float(static.max()))

    def layer_times(self, micro: int) -> LayerTimes:
        """Per-layer times at micro-batch size ``micro``, the least over the workload's recompute modes (cached)."""
        times = self._times.get(micro)
        if times is None:
            times = LayerTimes.of(self.workload.profile(micro, mode) for mode in self.workload.recompute_modes)
            self._times[micro] = times
        return times

    def free_sizes(self, micro: int, mode: Recompute, num_stages: int) -> tuple[int, ...]:
        """The exact min-max partition ignoring memory (cached: schedules with the same stage count share it)."""
        key = (micro, mode, num_stages)
        sizes = self._free.get(key)
        if sizes is None:
            self.stats.partitions += 1
            sizes = partition_layers(self.workload.profile(micro, mode), num_stages).layers_per_stage
            self._free[key] = sizes
        return sizes

    def bottleneck_bound(self, config: Config) -> float:
        """``m ·`` the least possible slowest stage (no memory, no recompute) plus the all-reduce.

        Any partition of ``config``, with any recompute, has a stage at least that
        slow, and a rank holds at least that stage.
        """
        sizes = self.free_sizes(config.micro_batch_size, "none", config.num_stages)
        profile = self.workload.profile(config.micro_batch_size)
        costs = profile.stage_costs(sizes)
        slowest = max(f + b for f, b in zip(costs.forward, costs.backward))
        return config.num_microbatches * slowest + self.least_dp_comm(config)

    def least_dp_comm(self, config: Config) -> float:
        """The all-reduce of the fewest gradients the fullest rank can hold.

        Some rank holds at least an even share of the gradients, and at least the
        :func:`~pipeplan.planner.bounds.least_max_load` of the layers' gradients
        (of the ``kP + 1`` largest layers, one rank holds ``k + 1``).
        """
        if config.dp == 1:
            return 0.0
        profile = self.workload.profile(config.micro_batch_size)
        grads = least_max_load(profile.trainable_params, config.pp) * self.bytes_per_param(config.dp).gradients
        link = self.cluster.data_parallel_link(config.pp, config.dp)
        return allreduce_ms(link, grads, config.dp) * 1e-3 / self.workload.time_unit

    def _unconstrained(
        self, config: Config, mode: Recompute, counts: tuple[int, ...], placement: tuple[int, ...]
    ) -> _Layout | None:
        """The min-max partition ignoring memory, when it fits anyway (then it is the constrained optimum too)."""
        sizes = self.free_sizes(config.micro_batch_size, mode, config.num_stages)
        layout = self.layout(config, sizes, placement, (mode,) * config.num_stages)
        return layout if self._over_capacity(layout) is None else None

    def _partition(
        self, config: Config, counts: tuple[int, ...], placement: tuple[int, ...]
    ) -> _Layout | Rejection:
        profile, per_param = self.memory_profile(config.micro_batch_size, config.recompute, config.dp)
        name = "1f1b" if config.schedule == "adaptive" or config.pp == 1 else config.schedule
        options = self.schedule_options(config) if name == config.schedule else {}
        stages = config.num_stages
        # in-flight counts at m = S equal those at m for most schedules: then the
        # solver needs no microbatch count (and simulates nothing)
        same = self.inflight(config, num_microbatches=stages)[0] == counts
        last_reason = ""
        needed: float | None = None
        # the partitioner checks the capacity per rank where a rank holds several stages
        for capacity in (self.capacity,):
            try:
                self.stats.partitions += 1
                result = partition_layers(
                    profile, stages, memory_capacity=capacity, bytes_per_param=per_param, schedule=name,
                    num_microbatches=None if same else config.num_microbatches, schedule_options=options,
                    rank_capacity=self.rank_capacity,
                )
            except InfeasiblePlanError as error:
                needed = _needed_bytes(str(error))
                last_reason = self._name_binding_layer(str(error), config)
                continue
            except PipeplanError as error:
                return Rejection(config, str(error))
            recompute = self._relax(config, result.layers_per_stage, placement)
            built = self.layout(config, result.layers_per_stage, placement, recompute)
            over = self._over_capacity(built)
            if over is None:
                return built
            rank, total = over
            offsets = np.concatenate([[0], np.cumsum(built.sizes)])
            layers = [i for s, r in enumerate(placement) if r == rank
                      for i in range(int(offsets[s]), int(offsets[s + 1]))]
            last_reason = (
                f"rank {rank} holds {_gb(total)} with its {config.virtual_stages} stages, "
                f"{_gb(total - (self.capacity or 0))} over; its largest module is {self._heaviest(config, layers)}"
            )
            needed = None
        return Rejection(config, last_reason, needed)

    def _heaviest(self, config: Config, layers: Sequence[int]) -> str:
        """The layer among ``layers`` with the most bytes (static plus one microbatch's activations)."""
        profile = self.workload.profile(config.micro_batch_size, config.recompute)
        static = self.layer_static_bytes(config.micro_batch_size, config.dp)
        act = np.asarray(profile.activation_bytes)
        index = max(layers, key=lambda i: static[i] + act[i])
        return f"{profile.names[index]!r} ({_gb(static[index])} of weights and optimizer state)"

    def _name_binding_layer(self, message: str, config: Config) -> str:
        """A short reason from the partitioner's: the stage, its layers, its largest module."""
        match = re.search(r"smallest capacity that fits is ([0-9.eE+-]+) bytes, needed by stage (\d+) "
                          r"\(layers (\d+)\.\.(\d+)\)", message)
        if match is None:
            return message
        needed, stage, lo, hi = float(match.group(1)), int(match.group(2)), int(match.group(3)), int(match.group(4))
        return (f"stage {stage} (layers {lo}..{hi}) needs at least {_gb(needed)} on its own; its largest module is "
                f"{self._heaviest(config, range(lo, hi + 1))}")

    def _over_capacity(self, layout: _Layout) -> tuple[int, float] | None:
        if self.capacity is None:
            return None
        totals = [s.total + a for s, a in zip(layout.static, layout.activation_bound)]
        worst = int(np.argmax(totals))
        limit = self.capacity * (1 + 1e-9)
        return (worst, totals[worst]) if totals[worst] > limit else None

    def _relax(self, config: Config, sizes: Sequence[int], placement: Sequence[int]) -> tuple[Recompute, ...]:
        """Per stage, the cheapest recompute mode (in time) that keeps its rank within capacity."""
        ceiling = RECOMPUTE_MODES.index(config.recompute)
        assignment: list[Recompute] = [config.recompute] * len(sizes)
        if ceiling == 0 or self.capacity is None:
            return tuple(assignment)
        counts, _ = self.inflight(config)
        static = self.static_memory(config, sizes, placement)
        bounds = np.concatenate([[0], np.cumsum(sizes)])
        act = {
            mode: np.asarray(self.workload.profile(config.micro_batch_size, mode).activation_bytes)
            for mode in RECOMPUTE_MODES[: ceiling + 1]
        }
        stage_act = {mode: [float(a[bounds[s]:bounds[s + 1]].sum()) * counts[s] for s in range(len(sizes))]
                     for mode, a in act.items()}
        for s in range(len(sizes)):
            rank = placement[s]
            others = sum(stage_act[assignment[t]][t] for t in range(len(sizes)) if placement[t] == rank and t != s)
            for mode in RECOMPUTE_MODES[: ceiling + 1]:
                if mode not in self.workload.recompute_modes:
                    continue
                if static[rank].total + others + stage_act[mode][s] <= self.capacity * (1 + 1e-9):
                    assignment[s] = mode
                    break
        return tuple(assignment)

    # ------------------------------------------------------------ simulate
    def adaptive_inputs(self, config: Config, layout: _Layout, comm: CommModel) -> tuple[StageCosts, float | None]:
        """The costs and the one memory limit the adaptive order of ``layout`` is built under.

        ``adaptive`` takes one limit for every rank; each rank here has its own
        budget (capacity − its weights and state). Scaling rank ``r``'s activation
        bytes by ``1 / budget_r`` turns those budgets into the single limit 1
        exactly; the timeline is then simulated with the real bytes.

        The list rules run a forward whenever memory allows, so they fill any
        budget they are given, mostly for nothing (docs/planner.md, memory model).
        The limit is therefore also capped at twice the template's peak for the
        same placement (1F1B, or interleaved over chunks) on the fullest rank, as
        a share of its budget: a plan keeps its headroom unless its order needs
        the memory.
        """
        costs = layout.costs
        if self.capacity is None:
            return costs, None
        budgets = [self.capacity - rank.total for rank in layout.static]
        if min(budgets) <= 0:
            raise InfeasiblePlanError(f"a rank's weights and optimizer state alone exceed {_gb(self.capacity)}")
        scale = [1.0 / budgets[rank] for rank in layout.placement]
        scaled = StageCosts(costs.forward, costs.backward, costs.weight,
                            activation_bytes=[a * k for a, k in zip(costs.activation_bytes, scale)],
                            weight_stash_bytes=[a * k for a, k in zip(costs.weight_stash_bytes, scale)])
        template = self.template(replace(config, schedule="interleaved" if config.chunked_adaptive else "1f1b"))
        peak = float(max(simulate(template, scaled, comm, validate=False).peak_bytes))
        return scaled, min(1.0, _ADAPTIVE_HEADROOM * peak)

    def _adaptive(self, config: Config, layout: _Layout, comm: CommModel, effort: str) -> tuple[Schedule, float | None]:
        """The adaptive order under each rank's own activation limit (:meth:`adaptive_inputs`), and that limit's share."""
        costs, limit = self.adaptive_inputs(config, layout, comm)
        schedule = build_schedule("adaptive", num_stages=config.num_stages, num_microbatches=config.num_microbatches,
                                  costs=costs, comm=comm, memory_limit=limit, placement=layout.placement,
                                  effort=effort)
        return schedule, limit

    def comm_of(self, layout: _Layout) -> CommModel:
        """The messages of ``layout``: each boundary's time, precomputed from its link."""
        return CommModel(latency=0.0, bandwidth=1.0, boundary_bytes=list(layout.boundary) or 0.0,
                         send_mode=self.send_mode)  # type: ignore[arg-type]

    def lower_bound(self, config: Config, layout: _Layout) -> float:
        split = config.schedule not in ("1f1b", "gpipe", "interleaved") and config.pp > 1
        pipeline = step_time_lower_bound(layout.costs, layout.boundary, layout.placement,
                                         config.num_microbatches, split=split)
        return pipeline + self.dp_comm(config, layout.static)

    def simulate(self, config: Config, layout: _Layout, effort: str | None = None) -> Plan:
        """Build, simulate and measure one candidate (cached by its layout).

        ``effort`` is the adaptive generator's (default ``"fast"`` over chunks,
        ``"full"`` with one stage per rank; the baselines use ``"fast"``).
        """
        if effort is None:
            effort = "fast" if config.chunked_adaptive else "full"
        key = (config.pp, config.dp, config.micro_batch_size, config.num_microbatches, config.schedule,
               config.virtual_stages, layout.sizes, layout.recompute, effort if config.schedule == "adaptive" else None)
        cached = self._plans.get(key)
        if isinstance(cached, Plan):
            self.stats.cache_hits += 1
            return cached
        comm = self.comm_of(layout)  # boundary "bytes" are message times: latency + bytes / bandwidth
        options: dict[str, Any] = {}
        if config.schedule == "adaptive" and config.pp > 1:
            schedule, share = self._adaptive(config, layout, comm, effort)
            if share is not None and self.capacity is not None:  # each rank's limit in bytes
                options = {"memory_limits": [share * (self.capacity - rank.total) for rank in layout.static]}
        else:
            schedule = self.template(config if config.pp > 1 else replace(config, schedule="1f1b"))
        self.stats.simulated += 1
        timeline = simulate(schedule, layout.costs, comm, validate=False)
        peaks = timeline.peak_bytes
        memory = tuple(replace(static, activations=float(peaks[r])) for r, static in enumerate(layout.static))
        dp_time = self.dp_comm(config, layout.static)
        fits, reason = True, ""
        if self.capacity is not None:
            totals = [rank.total for rank in memory]
            worst = int(np.argmax(totals))
            if totals[worst] > self.capacity * (1 + 1e-9):
                fits = False
                reason = (f"rank {worst} peaks at {_gb(totals[worst])}, {_gb(totals[worst] - self.capacity)} over "
                          f"the capacity of {_gb(self.capacity)}")
        profile = self.workload.profile(config.micro_batch_size)
        plan = Plan(
            pp=config.pp,
            dp=config.dp,
            layers_per_stage=layout.sizes,
            placement=tuple(schedule.placement),
            schedule=config.schedule if config.pp > 1 else "1f1b",
            schedule_options=options | self.schedule_options(config),
            micro_batch_size=config.micro_batch_size,
            num_microbatches=config.num_microbatches,
            recompute=layout.recompute,
            step_time=float(timeline.makespan) + dp_time,
            pipeline_time=float(timeline.makespan),
            dp_comm_time=dp_time,
            memory=memory,
            memory_capacity=self.capacity,
            layer_names=tuple(profile.names),
            time_unit=self.workload.time_unit,
            flops_per_sample=self.workload.flops_per_sample,
            peak_flops=self.cluster.peak_flops,
            tokens_per_sample=self.workload.tokens_per_sample,
            timeline=timeline,
            fits=fits,
            reason=reason,
        )
        self._plans[key] = plan
        return plan


def _gb(num_bytes: float) -> str:
    """``3.36 GB``."""
    return f"{num_bytes / 1e9:.4g} GB"


def _needed_bytes(message: str) -> float | None:
    """The smallest capacity an InfeasiblePlanError message names, if it names one."""
    match = re.search(r"smallest capacity (?:per rank )?that fits is ([0-9.eE+-]+) bytes", message)
    return float(match.group(1)) if match else None


def evaluate_layout(
    workload: Workload,
    cluster: Cluster,
    config: Config,
    layers_per_stage: Sequence[int],
    *,
    recompute: Sequence[Recompute] | None = None,
    memory_capacity: float | None = None,
    optimizer: str | float = "adam",
    send_mode: str = "eager",
) -> Plan:
    """Simulate one given layout (a baseline, a user's own split) as the search would."""
    evaluator = _Evaluator(workload, cluster, memory_capacity, optimizer, send_mode)
    return _evaluate_fixed(evaluator, config, tuple(layers_per_stage),
                           tuple(recompute) if recompute is not None else (config.recompute,) * config.num_stages)


def _evaluate_fixed(evaluator: _Evaluator, config: Config, sizes: tuple[int, ...],
                    recompute: tuple[Recompute, ...], effort: str | None = None) -> Plan:
    _, placement = evaluator.inflight(config)
    layout = evaluator.layout(config, sizes, placement, recompute)
    return evaluator.simulate(config, layout, effort)


# ------------------------------------------------------------------ search
def search(
    workload: Workload,
    cluster: Cluster,
    global_batch: int,
    *,
    pp: int | None = None,
    micro_batch_size: int | None = None,
    schedules: Sequence[str] | None = None,
    memory_capacity: float | None = None,
    optimizer: str | float = "adam",
    max_virtual_stages: int | None = 4,
    send_mode: str = "eager",
    top: int = 10,
    budget: float | None = None,
    progress: Progress | None = None,
    exhaustive: bool = False,
    headroom: float = DEFAULT_HEADROOM,
) -> SearchResult:
    """Search the space for the fastest plans that fit.

    Args:
        workload: the model's per-layer costs (:class:`~pipeplan.planner.Workload`).
        cluster: GPUs and links; its ``memory_bytes`` is the capacity unless
            ``memory_capacity`` overrides it.
        global_batch: samples per optimizer step.
        pp: fix the pipeline degree.
        micro_batch_size: fix the micro-batch size.
        schedules: schedules to try (default all registered).
        memory_capacity: bytes per GPU a plan may use (default ``cluster.memory_bytes``
            less ``headroom``).
        optimizer: ``"adam"`` (16 bytes per parameter), ``"distributed"``
            (6 + 12/dp) or bytes per parameter (:mod:`pipeplan.planner.memory`).
        max_virtual_stages: largest ``v`` for interleaved and adaptive (default 4;
            ``None``: every ``v`` with ``pp · v ≤ L``).
        send_mode: ``"eager"`` or ``"rendezvous"`` messages.
        top: how many plans to keep.
        budget: seconds; once a plan is found, the search stops after that many
            and returns the best so far with ``stats.complete = False`` (the
            one-knob baselines and the bound's refinement stop at it too; the
            Megatron default is always simulated).
        progress: ``progress(done, total)`` after each configuration.
        exhaustive: simulate every candidate (no pruning), for checking.
        headroom: the share of each GPU's memory left free when ``memory_capacity``
            is not given (default 10 %: the CUDA context, communication buffers and
            allocator fragmentation live there, and pipeplan's activation bytes
            are estimates); ``0`` plans up to the full memory.

    Returns:
        A :class:`SearchResult`.

    Raises:
        InvalidInputError: bad numbers, a batch no ``dp × b`` divides, unknown schedules.
        InfeasiblePlanError: no plan fits; names the smallest memory that would
            and the rank and layers that need it.
    """
    keep = positive_int("top", top)
    if budget is not None and not (isinstance(budget, (int, float)) and budget > 0):
        raise InvalidInputError(f"budget must be a number of seconds > 0, got {budget!r}")
    if send_mode not in ("eager", "rendezvous"):
        raise InvalidInputError(f"send_mode must be 'eager' or 'rendezvous', got {send_mode!r}")
    if not (isinstance(headroom, (int, float)) and 0 <= headroom < 1):
        raise InvalidInputError(f"headroom must be a share of the memory in [0, 1), got {headroom!r}")
    capacity = cluster.memory_bytes * (1 - headroom) if memory_capacity is None else float(memory_capacity)
    if not capacity > 0:
        raise InvalidInputError(f"memory_capacity must be > 0 bytes, got {memory_capacity!r}")
    OptimizerBytes.for_optimizer(optimizer, 1)  # validates
    space = SearchSpace(
        num_gpus=cluster.num_gpus, global_batch=global_batch, num_layers=workload.num_layers,
        micro_batch_sizes=workload.micro_batch_sizes, recompute_modes=workload.recompute_modes, pp=pp,
        micro_batch_size=micro_batch_size, schedules=tuple(schedules) if schedules is not None else None,
        max_virtual_stages=max_virtual_stages,
    )
    started = time.perf_counter()
    evaluator = _Evaluator(workload, cluster, capacity, optimizer, send_mode)
    configs = space.configs()
    evaluator.stats.candidates = len(configs)
    # by bound; within a configuration, no recompute first (the others need it to bind)
    ordered = sorted(configs, key=lambda c: (_config_bound(evaluator, c), c.pp, c.micro_batch_size, c.schedule,
                                             c.virtual_stages, RECOMPUTE_MODES.index(c.recompute)))
    best: list[tuple[float, int, Plan]] = []  # heap of the kept plans, slowest on top
    seen: set[tuple[Any, ...]] = set()
    rejected: list[Rejection] = []
    counter = 0

    def threshold(count: int) -> float:
        if len(best) < count:
            return math.inf
        return -best[0][0] if count == keep else min(-e[0] for e in best)

    # Fixed templates first; the cost-aware "adaptive" generator is far dearer to
    # build, and is never slower than the templates it also tries, so it runs
    # last and only where its bound could beat the best plan found.
    passes = [[c for c in ordered if c.schedule != "adaptive" or c.pp == 1],
              [c for c in ordered if c.schedule == "adaptive" and c.pp > 1]]
    done = 0
    for index, group in enumerate(passes):
        rank_needed = keep if index == 0 else 1
        for position, config in enumerate(group):
            if budget is not None and best and time.perf_counter() - started > budget:
                evaluator.stats.complete = False
                break
            if progress is not None:
                progress(done, len(ordered))
            done += 1
            limit = threshold(rank_needed) * (1 - _TIE)
            if not exhaustive and _config_bound(evaluator, config) >= limit:
                evaluator.stats.pruned += len(group) - position
                done += len(group) - position - 1
                break
            if not exhaustive and evaluator.bottleneck_bound(config) >= limit:
                evaluator.stats.pruned += 1
                continue
            layout = evaluator.partitioned(config)
            if layout is None:  # recompute where memory does not need it
                continue
            if isinstance(layout, Rejection):
                evaluator.stats.rejected += 1
                rejected.append(layout)
                continue
            if not exhaustive and evaluator.lower_bound(config, layout) >= limit:
                evaluator.stats.pruned += 1
                continue
            try:
                plan = evaluator.simulate(config, layout)
            except PipeplanError as error:  # e.g. adaptive finds no order within the memory limit
                evaluator.stats.rejected += 1
                rejected.append(Rejection(config, str(error)))
                continue
            if not plan.fits:
                evaluator.stats.rejected += 1
                rejected.append(Rejection(config, plan.reason, max(plan.peak_memory)))
                continue
            identity = (plan.pp, plan.schedule, plan.virtual_stages, plan.micro_batch_size,
                        plan.layers_per_stage, plan.recompute)
            if identity in seen:
                continue
            seen.add(identity)
            counter += 1
            assert plan.step_time is not None
            entry = (-plan.step_time, -counter, plan)
            if len(best) < keep:
                heapq.heappush(best, entry)
            elif plan.step_time < threshold(keep):
                heapq.heapreplace(best, entry)
        if not evaluator.stats.complete:
            break
    if progress is not None:
        progress(len(ordered), len(ordered))
    # fastest first; equal step times go to the plan with the smaller worst rank
    plans = tuple(sorted((p for _, _, p in best), key=lambda p: (p.step_time, max(p.peak_memory))))
    evaluator.stats.seconds = time.perf_counter() - started
    if not plans:
        # say where the number comes from
        note = f" (its {_gb(cluster.memory_bytes)} less {headroom:.0%} headroom)" if memory_capacity is None and headroom else ""
        raise _no_plan_fits(rejected, capacity, evaluator.stats, workload, note)
    baseline = _megatron_default(evaluator, plans[0])
    deadline = math.inf if budget is None else started + budget
    knobs = _one_knob(evaluator, space, plans[0], baseline, deadline)
    bounds = (space_lower_bound(evaluator, configs, deadline=deadline),
              space_lower_bound(evaluator, configs, chunked=False, deadline=deadline))
    evaluator.stats.seconds = time.perf_counter() - started

    def rerun(allowed: Sequence[str]) -> SearchResult:
        names = [name for name in space.schedule_names if name in allowed]
        if not names:
            raise InvalidInputError(f"the search tried none of them (--schedules {','.join(space.schedule_names)})")
        return search(workload, cluster, global_batch, pp=pp, micro_batch_size=micro_batch_size, schedules=names,
                      memory_capacity=capacity, optimizer=optimizer, max_virtual_stages=max_virtual_stages,
                      send_mode=send_mode, top=1, budget=budget, exhaustive=exhaustive)

    return SearchResult(plans, baseline, knobs, tuple(rejected), evaluator.stats, *bounds, rerun=rerun)


def fill_bound(total: float, num_microbatches: int, num_ranks: int, ratio: float) -> float:
    """Least makespan of ``m`` microbatches over ``P`` ranks in pipeline order, whatever the partition.

    Rank ``r`` cannot start before the first microbatch has run ``ratio`` of the
    work of the ranks before it (``A_r``, the forward share; with a full backward
    the gradient's way back adds the rest, so ``ratio = 1``), and then has
    ``m · t_r`` of work: makespan ≥ ``max_r (ratio · A_r + m · t_r)`` with
    ``Σ t_r = T``. Over every split of ``T`` (real-valued, so over every
    partition too) the least maximum equalises the terms, ``t_r ∝ q^r`` with
    ``q = 1 − ratio / m``:

    ``L = ratio · T / (1 − q^P)``  (→ ``m·T/P + (P − 1)·ratio·T/(2P)`` for large ``m``).
    """
    if num_ranks == 1 or ratio <= 0:
        return num_microbatches * total / num_ranks
    q = 1.0 - ratio / num_microbatches
    return ratio * total / (1.0 - q**num_ranks) if q > 0 else total * ratio


def _config_bound(evaluator: _Evaluator, config: Config) -> float:
    """A step-time bound that needs no partition (cached per configuration shape).

    The largest of: ``m · T / pp`` (with one stage per rank :func:`fill_bound`,
    the first microbatch must reach each rank; with several, the ranks' unavoidable
    idle shared over them, :meth:`~pipeplan.planner.bounds.LayerTimes.chunked_fill`),
    ``m ·`` the least possible heaviest rank (:func:`~pipeplan.planner.bounds.least_max_load`),
    and one microbatch's chain through every layer — plus the least gradient
    all-reduce. Per-layer times are the least over the recompute modes.
    """
    key = (config.pp, config.dp, config.micro_batch_size, config.num_microbatches, config.schedule,
           config.virtual_stages)
    cached = evaluator.bounds.get(key)
    if cached is not None:
        return cached
    times = evaluator.layer_times(config.micro_batch_size)
    work = times.work
    micro = config.num_microbatches
    split = config.schedule not in ("1f1b", "gpipe", "interleaved") and config.pp > 1
    shared = micro * work / config.pp
    if config.virtual_stages == 1 and config.pp > 1:
        with np.errstate(divide="ignore", invalid="ignore"):
            forward_share = np.where(times.total > 0, times.forward / times.total, 1.0)
        ratio = float(forward_share.min()) if split else 1.0
        shared = fill_bound(work, micro, config.pp, ratio)
    elif config.pp > 1:
        placement = _chunked_placement(config)
        assert placement is not None  # every chunked schedule of the space: interleaved, zb-v, adaptive
        shallowest = [placement.index(rank) for rank in range(config.pp)]
        shared = max(shared, times.chunked_fill(micro, shallowest, split=split))
    loads = times.total.copy()
    loads[0] += times.first_extra
    loads[-1] += times.last_extra
    rank_load = micro * least_max_load(loads, config.pp)
    bound = max(shared, rank_load, times.chain(split=split)) + evaluator.least_dp_comm(config)
    evaluator.bounds[key] = bound
    return bound


def _chunked_placement(config: Config) -> tuple[int, ...] | None:
    """Stage → rank of interleaved (``s mod P``) and zb-v (the V) without building the schedule."""
    if config.schedule == "interleaved" or config.chunked_adaptive:
        return fixed_pattern("interleaved", config.pp, config.virtual_stages)
    if config.schedule == "zb-v":
        return tuple(zb_v_placement(config.pp))
    return None


def space_lower_bound(evaluator: _Evaluator, configs: Sequence[Config], *, chunked: bool = True,
                      deadline: float = math.inf) -> float:
    """A step time no plan of these configurations beats.

    ``min over configs of max(partition-free bound, m · least slowest stage + all-reduce)``
    (see the module doc and docs/planner.md), over the configurations whose
    weights and optimizer state can fit (``max(static ÷ pp, largest layer) ≤ capacity``).
    With ``chunked=False`` only the one-stage-per-rank configurations count (the
    fill bound applies to them). Evaluated lazily in order of the cheap bound;
    past ``deadline`` only the partition-free bounds are used (still valid, looser).
    """
    candidates = [c for c in configs if chunked or c.virtual_stages == 1]
    candidates = [c for c in candidates
                  if evaluator.capacity is None or evaluator._static_bound(c) <= evaluator.capacity * (1 + 1e-9)]
    best = math.inf
    for bound, config in sorted(((_config_bound(evaluator, c), c) for c in candidates), key=lambda e: e[0]):
        if bound >= best:
            break
        sharper = evaluator.bottleneck_bound(config) if time.perf_counter() <= deadline else bound
        best = min(best, max(bound, sharper))
    return best


def _no_plan_fits(rejected: Sequence[Rejection], capacity: float, stats: SearchStats,
                  workload: Workload, capacity_note: str = "") -> PipeplanError:
    if not rejected:
        return InfeasiblePlanError(
            "no candidate could be evaluated"
        )
    known = [r for r in rejected if r.needed_bytes is not None]
    if not known:
        bounds = [r for r in rejected if r.at_least_bytes is not None]
        if bounds:
            closest = min(bounds, key=lambda r: r.at_least_bytes or math.inf)
            return InfeasiblePlanError(
                f"no plan fits {_gb(capacity)} per GPU{capacity_note}: weights and optimizer state alone need at least "
                f"{_gb(closest.at_least_bytes or 0)} per GPU even at pp={closest.config.pp} (use more GPUs, "
                "--optimizer distributed, or freeze modules)"
            )
        return InfeasiblePlanError(f"no plan fits: {rejected[0].reason}")
    closest = min(known, key=lambda r: r.needed_bytes or math.inf)
    c = closest.config
    return InfeasiblePlanError(
        f"no plan fits {_gb(capacity)} per GPU{capacity_note}; the smallest memory that fits is {_gb(closest.needed_bytes or 0)} "
        f"(pp={c.pp}, dp={c.dp}, {c.schedule_label}, micro-batch size {c.micro_batch_size}, "
        f"recompute {c.recompute}): {closest.reason}"
    )


# ------------------------------------------------------------------ baselines
def _megatron_default(evaluator: _Evaluator, best: Plan) -> Plan | None:
    """Even split, 1F1B, no recompute, the best plan's pp, dp, micro-batch size and m."""
    config = Config(best.pp, best.dp, best.micro_batch_size, best.num_microbatches, "1f1b", 1, "none")
    sizes = even_split(best.num_layers, best.pp)
    try:
        none: tuple[Recompute, ...] = tuple("none" for _ in range(best.pp))
        return _evaluate_fixed(evaluator, config, sizes, none)
    except PipeplanError:
        return None


def _one_knob(evaluator: _Evaluator, space: SearchSpace, best: Plan, baseline: Plan | None,
              deadline: float = math.inf) -> dict[str, Plan]:
    """The best fitting plan that changes one knob of the Megatron default (the knobs tried by ``deadline``)."""
    if baseline is None:
        return {}
    base = Config(baseline.pp, baseline.dp, baseline.micro_batch_size, baseline.num_microbatches, "1f1b", 1, "none")
    num_layers = best.num_layers
    trials: dict[str, list[tuple[Config, tuple[int, ...] | None]]] = {
        "partition": [(base, None)],
        "schedule": [
            (replace(base, schedule=name, virtual_stages=v), even_split(num_layers, base.pp * v))
            for name, v in space.schedule_shapes(base.pp, base.num_microbatches)
            if name != "1f1b" and not (name == "adaptive" and v > 1)  # its even split is not its own layout
        ],
        "recompute": [(replace(base, recompute=mode), even_split(num_layers, base.pp))
                      for mode in evaluator.workload.recompute_modes if mode != "none"],
        "micro_batch_size": [
            (replace(base, micro_batch_size=b, num_microbatches=space.global_batch // (base.dp * b)),
             even_split(num_layers, base.pp))
            for b in space.micro_batches_for(base.dp) if b != base.micro_batch_size
        ],
        "pp": [
            (Config(p, space.num_gpus // p, base.micro_batch_size,
                    space.global_batch // (space.num_gpus // p * base.micro_batch_size), "1f1b"),
             even_split(num_layers, p))
            for p in space.pipeline_degrees()
            if p != base.pp and space.global_batch % (space.num_gpus // p * base.micro_batch_size) == 0
        ],
    }
    out: dict[str, Plan] = {}
    for knob, options in trials.items():
        found: Plan | None = None
        for config, sizes in options:
            if time.perf_counter() > deadline:
                break
            try:
                if sizes is None:
                    layout = evaluator.partitioned(config)
                    if layout is None or isinstance(layout, Rejection):
                        continue
                    plan = evaluator.simulate(config, layout)
                else:
                    if config.pp > 1 and len(sizes) > num_layers:
                        continue
                    plan = _evaluate_fixed(evaluator, config, sizes, (config.recompute,) * len(sizes), "fast")
            except PipeplanError:
                continue
            if plan.fits and plan.step_time is not None and (found is None or plan.step_time < (found.step_time or 0)):
                found = plan
        if found is not None:
            out[knob] = found
    return out
