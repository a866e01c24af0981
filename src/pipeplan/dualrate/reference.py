"""The dual-rate algorithm replayed in one process: the reference a distributed run must equal.

    from pipeplan.dualrate.reference import replay_dual_rate
    weights = replay_dual_rate(DualRateConfig(rate_ratio=2, max_frames=6, return_weights=True))
    weights["head.0.weight"]      # equal to the distributed run's final weights (one vision stage)

torch (imported on call).
"""

from __future__ import annotations

from typing import Any

from ..errors import InvalidInputError
from .config import DualRateConfig
from .training import build_parts, make_optimizer, mse

__all__ = ["replay_dual_rate"]


def replay_dual_rate(config: DualRateConfig) -> dict[str, Any]:
    """The dual-rate algorithm of ``config`` in this one process; its final weights.

    The reference the distributed run must equal (one vision stage): the first
    ``L + 1`` forwards on stashed copies of the weights, then per frame ``j`` the
    frame's ``k`` action steps (forward, backward, update each), the stashed
    vision backward with the window's summed latent gradient scaled by
    ``config.gradient_scale(Δt)``, the vision update, and the forward of frame
    ``j + L + 1``. Without stashing the backward recomputes on the current weights.

    Returns:
        ``{"encoder.<name>": tensor, "head.<name>": tensor}`` like :attr:`DualRateRun.weights`.

    Raises:
        InvalidInputError: a synchronous-pipeline configuration, or more than one vision stage.
    """
    import torch

    if config.method != "dual-rate" or config.num_vision_stages != 1:
        raise InvalidInputError("replay_dual_rate replays dual-rate runs with one vision stage")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as on the ranks: the same kernels sum in the same order
    try:
        return _replay(config)
    finally:
        torch.set_num_threads(threads)


def _replay(config: DualRateConfig) -> dict[str, Any]:
    import torch
    from torch.func import functional_call

    task, head, _stages, encoder = build_parts(config)
    vision_opt = make_optimizer(list(encoder.parameters()), config) if config.train_vision else None
    action_opt = make_optimizer(list(head.parameters()), config)
    if not config.train_vision:
        for param in encoder.parameters():
            param.requires_grad_(False)
    frames, ahead, ratio = config.max_frames, config.max_staleness, config.rate_ratio
    held: dict[int, tuple[Any, Any, Any, int]] = {}
    version = 0

    def forward(frame: int) -> None:
        images = task.frame(frame * ratio // config.camera_period)
        if config.train_vision and config.stash_weights:
            snapshot = {n: p.detach().clone().requires_grad_(True) for n, p in encoder.named_parameters()}
            held[frame] = (images, snapshot, functional_call(encoder, snapshot, (images,)), version)
        else:
            with torch.no_grad():
                held[frame] = (images, None, encoder(images), version)

    for frame in range(min(ahead + 1, frames)):
        forward(frame)
    for frame in range(frames):
        images, snapshot, latent, made_at = held.pop(frame)
        read = latent.detach().requires_grad_(config.train_vision)
        for step in range(frame * ratio, (frame + 1) * ratio):
            fast, target = task.step(step)
            mse(head(torch.cat([read, fast], dim=1)), target).backward()
            action_opt.step()
            action_opt.zero_grad(set_to_none=True)
        if vision_opt is not None:
            if snapshot is not None:
                torch.autograd.backward(latent, read.grad)
                for name, param in encoder.named_parameters():
                    param.grad = snapshot[name].grad
            else:
                torch.autograd.backward(encoder(images), read.grad)
            scale = config.gradient_scale(version - made_at)
            for param in encoder.parameters():
                param.grad.mul_(scale)
            vision_opt.step()
            vision_opt.zero_grad(set_to_none=True)
        version += 1
        if frame + ahead + 1 < frames:
            forward(frame + ahead + 1)
    weights = {f"encoder.{n}": p.detach().clone() for n, p in encoder.named_parameters()}
    weights.update({f"head.{n}": p.detach().clone() for n, p in head.named_parameters()})
    return weights
