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
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from itertools import chain
from operator import itemgetter
from typing import Any, Literal, NamedTuple, TypeVar

import numpy as np

from ._validation import positive_int
from .errors import DeadlockError, InvalidInputError, InvalidScheduleError

__all__ = [
    "Action",
    "Kind",
    "Message",
    "Payload",
    "Schedule",
    "Lowered",
    "BackwardMode",
    "DEPENDENCIES",
    "KINDS",
    "kinds_for",
    "consumers_of",
    "message_for",
]

BackwardMode = Literal["full", "split", "none"]


class Kind(str, Enum):
    """What an action computes. A ``str`` enum: ``Kind.F == "F"`` and it hashes like ``"F"``."""

    F = "F"
    """Forward."""
    B = "B"
    """Full backward: input and weight gradients in one action."""
    I = "I"  # noqa: E741 - torch.distributed.pipelining's name for the input-gradient backward
    """Input-gradient backward (a split backward's first half; sends the gradient upstream)."""
    W = "W"
    """Weight-gradient backward (a split backward's second half)."""
    U = "U"
    """Optimizer update of the stage's weights (schedules that update within the step)."""

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)

    @property
    def is_forward(self) -> bool:
        """``F``: a stage's forward, which leaves the microbatch's activations on the stage."""
        return self is Kind.F

    @property
    def is_backward(self) -> bool:
        """``B``, ``I`` or ``W``: a piece of the backward."""
        return self is Kind.B or self is Kind.I or self is Kind.W

    @property
    def sends_gradient(self) -> bool:
        """``B`` or ``I``: its end sends the stage's input gradient upstream (the critical path)."""
        return self is Kind.B or self is Kind.I

    @property
    def releases_activation(self) -> bool:
        """``B`` or ``W``: the stage's last backward piece of a microbatch, which frees what the
        forward left (a split backward keeps the weight-gradient stash until ``W``)."""
        return self is Kind.B or self is Kind.W


KINDS: tuple[Kind, ...] = tuple(Kind)
_COERCE: dict[Any, Kind] = {kind.value: kind for kind in Kind}  # Kind members hash like their strings
_KIND_CODE: dict[Kind, int] = {kind: code for code, kind in enumerate(KINDS)}
_LETTER_CODE = np.zeros(128, dtype=np.int64)  # ASCII letter -> index in KINDS
_LETTER_CODE[[ord(kind.value) for kind in KINDS]] = np.arange(len(KINDS))
_T = TypeVar("_T")

#: Per kind, the actions it waits for as ``(kind, stage offset)``: ``(Kind.F, -1)``
#: on ``I(s, mb)`` means ``F(s - 1, mb)``. Offsets that leave ``0..S-1`` are dropped.
#: An edge with a non-zero offset between stages on different ranks is a message.
DEPENDENCIES: dict[Kind, tuple[tuple[Kind, int], ...]] = {
    Kind.F: ((Kind.F, -1),),
    Kind.B: ((Kind.F, 0), (Kind.B, +1)),
    Kind.I: ((Kind.F, 0), (Kind.I, +1)),
    Kind.W: ((Kind.I, 0),),
    Kind.U: ((Kind.B, 0),),
}

#: The inverse of :data:`DEPENDENCIES`: per kind, ``(consumer kind, stage offset)``.
_CONSUMERS: dict[Kind, tuple[tuple[Kind, int], ...]] = {
    kind: tuple((consumer, -offset) for consumer, needs in DEPENDENCIES.items() for k, offset in needs if k is kind)
    for kind in Kind
}

_BACKWARD_KINDS: dict[str, tuple[Kind, ...]] = {
    "full": (Kind.F, Kind.B),
    "split": (Kind.F, Kind.I, Kind.W),
    "none": (Kind.F,),
}


def kinds_for(backward: str) -> tuple[Kind, ...]:
    """The kinds a schedule with this backward mode runs: ``"full"``, ``"split"`` or ``"none"``."""
    try:
        return _BACKWARD_KINDS[backward]
    except KeyError:
        raise InvalidInputError(f"backward must be 'full', 'split' or 'none', got {backward!r}") from None


