"""Plans ranked by their expected step over global batches drawn from a shape mix, with a bound for each.

    from pipeplan.batches import read_mix
    from pipeplan.planner.mix_rank import MixCandidate, rank_on_mix
    mix = read_mix("examples/mix_cameras.csv")
    shaped = [Workload.from_spec(presets.get("pi0", **shape), device) for shape in mix.shapes]
    candidates = [MixCandidate(f"plan {i}", plan, i) for i, plan in enumerate(result.plans, start=1)]
    ranking = rank_on_mix(candidates, mix, shaped, planned=workload, global_batch=256)
    ranking.rows[0].expected_ms, ranking.rows[0].p95_ms, ranking.rows[0].bound_ms, ranking.best_changed

The search ranks plans by one step with every sample alike. Here each plan is
timed on ``draws`` global batches drawn from the mix (the same batches for every
plan, so differences between plans are not sampling noise), its samples split as
pipeplan's balancing splits them, and the plans are ranked by the mean of those
steps; the 95th percentile and the step of a random split (what a distributed
sampler does) are shown beside it. ``plan --mix`` gives it the plans of a search at
the mix's mean sample and lets it stop early (``prune``, *branch and bound* below;
:mod:`pipeplan.planner.mix_search`).

**One plan's step on one drawn batch** (ms, the plan's own time unit):

* per-sample costs: forward, full backward and its weight-gradient part of one
  sample of each shape on each stage, from the workload built at that shape
  (``shape_workloads``, built like the search's, so tensor-parallel collectives
  and the engine's knobs are in them) at the plan's tensor-parallel degree,
  micro-batch size and per-stage recompute (Megatron-LM's ``block:N`` / ``uniform:N``
  by each stage's place, :meth:`~pipeplan.planner.workload.Workload.stage_costs`),
  divided by the micro-batch size; beside a pipeline with ``engine_costs`` and
  ``cluster``, the engine's pipeline costs per shape (DeepSpeed's factor on forward
  and backward and its gradient accumulation, as the search's layouts; the
  accumulation, a per-microbatch pass, carried as ``1/b`` of it per sample);
* balanced: :func:`~pipeplan.batches.balance.balance` of the whole global batch's
  per-sample totals over the ``dp`` replicas (equal counts), then only the
  slowest replica (the largest load: the step waits for it) is split into the
  plan's ``m`` microbatches and ordered by
  :func:`~pipeplan.batches.balance.plan_microbatches`, and timed by
  :func:`~pipeplan.batches.balance.pipeline_makespan` on the plan's own
  simulated schedule (its timeline's action order: 1F1B, interleaved, zero-bubble,
  adaptive alike); random: replica ``r`` takes the ``r``-th run of ``m · b`` drawn
  samples, the most loaded one runs them as drawn;
* *messages* (with ``cluster``): each microbatch's message across each stage
  boundary takes the link's latency plus its own bytes (the sum of its samples'
  ``send_bytes`` at that cut, each shape's) over the link's bandwidth, on the link
  the search prices that boundary with (:meth:`pipeplan.planner.mix_costs._Costs.messages`); eager and
  rendezvous messages are the simulator's per-microbatch messages, serialized ones
  lengthen the sender's forward and backward as the search's do. Without ``cluster``
  they stay in the offset, at the planned shape's bytes;
* the rest of the step is the plan's own and held fixed: ``offset = step_time −
  makespan at the planned shape`` (the same makespan model, messages included where
  priced, at ``planned``'s costs), so the offset holds the exposed gradient
  reduction and the optimizer step (and the messages when not priced); a batch
  whose samples are all the planned shape gives back ``step_time`` exactly.

*Mean sample*: every sample costs the mix's mean on every stage (what planning on
the mean shape would predict); with ``planned`` the mean-sample workload
(:func:`~pipeplan.planner.mix_search.mean_sample_workload`) it is the plan's own
``step_time``. With one replica (``pp = 1``) the pipeline is one rank and its step is
its load, so no microbatch split is simulated.

**Bound** (``bound_ms``, no drawn batch simulated; never above ``expected_ms``, per
drawn batch, so also over the draws): every microbatch holds ``b`` samples, each at
least the cheapest shape's cost on each stage and part (forward, input gradient,
weight gradient, message), and the step only grows with any cost, so with ``L`` those
cheapest costs: rank ``r``'s first action starts no sooner than at ``L`` (``head_r``),
its actions take their drawn costs one after the other (``busy_r``, the slowest
replica's samples' work on its stages, read off the draw without simulating it), and
the longest chain after its last action lasts at least as long as at ``L``
(``tail_r``); the bound is ``offset +`` the mean over draws of ``max(makespan at L,
max_r head_r + busy_r + tail_r)``. With one rank: ``offset +`` the mean of
:func:`~pipeplan.batches.balance.lower_bound` of each draw over the replicas.
*Branch and bound* (``prune=True``): the searched plans are timed in order of their
bound, and once the next bound is no less than the best expected step found the rest
are not timed (``expected_ms = None``, their ``bound_ms`` kept): none of them can be
faster. The mean-sample step is not such a bound: Jensen's inequality holds for a
fixed split and order, but each drawn batch gets its own (the fastest of four orders:
a cheap first microbatch fills the pipeline sooner), the mean is over a few draws, and
only the most loaded replica is timed; tests/test_plan_mix.py shows plans expected
below their mean-sample step.

**Approximations, stated**: only the most loaded replica's pipeline is timed (a
less loaded one could have a worse order; with balanced loads they differ by at
most one round's cost range, :func:`~pipeplan.batches.balance.balance`'s
guarantee); the offset does not follow the compute (gradient-reduction exposure
behind a shorter backward, FSDP's per-microbatch gathers); the data-parallel
split runs :data:`DP_REFINE` swap rounds of refinement (0: the dealing rounds
only, whose guarantee holds; at thousands of samples the refinement's first
round alone costs more than all the dealing).
Plans whose schedule has actions other than ``F``, ``B``,
``I``, ``W`` (the dual-rate pipeline's updates) or no simulated timeline are
kept with ``expected_ms = None``, marked *not re-ranked*.

**Cost bound**: each plan gets at most ``draws`` batches and fewer when its
schedule is long: ``draws · actions ≤`` :data:`WORK_PER_PLAN` (at least
:data:`MIN_DRAWS`). Torch-free.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ..batches.balance import balance, lower_bound, microbatch_stage_costs, pipeline_makespan, plan_microbatches
from ..batches.mix import Mix
from ..errors import InvalidInputError
from ..costs import CommModel
from ..plan import Plan
from ..schedule import Schedule
from ..simulate import simulate
from .mix_costs import _Costs, _serialized, _tails, _uniform
from .resolution import resolution
from .cluster import Cluster
from .engine_costs import EngineCosts
from .workload import Workload

__all__ = ["MixCandidate", "MixRow", "MixRanking", "rank_on_mix", "DEFAULT_DRAWS", "MIN_DRAWS", "WORK_PER_PLAN",
           "DP_REFINE"]

#: Global batches drawn per plan (at most).
DEFAULT_DRAWS = 32
#: Global batches drawn per plan at least, whatever its schedule's length.
MIN_DRAWS = 8
#: Schedule actions timed per plan at most (draws × actions per draw: the balanced orders and the random one).
WORK_PER_PLAN = 200_000
#: Swap rounds of the data-parallel split's refinement (:func:`~pipeplan.batches.balance.balance`'s ``refine``; 0: none).
DP_REFINE = 0

_TIMED_KINDS = frozenset({"F", "B", "I", "W"})
_ORDERS = 4  # plan_microbatches times four orders of the balanced microbatches


@dataclass(frozen=True)
class MixCandidate:
    """A plan to time on the mix: its row label, the plan, its rank in the search at the planned shape
    (``planned_rank``) and in the search at the mix's mean sample (``mean_rank``; both ``None``: a
    baseline), and why there is no plan (``plan is None``: a baseline that was not built or does not fit)."""

    label: str
    plan: Plan | None
    planned_rank: int | None
    missing: str = "no plan"
    mean_rank: int | None = None


@dataclass(frozen=True)
class MixRow:
    """One plan's steps on the mix (ms, or the plan's time unit); ``None`` where it was not re-ranked.

    Attributes:
        label, planned_rank: as the :class:`MixCandidate`.
        plan: the plan.
        planned_ms: its step at the planned shape (the search's ``step_time``).
        mean_sample_ms: its step when every sample costs the mix's mean.
        expected_ms: the mean of its steps over the drawn batches with pipeplan's balancing.
        p95_ms: their 95th percentile.
        random_ms, random_p95_ms: the same with a random split and microbatches as drawn.
        draws: batches drawn for it.
        rank: its rank among the searched plans by ``expected_ms`` (1 first; ``None``: a
            baseline, or not re-ranked).
        note: why it was not re-ranked, else ``""``.
        mean_rank: its rank in the search at the mix's mean sample (``None``: not from it).
        bound_ms: a lower bound of ``expected_ms`` (module doc, *bound*); for a plan the
            branch and bound did not time, what ruled it out; ``None``: not computed.
    """

    label: str
    planned_rank: int | None
    plan: Plan | None
    planned_ms: float | None
    mean_sample_ms: float | None = None
    expected_ms: float | None = None
    p95_ms: float | None = None
    random_ms: float | None = None
    random_p95_ms: float | None = None
    draws: int = 0
    rank: int | None = None
    note: str = ""
    mean_rank: int | None = None
    bound_ms: float | None = None

    @property
    def re_ranked(self) -> bool:
        """It has an expected step on the mix."""
        return self.expected_ms is not None

    @property
    def baseline(self) -> bool:
        """A baseline's row (not a plan of the search)."""
        return self.planned_rank is None and self.mean_rank is None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields (the plan as ``tp``, ``pp``, ``dp``, ``schedule``, ``micro_batch_size``, ``num_microbatches``)."""
        plan = self.plan
        shape = {} if plan is None else {"tp": plan.tp, "pp": plan.pp, "dp": plan.dp, "dp_mode": plan.dp_mode,
                                         "schedule": plan.schedule, "micro_batch_size": plan.micro_batch_size,
                                         "num_microbatches": plan.num_microbatches,
                                         "layers_per_stage": list(plan.layers_per_stage)}
        return {"label": self.label, "planned_rank": self.planned_rank, "rank": self.rank, "re_ranked": self.re_ranked,
                "planned_ms": self.planned_ms, "mean_sample_ms": self.mean_sample_ms,
                "expected_ms": self.expected_ms, "p95_ms": self.p95_ms, "random_ms": self.random_ms,
                "random_p95_ms": self.random_p95_ms, "draws": self.draws, "note": self.note, "plan": shape,
                "mean_rank": self.mean_rank, "bound_ms": self.bound_ms}


@dataclass(frozen=True)
class MixRanking:
    """The candidates timed on the mix.

    Attributes:
        mix: the mix.
        rows: the searched plans by ``expected_ms`` (fastest first), then those the branch and
            bound did not time by ``bound_ms``, then those not re-ranked (in the given order), then
            the baselines in their given order.
        seed: the seed of the drawn batches.
        cpu_seconds: CPU time the ranking took.
        timed: searched plans timed on the drawn batches.
        bounded: searched plans the branch and bound left untimed (their bound ruled them out).
        beyond_ms: a lower bound of the expected step of every plan of the space not among
            the rows (``None``: none given, or the rows hold the whole space).
        listed: plans the search at the mix's mean sample listed (0: the plans were given,
            :func:`rank_on_mix` alone); ``searches``: how many times it searched.
    """

    mix: Mix
    rows: tuple[MixRow, ...]
    seed: int
    cpu_seconds: float
    timed: int = 0
    bounded: int = 0
    beyond_ms: float | None = None
    listed: int = 0
    searches: int = 0

    @property
    def exact(self) -> bool:
        """The best plan on the mix is the best of the listed plans, and no plan beyond them reaches its expected
        step within the measured margin: ``beyond_ms`` is the list's last mean-sample step less
        :data:`~pipeplan.planner.mix_search.JENSEN_SLACK` (1%, the largest shortfall measured, not a proof;
        :mod:`pipeplan.planner.mix_search`). ``True`` without ``beyond_ms`` (the whole space was listed)."""
        best = self.best
        return bool(best is not None and best.expected_ms is not None and (
            self.beyond_ms is None or best.expected_ms <= self.beyond_ms))

    @property
    def plans(self) -> tuple[MixRow, ...]:
        """The searched plans' rows (not the baselines)."""
        return tuple(row for row in self.rows if not row.baseline)

    @property
    def best(self) -> MixRow | None:
        """The searched plan fastest on the mix (``None``: none re-ranked)."""
        ranked = [row for row in self.plans if row.rank == 1]
        return ranked[0] if ranked else None

    @property
    def best_changed(self) -> bool:
        """The plan fastest on the mix is not the search's plan 1."""
        best = self.best
        return best is not None and best.planned_rank != 1

    @property
    def best_ties(self) -> bool:
        """The new best and plan 1 are less than one unit of the last shown figure apart on the mix."""
        best = self.best
        first = next((row for row in self.plans if row.planned_rank == 1), None)
        if best is None or first is None or first.expected_ms is None or best.expected_ms is None:
            return False
        return abs(first.expected_ms - best.expected_ms) < resolution(best.expected_ms)

    def to_dict(self) -> dict[str, Any]:
        """``file``, ``shapes`` (each with its ``weight``), ``seed``, ``rows``, ``best_changed``, ``cpu_seconds``."""
        best = self.best
        return {"file": self.mix.source,
                "shapes": [{**shape, "weight": weight} for shape, weight in zip(self.mix.shapes, self.mix.weights)],
                "seed": self.seed, "rows": [row.to_dict() for row in self.rows],
                "best_planned_rank": None if best is None else best.planned_rank,
                "best_changed": self.best_changed, "best_ties_plan_1": self.best_ties,
                "cpu_seconds": self.cpu_seconds, "plans_timed": self.timed, "plans_bounded": self.bounded,
                "beyond_ms": self.beyond_ms, "plans_listed": self.listed, "searches": self.searches,
                "exact": self.exact,
                "best_mean_rank": None if best is None else best.mean_rank}


