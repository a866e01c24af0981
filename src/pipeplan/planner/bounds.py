"""Lower bounds on a pipeline step: what no partition, schedule or recompute can beat.

    from pipeplan.planner.bounds import least_max_load, LayerTimes, fill_bound
    least_max_load([5.0, 5.0, 1.0], 2)        # 6.0: two of the three layers share a rank
    times = LayerTimes.of(profiles)           # per layer, the least over the recompute modes
    times.chunked_fill(num_microbatches=8, shallowest=[0, 1, 2, 3], split=False)
    fill_bound(times.work, num_microbatches=8, num_ranks=4, ratio=1.0)

The search (:mod:`pipeplan.planner.search`) adds these to its bound of a
configuration; docs/planner.md, "The lower bound the quality numbers use",
gives each argument. In short, for ``P`` ranks, ``m`` microbatches, per-layer
times ``t_ℓ = F_ℓ + B_ℓ``:

* **rank load** (:func:`least_max_load`): whatever the partition and placement,
  some rank holds at least ``k + 1`` of the ``kP + 1`` heaviest layers, so its
  work per microbatch is at least the sum of the ``k + 1`` lightest of them;
* **fill with several stages per rank** (:meth:`LayerTimes.chunked_fill`): rank
  ``r`` whose shallowest stage is ``s_r`` idles at least ``Σ_{ℓ < s_r} F_ℓ``
  before its first action (each earlier stage holds at least one layer) and,
  with a full backward, ``Σ_{ℓ < s_r} B_ℓ`` after its last; the ranks' idle and
  work add up to ``P × makespan``;
* **one microbatch's chain** (:meth:`LayerTimes.chain`): the forward of every
  layer and then the gradient back through every layer, one after the other.

Every bound uses the least per-layer time over the recompute modes, so it holds
for every recompute assignment too. They are bounds in the planner's cost model,
where a split backward's ``I + W`` is the full backward ``B`` (the planner's
layouts keep no separate input-gradient time); a measured split whose halves
add up to less than ``B`` would need ``F + min(B, I + W)`` per layer instead.

Two bounds complete them: :func:`fill_bound` (the pipeline fill of one stage per
rank, whatever the partition) and, once a partition is known,
:func:`step_time_lower_bound` (what no order of its actions beats).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from ..costs import StageCosts
from ..layers import LayerProfile

__all__ = ["least_max_load", "LayerTimes", "fill_bound", "step_time_lower_bound"]


def least_max_load(items: Sequence[float] | np.ndarray, num_bins: int) -> float:
    """A lower bound on the largest bin sum when ``items`` are split over ``num_bins`` bins in any way.

    ``max(Σ items / bins, max item, max_k (sum of the k + 1 smallest of the kP + 1 largest))``:
    of the ``kP + 1`` largest items some bin holds ``k + 1`` (pigeonhole), and
    those weigh at least the ``k + 1`` lightest of them. It ignores contiguity and
    placement, so it bounds every partition of layers into stages on ranks.

    Args:
        items: non-negative weights (a layer's time, a layer's gradient bytes).
        num_bins: bins (ranks), ≥ 1.
    """
    values = np.sort(np.asarray(items, dtype=float))[::-1]
    if values.size == 0:
        return 0.0
    best = max(float(values.sum()) / num_bins, float(values[0]))
    k = 1
    while k * num_bins + 1 <= values.size:
        best = max(best, float(values[k * num_bins - k: k * num_bins + 1].sum()))
        k += 1
    return best


@dataclass(frozen=True)
class LayerTimes:
    """Per-layer times of one microbatch, the least over the recompute modes given.

    Attributes:
        forward: ``F_ℓ``.
        total: ``F_ℓ + B_ℓ`` (the full backward includes the weight gradient).
        backward: ``B_ℓ`` (with a measured split, the least of ``B_ℓ`` and ``I_ℓ + W_ℓ``).
        input_gradient: ``B_ℓ − W_ℓ``, the part a split backward chains from
            stage to stage (0 for a measured split: a stage 0 runs its layers'
            whole backward as ``W``, so no layer's measured ``I`` is sure to be charged).
        first_extra, last_extra: the fixed time of the first and last stage
            (a third forward, two thirds backward, half of which weight gradient).
    """

    forward: np.ndarray
    total: np.ndarray
    backward: np.ndarray
    input_gradient: np.ndarray
    first_extra: float
    last_extra: float

    @classmethod
    def of(cls, profiles: Iterable[LayerProfile]) -> LayerTimes:
        """The elementwise least times of ``profiles`` (one per recompute mode, same layers)."""
        listed = list(profiles)
        forward = np.min([np.asarray(p.forward, dtype=float) for p in listed], axis=0)
        # a measured split's halves are times of their own: a split schedule's work is F + I + W
        backward = np.min([np.asarray(p.backward, dtype=float) if p.backward_input is None
                           else np.minimum(p.backward, np.add(p.backward_input, p.weight)) for p in listed], axis=0)
        chained = np.min([
            np.zeros(p.num_layers) if p.backward_input is not None
            else np.maximum(np.subtract(p.backward, p.weight), 0.0) for p in listed], axis=0)
        return cls(forward, forward + backward, backward, chained,
                   min(p.first_extra for p in listed), min(p.last_extra for p in listed))

    @property
    def work(self) -> float:
        """One microbatch's work over every layer, extras included."""
        return float(self.total.sum()) + self.first_extra + self.last_extra

    def chain(self, *, split: bool) -> float:
        """One microbatch's forward through every layer, then its gradient back through every layer.

        No schedule runs a microbatch's actions in parallel, so the makespan is at
        least this. With a split backward only the input gradients chain.
        """
        extras = self.first_extra + self.last_extra
        if split:
            return float(self.forward.sum() + self.input_gradient.sum()) + 2.0 * extras / 3.0
        return self.work

    def chunked_fill(self, num_microbatches: int, shallowest: Sequence[int], *, split: bool) -> float:
        """``(m · T + Σ_r idle_r) / P``: the ranks' work and unavoidable idle shared over ``P`` ranks.

        Rank ``r`` whose shallowest stage is ``s_r`` cannot start before the first
        microbatch has run the forward of stages ``0..s_r − 1``, which hold at
        least layers ``0..s_r − 1``: ``Σ_{ℓ < s_r} F_ℓ`` (plus stage 0's extra).
        With a full backward every action of ``r`` is followed by the gradient's
        way down through those stages: ``Σ_{ℓ < s_r} B_ℓ`` more. (A split
        backward's weight gradients may run last, so no tail is charged.)

        Args:
            num_microbatches: ``m``.
            shallowest: ``s_r`` for each rank.
            split: the schedule splits the backward.
        """
        head = np.concatenate([[0.0], np.cumsum(self.forward)])
        tail = np.concatenate([[0.0], np.cumsum(self.backward)])
        idle = 0.0
        for stage in shallowest:
            if stage == 0:
                continue
            idle += float(head[stage]) + self.first_extra / 3.0
            if not split:
                idle += float(tail[stage]) + 2.0 * self.first_extra / 3.0
        return (num_microbatches * self.work + idle) / len(shallowest)


def fill_bound(total: float, num_microbatches: int, num_ranks: int, ratio: float) -> float:
    """Least makespan of ``m`` microbatches over ``P`` ranks in pipeline order, whatever the partition.

    Rank ``r`` cannot start before the first microbatch has run ``ratio`` of the
    work of the ranks before it (``A_r``, the forward share; with a full backward
    the gradient's way back adds the rest, so ``ratio = 1``), and then has
    ``m · t_r`` of work: makespan ≥ ``max_r (ratio · A_r + m · t_r)`` with
    ``Σ t_r = T``. Over every split of ``T`` (real-valued, so over every
    partition too) the least maximum equalises the terms, ``t_r ∝ q^r`` with
    ``q = 1 − ratio / m``:

    ``L = ratio · T / (1 − q^P)``  (→ ``m·T/P + (P − 1)·ratio·T/(2P)`` for large ``m``).
    """
    if num_ranks == 1 or ratio <= 0:
        return num_microbatches * total / num_ranks
    q = 1.0 - ratio / num_microbatches
    return ratio * total / (1.0 - q**num_ranks) if q > 0 else total * ratio


def step_time_lower_bound(
    costs: StageCosts, boundary: Sequence[float], placement: Sequence[int], num_microbatches: int, *, split: bool
) -> float:
    """A pipeline makespan no order of these actions can beat.

    For rank ``r`` whose lowest stage is ``s_r``: it cannot start before the
    first microbatch reaches ``s_r`` (``head_r = Σ_{s < s_r} F_s`` plus the
    messages on the way) and it has ``W_r = m · Σ_{s on r} (F_s + B_s)`` of work.
    With a full backward, every action of ``r`` precedes the backward of ``s_r``
    for the last microbatch, after which the gradient still travels down to
    stage 0 (``tail_r = Σ_{s < s_r} B_s`` plus messages). With a split backward
    only the input-gradient parts (``B − W``, or a measured ``I``, whose work is
    then ``F + I + W``) are chained that way, and stage 0's
    ``W`` follows. The bound is ``max_r`` of those; for uniform 1F1B it equals
    the makespan ``(m + P − 1)(F + B)``.
    """
    forward = np.asarray(costs.forward)
    backward = np.asarray(costs.backward)
    weight = np.asarray(costs.weight)
    chained = backward - weight if split else backward
    if split and costs.backward_input is not None:  # a measured split: I and W are times of their own
        chained = np.asarray(costs.backward_input)
        backward = chained + weight
    num_stages = len(forward)
    crossing = np.array(
        [boundary[s] if placement[s] != placement[s + 1] else 0.0 for s in range(num_stages - 1)]
    )
    head = np.concatenate([[0.0], np.cumsum(forward[:-1] + crossing)])
    tail = np.concatenate([[0.0], np.cumsum(chained[:-1] + crossing)])
    best = 0.0
    for rank in range(max(placement) + 1):
        stages = [s for s, r in enumerate(placement) if r == rank]
        low = stages[0]
        work = num_microbatches * float(forward[stages].sum() + backward[stages].sum())
        if split:
            chain = num_microbatches * float(forward[stages].sum() + chained[stages].sum()) + tail[low]
            chain += float(weight[0]) if low > 0 else 0.0
            bound = head[low] + max(work, chain)
        else:
            bound = head[low] + work + tail[low]
        best = max(best, bound)
    return best