class _ActionFields(NamedTuple):
    kind: Kind
    stage: int
    microbatch: int


class Action(_ActionFields):
    """One unit of work: ``kind`` (a :class:`Kind`) of ``stage`` on ``microbatch``.

    Stages and microbatches are 0-based. ``kind`` may be given as a string
    (``Action("I", 2, 0)``); it is stored as a :class:`Kind`. An action equals and
    hashes like the plain tuple ``("I", 2, 0)``.
    """

    __slots__ = ()

    def __new__(cls, kind: Kind | str, stage: int, microbatch: int) -> Action:
        try:
            typed = _COERCE[kind]
        except (KeyError, TypeError):
            raise InvalidInputError(
                f"action kind must be one of {', '.join(k.value for k in Kind)}, got {kind!r}"
            ) from None
        return super().__new__(cls, typed, stage, microbatch)

    def __str__(self) -> str:
        return f"{self.kind.value}(stage {self.stage}, mb {self.microbatch})"

    def __repr__(self) -> str:
        return f"Action({self.kind.value!r}, {self.stage}, {self.microbatch})"

    @property
    def label(self) -> str:
        """Short form for charts: ``F3`` is the forward of microbatch 3."""
        return f"{self.kind.value}{self.microbatch}"


class Payload(str, Enum):
    """What a message carries."""

    ACTIVATION = "activation"
    """A stage's output, sent down to the next stage's ``F``."""
    GRADIENT = "gradient"
    """The gradient of a stage's input, sent up to the previous stage's ``B`` or ``I``."""
    LATENT = "latent"
    """Latest wins: a slow stage's output written into the fast stage's buffer. The
    sender never waits for the receiver (even with blocking sends) and several
    consumers read it (the dual-rate pipeline's latent state tokens)."""

    def __str__(self) -> str:
        return self.value


class Message(NamedTuple):
    """One cross-rank edge of a schedule: ``producer`` on ``src`` feeds ``consumer`` on ``dst``.

    ``boundary`` is the stage boundary it crosses (between stages ``boundary`` and
    ``boundary + 1``; its communication time is the comm model's for that boundary).
    """

    producer: Action
    consumer: Action
    src: int
    dst: int
    boundary: int
    payload: Payload

    def __str__(self) -> str:
        return f"the {self.payload.value} of {self.producer} from rank {self.src} to {self.consumer} on rank {self.dst}"


def consumers_of(action: Action, num_stages: int, kinds: Iterable[Kind]) -> list[Action]:
    """The actions of ``kinds`` that wait for ``action`` in a schedule of ``num_stages`` stages.

    The inverse of :data:`DEPENDENCIES`; for generators that build an order and
    need to know what finishing an action enables.
    """
    kind, stage, mb = action
    allowed = set(kinds)
    return [
        Action(consumer, stage + offset, mb)
        for consumer, offset in _CONSUMERS[kind]
        if consumer in allowed and 0 <= stage + offset < num_stages
    ]


def message_for(producer: Action, consumer: Action, placement: Sequence[int]) -> Message | None:
    """The message of the edge ``producer`` → ``consumer``, or ``None`` when both sit on one rank."""
    src, dst = placement[producer.stage], placement[consumer.stage]
    if src == dst:
        return None
    payload = Payload.ACTIVATION if consumer.stage > producer.stage else Payload.GRADIENT
    return Message(producer, consumer, src, dst, min(producer.stage, consumer.stage), payload)


