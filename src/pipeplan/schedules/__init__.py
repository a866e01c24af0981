"""Schedule generators, one module per family, and the name → generator registry.

    from pipeplan.schedules import build_schedule, SCHEDULES
    schedule = build_schedule("1f1b", num_stages=4, num_microbatches=8)
    sorted(SCHEDULES)   # names accepted by build_schedule and the CLI's --schedule

Every generator takes ``(num_stages, num_microbatches, *, backward=..., **options)``
and returns a :class:`~pipeplan.schedule.Schedule`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from .._validation import positive_int
from ..errors import InvalidInputError
from ..limits import check_schedule_size
from ..schedule import Schedule
from .adaptive import adaptive
from .dual_rate import dual_rate
from .gpipe import gpipe
from .interleaved import interleaved
from .one_f_one_b import one_f_one_b
from .zb_v import zb_v
from .zero_bubble import zb_h1, zb_h2

__all__ = ["build_schedule", "SCHEDULES", "register_schedule", "schedule_options", "backward_mode"]

ScheduleFactory = Callable[..., Schedule]

SCHEDULES: dict[str, ScheduleFactory] = {
    "gpipe": gpipe,
    "1f1b": one_f_one_b,
    "interleaved": interleaved,
    "zb-h1": zb_h1,
    "zb-h2": zb_h2,
    "zb-v": zb_v,
    "adaptive": adaptive,
    "dual-rate": dual_rate,
}


def register_schedule(name: str, factory: ScheduleFactory) -> None:
    """Make ``factory`` available to :func:`build_schedule` and the CLI as ``name``.

    ``factory(num_stages, num_microbatches, **options)`` returns a Schedule; the CLI
    passes it the options it names (``backward``, ``costs``, ``comm``,
    ``virtual_stages``, ``memory_limit``) and no others.
    """
    SCHEDULES[name] = factory


def schedule_options(name: str) -> frozenset[str]:
    """The keyword options the generator called ``name`` takes (e.g. ``costs``, ``virtual_stages``).

    Raises:
        InvalidInputError: an unknown name.
    """
    factory = SCHEDULES.get(name)
    if factory is None:
        raise InvalidInputError(f"schedule must be one of {', '.join(SCHEDULES)}, got {name!r}")
    parameters = list(inspect.signature(factory).parameters.values())[2:]  # after (num_stages, num_microbatches)
    named = (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return frozenset(p.name for p in parameters if p.kind in named)


def backward_mode(name: str, options: dict[str, Any] | None = None) -> str:
    """The ``backward`` mode the generator ``name`` builds with ``options`` (its default if not given)."""
    if options and "backward" in options:
        return str(options["backward"])
    factory = SCHEDULES[name]
    parameter = inspect.signature(factory).parameters.get("backward")
    if parameter is None or parameter.default is inspect.Parameter.empty:
        return "split"  # unknown: count three kinds, the most
    return str(parameter.default)


def build_schedule(name: str, *, num_stages: int, num_microbatches: int, **options: Any) -> Schedule:
    """Build the schedule called ``name`` (see ``SCHEDULES`` for the names).

    Raises:
        InvalidInputError: an unknown name, bad sizes, a size whose schedule cannot
            fit in the memory available (see :mod:`pipeplan.limits`), or options
            the generator rejects.
    """
    if not isinstance(name, str) or name not in SCHEDULES:
        raise InvalidInputError(f"schedule must be one of {', '.join(SCHEDULES)}, got {name!r}")
    factory = SCHEDULES[name]
    check_schedule_size(
        name,
        num_stages=positive_int("num_stages", num_stages),
        num_microbatches=positive_int("num_microbatches", num_microbatches),
        backward=backward_mode(name, options),
    )
    try:
        return factory(num_stages, num_microbatches, **options)
    except TypeError as error:
        raise InvalidInputError(f"schedule {name!r} does not take these options: {error}") from None
