"""What the rest of pipeplan may know about a schedule without branching on its name.

    from pipeplan.schedules import schedule_info
    info = schedule_info("interleaved")
    info.stages_for(4, 2), info.placement(4, 2)   # 8, (0, 1, 2, 3, 0, 1, 2, 3)
    info.split_backward, info.cost_aware          # False, False

A :class:`ScheduleInfo` is one entry of the registry (:mod:`pipeplan.schedules`):
the generator and the shape it builds for ``pp`` ranks and ``v`` chunks per rank
(stages, stage → rank placement, the options that ask for that shape), whether it
splits the backward, whether it needs the costs, and a closed form for its
in-flight microbatches per stage where one exists (else they are read off the
built orders: :func:`pipeplan.schedules.inflight.inflight_per_stage`). A factory
registered bare gets the metadata its signature gives: one stage per rank, the
split flag from its ``backward`` default, cost-aware when it takes ``costs``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Literal

from ..schedule import Schedule
from .patterns import loop_placement, v_placement

__all__ = ["Layout", "ScheduleFactory", "ScheduleInfo"]

ScheduleFactory = Callable[..., Schedule]

#: How a schedule's stages sit on ``pp`` ranks: ``"one"`` stage per rank (``S = P``),
#: ``v`` chunks per rank in a ``"loop"`` (``S = v·P``, stage ``s`` on rank ``s mod P``), or
#: two chunks per rank in a ``"v"`` (``S = 2P``).
Layout = Literal["one", "loop", "v"]

_NAMED = (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


@dataclass(frozen=True)
class ScheduleInfo:
    """One registered schedule: its generator and what its shape is.

    Attributes:
        name: the registered name (``build_schedule(name, ...)``, ``--schedule``).
        factory: ``factory(num_stages, num_microbatches, **options) -> Schedule``.
        layout: where its stages sit on the ranks (see :data:`Layout`); a generator
            that takes a ``placement`` option (:attr:`any_placement`) builds one stage
            per rank by default and any placement it is given.
        split_backward: True when it builds ``I`` and ``W`` (a split backward) by
            default; ``None`` reads it off the factory's ``backward`` default
            (:attr:`default_backward`).
        inflight_closed_form: ``(num_stages, num_microbatches) -> per-stage peak``
            in-flight microbatches of the default build, where a closed form exists.
        stand_ins: for a cost-aware generator, the fixed schedules whose in-flight
            counts and orders stand in for it before it is built: ``(one stage per
            rank, chunks in a loop)`` (see :meth:`fixed_template`).
        build_bytes_per_action: memory its build needs per action, where it is more
            than a fixed schedule's (measured; see :mod:`pipeplan.limits`).
        updates_in_step: True when it runs the optimizer update ``U`` inside the step
            (the dual-rate pipeline), so the costs may give an update time.
        not_planned: why the planner never plans it (``None``: it plans it like any other).
    """

    name: str
    factory: ScheduleFactory
    layout: Layout = "one"
    split_backward: bool | None = None
    inflight_closed_form: Callable[[int, int], tuple[int, ...]] | None = None
    stand_ins: tuple[str, str] | None = None
    build_bytes_per_action: int | None = None
    updates_in_step: bool = False
    not_planned: str | None = None

    def __post_init__(self) -> None:
        if self.split_backward is None:
            object.__setattr__(self, "split_backward", self.default_backward == "split")

    # ------------------------------------------------------------ the factory
    @cached_property
    def options(self) -> frozenset[str]:
        """The keyword options the factory takes after ``(num_stages, num_microbatches)``."""
        parameters = list(inspect.signature(self.factory).parameters.values())[2:]
        return frozenset(p.name for p in parameters if p.kind in _NAMED)

    @cached_property
    def default_backward(self) -> str:
        """The factory's ``backward`` default; ``"split"`` (the most kinds) when it has none."""
        parameter = inspect.signature(self.factory).parameters.get("backward")
        if parameter is None or parameter.default is inspect.Parameter.empty:
            return "split"  # unknown: count three kinds, the most
        return str(parameter.default)

    @property
    def cost_aware(self) -> bool:
        """True when the order depends on the stage costs (the factory takes ``costs``)."""
        return "costs" in self.options

    @property
    def any_placement(self) -> bool:
        """True when the factory takes a ``placement`` (any stage → rank map), not only its layout's."""
        return "placement" in self.options

    # ------------------------------------------------------------------ shape
    def chunks_per_rank(self, virtual_stages: int = 1) -> int:
        """Stages per rank it builds: ``v`` in a loop, 2 in a V, else 1."""
        return {"one": 1, "loop": virtual_stages, "v": 2}[self.layout]

    def stages_for(self, pp: int, virtual_stages: int = 1) -> int:
        """Stages it builds for ``pp`` ranks (``virtual_stages`` counts only in a loop)."""
        return pp * self.chunks_per_rank(virtual_stages)

    def placement(self, pp: int, virtual_stages: int = 1) -> tuple[int, ...]:
        """The stage → rank map it builds for ``pp`` ranks (its default one where it takes any)."""
        chunks = self.chunks_per_rank(virtual_stages)
        return v_placement(pp, chunks) if self.layout == "v" else loop_placement(pp, chunks)

    def shape_options(self, virtual_stages: int = 1) -> dict[str, Any]:
        """The options that ask the factory for :meth:`stages_for`'s shape: ``virtual_stages`` in a loop."""
        return {"virtual_stages": virtual_stages} if self.layout == "loop" else {}

    def fixed_template(self, virtual_stages: int = 1) -> str:
        """The fixed schedule that stands in for this one: itself, or a cost-aware one's stand-in
        for one stage per rank (``v = 1``) or chunks in a loop (``v > 1``)."""
        if self.stand_ins is None:
            return self.name
        return self.stand_ins[0] if virtual_stages == 1 else self.stand_ins[1]

    def label(self, virtual_stages: int = 1) -> str:
        """How tables name it: ``"interleaved v=3"`` in a loop, ``"adaptive v=2"`` over chunks, else the name."""
        if self.layout == "loop" or (self.any_placement and virtual_stages > 1):
            return f"{self.name} v={virtual_stages}"
        return self.name
