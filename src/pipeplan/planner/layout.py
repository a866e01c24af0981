"""The partition and chunk layouts of a configuration: which layers on which stage, and what that costs.

    from pipeplan.planner.layout import Layouts
    layouts = Layouts(workload, memory, links, SearchStats())
    layout = layouts.partitioned(config)     # a Layout, a Rejection, or None
    layout.sizes, layout.placement, layout.recompute, layout.costs

A :class:`Layout` is everything a simulation needs: layers per stage, stage →
rank, recompute per stage, the stage costs, the message time of each boundary,
each rank's static memory and its activations bounded by the schedule's
in-flight counts. :meth:`Layouts.partitioned` finds the layout the search
evaluates for a configuration:

1. the **exact** min-max partition of the layers into ``pp · v`` stages
   (:func:`pipeplan.partition_layers`) under the memory the schedule's in-flight
   counts imply, per rank where a rank holds several stages; for ``adaptive``
   over chunks it instead cuts chunks in a loop whose *rank* loads are even
   (:func:`pipeplan.partition.placement.place_chunks`), which the cost-aware
   order needs;
2. **recompute relaxed** stage by stage: a stage solved under ``"full"`` or
   ``"selective"`` goes back to the cheapest mode whose rank still fits;
3. for interleaved and zb-v (a loop or a V of fixed chunks), the **rank-balanced**
   choice: of the min-max partition, the even split and the cut with the least
   busy busiest rank, the fastest simulated step among those no busier than both
   of the first two (:meth:`Layouts._rank_balanced`).

:meth:`Layouts.given` is the layout of given layers per stage instead
(``plan --partition``), recompute relaxed the same way.

Layouts, partitions, schedule templates and in-flight counts are cached.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from ..costs import StageCosts
from ..errors import InfeasiblePlanError, PipeplanError
from ..partition import PartitionOptions, even_split, inflight_per_stage, partition_layers, rank_totals
from ..partition.placement import Pattern, fixed_pattern, place_chunks
from ..plan import RankMemory, Recompute
from ..schedule import Schedule
from ..schedules import build_schedule, schedule_info, schedule_options
from ..schedules.inflight import inflight_of_built
from ..schedules.patterns import loop_placement
from ..simulate import simulate
from .links import Links
from ..units import format_gib
from .memory import MemoryModel
from .records import Rejection, SearchStats
from .space import Config
from .workload import Workload

if TYPE_CHECKING:
    from .engine_costs import PipelineEngineCosts

__all__ = ["Layout", "Layouts"]


@dataclass(frozen=True)
class Layout:
    """A partition with its costs: everything the simulation needs.

    Attributes:
        sizes: layers per stage.
        placement: each stage's rank.
        recompute: each stage's recompute mode.
        costs: per stage, per microbatch (profile time units, bytes).
        boundary: message time across each stage boundary (0 within a rank).
        static: per rank, weights, gradients and optimizer state (activations 0).
        activation_bound: per rank, the bytes of activations its stages' in-flight
            counts imply (an upper bound on the simulated peak).
    """

    sizes: tuple[int, ...]
    placement: tuple[int, ...]
    recompute: tuple[Recompute, ...]
    costs: StageCosts
    boundary: tuple[float, ...]
    static: tuple[RankMemory, ...]  # activations 0
    activation_bound: tuple[float, ...]  # per rank, from in-flight counts


class Layouts:
    """Partitions, layouts, schedule templates and in-flight counts for one workload, with caches.

    Args:
        workload: per-layer costs per micro-batch size and recompute mode.
        memory: the memory model and the capacity.
        links: the message times.
        stats: the counts to add partitions solved and cache hits to.
        rank_capacity: where a rank holds several stages, ``"even"`` gives each
            stage an even share of the capacity (one solve); ``"exact"`` searches
            the splits (seconds per call at 70 layers).
        shapes: a dict the schedule templates and in-flight counts are kept in,
            shared between ``Layouts`` (they depend on the schedule's shape alone).
    """

    def __init__(self, workload: Workload, memory: MemoryModel, links: Links, stats: SearchStats,
                 rank_capacity: Literal["exact", "even"] = "even",
                 shapes: dict[str, dict[tuple[Any, ...], Any]] | None = None) -> None:
        self.workload = workload
        self.memory = memory
        self.links = links
        self.stats = stats
        self.rank_capacity = rank_capacity
        self._layouts: dict[tuple[Any, ...], Layout | Rejection | None] = {}
        # schedule templates and their in-flight counts depend on the shape alone: shared by the
        # search's evaluators when it passes ``shapes``
        shapes = {} if shapes is None else shapes
        self._templates: dict[tuple[Any, ...], Schedule] = shapes.setdefault("templates", {})
        self._inflight: dict[tuple[Any, ...], tuple[tuple[int, ...], tuple[int, ...]]] = shapes.setdefault(
            "inflight", {})
        # partitions that depend on the profiles alone: shared by every Layouts of this workload
        # (the search has one per data-parallel mode)
        shared = workload.memo
        self._free: dict[tuple[Any, ...], tuple[int, ...]] = shared.setdefault("free_sizes", {})
        self._chunks: dict[tuple[Any, ...], tuple[int, ...]] = shared.setdefault("chunk_sizes", {})
        self._cuts: dict[tuple[Any, ...], tuple[int, ...]] = shared.setdefault("chunk_cuts", {})
        self._balanced: dict[tuple[Any, ...], Layout] = {}
        #: what the engine's pipeline runtime adds to each stage when ``pp > 1`` (set by the evaluator:
        #: :meth:`pipeplan.planner.engine_costs.EngineCosts.pipeline_for`); ``None``: nothing
        self.pipeline: PipelineEngineCosts | None = None

    # ------------------------------------------------------------ schedule shapes
    @staticmethod
    def schedule_options(config: Config) -> dict[str, Any]:
        """The options ``config``'s fixed schedule is built with."""
        return schedule_info(config.schedule).shape_options(config.virtual_stages)

    def inflight(self, config: Config, num_microbatches: int | None = None) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """Peak in-flight microbatches per stage and the placement, read off the schedule's orders.

        Adaptive and ``pp = 1`` use 1F1B's counts (adaptive is bounded by the
        per-rank memory limit it is given instead). Adaptive over chunks in a loop
        counts one microbatch per stage, the least any order holds
        (:func:`~pipeplan.schedules.adaptive.minimum_memory_limit`).
        """
        if config.chunked_adaptive:
            return (1,) * config.num_stages, loop_placement(config.pp, config.virtual_stages)
        name = schedule_info(config.schedule).fixed_template() if config.pp > 1 else "1f1b"
        microbatches = config.num_microbatches if num_microbatches is None else num_microbatches
        key = (name, config.num_stages, microbatches, config.virtual_stages)
        if key not in self._inflight:
            shape = replace(config, schedule=name, num_microbatches=microbatches)
            template = self.template(shape)
            options = self.schedule_options(shape)
            if schedule_info(name).inflight_closed_form is not None and not options or "costs" in schedule_options(name):
                counts = inflight_per_stage(name, config.num_stages, microbatches, **options)
            else:  # read off the template just built: the same orders inflight_per_stage would build again
                counts = inflight_of_built(template)
            self._inflight[key] = (tuple(counts), tuple(template.placement))
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

    # ------------------------------------------------------------ layouts
    def build(
        self, config: Config, sizes: Sequence[int], placement: Sequence[int], recompute: Sequence[Recompute]
    ) -> Layout:
        """Costs, messages and static memory of a given partition and recompute assignment.

        Each stage's costs are its recompute mode's
        :meth:`~pipeplan.layers.LayerProfile.stage_costs`, the weight stash
        included (what a split backward keeps from ``I`` to ``W``), so a plan's
        activation peaks are the ones ``simulate --profile`` reports for the
        same partition and schedule.
        """
        micro_batch_size = config.micro_batch_size
        sizes, placement = tuple(sizes), tuple(placement)
        modes = set(recompute)
        if len(modes) == 1:  # every stage from one mode's costs: those costs themselves (what stagewise copies)
            costs = self._stage_costs(micro_batch_size, recompute[0], sizes)
        else:  # shared by every Layouts of this workload, as the one-mode costs are
            mixed = self.workload.memo.setdefault("mixed_stage_costs", {})
            key = (micro_batch_size, sizes, tuple(recompute))
            costs = mixed.get(key)
            if costs is None:
                per_mode = {mode: self._stage_costs(micro_batch_size, mode, sizes) for mode in modes}
                costs = mixed[key] = StageCosts.stagewise([per_mode[mode] for mode in recompute])  # measured split kept
        static = self.memory.static_memory(config, sizes, placement, recompute)
        counts, _ = self.inflight(config)
        bound = [0.0] * config.pp
        for s, rank in enumerate(placement):
            bound[rank] += counts[s] * costs.activation_bytes[s]
        if self.pipeline is not None and config.pp > 1:
            trainable = self.workload.profile(micro_batch_size).trainable_params
            ends = [0, *np.cumsum(sizes).tolist()]
            costs = self.pipeline.applied(costs, [float(sum(trainable[ends[s]:ends[s + 1]])) for s in range(len(sizes))],
                                          self.links.cluster.device, self.workload.time_unit)
        costs, boundary = self.links.on_timelines(costs, self.links.boundary_times(config, sizes, placement))
        return Layout(tuple(sizes), tuple(placement), tuple(recompute), costs, boundary, static, tuple(bound))

    def _stage_costs(self, micro_batch_size: int, mode: Recompute, sizes: tuple[int, ...]) -> StageCosts:
        """The stage costs of ``sizes`` (:meth:`Workload.stage_costs`: Megatron-LM's ``block:N`` per stage), shared
        by every Layouts of this workload: the modes ask alike."""
        shared = self.workload.memo.setdefault("stage_costs", {})
        key = (micro_batch_size, mode, sizes)
        costs = shared.get(key)
        if costs is None:
            costs = shared[key] = self.workload.stage_costs(micro_batch_size, mode, sizes)
        return costs

    def fixed(self, config: Config, sizes: tuple[int, ...], recompute: tuple[Recompute, ...]) -> Layout:
        """The layout of given layers per stage and recompute, on the schedule's own placement."""
        _, placement = self.inflight(config)
        return self.build(config, sizes, placement, recompute)

    def over_capacity(self, layout: Layout) -> tuple[int, float] | None:
        """The fullest rank of ``layout`` and its bytes, when its in-flight activations do not fit."""
        return self.memory.over_capacity(layout.static, layout.activation_bound)

    def partitioned(self, config: Config) -> Layout | Rejection | None:
        """The partition of ``config`` with recompute relaxed per stage (cached).

        The exact min-max partition (:meth:`_minmax`); where ranks hold several
        chunks of a fixed schedule (a loop or a V), the rank-balanced choice made
        from it (:meth:`_rank_balanced`). Returns ``None`` when ``config``
        recomputes although the partition without recompute already fits: such a
        configuration is not in the space (recompute is tried only where memory
        needs it).
        """
        result = self._minmax(config)
        pattern = _chunk_pattern(config)
        if isinstance(result, Layout) and pattern is not None:
            return self._rank_balanced(config, result, pattern)
        return result

    def given(self, config: Config, sizes: tuple[int, ...]) -> Layout | Rejection | None:
        """The layout of ``config`` on given layers per stage (``plan --partition``), or why it does not fit.

        Recompute is relaxed per stage as for a solved partition, and ``None``
        (not in the space) comes back where ``config`` recomputes although the
        partition fits without recompute. ``sizes`` must have ``config.num_stages``
        entries adding up to the layers (the search space checks them).
        """
        counts, placement = self.inflight(config)
        lightest = self.workload.lightest_recompute  # "none", or the one mode pinned
        none: tuple[Recompute, ...] = tuple(lightest for _ in sizes)
        plain = self.build(config, sizes, placement, none)
        if self.over_capacity(plain) is None:
            return plain if config.recompute == lightest else None
        layout = plain if config.recompute == lightest else self.build(
            config, sizes, placement, self.memory.relax(config, sizes, placement, counts))
        over = self.over_capacity(layout)
        if over is None:
            return layout
        rank, total = over
        return Rejection(config, f"rank {rank} holds {format_gib(total)} with the given partition "
                                 f"{','.join(map(str, sizes))} (recompute {config.recompute}), "
                                 f"{format_gib(total - (self.memory.capacity or 0))} over")

    def _minmax(self, config: Config) -> Layout | Rejection | None:
        """The exact min-max partition of ``config`` with recompute relaxed per stage (cached); see :meth:`partitioned`."""
        counts, placement = self.inflight(config)
        key = (config.pp, config.dp, config.micro_batch_size, config.recompute, config.num_stages, counts, placement)
        if key in self._layouts:
            self.stats.cache_hits += 1
            return self._layouts[key]
        result: Layout | Rejection | None
        static = self.memory.static_bound(config)
        if not self.memory.fits(static):
            result = Rejection(config, f"weights and optimizer state alone need at least {format_gib(static)} on the "
                                       f"fullest rank (pp={config.pp})", at_least_bytes=static)
            self._layouts[key] = result
            return result
        if config.chunked_adaptive:
            result = self._balanced_chunks(config, placement)
            self._layouts[key] = result
            return result
        least = self.workload.lightest_recompute  # "none", or the one mode pinned
        free = self._unconstrained(config, least, placement)
        if free is not None:
            result = free if config.recompute == least else None
        elif config.recompute != "full" and "full" in self.workload.recompute_modes and isinstance(
            lightest := self._minmax(replace(config, recompute="full")), Rejection
        ):
            # full recompute holds the fewest bytes on every stage of every partition:
            # where it does not fit, nothing lighter in time does
            result = replace(lightest, config=config)
        else:
            result = self._partition(config, counts, placement)
        self._layouts[key] = result
        return result

    def free_sizes(self, micro_batch_size: int, mode: Recompute, num_stages: int) -> tuple[int, ...]:
        """The exact min-max partition ignoring memory (cached: schedules with the same stage count share it)."""
        key = (micro_batch_size, mode, num_stages)
        sizes = self._free.get(key)
        if sizes is None:
            self.stats.partitions += 1
            sizes = partition_layers(self.workload.profile(micro_batch_size, mode), num_stages).layers_per_stage
            self._free[key] = sizes
        return sizes

    def _rank_balanced(self, config: Config, minmax: Layout, pattern: Pattern) -> Layout:
        """The fastest layout no rank of which is busier than under the min-max chunks or the even split (cached).

        A rank of a loop or a V runs the sum of its chunks, so the slowest chunk
        is not what bounds the step: the min-max chunk cut can leave one rank a
        chunk heavier than the rest. The candidates are ``minmax`` (it fits), the
        even split, and the cut whose largest rank total (F + B per microbatch,
        summed over the rank's chunks) is smallest
        (:func:`~pipeplan.partition.placement.place_chunks` on the schedule's
        pattern, seeded with the other two), each with recompute relaxed per
        stage. Of those that fit, the ones whose largest rank total is at most
        that of the fitting seeds are simulated under ``config``'s schedule and the
        fastest step (all-reduce included) is kept; so the layout's largest rank
        total is never above the min-max chunks' or the even split's (where they
        fit), and its step never slower than that of the less loaded of the two.
        """
        key = (config, minmax.sizes)
        cached = self._balanced.get(key)
        if cached is not None:
            self.stats.cache_hits += 1
            return cached
        counts, placement = self.inflight(config)
        stages = config.num_stages
        if placement != fixed_pattern(pattern, config.pp, stages // config.pp):
            return minmax  # not the pattern's placement: nothing to balance against
        even = even_split(self.workload.num_layers, stages)
        cut_key = (config.micro_batch_size, config.recompute, config.pp, stages, pattern, minmax.sizes)
        cut = self._cuts.get(cut_key)
        if cut is None:
            self.stats.partitions += 1
            profile = self.workload.profile(config.micro_batch_size, config.recompute)
            # the local search alone (no annealing): the step-time choice below does the rest
            cut = place_chunks(profile, config.pp, stages // config.pp, pattern=pattern,
                               seeds=(minmax.sizes, even), restarts=0).layers_per_stage
            self._cuts[cut_key] = cut
        layouts = {minmax.sizes: minmax}
        for sizes in (even, cut):
            if sizes not in layouts:
                layouts[sizes] = self.build(config, sizes, placement, self.memory.relax(config, sizes, placement, counts))
        fitting = [layout for layout in layouts.values() if self.over_capacity(layout) is None]
        ceiling = min(_rank_load(layout) for layout in fitting if layout.sizes in (minmax.sizes, even))
        chosen = [layout for layout in fitting if _rank_load(layout) <= ceiling * (1 + 1e-9)]
        best = chosen[0] if len(chosen) == 1 else min(chosen, key=lambda layout: self._step_time(config, layout))
        self._balanced[key] = best
        return best

    def pipeline_key(self, config: Config) -> tuple[float, tuple[tuple[str, float], ...]] | None:
        """What of :attr:`pipeline` reaches ``config``'s stage costs, as a cache key (``None``: nothing)."""
        return self.pipeline.key if self.pipeline is not None and config.pp > 1 else None

    def _step_time(self, config: Config, layout: Layout) -> float:
        """The simulated step of ``layout`` under ``config``'s fixed schedule, the all-reduce included."""
        # the same whatever the mode, but for what the engine's pipeline runtime adds (DeepSpeed's differs by mode)
        shared = self.workload.memo.setdefault("balanced_makespans", {})
        key = (config.micro_batch_size, config.schedule, config.num_stages, config.num_microbatches,
               config.virtual_stages, layout.sizes, layout.recompute, layout.boundary, self.pipeline_key(config))
        makespan = shared.get(key)
        if makespan is None:
            self.stats.simulated += 1
            timeline = simulate(self.template(config), layout.costs, self.links.comm(layout.boundary), validate=False)
            makespan = shared[key] = float(timeline.makespan)
        return makespan + self.links.dp_comm(config, layout.static)

    def _balanced_chunks(self, config: Config, placement: tuple[int, ...]) -> Layout | Rejection | None:
        """Chunks in a loop with even rank loads (:func:`~pipeplan.partition.placement.place_chunks`), for adaptive.

        A fixed template wants equal stages, so its partition is the min-max one;
        the cost-aware order only needs every rank's sum of chunks to be even,
        which lumpy layers (tiny vision layers before heavy decoder layers) allow
        far better. Memory: the weights and optimizer state plus one microbatch on
        each of a rank's stages must fit; the order then keeps within the rest. A
        recompute mode is tried only where that does not fit without recompute.
        """
        lightest = self.workload.lightest_recompute
        if config.recompute != lightest and isinstance(self.partitioned(replace(config, recompute=lightest)), Layout):
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
        layout = self.build(config, sizes, placement, (config.recompute,) * config.num_stages)
        over = self.over_capacity(layout)
        if over is None:
            return layout
        rank, total = over
        return Rejection(config, f"rank {rank} holds {format_gib(total)} with one microbatch on each of its "
                                 f"{config.virtual_stages} stages, {format_gib(total - (self.memory.capacity or 0))} over",
                         total)

    def _unconstrained(self, config: Config, mode: Recompute, placement: tuple[int, ...]) -> Layout | None:
        """The min-max partition ignoring memory, when it fits anyway (then it is the constrained optimum too)."""
        sizes = self.free_sizes(config.micro_batch_size, mode, config.num_stages)
        layout = self.build(config, sizes, placement, (mode,) * config.num_stages)
        return layout if self.over_capacity(layout) is None else None

    def _partition(self, config: Config, counts: tuple[int, ...], placement: tuple[int, ...]) -> Layout | Rejection:
        """The exact min-max partition under the capacity, recompute relaxed, or why none fits."""
        profile, per_param = self.memory.memory_profile(config.micro_batch_size, config.recompute, config.dp,
                                                           config.pp)
        name = schedule_info(config.schedule).fixed_template() if config.pp > 1 else "1f1b"
        options = self.schedule_options(config) if name == config.schedule else {}
        stages = config.num_stages
        # in-flight counts at m = S equal those at m for most schedules: then the
        # solver needs no microbatch count (and simulates nothing)
        same = self.inflight(config, num_microbatches=stages)[0] == counts
        try:
            self.stats.partitions += 1
            # the partitioner checks the capacity per rank where a rank holds several stages
            result = partition_layers(profile, stages, PartitionOptions(
                memory_capacity=self.memory.capacity, bytes_per_param=per_param, schedule=name,
                num_microbatches=None if same else config.num_microbatches, schedule_options=options,
                rank_capacity=self.rank_capacity, simulate_step=False,  # the m is for in-flight counts; build() simulates
            ))
        except InfeasiblePlanError as error:
            return Rejection(config, self._binding_reason(error, config), _printed_needed(error),
                             needed_proven=error.proven)
        except PipeplanError as error:
            return Rejection(config, str(error))
        recompute = self.memory.relax(config, result.layers_per_stage, placement, counts)
        built = self.build(config, result.layers_per_stage, placement, recompute)
        over = self.over_capacity(built)
        if over is None:
            return built
        rank, total = over
        offsets = np.concatenate([[0], np.cumsum(built.sizes)])
        layers = [i for s, r in enumerate(placement) if r == rank
                  for i in range(int(offsets[s]), int(offsets[s + 1]))]
        return Rejection(config, f"rank {rank} holds {format_gib(total)} with its {config.virtual_stages} stages, "
                                 f"{format_gib(total - (self.memory.capacity or 0))} over; its largest module is "
                                 f"{self.memory.heaviest(config, layers)}")

    def _binding_reason(self, error: InfeasiblePlanError, config: Config) -> str:
        """A short reason from the partitioner's error: the stage, its layers, its largest module.

        Where the error names no single stage (ranks holding several), its own message.
        """
        needed = _printed_needed(error)
        if error.stage is None or needed is None or not error.layers:
            return str(error)
        (lo, hi), = error.layers
        return (f"stage {error.stage} (layers {lo}..{hi}) needs at least {format_gib(needed)} on its own; its largest "
                f"module is {self.memory.heaviest(config, range(lo, hi + 1))}")


def _chunk_pattern(config: Config) -> Pattern | None:
    """The chunk pattern of a fixed schedule whose ranks hold several chunks (a loop or a V), else ``None``."""
    layout = schedule_info(config.schedule).layout
    if config.pp == 1 or config.chunked_adaptive or layout == "one":
        return None
    return "interleaved" if layout == "loop" else "v"


def _rank_load(layout: Layout) -> float:
    """The largest rank total of ``layout``: F + B per microbatch summed over each rank's stages."""
    costs = layout.costs
    return max(rank_totals([f + b for f, b in zip(costs.forward, costs.backward)], layout.placement))


def _printed_needed(error: InfeasiblePlanError) -> float | None:
    """``error.needed_bytes`` to the six significant digits its message prints (``None`` unless finite).

    Rejections have always reported the partitioner's bound at that precision;
    the rounding keeps their bytes and messages as they were.
    """
    if error.needed_bytes is None or not math.isfinite(error.needed_bytes):
        return None
    return float(f"{error.needed_bytes:.6g}")
