"""The expected pipeline step over global batches drawn from a shape mix, random vs balanced microbatches.

    from pipeplan.batches import read_mix, mix_costs
    from pipeplan.batches.pipeline import mix_pipeline_step
    costs = mix_costs("pi0", read_mix("mix.csv"), micro_batch_size=4)
    step = mix_pipeline_step(costs, layers_per_stage=[5, 6, 6, 5], num_microbatches=8, micro_batch_size=4)
    step.mean_sample_ms, step.random_mean_ms, step.balanced_p95_ms
    mix_pipeline_step(costs, [5, 6, 6, 5], 8, 4, replicas=16)   # 16 data-parallel pipelines

Each draw takes ``num_microbatches × micro_batch_size`` samples from the mix; a
microbatch's cost on a stage is the sum of its samples' costs there
(:meth:`~pipeplan.batches.mix.MixCosts.stage_forward_backward`: variable-length
execution, no padding). *Random*: microbatches in draw order, as a data loader
makes them. *Balanced*: :func:`~pipeplan.batches.balance.plan_microbatches`
(equal counts, balanced totals, the fastest of a few orders). The step of each
is :func:`~pipeplan.batches.balance.pipeline_makespan` (no communication time);
*mean sample* is the step when every sample costs the mix's mean on every stage,
what a plan on the mean shape predicts; *bound* is the busiest stage's total
work, a lower bound on any order.

One drawn batch, simulated as it runs: :func:`mix_batch_step` gives each microbatch
its own forward, backward and weight-gradient time on each stage
(:meth:`StageCosts.per_microbatch <pipeplan.costs.StageCosts.per_microbatch>`), runs
the schedule with its messages, and splits each rank's idle time into the schedule's
bubble and the variation (:func:`pipeplan.variation.idle_split`), random and balanced::

    from pipeplan.batches.pipeline import mix_batch_step
    batch = mix_batch_step(costs, [5, 6, 6, 5], 8, 4, schedule="1f1b")
    batch.random.split.variation, batch.balanced.split.variation   # per rank, ms

torch-free.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._validation import positive_int
from ..costs import CommModel, StageCosts
from ..schedule import Schedule
from ..simulate import simulate
from ..timeline import Timeline
from ..variation import IdleSplit, idle_split
from .balance import _schedule, balance, microbatch_stage_costs, pipeline_makespan, plan_microbatches
from .mix import MixCosts

__all__ = ["MixStep", "mix_pipeline_step", "BatchRun", "MixBatch", "mix_batch_step"]


@dataclass(frozen=True)
class MixStep:
    """Pipeline steps (ms) over ``draws`` drawn global batches; ``*_p95_ms`` the 95th percentile."""

    draws: int
    mean_sample_ms: float
    random_mean_ms: float
    random_p95_ms: float
    balanced_mean_ms: float
    balanced_p95_ms: float
    bound_mean_ms: float

    def to_dict(self) -> dict[str, float]:
        """The fields as a JSON-ready mapping."""
        return {key: getattr(self, key) for key in self.__dataclass_fields__}


def mix_pipeline_step(costs: MixCosts, layers_per_stage: Sequence[int], num_microbatches: int,
                      micro_batch_size: int, *, replicas: int = 1, draws: int = 50, seed: int = 0,
                      schedule: str | Schedule = "1f1b") -> MixStep:
    """The step of ``schedule`` over ``draws`` global batches drawn from ``costs.mix`` (see the module doc).

    ``replicas``: data-parallel pipeline replicas; a global batch is ``replicas × m × b``
    samples and the step is the slowest replica's. *Random*: replica ``r`` takes the
    ``r``-th run of ``m × b`` drawn samples; *balanced*: :func:`~pipeplan.batches.balance.balance`
    over replicas on the samples' total costs, then :func:`plan_microbatches` in each. The
    bound is then the busiest stage's work averaged over replicas.
    """
    count = positive_int("num_microbatches", num_microbatches)
    size = positive_int("micro_batch_size", micro_batch_size)
    copies = positive_int("replicas", replicas)
    total_draws = positive_int("draws", draws)
    forward, backward = costs.stage_forward_backward(layers_per_stage)  # [shape, stage]
    stages = forward.shape[1]
    built = _schedule(schedule, stages, count)
    weights = np.asarray(costs.mix.weights)
    mean_forward = np.repeat((size * weights @ forward)[:, None], count, axis=1)
    mean_backward = np.repeat((size * weights @ backward)[:, None], count, axis=1)
    mean_sample = pipeline_makespan(mean_forward, mean_backward, schedule=built)
    rng = np.random.default_rng(seed)
    random_steps, balanced_steps, bounds = [], [], []
    for _ in range(total_draws):
        shapes = costs.draw(copies * count * size, seed=rng)
        sample_forward, sample_backward = forward[shapes], backward[shapes]  # [sample, stage]
        totals = sample_forward.sum(axis=1) + sample_backward.sum(axis=1)
        random_step = 0.0
        for replica in range(copies):
            part = slice(replica * count * size, (replica + 1) * count * size)
            random_forward = sample_forward[part].reshape(count, size, stages).sum(axis=1).T
            random_backward = sample_backward[part].reshape(count, size, stages).sum(axis=1).T
            random_step = max(random_step, pipeline_makespan(random_forward, random_backward, schedule=built))
        random_steps.append(random_step)
        split = balance(totals, copies)
        balanced_step = 0.0
        for replica in range(copies):
            mine = split.members(replica)
            plan = plan_microbatches(totals[mine], count, sample_forward=sample_forward[mine],
                                     sample_backward=sample_backward[mine], schedule=built)
            balanced_step = max(balanced_step, plan.makespan)
        balanced_steps.append(balanced_step)
        bounds.append(float((sample_forward + sample_backward).sum(axis=0).max()) / copies)
    return MixStep(draws=total_draws, mean_sample_ms=mean_sample,
                   random_mean_ms=float(np.mean(random_steps)), random_p95_ms=float(np.percentile(random_steps, 95)),
                   balanced_mean_ms=float(np.mean(balanced_steps)),
                   balanced_p95_ms=float(np.percentile(balanced_steps, 95)), bound_mean_ms=float(np.mean(bounds)))


@dataclass(frozen=True)
class BatchRun:
    """One order of a drawn batch's microbatches, simulated.

    Attributes:
        shapes: per microbatch (in run order), the mix row of each of its samples.
        costs: the per-(stage, microbatch) costs it ran on (ms).
        comm: its messages (bytes per boundary and microbatch where they follow the shapes).
        timeline: the simulated step.
        split: its idle time per rank, bubble vs variation, and the step's bounds.
    """

    shapes: tuple[tuple[int, ...], ...]
    costs: StageCosts
    comm: CommModel | None
    timeline: Timeline
    split: IdleSplit

    def to_dict(self) -> dict[str, Any]:
        """The microbatches' shapes and the idle split (JSON-ready)."""
        return {"microbatch_shapes": [list(shapes) for shapes in self.shapes], **self.split.to_dict()}