def _timed_schedule(plan: Plan) -> tuple[Schedule | None, str]:
    """The plan's simulated schedule, or ``None`` and why it cannot be timed here."""
    if plan.timeline is None or plan.step_time is None:
        return None, "not re-ranked: no simulated step"
    schedule = plan.timeline.schedule
    extra = set(schedule.present_kinds) - _TIMED_KINDS
    if extra:
        return None, (f"not re-ranked: its schedule has {', '.join(sorted(extra))} actions "
                      "(per-microbatch costs cover F, B, I and W)")
    return schedule, ""


class _Prepared:
    """One plan ready to time: its per-sample costs, offset, draws, and (for pipelines) its bound's parts."""

    def __init__(self, candidate: MixCandidate, plan: Plan, schedule: Schedule, costs: _Costs, mix: Mix,
                 batches: list[np.ndarray], max_draws: int, splits: dict[tuple[Any, ...], np.ndarray],
                 cluster: Cluster | None = None, send_mode: str = "eager") -> None:
        self.candidate, self.plan, self.schedule, self.batches, self.splits = candidate, plan, schedule, batches, splits
        assert plan.step_time is not None
        self.b, self.m, self.dp = plan.micro_batch_size, plan.num_microbatches, plan.dp
        self.total = self.b * self.m * self.dp
        self.one_rank = schedule.num_ranks == 1
        self.forward, self.backward, self.weight = costs.shapes(plan)  # [shape, stage]
        pf, pb, pw = costs.stage(-1, plan)
        # messages per microbatch (module doc, *messages*): on the sender's timeline when serialized, else links
        self.send_mode = "eager" if send_mode == "serialized" else send_mode
        self.message: np.ndarray | None = None  # [shape, boundary]
        planned_message: np.ndarray | None = None
        if cluster is not None and not self.one_rank:
            message, planned_message = costs.messages(plan, schedule, cluster)
            if send_mode == "serialized":
                self.forward, self.backward = _serialized(self.forward, self.backward, message)
                folded = _serialized(pf[None, :], pb[None, :], planned_message[None, :])
                pf, pb = folded[0][0], folded[1][0]
                planned_message = None
            else:
                self.message = message
        self.sample_total = self.forward.sum(axis=1) + self.backward.sum(axis=1)  # [shape]
        weights = np.asarray(mix.weights)
        b, m = self.b, self.m
        planned_messages = None if planned_message is None else _uniform(planned_message, b, m)
        self.offset = plan.step_time - self.makespan(_uniform(pf, b, m), _uniform(pb, b, m), _uniform(pw, b, m),
                                                     planned_messages)
        self.mean_sample = self.offset + self.makespan(
            _uniform(weights @ self.forward, b, m), _uniform(weights @ self.backward, b, m),
            _uniform(weights @ self.weight, b, m),
            None if self.message is None else _uniform(weights @ self.message, b, m))
        actions = 1 if self.one_rank else schedule.num_actions * (_ORDERS + 1)
        self.draws = min(len(batches), max(MIN_DRAWS, min(max_draws, WORK_PER_PLAN // actions)))
        for drawn in batches[:self.draws]:
            if drawn.size < self.total:
                raise InvalidInputError(f"{candidate.label}: {self.total} samples per step, more than the "
                                        f"{drawn.size} drawn")
        self._bound: float | None = None
        self._row: MixRow | None = None

    def makespan(self, f: np.ndarray, bw: np.ndarray, w: np.ndarray, messages: np.ndarray | None = None) -> float:
        if self.one_rank:
            return float(f.sum() + bw.sum())
        return pipeline_makespan(f, bw, weight=w, schedule=self.schedule, messages=messages, send_mode=self.send_mode)

    def slowest(self, index: int) -> np.ndarray:
        """Indices (into draw ``index``'s first ``total`` samples) of the most loaded balanced replica (cached)."""
        shapes = self.batches[index][:self.total]
        if self.dp == 1:
            return np.arange(self.total)
        key = (index, self.dp, self.total, self.sample_total.tobytes())
        members = self.splits.get(key)
        if members is None:
            split = balance(self.sample_total[shapes], self.dp, refine=DP_REFINE)
            members = self.splits[key] = split.members(int(np.argmax(split.loads)))
        return members

    def bound(self) -> float:
        """A lower bound of :meth:`row`'s ``expected_ms`` that simulates no drawn batch (module doc, *bound*)."""
        if self._bound is not None:
            return self._bound
        if self.one_rank:  # the step is the most loaded replica's load, no less than balance's lower_bound
            self._bound = self.offset + float(np.mean([lower_bound(self.sample_total[drawn[:self.total]], self.dp)
                                                       for drawn in self.batches[:self.draws]]))
            return self._bound
        b, m, schedule = self.b, self.m, self.schedule
        # every microbatch holds b samples, each at least the cheapest shape's cost on each stage and part
        low_f = self.forward.min(axis=0)
        low_w = self.weight.min(axis=0)
        low_b = (self.backward - self.weight).min(axis=0) + low_w
        comm = None
        if self.message is not None and schedule.num_stages > 1:  # each message no shorter than the cheapest's
            comm = CommModel(0.0, 1.0, send_mode=self.send_mode,  # type: ignore[arg-type]
                             microbatch_bytes=_uniform(self.message.min(axis=0), b, m).tolist())
        timeline = simulate(schedule, microbatch_stage_costs(_uniform(low_f, b, m), _uniform(low_b, b, m),
                                                             _uniform(low_w, b, m)), comm)
        starts, first = [], 0
        for order in schedule.orders:
            starts.append(float(timeline.start[first]) if order else 0.0)
            first += len(order)
        lows = {"F": b * low_f, "B": b * low_b, "I": b * (low_b - low_w), "W": b * low_w}
        tails = _tails(schedule, lows)
        per_rank = np.stack([(self.forward + self.backward)[:, list(schedule.stages_of(rank))].sum(axis=1)
                             for rank in range(schedule.num_ranks)], axis=1)  # [shape, rank]: one sample's work
        head = np.asarray(starts)
        shapes_count = per_rank.shape[0]
        steps = []
        for index in range(self.draws):
            shapes = self.batches[index][:self.total][self.slowest(index)]
            busy = np.bincount(shapes, minlength=shapes_count) @ per_rank
            steps.append(max(timeline.makespan, float((head + busy + tails).max())))
        self._bound = self.offset + float(np.mean(steps))
        return self._bound

    def row(self) -> MixRow:
        """The plan timed on its draws (with its bound; cached)."""
        if self._row is None:
            self.bound()
            self._row = self._time()
        return self._row

    def _time(self) -> MixRow:
        forward, backward, weight = self.forward, self.backward, self.weight
        b, m, dp, one_rank = self.b, self.m, self.dp, self.one_rank
        balanced_steps, random_steps = [], []
        for index, drawn in enumerate(self.batches[:self.draws]):
            shapes = drawn[:self.total]
            totals = self.sample_total[shapes]
            # random: replica r runs the r-th run of m·b drawn samples, in draw order
            loads = totals.reshape(dp, m * b).sum(axis=1)
            slow = int(np.argmax(loads))
            if one_rank:
                random_steps.append(float(loads[slow]))
            else:
                mine = shapes[slow * m * b:(slow + 1) * m * b].reshape(m, b)
                random_steps.append(self.makespan(forward[mine].sum(axis=1).T, backward[mine].sum(axis=1).T,
                                                  weight[mine].sum(axis=1).T,
                                                  None if self.message is None else self.message[mine].sum(axis=1).T))
            # balanced: the global batch over dp replicas, then the slowest replica's microbatches
            members = self.slowest(index)
            if one_rank:
                balanced_steps.append(float(totals[members].sum()))
            else:
                picked = shapes[members]
                balanced_steps.append(plan_microbatches(
                    totals[members], m, sample_forward=forward[picked], sample_backward=backward[picked],
                    sample_weight=weight[picked], schedule=self.schedule, send_mode=self.send_mode,
                    sample_message=None if self.message is None else self.message[picked]).makespan)
        balanced = self.offset + np.asarray(balanced_steps)
        random = self.offset + np.asarray(random_steps)
        candidate, plan = self.candidate, self.plan
        expected = float(balanced.mean())
        return MixRow(candidate.label, candidate.planned_rank, plan, plan.step_time,
                      mean_sample_ms=float(self.mean_sample), expected_ms=expected,
                      p95_ms=float(np.percentile(balanced, 95)), random_ms=float(random.mean()),
                      random_p95_ms=float(np.percentile(random, 95)), draws=self.draws,
                      mean_rank=candidate.mean_rank, bound_ms=self._bound)

    def untimed(self, best: float) -> MixRow:
        """The row of a plan the bound rules out: its bound, no expected step."""
        candidate, plan = self.candidate, self.plan
        return MixRow(candidate.label, candidate.planned_rank, plan, plan.step_time,
                      mean_sample_ms=float(self.mean_sample), draws=0, mean_rank=candidate.mean_rank,
                      bound_ms=self._bound,
                      note=f"not timed: its bound {self._bound:.4g} is no less than the best expected {best:.4g}")


def _prepare(candidate: MixCandidate, costs: _Costs, mix: Mix, batches: list[np.ndarray], max_draws: int,
             splits: dict[tuple[Any, ...], np.ndarray], cluster: Cluster | None = None,
             send_mode: str = "eager") -> MixRow | _Prepared:
    plan = candidate.plan
    planned_ms = None if plan is None else plan.step_time
    if plan is None:
        return MixRow(candidate.label, candidate.planned_rank, None, None, note=f"not re-ranked: {candidate.missing}",
                      mean_rank=candidate.mean_rank)
    schedule, why = _timed_schedule(plan)
    if schedule is None or plan.step_time is None:
        return MixRow(candidate.label, candidate.planned_rank, plan, planned_ms, note=why, mean_rank=candidate.mean_rank)
    return _Prepared(candidate, plan, schedule, costs, mix, batches, max_draws, splits, cluster, send_mode)


def rank_on_mix(candidates: Sequence[MixCandidate], mix: Mix, shape_workloads: Sequence[Workload], planned: Workload,
                *, global_batch: int, draws: int = DEFAULT_DRAWS, seed: int = 0, prune: bool = False,
                beyond_ms: float | None = None, cluster: Cluster | None = None, send_mode: str = "eager",
                engine_costs: EngineCosts | None = None) -> MixRanking:
    """Time each candidate on batches drawn from ``mix`` and rank the searched ones by the expected step.

    Args:
        candidates: the searched plans (``planned_rank`` or ``mean_rank`` set) and the baselines (neither).
        mix: the shape mix.
        shape_workloads: per mix shape (in ``mix.shapes`` order), the workload the search would
            use at that shape (same spec options, device, links and engine knobs).
        planned: the workload the plans' ``step_time`` was simulated on (the offset's, module doc).
        global_batch: samples per step (every candidate's ``b · m · dp``).
        draws: global batches drawn (every plan sees the same ones; a long schedule fewer, see
            the module doc); ``seed``: their seed.
        prune: branch and bound (module doc): the searched plans are timed in order of their
            bound, and those whose bound is no less than the best expected step found are not
            timed (rows with ``expected_ms = None`` and their ``bound_ms``); the baselines and
            plan 1 (``planned_rank == 1``) are always timed. ``False``: every plan is timed.
        beyond_ms: a lower bound of the expected step of the plans of the space that are not
            among the candidates (:mod:`pipeplan.planner.mix_search`), kept in the ranking.
        cluster, send_mode: the search's links and send mode: each microbatch's messages between
            stages are then priced from its samples' bytes (module doc, *messages*); ``None``: the
            messages stay in the offset, at the planned shape's bytes.
        engine_costs: the search's engine costs (:class:`~pipeplan.planner.engine_costs.EngineCosts`):
            beside a pipeline, DeepSpeed's pipeline engine's factor and gradient accumulation are
            applied to each shape's stage costs (on ``cluster``'s device; without ``cluster`` they
            stay in the offset, at the planned shape's costs).

    Raises:
        InvalidInputError: ``shape_workloads`` not one per shape, ``draws < 1``, or a
            candidate whose ``b · m · dp`` exceeds ``global_batch``.
    """
    if len(shape_workloads) != len(mix.shapes):
        raise InvalidInputError(f"{len(shape_workloads)} workloads for {len(mix.shapes)} shapes of mix {mix.source}")
    if draws < 1:
        raise InvalidInputError(f"draws must be >= 1, got {draws}")
    started = time.process_time()
    rng = np.random.default_rng(seed)
    batches = [rng.choice(len(mix.shapes), size=global_batch, p=np.asarray(mix.weights)) for _ in range(draws)]
    costs = _Costs(shape_workloads, planned, engine_costs, None if cluster is None else cluster.device)
    splits: dict[tuple[Any, ...], np.ndarray] = {}
    prepared = [_prepare(candidate, costs, mix, batches, draws, splits, cluster, send_mode) for candidate in candidates]
    rows: list[MixRow | None] = [item if isinstance(item, MixRow) else None for item in prepared]
    searched = [i for i, c in enumerate(candidates) if not _is_baseline(c)]
    always = [i for i, item in enumerate(prepared) if isinstance(item, _Prepared)
              and (_is_baseline(candidates[i]) or candidates[i].planned_rank == 1 or not prune)]
    for i in always:
        item = prepared[i]
        assert isinstance(item, _Prepared)
        rows[i] = item.row()
    best = min((row.expected_ms for i, row in enumerate(rows) if i in searched and row is not None
                and row.expected_ms is not None), default=math.inf)
    pending = sorted((i for i in searched if rows[i] is None and isinstance(prepared[i], _Prepared)),
                     key=lambda i: (_bound_of(prepared[i]), i))
    bounded = 0
    for i in pending:
        item = prepared[i]
        assert isinstance(item, _Prepared)
        if item.bound() >= best:
            rows[i] = item.untimed(best)
            bounded += 1
            continue
        rows[i] = item.row()
        best = min(best, rows[i].expected_ms or math.inf)  # type: ignore[union-attr]
    done = [row for row in rows if row is not None]
    searched_rows = [row for row in done if not row.baseline]
    timed = sorted((row for row in searched_rows if row.re_ranked), key=lambda row: (row.expected_ms, _order(row)))
    ranked = [_with_rank(row, rank) for rank, row in enumerate(timed, start=1)]
    untimed = sorted((row for row in searched_rows if not row.re_ranked and row.bound_ms is not None),
                     key=lambda row: (row.bound_ms, _order(row)))
    ordered = (ranked + untimed + [row for row in searched_rows if not row.re_ranked and row.bound_ms is None]
               + [row for row in done if row.baseline])
    return MixRanking(mix=mix, rows=tuple(ordered), seed=seed, cpu_seconds=time.process_time() - started,
                      timed=sum(1 for row in searched_rows if row.re_ranked), bounded=bounded, beyond_ms=beyond_ms)


def _bound_of(item: MixRow | _Prepared) -> float:
    assert isinstance(item, _Prepared)
    return item.bound()


def _is_baseline(candidate: MixCandidate) -> bool:
    return candidate.planned_rank is None and candidate.mean_rank is None


def _order(row: MixRow) -> tuple[int, int]:
    """Ties: the search's order (the mean-sample rank, then the planned rank)."""
    return (row.mean_rank if row.mean_rank is not None else 10**9,
            row.planned_rank if row.planned_rank is not None else 10**9)


def _with_rank(row: MixRow, rank: int) -> MixRow:
    return replace(row, rank=rank)
