"""Schedule generators, one module per family, and the registry: name → :class:`ScheduleInfo`.

    from pipeplan.schedules import build_schedule, schedule_info, SCHEDULES
    schedule = build_schedule("1f1b", num_stages=4, num_microbatches=8)
    sorted(SCHEDULES)                        # names accepted by build_schedule and the CLI's --schedule
    schedule_info("zb-v").stages_for(4)      # 8: what the rest of pipeplan asks instead of the name

Every generator takes ``(num_stages, num_microbatches, *, backward=..., **options)``
and returns a :class:`~pipeplan.schedule.Schedule`. A new schedule is one module
plus one entry in :data:`_REGISTRY` (or a :func:`register_schedule` call);
nothing outside this package branches on a schedule's name.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from .._validation import positive_int
from ..analytic import one_f_one_b_peak_inflight
from ..errors import InvalidInputError
from ..limits import SCHEDULE_BYTES_PER_ACTION, SIMULATION_BYTES_PER_ACTION, check_actions_size
from ..schedule import Schedule
from .adaptive import ADAPTIVE_BYTES_PER_ACTION, adaptive
from .dual_rate import dual_rate
from .gpipe import gpipe
from .info import Layout, ScheduleFactory, ScheduleInfo
from .interleaved import interleaved
from .one_f_one_b import one_f_one_b
from .zb_v import zb_v
from .zero_bubble import zb_h1, zb_h2

__all__ = [
    "schedule_label",
    "build_schedule",
    "check_schedule_size",
    "planned_schedules",
    "SCHEDULES",
    "register_schedule",
    "schedule_info",
    "schedule_options",
    "backward_mode",
    "Layout",
    "ScheduleFactory",
    "ScheduleInfo",
]


def _one_f_one_b_inflight(num_stages: int, num_microbatches: int) -> tuple[int, ...]:
    return tuple(one_f_one_b_peak_inflight(stage, num_stages, num_microbatches) for stage in range(num_stages))


def _gpipe_inflight(num_stages: int, num_microbatches: int) -> tuple[int, ...]:
    return (num_microbatches,) * num_stages  # every forward before the first backward


_REGISTRY: dict[str, ScheduleInfo] = {
    info.name: info
    for info in (
        ScheduleInfo("gpipe", gpipe, inflight_closed_form=_gpipe_inflight),
        ScheduleInfo("1f1b", one_f_one_b, inflight_closed_form=_one_f_one_b_inflight),
        ScheduleInfo("interleaved", interleaved, layout="loop"),
        ScheduleInfo("zb-h1", zb_h1),
        ScheduleInfo("zb-h2", zb_h2),
        ScheduleInfo("zb-v", zb_v, layout="v"),
        ScheduleInfo("adaptive", adaptive, stand_ins=("1f1b", "interleaved"),
                     build_bytes_per_action=ADAPTIVE_BYTES_PER_ACTION),
        # F, B and U: a full backward (backward_mode still says "split": three kinds to count)
        ScheduleInfo("dual-rate", dual_rate, split_backward=False, updates_in_step=True,
                     not_planned="it trains asynchronously on stale gradients (docs/dual_rate.md), a different "
                                 "step than the synchronous one every other schedule computes"),
    )
}

#: name → generator, in registration order (public: ``sorted(SCHEDULES)`` lists the names).
#: The factory here is the truth: a name whose factory was replaced here directly gets
#: its metadata read off the new factory (see :func:`schedule_info`).
SCHEDULES: dict[str, ScheduleFactory] = {name: info.factory for name, info in _REGISTRY.items()}

#: Every entry ever registered, by name and factory: a factory swapped out of
#: ``SCHEDULES`` and put back gets its registered metadata again, not a bare reading.
_DECLARED: dict[tuple[str, ScheduleFactory], ScheduleInfo] = {(i.name, i.factory): i for i in _REGISTRY.values()}


def _unknown(name: object) -> InvalidInputError:
    return InvalidInputError(f"schedule must be one of {', '.join(SCHEDULES)}, got {name!r}")


def schedule_info(name: str) -> ScheduleInfo:
    """The registry's entry for ``name``: its generator and the shape it builds.

    Raises:
        InvalidInputError: an unknown name.
    """
    factory = SCHEDULES.get(name) if isinstance(name, str) else None
    if factory is None:
        raise _unknown(name)
    info = _REGISTRY.get(name)
    if info is None or info.factory is not factory:  # put into SCHEDULES directly: as registered, else bare
        info = _REGISTRY[name] = _DECLARED.get((name, factory)) or ScheduleInfo(name, factory)
    return info


def schedule_label(name: str, virtual_stages: int = 1) -> str:
    """How tables name ``name`` over ``virtual_stages`` chunks per rank (:meth:`ScheduleInfo.label`):
    ``"interleaved v=3"``, ``"adaptive v=2"``, ``"zb-v"``; a name not registered (a custom
    placement) is its own label."""
    return schedule_info(name).label(virtual_stages) if name in SCHEDULES else name


def register_schedule(name: str, factory: ScheduleFactory | ScheduleInfo) -> None:
    """Make ``factory`` available to :func:`build_schedule` and the CLI as ``name``.

    ``factory(num_stages, num_microbatches, **options)`` returns a Schedule; the CLI
    passes it the options it names (``backward``, ``costs``, ``comm``,
    ``virtual_stages``, ``memory_limit``) and no others. A bare factory gets the
    metadata its signature gives (one stage per rank; see :class:`ScheduleInfo`);
    pass a :class:`ScheduleInfo` to say more (its name is replaced by ``name``).
    """
    info = factory if isinstance(factory, ScheduleInfo) else ScheduleInfo(name, factory)
    if info.name != name:
        info = replace(info, name=name)
    _REGISTRY[name] = _DECLARED[(name, info.factory)] = info
    SCHEDULES[name] = info.factory


def planned_schedules() -> tuple[str, ...]:
    """The registered schedules the planner plans (every one whose :attr:`ScheduleInfo.not_planned` is ``None``),
    in registration order."""
    return tuple(name for name in SCHEDULES if schedule_info(name).not_planned is None)


def check_schedule_size(
    name: str,
    *,
    num_stages: int,
    num_microbatches: int,
    backward: str = "split",
    simulated: bool = False,
    names: tuple[str, str] = ("num_stages", "num_microbatches"),
) -> int:
    """Raise :class:`InvalidInputError` when the schedule ``name`` of this size cannot fit in memory.

    Args:
        name: a registered schedule; its :attr:`ScheduleInfo.build_bytes_per_action` (the adaptive
            generator's, say) replaces a fixed schedule's estimate.
        num_stages, num_microbatches: the size (validated integers >= 1).
        backward: ``"full"``, ``"split"`` or ``"none"`` (how many action kinds).
        simulated: count the simulation and views too, not only the schedule.
        names: how the message names the two sizes (the CLI passes its flags).

    Returns:
        The number of actions.
    """
    per_action = schedule_info(name).build_bytes_per_action or (
        SIMULATION_BYTES_PER_ACTION if simulated else SCHEDULE_BYTES_PER_ACTION)
    return check_actions_size(num_stages=num_stages, num_microbatches=num_microbatches, backward=backward,
                              bytes_per_action=per_action, names=names)


def schedule_options(name: str) -> frozenset[str]:
    """The keyword options the generator called ``name`` takes (e.g. ``costs``, ``virtual_stages``).

    Raises:
        InvalidInputError: an unknown name.
    """
    return schedule_info(name).options


def backward_mode(name: str, options: dict[str, Any] | None = None) -> str:
    """The ``backward`` mode the generator ``name`` builds with ``options`` (its default if not given)."""
    if options and "backward" in options:
        return str(options["backward"])
    return schedule_info(name).default_backward


def build_schedule(name: str, *, num_stages: int, num_microbatches: int, **options: Any) -> Schedule:
    """Build the schedule called ``name`` (see ``SCHEDULES`` for the names).

    Raises:
        InvalidInputError: an unknown name, bad sizes, a size whose schedule cannot
            fit in the memory available (see :mod:`pipeplan.limits`), or options
            the generator rejects.
    """
    if not isinstance(name, str) or name not in SCHEDULES:
        raise _unknown(name)
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
