"""How much of a step's idle time comes from microbatches that are not alike.

With costs per (stage, microbatch) (:meth:`StageCosts.per_microbatch
<pipeplan.costs.StageCosts.per_microbatch>`), a rank idles for two reasons: the
schedule's own bubble, which it would have with every microbatch at its stage's
mean cost, and the variation, the extra idle caused by microbatches differing::

    >>> from pipeplan import build_schedule, StageCosts
    >>> from pipeplan.variation import idle_split
    >>> schedule = build_schedule("1f1b", num_stages=2, num_microbatches=4)
    >>> costs = StageCosts.per_microbatch([[1, 1, 1, 5], [1, 1, 1, 1]])   # the last microbatch slow on stage 0
    >>> split = idle_split(schedule, costs)
    >>> split.makespan, split.mean_makespan, split.bubble, split.variation
    (27.0, 25.0, (1.0, 13.0), (2.0, 2.0))
    >>> split.lower_bound <= split.makespan <= split.upper_bound
    True

Definitions (times in the costs' unit), per rank ``r``:

* ``idle[r]``: every idle time of the step, ``makespan - busy[r]``, the sum of
  :meth:`Timeline.idle_by_cause <pipeplan.timeline.Timeline.idle_by_cause>` (fill, drain,
  starved, blocked);
* ``mean_idle[r]``: the same for the same orders with every microbatch at its stage's mean
  cost (:func:`collapsed` ``"mean"``), and its messages at their boundary's mean bytes
  (:func:`collapsed_comm`, where ``comm`` has ``microbatch_bytes``);
* ``bubble[r] = min(idle[r], mean_idle[r])`` and ``variation[r] = idle[r] - bubble[r]``:
  both ``>= 0``, summing to ``idle[r]``; the variation is 0 when the microbatches are
  alike. An order of unlike microbatches may idle *less* than the mean (a cheap
  microbatch first fills the pipeline sooner): then the variation is 0 and
  ``mean_idle[r] - idle[r]`` is what the order gained (``makespan < mean_makespan``).
* ``cause_change[r]``: per idle cause, ``idle_by_cause`` minus the mean-cost one's: where
  on the rank the variation shows (``starved_upstream`` behind a slow microbatch, ...).

Bounds on the step, valid for any microbatch costs (tested): ``lower_bound`` is
:func:`pipeplan.analytic.makespan_lower_bound` on the per-microbatch costs (each rank's
fill, all its microbatches' work and drain; each stage's microbatches one at a time; each
microbatch's critical path; each boundary's fastest message); ``upper_bound`` is the step
with every microbatch at its stage's largest cost and its boundary's largest message (the
simulator's times are maxima of sums of durations and message times, so they cannot
shrink when one grows).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from .analytic import makespan_lower_bound
from .costs import CommModel, StageCosts
from .errors import InvalidInputError
from .schedule import Kind, Schedule
from .simulate import simulate
from .timeline import IdleCause, Timeline

__all__ = ["IdleSplit", "idle_split", "collapsed", "collapsed_comm", "Collapse"]

Collapse = Literal["mean", "min", "max"]


def _reduce(row: Sequence[float], how: Collapse) -> float:
    """One stage's microbatch times reduced to one: exactly the value where they are all equal."""
    first = row[0]
    if all(value == first for value in row):
        return first
    if how == "min":
        return min(row)
    if how == "max":
        return max(row)
    return math.fsum(row) / len(row)


def collapsed(costs: StageCosts, num_microbatches: int, how: Collapse = "mean") -> StageCosts:
    """Per-stage costs with every microbatch at its stage's ``how`` (``mean``, ``min``, ``max``) time.

    Each of ``F``, ``B``, ``I`` and ``W`` is reduced on its own (``I`` given as a measured
    ``backward_input``, so the ``max`` costs are at least every microbatch's in every
    kind). Costs whose microbatches are alike (no matrix, no ``microbatch_scale``) come
    back unchanged, the same object. Bytes and ``update`` are kept.
    """
    if how not in ("mean", "min", "max"):
        raise InvalidInputError(f"how must be 'mean', 'min' or 'max', got {how!r}")
    if costs.microbatch_costs is None and costs.microbatch_scale is None:
        return costs
    costs.check_shape(costs.num_stages, num_microbatches)
    mbs = range(num_microbatches)
    rows = {kind: [_reduce([costs.duration(kind, s, mb) for mb in mbs], how) for s in range(costs.num_stages)]
            for kind in (Kind.F, Kind.B, Kind.I, Kind.W)}
    return StageCosts(rows[Kind.F], rows[Kind.B], rows[Kind.W], costs.activation_bytes, costs.weight_stash_bytes,
                      None, costs.update, rows[Kind.I])


