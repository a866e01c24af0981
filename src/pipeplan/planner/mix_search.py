"""The search on a shape mix: the plan of the searched space with the smallest expected step over drawn batches.

    from pipeplan.batches import read_mix
    from pipeplan.planner.mix_search import search_on_mix
    mix = read_mix("examples/mix_cameras.csv")
    shaped = [Workload.from_spec(presets.get("pi0", **shape), device) for shape in mix.shapes]
    found = search_on_mix(mix, shaped, cluster, 256, SearchOptions(), main=result)
    found.ranking.best, found.ranking.timed, found.ranking.beyond_ms

**How** (branch and bound over the space the search searches):

1. :func:`mean_sample_workload` is the model at the mix's *mean sample*: each layer's
   times (forward, backward, weight gradient, the stage extras) and message bytes are the
   mix-weighted means of the shapes' (at every micro-batch size, recompute mode and
   tensor-parallel degree), and its memory (activation and stash bytes) is the largest
   shape's, so a plan it keeps holds a microbatch of the largest samples;
2. :func:`~pipeplan.planner.search.search` on it lists the plans of the space by their
   step at the mean sample, ``S(p)``, the ``top`` fastest;
3. :func:`~pipeplan.planner.mix_rank.rank_on_mix` with ``prune=True`` times them on the
   drawn batches in order of a lower bound of each one's expected step (its module doc:
   the bound never exceeds the expected step, per drawn batch) and stops at the first
   whose bound is no less than the best expected step found: every plan of the list it
   did not time is no faster;
4. the plans beyond the list have ``S(p) >= S(p_top)``, the list's last step; when the best
   expected step exceeds ``S(p_top) · (1 -`` :data:`JENSEN_SLACK` ``)`` the list doubles
   (``top`` × 2, at most :data:`MAX_TOP`) and 2–3 run again; otherwise the answer is the best
   of the listed plans and, beyond them, within the measured margin (:attr:`MixSearch.exact`:
   the margin is measured, not proven).

**Why the mean-sample step bounds the plans beyond the list, and how far.** The step of
one drawn batch is a max/sum of per-sample costs; with the microbatches' split and order
fixed it is convex in them, so by Jensen its expectation over the mix is at least its value
at the mean sample. pipeplan's step on a drawn batch is not quite that: it is a *mean over a
finite number of draws*, the split and order are chosen per batch (the fastest of four
orders: a cheap first microbatch fills the pipeline sooner), and only the most loaded
replica's pipeline is timed, so the expected step can fall a little below ``S(p)``
(``benchmarks/plan_mix.py`` measures by how much: the most over its plans and mixes is in
docs/uneven_batches.md). :data:`JENSEN_SLACK` is the margin kept for that: the plans beyond
the list are taken to be no faster than ``S(p_top) · (1 - JENSEN_SLACK)``. Inside the list
the bound is exact (step 3). Torch-free.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

from ..batches.mix import Mix
from ..errors import InfeasiblePlanError, InvalidInputError, PipeplanError
from ..layers import LayerProfile
from ..plan import Plan
from .evaluate import evaluate_layout
from .memory import loss_layers
from .mix_rank import DEFAULT_DRAWS, MixCandidate, MixRanking, MixRow, rank_on_mix
from .options import SearchOptions
from .search import SearchResult, search
from .space import Config
from .cluster import Cluster
from .workload import Workload

__all__ = ["mean_sample_workload", "search_on_mix", "MixSearch", "JENSEN_SLACK", "MAX_TOP", "plan_identity"]

#: Share by which the expected step of a plan beyond the list may fall under its mean-sample step (module doc).
JENSEN_SLACK = 0.01
#: The most plans the search at the mean sample lists (the list doubles up to it).
MAX_TOP = 320

_TIMES = ("forward", "backward", "weight")
_BYTES = ("activation_bytes", "weight_stash_bytes")


def _combine(profiles: Sequence[LayerProfile], weights: Sequence[float]) -> LayerProfile:
    """Times and message bytes at the weighted mean of ``profiles``, memory bytes at their largest."""
    first = profiles[0]
    counts = {profile.num_layers for profile in profiles}
    if len(counts) != 1:
        raise InvalidInputError(f"the mix's shapes have different layer counts {sorted(counts)}: a plan's "
                                "stages cannot hold the same layers for every shape")

    def mean(name: str) -> list[float]:
        return [sum(w * getattr(p, name)[layer] for p, w in zip(profiles, weights)) for layer in range(first.num_layers)]

    def largest(name: str) -> list[float]:
        return [max(getattr(p, name)[layer] for p in profiles) for layer in range(first.num_layers)]

    changes: dict[str, object] = {name: mean(name) for name in _TIMES}
    changes.update({name: largest(name) for name in _BYTES})
    changes["send_bytes"] = mean("send_bytes")
    changes["first_extra"] = sum(w * p.first_extra for p, w in zip(profiles, weights))
    changes["last_extra"] = sum(w * p.last_extra for p, w in zip(profiles, weights))
    changes["first_extra_bytes"] = max(p.first_extra_bytes for p in profiles)
    changes["last_extra_bytes"] = max(p.last_extra_bytes for p in profiles)
    if all(p.backward_input is not None for p in profiles):
        changes["backward_input"] = mean("backward_input")
    else:
        changes["backward_input"] = None
    changes["spread"] = {}
    return first.replaced(**changes)


def _any_mode(workload: Workload, size: int, mode: object) -> LayerProfile:
    """``workload``'s profile at ``mode``, also a mode its pinned recompute leaves out: a workload's ``source``
    answers every mode, as the memory model's transients ask for ``none`` under a pinned ``full``."""
    if mode in workload.recompute_modes:
        return workload.profile(size, mode)
    return workload.source(size, mode)  # type: ignore[arg-type]


