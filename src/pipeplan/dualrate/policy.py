"""A small CPU policy for the dual-rate pipeline: a conv vision encoder and an MLP action head.

    encoder, head = build_dual_rate_policy(seed=0)
    latent = encoder(task.frame(0))                      # (E, latent_dim): the latent state tokens
    actions = head(torch.cat([latent, fast], dim=1))     # (E, 2)
    model = synchronous_model(encoder, head)             # nn.Sequential for the synchronous pipeline

The encoder is an ``nn.Sequential`` of conv blocks (each halves the image) and a
final projection, so :func:`pipeplan.models.split_sequential` can cut it over
several vision ranks. It is deliberately heavier than the head, as a VLA's
vision tower is heavier than its action expert. :func:`synchronous_model` wraps
the same two modules (sharing their parameters) as the two stages of an ordinary
pipeline whose stages pass ``(images, fast)`` → ``(latent, fast)`` → actions.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from .._validation import positive_int
from ..errors import InvalidInputError
from .task import ACTION_DIM, FAST_FEATURES

__all__ = ["build_dual_rate_policy", "synchronous_model", "VisionStage", "ActionStage"]


def _conv_block(channels_in: int, channels_out: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(channels_in, channels_out, kernel_size=3, padding=1),
        nn.ReLU(),
        nn.Conv2d(channels_out, channels_out, kernel_size=3, stride=2, padding=1),
        nn.ReLU(),
    )


def build_dual_rate_policy(
    *,
    image_size: int = 24,
    channels: int = 24,
    conv_blocks: int = 2,
    latent_dim: int = 32,
    hidden: int = 64,
    seed: int = 0,
) -> tuple[nn.Sequential, nn.Sequential]:
    """The vision encoder (``conv_blocks`` conv blocks + projection) and the action head.

    Args:
        image_size: input height and width; must stay >= 1 after ``conv_blocks`` halvings.
        channels: conv channels.
        conv_blocks: conv blocks (each: a 3×3 conv and a stride-2 3×3 conv).
        latent_dim: width of the latent the encoder writes to the buffer.
        hidden: width of the head's two hidden layers.
        seed: initialises both modules.

    Returns:
        ``(encoder, head)``: encoder ``(E, 3, H, W) → (E, latent_dim)`` with
        ``conv_blocks + 1`` children; head ``(E, latent_dim + 3) → (E, 2)``.
    """
    blocks = positive_int("conv_blocks", conv_blocks)
    size = positive_int("image_size", image_size)
    for _ in range(blocks):
        size = (size + 1) // 2
    torch.manual_seed(seed)
    layers: list[nn.Module] = []
    width = 3
    for _ in range(blocks):
        layers.append(_conv_block(width, channels))
        width = channels
    layers.append(nn.Sequential(nn.Flatten(), nn.Linear(channels * size * size, latent_dim), nn.Tanh()))
    encoder = nn.Sequential(*layers)
    head = nn.Sequential(
        nn.Linear(latent_dim + FAST_FEATURES, hidden), nn.Tanh(),
        nn.Linear(hidden, hidden), nn.Tanh(),
        nn.Linear(hidden, ACTION_DIM),
    )
    return encoder, head


class VisionStage(nn.Module):
    """Stage 0 of the synchronous pipeline: ``(images, fast) → (latent, fast)``."""

    def __init__(self, encoder: nn.Module) -> None:
        super().__init__()
        self.encoder = encoder

    def forward(self, value: Any) -> Any:
        images, fast = value
        return self.encoder(images), fast


class ActionStage(nn.Module):
    """Stage 1 of the synchronous pipeline: ``(latent, fast) → actions``."""

    def __init__(self, head: nn.Module) -> None:
        super().__init__()
        self.head = head

    def forward(self, value: Any) -> Any:
        latent, fast = value
        return self.head(torch.cat([latent, fast], dim=1))


def synchronous_model(encoder: nn.Module, head: nn.Module) -> nn.Sequential:
    """The two-stage ``nn.Sequential`` the synchronous pipeline runs (shares the modules' parameters)."""
    if not isinstance(encoder, nn.Module) or not isinstance(head, nn.Module):
        raise InvalidInputError("encoder and head must be torch modules")
    return nn.Sequential(VisionStage(encoder), ActionStage(head))
