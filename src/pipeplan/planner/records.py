"""What the search records besides its plans: why a configuration does not fit, and its counts.

    from pipeplan.planner.records import Rejection, SearchStats
    stats = SearchStats(); stats.partitions += 1; stats.to_dict()["partitions"]   # 1
    Rejection(config, "rank 0 holds 90 GB, 18 GB over", needed_bytes=90e9)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .space import Config

__all__ = ["Rejection", "SearchStats"]


@dataclass(frozen=True)
class Rejection:
    """A configuration that does not fit, and why.

    Attributes:
        config: what was tried.
        reason: one line naming the rank (or stage) and the bytes over capacity.
        needed_bytes: the smallest per-GPU memory this configuration needs, when known
            (where ranks hold several stages, perhaps only the least a search found to fit).
        at_least_bytes: a lower bound on it (weights and optimizer state alone).
        needed_proven: ``False`` when ``needed_bytes`` is only what a search found to fit.
    """

    config: Config
    reason: str
    needed_bytes: float | None = None
    at_least_bytes: float | None = None
    needed_proven: bool = True


@dataclass
class SearchStats:
    """What the search did.

    Attributes:
        candidates: configurations in the space.
        partitions: exact partitions solved.
        simulated: schedules simulated.
        pruned: candidates skipped by a lower bound.
        rejected: candidates that do not fit memory (or cannot be built).
        cache_hits: layouts or simulations reused.
        seconds: wall time of the search.
        complete: ``False`` when the budget stopped it (the plans are the best so far).
    """

    candidates: int = 0
    partitions: int = 0
    simulated: int = 0
    pruned: int = 0
    rejected: int = 0
    cache_hits: int = 0
    seconds: float = 0.0
    complete: bool = True

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready counts."""
        return dict(self.__dict__)

