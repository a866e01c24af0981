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
        examined: when the budget stopped it, the configurations (of ``candidates``)
            it simulated, rejected or ruled out by a bound before stopping
            (``None``: it examined them all).
        unexamined_bound: when the budget stopped it, a step time (the plans'
            unit, ms) no plan of the configurations it did not examine beats: the
            least of their partition-free bounds. A best plan faster than this
            would have stayed the best had the search run on.
    """

    candidates: int = 0
    partitions: int = 0
    simulated: int = 0
    pruned: int = 0
    rejected: int = 0
    cache_hits: int = 0
    seconds: float = 0.0
    complete: bool = True
    examined: int | None = None
    unexamined_bound: float | None = None

    @property
    def examined_share(self) -> float:
        """The share of the candidates examined (1.0 for a complete search)."""
        if self.examined is None or not self.candidates:
            return 1.0
        return self.examined / self.candidates

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready counts; a search the budget stopped adds ``examined``, ``examined_share`` and
        ``unexamined_bound`` (a complete one examined everything, and has no such keys)."""
        out = dict(self.__dict__)
        if self.complete:
            out.pop("examined")
            out.pop("unexamined_bound")
        else:
            out["examined_share"] = self.examined_share
        return out