def mean_sample_workload(shape_workloads: Sequence[Workload], weights: Sequence[float]) -> Workload:
    """The workload of the mix's mean sample (module doc, step 1), answering every size, mode and degree the shapes do.

    Its :attr:`~pipeplan.planner.workload.Workload.spec` is the shape's with the most
    logits per example at its LM heads (the first shape's without heads): the memory
    model prices the loss's fp32 logits from it (:func:`~pipeplan.planner.memory.loss_layers`),
    the largest shape's as every layer's memory is.

    Raises:
        InvalidInputError: no shapes, weights not one per shape, or shapes with different layer counts.
    """
    shapes = list(shape_workloads)
    if not shapes or len(weights) != len(shapes):
        raise InvalidInputError(f"{len(weights)} weights for {len(shapes)} shape workloads")
    total = float(sum(weights))
    share = [float(w) / total for w in weights]
    base = shapes[0]
    degrees = tuple(tp for tp in base.tensor_parallel_degrees if all(tp in w.tensor_parallel_degrees for w in shapes))

    def source(size: int, mode: object) -> LayerProfile:
        return _combine([_any_mode(w, size, mode) for w in shapes], share)

    at_tp: dict[int, list[Workload]] = {}  # each shape at each degree, once (their profiles cached in them)

    def tensor_source(size: int, mode: object, tp: int, stages: Sequence[int] | None = None) -> LayerProfile:
        if tp not in at_tp:
            at_tp[tp] = [w.with_tensor_parallel(tp) for w in shapes]
        if stages is not None:  # Megatron's block:N / uniform:N, priced per stage (Workload.stage_profile)
            return _combine([w.stage_profile(size, mode, stages) for w in at_tp[tp]], share)  # type: ignore[arg-type]
        return _combine([_any_mode(w, size, mode) for w in at_tp[tp]], share)

    sizes = base.micro_batch_sizes
    for other in shapes[1:]:
        if other.micro_batch_sizes is not None:
            sizes = other.micro_batch_sizes if sizes is None else tuple(s for s in sizes if s in other.micro_batch_sizes)
    flops = [w.flops_per_sample for w in shapes]
    tokens = [w.tokens_per_sample for w in shapes]
    mean_flops = None if any(f is None for f in flops) else sum(s * float(f or 0.0) for s, f in zip(share, flops))
    mean_tokens = None if any(t is None for t in tokens) else sum(s * float(t or 0.0) for s, t in zip(share, tokens))
    # the loss's fp32 logits are memory, the largest shape's as every layer's (MemoryModel reads the spec's heads)
    heads = [sum(logits for _, logits in loss_layers(w)) for w in shapes]
    spec = shapes[max(range(len(shapes)), key=lambda i: heads[i])].spec if any(heads) else base.spec
    return replace(base, source=source, tensor_source=None if base.tensor_source is None else tensor_source, spec=spec,
                   micro_batch_sizes=sizes, tensor_parallel_degrees=degrees or (base.tensor_parallel,),
                   flops_per_sample=mean_flops, tokens_per_sample=mean_tokens,
                   name=f"{base.name} (mix mean sample)", _rebuild=None, _cache={}, memo={})


def plan_identity(plan: Plan) -> tuple[object, ...]:
    """What makes two plans the same point of the space (layout included)."""
    return (plan.tp, plan.pp, plan.dp, plan.dp_mode, plan.schedule, plan.virtual_stages, plan.micro_batch_size,
            tuple(plan.layers_per_stage), tuple(plan.recompute))


@dataclass(frozen=True)
class MixSearch:
    """The search on a mix.

    Attributes:
        ranking: the timed plans (:class:`~pipeplan.planner.mix_rank.MixRanking`; its ``rows``
            hold the listed plans, timed or bounded out, then plan 1 of the search at the
            planned shape where the list lacks it, then the baselines).
        listed: plans the search at the mean sample listed (the last list).
        searches: searches run (the list doubled ``searches - 1`` times).
        cpu_seconds: CPU time of it all (searches and timing; also the ranking's ``cpu_seconds``).
    """

    ranking: MixRanking
    listed: int
    searches: int
    cpu_seconds: float

    @property
    def exact(self) -> bool:
        """The best of the listed plans, and no more than a plan beyond the list can reach within the measured
        margin (:data:`JENSEN_SLACK`, module doc)."""
        return self.ranking.exact


