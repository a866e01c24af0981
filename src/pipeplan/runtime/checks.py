"""What every rank checks before a :class:`~pipeplan.runtime.PipelineRuntime` runs a step.

    problem, modules = check_local(schedule, stages, False, rank=0, group_size=2, device="cpu")
    gathered = all_gather_object((group_ranks, fingerprint(schedule), links, problem))  # over the world
    check_world(schedule, gathered)   # raises the same InvalidInputError on every rank

Each rank first checks its own arguments (:func:`check_local` returns the problem as
text instead of raising, so that no rank leaves the collective that follows early);
after the all-gather every rank runs :func:`check_world` on the same data, so either
all raise, naming the first rank with a problem, or none does.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from ..errors import InvalidInputError
from ..schedule import Schedule

__all__ = ["check_local", "check_world", "fingerprint"]


def fingerprint(schedule: Schedule) -> tuple[Any, ...]:
    """What every rank of a pipeline must agree on: name, placement, microbatches, backward, orders' digest."""
    digest = hashlib.sha256(repr(schedule.orders).encode()).hexdigest()
    return (schedule.name, schedule.placement, schedule.num_microbatches, schedule.backward, digest)


def check_local(schedule: Schedule, stages: Any, checkpoint: Any, *, rank: int, group_size: int,
                device: Any) -> tuple[str | None, dict[int, Any]]:
    """Normalise the stages and move this rank's to ``device``; return ``(problem text or None, stage -> module)``.

    Args:
        schedule, stages, checkpoint: as given to :class:`~pipeplan.runtime.PipelineRuntime`.
        rank: this process's rank in the pipeline group.
        group_size: processes in the pipeline group.
        device: where this rank computes.
    """
    import torch.nn as nn

    if group_size != schedule.num_ranks:
        return (f"the schedule has {schedule.num_ranks} ranks but the pipeline group has "
                f"{group_size} processes; they must be equal"), {}
    try:
        schedule.validate()
    except Exception as error:  # noqa: BLE001 - reported to every rank below
        return f"invalid schedule: {error}", {}
    if schedule.forward_only:
        return "the runtime trains; a forward-only schedule (backward='none') has nothing to run", {}
    if isinstance(stages, tuple) and len(stages) == 2 and isinstance(stages[0], nn.Sequential):
        sequential, layers = stages
        layers = list(layers)
        if len(layers) != schedule.num_stages:
            return (f"layers_per_stage has {len(layers)} entries, expected {schedule.num_stages} "
                    "(one per stage of the schedule)"), {}
        if any(not isinstance(n, int) or n < 1 for n in layers) or sum(layers) != len(sequential):
            return (f"layers_per_stage must be positive integers summing to the {len(sequential)} "
                    f"layers of the model, got {layers}"), {}
        bounds = np.concatenate([[0], np.cumsum(layers)]).astype(int)
        stage_list = [sequential[int(bounds[i]): int(bounds[i + 1])] for i in range(len(layers))]
    else:
        stage_list = list(stages)
        if len(stage_list) != schedule.num_stages:
            return (f"stages has {len(stage_list)} modules, expected {schedule.num_stages} "
                    "(one per stage of the schedule)"), {}
    modules = {}
    for stage in schedule.stages_of(rank) if rank < schedule.num_ranks else ():
        module = stage_list[stage]
        if not isinstance(module, nn.Module):
            return f"stage {stage} must be an nn.Module on rank {rank}, got {type(module).__name__}", {}
        modules[stage] = module.to(device)
    if not isinstance(checkpoint, bool):
        flags = list(checkpoint)
        if len(flags) != schedule.num_stages:
            return f"checkpoint has {len(flags)} entries, expected {schedule.num_stages} (one per stage)", {}
    return None, modules


def check_world(schedule: Schedule, gathered: list[Any]) -> None:
    """Raise on every rank if any rank found a problem or the ranks of one pipeline disagree.

    Args:
        schedule: this rank's schedule.
        gathered: per global rank, ``(pipeline group's global ranks, fingerprint(schedule), links, problem)``.
    """
    for global_rank, (ranks, _agreed, _links, problem) in enumerate(gathered):
        if problem is not None:
            raise InvalidInputError(f"rank {global_rank}: {problem}")
        if len(ranks) != schedule.num_ranks:
            raise InvalidInputError(
                f"the schedule has {schedule.num_ranks} ranks but the pipeline group of rank "
                f"{global_rank} has {len(ranks)} processes; they must be equal"
            )
    by_group: dict[tuple[int, ...], Any] = {}
    for global_rank, (ranks, agreed, _links, _problem) in enumerate(gathered):
        first = by_group.setdefault(ranks, (global_rank, agreed))
        if first[1] != agreed:
            raise InvalidInputError(
                f"ranks {first[0]} and {global_rank} run different schedules "
                f"({first[1][0]!r} vs {agreed[0]!r}); every rank of a pipeline must pass the same one"
            )
