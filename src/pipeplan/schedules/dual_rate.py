"""The dual-rate asynchronous pipeline (lesson 16, Q3): slow vision stages, fast action stages.

The camera changes slowly and the action targets fast, so the vision stages run
once per *frame* and the action stages once per *action step*; one frame serves
``k`` consecutive action steps (``k`` = the rate ratio). The vision side writes each
frame's latent tokens into a buffer the action side reads ("latest wins": the
writer never waits for the reader and a newer latent replaces the oldest slot),
and the action side returns the latent's gradient, summed over the frame's ``k``
steps, once the frame's window is done::

    from pipeplan.schedules.dual_rate import DualRateShape
    schedule = build_schedule("dual-rate", num_stages=2, num_microbatches=24, rate_ratio=4)
    [a.label for a in schedule.orders[0][:4]]  # ['F0', 'F1', 'B0', 'U0']: frames on the vision rank
    schedule.staleness(0)                      # (0, 1, 1, 1, 1, 1): Δt of each frame's gradient
    simulate(schedule, StageCosts([30, 4], update=[1, 0.5]))

Actions are ``(kind, stage, index)``: stages ``0..V-1`` are the vision stages
(index = frame ``j``), stages ``V..V+A-1`` the action stages (index = action step
``i``; step ``i`` belongs to frame ``i // k``). Kinds: ``F`` forward, ``B`` full
backward, ``U`` the optimizer update of that stage's weights.

* action stage, step ``i``: ``F`` (the first action stage reads frame ``i // k``'s
  latent), ``B``, ``U`` — one update per step, steps one after the other;
* vision stage ``s``: 1F1B over frames with ``W_s = 1 + L·(V − s)`` forwards in
  flight (``L`` = ``max_staleness``): ``L = 0`` runs each frame to its update
  before the next forward (no overlap, the synchronous pipeline when ``k = 1``);
  ``L = 1`` lets the last vision stage compute frame ``j + 1`` while the action side
  trains on frame ``j``. ``B(V−1, j)`` waits for the last step of frame ``j``'s window.

The staleness Δt of a gradient is the number of updates its stage applied between
the forward that produced the latent and the update that applies the gradient,
read off the orders (:meth:`DualRateShape.staleness`): it ramps up to
``W_s − 1 = L·(V − s)`` and stays there. The action side holds up to ``L + 1``
latents (the one it reads and the ones already written ahead), so ``buffer_frames``
must be at least ``L + 1``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .._validation import positive_int
from ..errors import InvalidInputError
import numpy as np

from ..schedule import KINDS, Action, Kind, Lowered, Message, Payload, Schedule

__all__ = ["DualRateSchedule", "DualRateShape", "RawAction", "check_damping", "dual_rate"]

RawAction = tuple[str, int, int]


def check_damping(damping: object) -> float:
    """Return ``damping`` (λ of ``λ^Δt``) as a float in (0, 1], or raise naming the field."""
    try:
        value = float(damping)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise InvalidInputError(f"damping must be a number in (0, 1], got {damping!r}") from None
    if not 0.0 < value <= 1.0:  # also rejects NaN
        raise InvalidInputError(f"damping must be in (0, 1] (λ of the λ^Δt gradient damping), got {damping!r}")
    return value


@dataclass(frozen=True)
class DualRateShape:
    """The shape of a dual-rate pipeline: stages on each side, rate ratio, frames, staleness.

    Args:
        num_vision_stages: ``V >= 1`` vision stages, one per rank (ranks ``0..V-1``).
        num_action_stages: ``A >= 1`` action stages, one per rank (ranks ``V..V+A-1``).
        rate_ratio: ``k >= 1`` action steps per frame (an integer: 200 Hz actions on a
            50 Hz camera is ``k = 4``).
        num_frames: ``J >= 1`` frames; the run has ``J·k`` action steps.
        max_staleness: ``L >= 0`` frames the last vision stage may run ahead of the
            gradients it has received (0: no overlap).
        buffer_frames: latent slots on the action side, ``>= L + 1``; default ``L + 1``.

    Raises:
        InvalidInputError: a count that is not an integer in range, or a staleness
            bound the buffer cannot hold.
    """

    num_vision_stages: int
    num_action_stages: int
    rate_ratio: int
    num_frames: int
    max_staleness: int = 1
    buffer_frames: int | None = None

    def __post_init__(self) -> None:
        positive_int("num_vision_stages", self.num_vision_stages)
        positive_int("num_action_stages", self.num_action_stages)
        positive_int("rate_ratio", self.rate_ratio)
        positive_int("num_frames", self.num_frames)
        positive_int("max_staleness", self.max_staleness, minimum=0)
        for name in ("num_vision_stages", "num_action_stages", "rate_ratio", "num_frames", "max_staleness"):
            object.__setattr__(self, name, int(getattr(self, name)))
        if self.buffer_frames is None:
            object.__setattr__(self, "buffer_frames", self.max_staleness + 1)
        buffer = positive_int("buffer_frames", self.buffer_frames)
        if buffer < self.max_staleness + 1:
            raise InvalidInputError(
                f"buffer_frames = {buffer} cannot hold max_staleness = {self.max_staleness}: the action side "
                f"reads one latent while {self.max_staleness} more are written ahead, so it needs >= "
                f"{self.max_staleness + 1} slots"
            )
        object.__setattr__(self, "buffer_frames", buffer)

    # ------------------------------------------------------------------ shape
    @property
    def num_stages(self) -> int:
        """``V + A``."""
        return self.num_vision_stages + self.num_action_stages

    @property
    def num_steps(self) -> int:
        """Action steps ``J·k`` (the action side's microbatches)."""
        return self.num_frames * self.rate_ratio

    @property
    def first_action_stage(self) -> int:
        """Stage index ``V`` of the first action stage (it reads the latent buffer)."""
        return self.num_vision_stages

    def is_vision(self, stage: int) -> bool:
        """True for stages ``0..V-1``."""
        return stage < self.num_vision_stages

    def frame_of(self, step: int) -> int:
        """The frame whose latent action step ``step`` reads: ``step // k``."""
        return step // self.rate_ratio

    def window(self, frame: int) -> range:
        """The action steps that read ``frame``'s latent: ``k·j .. k·j + k − 1``."""
        return range(frame * self.rate_ratio, (frame + 1) * self.rate_ratio)

    def in_flight(self, stage: int) -> int:
        """Frames vision stage ``stage`` holds between forward and update: ``min(J, 1 + L·(V − s))``."""
        return min(self.num_frames, 1 + self.max_staleness * (self.num_vision_stages - stage))

    def with_frames(self, num_frames: int) -> DualRateShape:
        """The same pipeline over ``num_frames`` frames (a run cut short keeps its prefix)."""
        return DualRateShape(self.num_vision_stages, self.num_action_stages, self.rate_ratio, num_frames,
                             self.max_staleness, self.buffer_frames)

    # ----------------------------------------------------------------- orders
    def order_length(self, rank: int) -> int:
        """Actions in ``rank``'s order: ``3·J`` on a vision rank, ``3·J·k`` on an action rank."""
        return 3 * (self.num_frames if self.is_vision(rank) else self.num_steps)

    def action_at(self, rank: int, position: int) -> RawAction:
        """The ``position``-th action of ``rank``'s order, without building the order.

        Vision stage ``s`` (rank ``s``): ``W_s`` forwards, then per frame ``j``:
        ``B(s, j)``, ``U(s, j)`` and, while frames remain, ``F(s, j + W_s)``. Action
        rank: ``F``, ``B``, ``U`` of step 0, then of step 1, ...
        """
        if not 0 <= position < self.order_length(rank):
            raise InvalidInputError(f"position must be in 0..{self.order_length(rank) - 1} on rank {rank}, got {position}")
        if not self.is_vision(rank):
            return ("FBU"[position % 3], rank, position // 3)
        warmup = self.in_flight(rank)
        if position < warmup:
            return ("F", rank, position)
        rest = position - warmup
        steady = self.num_frames - warmup  # frames whose B, U are followed by a forward
        if rest < 3 * steady:
            frame, piece = divmod(rest, 3)
            return ("B", rank, frame) if piece == 0 else ("U", rank, frame) if piece == 1 else ("F", rank, frame + warmup)
        frame, piece = divmod(rest - 3 * steady, 2)
        return ("B" if piece == 0 else "U", rank, steady + frame)

    def orders(self) -> list[list[RawAction]]:
        """Per rank (= per stage), the ordered ``(kind, stage, index)`` actions (see module doc)."""
        return [[self.action_at(rank, position) for position in range(self.order_length(rank))]
                for rank in range(self.num_stages)]

    def source_index(self, stage: int, other: int, index: int) -> int:
        """The index on stage ``other`` that action ``index`` of ``stage`` depends on.

        The same index on the same side; across the rate boundary, action step ``i``
        reads frame ``i // k`` and vision frame ``j``'s backward waits for the last
        step of its window, ``k·j + k − 1``.
        """
        if self.is_vision(stage) == self.is_vision(other):
            return index
        if self.is_vision(other):
            return self.frame_of(index)
        return self.window(index)[-1]

    # -------------------------------------------------------------- staleness
    def staleness(self, stage: int) -> tuple[int, ...]:
        """Per frame, Δt of vision stage ``stage``'s gradient, read off its order.

        Δt(j) = updates of ``stage`` between ``F(stage, j)`` and ``U(stage, j)``.
        """
        if not 0 <= stage < self.num_vision_stages:
            raise InvalidInputError(f"stage must be a vision stage in 0..{self.num_vision_stages - 1}, got {stage}")
        updates = 0
        version_at_forward: dict[int, int] = {}
        out = [0] * self.num_frames
        for kind, _stage, j in self.orders()[stage]:
            if kind == "F":
                version_at_forward[j] = updates
            elif kind == "U":
                out[j] = updates - version_at_forward[j]
                updates += 1
        return tuple(out)


class DualRateSchedule(Schedule):
    """The dual-rate pipeline as a :class:`~pipeplan.schedule.Schedule` (``F``, ``B``, ``U`` actions).

    The dependency rules are the schedule table's (:data:`~pipeplan.schedule.DEPENDENCIES`:
    ``F`` needs the previous stage's ``F``, ``B`` the next stage's ``B``, ``U`` its
    ``B``); this class only maps indices across the rate boundary
    (:meth:`DualRateShape.source_index`). Its messages: activations and gradients
    inside each side; one ``latent`` message per frame from the last vision stage
    to the window's first action step (latest wins: the sender never waits; the
    window's other steps read the buffer); one gradient per frame back, after the
    window's last backward. ``num_microbatches`` is the number of action steps.

    Args:
        shape: the pipeline's :class:`DualRateShape` (one stage per rank).
    """

    shape: DualRateShape

    def __init__(self, shape: DualRateShape) -> None:
        super().__init__(shape.orders(), list(range(shape.num_stages)), shape.num_steps, name="dual-rate")
        object.__setattr__(self, "shape", shape)

    def source_index(self, stage: Any, other: Any, index: Any) -> Any:
        """The index on stage ``other`` that ``stage``'s action at ``index`` waits for, mapped across the rates
        (:meth:`DualRateShape.source_index`; elementwise on arrays, for the validator's array checks)."""
        shape = self.shape
        if not isinstance(index, np.ndarray):
            return shape.source_index(stage, other, index)
        vision = shape.num_vision_stages
        ratio = shape.rate_ratio
        across = np.where(other < vision, index // ratio, index * ratio + ratio - 1)
        return np.where((stage < vision) == (other < vision), index, across)

    def expected_actions(self) -> list[Action]:
        """``F``, ``B``, ``U`` of every frame on each vision stage and of every step on each action stage."""
        shape = self.shape
        return [
            Action(kind, stage, index)
            for stage in range(shape.num_stages)
            for kind in (Kind.F, Kind.B, Kind.U)
            for index in range(shape.num_frames if shape.is_vision(stage) else shape.num_steps)
        ]

    def expected_count(self) -> int:
        """``3·(V·J + A·J·k)``: ``F``, ``B``, ``U`` of each frame and of each step."""
        shape = self.shape
        return 3 * (shape.num_vision_stages * shape.num_frames + shape.num_action_stages * shape.num_steps)

    def _build_messages(self) -> tuple[Message, ...]:
        shape = self.shape
        first = shape.first_action_stage
        found: list[tuple[tuple[int, int], int, Message]] = []
        for rank, order in enumerate(self.orders):
            for consumer in order:
                kind, stage, index = consumer
                if kind is Kind.F and stage == first and index % shape.rate_ratio:
                    continue  # the window's later steps read the latent already in the buffer
                for producer in self._needs(consumer):
                    if producer.stage == stage:
                        continue
                    if producer.stage < stage:
                        payload = Payload.LATENT if stage == first else Payload.ACTIVATION
                    else:
                        payload = Payload.GRADIENT
                    message = Message(producer, consumer, producer.stage, rank, min(producer.stage, stage), payload)
                    found.append((self.position(producer), self.position(consumer)[1], message))
        found.sort(key=lambda item: (item[0], item[1]))
        return tuple(message for _position, _consumer, message in found)

    def lowered(self) -> Lowered:
        """The integer form the simulator and the validator read, with this schedule's messages.

        A latent counts as an activation there (``gradient`` False); its latest-wins
        semantics live in :meth:`messages` (``Payload.LATENT``).
        """
        return self.cached("lowered", self._lower_dual_rate)

    def _lower_dual_rate(self) -> Lowered:
        actions = tuple(a for order in self.orders for a in order)
        lengths = [len(order) for order in self.orders]
        offsets = tuple(int(x) for x in np.concatenate([[0], np.cumsum(lengths)]))
        code = {kind: index for index, kind in enumerate(KINDS)}

        def flat(action: Action) -> int:
            rank, position = self.position(action)
            return offsets[rank] + position

        messages = self.messages()
        return Lowered(
            actions=actions,
            rank_offsets=offsets,
            kind=np.array([code[a.kind] for a in actions], dtype=np.int64),
            stage=np.array([a.stage for a in actions], dtype=np.int64),
            microbatch=np.array([a.microbatch for a in actions], dtype=np.int64),
            rank=np.repeat(np.arange(len(lengths), dtype=np.int64), lengths),
            producer=np.array([flat(m.producer) for m in messages], dtype=np.int64),
            consumer=np.array([flat(m.consumer) for m in messages], dtype=np.int64),
            boundary=np.array([m.boundary for m in messages], dtype=np.int64),
            gradient=np.array([m.payload is Payload.GRADIENT for m in messages], dtype=bool),
        )

    def latest_wins(self) -> np.ndarray:
        """The latent messages (indices into :meth:`lowered`'s messages): with blocking sends too,
        the vision rank writes the latent and goes on; the action rank takes it when it is ready."""
        return self.cached("latest_wins", lambda: np.array(
            [i for i, m in enumerate(self.messages()) if m.payload is Payload.LATENT], dtype=np.int64))

    def staleness(self, stage: int) -> tuple[int, ...]:
        """Per frame, Δt of vision stage ``stage``'s gradient (see :meth:`DualRateShape.staleness`)."""
        return self.shape.staleness(stage)

    def step_staleness(self) -> tuple[int, ...]:
        """Per action step, Δt of the gradient it sends to the last vision stage (its frame's Δt)."""
        per_frame = self.shape.staleness(self.shape.num_vision_stages - 1)
        return tuple(per_frame[self.shape.frame_of(step)] for step in range(self.shape.num_steps))


def dual_rate(
    num_stages: int,
    num_microbatches: int,
    *,
    rate_ratio: int = 4,
    vision_stages: int = 1,
    max_staleness: int = 1,
    buffer_frames: int | None = None,
) -> DualRateSchedule:
    """Build the dual-rate schedule (registered as ``"dual-rate"``).

    Args:
        num_stages: ``V + A`` stages, one per rank.
        num_microbatches: action steps ``J·k``; a multiple of ``rate_ratio``.
        rate_ratio: ``k``, action steps per vision update (an integer >= 1).
        vision_stages: ``V``, the first ``V`` stages are the vision side (``1 <= V < num_stages``).
        max_staleness: ``L``, frames the last vision stage may run ahead (0: no overlap).
        buffer_frames: latent slots on the action side (>= ``L + 1``).

    Raises:
        InvalidInputError: a count out of range, steps that are not a whole number of
            frames, or a buffer too small for the staleness bound.
    """
    stages = positive_int("num_stages", num_stages, minimum=2)
    steps = positive_int("num_microbatches", num_microbatches)
    ratio = positive_int("rate_ratio", rate_ratio)
    vision = positive_int("vision_stages", vision_stages)
    if vision >= stages:
        raise InvalidInputError(
            f"vision_stages must be < num_stages = {stages} (at least one action stage), got {vision}"
        )
    if steps % ratio:
        raise InvalidInputError(
            f"num_microbatches = {steps} must be a multiple of rate_ratio = {ratio} (whole frames of {ratio} steps)"
        )
    shape = DualRateShape(vision, stages - vision, ratio, steps // ratio, max_staleness, buffer_frames)
    return DualRateSchedule(shape)

