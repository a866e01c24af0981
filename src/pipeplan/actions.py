"""The action IR: what one action computes, what it waits for, and the messages between ranks.

    from pipeplan.actions import Action, DEPENDENCIES, Kind
    Action("I", 2, 0).kind is Kind.I          # kinds are typed; strings are coerced
    DEPENDENCIES[Kind.I]                       # ((Kind.F, 0), (Kind.I, 1)): F(s, mb) and I(s+1, mb)

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

The rules live in one table (:data:`DEPENDENCIES`), keyed by kind. An edge between
stages on different ranks is a :class:`Message` (an activation going down, a
gradient coming up). :mod:`pipeplan.schedule` re-exports every public name here.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from enum import Enum
from typing import Any, Literal, NamedTuple

import numpy as np

from .errors import InvalidInputError

__all__ = [
    "Action",
    "Kind",
    "Message",
    "Payload",
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
    def releases_activation(self) -> bool:
        """``B`` or ``W``: the stage's last backward piece of a microbatch, which frees what the
        forward left (a split backward keeps the weight-gradient stash until ``W``)."""
        return self is Kind.B or self is Kind.W


KINDS: tuple[Kind, ...] = tuple(Kind)
_COERCE: dict[Any, Kind] = {kind.value: kind for kind in Kind}  # Kind members hash like their strings
_KIND_CODE: dict[Kind, int] = {kind: code for code, kind in enumerate(KINDS)}
_LETTER_CODE = np.zeros(128, dtype=np.int64)  # ASCII letter -> index in KINDS
_LETTER_CODE[[ord(kind.value) for kind in KINDS]] = np.arange(len(KINDS))

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
