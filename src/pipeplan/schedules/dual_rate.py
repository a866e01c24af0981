"""The dual-rate asynchronous pipeline (lesson 16, Q3): slow vision stages, fast action stages.

The camera changes slowly and the action targets fast, so the vision stages run
once per *frame* and the action stages once per *action step*; one frame serves
``k`` consecutive action steps (``k`` = the rate ratio). The vision side writes each
frame's latent tokens into a buffer the action side reads ("latest wins": the
writer never waits for the reader and a newer latent replaces the oldest slot),
and the action side returns the latent's gradient, summed over the frame's ``k``
steps, once the frame's window is done::

    from pipeplan.schedules.dual_rate import DualRateShape
    shape = DualRateShape(num_vision_stages=1, num_action_stages=1, rate_ratio=4, num_frames=6)
    shape.orders()[0][:4]                      # [('F', 0, 0), ('F', 0, 1), ('B', 0, 0), ('U', 0, 0)]
    shape.staleness(0)                         # (0, 1, 1, 1, 1, 1): Δt of each frame's gradient

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

from .._validation import positive_int
from ..errors import InvalidInputError

__all__ = ["DualRateShape", "RawAction", "check_damping"]

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

    def dependencies(self, action: RawAction) -> list[RawAction]:
        """The actions that must finish before ``action`` (besides its rank's order).

        Vision ``F(s, j)`` needs ``F(s−1, j)``; the first action stage's ``F(V, i)``
        needs the latent ``F(V−1, i // k)``; later action ``F`` need the previous
        stage's ``F`` of the step. ``B`` needs its own ``F`` and the next stage's ``B``
        (for ``B(V−1, j)``: ``B(V, last step of j's window)``). ``U`` needs its ``B``.
        """
        kind, stage, index = action
        vision, first, last = self.num_vision_stages, self.first_action_stage, self.num_stages - 1
        if kind == "U":
            return [("B", stage, index)]
        if kind == "F":
            if stage == 0:
                return []
            if stage == first:
                return [("F", vision - 1, self.frame_of(index))]
            return [("F", stage - 1, index)]
        needs: list[RawAction] = [("F", stage, index)]
        if stage == vision - 1:
            needs.append(("B", first, self.window(index)[-1]))
        elif stage != last:
            needs.append(("B", stage + 1, index))
        return needs

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
