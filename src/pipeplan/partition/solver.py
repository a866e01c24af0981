"""Exact, memory-aware partitioning of contiguous layers into pipeline stages.

The solver splits ``L`` layers into ``S`` non-empty contiguous stages so that the
slowest stage (its F + B + W time plus any fixed extra) is as fast as possible,
while every stage fits a memory capacity::

    from pipeplan.partition import PartitionOptions, partition_layers
    partition_layers([2.0] * 32, 4, PartitionOptions(first_extra=16, last_extra=8)).layers_per_stage  # (3, 11, 11, 7)
    partition_layers(profile, 8, PartitionOptions(memory_capacity=80e9, num_microbatches=16)).stage_memory

How it works:

1. **Bottleneck.** For a threshold ``T`` the set of layer positions where stage
   ``k`` can end is computed stage by stage over prefix sums (an interval in the
   usual case, a bitmap when a single layer does not fit some stage). Its
   answer only changes when ``T`` crosses the time of one more layer on a
   reachable stage, so the search jumps between such candidate sums, halving
   the gap when it can; it stops when the lower bound meets an achieved
   bottleneck. ``L = 10,000``, ``S = 128`` takes about 0.05 s.
2. **Tie-break.** Among partitions whose slowest stage equals the optimum (and
   that fit memory), ``tie_break="lexicographic"`` picks the one whose stage
   times, sorted from slowest to fastest, are lexicographically smallest: it
   lowers the second-slowest stage, then the third, and so on. ``"variance"``
   picks the smallest sum of squared stage times (lesson 16's smallest spread),
   ``"none"`` any optimal partition. Both are exact. With few tied (start, end)
   pairs (up to ``tiebreak.PAIR_BUDGET``) a dynamic program walks every pair; with more
   (one dominant layer leaves the other stages loose: ~10⁸ pairs for 10,000
   layers into 128 stages) :mod:`pipeplan.partition.ties` works on per-stage
   windows instead (monotone divide and conquer for the variance, level-by-level
   peeling for the lexicographic order), under a second for ``L = 10,000``,
   ``S = 128`` on every case of ``benchmarks/partition_speed.py``.
3. **Memory.** Stage ``k`` holds ``bytes_per_param × params`` (parameters,
   gradients and optimizer state; 16 bytes per parameter for mixed-precision
   Adam) plus ``inflight[k] × activation_bytes`` plus its fixed extra bytes.
   ``inflight[k]`` is the peak number of microbatches whose activations stage
   ``k`` holds under the chosen schedule; it is read off the schedule's per-rank
   orders (1F1B: ``min(m, P − k)``, GPipe: ``m``). ``memory_capacity`` is per
   **rank** (GPU): a rank holds the sum of its stages' memory (zb-v and
   interleaved put two stages on each rank). With one stage per rank the solve
   is exact. With several, the per-stage solve is a relaxation: when its answer
   fits per rank it is exact; otherwise, up to ``memory.EXHAUSTIVE_LIMIT`` partitions
   are listed and the exact optimum taken, and beyond that a search over splits
   of each rank's capacity among its stages (each split is solved exactly)
   returns a plan that fits, with ``proven_optimal=False`` unless it meets the
   relaxation's bound. When no partition fits,
   :class:`~pipeplan.errors.InfeasiblePlanError` names the smallest capacity
   that fits (per stage; per rank when ranks share, "found to fit" when it came
   from the search) and the stage or rank that needs it.
4. **Schedule-aware.** ``objective="step_time"`` starts from the bottleneck
   optimum and moves one boundary at a time by one layer while the simulated
   step time of the schedule improves (first improvement, memory respected). That
   local search is a heuristic: it never returns a slower simulated step than
   the bottleneck optimum, but it is not proven optimal for the step time.
"""

from __future__ import annotations