@dataclass(frozen=True, eq=False)
class Lowered:
    """A schedule in integer form, built once per schedule (:meth:`Schedule.lowered`).

    Actions are numbered flat: rank 0's order, then rank 1's, ... (the order of a
    Timeline's arrays). Messages are numbered in sender order (see
    :meth:`Schedule.messages`). Arrays are numpy ``int64`` (``gradient`` is bool).

    Attributes:
        actions: the flat actions.
        rank_offsets: ``rank_offsets[r]:rank_offsets[r + 1]`` are rank ``r``'s actions.
        kind: per action, the index of its kind in :data:`KINDS`.
        stage, microbatch, rank: per action.
        producer, consumer: per message, the flat index of the sending and the receiving action.
        boundary: per message, the stage boundary it crosses.
        gradient: per message, True for a gradient (going up), False for an activation.
    """

    actions: tuple[Action, ...]
    rank_offsets: tuple[int, ...]
    kind: np.ndarray
    stage: np.ndarray
    microbatch: np.ndarray
    rank: np.ndarray
    producer: np.ndarray
    consumer: np.ndarray
    boundary: np.ndarray
    gradient: np.ndarray


def _lower(schedule: Schedule) -> Lowered:
    """Number the actions and find every cross-rank edge with array operations on :data:`DEPENDENCIES`."""
    actions = tuple(chain.from_iterable(schedule.orders))
    count = len(actions)
    lengths = [len(order) for order in schedule.orders]
    offsets = tuple(int(x) for x in np.concatenate([[0], np.cumsum(lengths)]))
    num_stages, num_mb = schedule.num_stages, schedule.num_microbatches
    # Kinds are one-letter strings: join them and map the letters (much faster than a lookup each).
    letters = np.frombuffer("".join(map(itemgetter(0), actions)).encode("ascii"), dtype=np.uint8)
    kind = _LETTER_CODE[letters]
    stage = np.fromiter(map(itemgetter(1), actions), dtype=np.int64, count=count)
    microbatch = np.fromiter(map(itemgetter(2), actions), dtype=np.int64, count=count)
    rank = np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)
    inside = (stage >= 0) & (stage < num_stages) & (microbatch >= 0) & (microbatch < num_mb)
    ident = np.where(inside, (kind * num_stages + stage) * num_mb + microbatch, 0)
    position = np.full(len(KINDS) * num_stages * num_mb, -1, dtype=np.int64)
    position[ident[inside]] = np.flatnonzero(inside)
    placement = np.asarray(schedule.placement, dtype=np.int64)
    producers, consumers, boundaries, gradients = [], [], [], []
    for consumer_kind, needs in DEPENDENCIES.items():
        of_kind = inside & (kind == _KIND_CODE[consumer_kind])
        for needed, offset in needs:
            if offset == 0:
                continue  # same stage: same rank, never a message
            other = stage + offset
            chosen = np.flatnonzero(of_kind & (other >= 0) & (other < num_stages))
            other = other[chosen]
            crosses = placement[other] != placement[stage[chosen]]
            chosen, other = chosen[crosses], other[crosses]
            source = position[(_KIND_CODE[needed] * num_stages + other) * num_mb + microbatch[chosen]]
            present = source >= 0
            producers.append(source[present])
            consumers.append(chosen[present])
            boundaries.append(np.minimum(other, stage[chosen])[present])
            gradients.append(np.full(int(present.sum()), offset > 0))
    if producers:
        producer = np.concatenate(producers)
        order = np.lexsort((np.concatenate(consumers), producer))  # sender order; ties by consumer
        producer = producer[order]
        consumer = np.concatenate(consumers)[order]
        boundary = np.concatenate(boundaries)[order]
        gradient = np.concatenate(gradients)[order]
    else:
        producer = consumer = boundary = np.zeros(0, dtype=np.int64)
        gradient = np.zeros(0, dtype=bool)
    return Lowered(actions, offsets, kind, stage, microbatch, rank, producer, consumer, boundary, gradient)


