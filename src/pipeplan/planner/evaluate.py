"""Simulate a layout and make a Plan: the schedule, the timeline, memory per rank and step time.

    from pipeplan.planner.evaluate import Evaluator, evaluate_layout
    plan = evaluate_layout(workload, cluster, config, (8, 8, 8, 8), memory_capacity=72e9)
    evaluator = Evaluator(workload, cluster, capacity=72e9)
    layout = evaluator.layouts.partitioned(config)    # a Layout, a Rejection or None
    plan = evaluator.simulate(config, layout)         # plan.step_time, plan.fits, plan.reason

An :class:`Evaluator` holds the pieces for one workload on one cluster (the
memory model, the links, the layouts, the search's bounds) with their caches
and counts. :meth:`Evaluator.simulate` builds the schedule (the fixed template,
cached; or the cost-aware ``adaptive`` order under each rank's own activation
budget), simulates it with the links' messages, reads each rank's activation
peak off the timeline, and adds the rest of the step (:meth:`Evaluator.rest`,
:mod:`pipeplan.planner.step`): the exposed part of the data-parallel gradient
reduction and the optimizer step, so ``step_time = pipeline_time +
dp_exposed_time + optimizer_time``. The plan does not fit when a rank's peak
passes the capacity; its ``reason`` says by how much.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Literal

import numpy as np

from ..costs import CommModel, StageCosts
from ..errors import InfeasiblePlanError
from ..partition.steptime import simulate_partition
from ..plan import Plan, Recompute, recompute_rank
from ..schedule import Schedule
from ..schedules import build_schedule, schedule_info
from ..simulate import simulate
from ..timeline import Timeline
from .backwards import _gradient_time, _gradient_work
from .bounds import least_max_load, step_time_lower_bound
from .. import data_parallel
from ..hardware import Link
from .cluster import Cluster, allreduce_ms, ring_pass_ms
from .layout import Layout, Layouts
from .links import Links
from ..units import format_gib
from .memory import MemoryModel, OptimizerBytes
from .pruning import SearchBounds
from .records import SearchStats
from .space import Config
from .step import (GradientSync, RankRest, StepRest, bucket_calls, exposed_reduction_ms, fsdp_exposed_ms,
                   gradient_sync, overlap_window, rank_optimizer_ms, reduction_ms, step_rest)
from .workload import Workload
from .engine_costs import EngineCosts, PipelineEngineCosts, autograd_nodes
from ..engines.record import grad_reduce_dtype
from ..models.tensor_counts import layer_tensor_counts

__all__ = ["Evaluator", "evaluate_layout"]

#: adaptive may hold at most this many times its template's peak activations (and never more than the budget)
_ADAPTIVE_HEADROOM = 2.0


class Evaluator:
    """Layouts, bounds and simulations for one workload and cluster, with caches.

    Args:
        workload: per-layer costs per micro-batch size and recompute mode.
        cluster: GPUs and links.
        capacity: bytes per GPU a plan may use; ``None``: no limit.
        optimizer: ``"adam"``, ``"distributed"`` or bytes per parameter.
        send_mode: ``"eager"``, ``"rendezvous"`` or ``"serialized"`` messages
            (:mod:`pipeplan.planner.links`).
        rank_capacity: how the partitioner shares a rank's capacity over its
            stages (:class:`~pipeplan.planner.layout.Layouts`).
        dp_mode: the data-parallel mode's name (:mod:`pipeplan.data_parallel`).
        stats: the counts to add to (default new ones).
        shapes: a dict for the schedule templates, shared between evaluators.
        sync: how gradients are reduced over data parallel, a
            :class:`~pipeplan.planner.step.GradientSync` or a preset name
            (default ``"megatron"``: no overlap, Megatron-LM's default).
        hooks: the engine's host time per trainable parameter tensor, µs:
            ``(each microbatch's backward, each optimizer step)``
            (:mod:`pipeplan.planner.engine_costs`: DeepSpeed's hooks); each layer's
            backward lasts at least its hooks' time, the optimizer step at least the
            rank's step hooks'. Needs a spec (tensor counts); ``None``: none.
        pipeline: what the engine's pipeline runtime adds to each stage when ``pp > 1``
            (:meth:`~pipeplan.planner.engine_costs.EngineCosts.pipeline_for`); ``None``: none.
        engine: the engine the model runs in (``None``: Megatron-LM's knobs), for its loss's
            memory (:data:`~pipeplan.planner.memory.LOSS_LOGIT_COPIES`).
        reduce_bytes: bytes per gradient element of the data-parallel reduction and of the
            replicated gradient buffer where the engine pins it (``--grad-reduce-dtype``:
            :attr:`~pipeplan.planner.engine_costs.EngineCosts.reduce_bytes`); ``None``: the mode's own.
        compiled_loss: torchtitan compiles its loss with the model (``--compile on``): its loss's
            memory (:data:`~pipeplan.planner.memory.COMPILED_LOSS_COPIES`).

    Attributes:
        stats: what was solved, simulated and reused.
        memory, links, layouts, bounds: the pieces, sharing ``stats``.
    """

    def __init__(self, workload: Workload, cluster: Cluster, capacity: float | None = None,
                 optimizer: str | float = "adam", send_mode: str = "eager", *,
                 rank_capacity: Literal["exact", "even"] = "even",
                 sync: GradientSync | str = "megatron", dp_mode: str = data_parallel.REPLICATED,
                 stats: SearchStats | None = None, shapes: dict[str, dict[tuple[Any, ...], Any]] | None = None,
                 hooks: tuple[float, float] | None = None, pipeline: PipelineEngineCosts | None = None,
                 engine: str | None = None, reduce_bytes: float | None = None, compiled_loss: bool = False) -> None:
        hooked = hooks is not None and any(hooks) and workload.spec is not None
        self.tensors = layer_tensor_counts(workload.spec) if hooked else []  # trainable tensors per layer
        self.step_hook_ms = 0.0
        if hooks is not None and self.tensors:
            backward_us, step_us = hooks
            workload = workload.with_backward_floor([backward_us * 1e-3 * n for n in self.tensors])
            self.step_hook_ms = step_us * 1e-3
        self.workload = workload
        self.cluster = cluster
        self.capacity = capacity
        self.dp_mode = dp_mode
        self.mode = data_parallel.get(dp_mode)
        self.tp = workload.tensor_parallel
        self.stats = SearchStats() if stats is None else stats
        self.sync = gradient_sync(sync)
        if self.mode.gathers_per_layer:
            # FSDP2 prefetches each layer's gather; behind a pipeline (torch.distributed.pipelining) a stage
            # reduce-scatters its gradients once, after its last microbatch's backward: one bucket per rank,
            # exposed from the rank's own end (a rank that ends early hides it in the drain)
            # (an engine's exposed reduce-scatters keep its sync's name: DeepSpeed's ZeRO-3 without overlap_comm)
            self.sync = GradientSync(dp_mode if self.sync.overlap_scatter else self.sync.name,
                                     overlap_grad_reduce=True, bucket_bytes=math.inf,
                                     bucket_first_stage_only=False, overlap_param_gather=True,
                                     overlap_scatter=self.sync.overlap_scatter, buffer_bytes=self.sync.buffer_bytes,
                                     gather_ahead=self.sync.gather_ahead)
        self.memory = MemoryModel(workload, optimizer, capacity, dp_mode, cluster.gpus_per_node, engine,
                                  reduce_bytes=reduce_bytes, compiled_loss=compiled_loss)
        self.memory.engine_buffers(self.sync.buffer_bytes, self.sync.gather_ahead)
        self.sharded = self.mode.shards_state or optimizer == "distributed"
        self.links = Links(workload, cluster, send_mode, distributed=self.sharded)
        self.layouts = Layouts(workload, self.memory, self.links, self.stats, rank_capacity, shapes)
        self.layouts.pipeline = pipeline
        self.bounds = SearchBounds(workload, self.memory, self.links, self.layouts)
        self.bounds.overlapped = self.sync.overlap_grad_reduce
        self.bounds.overlap_floor = self._overlap_floor
        self.bounds.tail_bound = self._tail_bound
        self._plans: dict[tuple[Any, ...], Plan] = {}
        self._held: dict[tuple[Any, ...], list[float]] = {}
        self._walk_counts: tuple[list[int], list[int]] | None = None  # DDP's walk: tensors and nodes per layer

    def lower_bound(self, config: Config, layout: Layout) -> float:
        """A step time no order of ``layout``'s actions beats, the rest of the step included.

        The pipeline's bound plus the least the rest can add whatever the
        timing (:func:`~pipeplan.planner.step.step_rest` without a makespan).
        """
        split = bool(schedule_info(config.schedule).split_backward) and config.pp > 1
        pipeline = step_time_lower_bound(layout.costs, layout.boundary, layout.placement,
                                         config.num_microbatches, split=split)
        return pipeline + self.rest(config, layout).total * self._per_ms

    @property
    def _per_ms(self) -> float:
        """Profile time units per millisecond."""
        return 1e-3 / self.workload.time_unit

    def rest(self, config: Config, layout: Layout, timeline: Timeline | None = None) -> StepRest:
        """What the step adds after the pipeline of ``layout``, in **milliseconds** (:mod:`pipeplan.planner.step`).

        Per pipeline rank: its gradient collective over ``dp`` (all-reduce, or
        reduce-scatter with the distributed optimizer, at the data-parallel
        link's all-reduce rate), the part that stays exposed (all of it without
        overlap; with :attr:`sync` overlapping, what the rank's last gradient
        work in ``timeline`` cannot hide), the distributed optimizer's parameter
        all-gather, and its Adam step on the device. Without ``timeline`` (a
        bound) an overlapped reduction is assumed hidden but for its last bucket.
        """
        profile = self.workload.profile(config.micro_batch_size)
        per = self.memory.bytes_per_param(config.dp, config.pp)
        shards = self.memory.shards(config.dp, config.pp)
        sharded = self.sharded
        dp_link = self.cluster.data_parallel_link(config.pp, config.dp)
        trainable = np.asarray(profile.trainable_params, dtype=float)
        bounds = np.concatenate([[0], np.cumsum(layout.sizes)])
        stage_params = [float(trainable[bounds[s]:bounds[s + 1]].sum()) for s in range(len(layout.sizes))]
        to_ms = 1e3 * self.workload.time_unit
        largest = float(trainable.max()) if len(trainable) else 0.0
        gather_bucket = (largest * per.reduce if self.mode.gathers_per_layer
                         else self.sync.bucket(config.dp, per.reduce))  # the parameter gather buckets like rank 0
        step = self.memory.step_bytes(config.dp, config.pp)
        held = self._held_trainable(config.micro_batch_size, layout)
        overlap = self.sync.overlaps(config.pp)
        ranks = []
        for rank in range(len(layout.static)):
            stages = [s for s, r in enumerate(layout.placement) if r == rank]
            params = held[rank]
            grads = params * per.reduce
            bucket = self.sync.bucket(config.dp, per.reduce, pipeline_rank=rank)
            reduction = self._bucketed_ms(dp_link, grads, bucket, config) * self._reductions(config)
            last = self._reduction_ms(dp_link, min(bucket, grads), config)
            end = 0.0
            exposed = reduction
            if overlap:
                exposed = last
                if timeline is not None:
                    work = _gradient_work(timeline, rank, {s: stage_params[s] * per.reduce for s in stages}, to_ms)
                    end = max((finish for _, finish, _ in work), default=0.0)
                    window = overlap_window(work, bucket)
                    if self._reductions(config) > 1:  # ZeRO-2: each microbatch's backward hides its own
                        window += _gradient_time(timeline, rank, set(stages), to_ms) - sum(
                            finish - start for start, finish, _ in work)
                    exposed = exposed_reduction_ms(reduction, window_ms=window, last_bucket_ms=last)
            gather = ring_pass_ms(self._shard_link(config), params * per.gather, shards) if sharded else 0.0
            gather_exposed = gather
            if sharded and self.sync.overlap_param_gather and params > 0:
                share = min(1.0, gather_bucket / (params * per.reduce)) if per.reduce else 1.0
                gather_exposed = ring_pass_ms(self._shard_link(config), share * params * per.gather, shards)
            if self.memory.unsharded_layers(config.pp):  # FSDP without a pipeline: per layer, every microbatch
                reduction, exposed, gather, gather_exposed, _ = self._fsdp_per_microbatch(config, layout, per, dp_link)
                end = 0.0 if timeline is None else float(timeline.makespan) * to_ms  # exposed after the compute
            optimizer = rank_optimizer_ms(params, device=self.cluster.device, **step)  # type: ignore[arg-type]
            if self.step_hook_ms:  # the engine's per-tensor step on the host, beside the fused step on the GPU
                tensors = sum(self.tensors[i] for s in stages for i in range(bounds[s], bounds[s + 1]))
                optimizer = max(optimizer, self.step_hook_ms * tensors)
            walk = self._walk_ms(config, [i for s in stages for i in range(bounds[s], bounds[s + 1])])
            ranks.append(RankRest(end, reduction, exposed, gather, gather_exposed, optimizer, walk))
        makespan = None if timeline is None else float(timeline.makespan) * to_ms
        return step_rest(ranks, makespan, overlap_grad_reduce=overlap)

    def _bucketed_ms(self, dp_link: Link, num_bytes: float, bucket: float, config: Config) -> float:
        """The gradient collective of ``num_bytes``, ms; with :attr:`~pipeplan.planner.step.GradientSync.bucket_calls`
        each bucket is its own call, paying the collective's latency (the time of ``0`` bytes) once more per bucket."""
        total = self._reduction_ms(dp_link, num_bytes, config)
        if not self.sync.bucket_calls:
            return total
        return total + (bucket_calls(num_bytes, bucket) - 1) * self._reduction_ms(dp_link, 0.0, config)

    def _walk_ms(self, config: Config, layers: Sequence[int]) -> float:
        """The host's graph walk before a rank's last backward over its ``layers``, ms (DDP's
        ``find_unused_parameters``: :attr:`~pipeplan.planner.step.GradientSync.walk_us`); 0 without data
        parallelism, without a walk or without a spec to count nodes on."""
        per_tensor, per_node = self.sync.walk_us
        if config.dp == 1 or not (per_tensor or per_node) or self.workload.spec is None:
            return 0.0
        if self._walk_counts is None:
            self._walk_counts = (layer_tensor_counts(self.workload.spec), autograd_nodes(self.workload.spec))
        tensors, nodes = self._walk_counts
        return 1e-3 * sum(per_tensor * tensors[i] + per_node * nodes[i] for i in layers)

    def _held_trainable(self, micro_batch_size: int, layout: Layout) -> list[float]:
        """Per rank, the trainable parameters it holds, a tied table held twice (embedding and head) once (cached)."""
        key = (micro_batch_size, layout.sizes, layout.placement)
        held = self._held.get(key)
        if held is None:
            profile = self.workload.profile(micro_batch_size)
            bounds = np.concatenate([[0], np.cumsum(layout.sizes)])
            held = self._held[key] = [
                profile.held_params(i for s, r in enumerate(layout.placement) if r == rank
                                    for i in range(bounds[s], bounds[s + 1]))[1]
                for rank in range(len(layout.static))]
        return held

    def _reductions(self, config: Config) -> int:
        """Gradient collectives per step (:meth:`~pipeplan.data_parallel.DataParallelMode.reductions_per_step`)."""
        return self.mode.reductions_per_step(config.num_microbatches)

    def _shard_link(self, config: Config) -> Link:
        """The link a shard group's collectives run on: its ``shards`` GPUs ``pp`` apart (HSDP: inside a node)."""
        return self.cluster.collective_link(self.memory.shards(config.dp, config.pp), config.pp)

    def _reduction_ms(self, dp_link: Link, num_bytes: float, config: Config) -> float:
        """The gradient collective of ``num_bytes`` per rank, ms: an all-reduce (DDP), a reduce-scatter
        (sharded modes), HSDP's reduce-scatter in the node and all-reduce of the shard across nodes."""
        if self.mode.shards_within_node:
            shards = self.memory.shards(config.dp, config.pp)
            replicas = config.dp // shards  # one GPU of each node's shard group, shards · pp apart
            return (ring_pass_ms(self._shard_link(config), num_bytes, shards)
                    + allreduce_ms(self.cluster.collective_link(replicas, shards * config.pp), num_bytes / shards,
                                   replicas))
        return reduction_ms(dp_link, num_bytes, config.dp, distributed=self.sharded)

    def _overlap_floor(self, config: Config) -> float:
        """The least exposed data-parallel time of ``config`` whatever its partition and order, in profile units.

        Without a pipeline it is fixed by the profile, and this is it (the least
        over the recompute modes): FSDP's per-layer exposure
        (:meth:`_fsdp_per_microbatch`), or an overlapped reduction behind the last
        microbatch's backward (:meth:`_single_rank_exposed`). With a pipeline,
        for FSDP/HSDP: the rank holding the largest layer gathers at least that
        layer before its first forward.
        """
        per = self.memory.bytes_per_param(config.dp, config.pp)
        dp_link = self.cluster.data_parallel_link(config.pp, config.dp)
        if self.memory.unsharded_layers(config.pp):
            exposed = min(self._fsdp_per_microbatch(config, None, per, dp_link, mode)[1]
                          for mode in self.workload.recompute_modes)
        elif config.pp == 1:
            exposed = min(self._single_rank_exposed(config, mode, per, dp_link) for mode in self.workload.recompute_modes)
        elif self.mode.gathers_per_layer:
            trainable = self.workload.profile(config.micro_batch_size).trainable_params
            largest = max(trainable, default=0.0)
            shards = self.memory.shards(config.dp, config.pp)
            exposed = ring_pass_ms(self._shard_link(config), largest * per.gather, shards) if largest > 0 else 0.0
        elif self.sharded:
            # the parameter gather of the rank with the most parameters: at least its first bucket shows
            # (all of it without --overlap-param-gather)
            profile = self.workload.profile(config.micro_batch_size)
            held = least_max_load(np.where(np.asarray(profile.tied_to) >= 0, 0.0, profile.trainable_params),
                                  config.pp)
            if self.sync.overlap_param_gather:
                held = min(held, self.sync.bucket(config.dp, per.reduce) / per.reduce)
            exposed = ring_pass_ms(dp_link, held * per.gather, self.memory.shards(config.dp, config.pp))
        else:
            exposed = 0.0
        return exposed * self._per_ms

    def _tail_bound(self, config: Config, times: Any) -> float:
        """A bound on ``max_r (m · work_r + reduction_r)`` over every split of the layers, in profile units.

        Where a rank reduces all its gradients in one collective after its own
        last backward, its step lasts at least its work plus that reduction
        (``rate``: the reduction's time per byte, latency left out). FSDP behind a
        pipeline does so on every rank: :func:`~pipeplan.planner.bounds.least_max_load`
        of ``w_l = m · t_l + rate · g_l``. Megatron-LM buckets only the first
        pipeline rank (the others reduce in one bucket): with ``A = Σ m · t_l``,
        ``R = Σ rate · g_l`` and ``ρ = max_l rate · g_l / (m · t_l)``, whatever rank
        0 holds (work ``x``, at most ``ρx`` of the reduction), the largest rank is at
        least ``max(x, (A + R − ρx) / pp)`` ≥ ``(A + R) / (pp + ρ)``.
        """
        if not self.sync.overlap_grad_reduce or self.sync.bucket(config.dp, 1.0, pipeline_rank=1) != math.inf:
            return 0.0
        per = self.memory.bytes_per_param(config.dp, config.pp)
        dp_link = self.cluster.data_parallel_link(config.pp, config.dp)
        rate = (self._reduction_ms(dp_link, 2e9, config) - self._reduction_ms(dp_link, 1e9, config)) / 1e9
        profile = self.workload.profile(config.micro_batch_size)
        grads = np.where(np.asarray(profile.tied_to) >= 0, 0.0, profile.trainable_params) * per.reduce
        work = config.num_microbatches * np.asarray(times.total, dtype=float)
        reduce = rate * self._per_ms * grads
        if not self.sync.bucket_first_stage_only:
            return least_max_load(work + reduce, config.pp)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratios = np.where(work > 0, reduce / work, np.where(reduce > 0, np.inf, 0.0))
        rho = float(ratios.max()) if ratios.size else 0.0
        return 0.0 if not math.isfinite(rho) else float(work.sum() + reduce.sum()) / (config.pp + rho)

    def _single_rank_exposed(self, config: Config, mode: Recompute, per: OptimizerBytes, dp_link: Link) -> float:
        """Without a pipeline, the exposed part of an overlapped reduction (ms): the last microbatch's backward
        produces the gradients evenly, and its buckets reduce behind it (:func:`~pipeplan.planner.step.overlap_window`);
        plus the exposed share of the parameter gather. Exactly what :meth:`rest` charges such a plan."""
        profile = self.workload.profile(config.micro_batch_size, mode)
        grads = profile.held_params()[1] * per.reduce
        if grads <= 0:
            return 0.0
        count = self._reductions(config)
        bucket = self.sync.bucket(config.dp, per.reduce, pipeline_rank=0)
        total = self._bucketed_ms(dp_link, grads, bucket, config) * count
        last = self._reduction_ms(dp_link, min(bucket, grads), config)
        # the one stage's backward as simulated: its layers and the first/last extras (LayerProfile.stage_costs)
        duration = float(profile.stage_costs((profile.num_layers,)).backward[0]) * 1e3 * self.workload.time_unit
        window = overlap_window([(0.0, duration, grads)], bucket) + (count - 1) * duration
        exposed = exposed_reduction_ms(total, window_ms=window, last_bucket_ms=last)
        exposed += self._walk_ms(config, range(profile.num_layers))
        if self.sharded and self.sync.overlap_param_gather:
            params = profile.held_params()[1]
            share = min(1.0, self.sync.bucket(config.dp, per.reduce) / (params * per.reduce))
            exposed += ring_pass_ms(self._shard_link(config), share * params * per.gather,
                                    self.memory.shards(config.dp, config.pp))
        elif self.sharded:
            exposed += ring_pass_ms(self._shard_link(config), profile.held_params()[1] * per.gather,
                                    self.memory.shards(config.dp, config.pp))
        return exposed

    def _fsdp_per_microbatch(self, config: Config, layout: Layout | None, per: OptimizerBytes,
                             dp_link: Link, mode: Recompute | None = None) -> tuple[float, float, float, float, float]:
        """FSDP/HSDP at ``pp = 1``: the per-layer gathers and reduce-scatters of every microbatch, ms.

        Returns ``(reduction, exposed, gather, gather_exposed, end)`` for the one
        rank: the whole step's reduce-scatters, the exposed part of all of it
        (:func:`~pipeplan.planner.step.fsdp_exposed_ms` per microbatch), the
        gathers, 0 (counted in ``exposed``) and 0 (the caller sets ``end``: the
        exposed time adds to the whole compute).
        """
        if mode is None:
            assert layout is not None
            mode = layout.recompute[0]
        profile = self.workload.profile(config.micro_batch_size, mode)
        to_ms = 1e3 * self.workload.time_unit
        shards = self.memory.shards(config.dp, config.pp)
        link = self._shard_link(config)
        trainable = np.asarray(profile.trainable_params, dtype=float)
        params = np.asarray(profile.params, dtype=float)
        gathers = [ring_pass_ms(link, p * 2.0, shards) if p > 0 else 0.0 for p in params]
        scatters = [self._reduction_ms(dp_link, t * per.reduce, config) if t > 0 else 0.0 for t in trainable]
        forward = [f * to_ms for f in profile.forward]
        backward = [b * to_ms for b in profile.backward]
        m = config.num_microbatches
        again = self.workload.reshard_after_forward  # False: gathered once, kept from the forward to the backward
        if self.sync.overlap_scatter:
            exposed = m * fsdp_exposed_ms(forward, backward, gathers, scatters, backward_gathers=again)
        else:  # each reduce-scatter on the compute stream (DeepSpeed ZeRO-3 without overlap_comm): all exposed
            exposed = m * (fsdp_exposed_ms(forward, backward, gathers, [0.0] * len(scatters), backward_gathers=again)
                           + sum(scatters))
        return m * sum(scatters), exposed, (2 if again else 1) * m * sum(gathers), 0.0, 0.0

    def _recompute_by_module(self, layout: Layout) -> dict[str, Recompute]:
        """Each recompute unit's mode (its layers' heaviest, where stages relaxed it apart), by module name."""
        spec = self.workload.spec
        if spec is None:
            return {}
        pinned = self.workload.recompute_by_module
        if pinned is not None:  # a mode per module pinned (Workload.with_recompute): each unit's own
            return {member: pinned[member] for unit in spec.recompute_units() for member in unit}
        layer_mode = [mode for size, mode in zip(layout.sizes, layout.recompute) for _ in range(size)]
        names = self.workload.profile(self.workload.smallest_micro_batch).names
        out: dict[str, Recompute] = {}
        for unit in spec.recompute_units():
            label = "+".join(unit)
            modes = [layer_mode[i] for i, name in enumerate(names) if name.rsplit(".", 1)[0] == label]
            mode = max(modes, key=recompute_rank) if modes else "none"
            for member in unit:
                out[member] = mode
        return out

    def evaluate(self, config: Config, sizes: tuple[int, ...], recompute: tuple[Recompute, ...],
                 effort: str | None = None) -> Plan:
        """Simulate given layers per stage and recompute (a baseline, a user's own split)."""
        return self.simulate(config, self.layouts.fixed(config, sizes, recompute), effort)

    def adaptive_inputs(self, config: Config, layout: Layout, comm: CommModel) -> tuple[StageCosts, float | None]:
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
            raise InfeasiblePlanError(f"a rank's weights and optimizer state alone exceed {format_gib(self.capacity)}")
        scale = [1.0 / budgets[rank] for rank in layout.placement]
        scaled = costs.replaced(activation_bytes=[a * k for a, k in zip(costs.activation_bytes, scale)],
                                weight_stash_bytes=[a * k for a, k in zip(costs.weight_stash_bytes, scale)])
        stand_in = schedule_info(config.schedule).fixed_template(config.virtual_stages)
        template = self.layouts.template(replace(config, schedule=stand_in))
        peak = float(max(simulate(template, scaled, comm, validate=False).peak_bytes))
        return scaled, min(1.0, _ADAPTIVE_HEADROOM * peak)

    def _simulate(self, schedule: Schedule, config: Config, layout: Layout, comm: CommModel) -> Timeline:
        """Simulate ``schedule`` on ``layout`` (counted)."""
        self.stats.simulated += 1
        return simulate_partition(layout.costs, layout.sizes, schedule, config.num_microbatches, comm=comm)

    def _adaptive(self, config: Config, layout: Layout, comm: CommModel, effort: str) -> tuple[Schedule, float | None]:
        """The adaptive order under each rank's own activation limit (:meth:`adaptive_inputs`), and that limit's share."""
        costs, limit = self.adaptive_inputs(config, layout, comm)
        schedule = build_schedule(config.schedule, num_stages=config.num_stages, num_microbatches=config.num_microbatches,
                                  costs=costs, comm=comm, memory_limit=limit, placement=layout.placement,
                                  effort=effort)
        return schedule, limit

    def simulate(self, config: Config, layout: Layout, effort: str | None = None) -> Plan:
        """Build, simulate and measure one candidate (cached by its layout).

        ``effort`` is the adaptive generator's (default ``"fast"`` over chunks,
        ``"full"`` with one stage per rank; the baselines use ``"fast"``).
        """
        if effort is None:
            effort = "fast" if config.chunked_adaptive else "full"
        info = schedule_info(config.schedule)
        key = (config.pp, config.dp, config.micro_batch_size, config.num_microbatches, config.schedule,
               config.virtual_stages, layout.sizes, layout.recompute, effort if info.cost_aware else None)
        cached = self._plans.get(key)
        if cached is not None:
            self.stats.cache_hits += 1
            return cached
        comm = self.links.comm(layout.boundary)  # boundary "bytes" are message times: latency + bytes / bandwidth
        options: dict[str, Any] = {}
        if info.cost_aware and config.pp > 1:
            schedule, share = self._adaptive(config, layout, comm, effort)
            if share is not None and self.capacity is not None:  # each rank's limit in bytes
                options = {"memory_limits": [share * (self.capacity - rank.total) for rank in layout.static]}
            timeline = self._simulate(schedule, config, layout, comm)
        else:
            schedule = self.layouts.template(config if config.pp > 1 else replace(config, schedule="1f1b"))
            # a fixed order on the same layers and messages gives the same timeline whatever the
            # data-parallel mode, but for what the engine's pipeline runtime adds to the stages (DeepSpeed's
            # accumulation differs by mode): shared by the evaluators of this workload
            shared = self.workload.memo.setdefault("timelines", {})
            shape = (config.micro_batch_size, schedule.name, config.num_stages, config.num_microbatches,
                     tuple(schedule.placement), layout.sizes, layout.recompute, layout.boundary,
                     self.layouts.pipeline_key(config))
            timeline = shared.get(shape)
            if timeline is None:
                timeline = shared[shape] = self._simulate(schedule, config, layout, comm)
            else:
                self.stats.cache_hits += 1
        peaks = timeline.peak_bytes
        memory = tuple(replace(static, activations=static.activations + float(peaks[r]))  # the transients too
                       for r, static in enumerate(layout.static))
        rest = self.rest(config, layout, timeline)
        per_ms = self._per_ms
        fits, reason = True, ""
        if self.capacity is not None:
            totals = [rank.total for rank in memory]
            worst = int(np.argmax(totals))
            if not self.memory.fits(totals[worst]):
                fits = False
                reason = (f"rank {worst} peaks at {format_gib(totals[worst])}, {format_gib(totals[worst] - self.capacity)} over "
                          f"the capacity of {format_gib(self.capacity)}")
        profile = self.workload.profile(config.micro_batch_size)
        plan = Plan(
            pp=config.pp,
            dp=config.dp,
            layers_per_stage=layout.sizes,
            placement=tuple(schedule.placement),
            schedule=config.schedule if config.pp > 1 else "1f1b",
            schedule_options=options | self.layouts.schedule_options(config),
            micro_batch_size=config.micro_batch_size,
            num_microbatches=config.num_microbatches,
            recompute=layout.recompute,
            step_time=float(timeline.makespan) + rest.total * per_ms,
            pipeline_time=float(timeline.makespan),
            dp_comm_time=rest.dp_comm * per_ms,
            dp_exposed_time=rest.dp_exposed * per_ms,
            optimizer_time=rest.optimizer * per_ms,
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
            tp=self.tp,
            sequence_parallel=self.tp > 1 and self.workload.sequence_parallel,
            tp_comm_overlap=self.workload.tp_comm_overlap,
            dp_mode=self.dp_mode if config.dp > 1 else data_parallel.REPLICATED,
            recompute_by_module=self._recompute_by_module(layout),
            grad_sync=self.sync.name,
            grad_reduce_dtype=grad_reduce_dtype(self.memory.reduce_bytes),
        )
        self._plans[key] = plan
        return plan


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
    sync: GradientSync | str = "megatron",
    engine_costs: EngineCosts | None = None,
    engine: str | None = None,
    compiled_loss: bool = False,
) -> Plan:
    """Simulate one given layout (a baseline, a user's own split) as the search would.

    ``config.tp`` and ``config.dp_mode`` are honoured as in the search: the
    workload and cluster one GPU of a ``tp`` group sees, the mode's memory and
    communication. ``engine_costs`` (DeepSpeed's knobs: :mod:`pipeplan.planner.engine_costs`)
    replaces ``sync`` for the modes it prices and adds its host hooks and, with ``pp > 1``, its pipeline runtime's costs.
    ``engine`` (default ``engine_costs``' engine, else Megatron-LM's knobs) prices its loss's memory;
    ``compiled_loss``: torchtitan's loss compiled with the model (``--compile on``,
    :class:`~pipeplan.planner.memory.MemoryModel`).
    """
    hooks, pipeline, reduce_bytes = None, None, None
    if engine_costs is not None:
        reduce_bytes = engine_costs.reduce_bytes
        sync, hooks = engine_costs.sync_for(config.dp_mode, sync), engine_costs.hooks_for(config.dp_mode)
        pipeline = engine_costs.pipeline_for(config.dp_mode)
    evaluator = Evaluator(workload.with_tensor_parallel(config.tp), cluster.for_tensor_parallel(config.tp),
                          memory_capacity, optimizer, send_mode, sync=sync, dp_mode=config.dp_mode, hooks=hooks,
                          pipeline=pipeline, reduce_bytes=reduce_bytes,
                          engine=engine if engine is not None or engine_costs is None else engine_costs.engine,
                          compiled_loss=compiled_loss)
    return evaluator.evaluate(config, tuple(layers_per_stage),
                              tuple(recompute) if recompute is not None else (config.recompute,) * config.num_stages)