import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from .._validation import finite_floats, non_negative_float, positive_int
from ..errors import InfeasiblePlanError, InvalidInputError
from ..layers import LayerProfile
from ..plan import Plan
from ..schedules import SCHEDULES, schedule_info
from ..schedules.inflight import inflight_and_placement, inflight_per_stage
from .memory import RankMemoryModel, gib, memory_limits, memory_prefixes, rank_totals, tied_layers
from .problem import MinMaxProblem
from .steptime import StepTimer, improve_step_time
from .tiebreak import tie_break as break_ties

__all__ = ["PartitionOptions", "PartitionResult", "partition_layers", "inflight_per_stage", "even_split", "rank_totals",
           "TieBreak", "Objective"]

TieBreak = Literal["lexicographic", "variance", "none"]
Objective = Literal["bottleneck", "step_time"]



@dataclass(frozen=True, kw_only=True)
class PartitionResult(Plan):
    """A partition of layers into stages and what it costs: a :class:`~pipeplan.plan.Plan`.

    As a Plan it has ``pp`` (the ranks its placement uses), ``dp = 1``,
    ``schedule_options`` (``virtual_stages`` for ``"interleaved"``, else none),
    ``pipeline_time`` (the step time) and ``layer_names`` (the profile's), all
    derived from the fields below, so every export reads it directly.

    Attributes:
        layers_per_stage: number of layers on each stage (all >= 1).
        stage_times: F + B + W time per microbatch of each stage, extras included.
        stage_memory: bytes each stage holds at its peak (see the module doc).
        placement: ``placement[s]`` is the rank holding stage ``s`` (the chosen
            schedule's placement; one stage per rank unless it has chunks, and
            when not given).
        bottleneck: the slowest stage time (the proxy objective).
        step_time: simulated makespan of one step under ``schedule`` with
            ``num_microbatches`` (``None`` when no microbatch count was given).
        schedule: the schedule name the memory and step time refer to.
        num_microbatches: microbatches per step used for in-flight counts.
        inflight: peak in-flight microbatches per stage used for memory.
        objective: what was minimised, ``"bottleneck"`` or ``"step_time"``.
        tie_break: how ties on the bottleneck were broken (the one applied).
        rank_shared_bytes: per rank, the bytes of a tied table its stages' memory
            counts twice (a V-shape's rank 0 holds the embedding and the head);
            :attr:`rank_memory` takes them off.
        profile: the layer profile the plan was made from (``None`` for a plain
            list of costs without a step time); exports read its layer names.
        proven_optimal: ``False`` only when several stages share a rank, a memory
            capacity binds per rank, and the best split of the rank capacities that
            was found has a larger bottleneck than the per-stage relaxation (the
            module doc, *Memory*). The plan always fits per rank.
    """

    # the Plan fields a partition derives (set in __post_init__; hash=False keeps it hashable)
    pp: int = field(init=False, repr=False)
    dp: int = field(init=False, default=1, repr=False)
    placement: tuple[int, ...] = ()
    schedule_options: Mapping[str, Any] = field(init=False, hash=False, repr=False)
    pipeline_time: float | None = field(init=False, repr=False)
    layer_names: tuple[str, ...] = field(init=False, repr=False)
    # the partitioner's own
    stage_times: tuple[float, ...]
    stage_memory: tuple[float, ...] = ()
    bottleneck: float = 0.0
    inflight: tuple[int, ...] = ()
    objective: str = "bottleneck"
    tie_break: str = "lexicographic"
    rank_shared_bytes: tuple[float, ...] = ()
    profile: LayerProfile | None = field(default=None, repr=False, compare=False)
    proven_optimal: bool = True

    def __post_init__(self) -> None:
        placement = self.placement or tuple(range(len(self.layers_per_stage)))
        pp = max(placement) + 1
        derived = {
            "placement": placement,
            "pp": pp,
            "schedule_options": (schedule_info(self.schedule).shape_options(len(placement) // pp)
                                 if self.schedule in SCHEDULES else {}),
            "pipeline_time": self.step_time,
            "layer_names": tuple(self.profile.names) if self.profile is not None else (),
        }
        for name, value in derived.items():
            object.__setattr__(self, name, value)
        super().__post_init__()

    @property
    def rank_memory(self) -> tuple[float, ...]:
        """Bytes each rank holds: its stages' :attr:`stage_memory`, a tied table it holds twice counted once."""
        if not self.stage_memory:
            return ()
        totals = rank_totals(self.stage_memory, self.placement)
        shared = self.rank_shared_bytes or (0.0,) * len(totals)
        return tuple(total - excess for total, excess in zip(totals, shared))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary (the partitioner's fields; :meth:`Plan.to_dict` gives the plan's)."""
        return {
            "layers_per_stage": list(self.layers_per_stage),
            "boundaries": list(self.boundaries),
            "stage_times": list(self.stage_times),
            "stage_memory": list(self.stage_memory),
            "placement": list(self.placement),
            "num_ranks": self.num_ranks,
            "rank_memory": list(self.rank_memory),
            "inflight": list(self.inflight),
            "bottleneck": self.bottleneck,
            "step_time": self.step_time,
            "schedule": self.schedule,
            "num_microbatches": self.num_microbatches,
            "objective": self.objective,
            "tie_break": self.tie_break,
            "proven_optimal": self.proven_optimal,
        }


# --------------------------------------------------------------------- helpers
def even_split(num_layers: int, num_stages: int) -> tuple[int, ...]:
    """Megatron-style even split: ``L // S`` each, the remainder on the first stages."""
    layers = positive_int("num_layers", num_layers)
    stages = positive_int("num_stages", num_stages)
    if layers < stages:
        raise InvalidInputError(f"need at least num_stages={stages} layers, got {layers}")
    base, extra = divmod(layers, stages)
    return tuple(base + (1 if k < extra else 0) for k in range(stages))


# ---------------------------------------------------------------- public entry
@dataclass(frozen=True, kw_only=True)
class PartitionOptions:
    """What :func:`partition_layers` takes besides the layers and the stage count (checked on construction).

    Attributes:
        first_extra, last_extra: fixed time the first / last stage pays (default:
            the profile's, 0 for a list).
        first_extra_bytes, last_extra_bytes: fixed bytes on the first / last stage.
        memory_capacity: bytes per stage (per rank for one stage per rank); the
            result never exceeds it.
        bytes_per_param: bytes of weights, gradients and optimizer state per
            parameter (16 = mixed-precision Adam).
        schedule: registered schedule name whose in-flight microbatch counts
            (and placement) the memory model and the step time use.
        num_microbatches: microbatches per step ``m``. When given, the result
            reports the simulated step time. Default for in-flight counts: ``S``.
        schedule_options: extra keyword options for the schedule generator.
        objective: ``"bottleneck"`` (exact, the default) or ``"step_time"`` (local
            search on the simulated makespan, seeded by the bottleneck optimum).
        tie_break: ``"lexicographic"``, ``"variance"`` or ``"none"`` (module doc).
        rank_capacity: where a rank holds several stages, ``"exact"`` finds the
            fastest partition whose ranks fit (a search over capacity splits);
            ``"even"`` gives each stage an equal share of its rank's capacity and
            solves once (always fits per rank, not proven fastest; the planner's
            quick path).
        simulate_step: whether to simulate the chosen partition's step for
            ``step_time``; default (``None``): when ``num_microbatches`` is given.
            ``False`` keeps ``num_microbatches`` for the in-flight counts alone
            (a caller that reports no step, or one too large to simulate for a
            report: S·m actions cost ~0.5 kB and ~2.5 µs each).

    Raises:
        InvalidInputError: an unknown objective, tie-break or rank-capacity mode, a
            negative extra or byte count, a capacity that is not a positive number,
            ``num_microbatches < 1``, or ``objective="step_time"`` with
            ``simulate_step=False``.
    """

    first_extra: float | None = None
    last_extra: float | None = None
    first_extra_bytes: float | None = None
    last_extra_bytes: float | None = None
    memory_capacity: float | None = None
    bytes_per_param: float = 16.0
    schedule: str = "1f1b"
    num_microbatches: int | None = None
    schedule_options: Mapping[str, Any] | None = None
    objective: Objective = "bottleneck"
    tie_break: TieBreak = "lexicographic"
    rank_capacity: Literal["exact", "even"] = "exact"
    simulate_step: bool | None = None

    def __post_init__(self) -> None:
        if self.objective not in ("bottleneck", "step_time"):
            raise InvalidInputError(f"objective must be 'bottleneck' or 'step_time', got {self.objective!r}")
        if self.rank_capacity not in ("exact", "even"):
            raise InvalidInputError(f"rank_capacity must be 'exact' or 'even', got {self.rank_capacity!r}")
        if self.tie_break not in ("lexicographic", "variance", "none"):
            raise InvalidInputError(
                f"tie_break must be 'lexicographic', 'variance' or 'none', got {self.tie_break!r}")
        checked: dict[str, Any] = {"bytes_per_param": non_negative_float("bytes_per_param", self.bytes_per_param)}
        if self.memory_capacity is not None:
            checked["memory_capacity"] = _positive("memory_capacity", self.memory_capacity, "bytes")
        for name, value in self.extras().items():
            checked[name] = non_negative_float(name, value)
        if self.simulate_step is False and self.objective == "step_time":
            raise InvalidInputError("objective 'step_time' simulates the step; it cannot run with simulate_step=False")
        if self.num_microbatches is not None:
            checked["num_microbatches"] = positive_int("num_microbatches", self.num_microbatches)
        for name, value in checked.items():
            object.__setattr__(self, name, value)

    def extras(self) -> dict[str, float]:
        """The fixed extras given (``first_extra``, ``last_extra``, ``first_extra_bytes``, ``last_extra_bytes``)."""
        given = {"first_extra": self.first_extra, "last_extra": self.last_extra,
                 "first_extra_bytes": self.first_extra_bytes, "last_extra_bytes": self.last_extra_bytes}
        return {name: value for name, value in given.items() if value is not None}

    def simulates(self) -> bool:
        """Whether the chosen partition's step is simulated (``simulate_step``, or its default)."""
        if self.simulate_step is None:
            return self.num_microbatches is not None or self.objective == "step_time"
        return self.simulate_step


def partition_layers(
    layer_costs: Sequence[float] | LayerProfile,
    num_stages: int,
    options: PartitionOptions | None = None,
) -> PartitionResult:
    """Split layers into ``num_stages`` non-empty contiguous stages, slowest stage first.

    Args:
        layer_costs: a :class:`~pipeplan.layers.LayerProfile`, or one total time
            (F + B + W per microbatch, >= 0) per layer. A plain list carries no
            memory, so only the extras' bytes count against a capacity.
        num_stages: ``S``, at most the number of layers.
        options: the extras, the memory capacity, the schedule, the objective and
            the tie-break (:class:`PartitionOptions`; default: its defaults).

    Returns:
        A :class:`PartitionResult`.

    Raises:
        InvalidInputError: bad numbers, fewer layers than stages, unknown options.
        InfeasiblePlanError: no partition fits ``options.memory_capacity``; the
            message gives the smallest capacity that fits and the stage that needs it.
    """
    options = PartitionOptions() if options is None else options
    stages = positive_int("num_stages", num_stages)
    _check_stage_count(layer_costs, stages)
    layers = _Layers.of(layer_costs, stages, options.extras())
    micro = stages if options.num_microbatches is None else options.num_microbatches
    layers.check_sums(options.bytes_per_param, micro)
    schedule_options = dict(options.schedule_options or {})
    inflight, placement = inflight_and_placement(options.schedule, stages, micro, **schedule_options)
    tied = tied_layers(layers.profile, options.bytes_per_param) if layers.profile is not None else None
    stage_prefixes = memory_prefixes(layers.params, layers.activations, options.bytes_per_param, inflight, tied=tied)
    memory_problem = MinMaxProblem(stage_prefixes, layers.extra_bytes)
    context = RankMemoryModel(memory_problem, tuple(placement), options.schedule, micro, options.bytes_per_param,
                              tied=tied)
    problem, bounds, applied, proven = _BottleneckSolve(layers, stages, memory_problem, context, options).run()
    profile = layers.profile
    step_time = None
    if options.simulates():
        profile = profile if profile is not None else LayerProfile.from_costs(layers.times.tolist())
        step = StepTimer(profile, options.schedule, stages, micro, schedule_options)
        step_time = step(bounds)
        if options.objective == "step_time":
            bounds, step_time = improve_step_time(step, bounds, step_time, problem)
    sizes = tuple(int(b - a) for a, b in zip(bounds[:-1], bounds[1:]))
    stage_times = tuple(problem.values(bounds))
    return PartitionResult(
        layers_per_stage=sizes,
        stage_times=stage_times,
        stage_memory=tuple(memory_problem.values(bounds)),
        placement=tuple(placement),
        bottleneck=max(stage_times),
        step_time=step_time,
        schedule=options.schedule,
        num_microbatches=micro,
        inflight=tuple(inflight),
        objective=options.objective,
        tie_break=applied if options.objective == "bottleneck" else "none",
        rank_shared_bytes=tuple(float(excess) for excess in context.tied_excess),
        profile=profile,
        proven_optimal=proven,
    )


@dataclass(frozen=True)
class _Layers:
    """The per-layer numbers the solver works on, the extras laid onto the stages."""

    times: np.ndarray  # F + B + W per layer
    params: np.ndarray
    activations: np.ndarray
    extra_time: np.ndarray  # per stage
    extra_bytes: np.ndarray  # per stage
    profile: LayerProfile | None  # None for a plain list of times

    @classmethod
    def of(cls, layer_costs: Sequence[float] | LayerProfile, stages: int, extras: Mapping[str, float]) -> _Layers:
        """Read a profile (its extras replaced by those given) or a list of times (extras from ``extras`` only)."""
        if isinstance(layer_costs, LayerProfile):
            profile = layer_costs.with_extras(**extras) if extras else layer_costs
            extra_time, extra_bytes = profile.stage_extras(stages)
            layers = cls(profile.total, np.asarray(profile.params), np.asarray(profile.activation_bytes),
                         extra_time, extra_bytes, profile)
        else:
            times = np.asarray(finite_floats("layer_costs", layer_costs, allow_zero=True))
            zeros = np.zeros(len(times))
            layers = cls(times, zeros, zeros, np.zeros(stages), np.zeros(stages), None)
            layers.extra_time[0] += extras.get("first_extra", 0.0)
            layers.extra_time[-1] += extras.get("last_extra", 0.0)
            layers.extra_bytes[0] += extras.get("first_extra_bytes", 0.0)
            layers.extra_bytes[-1] += extras.get("last_extra_bytes", 0.0)
        if len(layers.times) < stages:
            raise InvalidInputError(
                f"num_stages must be <= the number of layers ({len(layers.times)}) so no stage is empty, got {stages}"
            )
        return layers

    def check_sums(self, bytes_per_param: float, num_microbatches: int) -> None:
        """Refuse times or bytes whose sums overflow a float (every later sum stays finite)."""
        with np.errstate(over="ignore"):
            totals = {"layer times": self.times.sum() + self.extra_time.max(),
                      "layer bytes": (self.params * bytes_per_param).sum() + self.activations.sum() * num_microbatches
                      + self.extra_bytes.max()}
        for what, total in totals.items():
            if not np.isfinite(total):
                raise InvalidInputError(f"the {what} add up past the largest float; rescale them (e.g. seconds, GB)")


class _BottleneckSolve:
    """The min-max partition under the memory capacity: per stage, then per rank where ranks share."""

    def __init__(self, layers: _Layers, stages: int, memory_problem: MinMaxProblem, context: RankMemoryModel,
                 options: PartitionOptions) -> None:
        self.stages = stages
        self.extra_time = layers.extra_time
        self.time_prefix = np.concatenate([[0.0], np.cumsum(layers.times)])
        self.memory_problem = memory_problem
        self.context = context
        self.options = options

    def solve(self, capacities: Sequence[float] | None) -> tuple[MinMaxProblem, list[int], str] | None:
        """The tie-broken optimum under per-stage ``capacities`` (none: time alone), or ``None`` when none fits."""
        limits = None if capacities is None else memory_limits(self.memory_problem, capacities)
        candidate = MinMaxProblem([self.time_prefix] * self.stages, self.extra_time, limits)
        solved = candidate.min_bottleneck()
        if solved is None:
            return None
        chosen, applied = break_ties(candidate, solved[0], self.options.tie_break, solved[1])
        return candidate, chosen, applied

    def run(self) -> tuple[MinMaxProblem, list[int], str, bool]:
        """``(problem, bounds, tie-break applied, proven optimal)``; raises when no partition fits."""
        capacity = self.options.memory_capacity
        context = self.context
        outcome = self.solve(None if capacity is None else [capacity] * self.stages)
        if capacity is None:
            assert outcome is not None  # time alone always has an optimum
            return (*outcome, True)
        if context.shared and self.options.rank_capacity == "even":
            return self._even(outcome, capacity)
        if outcome is None:
            raise context.infeasible(capacity)
        if context.shared and max(context.rank_memory(outcome[1])) > capacity:
            return self._per_rank(outcome, capacity)
        return (*outcome, True)

    def _even(self, outcome: tuple[MinMaxProblem, list[int], str] | None,
              capacity: float) -> tuple[MinMaxProblem, list[int], str, bool]:
        """Each rank's capacity split evenly over its stages, solved once (when the per-stage answer overflows)."""
        if outcome is not None and max(self.context.rank_memory(outcome[1])) <= capacity:
            return (*outcome, True)
        placement = list(self.context.placement)
        outcome = self.solve([capacity / placement.count(rank) for rank in placement])
        if outcome is None:
            raise InfeasiblePlanError(
                f"memory_capacity = {gib(capacity)} per rank fits no partition of {len(self.time_prefix) - 1} layers "
                f"into {self.stages} stages under {self.options.schedule!r} with each rank's capacity split evenly "
                f"over its stages"
            )
        return (*outcome, False)

    def _per_rank(self, outcome: tuple[MinMaxProblem, list[int], str],
                  capacity: float) -> tuple[MinMaxProblem, list[int], str, bool]:
        """The best split of each rank's capacity over its stages that fits per rank.

        The per-stage solve is a relaxation (its bottleneck is a lower bound); the
        answer is proven optimal when it meets that bound.
        """
        context = self.context
        relaxed = max(outcome[0].values(outcome[1]))
        exhaustive = context.exhaustive(self.time_prefix, self.extra_time, capacity, self.options.tie_break)
        if exhaustive is not None:
            fitting = exhaustive[0]
            relaxed = exhaustive[1]  # the exact optimum per rank
        else:
            fitting = context.fit_per_rank(self.time_prefix, self.extra_time, capacity, relaxed)
        if fitting is None:
            raise context.infeasible(capacity)
        found = self.solve(context.capacities_around(fitting, capacity))
        assert found is not None  # the partition found fits these capacities
        return (*found, max(found[0].values(found[1])) == relaxed)


def _check_stage_count(layer_costs: object, stages: int) -> None:
    """Refuse more stages than layers before any per-stage array is allocated."""
    if isinstance(layer_costs, LayerProfile):
        count = layer_costs.num_layers
    elif isinstance(layer_costs, (Sequence, np.ndarray)) and not isinstance(layer_costs, (str, bytes)):
        count = len(layer_costs)
    else:
        return  # not a list: finite_floats names the problem
    if count < stages:
        raise InvalidInputError(
            f"num_stages must be <= the number of layers ({count}) so no stage is empty, got {stages}"
        )


def _positive(field_name: str, value: object, unit: str) -> float:
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        number = math.nan
    if not 0 < number < math.inf:
        raise InvalidInputError(f"{field_name} must be a finite number of {unit} > 0, got {value!r}")
    return number
