"""The bounds the search prunes with, per configuration, before any memory-constrained partition.

    from pipeplan.planner.pruning import SearchBounds
    bounds = SearchBounds(workload, memory, links, layouts)
    bounds.config_bound(config)       # needs no partition
    bounds.bottleneck_bound(config)   # m · the least slowest stage (one free partition)
    bounds.space_lower_bound(configs) # no plan of these configurations beats it

Configurations are visited in order of :meth:`SearchBounds.config_bound`
(``m · T / pp`` with the pipeline fill, ``m ·`` the least heaviest rank, one
microbatch's chain: :func:`~pipeplan.planner.bounds.fill_bound`,
:mod:`pipeplan.planner.bounds`); once that bound reaches the ``top``-th best step
time every later configuration is skipped at once, and ``m ·`` the least slowest
stage (:meth:`SearchBounds.bottleneck_bound`) rules out more before any
memory-constrained partition is solved. Every bound includes the least gradient
all-reduce. Times are in the workload's unit.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..schedules import schedule_info
from ..schedules.patterns import loop_placement
from .bounds import LayerTimes, fill_bound, least_max_load
from .layout import Layouts
from .links import Links
from .memory import MemoryModel
from .space import Config
from .step import rank_optimizer_ms
from .workload import Workload

__all__ = ["SearchBounds"]


class SearchBounds:
    """Step-time bounds of configurations of one workload and cluster (cached).

    Args:
        workload: per-layer costs.
        memory: bytes per parameter and the capacity.
        links: the data-parallel all-reduce.
        layouts: the partitions ignoring memory (for :meth:`bottleneck_bound`).
    """

    def __init__(self, workload: Workload, memory: MemoryModel, links: Links, layouts: Layouts) -> None:
        self.workload = workload
        self.memory = memory
        self.links = links
        self.layouts = layouts
        #: gradients are reduced while the backward runs (then no share of the reduction is certain to show)
        self.overlapped = False
        #: the least exposed data-parallel time of a configuration where the reduction overlaps (FSDP/HSDP, or
        #: an overlapped reduction without a pipeline), in profile units (the evaluator's)
        self.overlap_floor: Callable[[Config], float] | None = None
        #: where every rank reduces its gradients in one collective after its own last backward (FSDP behind a
        #: pipeline): a bound on ``max_r (its work + its reduction)``, in profile units (the evaluator's)
        self.tail_bound: Callable[[Config, LayerTimes], float] | None = None
        self._times: dict[int, LayerTimes] = {}
        self._bounds: dict[tuple[Any, ...], float] = {}
        self._rests: dict[tuple[Any, ...], tuple[float, float]] = {}  # configuration less its recompute → least dp + optimizer
        self._slowest: dict[tuple[int, int], float] = {}  # (micro-batch size, stages) → least slowest stage
        self._least_params: dict[tuple[int, int], float] = {}  # (micro-batch size, pp) → least max trainable

    def layer_times(self, micro_batch_size: int) -> LayerTimes:
        """Per-layer times at micro-batch size ``micro_batch_size``, the least over the workload's recompute modes (cached)."""
        times = self._times.get(micro_batch_size)
        if times is None:
            # a model spec's recompute never makes a layer's F, B or W faster (tests/test_cost_model.py checks
            # every preset), so its least is "none"; a measured workload may say otherwise: take the least
            modes = (self.workload.lightest_recompute,) if self.workload.spec is not None else self.workload.recompute_modes
            times = LayerTimes.of(self.workload.profile(micro_batch_size, mode) for mode in modes)
            self._times[micro_batch_size] = times
        return times

    def config_bound(self, config: Config) -> float:
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
        cached = self._bounds.get(key)
        if cached is not None:
            return cached
        times = self.layer_times(config.micro_batch_size)
        work = times.work
        microbatches = config.num_microbatches
        split = bool(schedule_info(config.schedule).split_backward) and config.pp > 1
        shared = microbatches * work / config.pp
        if config.virtual_stages == 1 and config.pp > 1:
            with np.errstate(divide="ignore", invalid="ignore"):
                forward_share = np.where(times.total > 0, times.forward / times.total, 1.0)
            ratio = float(forward_share.min()) if split else 1.0
            shared = fill_bound(work, microbatches, config.pp, ratio)
        elif config.pp > 1:
            placement = _chunked_placement(config)
            assert placement is not None  # every chunked schedule of the space: interleaved, zb-v, adaptive
            shallowest = [placement.index(rank) for rank in range(config.pp)]
            shared = max(shared, times.chunked_fill(microbatches, shallowest, split=split))
        loads = times.total.copy()
        loads[0] += times.first_extra
        loads[-1] += times.last_extra
        rank_load = microbatches * least_max_load(loads, config.pp)
        tail = 0.0 if self.tail_bound is None or config.pp == 1 else self.tail_bound(config, times)
        comm, optimizer = self._least_rest(config)
        bound = max(shared, rank_load, times.chain(split=split), tail) + comm + optimizer
        self._bounds[key] = bound
        return bound

    def bottleneck_bound(self, config: Config) -> float:
        """``m ·`` the least possible slowest stage (no memory, no recompute) plus the all-reduce.

        Any partition of ``config``, with any recompute, has a stage at least that
        slow, and a rank holds at least that stage.
        """
        key = (config.micro_batch_size, config.num_stages)
        slowest = self._slowest.get(key)
        if slowest is None:
            sizes = self.layouts.free_sizes(config.micro_batch_size, self.workload.lightest_recompute, config.num_stages)
            costs = self.workload.profile(config.micro_batch_size).stage_costs(sizes)
            slowest = self._slowest[key] = max(f + b for f, b in zip(costs.forward, costs.backward))
        comm, optimizer = self._least_rest(config)
        return config.num_microbatches * slowest + comm + optimizer

    def _least_rest(self, config: Config) -> tuple[float, float]:
        """:meth:`least_dp_comm` and :meth:`least_optimizer` (cached: neither depends on the recompute mode)."""
        key = (config.tp, config.pp, config.dp, config.dp_mode, config.micro_batch_size, config.num_microbatches,
               config.schedule, config.virtual_stages)
        rest = self._rests.get(key)
        if rest is None:
            rest = self._rests[key] = (self.least_dp_comm(config), self.least_optimizer(config))
        return rest

    def least_dp_comm(self, config: Config) -> float:
        """The all-reduce of the fewest gradients the fullest rank can hold.

        Some rank holds at least an even share of the gradients, and at least the
        :func:`~pipeplan.planner.bounds.least_max_load` of the layers' gradients
        (of the ``kP + 1`` largest layers, one rank holds ``k + 1``).
        """
        if config.dp == 1:
            return 0.0
        if self.memory.mode.gathers_per_layer or self.overlapped:
            # overlapped collectives: the evaluator's floor (exact without a pipeline; the reduction behind a
            # pipeline is in the tail bound instead)
            return 0.0 if self.overlap_floor is None else self.overlap_floor(config)
        grads = self._least_trainable(config) * self.memory.bytes_per_param(
            config.dp, config.pp).reduce
        return self.links.allreduce(config, grads) * self.memory.mode.reductions_per_step(config.num_microbatches)

    def least_optimizer(self, config: Config) -> float:
        """The optimizer step of the fewest trainable parameters the fullest rank can hold, in profile units.

        Some rank holds at least :func:`~pipeplan.planner.bounds.least_max_load` of
        the layers' trainable parameters, and the step waits for the slowest
        rank's optimizer (:func:`~pipeplan.planner.step.step_rest`).
        """
        params = self._least_trainable(config)
        step = self.memory.step_bytes(config.dp, config.pp)
        optimizer = rank_optimizer_ms(params, device=self.links.cluster.device, **step)  # type: ignore[arg-type]
        return optimizer * 1e-3 / self.workload.time_unit

    def _least_trainable(self, config: Config) -> float:
        """:func:`least_max_load` of :meth:`_own_trainable` over ``config.pp`` ranks (cached per micro-batch size and pp)."""
        key = (config.micro_batch_size, config.pp)
        least = self._least_params.get(key)
        if least is None:
            least = self._least_params[key] = least_max_load(self._own_trainable(config), config.pp)
        return least

    def _own_trainable(self, config: Config) -> np.ndarray:
        """Trainable parameters per layer, a tied copy's as 0 (it may share its table's rank)."""
        profile = self.workload.profile(config.micro_batch_size)
        return np.where(np.asarray(profile.tied_to) >= 0, 0.0, profile.trainable_params)

    def space_lower_bound(self, configs: Sequence[Config], *, chunked: bool = True,
                          deadline: float = math.inf) -> float:
        """A step time no plan of these configurations beats.

        ``min over configs of max(partition-free bound, m · least slowest stage) + all-reduce + optimizer``
        (see the module doc and docs/planner.md), over the configurations whose
        weights, optimizer state and one microbatch's activations can fit
        (:meth:`~pipeplan.planner.memory.MemoryModel.least_peak` ≤ capacity).
        With ``chunked=False`` only the one-stage-per-rank configurations count (the
        fill bound applies to them). Evaluated lazily in order of the cheap bound;
        past ``deadline`` (a ``time.process_time()``: the budget counts CPU seconds) only the partition-free bounds
        are used (still valid, looser).
        """
        candidates = [c for c in configs if chunked or c.virtual_stages == 1]
        candidates = [c for c in candidates if self.memory.fits(self.memory.least_peak(c))]
        best = math.inf
        for bound, config in sorted(((self.config_bound(c), c) for c in candidates), key=lambda e: e[0]):
            if bound >= best:
                break
            sharper = self.bottleneck_bound(config) if time.process_time() <= deadline else bound
            best = min(best, max(bound, sharper))
        return best


def _chunked_placement(config: Config) -> tuple[int, ...] | None:
    """Stage → rank of interleaved (``s mod P``) and zb-v (the V) without building the schedule."""
    if config.chunked_adaptive:
        return loop_placement(config.pp, config.virtual_stages)
    info = schedule_info(config.schedule)
    return info.placement(config.pp, config.virtual_stages) if info.layout != "one" else None
