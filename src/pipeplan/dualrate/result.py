"""What one dual-rate run measured: :class:`DualRateRun` (losses, throughput, staleness, per-action records).

    run = run_dual_rate(DualRateConfig(rate_ratio=4, time_budget=5.0))   # pipeplan.dualrate.runtime
    run.samples_per_s, run.final_loss, run.staleness_histogram()
    run.timeline()       # the measured Timeline on the run's DualRateSchedule

torch-free (the weights it may carry are torch tensors, made by the ranks).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

from ..errors import InvalidInputError
from .config import DualRateConfig

__all__ = ["DualRateRun"]


@dataclass
class DualRateRun:
    """What one run measured (on the action rank, plus every rank's records).

    Attributes:
        config: the run's configuration.
        steps, frames: action steps and frames trained.
        wall_s: seconds from the start barrier to the action rank's last update.
        curve: per action step ``(seconds since start, samples so far, training loss)``;
            the training loss is the step's loss before its update, on fresh samples.
        final_loss: held-out mean squared error with the final weights.
        staleness: per vision stage, the measured Δt of every frame's gradient.
        records: ``(rank, kind, stage, index, start_ms, end_ms, cpu_ms)`` of every action:
            wall-clock start and end (ms since the start barrier; the start is taken
            after the action's message arrived, so waiting is not counted) and the
            rank's thread CPU time spent in it (what it would take on an idle core).
        weights: with ``config.return_weights``, ``"encoder.<name>"`` and ``"head.<name>"``
            final parameters (encoder names as in the unsplit encoder).
    """

    config: DualRateConfig
    steps: int
    frames: int
    wall_s: float
    curve: list[tuple[float, int, float]]
    final_loss: float
    staleness: dict[int, list[int]] = field(default_factory=dict)
    records: list[tuple[int, str, int, int, float, float, float]] = field(default_factory=list)
    weights: dict[str, Any] = field(default_factory=dict)

    @property
    def samples_per_s(self) -> float:
        """Training samples (action side) per second of wall time."""
        return self.steps * self.config.num_envs / self.wall_s

    @property
    def frames_per_s(self) -> float:
        """Vision forward batches per second (the synchronous pipeline runs one per step)."""
        return self.frames / self.wall_s

    def stage_costs(self) -> dict[int, tuple[float, float, float]]:
        """Per stage, mean CPU ms of its ``F``, ``B`` and ``U`` (dual-rate runs; 0 for a kind it never ran)."""
        sums: dict[tuple[int, str], list[float]] = {}
        for _rank, kind, stage, _index, _start, _end, cpu in self.records:
            sums.setdefault((stage, kind), []).append(cpu)
        stages = sorted({stage for stage, _kind in sums})
        return {s: tuple(sum(sums.get((s, k), [0.0])) / len(sums.get((s, k), [0.0])) for k in "FBU")  # type: ignore[misc]
                for s in stages}

    def timeline(self) -> Any:
        """The measured :class:`~pipeplan.timeline.Timeline` of a dual-rate run (ms; on its schedule).

        Raises:
            InvalidInputError: a synchronous-pipeline run (it has no dual-rate schedule).
        """
        import numpy as np

        from ..schedule import Action
        from ..schedules.dual_rate import DualRateSchedule
        from ..timeline import Timeline

        if self.config.method != "dual-rate":
            raise InvalidInputError("only a dual-rate run has a dual-rate timeline")
        schedule = DualRateSchedule(self.config.shape(self.frames))
        offsets = np.concatenate([[0], np.cumsum([len(order) for order in schedule.orders])])
        start = np.zeros(schedule.num_actions)
        end = np.zeros(schedule.num_actions)
        for _rank, kind, stage, index, began, ended, _cpu in self.records:
            rank, position = schedule.position(Action(kind, stage, index))
            start[offsets[rank] + position] = began
            end[offsets[rank] + position] = ended
        return Timeline(schedule, start, end, source="measured")

    def staleness_histogram(self) -> dict[int, int]:
        """Δt → number of gradients, over all vision stages."""
        counts: Counter[int] = Counter()
        for values in self.staleness.values():
            counts.update(values)
        return dict(sorted(counts.items()))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary (no per-action records)."""
        return {
            "config": asdict(self.config), "steps": self.steps, "frames": self.frames, "wall_s": self.wall_s,
            "samples_per_s": self.samples_per_s, "frames_per_s": self.frames_per_s,
            "final_loss": self.final_loss, "staleness_histogram": self.staleness_histogram(),
            "curve": self.curve,
        }