@dataclass(frozen=True)
class MixBatch:
    """A global batch drawn from a mix, in draw order (``random``) and as balanced and ordered (``balanced``)."""

    seed: int
    random: BatchRun
    balanced: BatchRun

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return {"seed": self.seed, "random": self.random.to_dict(), "balanced": self.balanced.to_dict()}


def mix_batch_step(costs: MixCosts, layers_per_stage: Sequence[int], num_microbatches: int, micro_batch_size: int,
                   *, schedule: str | Schedule = "1f1b", comm: CommModel | None = None, seed: int = 0,
                   activation_bytes: Sequence[float] | None = None, message_bytes: bool = True) -> MixBatch:
    """One global batch of ``num_microbatches × micro_batch_size`` samples drawn from ``costs.mix``, simulated.

    A microbatch's forward, backward and weight-gradient time on a stage are the sums of its
    samples' (each sample at its own shape); ``schedule`` (a registered name, full
    backwards where it has the option, or a built :class:`~pipeplan.schedule.Schedule` of
    that shape) runs them with ``comm``'s latency, bandwidth and send mode, each message
    across a cut the sum of its samples' bytes there (``message_bytes=False``: ``comm``'s
    own bytes for every microbatch). *Random*: microbatches in draw order; *balanced*:
    :func:`~pipeplan.batches.balance.plan_microbatches` (equal counts, balanced totals, the
    fastest of its orders on this schedule without messages). ``activation_bytes``: per
    stage, for the timelines' memory (default 1).
    """
    count = positive_int("num_microbatches", num_microbatches)
    size = positive_int("micro_batch_size", micro_batch_size)
    stage_costs = [profile.stage_costs(layers_per_stage) for profile in costs.profiles]
    forward = np.stack([np.asarray(stage.forward) for stage in stage_costs])  # [shape, stage]
    backward = np.stack([np.asarray(stage.backward) for stage in stage_costs])
    weight = np.stack([np.asarray(stage.weight) for stage in stage_costs])
    sizes = np.stack([np.asarray(profile.boundary_bytes(layers_per_stage), dtype=float).reshape(-1)
                      for profile in costs.profiles])  # [shape, boundary]
    built = _schedule(schedule, forward.shape[1], count)
    shapes = costs.draw(count * size, seed=seed)
    totals = forward[shapes].sum(axis=1) + backward[shapes].sum(axis=1)
    plan = plan_microbatches(totals, count, sample_forward=forward[shapes], sample_backward=backward[shapes],
                             sample_weight=weight[shapes], schedule=built)
    drawn = tuple(tuple(range(mb * size, (mb + 1) * size)) for mb in range(count))

    def run(groups: tuple[tuple[int, ...], ...]) -> BatchRun:
        picked = [shapes[list(group)] for group in groups]
        stage_costs = microbatch_stage_costs(np.stack([forward[p].sum(axis=0) for p in picked], axis=1),
                                             np.stack([backward[p].sum(axis=0) for p in picked], axis=1),
                                             np.stack([weight[p].sum(axis=0) for p in picked], axis=1),
                                             activation_bytes)
        messages = comm
        if comm is not None and message_bytes and sizes.shape[1]:
            messages = CommModel(comm.latency, comm.bandwidth, send_mode=comm.send_mode,
                                 microbatch_bytes=np.stack([sizes[p].sum(axis=0) for p in picked], axis=1).tolist())
        timeline = simulate(built, stage_costs, messages)
        return BatchRun(shapes=tuple(tuple(int(i) for i in p) for p in picked), costs=stage_costs, comm=messages,
                        timeline=timeline, split=idle_split(built, stage_costs, messages, timeline=timeline))

    return MixBatch(seed=seed, random=run(drawn), balanced=run(plan.microbatches))