def _dependency_runs(low: Lowered) -> list[int] | None:
    """Play the orders with zero costs, honouring every message; the runs of flat indices in the
    order they could run, as ``[first, stop, first, stop, ...]``, or None if some rank never finishes.

    Assumes same-rank dependencies come earlier in their rank's order (checked by the caller)
    and at most one incoming message per action (else None, and the caller checks slowly).
    """
    count = len(low.actions)
    if count and np.bincount(low.consumer, minlength=count).max(initial=0) > 1:
        return None
    dep_array = np.full(count, -1, dtype=np.int64)
    dep_array[low.consumer] = low.producer
    dep = dep_array.tolist()
    offsets = low.rank_offsets
    done = [False] * count
    pointer = list(offsets[:-1])
    waiter = [-1] * count  # producer -> the rank parked on it (one consumer per producer)
    runs: list[int] = []
    record = runs.append
    queue = list(range(len(offsets) - 1))
    while queue:
        rank = queue.pop()
        first = index = pointer[rank]
        stop = offsets[rank + 1]
        for index in range(first, stop):
            producer = dep[index]
            if producer >= 0 and not done[producer]:
                waiter[producer] = rank
                break
            done[index] = True
            if waiter[index] >= 0:
                queue.append(waiter[index])
        else:
            index = stop
        if index > first:
            record(first)
            record(index)
        pointer[rank] = index
    if any(pointer[r] < offsets[r + 1] for r in range(len(offsets) - 1)):
        return None
    return runs


def runs_to_order(runs: list[int], count: int) -> np.ndarray:
    """The ``count`` flat indices that the runs ``[first, stop, first, stop, ...]`` cover, in run order."""
    pairs = np.asarray(runs, dtype=np.int64).reshape(-1, 2)
    firsts = pairs[:, 0]
    lengths = pairs[:, 1] - firsts
    ends = np.cumsum(lengths)
    return np.arange(count, dtype=np.int64) - np.repeat(ends - lengths - firsts, lengths)


def _dependencies(kind: Kind, stage: int, mb: int, num_stages: int) -> list[Action]:
    """The actions that must finish before ``kind(stage, mb)`` can start (the table's rule)."""
    out = []
    for needed, offset in DEPENDENCIES[kind]:
        other = stage + offset
        if 0 <= other < num_stages:
            out.append(Action(needed, other, mb))
    return out


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
        orders_t = tuple(
            tuple(a if type(a) is Action else Action(*a) for a in order) for order in orders
        )
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
        """The actions that must finish before ``action`` may start (see :data:`DEPENDENCIES`)."""
        kind, stage, mb = Action(*action)
        return tuple(_dependencies(kind, stage, mb, self.num_stages))

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
        return self.cached("lowered", lambda: _lower(self))

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
            runs = _dependency_runs(self.lowered())
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
        """Array checks of :meth:`validate`; the computed runs (see :func:`_dependency_runs`), or None on any fault."""
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
        if len(ident) != num_stages * num_mb * len(allowed) or (
                np.bincount(ident, minlength=1).max(initial=0) > 1):
            return None
        # Dependencies on the same rank must come earlier in its order (flat indices are in order).
        position = np.full(len(KINDS) * num_stages * num_mb, -1, dtype=np.int64)
        position[ident] = np.arange(len(ident))
        for consumer_kind, needs in DEPENDENCIES.items():
            chosen = np.flatnonzero(kind == _KIND_CODE[consumer_kind])
            for needed, offset in needs:
                other = stage[chosen] + offset
                inside = (other >= 0) & (other < num_stages)
                found = position[(_KIND_CODE[needed] * num_stages + other[inside]) * num_mb + mb[chosen][inside]]
                if (found < 0).any():
                    return None
                local = low.rank[found] == low.rank[chosen[inside]]
                if (found[local] >= chosen[inside][local]).any():
                    return None
        return _dependency_runs(low)

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
        expected = self._expected_count()
        if len(seen) != expected:
            for action in self.expected_actions():
                if action not in seen:
                    raise InvalidScheduleError(
                        f"rank {self.placement[action.stage]}: {action} is missing from its order"
                    )

    def _expected_count(self) -> int:
        """``len(self.expected_actions())``, without building the list."""
        return self.num_stages * self.num_microbatches * len(self.kinds)

    def _needs(self, action: Action) -> list[Action]:
        """The dependencies of ``action`` (the table's rule; a subclass may map microbatch indices)."""
        return _dependencies(action.kind, action.stage, action.microbatch, self.num_stages)

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
