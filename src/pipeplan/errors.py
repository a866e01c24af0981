"""One exception family for every user-facing failure.

Every error names the field, the value and what is allowed, so the CLI can print
it as one line and exit 2::

    from pipeplan.errors import InvalidInputError
    raise InvalidInputError("num_microbatches must be >= 1, got 0")
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
    """No plan satisfies the constraints (for example, nothing fits the memory limit)."""


class RuntimeFailure(PipeplanError, RuntimeError):
    """A rank of a real run failed or timed out; the message names the rank and action."""
