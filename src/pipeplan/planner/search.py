"""The planner's search: the fastest plans that fit, the baselines users run instead, and why others do not fit.

    from pipeplan.planner import Cluster, Workload, search
    result = search(workload, Cluster.of("h100-80g", num_gpus=8), global_batch=256)
    best = result.plans[0]; best.step_time, result.ratio_to_best_baseline(best)   # vs the better baseline

For each :class:`~pipeplan.planner.space.Config` (tp × pp × dp, data-parallel
mode, micro-batch size, schedule, v, recompute mode; one
:class:`~pipeplan.planner.evaluate.Evaluator` per tp and mode) the search:

1. solves the **exact** min-max partition of the layers into ``pp · v`` stages
   (:func:`pipeplan.partition_layers`) under the memory the schedule's in-flight
   counts imply, per rank where a rank holds several stages; for ``adaptive``
   over chunks it instead cuts chunks in a loop whose *rank* loads are even
   (:func:`pipeplan.partition.placement.place_chunks`), which the cost-aware order needs;
   for interleaved and zb-v it keeps the fastest of the cuts whose busiest rank is
   no busier than under the min-max partition and the even split; with a fixed
   ``partition`` it takes the given layers per stage instead;
2. **relaxes recompute** stage by stage: a stage solved under ``"full"`` or
   ``"selective"`` goes back to the cheapest mode whose rank still fits
   (1 and 2: :mod:`pipeplan.planner.layout`);
3. computes a **lower bound** on the step time (:func:`step_time_lower_bound`)
   and skips the candidate when it cannot beat the ``top``-th plan found so far;
4. otherwise builds the schedule (cached for fixed templates), **simulates** it
   with the links' communication, reads each rank's activation peak off the
   timeline, and keeps the plan or the reason it does not fit
   (:mod:`pipeplan.planner.evaluate`).

Configurations are visited in order of a bound that needs no partition
(``m · T / pp`` with the pipeline fill, ``m ·`` the least heaviest rank, one
microbatch's chain: :func:`fill_bound`, :mod:`pipeplan.planner.pruning`); once that bound reaches the ``top``-th best step time
every later configuration is skipped at once, and ``m ·`` the least slowest
stage rules out more before any memory-constrained partition is solved. Pruning only drops
candidates that provably cannot enter the top list, so the best plan is the best
of the space (``exhaustive=True`` evaluates everything; a test compares them).
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from .. import data_parallel
from .._validation import positive_int
from ..errors import InfeasiblePlanError, InvalidInputError, PipeplanError
from ..limits import MAX_GLOBAL_BATCH
from ..plan import Plan, recompute_rank
from ..schedules import schedule_info
from .advice import NoPlanFitsError, baseline_notes, batch_note, find_remedies, no_plan_fits
from .baselines import (Baseline, in_space, megatron_default, megatron_recommended, megatron_split, one_knob,
                        reference_baseline)
from .bounds import fill_bound, step_time_lower_bound
from .cluster import Cluster
from .evaluate import Evaluator, evaluate_layout
from .layout import Layout
from .options import DEFAULT_HEADROOM, SearchOptions
from .records import Rejection, SearchStats
from .space import Config, SearchSpace
from .workload import Workload

__all__ = ["search", "SearchResult", "Baseline", "megatron_split", "SearchStats", "Rejection", "step_time_lower_bound",
           "evaluate_layout", "fill_bound"]

_TIE = 1e-12
#: seconds each advice search may run on once it has a plan (:func:`_attempt`)
_ADVICE_BUDGET = 1.0


@dataclass(frozen=True)
class SearchResult:
    """Ranked plans that fit, the baselines a user would otherwise run and the best one-knob changes.

    Attributes:
        plans: the best plans that fit, fastest first (never slower than a
            baseline that fits: a baseline is a point of the space, and joins the
            plans when it is among the fastest).
        baseline: the Megatron-LM plan the one-knob rows change (the
            ``megatron-recommended`` baseline; ``baseline.fits`` says whether it fits).
        one_knob: the best plan that changes one knob of the baseline, by knob
            (``"partition"``, ``"schedule"``, ``"micro_batch_size"``,
            ``"recompute"``, ``"pp"``).
        rejected: configurations that do not fit, with the reason (then those a
            fixed ``partition`` does not apply to).
        stats: counts and time.
        lower_bound: a bound no plan of the space beats (see :meth:`~pipeplan.planner.pruning.SearchBounds.space_lower_bound`).
        single_stage_bound: the same over the one-stage-per-rank configurations
            only (it includes their pipeline fill).
        notes: where the question limited the answer (:func:`~pipeplan.planner.advice.batch_note`),
            one line each; shown under the plan table and, when there are any, in ``to_dict()["notes"]``.
    """

    plans: tuple[Plan, ...]
    baseline: Plan | None
    one_knob: dict[str, Plan]
    rejected: tuple[Rejection, ...]
    stats: SearchStats
    lower_bound: float
    single_stage_bound: float = math.inf
    rerun: Callable[[Sequence[str] | None, Sequence[str] | None, Sequence[str] | None], SearchResult] | None = field(
        default=None, repr=False, compare=False)
    baselines: tuple[Baseline, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def best_baseline(self) -> Baseline | None:
        """The fastest baseline that fits (``None``: none fits)."""
        fitting = [b for b in self.baselines if b.step_time is not None]
        return min(fitting, key=lambda b: b.step_time or math.inf) if fitting else None

    def ratio_to_best_baseline(self, plan: Plan) -> float | None:
        """The best fitting baseline's step time ÷ ``plan``'s (the headline: > 1 is faster than it)."""
        best = self.best_baseline
        if best is None or best.step_time is None or not plan.step_time:
            return None
        return best.step_time / plan.step_time

    @property
    def best(self) -> Plan:
        """The fastest plan that fits."""
        return self.plans[0]

    def best_for(self, engine: str) -> tuple[Plan, int | None]:
        """The fastest plan ``engine`` can run, and its index in :attr:`plans`.

        The first of :attr:`plans` the engine's export accepts; when none is, the
        best plan of the same search over only what the engine runs
        (:class:`pipeplan.engines.Runs`: its schedules, its data-parallel modes beside a
        pipeline, and those without one at ``pp = 1``), with index ``None``.

        Args:
            engine: an export target (:func:`pipeplan.engines.targets`).

        Raises:
            InvalidInputError: an unknown engine, or the search's own schedules
                leave none the engine runs.
            InfeasiblePlanError: no plan the engine runs fits.
        """
        from ..engines import by_target

        record = by_target(engine)
        for index, plan in enumerate(self.plans):
            if not record.refusal(plan):
                return plan, index
        runs = record.runs
        allowed, modes, single = runs.schedules, runs.dp_modes_with_pipeline, runs.dp_modes_without_pipeline
        if self.rerun is None or (allowed is None and modes is None and single is None):
            raise InvalidInputError(f"{engine} can run none of these plans: {record.refusal(self.plans[0])}")
        try:
            return self.rerun(allowed, modes, single).best, None
        except InvalidInputError as error:
            what = ", ".join(allowed or ()) + ("; data-parallel modes " + ", ".join(modes) if modes else "")
            alone = [mode for mode in single or () if mode not in (modes or ())]
            what += f" ({', '.join(alone)} without a pipeline)" if alone and modes else ""
            raise InvalidInputError(f"{engine} runs only {what}, and {error}") from None

    def ratio(self, plan: Plan) -> float | None:
        """The Megatron baseline's step time ÷ ``plan``'s (> 1: faster than it)."""
        if self.baseline is None or self.baseline.step_time is None or not plan.step_time:
            return None
        return self.baseline.step_time / plan.step_time

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready result (plans without exports; the CLI adds them)."""
        def row(plan: Plan) -> dict[str, Any]:
            return dict(plan.to_dict(), ratio_to_baseline=self.ratio(plan),
                        ratio_to_best_baseline=self.ratio_to_best_baseline(plan))

        best = self.best_baseline
        return {
            "plans": [row(p) for p in self.plans],
            "baselines": [b.to_dict() for b in self.baselines],
            "best_baseline": None if best is None else best.name,
            "baseline": None if self.baseline is None else self.baseline.to_dict(),
            "one_knob": {k: row(p) for k, p in self.one_knob.items()},
            "lower_bound": self.lower_bound,
            "single_stage_bound": self.single_stage_bound,
            "rejected": [
                {"config": _config_dict(r.config), "reason": r.reason, "needed_bytes": r.needed_bytes}
                for r in self.rejected[:50]
            ],
            "search": self.stats.to_dict(),
            **({"notes": list(self.notes)} if self.notes else {}),
        }


