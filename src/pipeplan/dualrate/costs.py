"""What each action of the dual-rate policy costs on this machine: :class:`DualRateCosts`.

    from pipeplan.dualrate.costs import measure_dual_rate_costs
    costs = measure_dual_rate_costs(DualRateConfig(rate_ratio=4))   # CPU ms, one thread (torch)
    costs.vision, costs.action, costs.samples_per_s(config)        # (F, B, U) per side; idle-core throughput

The measured costs feed :func:`pipeplan.analytic.dual_rate_period` (what a run should
reach on idle cores) and the study's simulated comparison.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from .._validation import positive_int
from .config import DualRateConfig
from .training import build_parts, make_optimizer, mse

__all__ = ["DualRateCosts", "measure_dual_rate_costs"]


@dataclass(frozen=True)
class DualRateCosts:
    """CPU milliseconds of each action of the dual-rate policy, measured in isolation (one thread).

    Attributes:
        vision: ``(F, B, U)`` of the whole encoder on one frame with weight stashing.
        vision_recompute_backward: ``B`` without stashing (the forward runs again).
        vision_frozen_forward: ``F`` of the frozen encoder (no graph).
        action: ``(F, B, U)`` of the head on one step.
    """

    vision: tuple[float, float, float]
    vision_recompute_backward: float
    vision_frozen_forward: float
    action: tuple[float, float, float]

    def period(self, config: DualRateConfig) -> float:
        """Steady-state ms per vision update of ``config`` on idle cores (one vision stage, free messages).

        :func:`pipeplan.analytic.dual_rate_period`; a frozen encoder has no ``B``/``U``,
        no stashing means the recomputing ``B``.
        """
        from ..analytic import dual_rate_period

        forward, backward, update = self.vision
        if not config.train_vision:
            forward, backward, update = self.vision_frozen_forward, 0.0, 0.0
        elif not config.stash_weights:
            backward = self.vision_recompute_backward
        return dual_rate_period([(forward, backward, update)], [self.action], rate_ratio=config.rate_ratio,
                                max_staleness=config.max_staleness)

    def samples_per_s(self, config: DualRateConfig) -> float:
        """Action-side samples per second of ``config`` on idle cores."""
        return config.rate_ratio * config.num_envs / (self.period(config) / 1e3)


def measure_dual_rate_costs(config: DualRateConfig, *, repeats: int = 15) -> DualRateCosts:
    """Time every action of ``config``'s policy in this process: the minimum CPU time over ``repeats``.

    Runs on one thread (the runtime's ranks each have one); the minimum is robust to
    other load on the machine.
    """
    import torch
    from torch.func import functional_call

    repeats = positive_int("repeats", repeats)
    task, head, _stages, encoder = build_parts(config)
    images = task.frame(0)
    fast, target = task.step(0)
    vision_opt = make_optimizer(list(encoder.parameters()), config)
    action_opt = make_optimizer(list(head.parameters()), config)
    params = dict(encoder.named_parameters())
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    timings: dict[str, list[float]] = {}

    def timed(name: str, work: Any) -> Any:
        began = time.thread_time()
        value = work()
        timings.setdefault(name, []).append((time.thread_time() - began) * 1e3)
        return value

    try:
        for _ in range(repeats + 1):  # the first round warms up
            snapshot = timed("vF", lambda: {n: p.detach().clone().requires_grad_(True) for n, p in params.items()})
            latent = timed("vF+", lambda: functional_call(encoder, snapshot, (images,)))
            gradient = torch.ones_like(latent) / latent.numel()
            timed("vB", lambda: torch.autograd.backward(latent, gradient))
            for name, param in params.items():
                param.grad = snapshot[name].grad
            timed("vU", lambda: (vision_opt.step(), vision_opt.zero_grad(set_to_none=True)))
            timed("vR", lambda: torch.autograd.backward(encoder(images), gradient))
            vision_opt.zero_grad(set_to_none=True)
            with torch.no_grad():
                timed("vN", lambda: encoder(images))
            read = latent.detach().requires_grad_(True)
            loss = timed("aF", lambda: mse(head(torch.cat([read, fast], dim=1)), target))
            timed("aB", lambda: loss.backward())
            timed("aU", lambda: (action_opt.step(), action_opt.zero_grad(set_to_none=True)))
    finally:
        torch.set_num_threads(threads)
    best = {name: min(values[1:]) for name, values in timings.items()}
    return DualRateCosts(
        vision=(best["vF"] + best["vF+"], best["vB"], best["vU"]),
        vision_recompute_backward=best["vR"],
        vision_frozen_forward=best["vN"],
        action=(best["aF"], best["aB"], best["aU"]),
    )
