"""A drop-in batch sampler that balances each global batch's samples across data-parallel ranks.

With DDP or FSDP every step waits for the slowest rank; when samples cost
different amounts (1 to 4 cameras, prompts of different lengths), a random
split leaves the other ranks idle. :class:`BalancedBatchSampler` draws the
same shuffled global batch on every rank (seeded by ``seed`` and the epoch, as
``DistributedSampler`` does), splits it with
:func:`pipeplan.batches.balance.balance` on the per-sample costs you give it
(equal counts per rank, the slowest rank's load made small), and yields this
rank's part::

    import torch
    from torch.utils.data import DataLoader, TensorDataset
    from pipeplan.runtime.balanced_sampler import BalancedBatchSampler

    dataset = TensorDataset(torch.arange(64.0))
    cameras = [1 + i % 4 for i in range(64)]            # per sample, from your metadata
    sampler = BalancedBatchSampler(cameras, batch_size=4, num_replicas=2, rank=0, seed=0)
    loader = DataLoader(dataset, batch_sampler=sampler)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for (batch,) in loader:
            ...                                           # 4 samples; both ranks' loads nearly equal

``costs`` are any per-sample numbers proportional to the time a sample takes
(camera counts, tokens, or ms from :meth:`pipeplan.batches.mix.MixCosts.costs_of`).
``num_replicas`` and ``rank`` default to ``torch.distributed``'s world size and
rank. Every rank computes the same assignment (the same seed, costs and code),
so the ranks' batches are disjoint and together hold the global batch; nothing
is communicated.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import torch
import torch.distributed as dist
from torch.utils.data import Sampler

from ..batches.balance import balance
from ..errors import InvalidInputError

__all__ = ["BalancedBatchSampler"]


class BalancedBatchSampler(Sampler[list[int]]):
    """Per global batch (``batch_size × num_replicas`` samples), this rank's balanced share of ``batch_size`` indices.

    Args:
        costs: per dataset index, its cost (any unit, >= 0, finite).
        batch_size: samples per rank per step.
        num_replicas, rank: the data-parallel world and this rank (default: ``torch.distributed``'s).
        shuffle: draw the global batches from a seeded permutation (``False``: dataset order).
        seed: the permutation's seed (the same on every rank); the epoch is added to it.
        drop_last: drop a last, incomplete global batch (``False``: fill it from the start
            of the permutation, as ``DistributedSampler`` pads).
    """

    def __init__(self, costs: Sequence[float] | np.ndarray, batch_size: int, *, num_replicas: int | None = None,
                 rank: int | None = None, shuffle: bool = True, seed: int = 0, drop_last: bool = True) -> None:
        values = np.asarray(costs, dtype=float)
        if values.ndim != 1 or values.size == 0 or not np.all(np.isfinite(values)) or np.any(values < 0):
            raise InvalidInputError("costs must be a non-empty list of finite per-sample costs >= 0")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise InvalidInputError(f"batch_size must be an integer >= 1, got {batch_size!r}")
        if num_replicas is None or rank is None:
            if not (dist.is_available() and dist.is_initialized()):
                raise InvalidInputError("give num_replicas and rank, or initialise torch.distributed first")
            num_replicas = dist.get_world_size() if num_replicas is None else num_replicas
            rank = dist.get_rank() if rank is None else rank
        if num_replicas < 1 or not 0 <= rank < num_replicas:
            raise InvalidInputError(f"rank must be in 0..{num_replicas - 1} and num_replicas >= 1, "
                                    f"got rank {rank} of {num_replicas}")
        global_batch = batch_size * num_replicas
        if drop_last and values.size < global_batch:
            raise InvalidInputError(f"{values.size} samples make no global batch of {global_batch} "
                                    f"({batch_size} per rank × {num_replicas} ranks); use drop_last=False")
        self.costs = values
        self.batch_size = batch_size
        self.num_replicas = num_replicas
        self.rank = rank
        self.shuffle = shuffle
        self.seed = seed
        self.drop_last = drop_last
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """Use epoch ``epoch``'s permutation next (call it on every rank, as with ``DistributedSampler``)."""
        self.epoch = epoch

    def __len__(self) -> int:
        """Batches this rank yields per epoch."""
        global_batch = self.batch_size * self.num_replicas
        whole, rest = divmod(self.costs.size, global_batch)
        return whole + (1 if rest and not self.drop_last else 0)

    def _order(self) -> list[int]:
        if not self.shuffle:
            return list(range(self.costs.size))
        generator = torch.Generator()
        generator.manual_seed(self.seed + self.epoch)
        return torch.randperm(self.costs.size, generator=generator).tolist()

    def global_batches(self) -> Iterator[list[int]]:
        """The epoch's global batches (dataset indices), the same on every rank."""
        order = self._order()
        size = self.batch_size * self.num_replicas
        for step in range(len(self)):
            batch = order[step * size:(step + 1) * size]
            while len(batch) < size:  # pad the last batch from the start, as DistributedSampler does
                batch += order[: size - len(batch)]
            yield batch

    def __iter__(self) -> Iterator[list[int]]:
        for batch in self.global_batches():
            indices = np.asarray(batch)
            split = balance(self.costs[indices], self.num_replicas)
            yield [int(i) for i in indices[split.members(self.rank)]]
