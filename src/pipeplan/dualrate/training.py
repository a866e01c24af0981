"""The parts every dual-rate path builds the same way: task, networks, optimizer, loss (torch).

    from pipeplan.dualrate.training import build_parts, make_optimizer, mse
    task, head, stages, encoder = build_parts(config)    # identical on every rank (seeded)
    optimizer = make_optimizer(list(head.parameters()), config)

The ranks of a run, the synchronous baseline, the single-process replay and the cost
measurement all start from these, so they train the same model on the same data.
"""

from __future__ import annotations

from typing import Any

from .config import DualRateConfig

__all__ = ["build_parts", "make_optimizer", "mse"]


def build_parts(config: DualRateConfig) -> tuple[Any, Any, list[Any], Any]:
    """``(task, head, vision stage modules, encoder)``, identical on every rank."""
    from .policy import build_dual_rate_policy
    from .task import TemporalTask
    from ..models import split_sequential
    from ..partition import even_split

    task = TemporalTask(rate_ratio=config.camera_period, num_envs=config.num_envs, image_size=config.image_size,
                        seed=config.seed)
    encoder, head = build_dual_rate_policy(image_size=config.image_size, channels=config.channels,
                                           conv_blocks=config.conv_blocks, seed=config.seed)
    stages = split_sequential(encoder, even_split(len(encoder), config.num_vision_stages))
    return task, head, stages, encoder


def make_optimizer(params: list[Any], config: DualRateConfig) -> Any:
    """SGD with ``config``'s learning rate and momentum (the same on both sides, for every method)."""
    import torch

    return torch.optim.SGD(params, lr=config.lr, momentum=config.momentum)


def mse(prediction: Any, target: Any) -> Any:
    """The task's loss: mean squared error over the batch and the action dimensions."""
    return ((prediction - target) ** 2).mean()