def collapsed_comm(comm: CommModel | None, how: Collapse = "mean") -> CommModel | None:
    """``comm`` with every microbatch's message across a boundary at that boundary's ``how`` bytes.

    Messages whose bytes do not vary per microbatch (no ``microbatch_bytes``): ``comm`` itself.
    """
    if comm is None or comm.microbatch_bytes is None:
        return comm
    if how not in ("mean", "min", "max"):
        raise InvalidInputError(f"how must be 'mean', 'min' or 'max', got {how!r}")
    return CommModel(comm.latency, comm.bandwidth, [_reduce(row, how) for row in comm.microbatch_bytes],
                     comm.send_mode)


@dataclass(frozen=True)
class IdleSplit:
    """A step's idle time per rank, split into the schedule's bubble and the variation (see the module doc).

    Per-rank tuples are indexed by rank; times in the costs' unit.
    """

    makespan: float
    mean_makespan: float
    lower_bound: float
    upper_bound: float
    idle: tuple[float, ...]
    mean_idle: tuple[float, ...]
    bubble: tuple[float, ...]
    variation: tuple[float, ...]
    cause_change: tuple[dict[IdleCause, float], ...]

    @property
    def total_variation(self) -> float:
        """Σ over ranks of the variation's idle."""
        return math.fsum(self.variation)

    @property
    def total_bubble(self) -> float:
        """Σ over ranks of the schedule's bubble."""
        return math.fsum(self.bubble)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the step, its bounds, and per rank the idle, its split and the change per cause."""
        return {
            "makespan": self.makespan, "mean_makespan": self.mean_makespan,
            "lower_bound": self.lower_bound, "upper_bound": self.upper_bound,
            "ranks": [{"rank": r, "idle": self.idle[r], "mean_idle": self.mean_idle[r], "bubble": self.bubble[r],
                       "variation": self.variation[r],
                       "cause_change": {cause.value: change for cause, change in self.cause_change[r].items()}}
                      for r in range(len(self.idle))],
        }


def idle_split(schedule: Schedule, costs: StageCosts, comm: CommModel | None = None, *,
               timeline: Timeline | None = None) -> IdleSplit:
    """Split each rank's idle time of ``schedule`` on ``costs`` into bubble and variation, with bounds.

    ``timeline``: the step already simulated on ``costs`` and ``comm`` (else it is simulated
    here). The mean-cost step runs the same orders (an adaptive schedule is not rebuilt).
    """
    count = schedule.num_microbatches
    costs.check_shape(schedule.num_stages, count)
    actual = timeline if timeline is not None else simulate(schedule, costs, comm)
    if actual.schedule is not schedule:
        raise InvalidInputError("timeline must be a simulation of this schedule")
    mean_costs, mean_comm = collapsed(costs, count, "mean"), collapsed_comm(comm, "mean")
    alike = mean_costs is costs and mean_comm is comm
    mean = actual if alike else simulate(schedule, mean_costs, mean_comm, validate=False)
    upper = actual if alike else simulate(schedule, collapsed(costs, count, "max"), collapsed_comm(comm, "max"),
                                          validate=False)
    idle_causes, mean_causes = actual.idle_by_cause(), mean.idle_by_cause()
    idle = tuple(math.fsum(causes.values()) for causes in idle_causes)
    mean_idle = tuple(math.fsum(causes.values()) for causes in mean_causes)
    bubble = tuple(min(total, base) for total, base in zip(idle, mean_idle))
    return IdleSplit(
        makespan=actual.makespan, mean_makespan=mean.makespan,
        lower_bound=makespan_lower_bound(schedule, costs, comm), upper_bound=upper.makespan,
        idle=idle, mean_idle=mean_idle, bubble=bubble,
        variation=tuple(total - part for total, part in zip(idle, bubble)),
        cause_change=tuple({cause: now[cause] - then[cause] for cause in IdleCause}
                           for now, then in zip(idle_causes, mean_causes)),
    )
