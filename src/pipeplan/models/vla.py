"""A small vision-language-action (VLA) shaped network to pipeline on CPU.

The default model of ``pipeplan run``: an image encoder over several cameras, a
stack of transformer blocks, and a flow-matching action head that integrates a
velocity field over several denoising steps::

    model, loss_fn, make_batch = build_default_model(num_layers=8, seed=0)
    inputs, targets = make_batch(16)
    loss_fn(model(inputs), targets).backward()

Every top-level child of the returned :class:`torch.nn.Sequential` takes one tensor
and returns one tensor, so a pipeline may cut between any two of them. The blocks
are deliberately unequal, like a real VLA: the image encoder is the heaviest single
block (it works on every image patch of every camera), the action head the second
heaviest (it runs its velocity network once per denoising step), and the
transformer blocks are alike and lighter. Shapes (``B`` = batch):

* input: images ``(B, cameras, 3, image_size, image_size)``, float32;
* encoder → transformer blocks: tokens ``(B, tokens, hidden)``;
* head output and target: actions ``(B, horizon, action_dim)``.

The model is deterministic for a given ``seed`` (no dropout; the head starts its
integration from a fixed noise buffer drawn from the seed).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

from .._validation import positive_int
from ..errors import InvalidInputError

__all__ = [
    "ImageEncoder",
    "TransformerBlock",
    "FlowMatchingActionHead",
    "build_default_model",
    "build_dumbbell_model",
    "LossFn",
    "MakeBatch",
]

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
MakeBatch = Callable[..., tuple[torch.Tensor, torch.Tensor]]


class ImageEncoder(nn.Module):
    """Patchify each camera image, mix the patches, and pool them to a few tokens.

    Args:
        hidden: token width.
        cameras: images per sample.
        image_size: height and width of each image, a multiple of ``patch_size``.
        patch_size: side of a square patch (the patchify convolution's kernel and stride).
        tokens: tokens left after pooling; ``cameras * (image_size / patch_size)**2``
            must be a multiple of it.
        mlp_layers: residual patch-MLP layers applied to every patch before pooling.

    Shape: ``(B, cameras, 3, H, W)`` → ``(B, tokens, hidden)``.
    """

    def __init__(
        self,
        hidden: int,
        *,
        cameras: int,
        image_size: int,
        patch_size: int,
        tokens: int,
        mlp_layers: int = 2,
    ) -> None:
        super().__init__()
        patches = cameras * (image_size // patch_size) ** 2
        self.cameras = cameras
        self.tokens = tokens
        self.patchify = nn.Conv2d(3, hidden, kernel_size=patch_size, stride=patch_size)
        self.position = nn.Parameter(torch.randn(1, patches, hidden) * 0.02)
        self.mlps = nn.ModuleList(
            nn.Sequential(
                nn.LayerNorm(hidden),
                nn.Linear(hidden, 4 * hidden),
                nn.GELU(),
                nn.Linear(4 * hidden, hidden),
            )
            for _ in range(mlp_layers)
        )
        self.pool = nn.AdaptiveAvgPool1d(tokens)
        self.norm = nn.LayerNorm(hidden)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        batch = images.shape[0]
        flat = images.flatten(0, 1)  # (B * cameras, 3, H, W)
        patches = self.patchify(flat).flatten(2).transpose(1, 2)  # (B * cameras, P, hidden)
        patches = patches.reshape(batch, -1, patches.shape[-1]) + self.position
        for mlp in self.mlps:
            patches = patches + mlp(patches)
        pooled = self.pool(patches.transpose(1, 2)).transpose(1, 2)  # (B, tokens, hidden)
        return self.norm(pooled)


class TransformerBlock(nn.Module):
    """One pre-norm transformer encoder layer (self-attention and MLP), no dropout.

    Shape: ``(B, tokens, hidden)`` → ``(B, tokens, hidden)``.
    """

    def __init__(self, hidden: int, *, num_heads: int) -> None:
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(
            hidden,
            num_heads,
            dim_feedforward=4 * hidden,
            dropout=0.0,
            activation="gelu",
            batch_first=True,
            norm_first=True,
        )

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.layer(tokens)


class FlowMatchingActionHead(nn.Module):
    """Integrate a learned velocity field from fixed noise to an action chunk.

    Flow-matching style sampling: start at ``a_0`` (a fixed noise buffer), and for
    ``k = 0 .. steps-1`` set ``a_{k+1} = a_k + v(a_k, t_k, context) / steps`` with
    ``t_k = k / steps``. The context is the mean of the transformer's tokens. The
    gradient flows through every step, so the head's cost grows with ``steps``.

    Shape: ``(B, tokens, hidden)`` → ``(B, horizon, action_dim)``.
    """

    noise: torch.Tensor
    frequencies: torch.Tensor

    def __init__(self, hidden: int, *, horizon: int, action_dim: int, steps: int) -> None:
        super().__init__()
        self.steps = steps
        self.time_features: int = 16
        width = 2 * hidden
        self.context = nn.Sequential(nn.LayerNorm(hidden), nn.Linear(hidden, hidden))
        self.velocity = nn.Sequential(
            nn.Linear(action_dim + hidden + self.time_features, width),
            nn.GELU(),
            nn.Linear(width, width),
            nn.GELU(),
            nn.Linear(width, action_dim),
        )
        self.register_buffer("noise", torch.randn(horizon, action_dim))
        half = self.time_features // 2
        self.register_buffer("frequencies", torch.exp(-math.log(1000.0) * torch.arange(half) / half))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        batch = tokens.shape[0]
        horizon = self.noise.shape[0]
        context = self.context(tokens.mean(dim=1))  # (B, hidden)
        context = context.unsqueeze(1).expand(batch, horizon, context.shape[-1])
        actions = self.noise.expand(batch, *self.noise.shape)
        for step in range(self.steps):
            angle = (step / self.steps) * 1000.0 * self.frequencies
            time = torch.cat([angle.sin(), angle.cos()]).expand(batch, horizon, self.time_features)
            velocity = self.velocity(torch.cat([actions, context, time], dim=-1))
            actions = actions + velocity / self.steps
        return actions


def build_default_model(
    num_layers: int = 8,
    *,
    seed: int = 0,
    hidden: int = 64,
    num_heads: int = 4,
    cameras: int = 2,
    image_size: int = 32,
    patch_size: int = 4,
    tokens: int = 16,
    horizon: int = 8,
    action_dim: int = 7,
    denoising_steps: int = 8,
    encoder_layers: int = 2,
) -> tuple[nn.Sequential, LossFn, MakeBatch]:
    """Build the default VLA-shaped model, its loss and a synthetic-batch maker.

    Args:
        num_layers: transformer blocks between the encoder and the head; the
            sequential has ``num_layers + 2`` partitionable children.
        seed: seeds the weights (the global RNG is left untouched).
        hidden: token width; a multiple of ``num_heads``.
        num_heads: attention heads per block.
        cameras: images per sample.
        image_size: image side in pixels, a multiple of ``patch_size``.
        patch_size: side of the encoder's square patches.
        tokens: tokens the encoder hands to the transformer.
        horizon: actions per predicted chunk.
        action_dim: size of one action.
        denoising_steps: integration steps of the action head.
        encoder_layers: residual patch-MLP layers of the image encoder.

    Returns:
        ``(model, loss_fn, make_batch)``: ``model`` is a float32 ``nn.Sequential``
        ``[encoder, block_0, ..., block_{L-1}, head]``; ``loss_fn(output, target)``
        is the mean squared error, the mean over the batch of per-sample means, so
        a microbatch's loss weighted by its share of the batch sums to the batch
        loss; ``make_batch(batch_size, seed=0)`` returns ``(images, target_actions)``.

    Raises:
        InvalidInputError: a non-positive size, or sizes that do not divide.
    """
    num_layers = positive_int("num_layers", num_layers, minimum=0)
    sizes = {
        "hidden": hidden,
        "num_heads": num_heads,
        "cameras": cameras,
        "image_size": image_size,
        "patch_size": patch_size,
        "tokens": tokens,
        "horizon": horizon,
        "action_dim": action_dim,
        "denoising_steps": denoising_steps,
        "encoder_layers": encoder_layers,
    }
    for field, value in sizes.items():
        positive_int(field, value)
    if hidden % num_heads:
        raise InvalidInputError(f"hidden must be a multiple of num_heads={num_heads}, got {hidden}")
    if image_size % patch_size:
        raise InvalidInputError(
            f"image_size must be a multiple of patch_size={patch_size}, got {image_size}"
        )
    patches = cameras * (image_size // patch_size) ** 2
    if patches % tokens:
        raise InvalidInputError(
            f"tokens must divide the {patches} patches (cameras * (image_size / patch_size)**2), got {tokens}"
        )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        layers: list[nn.Module] = [
            ImageEncoder(hidden, cameras=cameras, image_size=image_size, patch_size=patch_size, tokens=tokens,
                         mlp_layers=encoder_layers)
        ]
        layers += [TransformerBlock(hidden, num_heads=num_heads) for _ in range(num_layers)]
        layers.append(
            FlowMatchingActionHead(hidden, horizon=horizon, action_dim=action_dim, steps=denoising_steps)
        )
        model = nn.Sequential(*layers).float()

    def loss_fn(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """Mean squared error, averaged over the batch (and every action entry)."""
        return nn.functional.mse_loss(output, target)

    def make_batch(batch_size: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """Synthetic ``(images, target_actions)`` for ``batch_size`` samples, fixed by ``seed``."""
        batch_size = positive_int("batch_size", batch_size)
        generator = torch.Generator().manual_seed(seed)
        images = torch.randn(batch_size, cameras, 3, image_size, image_size, generator=generator)
        targets = torch.tanh(torch.randn(batch_size, horizon, action_dim, generator=generator))
        return images, targets

    return model, loss_fn, make_batch


def build_dumbbell_model(num_layers: int = 8, *, seed: int = 0) -> tuple[nn.Sequential, LossFn, MakeBatch]:
    """The default model with a heavy front: four cameras into a deep encoder, then blocks and the head.

    Four cameras and four patch-MLP layers make the encoder about as costly as
    all 8 transformer blocks together; the action head (4 denoising steps) costs
    about one and a half blocks (CPU, batch 4; ``pipeplan profile --model
    dumbbell`` measures them). An even split by layer count piles the encoder
    *and* its neighbouring blocks on stage 0, the lesson's unbalanced pipeline;
    a split balanced on the measured costs gives the encoder a stage of its own.
    """
    return build_default_model(num_layers, seed=seed, cameras=4, encoder_layers=4, denoising_steps=4)
