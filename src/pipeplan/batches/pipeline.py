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
work, a lower bound on any order. torch-free.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .._validation import positive_int
from ..schedule import Schedule
from .balance import _schedule, balance, pipeline_makespan, plan_microbatches
from .mix import MixCosts

__all__ = ["MixStep", "mix_pipeline_step"]


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
