"""Batches whose samples are not alike: a shape mix, its per-sample costs, and balancing them over ranks.

    from pipeplan.batches import read_mix, mix_costs, balance, random_split
    costs = mix_costs("pi0", read_mix("mix.csv"), micro_batch_size=8)
    batch = costs.costs_of(costs.draw(4096, seed=0))     # ms per sample of one global batch
    balance(batch, 256).makespan / random_split(batch, 256).makespan

Modules: ``mix`` (the mix file and :class:`MixCosts`), ``balance`` (the heuristic, its
bound, the exact method, microbatches and a pipeline's step with per-microbatch
costs), ``baselines`` (random split, bucketing, WLB-LLM packing), ``pipeline`` (the
expected pipeline step over batches drawn from a mix). The drop-in torch
sampler is :mod:`pipeplan.runtime.balanced_sampler`. torch-free.
"""

from __future__ import annotations

from .balance import Balance, MicrobatchPlan, balance, balance_exact, lower_bound, pipeline_makespan, plan_microbatches
from .baselines import bucketed_batches, packing_split, random_split
from .mix import SHAPE_FIELDS, Mix, MixCosts, mix_costs, parse_mix, read_mix

__all__ = ["Balance", "MicrobatchPlan", "balance", "balance_exact", "lower_bound", "pipeline_makespan",
           "plan_microbatches", "bucketed_batches", "packing_split", "random_split", "SHAPE_FIELDS", "Mix",
           "MixCosts", "mix_costs", "parse_mix", "read_mix"]
