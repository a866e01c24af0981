"""What a dual-rate timeline says: throughput on both sides, utilisation, staleness, memory.

Works on a simulated or a measured :class:`~pipeplan.timeline.Timeline` of a
:class:`~pipeplan.schedules.dual_rate.DualRateSchedule`::

    >>> from pipeplan import StageCosts, build_schedule, simulate
    >>> from pipeplan.dualrate.metrics import dual_rate_metrics
    >>> schedule = build_schedule("dual-rate", num_stages=2, num_microbatches=64, rate_ratio=4)
    >>> timeline = simulate(schedule, StageCosts([30, 4], update=[1, 0.5]))
    >>> metrics = dual_rate_metrics(timeline, batch_size=32, latent_bytes=4096, stash_bytes=[2e5])  # per vision stage
    >>> round(metrics.samples_per_s), round(metrics.frames_per_s, 2), round(metrics.steady_samples_per_s)
    (1388, 10.84, 1407)
    >>> metrics.peak_latents
    2

Times are in the timeline's unit (the CLI says ms; per-second rates assume ms).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .._validation import finite_floats, positive_float, positive_int
from ..errors import InvalidInputError
from ..schedule import Action, Kind
from ..schedules.dual_rate import DualRateSchedule
from ..timeline import Timeline

__all__ = ["DualRateMetrics", "dual_rate_metrics"]


@dataclass(frozen=True)
class DualRateMetrics:
    """Headline numbers of one dual-rate timeline.

    Attributes:
        rate_ratio: action steps per vision update.
        makespan: time of the whole run (timeline units).
        samples_per_s, frames_per_s: action samples and vision frames per second over
            the whole run (fill and drain included).
        steady_period: time per frame in the middle half of the run, over a whole number of
            the steady state's repeats (``None`` for runs shorter than 8 frames); compare with
            :func:`pipeplan.analytic.dual_rate_period`.
        steady_samples_per_s: ``k · batch_size / steady_period`` per second (``None`` likewise).
        utilisation: busy fraction per rank.
        staleness: per vision stage, Δt of every frame's gradient (from the schedule).
        step_staleness: per action step, Δt of the gradient it returns.
        peak_latents: most latents the action side holds at once (from arrival to the
            end of the window's last backward), and ``peak_latent_bytes`` in bytes.
        peak_frames: per vision stage, most frames held from forward to update, and
            ``peak_stash_bytes``: those frames times ``stash_bytes`` (activations, plus
            the weight copy when stashing).
    """

    rate_ratio: int
    makespan: float
    samples_per_s: float
    frames_per_s: float
    steady_period: float | None
    steady_samples_per_s: float | None
    utilisation: tuple[float, ...]
    staleness: dict[int, tuple[int, ...]]
    step_staleness: tuple[int, ...]
    peak_latents: int
    peak_latent_bytes: float
    peak_frames: tuple[int, ...]
    peak_stash_bytes: tuple[float, ...]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return {
            "rate_ratio": self.rate_ratio, "makespan": self.makespan, "samples_per_s": self.samples_per_s,
            "frames_per_s": self.frames_per_s, "steady_period": self.steady_period,
            "steady_samples_per_s": self.steady_samples_per_s, "utilisation": list(self.utilisation),
            "staleness": {str(s): list(v) for s, v in self.staleness.items()},
            "step_staleness": list(self.step_staleness), "peak_latents": self.peak_latents,
            "peak_latent_bytes": self.peak_latent_bytes, "peak_frames": list(self.peak_frames),
            "peak_stash_bytes": list(self.peak_stash_bytes),
        }


def _peak_overlap(intervals: list[tuple[float, float]]) -> int:
    """Most intervals ``[start, end)`` open at once."""
    events = sorted([(start, 1) for start, _end in intervals] + [(end, -1) for _start, end in intervals])
    current = peak = 0
    for _time, delta in events:
        current += delta
        peak = max(peak, current)
    return peak


def _repeat_length(num_vision: int, lag: int) -> int:
    """lcm of the frame counts of the schedule's cycles (see :func:`pipeplan.analytic.dual_rate_period`)."""
    counts = {lag * (last - first) + 1 for first in range(num_vision) for last in range(first, num_vision)}
    counts |= {1 + lag * (num_vision - first) for first in range(num_vision)}
    return math.lcm(*counts)


def dual_rate_metrics(
    timeline: Timeline,
    *,
    batch_size: int = 1,
    latent_bytes: float = 1.0,
    stash_bytes: Sequence[float] | None = None,
    time_unit_s: float = 1e-3,
) -> DualRateMetrics:
    """Throughput, utilisation, staleness and memory of a dual-rate ``timeline``.

    Args:
        timeline: a timeline of a :class:`DualRateSchedule`.
        batch_size: samples per action step.
        latent_bytes: bytes of one frame's latent.
        stash_bytes: per vision stage, bytes one in-flight frame keeps (default 1 each).
        time_unit_s: seconds per timeline unit (1e-3: milliseconds).

    Raises:
        InvalidInputError: a timeline of another schedule, or bad sizes.
    """
    schedule = timeline.schedule
    if not isinstance(schedule, DualRateSchedule):
        raise InvalidInputError(f"dual_rate_metrics needs a dual-rate schedule's timeline, got {schedule.name!r}")
    shape = schedule.shape
    batch = positive_int("batch_size", batch_size)
    unit = positive_float("time_unit_s", time_unit_s)
    stash = (1.0,) * shape.num_vision_stages if stash_bytes is None else finite_floats(
        "stash_bytes", stash_bytes, length=shape.num_vision_stages, allow_zero=True)
    latent = float(finite_floats("latent_bytes", [latent_bytes], allow_zero=True)[0])
    makespan = timeline.makespan
    seconds = makespan * unit
    first, last_vision = shape.first_action_stage, shape.num_vision_stages - 1
    window_ends = [timeline.end_of(schedule.orders[first][3 * step + 1])  # B of the window's last step
                   for step in (shape.window(j)[-1] for j in range(shape.num_frames))]
    latents = [(timeline.end_of(schedule.orders[last_vision][schedule.position(Action(Kind.F, last_vision, j))[1]]),
                window_ends[j]) for j in range(shape.num_frames)]
    frames = []
    for stage in range(shape.num_vision_stages):
        order = schedule.orders[stage]
        held = [(timeline.end_of(order[schedule.position(Action(Kind.F, stage, j))[1]]),
                 timeline.end_of(order[schedule.position(Action(Kind.U, stage, j))[1]])) for j in range(shape.num_frames)]
        frames.append(_peak_overlap(held))
    update_ends = [timeline.end_of(schedule.orders[first][3 * shape.window(j)[-1] + 2]) for j in range(shape.num_frames)]
    steady = steady_rate = None
    if shape.num_frames >= 8:
        low, high = shape.num_frames // 4, 3 * shape.num_frames // 4
        # The steady state repeats every lcm(frames on its critical cycles) frames; measure whole repeats.
        repeat = _repeat_length(shape.num_vision_stages, shape.max_staleness)
        if high - low >= repeat:
            high = low + (high - low) // repeat * repeat
        steady = (update_ends[high] - update_ends[low]) / (high - low)
        steady_rate = shape.rate_ratio * batch / (steady * unit) if steady > 0 else None
    peak_latents = _peak_overlap(latents)
    return DualRateMetrics(
        rate_ratio=shape.rate_ratio,
        makespan=makespan,
        samples_per_s=shape.num_steps * batch / seconds,
        frames_per_s=shape.num_frames / seconds,
        steady_period=steady,
        steady_samples_per_s=steady_rate,
        utilisation=tuple(float(u) for u in timeline.utilisation),
        staleness={stage: schedule.staleness(stage) for stage in range(shape.num_vision_stages)},
        step_staleness=schedule.step_staleness(),
        peak_latents=peak_latents,
        peak_latent_bytes=peak_latents * latent,
        peak_frames=tuple(frames),
        peak_stash_bytes=tuple(count * size for count, size in zip(frames, stash)),
    )
