"""Process groups: the pp × dp grid, and one group per directed pipeline link.

    grid = ProcessGrid.create(pp=2, dp=2)       # every rank calls this, in the same order
    runtime = PipelineRuntime(stages, schedule, loss_fn,
                              pp_group=grid.pp_group, dp_group=grid.dp_group)

Layout: global rank ``g = d · pp + p`` is pipeline rank ``p`` of data-parallel
replica ``d`` (pipeline ranks are contiguous, so a replica fills one node first).

Every ordered pair of ranks that exchanges messages gets its own two-member group
(:func:`link_groups`), one per direction. On NCCL each group is its own
communicator and stream, so sends one way can never queue behind receives the
other way; on gloo each is its own set of pairs. Messages on one link are then
matched purely by order, never by tag.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from .._validation import positive_int
from ..errors import InvalidInputError

__all__ = ["ProcessGrid", "link_groups", "group_timeout", "TIMEOUT_ENV"]

TIMEOUT_ENV = "PIPEPLAN_TIMEOUT"
"""Environment variable with the operation timeout (s) of the groups created here."""

_LINK_CACHE: dict[tuple[int, int], Any] = {}
_LINK_CACHE_WORLD: list[Any] = [None]


def group_timeout() -> datetime.timedelta | None:
    """The timeout for new groups: ``$PIPEPLAN_TIMEOUT`` seconds (set by ``spawn``), else torch's default."""
    value = os.environ.get(TIMEOUT_ENV)
    return None if not value else datetime.timedelta(seconds=float(value))


@dataclass(frozen=True)
class ProcessGrid:
    """This rank's place in a ``pp × dp`` grid and its two process groups.

    Attributes:
        pp, dp: pipeline depth (ranks per pipeline) and data-parallel replicas.
        pp_rank, dp_rank: this rank's coordinates.
        pp_group: the group of this replica's pipeline ranks (``None`` when it is
            the whole world).
        dp_group: the group of the ranks holding the same stages in every replica
            (``None`` when ``dp == 1``).
    """

    pp: int
    dp: int
    pp_rank: int
    dp_rank: int
    pp_group: Any
    dp_group: Any

    @classmethod
    def create(cls, pp: int, dp: int = 1) -> ProcessGrid:
        """Split the initialised world into the grid. Every rank must call this.

        Raises:
            InvalidInputError: ``pp · dp`` differs from the world size.
        """
        import torch.distributed as dist

        pp = positive_int("pp", pp)
        dp = positive_int("dp", dp)
        world = dist.get_world_size()
        if pp * dp != world:
            raise InvalidInputError(
                f"pp × dp must equal the world size {world}, got pp={pp} × dp={dp} = {pp * dp}"
            )
        rank = dist.get_rank()
        pp_group = dp_group = None
        if dp > 1:
            for replica in range(dp):
                group = dist.new_group([replica * pp + p for p in range(pp)], timeout=group_timeout())
                if replica == rank // pp:
                    pp_group = group
            for stage_rank in range(pp):
                group = dist.new_group([d * pp + stage_rank for d in range(dp)], timeout=group_timeout())
                if stage_rank == rank % pp:
                    dp_group = group
        return cls(pp=pp, dp=dp, pp_rank=rank % pp, dp_rank=rank // pp, pp_group=pp_group, dp_group=dp_group)


def link_groups(links: Iterable[tuple[int, int]], *, device: Any = None,
                connect: bool = False) -> dict[tuple[int, int], Any]:
    """One process group per directed link ``(src, dst)`` of global ranks.

    A collective call: every rank of the world must pass the same links (the
    runtime gathers them first). Groups are cached, so building a second
    runtime over the same ranks creates nothing.

    On NCCL (``device`` a CUDA device) each new group is initialised here with a
    one-element all-reduce, in the same sorted order on every rank: NCCL would
    otherwise create a link's communicator lazily, blocking, at its first send,
    and two ranks each creating a different link first could wait on each other.
    ``connect=True`` does the same on gloo, whose pairs also connect at their first
    message (the dual-rate run connects before its clock starts).
    """
    import torch
    import torch.distributed as dist

    if _LINK_CACHE_WORLD[0] is not dist.group.WORLD:  # a new process group: old links are gone
        _LINK_CACHE.clear()
        _LINK_CACHE_WORLD[0] = dist.group.WORLD
    rank = dist.get_rank()
    warm = connect or (device is not None and torch.device(device).type == "cuda")
    for link in sorted(set(links)):
        if link not in _LINK_CACHE:
            group = dist.new_group(sorted(link), timeout=group_timeout())
            _LINK_CACHE[link] = group
            if warm and rank in link:
                dist.all_reduce(torch.zeros(1, device=device), group=group)
    return dict(_LINK_CACHE)