def _config_dict(config: Config) -> dict[str, Any]:
    return {
        "pp": config.pp, "dp": config.dp, "micro_batch_size": config.micro_batch_size,
        "microbatches": config.num_microbatches, "schedule": config.schedule,
        "virtual_stages": config.virtual_stages, "recompute": config.recompute,
        "tp": config.tp, "dp_mode": config.dp_mode,
    }


# ------------------------------------------------------------------ search
def search(workload: Workload, cluster: Cluster, global_batch: int, options: SearchOptions | None = None, *,
           advise: bool = True) -> SearchResult:
    """Search the space for the fastest plans that fit.

    Args:
        workload: the model's per-layer costs (:class:`~pipeplan.planner.Workload`).
        cluster: GPUs and links; its ``memory_bytes`` is the capacity unless
            ``options.memory_capacity`` overrides it.
        global_batch: samples per optimizer step.
        options: what to search and how (:class:`~pipeplan.planner.options.SearchOptions`;
            default its defaults: the whole space).
        advise: when no plan fits, search again under each remedy in reach (more
            GPUs, a fixed option dropped, no headroom: :mod:`pipeplan.planner.advice`)
            and name those that fit in the error.

    Returns:
        A :class:`SearchResult`.

    Raises:
        InvalidInputError: bad numbers, a batch no ``dp × b`` divides, unknown schedules,
            a ``partition`` whose counts do not add up to the layers or whose
            stage count no configuration has.
        InfeasiblePlanError: no plan fits (a :class:`~pipeplan.planner.advice.NoPlanFitsError`
            where the memory is why); names the smallest memory that would, the
            rank and layers that need it, and the remedies that fit, each with its
            worst GPU.
    """
    options = SearchOptions() if options is None else options
    positive_int("global_batch", global_batch, maximum=MAX_GLOBAL_BATCH,
                 why="samples per optimizer step, far above any recipe; a typo?")
    if options.micro_batch_size is not None and positive_int("micro_batch_size", options.micro_batch_size) > global_batch:
        raise InvalidInputError(f"micro_batch_size = {options.micro_batch_size} must be <= global_batch = "
                                f"{global_batch}: a microbatch is part of the step's samples")
    try:
        return _Search(workload, cluster, global_batch, options).run()
    except NoPlanFitsError as error:
        if not advise:
            raise
        remedies, tried = find_remedies(_attempt(workload, global_batch), workload, cluster, options,
                                        options.capacity(cluster), progress=options.progress)
        raise error.with_remedies(remedies, tried) from None


