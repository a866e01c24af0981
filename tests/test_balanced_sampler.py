"""BalancedBatchSampler: a real torch batch sampler; ranks disjoint and complete, deterministic per epoch, balanced."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, TensorDataset

from pipeplan.batches import balance
from pipeplan.errors import InvalidInputError
from pipeplan.runtime import spawn
from pipeplan.runtime.balanced_sampler import BalancedBatchSampler

COSTS = [1.0 + (i * 7) % 4 for i in range(96)]  # 1 to 4 cameras


def _epoch(world: int, epoch: int, *, batch_size: int = 4, drop_last: bool = True, size: int = 96) -> list[list[list[int]]]:
    """Per rank, its batches of one epoch, through a real DataLoader."""
    dataset = TensorDataset(torch.arange(size))
    out = []
    for rank in range(world):
        sampler = BalancedBatchSampler(COSTS[:size], batch_size, num_replicas=world, rank=rank, seed=5,
                                       drop_last=drop_last)
        sampler.set_epoch(epoch)
        out.append([batch.tolist() for (batch,) in DataLoader(dataset, batch_sampler=sampler)])
    return out


@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_ranks_are_disjoint_and_together_hold_each_global_batch(world):
    per_rank = _epoch(world, 0)
    steps = len(per_rank[0])
    assert steps == 96 // (4 * world) and all(len(batches) == steps for batches in per_rank)
    seen: list[int] = []
    for step in range(steps):
        parts = [per_rank[rank][step] for rank in range(world)]
        assert all(len(part) == 4 for part in parts)
        union = [i for part in parts for i in part]
        assert len(set(union)) == len(union)
        seen += union
    assert len(set(seen)) == steps * 4 * world  # the whole epoch once (96 divides exactly)


def test_deterministic_per_epoch_and_different_across_epochs():
    assert _epoch(2, 3) == _epoch(2, 3)
    assert _epoch(2, 3) != _epoch(2, 4)


def test_each_step_is_the_heuristics_split_of_its_global_batch():
    per_rank = _epoch(4, 0)
    costs = np.array(COSTS)
    for step in range(len(per_rank[0])):
        loads = [costs[per_rank[r][step]].sum() for r in range(4)]
        union = np.array([i for r in range(4) for i in per_rank[r][step]])
        assert max(loads) == pytest.approx(balance(costs[union], 4).makespan)
        assert max(loads) - min(loads) <= 3.0  # the guarantee: within the cost range of one round


def test_last_batch_is_padded_like_distributed_sampler_without_drop_last():
    per_rank = _epoch(2, 0, batch_size=4, drop_last=False, size=20)  # 20 = 2 global batches of 8, and 4 over
    assert [len(batches) for batches in per_rank] == [3, 3]
    assert all(len(batch) == 4 for batches in per_rank for batch in batches)
    assert set(i for batches in per_rank for batch in batches for i in batch) == set(range(20))


def test_bad_arguments_are_refused():
    with pytest.raises(InvalidInputError, match="rank must be in"):
        BalancedBatchSampler(COSTS, 4, num_replicas=2, rank=2)
    with pytest.raises(InvalidInputError, match="batch_size"):
        BalancedBatchSampler(COSTS, 0, num_replicas=2, rank=0)
    with pytest.raises(InvalidInputError, match="no global batch"):
        BalancedBatchSampler(COSTS[:3], 4, num_replicas=2, rank=0)
    with pytest.raises(InvalidInputError, match="initialise torch.distributed"):
        BalancedBatchSampler(COSTS, 4)


def _rank_batches(rank: int, world: int) -> list[list[int]]:
    sampler = BalancedBatchSampler(COSTS, 4, seed=9)  # world size and rank from the process group
    sampler.set_epoch(1)
    batches = [list(batch) for batch in sampler]
    gathered: list[list[list[int]]] = [[] for _ in range(world)]
    dist.all_gather_object(gathered, batches)
    return [i for batches_of_rank in gathered for batch in batches_of_rank for i in batch]


def test_two_gloo_processes_get_disjoint_complete_batches_from_the_process_group():
    first, second = spawn(_rank_batches, 2, timeout=60)
    assert first == second and sorted(first) == list(range(96))
