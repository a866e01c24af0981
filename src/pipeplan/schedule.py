"""The schedule model: which action each rank runs, in which order.

A :class:`Schedule` is the one type that both the simulator
(:func:`pipeplan.simulate`) and the real runtime (:mod:`pipeplan.runtime`) consume.
It holds, for every rank, the ordered list of :class:`Action` objects that rank
executes, and the ``placement`` that maps each stage to the rank holding it::

    from pipeplan.schedule import Action, Schedule
    s = Schedule(orders=[[Action("F", 0, 0), Action("B", 0, 0)]], placement=[0], num_microbatches=1)
    s.validate()

Semantics (shared by the simulator and the runtime):

* ``F(s, mb)`` is the forward of stage ``s`` on microbatch ``mb``. It needs
  ``F(s-1, mb)``.
* ``B(s, mb)`` is the backward. It needs ``F(s, mb)`` and, unless ``s`` is the
  last stage, ``B(s+1, mb)``. When the schedule splits the backward
  (``backward="split"``), ``B`` computes only the input gradient and ``W(s, mb)``
  the weight gradient; ``W(s, mb)`` needs ``B(s, mb)``.
* An edge between stages on different ranks is a message (an activation going
  down, a gradient coming up) and pays communication time in the simulator.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

from ._validation import positive_int
from .errors import DeadlockError, InvalidInputError, InvalidScheduleError

__all__ = ["Action", "Schedule", "BackwardMode", "KINDS"]

BackwardMode = Literal["full", "split", "none"]
KINDS = ("F", "B", "W")
_KIND_INDEX = {"F": 0, "B": 1, "W": 2}


class Action(NamedTuple):
    """One unit of work: ``kind`` ("F", "B" or "W") of ``stage`` on ``microbatch``.

    Stages and microbatches are 0-based.
    """

    kind: str
    stage: int
    microbatch: int

    def __str__(self) -> str:
        return f"{self.kind}(stage {self.stage}, mb {self.microbatch})"

    @property
    def label(self) -> str:
        """Short form for charts: ``F3`` is the forward of microbatch 3."""
        return f"{self.kind}{self.microbatch}"


def _dependencies(action: Action, num_stages: int) -> tuple[Action, ...]:
    """The actions that must finish before ``action`` can start.

    Built as plain tuples (equal and hash-equal to :class:`Action`) because this runs
    once per action in validation; callers that print them wrap them in ``Action``.
    """
    kind, stage, mb = action
    if kind == "F":
        return (("F", stage - 1, mb),) if stage > 0 else ()  # type: ignore[return-value]
    if kind == "B":
        if stage == num_stages - 1:
            return (("F", stage, mb),)  # type: ignore[return-value]
        return (("F", stage, mb), ("B", stage + 1, mb))  # type: ignore[return-value]
    return (("B", stage, mb),)  # type: ignore[return-value]


@dataclass(frozen=True, init=False)
class Schedule:
    """Per-rank ordered actions plus the stage → rank placement.

    Args:
        orders: ``orders[r]`` is the ordered sequence of actions rank ``r`` runs.
        placement: ``placement[s]`` is the rank holding stage ``s``. A rank may
            hold several stages (chunks), as in interleaved or V schedules.
        num_microbatches: microbatches per training step (``m``).
        backward: ``"full"`` (one ``B`` per stage and microbatch), ``"split"``
            (``B`` = input gradient, ``W`` = weight gradient) or ``"none"``
            (forward only, as in the seed lesson's forward-phase simulation).
        name: the generator's name, for reports.

    ``num_stages`` and ``num_ranks`` follow from ``placement`` and ``orders``.
    The constructor checks shapes; :meth:`validate` checks completeness and
    deadlock-freedom.
    """

    orders: tuple[tuple[Action, ...], ...]
    placement: tuple[int, ...]
    num_microbatches: int
    backward: BackwardMode = "full"
    name: str = "custom"
    _position: dict[Action, tuple[int, int]] = field(default=None, repr=False, compare=False)  # type: ignore[assignment]

    def __init__(
        self,
        orders: Iterable[Iterable[Action | tuple[str, int, int]]],
        placement: Sequence[int],
        num_microbatches: int,
        backward: BackwardMode = "full",
        name: str = "custom",
    ) -> None:
        orders_t = tuple(tuple(Action(*a) for a in order) for order in orders)
        placement_t = tuple(int(r) for r in placement)
        if not orders_t:
            raise InvalidInputError("orders must hold at least one rank")
        if not placement_t:
            raise InvalidInputError("placement must hold at least one stage")
        for stage, rank in enumerate(placement_t):
            if not 0 <= rank < len(orders_t):
                raise InvalidInputError(
                    f"placement[{stage}] = {rank} is not a rank in 0..{len(orders_t) - 1}"
                )
        if backward not in ("full", "split", "none"):
            raise InvalidInputError(f"backward must be 'full', 'split' or 'none', got {backward!r}")
        object.__setattr__(self, "orders", orders_t)
        object.__setattr__(self, "placement", placement_t)
        object.__setattr__(self, "num_microbatches", positive_int("num_microbatches", num_microbatches))
        object.__setattr__(self, "backward", backward)
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "_position", None)

    # ------------------------------------------------------------------ shape
    @property
    def num_stages(self) -> int:
        """Number of stages ``S`` (model slices)."""
        return len(self.placement)

    @property
    def num_ranks(self) -> int:
        """Number of ranks ``P`` (processes/devices)."""
        return len(self.orders)

    @property
    def split_backward(self) -> bool:
        """True when the backward is split into ``B`` (input grad) and ``W`` (weight grad)."""
        return self.backward == "split"

    @property
    def forward_only(self) -> bool:
        """True for a forward-only schedule (no ``B`` or ``W``)."""
        return self.backward == "none"

    @property
    def kinds(self) -> tuple[str, ...]:
        """The action kinds this schedule must contain."""
        return {"full": ("F", "B"), "split": ("F", "B", "W"), "none": ("F",)}[self.backward]

    @property
    def num_actions(self) -> int:
        """Total number of actions over all ranks."""
        return sum(len(order) for order in self.orders)

    def stages_of(self, rank: int) -> tuple[int, ...]:
        """The stages (chunks) held by ``rank``, in stage order."""
        return tuple(s for s, r in enumerate(self.placement) if r == rank)

    def dependencies(self, action: Action) -> tuple[Action, ...]:
        """The actions that must finish before ``action`` may start (see module doc).

        In a forward-only schedule ``B`` and ``W`` do not exist; in a full-backward
        schedule ``W`` does not exist.
        """
        return tuple(Action(*d) for d in _dependencies(action, self.num_stages))

    def expected_actions(self) -> list[Action]:
        """Every action a complete schedule of this shape must contain exactly once."""
        return [
            Action(kind, stage, mb)
            for kind in self.kinds
            for stage in range(self.num_stages)
            for mb in range(self.num_microbatches)
        ]

    def position(self, action: Action) -> tuple[int, int]:
        """``(rank, index)`` of ``action`` in ``orders``. Raises ``KeyError`` if absent."""
        if self._position is None:
            object.__setattr__(
                self,
                "_position",
                {a: (r, i) for r, order in enumerate(self.orders) for i, a in enumerate(order)},
            )
        return self._position[action]

    # ------------------------------------------------------------- validation
    def validate(self) -> Schedule:
        """Check that the schedule is complete, well placed and deadlock-free.

        Returns ``self`` so calls chain. Raises:
            InvalidScheduleError: a missing, duplicated, unknown or misplaced action,
                naming the rank and the action.
            DeadlockError: the orders can never all finish; names each stuck rank,
                the action it is stuck at, and the action it waits for.
        """
        num_stages = self.num_stages
        num_mb = self.num_microbatches
        kinds = set(self.kinds)
        seen: dict[Action, int] = {}
        for rank, order in enumerate(self.orders):
            for action in order:
                kind, stage, mb = action
                if kind not in kinds:
                    raise InvalidScheduleError(
                        f"rank {rank}: {action} has kind {kind!r}, but a backward={self.backward!r} "
                        f"schedule allows only {', '.join(sorted(kinds))}"
                    )
                if not 0 <= stage < num_stages:
                    raise InvalidScheduleError(
                        f"rank {rank}: {action} names a stage outside 0..{num_stages - 1}"
                    )
                if not 0 <= mb < num_mb:
                    raise InvalidScheduleError(
                        f"rank {rank}: {action} names a microbatch outside 0..{num_mb - 1}"
                    )
                if self.placement[stage] != rank:
                    raise InvalidScheduleError(
                        f"rank {rank}: {action} is on the wrong rank; stage {stage} is placed on "
                        f"rank {self.placement[stage]}"
                    )
                if action in seen:
                    raise InvalidScheduleError(f"rank {rank}: {action} appears more than once")
                seen[action] = rank
        expected = num_stages * num_mb * len(kinds)
        if len(seen) != expected:
            for action in self.expected_actions():
                if action not in seen:
                    raise InvalidScheduleError(
                        f"rank {self.placement[action.stage]}: {action} is missing from its order"
                    )
        self._check_deadlock_free()
        return self

    def _check_deadlock_free(self) -> None:
        """Run the orders with zero costs; raise DeadlockError if some rank never finishes.

        Event driven: a rank parks on the action it waits for and is woken when that
        action is done, so the check is linear in the number of actions.
        """
        num_stages = self.num_stages
        done: set[Action] = set()
        pointers = [0] * self.num_ranks
        waiters: dict[Action, list[int]] = {}
        queue = list(range(self.num_ranks))
        while queue:
            rank = queue.pop()
            order = self.orders[rank]
            index = pointers[rank]
            while index < len(order):
                action = order[index]
                missing = next((d for d in _dependencies(action, num_stages) if d not in done), None)
                if missing is not None:
                    waiters.setdefault(missing, []).append(rank)
                    break
                done.add(action)
                index += 1
                woken = waiters.pop(action, None)
                if woken:
                    queue.extend(woken)
            pointers[rank] = index
        stuck = [r for r in range(self.num_ranks) if pointers[r] < len(self.orders[r])]
        if not stuck:
            return
        parts = []
        for rank in stuck:
            action = self.orders[rank][pointers[rank]]
            missing_deps = [Action(*d) for d in _dependencies(action, num_stages) if d not in done]
            waits = ", ".join(
                f"{d} on rank {self.placement[d.stage]}"
                + (" (later in its own order)" if self.placement[d.stage] == rank else "")
                for d in missing_deps
            )
            parts.append(f"rank {rank} is stuck at {action} waiting for {waits}")
        raise DeadlockError("schedule deadlocks: " + "; ".join(parts))
