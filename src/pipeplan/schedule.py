"""The schedule model: which action each rank runs, in which order.

A :class:`Schedule` is the one type that both the simulator
(:func:`pipeplan.simulate`) and the real runtime (:mod:`pipeplan.runtime`) consume.
It holds, for every rank, the ordered list of :class:`Action` objects that rank
executes, and the ``placement`` that maps each stage to the rank holding it::

    from pipeplan.schedule import Action, Schedule
    s = Schedule(orders=[[Action("F", 0, 0), Action("B", 0, 0)]], placement=[0], num_microbatches=1)
    s.validate().messages()          # () : one rank sends nothing

Action kinds (:class:`Kind`, named as in ``torch.distributed.pipelining``):

* ``F(s, mb)``: the forward of stage ``s`` on microbatch ``mb``. Needs ``F(s-1, mb)``.
* ``B(s, mb)``: the *full* backward (input and weight gradients). Needs
  ``F(s, mb)`` and, unless ``s`` is the last stage, ``B(s+1, mb)``.
* ``I(s, mb)``: the input-gradient part of a split backward (zero-bubble's "B").
  Needs ``F(s, mb)`` and, unless ``s`` is the last stage, ``I(s+1, mb)``.
* ``W(s, mb)``: the weight-gradient part of a split backward. Needs ``I(s, mb)``.
* ``U(s, mb)``: the optimizer update of stage ``s``'s weights after ``mb``, for
  schedules that update inside the step (the dual-rate pipeline,
  :mod:`pipeplan.schedules.dual_rate`). Needs ``B(s, mb)``.

A schedule runs either full backwards (``F``, ``B``), split backwards (``F``,
``I``, ``W``) or none (``F`` only); :attr:`Schedule.backward` says which, read
from the kinds. The rules live in one table (:data:`DEPENDENCIES`), keyed by kind.

An edge between stages on different ranks is a :class:`Message` (an activation
going down, a gradient coming up); :meth:`Schedule.messages` lists them all and is
the one place that decides which edges cross ranks. The simulator charges them
communication time, the runtime sends them.

The action IR (:class:`Kind`, :class:`Action`, :data:`DEPENDENCIES`, :class:`Message`)
lives in :mod:`pipeplan.actions` and the integer form in :mod:`pipeplan.lowering`;
this module re-exports their public names.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np

from ._validation import positive_int
from .actions import __all__ as _ACTION_NAMES
from .actions import (
    _BACKWARD_KINDS,
    _KIND_CODE,
    DEPENDENCIES,
    KINDS,
    Action,
    BackwardMode,
    Kind,
    Message,
    Payload,
    consumers_of,
    kinds_for as kinds_for,  # re-exported
    message_for as message_for,  # re-exported
)
from .errors import DeadlockError, InvalidInputError, InvalidScheduleError, PipeplanError
from .lowering import Lowered, dependency_runs, lower, runs_to_order

__all__ = ["Schedule", "Lowered", *_ACTION_NAMES]  # the action IR's names are re-exported here

_T = TypeVar("_T")


@dataclass(frozen=True, init=False)
class Schedule:
    """Per-rank ordered actions plus the stage → rank placement.

    Args:
        orders: ``orders[r]`` is the ordered sequence of actions rank ``r`` runs;
            an action may be an :class:`Action` or a ``(kind, stage, microbatch)``
            tuple with the kind as a string.
        placement: ``placement[s]`` is the rank holding stage ``s``. A rank may
            hold several stages (chunks), as in interleaved or V schedules.
        num_microbatches: microbatches per training step (``m``).
        name: the generator's name, for reports.

    ``num_stages`` and ``num_ranks`` follow from ``placement`` and ``orders``, and
    :attr:`backward` from the kinds. The constructor checks shapes;
    :meth:`validate` checks completeness and deadlock-freedom.
    """

    orders: tuple[tuple[Action, ...], ...]
    placement: tuple[int, ...]
    num_microbatches: int
    name: str = "custom"
    _cache: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def __init__(
        self,
        orders: Iterable[Iterable[Action | tuple[Kind | str, int, int]]],
        placement: Sequence[int],
        num_microbatches: int,
        name: str = "custom",
    ) -> None:
        try:
            orders_t = tuple(
                tuple(a if type(a) is Action else Action(*a) for a in order) for order in orders
            )
        except PipeplanError:
            raise
        except (TypeError, ValueError) as error:
            raise InvalidInputError(
                "orders must hold, per rank, a sequence of actions, each an Action or (kind, stage, microbatch) "
                f"such as ('F', 0, 0); got {orders!r:.60} ({error})"
            ) from None
        try:
            placement_t = tuple(int(r) for r in placement)
        except (TypeError, ValueError):
            raise InvalidInputError(f"placement must be a sequence of rank numbers, got {placement!r:.60}") from None
        if not orders_t:
            raise InvalidInputError("orders must hold at least one rank")
        if not placement_t:
            raise InvalidInputError("placement must hold at least one stage")
        for stage, rank in enumerate(placement_t):
            if not 0 <= rank < len(orders_t):
                raise InvalidInputError(
                    f"placement[{stage}] = {rank} is not a rank in 0..{len(orders_t) - 1}"
                )
        object.__setattr__(self, "orders", orders_t)
        object.__setattr__(self, "placement", placement_t)
        object.__setattr__(self, "num_microbatches", positive_int("num_microbatches", num_microbatches))
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "_cache", {})

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
    def present_kinds(self) -> frozenset[Kind]:
        """The kinds that occur in the orders."""
        cached = self._cache.get("present_kinds")
        if cached is None:
            cached = frozenset(a.kind for order in self.orders for a in order)
            self._cache["present_kinds"] = cached
        return cached

    @property
    def backward(self) -> BackwardMode:
        """``"split"`` when the orders hold ``I`` or ``W``, ``"full"`` with ``B``, else ``"none"``."""
        present = self.present_kinds
        if Kind.I in present or Kind.W in present:
            return "split"
        return "full" if Kind.B in present else "none"

    @property
    def split_backward(self) -> bool:
        """True when the backward is split into ``I`` (input grad) and ``W`` (weight grad)."""
        return self.backward == "split"

    @property
    def forward_only(self) -> bool:
        """True for a forward-only schedule (no backward kinds)."""
        return self.backward == "none"

    @property
    def kinds(self) -> tuple[Kind, ...]:
        """The action kinds this schedule must contain (see :func:`kinds_for`; plus ``U`` when it updates)."""
        kinds = _BACKWARD_KINDS[self.backward]
        return kinds + (Kind.U,) if Kind.U in self.present_kinds else kinds

    @property
    def gradient_kind(self) -> Kind | None:
        """The kind that sends a stage's input gradient upstream: ``B``, ``I``, or ``None`` (forward only)."""
        return {"full": Kind.B, "split": Kind.I, "none": None}[self.backward]

    @property
    def num_actions(self) -> int:
        """Total number of actions over all ranks."""
        return sum(len(order) for order in self.orders)

    def stages_of(self, rank: int) -> tuple[int, ...]:
        """The stages (chunks) held by ``rank``, in stage order."""
        return tuple(s for s, r in enumerate(self.placement) if r == rank)

    def dependencies(self, action: Action) -> tuple[Action, ...]:
        """The actions that must finish before ``action`` may start (see :data:`DEPENDENCIES`;
        indices mapped by :meth:`source_index`)."""
        return tuple(self._needs(Action(*action)))

    def source_index(self, stage: Any, other: Any, index: Any) -> Any:
        """The microbatch index on stage ``other`` that an action of ``stage`` at ``index`` waits for.

        Here the same index: every stage works once on every microbatch. A schedule whose
        stages count their work differently overrides this one method, with
        :meth:`expected_actions` and :meth:`expected_count` (the dual-rate pipeline: frames
        on the vision side, action steps on the other). The arguments are ints, or
        equally long int64 arrays mapped elementwise; both paths of :meth:`validate` (the
        array checks and the exact per-action ones), :meth:`dependencies` and the messages read it.
        """
        return index

    def consumers(self, action: Action) -> tuple[Action, ...]:
        """The actions of this schedule's kinds that wait for ``action`` (the inverse of :meth:`dependencies`)."""
        return tuple(consumers_of(Action(*action), self.num_stages, self.kinds))

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
        positions = self._cache.get("position")
        if positions is None:
            positions = {a: (r, i) for r, order in enumerate(self.orders) for i, a in enumerate(order)}
            self._cache["position"] = positions
        return positions[action]

    def cached(self, key: str, build: Callable[[], _T]) -> _T:
        """A value derived from this immutable schedule, built by ``build()`` once and kept.

        For modules that compile a schedule (the simulator keeps its kernel's inputs
        here); ``key`` should name the module.
        """
        if key not in self._cache:
            self._cache[key] = build()
        return self._cache[key]

    def lowered(self) -> Lowered:
        """The schedule in integer form, with its messages as arrays (cached; see :class:`Lowered`)."""
        return self.cached("lowered", lambda: lower(self))

    def latest_wins(self) -> np.ndarray:
        """Indices (into :meth:`lowered`'s messages) of ``Payload.LATENT`` messages: their sender never
        waits for the receiver, even with blocking sends. None in the fixed schedules (dual-rate has them)."""
        return np.zeros(0, dtype=np.int64)

    # --------------------------------------------------------------- messages
    def messages(self) -> tuple[Message, ...]:
        """Every cross-rank edge, in sender order (cached).

        Rank 0's messages come first, then rank 1's, ...; each rank's in the order
        its producing actions run. So on every directed link ``(src, dst)`` the
        messages appear in the order ``src`` sends them, which is the order the
        runtime posts them in and the simulator charges them in.
        Needs a schedule whose kinds are consistent (see :meth:`validate`); it
        lists edges only to consumers of this schedule's kinds.
        """
        return self.cached("messages", self._build_messages)

    def _build_messages(self) -> tuple[Message, ...]:
        low = self.lowered()
        actions = low.actions
        ranks = low.rank.tolist()
        payloads = (Payload.ACTIVATION, Payload.GRADIENT)
        return tuple(
            Message(actions[p], actions[c], ranks[p], ranks[c], b, payloads[g])
            for p, c, b, g in zip(low.producer.tolist(), low.consumer.tolist(), low.boundary.tolist(),
                                  low.gradient.tolist())
        )

    def messages_into(self, action: Action) -> tuple[Message, ...]:
        """The messages ``action`` waits for (empty when all its inputs are on its rank)."""
        table = self._cache.get("messages_into")
        if table is None:
            table = {}
            for message in self.messages():
                table.setdefault(message.consumer, []).append(message)
            table = {consumer: tuple(found) for consumer, found in table.items()}
            self._cache["messages_into"] = table
        return table.get(action, ())

    def messages_from(self, action: Action) -> tuple[Message, ...]:
        """The messages ``action`` sends when it ends (empty when its consumers share its rank)."""
        table = self._cache.get("messages_from")
        if table is None:
            table = {}
            for message in self.messages():
                table.setdefault(message.producer, []).append(message)
            table = {producer: tuple(found) for producer, found in table.items()}
            self._cache["messages_from"] = table
        return table.get(action, ())

    # ------------------------------------------------------------ torch CSV
    @classmethod
    def from_csv(cls, text: str, *, name: str = "custom") -> Schedule:
        """A schedule from torch's CSV (``_PipelineScheduleRuntime._dump_csv`` / ``_load_csv``, compute only).

        One row per rank, one action per cell written ``{stage}{F|B|I|W}{microbatch}``
        (torch's ``_Action`` strings); empty cells (idle steps in torch's own
        orders) are skipped, and so are communication and FSDP actions (``SEND_F``,
        ``RECV_B``, ``UNSHARD``, ``RESHARD``, ``REDUCE_GRAD``: pipeplan derives the
        messages). ``(a;b)OVERLAP_F_B`` runs its sub-actions in order. The placement
        is where each stage's actions are; ``m`` is the largest microbatch + 1.
        The text of a file is ``Path(path).read_text()``.

        Raises:
            InvalidInputError: a cell that is no action, a stage on two ranks or on none.
        """
        import csv
        import io
        import re

        orders: list[list[tuple[str, int, int]]] = []
        rank_of: dict[int, int] = {}
        cell_pattern = re.compile(r"(\d+)(F|I|B|W)(\d+)")
        skipped = re.compile(r"\d+(UNSHARD|RESHARD|REDUCE_GRAD|SEND_F|RECV_F|SEND_B|RECV_B)\d*")
        for rank, row in enumerate(csv.reader(io.StringIO(text))):
            order: list[tuple[str, int, int]] = []
            for cell in row:
                cell = cell.strip()
                if cell.startswith("(") and cell.endswith(")OVERLAP_F_B"):
                    parts = cell[1:-len(")OVERLAP_F_B")].split(";")
                else:
                    parts = [cell]
                for part in parts:
                    part = part.strip()
                    if not part or skipped.fullmatch(part):
                        continue
                    match = cell_pattern.fullmatch(part)
                    if match is None:
                        raise InvalidInputError(
                            f"rank {rank}: {part!r} is not a torch action like 2F0, 1B3, 0I1 or 0W1"
                        )
                    stage, kind, microbatch = int(match.group(1)), match.group(2), int(match.group(3))
                    if rank_of.setdefault(stage, rank) != rank:
                        raise InvalidInputError(f"stage {stage} has actions on ranks {rank_of[stage]} and {rank}")
                    order.append((kind, stage, microbatch))
            orders.append(order)
        while orders and not orders[-1]:
            orders.pop()  # a trailing blank line is no rank
        if not rank_of:
            raise InvalidInputError("the CSV holds no actions")
        missing = [stage for stage in range(max(rank_of) + 1) if stage not in rank_of]
        if missing:
            raise InvalidInputError(f"stage {missing[0]} has no actions (stages must be 0..{max(rank_of)})")
        microbatches = 1 + max(mb for order in orders for _, _, mb in order)
        return cls(orders, [rank_of[s] for s in range(len(rank_of))], microbatches, name=name)

    # ------------------------------------------------------------- validation
    def validate(self) -> Schedule:
        """Check that the schedule is complete, well placed and deadlock-free.

        Returns ``self`` so calls chain (validation is remembered: a second call is free).
        Raises:
            InvalidScheduleError: a missing, duplicated, unknown or misplaced action,
                or full and split backwards mixed, naming the rank and the action.
            DeadlockError: the orders can never all finish; names each stuck rank,
                the action it is stuck at, and the action it waits for.
        """
        if self._cache.get("valid"):
            return self
        runs = self._fast_validation()
        if runs is None:  # something is wrong: find and name it (the slow, exact checks)
            self._validate_each_action()
            self._check_deadlock_free()
            runs = dependency_runs(self.lowered())
            if runs is None:  # cannot happen once the exact checks pass; kept so a bug cannot pass silently
                raise InvalidScheduleError("schedule failed validation")
        self._cache["dependency_runs"] = runs
        self._cache["valid"] = True
        return self

    def dependency_order(self) -> np.ndarray:
        """Flat indices (as in :meth:`lowered`) of every action in an order that respects
        each rank's order and every message: a topological order of the step.

        Computed by :meth:`validate` (which it runs first); the simulator replays it.
        """
        self.validate()
        runs = self._cache["dependency_runs"]
        order = self._cache.get("dependency_order")
        if order is None:
            order = self._cache["dependency_order"] = runs_to_order(runs, len(self.lowered().actions))
        return order

    def cached_dependency_runs(self) -> list[int] | None:
        """The runs behind :meth:`dependency_order` if :meth:`validate` has computed them, else None."""
        return self._cache.get("dependency_runs")

    def _fast_validation(self) -> list[int] | None:
        """Array checks of :meth:`validate`; the computed runs (see :func:`~pipeplan.lowering.dependency_runs`),
        or None on any fault."""
        low = self.lowered()
        num_stages, num_mb = self.num_stages, self.num_microbatches
        allowed = np.array([_KIND_CODE[k] for k in self.kinds])
        kind, stage, mb = low.kind, low.stage, low.microbatch
        if not (np.isin(kind, allowed).all() and (stage >= 0).all() and (stage < num_stages).all()
                and (mb >= 0).all() and (mb < num_mb).all()):
            return None
        if not (np.asarray(self.placement, dtype=np.int64)[stage] == low.rank).all():
            return None
        ident = (kind * num_stages + stage) * num_mb + mb
        if len(ident) != self.expected_count() or (
                np.bincount(ident, minlength=1).max(initial=0) > 1):
            return None
        # Dependencies on the same rank must come earlier in its order (flat indices are in order).
        position = np.full(len(KINDS) * num_stages * num_mb, -1, dtype=np.int64)
        position[ident] = np.arange(len(ident))
        crossing = 0  # cross-rank dependencies: each must be a message for the play below to honour it
        for consumer_kind, needs in DEPENDENCIES.items():
            chosen = np.flatnonzero(kind == _KIND_CODE[consumer_kind])
            for needed, offset in needs:
                other = stage[chosen] + offset
                inside = (other >= 0) & (other < num_stages)
                consumers, other = chosen[inside], other[inside]
                source = self.source_index(stage[consumers], other, mb[consumers])
                if ((source < 0) | (source >= num_mb)).any():
                    return None
                found = position[(_KIND_CODE[needed] * num_stages + other) * num_mb + source]
                if (found < 0).any():
                    return None
                local = low.rank[found] == low.rank[consumers]
                if (found[local] >= consumers[local]).any():
                    return None
                crossing += len(local) - int(local.sum())
        if crossing != len(low.producer):  # some dependency is no message (dual-rate's buffered latents)
            return None
        return dependency_runs(low)

    def _validate_each_action(self) -> None:
        """The exact per-action checks (slow; run only to name what the array checks found wrong)."""
        num_stages = self.num_stages
        num_mb = self.num_microbatches
        kinds = set(self.kinds)
        seen: dict[Action, int] = {}
        for rank, order in enumerate(self.orders):
            for action in order:
                kind, stage, mb = action
                if kind not in kinds:
                    raise InvalidScheduleError(
                        f"rank {rank}: {action} is a {kind.value}, but this schedule's backward is "
                        f"{self.backward!r} ({', '.join(k.value for k in self.kinds)}); a full backward is B, "
                        "a split one I and W, never both"
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
        expected = self.expected_count()
        if len(seen) != expected:
            for action in self.expected_actions():
                if action not in seen:
                    raise InvalidScheduleError(
                        f"rank {self.placement[action.stage]}: {action} is missing from its order"
                    )

    def expected_count(self) -> int:
        """``len(self.expected_actions())``, without building the list (both validation paths check it)."""
        return self.num_stages * self.num_microbatches * len(self.kinds)

    def _needs(self, action: Action) -> list[Action]:
        """The dependencies of ``action``: :data:`DEPENDENCIES`' rule, indices mapped by :meth:`source_index`."""
        kind, stage, index = action
        out = []
        for needed, offset in DEPENDENCIES[kind]:
            other = stage + offset
            if 0 <= other < self.num_stages:
                out.append(Action(needed, other, self.source_index(stage, other, index)))
        return out

    def _check_deadlock_free(self) -> None:
        """Run the orders with zero costs; raise DeadlockError if some rank never finishes.

        Event driven: a rank parks on the action it waits for and is woken when that
        action is done, so the check is linear in the number of actions.
        """
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
                missing = next((d for d in self._needs(action) if d not in done), None)
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
            missing_deps = [d for d in self._needs(action) if d not in done]
            waits = ", ".join(
                f"{d} on rank {self.placement[d.stage]}"
                + (" (later in its own order)" if self.placement[d.stage] == rank else "")
                for d in missing_deps
            )
            parts.append(f"rank {rank} is stuck at {action} waiting for {waits}")
        raise DeadlockError("schedule deadlocks: " + "; ".join(parts))
