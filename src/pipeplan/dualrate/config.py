"""What one dual-rate (or synchronous-baseline) training run is asked to do: :class:`DualRateConfig`.

    >>> from pipeplan.dualrate.config import DualRateConfig
    >>> config = DualRateConfig(rate_ratio=4, max_staleness=1, damping=0.95, time_budget=5.0)
    >>> config.world_size, config.shape().num_frames, config.gradient_scale(2)
    (2, 100, 0.9025)
    >>> DualRateConfig(rate_ratio=4, camera_ratio=6)
    Traceback (most recent call last):
    ...
    pipeplan.errors.InvalidInputError: camera_ratio = 6 must be a multiple of rate_ratio = 4 (a vision update must not straddle two camera frames)

Validated on construction (every error names the field, its value and what is
allowed); torch-free. :func:`pipeplan.dualrate.runtime.run_dual_rate` runs one.
"""

from __future__ import annotations

from dataclasses import dataclass

from .._validation import non_negative_float, positive_float, positive_int
from ..errors import InvalidInputError
from ..schedules.dual_rate import DualRateShape, check_damping

__all__ = ["DualRateConfig"]

_METHODS = ("dual-rate", "synchronous")
_SCALINGS = ("damping", "inverse")


@dataclass(frozen=True)
class DualRateConfig:
    """One training run of the dual-rate (or the synchronous) pipeline on the temporal task.

    Args:
        method: ``"dual-rate"`` or ``"synchronous"``.
        rate_ratio: action steps per vision update, an integer ``k >= 1``.
        camera_ratio: control steps per camera frame of the task (default ``rate_ratio``);
            a multiple of ``rate_ratio``. ``rate_ratio=1, max_staleness=0`` on a
            ``camera_ratio=4`` task is the synchronous pipeline: the vision stage runs
            (and updates) on every step, on the same image four steps in a row.
        num_vision_stages: vision ranks ``V`` (the encoder's children are split evenly).
        max_staleness: frames the vision side may run ahead (0: no overlap).
        buffer_frames: latent slots on the action side (default ``max_staleness + 1``).
        damping: λ in (0, 1] of the ``λ^Δt`` damping (``staleness_scaling="damping"``).
        staleness_scaling: ``"damping"`` (λ^Δt) or ``"inverse"`` (1/Δt).
        stash_weights: keep the forward's weights for the stale backward (PipeDream).
        train_vision: ``False`` freezes the encoder at its initial weights.
        lr, momentum: SGD on both sides (the same for every method).
        max_frames: at most this many frames (the run has ``k`` steps per frame).
        time_budget: seconds of training after which vision rank 0 marks the frame
            it is computing as the last one (``None``: run ``max_frames``).
        sync_microbatches: microbatches per step of the synchronous pipeline.
        num_envs, image_size, channels, conv_blocks: task batch and model size.
        eval_samples: held-out samples for the final loss.
        seed: task and initialisation.
        return_weights: put the final weights of both sides in the result (for tests).
        name: a label for reports.
    """

    method: str = "dual-rate"
    rate_ratio: int = 4
    camera_ratio: int | None = None
    num_vision_stages: int = 1
    max_staleness: int = 1
    buffer_frames: int | None = None
    damping: float = 1.0
    staleness_scaling: str = "damping"
    stash_weights: bool = True
    train_vision: bool = True
    lr: float = 0.05
    momentum: float = 0.9
    max_frames: int = 100
    time_budget: float | None = None
    sync_microbatches: int = 2
    num_envs: int = 32
    image_size: int = 24
    channels: int = 16
    conv_blocks: int = 2
    eval_samples: int = 256
    seed: int = 0
    return_weights: bool = False
    name: str = ""

    def __post_init__(self) -> None:
        if self.method not in _METHODS:
            raise InvalidInputError(f"method must be one of {', '.join(_METHODS)}, got {self.method!r}")
        if self.staleness_scaling not in _SCALINGS:
            raise InvalidInputError(
                f"staleness_scaling must be one of {', '.join(_SCALINGS)}, got {self.staleness_scaling!r}"
            )
        object.__setattr__(self, "damping", check_damping(self.damping))
        vision_layers = positive_int("conv_blocks", self.conv_blocks) + 1
        stages = positive_int("num_vision_stages", self.num_vision_stages)
        if stages > vision_layers:
            raise InvalidInputError(
                f"num_vision_stages = {stages} is more than the {vision_layers} vision layers "
                f"({self.conv_blocks} conv blocks + the projection); use at most {vision_layers}"
            )
        if self.method == "synchronous" and stages != 1:
            raise InvalidInputError(f"the synchronous baseline runs one vision stage, got num_vision_stages = {stages}")
        self.shape()  # rate ratio, staleness and buffer checks
        camera = positive_int("camera_ratio", self.camera_period)
        if camera % self.rate_ratio:
            raise InvalidInputError(
                f"camera_ratio = {camera} must be a multiple of rate_ratio = {self.rate_ratio} "
                "(a vision update must not straddle two camera frames)"
            )
        positive_int("sync_microbatches", self.sync_microbatches)
        if self.sync_microbatches > self.num_envs:
            raise InvalidInputError(
                f"sync_microbatches = {self.sync_microbatches} must be <= num_envs = {self.num_envs}"
            )
        positive_float("lr", self.lr)
        non_negative_float("momentum", self.momentum)
        if self.time_budget is not None:
            positive_float("time_budget", self.time_budget, unit="seconds")
        positive_int("eval_samples", self.eval_samples)
        positive_int("image_size", self.image_size, minimum=8)
        positive_int("channels", self.channels)

    def shape(self, num_frames: int | None = None) -> DualRateShape:
        """The schedule shape this run walks (one action rank)."""
        return DualRateShape(self.num_vision_stages, 1, self.rate_ratio, num_frames or self.max_frames,
                             self.max_staleness, self.buffer_frames)

    @property
    def camera_period(self) -> int:
        """Control steps per camera frame: ``camera_ratio``, or ``rate_ratio`` when not given."""
        return self.rate_ratio if self.camera_ratio is None else self.camera_ratio

    @property
    def world_size(self) -> int:
        """Processes: ``V`` vision ranks and one action rank."""
        return self.num_vision_stages + 1

    def gradient_scale(self, staleness: int) -> float:
        """The factor a gradient of staleness ``Δt`` is multiplied by."""
        if self.staleness_scaling == "inverse":
            return 1.0 / max(staleness, 1)
        return self.damping**staleness