def _attempt(workload: Workload, global_batch: int) -> Callable[[Cluster, SearchOptions], Plan | None]:
    """The best plan that fits under other options (for advice), or ``None``; quick: the top plan, a short budget."""

    def attempt(cluster: Cluster, options: SearchOptions) -> Plan | None:
        quick = replace(options, top=1, progress=None, budget=min(options.budget or _ADVICE_BUDGET, _ADVICE_BUDGET))
        try:
            return _Search(workload, cluster, global_batch, quick).run().best
        except (InfeasiblePlanError, InvalidInputError):
            return None

    return attempt


class _Ranking:
    """The ``keep`` fastest distinct plans found so far (a heap, slowest on top)."""

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self._best: list[tuple[float, int, Plan]] = []
        self._seen: set[tuple[Any, ...]] = set()
        self._counter = 0

    def __bool__(self) -> bool:
        return bool(self._best)

    def threshold(self, count: int) -> float:
        """The step time a plan must beat to be among the ``count`` best (``count`` is 1 or ``keep``)."""
        if len(self._best) < count:
            return math.inf
        return -self._best[0][0] if count == self.keep else min(-e[0] for e in self._best)

    def offer(self, plan: Plan) -> None:
        """Keep ``plan`` if it is new and among the ``keep`` fastest."""
        identity = (plan.tp, plan.pp, plan.dp_mode, plan.schedule, plan.virtual_stages, plan.micro_batch_size,
                    plan.layers_per_stage, plan.recompute)
        if identity in self._seen:
            return
        self._seen.add(identity)
        self._counter += 1
        assert plan.step_time is not None
        entry = (-plan.step_time, -self._counter, plan)
        if len(self._best) < self.keep:
            heapq.heappush(self._best, entry)
        elif plan.step_time < self.threshold(self.keep):
            heapq.heapreplace(self._best, entry)

    def plans(self) -> tuple[Plan, ...]:
        """Fastest first; equal step times go to the plan with the smaller worst rank."""
        return tuple(sorted((p for _, _, p in self._best), key=lambda p: (p.step_time, max(p.peak_memory))))


