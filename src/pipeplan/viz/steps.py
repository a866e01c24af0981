"""The seed lesson's step table: what each stage runs in each unit time step.

Lesson 002 prints 1F1B for 3 stages and 4 microbatches as lines like
``T=1: S1: F1(1)``. :func:`step_table` prints any timeline whose actions start
and end on a grid of one time unit (e.g. ``F = B = 1``) in that notation, counted
from 0 like every other view (the Gantt, the rank table, the trace)::

    >>> import pipeplan
    >>> from pipeplan.viz import step_table
    >>> tl = pipeplan.simulate(pipeplan.build_schedule("1f1b", num_stages=3, num_microbatches=4),
    ...                        pipeplan.StageCosts.uniform(3, forward=1, backward=1))
    >>> print(step_table(tl))
    T=0: S0: F0(0)
    T=1: S0: F0(1) | S1: F1(0)
    T=2: S0: F0(2) | S1: F1(1) | S2: F2(0)
    T=3: S2: B2(0)
    ...
    T=11: S0: B0(3)

Notation (the lesson's letters, pipeplan's 0-based numbers; the lesson's ``T=1:
S1: F1(1)`` is ``T=0: S0: F0(0)`` here): ``T=t`` is the time step
``[t·unit, (t + 1)·unit)``; ``Sk`` is stage ``k``; ``F1(2)`` is the forward of
stage 1 on microbatch 2, ``B``/``W`` the backward / weight gradient. Each line
lists, in stage order, the stages busy during that step; a step in which no stage
computes (a communication gap) reads ``T=t: idle``.
"""

from __future__ import annotations

import math
from fractions import Fraction

from ..errors import InvalidInputError
from ..timeline import expect_timeline
from ..timeline import Timeline

__all__ = ["step_table", "STEP_TABLE_KEY"]

#: One line that reads the notation, printed above a step table (the Gantt's letters carry the microbatch instead).
STEP_TABLE_KEY = ("step table: T=t is time step t; Sk: stage k; Fk(m): stage k's forward of microbatch m "
                  "(B backward, W weight gradient), the lesson's notation; in the Gantt above, F3 is microbatch 3")

#: Longest table :func:`step_table` prints; a finer grid is almost surely not a unit-cost run.
MAX_STEPS = 100_000

_TOLERANCE = 1e-9


def _grid_unit(times: list[float]) -> float | None:
    """The largest unit whose integer multiples include every one of ``times``.

    Times are read as fractions with denominators up to 10**6 (so 0.5 or 1/3 work);
    returns ``None`` when some time is no such fraction or every time is 0.
    """
    numerator_gcd = 0
    denominator_lcm = 1
    for time in times:
        fraction = Fraction(time).limit_denominator(10**6)
        if abs(float(fraction) - time) > _TOLERANCE * max(1.0, abs(time)):
            return None
        numerator_gcd = math.gcd(numerator_gcd, fraction.numerator)
        denominator_lcm = math.lcm(denominator_lcm, fraction.denominator)
    if numerator_gcd == 0:
        return None
    # For fractions in lowest terms, gcd(a/b, c/d) = gcd(a, c) / lcm(b, d).
    return float(Fraction(numerator_gcd, denominator_lcm))


def step_table(timeline: Timeline, *, unit: float | None = None) -> str:
    """The step table of ``timeline``, one ``T=t: ...`` line per time step.

    Args:
        timeline: a timeline whose actions all start and end on integer multiples
            of one time unit and last at least one unit.
        unit: the step length in the timeline's time unit; inferred as the
            largest unit every start and end is a multiple of when ``None``.

    Returns:
        Lines ``T=t: Sk: Xk(mb) | ...`` for ``t = 0 ..`` the step in which the last
        action ends (steps, stages and microbatches 0-based), joined by newlines.

    Raises:
        InvalidInputError: an action starts or ends off the grid, lasts no time,
            ``unit`` is not a positive number, or the table would exceed
            :data:`MAX_STEPS` lines.
    """
    expect_timeline("timeline", timeline)
    records = list(timeline.records())
    times = [t for record in records for t in (record.start, record.end)]
    if unit is None:
        inferred = _grid_unit(times)
        needs = (
            "step_table needs actions that start and end on multiples of one time unit "
            "(e.g. unit costs F = B = 1); "
        )
        if inferred is None:
            raise InvalidInputError(needs + "this timeline's times are on no such grid")
        if max(times) / inferred > MAX_STEPS:
            raise InvalidInputError(
                needs + f"the largest unit this timeline's times share is {inferred:g}, which would "
                f"take {max(times) / inferred:.3g} steps (at most {MAX_STEPS} allowed)"
            )
        unit = inferred
    else:
        try:
            unit = float(unit)
        except (TypeError, ValueError):
            raise InvalidInputError(f"unit must be a number > 0, got {unit!r}") from None
        if not math.isfinite(unit) or unit <= 0:
            raise InvalidInputError(f"unit must be a number > 0, got {unit!r}")

    if max(times) / unit > MAX_STEPS:
        raise InvalidInputError(
            f"step_table would print {math.ceil(max(times) / unit)} steps of unit {unit:g} "
            f"(at most {MAX_STEPS} allowed); pass a larger unit or use text_gantt"
        )

    def step_of(time: float, record_text: str) -> int:
        steps = time / unit
        whole = round(steps)
        if abs(steps - whole) > _TOLERANCE * max(1.0, abs(steps)):
            raise InvalidInputError(
                f"step_table needs actions aligned to a grid of unit {unit:g}: {record_text} "
                f"has a boundary at {time:g}, which is {steps:g} units"
            )
        return int(whole)

    busy: dict[int, list[tuple[int, str]]] = {}
    last_step = 0
    for record in records:
        action = record.action
        where = f"{action} on rank {record.rank}"
        first = step_of(record.start, where)
        stop = step_of(record.end, where)
        if stop <= first:
            raise InvalidInputError(
                f"step_table needs every action to last at least one unit ({unit:g}); "
                f"{where} lasts {record.end - record.start:g}"
            )
        text = f"S{action.stage}: {action.kind}{action.stage}({action.microbatch})"
        for step in range(first, stop):
            busy.setdefault(step, []).append((action.stage, text))
        last_step = max(last_step, stop)
    lines = []
    for step in range(last_step):
        entries = sorted(busy.get(step, []))
        body = " | ".join(text for _stage, text in entries) if entries else "idle"
        lines.append(f"T={step}: {body}")
    return "\n".join(lines)
