"""Predicted against measured: how far a simulated Timeline is from a real run.

    >>> import pipeplan
    >>> schedule = pipeplan.build_schedule("1f1b", num_stages=2, num_microbatches=4)
    >>> predicted = pipeplan.simulate(schedule, pipeplan.StageCosts([6, 4]))     # costs measured in isolation
    >>> measured = pipeplan.simulate(schedule, pipeplan.StageCosts([6.5, 4.2]))  # stands in for the runtime's
    >>> comparison = pipeplan.compare(predicted, measured)       # print(comparison.report()): worst actions
    >>> round(comparison.makespan_error, 3), round(comparison.makespan_relative_error, 3)
    (-6.1, -0.073)

Both timelines must come from the same :class:`~pipeplan.schedule.Schedule`
shape (same actions on the same ranks); the action order may differ, since
actions are matched by :class:`~pipeplan.schedule.Action`. Errors are
``predicted − measured`` in the timelines' unit (ms for the runtime); relative
errors divide by the measured value.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import InvalidInputError
from ..schedule import Action
from ..timeline import Timeline

__all__ = ["Comparison", "compare"]


@dataclass(frozen=True)
class Comparison:
    """Errors of a predicted timeline against a measured one.

    Attributes:
        predicted_makespan, measured_makespan: the two makespans.
        actions: the matched actions, in the measured timeline's order.
        ranks: the rank of each matched action.
        start_error, end_error, duration_error: ``predicted − measured`` per action.
    """

    predicted_makespan: float
    measured_makespan: float
    actions: tuple[Action, ...]
    ranks: np.ndarray
    start_error: np.ndarray
    end_error: np.ndarray
    duration_error: np.ndarray
    measured_duration: np.ndarray

    @property
    def makespan_error(self) -> float:
        """``predicted − measured`` makespan."""
        return self.predicted_makespan - self.measured_makespan

    @property
    def makespan_relative_error(self) -> float:
        """``(predicted − measured) / measured`` makespan (``inf`` if measured is 0)."""
        if self.measured_makespan == 0:
            return 0.0 if self.predicted_makespan == 0 else float("inf")
        return self.makespan_error / self.measured_makespan

    @property
    def mean_abs_duration_error(self) -> float:
        """Mean of ``|predicted − measured|`` action durations."""
        return float(np.abs(self.duration_error).mean()) if self.duration_error.size else 0.0

    @property
    def mean_abs_start_error(self) -> float:
        """Mean of ``|predicted − measured|`` action starts."""
        return float(np.abs(self.start_error).mean()) if self.start_error.size else 0.0

    def worst(self, count: int = 5) -> list[tuple[int, Action, float]]:
        """The ``count`` actions whose end is furthest off: ``(rank, action, end error)``."""
        order = np.argsort(-np.abs(self.end_error), kind="stable")[:count]
        return [(int(self.ranks[i]), self.actions[i], float(self.end_error[i])) for i in order]

    def by_kind(self) -> dict[str, dict[str, float]]:
        """Per action kind: mean measured duration and mean duration error."""
        out: dict[str, dict[str, float]] = {}
        kinds = np.array([a.kind for a in self.actions])
        for kind in sorted(set(kinds.tolist())):
            mask = kinds == kind
            out[kind] = {
                "count": int(mask.sum()),
                "mean_measured_duration": float(self.measured_duration[mask].mean()),
                "mean_duration_error": float(self.duration_error[mask].mean()),
                "mean_abs_duration_error": float(np.abs(self.duration_error[mask]).mean()),
            }
        return out

    def to_dict(self) -> dict[str, Any]:
        """Headline numbers (JSON-ready)."""
        return {
            "predicted_makespan": self.predicted_makespan,
            "measured_makespan": self.measured_makespan,
            "makespan_error": self.makespan_error,
            "makespan_relative_error": self.makespan_relative_error,
            "mean_abs_start_error": self.mean_abs_start_error,
            "mean_abs_duration_error": self.mean_abs_duration_error,
            "by_kind": self.by_kind(),
            "worst": [
                {"rank": rank, "action": str(action), "end_error": error}
                for rank, action, error in self.worst()
            ],
        }

    def report(self, unit: str = "ms") -> str:
        """A short text report; times in ``unit``, the timelines' (pipeplan's costs are ms)."""
        u = f" {unit}" if unit else ""
        lines = [
            f"makespan: predicted {self.predicted_makespan:.3f}{u}, measured {self.measured_makespan:.3f}{u}, "
            f"error {self.makespan_error:+.3f}{u} ({100 * self.makespan_relative_error:+.1f}%)",
            f"per action: mean |start error| {self.mean_abs_start_error:.3f}{u}, "
            f"mean |duration error| {self.mean_abs_duration_error:.3f}{u}",
        ]
        for kind, stats in self.by_kind().items():
            lines.append(
                f"  {kind}: {stats['count']} actions, measured mean {stats['mean_measured_duration']:.3f}{u}, "
                f"mean error {stats['mean_duration_error']:+.3f}{u}"
            )
        worst = ", ".join(f"rank {r} {a} {e:+.3f}{u}" for r, a, e in self.worst(3))
        if worst:
            lines.append(f"furthest ends: {worst}")
        return "\n".join(lines)


def compare(predicted: Timeline, measured: Timeline) -> Comparison:
    """Match the two timelines action by action and measure the errors.

    Args:
        predicted: usually :func:`pipeplan.simulate`'s timeline.
        measured: usually the runtime's (``source="measured"``).

    Raises:
        InvalidInputError: the timelines do not hold the same actions on the same ranks.
    """
    for name, value in (("predicted", predicted), ("measured", measured)):
        if not isinstance(value, Timeline):
            raise InvalidInputError(f"{name} must be a Timeline, got {type(value).__name__}")
    p_schedule, m_schedule = predicted.schedule, measured.schedule
    if p_schedule.num_ranks != m_schedule.num_ranks or p_schedule.num_actions != m_schedule.num_actions:
        raise InvalidInputError(
            f"the timelines describe different schedules: predicted has {p_schedule.num_ranks} ranks and "
            f"{p_schedule.num_actions} actions, measured {m_schedule.num_ranks} ranks and "
            f"{m_schedule.num_actions} actions"
        )
    actions = []
    ranks = []
    p_index = []
    for rank, order in enumerate(m_schedule.orders):
        for action in order:
            try:
                p_rank, _position = p_schedule.position(action)
            except KeyError:
                raise InvalidInputError(f"measured {action} on rank {rank} is not in the predicted timeline") from None
            if p_rank != rank:
                raise InvalidInputError(
                    f"{action} ran on rank {rank} but the prediction places it on rank {p_rank}"
                )
            actions.append(action)
            ranks.append(rank)
            p_index.append(predicted.index_of(action))
    index = np.asarray(p_index, dtype=int)
    p_start, p_end = predicted.start[index], predicted.end[index]
    m_start, m_end = measured.start, measured.end
    return Comparison(
        predicted_makespan=predicted.makespan,
        measured_makespan=measured.makespan,
        actions=tuple(actions),
        ranks=np.asarray(ranks, dtype=int),
        start_error=p_start - m_start,
        end_error=p_end - m_end,
        duration_error=(p_end - p_start) - (m_end - m_start),
        measured_duration=m_end - m_start,
    )
