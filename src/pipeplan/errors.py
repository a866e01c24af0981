"""One exception family for every user-facing failure.

Every error names the field, the value and what is allowed, so the CLI can print
it as one line and exit 2::

    >>> from pipeplan.errors import InvalidInputError, PipeplanError
    >>> try:
    ...     raise InvalidInputError("num_microbatches must be >= 1, got 0")   # also a ValueError
    ... except PipeplanError as error:
    ...     print(f"pipeplan: error: {error}")
    pipeplan: error: num_microbatches must be >= 1, got 0
"""

from __future__ import annotations

__all__ = [
    "PipeplanError",
    "InvalidInputError",
    "InvalidScheduleError",
    "DeadlockError",
    "InfeasiblePlanError",
    "RuntimeFailure",
]


class PipeplanError(Exception):
    """Base class of every error pipeplan raises on purpose."""


class InvalidInputError(PipeplanError, ValueError):
    """An argument is out of range: a NaN cost, zero microbatches, lists of different lengths."""


class InvalidScheduleError(PipeplanError, ValueError):
    """A schedule is malformed: a missing, duplicated or misplaced action."""


class DeadlockError(InvalidScheduleError):
    """The per-rank orders can never all finish (a cyclic wait)."""


class InfeasiblePlanError(PipeplanError):
    """No plan satisfies the constraints (for example, nothing fits the memory limit).

    Besides its one-line message it carries what a caller needs to act on it, so
    no caller parses the text (each field ``None`` where the error does not say):

    Attributes:
        needed_bytes: the smallest memory capacity (bytes, per stage or per rank)
            known to fit.
        proven: ``True`` when ``needed_bytes`` is the exact smallest, ``False``
            when a search found it (a capacity that fits, perhaps not the least).
        rank: the rank that needs ``needed_bytes``, where ranks hold several stages.
        stage: the stage that needs it, where each rank holds one stage.
        layers: per stage of ``rank`` (or the one ``stage``), its first and last
            layer, both inclusive.
    """

    def __init__(self, message: str, *, needed_bytes: float | None = None, proven: bool = True,
                 rank: int | None = None, stage: int | None = None,
                 layers: tuple[tuple[int, int], ...] = ()) -> None:
        super().__init__(message)
        self.needed_bytes = needed_bytes
        self.proven = proven
        self.rank = rank
        self.stage = stage
        self.layers = layers


class RuntimeFailure(PipeplanError, RuntimeError):
    """A rank of a real run failed or timed out; the message names the rank and action."""
