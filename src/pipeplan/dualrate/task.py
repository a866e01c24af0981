"""A synthetic robot task with two time scales: a slow camera and fast action targets.

Every environment has a target object drifting slowly over the image plane (and
a distractor that drifts too). The camera renders a frame every ``rate_ratio``
control steps; the controller must move an end effector around the object on a
fast circle, so the action target changes every control step while the image
changes only every ``k``-th::

    task = TemporalTask(rate_ratio=4, num_envs=32, seed=0)
    images = task.frame(3)                  # (32, 3, 24, 24): the camera at frame 3
    fast, target = task.step(13)            # step 13 reads frame 13 // 4 = 3
    images, fast, target = task.held_out(256)

Time: control step ``i`` is at ``t_i = i · control_dt`` (default 10 ms, a 100 Hz
controller); frame ``j`` is the camera image at ``t = j·k·control_dt`` (25 Hz for
``k = 4``), the latest image the robot has at steps ``j·k .. j·k + k − 1``. The
stream is cut into episodes of ``episode_frames`` frames; each episode draws new
environments, so a policy must generalise rather than memorise ``num_envs``
trajectories.

* object position ``p(t) = 0.6·sin(2π f t + φ)`` per axis, ``f`` in 0.05–0.25 Hz;
* target ``a_i = p(t_i) + 0.3·(cos ψ_i, sin ψ_i)``, ``ψ_i = 2π·2.5 Hz·t_i + ψ_0``;
* fast inputs (what the controller knows without the camera):
  ``(cos ψ_i, sin ψ_i, (i mod k) / k)``.

The image tells where the object is, the fast inputs where on the circle the
effector should be. The object moves a little between frames, so even a perfect
policy has a small error floor from the camera rate itself (the same for every
training method). Everything is deterministic in ``seed``.
"""

from __future__ import annotations

import math

import torch

from .._validation import positive_int

__all__ = ["TemporalTask", "FAST_FEATURES", "ACTION_DIM"]

#: Fast inputs per step: cos ψ, sin ψ, phase within the frame's window.
FAST_FEATURES = 3
#: Action dimensions (a 2-D effector position).
ACTION_DIM = 2
_RADIUS = 0.3
_CIRCLE_HZ = 2.5
_AMPLITUDE = 0.6
_BLOB_WIDTH = 0.18
_NOISE = 0.05


class TemporalTask:
    """A stream of frames and action steps for ``num_envs`` environments.

    Args:
        rate_ratio: control steps per camera frame (``k >= 1``).
        num_envs: environments per step (the batch size of every step).
        image_size: image height and width in pixels.
        control_dt: seconds per control step.
        episode_frames: frames per episode (new environments after each).
        seed: draws the environments (trajectories, phases) and the pixel noise.
    """

    def __init__(
        self,
        *,
        rate_ratio: int,
        num_envs: int = 32,
        image_size: int = 24,
        control_dt: float = 0.01,
        episode_frames: int = 50,
        seed: int = 0,
    ) -> None:
        self.rate_ratio = positive_int("rate_ratio", rate_ratio)
        self.num_envs = positive_int("num_envs", num_envs)
        self.image_size = positive_int("image_size", image_size, minimum=8)
        self.control_dt = float(control_dt)
        self.episode_frames = positive_int("episode_frames", episode_frames)
        self.seed = int(seed)
        self._episode = -1
        self._envs: dict[str, torch.Tensor] = {}
        axis = torch.linspace(-1.0, 1.0, self.image_size)
        self._grid_y, self._grid_x = torch.meshgrid(axis, axis, indexing="ij")

    @staticmethod
    def _draw_envs(count: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
        def uniform(low: float, high: float, *shape: int) -> torch.Tensor:
            return low + (high - low) * torch.rand(*shape, generator=generator)

        return {
            "freq": uniform(0.05, 0.25, count, 2, 2),  # (env, object|distractor, axis) Hz
            "phase": uniform(0.0, 2 * math.pi, count, 2, 2),
            "circle_phase": uniform(0.0, 2 * math.pi, count),
        }

    # ---------------------------------------------------------------- physics
    def _positions(self, envs: dict[str, torch.Tensor], times: torch.Tensor) -> torch.Tensor:
        """(env, object|distractor, axis) positions at per-env ``times`` (seconds)."""
        angle = 2 * math.pi * envs["freq"] * times[:, None, None] + envs["phase"]
        return _AMPLITUDE * torch.sin(angle)

    def _render(self, positions: torch.Tensor, noise_seed: int) -> torch.Tensor:
        """Object in the red channel, distractor in green, a dim copy of both in blue, plus noise."""
        dy = self._grid_y[None, None] - positions[:, :, 1, None, None]
        dx = self._grid_x[None, None] - positions[:, :, 0, None, None]
        blobs = torch.exp(-(dx**2 + dy**2) / (2 * _BLOB_WIDTH**2))  # (env, 2, H, W)
        images = torch.stack([blobs[:, 0], blobs[:, 1], 0.5 * (blobs[:, 0] + blobs[:, 1])], dim=1)
        generator = torch.Generator().manual_seed(noise_seed)
        return images + _NOISE * torch.randn(images.shape, generator=generator)

    def _fast_and_target(self, envs: dict[str, torch.Tensor], steps: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        times = steps.to(torch.float32) * self.control_dt
        psi = 2 * math.pi * _CIRCLE_HZ * times + envs["circle_phase"]
        circle = torch.stack([torch.cos(psi), torch.sin(psi)], dim=1)
        within = (steps % self.rate_ratio).to(torch.float32) / self.rate_ratio
        fast = torch.cat([circle, within[:, None]], dim=1)
        target = self._positions(envs, times)[:, 0] + _RADIUS * circle
        return fast, target

    def _envs_of(self, frame: int) -> dict[str, torch.Tensor]:
        episode = frame // self.episode_frames
        if episode != self._episode:
            self._envs = self._draw_envs(self.num_envs, torch.Generator().manual_seed(self.seed * 7919 + episode))
            self._episode = episode
        return self._envs

    # ------------------------------------------------------------------ public
    def frame(self, frame: int) -> torch.Tensor:
        """Camera images of every environment at frame ``frame``: ``(E, 3, H, W)`` float32."""
        times = torch.full((self.num_envs,), frame * self.rate_ratio * self.control_dt)
        envs = self._envs_of(frame)
        return self._render(self._positions(envs, times), noise_seed=self.seed * 1_000_003 + frame)

    def step(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Fast inputs ``(E, 3)`` and action targets ``(E, 2)`` of control step ``step``."""
        envs = self._envs_of(step // self.rate_ratio)
        return self._fast_and_target(envs, torch.full((self.num_envs,), step, dtype=torch.int64))

    def held_out(self, count: int, *, seed: int = 12345) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``count`` samples of unseen environments at random times: images, fast inputs, targets.

        Each sample's image is the latest frame before its step, as in training.
        """
        count = positive_int("count", count)
        generator = torch.Generator().manual_seed(seed)
        envs = self._draw_envs(count, generator)
        steps = torch.randint(0, 100_000, (count,), generator=generator)
        frame_times = (steps // self.rate_ratio * self.rate_ratio).to(torch.float32) * self.control_dt
        images = self._render(self._positions(envs, frame_times), noise_seed=seed + 1)
        fast, target = self._fast_and_target(envs, steps)
        return images, fast, target