class _Search:
    """One run of :func:`search`: visit the configurations by bound, rank the plans, add the baselines."""

    def __init__(self, workload: Workload, cluster: Cluster, global_batch: int, options: SearchOptions) -> None:
        self.workload = workload
        self.cluster = cluster
        self.global_batch = global_batch
        self.options = options
        self.keep = positive_int("top", options.top)
        self.capacity = options.capacity(cluster)
        if options.tp is not None:
            node = min(cluster.gpus_per_node, cluster.num_gpus)
            if positive_int("tp", options.tp) > 1 and node % options.tp:
                raise InvalidInputError(f"tp={options.tp} must divide the GPUs of a node ({node}): tensor "
                                        "parallelism stays inside a node")
            workload.with_tensor_parallel(options.tp)  # the model's own reason when it cannot split so
        schedules, modes, alone = options.engine_space()  # narrowed to what options.engine runs
        pp = options.pp
        if not modes:  # modes it runs only without a pipeline (DeepSpeed's ZeRO-2 and 3)
            if pp not in (None, 1):
                raise InvalidInputError(f"{options.engine} runs {', '.join(alone)} only without a pipeline: "
                                        f"leave --pp {pp} out, or give --dp-modes it runs beside one")
            pp, modes = 1, alone
        self.space = SearchSpace(
            num_gpus=cluster.num_gpus, global_batch=global_batch, num_layers=workload.num_layers,
            micro_batch_sizes=workload.micro_batch_sizes, recompute_modes=workload.recompute_modes, pp=pp,
            micro_batch_size=options.micro_batch_size, schedules=schedules,
            max_virtual_stages=options.max_virtual_stages, virtual_stages=options.virtual_stages,
            partition=options.partition,
            tensor_parallel_degrees=workload.tensor_parallel_degrees, tp=options.tp, dp_modes=modes,
            gpus_per_node=cluster.gpus_per_node, dp_modes_alone=None if alone == modes else alone,
        )
        self.started = time.perf_counter()
        self.started_cpu = time.process_time()  # the budget counts CPU seconds
        self.stats = SearchStats()
        self._evaluators: dict[tuple[int, str], Evaluator] = {}
        self._workloads: dict[int, Workload] = {}
        self._shapes: dict[str, dict[tuple[Any, ...], Any]] = {}  # schedule templates, for every evaluator
        self.ranking = _Ranking(self.keep)
        self.rejected: list[Rejection] = []
        self._no_partition: dict[tuple[Any, ...], list[tuple[tuple[float, float, float], Rejection]]] = {}

    def evaluator_for(self, config: Config) -> Evaluator:
        """The evaluator of ``config``'s tensor-parallel degree and data-parallel mode (one per pair, sharing the counts)."""
        key = (config.tp, config.dp_mode)
        evaluator = self._evaluators.get(key)
        if evaluator is None:
            if config.tp not in self._workloads:  # one per degree: the evaluators of its modes share its profiles
                self._workloads[config.tp] = self.workload.with_tensor_parallel(config.tp)
            costs = self.options.engine_costs
            evaluator = Evaluator(self._workloads[config.tp],
                                  self.cluster.for_tensor_parallel(config.tp), self.capacity,
                                  self.options.optimizer, self.options.send_mode, dp_mode=config.dp_mode,
                                  stats=self.stats, shapes=self._shapes,
                                  sync=self.options.sync if costs is None else costs.sync_for(config.dp_mode,
                                                                                             self.options.sync),
                                  hooks=None if costs is None else costs.hooks_for(config.dp_mode),
                                  pipeline=None if costs is None else costs.pipeline_for(config.dp_mode),
                                  engine=self.options.engine,
                                  reduce_bytes=None if costs is None else costs.reduce_bytes,
                                  compiled_loss=self.options.compiled_loss)
            self._evaluators[key] = evaluator
        return evaluator

    def bound(self, config: Config) -> float:
        """:meth:`~pipeplan.planner.pruning.SearchBounds.config_bound` of ``config`` under its own evaluator."""
        return self.evaluator_for(config).bounds.config_bound(config)

    def run(self) -> SearchResult:
        """Search, then the baselines, the one-knob plans and the space's bounds."""
        stats = self.stats
        configs = self.space.configs()
        stats.candidates = len(configs)
        self._visit_all(configs)
        budget = self.options.budget
        deadline = math.inf if budget is None else self.started_cpu + budget
        baselines = (reference_baseline(self), megatron_recommended(self))
        for baseline in baselines:  # a baseline in the space is one of its plans: the plans never lose to it
            if baseline.plan is not None and baseline.fits and in_space(self, baseline.plan):
                self.ranking.offer(baseline.plan)
        plans = self.ranking.plans()
        stats.seconds = time.perf_counter() - self.started
        if not plans:
            raise no_plan_fits(self.rejected, self.options.capacity_text(self.cluster), self.workload, self.capacity,
                               self.options.optimizer)
        megatron = baselines[1].plan
        if megatron is None:
            megatron = megatron_default(self.evaluator_for(replace(configs[0], tp=plans[0].tp,
                                                                    dp_mode=plans[0].dp_mode)), plans[0])
        summaries = self.options.summaries  # False: plan --mix's search at the mean sample reads neither
        knobs = {} if megatron is None or not summaries else one_knob(self, megatron, deadline)
        bounds = ((self._space_bound(configs, deadline), self._space_bound(configs, deadline, chunked=False))
                  if summaries else (0.0, 0.0))
        stats.seconds = time.perf_counter() - self.started
        skipped = tuple(Rejection(config, reason) for config, reason in self.space.skipped())
        notes = tuple(note for note in (batch_note(self.space), self.options.engine_note(),
                                        *baseline_notes(baselines)) if note)
        return SearchResult(plans, megatron, knobs, tuple(self.rejected) + skipped, stats, *bounds,
                            rerun=self._rerun, baselines=baselines, notes=notes)

    def _space_bound(self, configs: Sequence[Config], deadline: float, *, chunked: bool = True) -> float:
        """The least of each evaluator's bound over its configurations."""
        groups: dict[tuple[int, str], list[Config]] = {}
        for config in configs:
            groups.setdefault((config.tp, config.dp_mode), []).append(config)
        return min(self.evaluator_for(group[0]).bounds.space_lower_bound(group, chunked=chunked, deadline=deadline)
                   for group in groups.values())

    def _visit_all(self, configs: Sequence[Config]) -> None:
        """Evaluate ``configs`` in order of their bound, as long as a bound leaves them a chance."""
        stats, options = self.stats, self.options
        # by bound; within a configuration, no recompute first (the others need it to bind)
        ordered = sorted(configs, key=lambda c: (self.bound(c), c.tp, c.pp, data_parallel.names().index(c.dp_mode),
                                                 c.micro_batch_size, c.schedule, c.virtual_stages,
                                                 recompute_rank(c.recompute)))
        # Fixed templates first; the cost-aware "adaptive" generator is far dearer to
        # build, and is never slower than the templates it also tries, so it runs
        # last and only where its bound could beat the best plan found.
        dear = [schedule_info(c.schedule).cost_aware and c.pp > 1 for c in ordered]
        passes = [[c for c, late in zip(ordered, dear) if not late], [c for c, late in zip(ordered, dear) if late]]
        done = 0
        for index, group in enumerate(passes):
            rank_needed = self.keep if index == 0 else 1
            for position, config in enumerate(group):
                if options.budget is not None and self.ranking and \
                        time.process_time() - self.started_cpu > options.budget:
                    stats.complete = False
                    left = list(group[position:]) + [c for later in passes[index + 1:] for c in later]
                    stats.examined = len(ordered) - len(left)
                    # no configuration left unexamined has a plan faster than its own bound
                    stats.unexamined_bound = min(self.bound(c) for c in left)
                    break
                if options.progress is not None:
                    options.progress(done, len(ordered))
                done += 1
                limit = self.ranking.threshold(rank_needed) * (1 - _TIE)
                if not options.exhaustive and self.bound(config) >= limit:
                    stats.pruned += len(group) - position
                    done += len(group) - position - 1
                    break
                outcome = self._visit(config, limit)
                if isinstance(outcome, Rejection):
                    stats.rejected += 1
                    self.rejected.append(outcome)
                elif outcome is not None:
                    self.ranking.offer(outcome)
            if not stats.complete:
                break
        if options.progress is not None:
            options.progress(len(ordered), len(ordered))

    def _visit(self, config: Config, limit: float) -> Plan | Rejection | None:
        """The plan of ``config`` that fits, why it does not fit, or ``None`` (pruned, or not in the space)."""
        evaluator, exhaustive = self.evaluator_for(config), self.options.exhaustive
        if not exhaustive and evaluator.bounds.bottleneck_bound(config) >= limit:
            evaluator.stats.pruned += 1
            return None
        known = self._held_less(config, evaluator)
        if known is not None:  # a mode holding no more bytes per layer found no partition that fits
            return Rejection(config, known.reason, known.needed_bytes, at_least_bytes=known.at_least_bytes,
                             needed_proven=known.needed_proven)
        fixed = self.space.partition_for(config)
        layout = evaluator.layouts.partitioned(config) if fixed is None else evaluator.layouts.given(config, fixed)
        if isinstance(layout, Rejection):
            self._no_partition.setdefault(self._shape(config), []).append((self._state_bytes(config, evaluator),
                                                                           layout))
        if not isinstance(layout, Layout):  # a Rejection, or None: recompute where memory does not need it
            return layout
        if not exhaustive and evaluator.lower_bound(config, layout) >= limit:
            evaluator.stats.pruned += 1
            return None
        try:
            plan = evaluator.simulate(config, layout)
        except PipeplanError as error:  # e.g. adaptive finds no order within the memory limit
            return Rejection(config, str(error))
        if not plan.fits:
            return Rejection(config, plan.reason, max(plan.peak_memory))
        return plan

    @staticmethod
    def _shape(config: Config) -> tuple[Any, ...]:
        """``config`` but its data-parallel mode."""
        return (config.tp, config.pp, config.dp, config.micro_batch_size, config.num_microbatches, config.schedule,
                config.virtual_stages, config.recompute)

    @staticmethod
    def _state_bytes(config: Config, evaluator: Evaluator) -> tuple[float, float, float]:
        """What a layer holds under ``config``'s mode: weights and the rest per parameter, and FSDP's gathered layers."""
        per = evaluator.memory.bytes_per_param(config.dp, config.pp)
        gathered = 1.0 if evaluator.memory.unsharded_layers(config.pp) else 0.0
        if gathered and not evaluator.workload.reshard_after_forward:  # every layer's bf16 weights held gathered
            return per.weights + 2.0, per.gradients + per.optimizer, gathered
        return per.weights, per.gradients + per.optimizer, gathered

    def _held_less(self, config: Config, evaluator: Evaluator) -> Rejection | None:
        """A rejection of the same configuration under a mode that holds no more per layer (then none fits here).

        The exact partition's feasibility only gets harder with more static
        bytes on every layer (the activations are the mode's alike), so such a
        configuration is rejected without solving: exact, not a heuristic.
        """
        mine = self._state_bytes(config, evaluator)
        for theirs, rejection in self._no_partition.get(self._shape(config), ()):
            if all(a >= b for a, b in zip(mine, theirs)):
                return rejection
        return None

    def _rerun(self, allowed: Sequence[str] | None, modes: Sequence[str] | None = None,
               single: Sequence[str] | None = None) -> SearchResult:
        """The same search over only the ``allowed`` schedules and data-parallel ``modes`` it tried (``None``: all
        it tried), keeping the best plan only; ``single``: the modes allowed at ``pp = 1`` where they are
        more than ``modes`` (DeepSpeed runs ZeRO-2 and 3 only without a pipeline), searched at ``pp = 1`` too."""
        names = [name for name in self.space.schedule_names if allowed is None or name in allowed]
        if not names:
            raise InvalidInputError(f"the search tried none of them (--schedules {','.join(self.space.schedule_names)})")
        kept = [mode for mode in self.space.dp_modes if modes is None or mode in modes]
        alone = [mode for mode in self.space.dp_modes if single is None or mode in single]
        fixed = self.options.partition
        one_stage_allowed = isinstance(fixed, str) or fixed is None or len(fixed) == 1  # a fixed split sets pp
        extra = self.options.pp in (None, 1) and one_stage_allowed and set(alone) - set(kept)
        if not kept and not extra:
            raise InvalidInputError(f"the search tried none of its data-parallel modes "
                                    f"(--dp-modes {','.join(self.space.dp_modes)}); torchtitan runs every mode "
                                    "(--export torchtitan)")
        options = replace(self.options, schedules=names, memory_capacity=self.capacity, top=1, progress=None,
                          headroom=DEFAULT_HEADROOM)
        searches = ([replace(options, dp_modes=tuple(kept))] if kept else []) + (
            [replace(options, pp=1, dp_modes=tuple(alone))] if extra else [])
        results: list[SearchResult] = []
        failure: PipeplanError | None = None
        for each in searches:
            try:
                results.append(_Search(self.workload, self.cluster, self.global_batch, each).run())
            except (InfeasiblePlanError, InvalidInputError) as error:
                failure = failure or error
        if not results:
            assert failure is not None
            raise failure
        return min(results, key=lambda result: result.best.step_time or math.inf)
