"""The honest baselines :func:`pipeplan.batches.balance.balance` is compared with.

Each returns a :class:`~pipeplan.batches.balance.Balance` (rank per sample, load per rank)::

    import numpy as np
    from pipeplan.batches.baselines import random_split, bucketed_batches, packing_split
    costs = np.array([4.0, 1, 1, 2, 3, 1, 2, 2])
    random_split(costs, 2, seed=0).makespan
    bucketed_batches(costs, 2).makespan
    packing_split(costs, 2).makespan

* :func:`random_split`: what ``torch.utils.data.DistributedSampler`` does: shuffle
  the indices with a seeded generator, then rank ``r`` takes every ``R``-th index
  starting at ``r`` (torch/utils/data/distributed.py, ``indices[rank:total_size:num_replicas]``);
* :func:`bucketed_batches`: sort-by-length bucketing (Hugging Face ``group_by_length``,
  fairseq's and Megatron's length-sorted batching): the batch sorted by cost and cut
  into contiguous per-rank pieces, so each rank's samples are alike (it minimises
  padding inside a rank, not the gap between ranks);
* :func:`packing_split`: the workload-balanced packing rule of WLB-LLM (Wang et al.,
  "WLB-LLM: Workload-Balanced 4D Parallelism for Large Language Model Training",
  OSDI 2025, arXiv 2503.17924: the "workload-aware variable-length document
  packing" of its pipeline-parallel level): samples sorted by estimated workload, costliest first, each put into
  the bin with the smallest workload so far whose token budget it still fits; bins
  may hold different numbers of samples. A sample that fits no bin is delayed (the
  paper's outlier queue defers it to a later batch); here, within one batch, it
  goes to the bin with the most room left. The paper estimates a document's workload
  from its length (attention quadratic, the rest linear); here the estimate is
  whatever ``workloads`` the caller passes (the benchmark passes the true costs,
  the most favourable choice for the baseline).

torch-free (numpy only).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..errors import InvalidInputError
from .balance import Balance, _check, _capacities, rank_loads

__all__ = ["random_split", "bucketed_batches", "packing_split"]


def random_split(costs: Sequence[float] | np.ndarray, ranks: int, *, seed: int | np.random.Generator = 0) -> Balance:
    """DistributedSampler's split of one global batch: a seeded shuffle, then every ``ranks``-th index per rank."""
    values = _check(costs, ranks)
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    order = rng.permutation(values.size)
    assignment = np.empty(values.size, dtype=int)
    assignment[order] = np.arange(values.size) % ranks
    return Balance(assignment=assignment, loads=rank_loads(values, assignment, ranks))


def bucketed_batches(costs: Sequence[float] | np.ndarray, ranks: int) -> Balance:
    """Sort-by-length bucketing: sorted by cost, cut into contiguous equal-count pieces, piece ``r`` to rank ``r``."""
    values = _check(costs, ranks)
    order = np.argsort(values, kind="stable")
    capacity = _capacities(values.size, ranks)
    assignment = np.empty(values.size, dtype=int)
    assignment[order] = np.repeat(np.arange(ranks), capacity)
    return Balance(assignment=assignment, loads=rank_loads(values, assignment, ranks))


def packing_split(workloads: Sequence[float] | np.ndarray, ranks: int, *,
                  tokens: Sequence[float] | np.ndarray | None = None, capacity: float | None = None,
                  costs: Sequence[float] | np.ndarray | None = None) -> Balance:
    """WLB-LLM's workload-aware packing of one batch into ``ranks`` bins (see the module doc).

    Args:
        workloads: per sample, the estimated workload the rule balances.
        tokens: per sample, its length in tokens (default 1 each: the budget counts samples).
        capacity: each bin's token budget (default: the mean per bin times 1.25, at least the
            longest sample; WLB-LLM's budget is the context window).
        costs: per sample, the true cost the returned loads sum (default ``workloads``).
    """
    estimate = _check(workloads, ranks)
    length = np.ones(estimate.size) if tokens is None else np.asarray(tokens, dtype=float)
    true = estimate if costs is None else np.asarray(costs, dtype=float)
    if length.shape != estimate.shape or true.shape != estimate.shape:
        raise InvalidInputError("workloads, tokens and costs must have one entry per sample")
    budget = max(float(length.sum()) / ranks * 1.25, float(length.max())) if capacity is None else float(capacity)
    if budget < float(length.max()):
        raise InvalidInputError(f"capacity {budget} is below the longest sample ({float(length.max())} tokens)")
    assignment = np.empty(estimate.size, dtype=int)
    load = np.zeros(ranks)
    used = np.zeros(ranks)
    for sample in np.argsort(-estimate, kind="stable"):
        fits = used + length[sample] <= budget
        if fits.any():
            chosen = int(np.flatnonzero(fits)[np.argmin(load[fits])])
        else:
            chosen = int(np.argmin(used))
        assignment[sample] = chosen
        load[chosen] += estimate[sample]
        used[chosen] += length[sample]
    return Balance(assignment=assignment, loads=rank_loads(true, assignment, ranks))