def _at_mean(plan: Plan, mean: Workload, cluster: Cluster, options: SearchOptions) -> Plan | None:
    """``plan``'s layout simulated on the mean-sample workload, as the search would (``None``: it cannot be)."""
    config = Config(plan.pp, plan.dp, plan.micro_batch_size, plan.num_microbatches, plan.schedule,
                    plan.virtual_stages, plan.recompute[0] if plan.recompute else "none", plan.tp, plan.dp_mode)
    try:  # a Plan whose ``fits`` says whether it holds the mean-sample workload's memory (the largest shape's)
        return evaluate_layout(mean, cluster, config, plan.layers_per_stage,
                               recompute=plan.recompute or None, memory_capacity=options.capacity(cluster),
                               optimizer=options.optimizer, send_mode=options.send_mode, sync=options.sync,
                               engine_costs=options.engine_costs, engine=options.engine,
                               compiled_loss=options.compiled_loss)
    except PipeplanError:
        return None


def _planned_ms(row: MixRow, main: SearchResult | None) -> float | None:
    """The row's step at the planned shape: the search's there (its plan, or its baseline of that label)."""
    if main is None:
        return None
    if row.baseline:
        return next((b.plan.step_time for b in main.baselines if b.label == row.label and b.plan is not None), None)
    return None if row.planned_rank is None else main.plans[row.planned_rank - 1].step_time


def search_on_mix(mix: Mix, shape_workloads: Sequence[Workload], cluster: Cluster, global_batch: int,
                  options: SearchOptions, *, main: SearchResult | None = None, draws: int = DEFAULT_DRAWS,
                  seed: int = 0, max_top: int = MAX_TOP) -> MixSearch:
    """The plan of the searched space fastest on ``mix`` (module doc), the plans timed, and how far it is exact.

    Args:
        mix, shape_workloads: the mix and, per shape, the workload the search would use there.
        cluster, global_batch, options: the search's (``options.top`` is the first list's length).
        main: the search at the planned shape; its plan 1 is timed on the mix too (its layout on
            the mean sample: the same model as every other row) and the listed plans it holds
            carry its ranks (``planned_rank``). Its baselines are replaced by the mean-sample
            search's own (the same rules on the mean sample's costs).
        draws, seed: as :func:`~pipeplan.planner.mix_rank.rank_on_mix`.
        max_top: the longest list.

    Raises:
        InfeasiblePlanError: no plan of the space holds a microbatch of the mix's largest samples.
    """
    started = time.process_time()
    mean = mean_sample_workload(shape_workloads, mix.weights)
    planned = {} if main is None else {plan_identity(plan): rank for rank, plan in enumerate(main.plans, start=1)}
    top = max(1, options.top)
    searches = 0
    while True:
        try:
            found = search(mean, cluster, global_batch, replace(options, top=top, progress=None, summaries=False),
                           advise=False)
        except InfeasiblePlanError as error:
            raise InfeasiblePlanError(f"on the mix {mix.source}, no plan holds a microbatch of its largest samples "
                                      f"({error})") from None
        searches += 1
        candidates = [MixCandidate(f"plan {planned[plan_identity(plan)]}" if plan_identity(plan) in planned
                                   else f"mean {rank}", plan, planned.get(plan_identity(plan)), mean_rank=rank)
                      for rank, plan in enumerate(found.plans, start=1)]
        if main is not None and plan_identity(main.best) not in {plan_identity(c.plan) for c in candidates
                                                                 if c.plan is not None}:
            first = _at_mean(main.best, mean, cluster, options)
            fits = first is not None and first.fits
            candidates.append(MixCandidate("plan 1", first if fits else None, 1,
                                           missing="its layout does not fit a microbatch of the mix's largest samples"))
        candidates += [MixCandidate(b.label, b.plan if b.fits else None, None, missing=b.note or "it does not fit")
                       for b in found.baselines]
        full = len(found.plans) >= top  # the space may hold more plans than the list
        last = found.plans[-1].step_time
        beyond = float(last) * (1 - JENSEN_SLACK) if full and last is not None else None
        ranking = rank_on_mix(candidates, mix, shape_workloads, mean, global_batch=global_batch, draws=draws,
                              seed=seed, prune=True, beyond_ms=beyond, cluster=cluster, send_mode=options.send_mode,
                              engine_costs=options.engine_costs)
        # planned_ms is the step at the planned shape: the search's there, where it holds the plan
        ranking = replace(ranking, rows=tuple(replace(row, planned_ms=_planned_ms(row, main)) for row in ranking.rows))
        best = ranking.best
        done = beyond is None or (best is not None and best.expected_ms is not None and best.expected_ms <= beyond)
        if done or top >= max_top:
            ranking = replace(ranking, listed=len(found.plans), searches=searches,
                              cpu_seconds=time.process_time() - started)
            return MixSearch(ranking, len(found.plans), searches, ranking.cpu_seconds)
        top = min(max_top, top * 2)
