"""Each rank's backward actions read off a simulated timeline: when its gradients are final, its time in them.

    from pipeplan.planner.backwards import _gradient_time, _gradient_work
    work = _gradient_work(timeline, rank, {stage: grad_bytes}, to_ms)   # [(start_ms, end_ms, bytes)] per stage
    busy = _gradient_time(timeline, rank, {0, 1}, to_ms)                # ms in B and W of stages 0 and 1

What :class:`~pipeplan.planner.evaluate.Evaluator` prices the data-parallel gradient
reduction's overlap with (:mod:`pipeplan.planner.step`): a stage's gradients are final
when its last-ending ``W`` (or ``B`` without a split backward) ends. Read once per
timeline and rank (a fixed template's timeline is shared by every data-parallel mode).
Torch-free.
"""

from __future__ import annotations

from weakref import WeakKeyDictionary

from ..actions import Kind
from ..timeline import Timeline


#: per timeline and rank, its backward actions read off once: the last-ending (start, end) of each stage's
#: gradient work, and every ``B``/``W`` as (stage, start, end) in order (a fixed template's timeline is shared
#: by every data-parallel mode, and each asks)
_BACKWARDS: WeakKeyDictionary[Timeline, dict[int, tuple[dict[int, tuple[float, float]],
                                                    list[tuple[int, float, float]]]]] = WeakKeyDictionary()


def _rank_backwards(timeline: Timeline, rank: int) -> tuple[dict[int, tuple[float, float]],
                                                          list[tuple[int, float, float]]]:
    """``rank``'s backward actions in ``timeline`` (cached per timeline): see :data:`_BACKWARDS`."""
    per_rank = _BACKWARDS.setdefault(timeline, {})
    found = per_rank.get(rank)
    if found is None:
        last: dict[int, tuple[float, float]] = {}
        spans: list[tuple[int, float, float]] = []
        lo, hi = int(timeline.rank_offsets[rank]), int(timeline.rank_offsets[rank + 1])
        # what timeline.records(rank) yields, read off its arrays at once (the same floats)
        for action, start, end in zip(timeline.schedule.orders[rank], timeline.start[lo:hi].tolist(),
                                      timeline.end[lo:hi].tolist()):
            if action.kind in (Kind.B, Kind.W):
                spans.append((action.stage, start, end))
                if action.stage not in last or end > last[action.stage][1]:
                    last[action.stage] = (start, end)
        found = per_rank[rank] = (last, spans)
    return found


def _gradient_time(timeline: Timeline, rank: int, stages: set[int], to_ms: float) -> float:
    """Milliseconds ``rank`` spends in the backward (``B``, ``W``) of ``stages`` over the whole step."""
    return sum((end - start) * to_ms for stage, start, end in _rank_backwards(timeline, rank)[1] if stage in stages)


def _gradient_work(timeline: Timeline, rank: int, stage_bytes: dict[int, float],
                   to_ms: float) -> list[tuple[float, float, float]]:
    """``(start, end, bytes)`` in ms of the action that finalises each stage's gradients on ``rank``.

    A stage's gradients are final in its last-ending ``W`` (or ``B`` without a
    split backward); that action produces the stage's ``stage_bytes``.
    """
    last = _rank_backwards(timeline, rank)[0]
    return [(start * to_ms, end * to_ms, stage_bytes[stage]) for stage, (start, end) in last.items()
            if stage in stage_bytes]
