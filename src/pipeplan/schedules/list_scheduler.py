"""List scheduling on the actual costs: the orders the adaptive generator starts from.

:func:`list_schedule` plays a step forward in time and, whenever a rank is free,
starts the most urgent action whose inputs have arrived and whose activations fit
the rank's memory limit. :func:`sequential_schedule` runs one microbatch at a time
(the leanest order, the last resort). :func:`forward_windows` proposes how many
forwards each stage may keep open::

    from pipeplan import StageCosts
    from pipeplan.schedules.list_scheduler import list_schedule
    schedule = list_schedule(8, StageCosts(forward=[30, 10, 10, 20]), [0, 1, 2, 3], memory_limit=4)

Memory is in the costs' bytes (``activation_bytes`` from the end of ``F`` to the end
of the backward, ``weight_stash_bytes`` from there to the end of ``W``).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence

from ..costs import CommModel, StageCosts
from ..errors import InvalidInputError
from ..schedule import Action, Kind, Schedule, message_for

__all__ = ["list_schedule", "sequential_schedule", "forward_windows", "KIND_ORDERS", "FORWARD_KEYS"]

TOLERANCE = 1e-9
"""Relative slack for float comparisons of times and bytes (``20/3 + 10/3 != 10``)."""

KIND_ORDERS: dict[str, tuple[str, str, str]] = {
    "BFW": ("gradient", "forward", "weight"),  # W only fills gaps
    "FBW": ("forward", "gradient", "weight"),  # forwards first: admit microbatches eagerly
    "ALT": ("forward", "gradient", "weight"),  # F and B take turns (see below)
}
"""Priority of an action's three roles, by rule name: ``forward`` (``F``), ``gradient`` (the
backward that sends the input gradient upstream: ``B`` with a full backward, ``I`` with a
split one; the ``B`` of the rule names) and ``weight`` (``W``). ``ALT``: after a forward the
gradient backward goes first, after a gradient backward the forward (1F1B's steady
alternation, the rounds of the zero-bubble heuristic's ``manual_order``); ``W`` last."""

FORWARD_KEYS: dict[str, Callable[[int, int], tuple[int, int]]] = {
    # Oldest microbatch first, its deepest stage first (depth-first).
    "microbatch": lambda stage, mb: (mb, -stage),
    # Deepest stage first: drive microbatches towards their backward.
    "deepest": lambda stage, mb: (-stage, mb),
    # Shallowest stage first: admit microbatches early (breadth-first).
    "shallowest": lambda stage, mb: (stage, mb),
}
"""Tie-breaks among the forwards a rank may start (they differ only with several stages per rank)."""


def list_schedule(
    num_microbatches: int,
    costs: StageCosts,
    placement: Sequence[int],
    *,
    comm: CommModel | None = None,
    backward: str = "split",
    memory_limit: float | None = None,
    kind_order: str = "BFW",
    forward_key: str = "microbatch",
    reserve: bool = True,
    forward_window: Sequence[int] | None = None,
    defer_weights: bool = False,
) -> Schedule | None:
    """Build one order by non-delay list scheduling on the actual costs.

    Time advances rank by rank: the rank that can start something earliest starts
    the action with the best priority among those whose inputs have arrived
    (messages cost ``comm``'s eager time) and whose activations fit its limit.

    Args:
        num_microbatches: microbatches per step.
        costs: per-stage costs (``costs.num_stages`` stages).
        placement: stage → rank.
        comm: communication model (eager timing is used for the decisions).
        backward: ``"split"`` (input-gradient backward and ``W`` apart) or ``"full"``.
        memory_limit: bytes per rank, or ``None`` for no limit.
        kind_order: priority of kinds, a key of :data:`KIND_ORDERS`.
        forward_key: tie-break among forwards, a key of :data:`FORWARD_KEYS`.
        reserve: admit a microbatch (its stage-0 forward) only when every rank has
            room for all of its chunks' activations; this can never deadlock.
            Without it a forward only needs room on its own rank, which can.
        forward_window: per stage, the most microbatches that may have run its
            ``F`` but not yet its backward (1F1B's ``S − s``, say); ``None`` for no window.
        defer_weights: do not start a ``W`` that would still run when a forward (that
            fits) or a gradient backward already on its way arrives; wait for that one
            instead (the zero-bubble heuristic's rule). Off: a ``W`` fills every gap.

    Returns:
        The schedule (named ``"adaptive"``), or ``None`` when the rule deadlocks
        against the memory limit.
    """
    if kind_order not in KIND_ORDERS:
        raise InvalidInputError(f"kind_order must be one of {', '.join(KIND_ORDERS)}, got {kind_order!r}")
    if forward_key not in FORWARD_KEYS:
        raise InvalidInputError(f"forward_key must be one of {', '.join(FORWARD_KEYS)}, got {forward_key!r}")
    scheduler = _ListScheduler(num_microbatches, costs, placement, comm or CommModel(), backward=backward,
                               memory_limit=memory_limit, kind_order=kind_order, forward_key=forward_key,
                               reserve=reserve, forward_window=forward_window, defer_weights=defer_weights)
    return scheduler.run()


_Key = tuple[Kind, int, int]
"""An action the scheduler may start: ``(kind, stage, microbatch)``."""
_FORWARD, _WEIGHT = Kind.F, Kind.W  # module constants: an enum member's lookup is slow in the hot loop


class _ListScheduler:
    """One pass of :func:`list_schedule`: the state of the step played so far, and its rules.

    Per rank: ``enabled`` holds the forwards and gradient backwards whose predecessors ran,
    ``{key: (ready time, priority, key)}`` (ready: when their input arrives); ``weights``
    the ``W``'s waiting, a heap by ``(mb, stage)``; they are ready as soon as enabled
    (their backward ran on the same rank), so they need no ready time. ``free`` is when
    the rank finishes its last action, ``held`` the bytes it holds, ``reserved`` the bytes
    set aside for admitted microbatches' forwards still to come on it, ``need`` what one
    microbatch takes on it (all its chunks). Per stage: ``open_forwards`` counts the
    microbatches past ``F`` but not yet past their backward.
    """

    def __init__(self, num_microbatches: int, costs: StageCosts, placement: Sequence[int], comm: CommModel, *,
                 backward: str, memory_limit: float | None, kind_order: str, forward_key: str, reserve: bool,
                 forward_window: Sequence[int] | None, defer_weights: bool = False) -> None:
        num_stages = costs.num_stages
        num_ranks = max(placement) + 1
        self.num_microbatches = num_microbatches
        self.costs = costs
        self.placement = placement
        self.num_ranks = num_ranks
        self.reserve = reserve
        self.split = backward == "split"
        self.gradient = Kind.I if self.split else Kind.B  # the backward that sends the gradient upstream
        boundary = comm.boundary_times(num_stages)
        # Message time of the edge from each stage to its successor (0 on one rank), from the one owner.
        self.down_delay = [_edge_time(Action(Kind.F, s, 0), Action(Kind.F, s + 1, 0), placement, boundary)
                           for s in range(num_stages - 1)]
        self.up_delay = [_edge_time(Action(self.gradient, s + 1, 0), Action(self.gradient, s, 0), placement,
                                    boundary) for s in range(num_stages - 1)]
        self.limit = math.inf if memory_limit is None else float(memory_limit) * (1 + TOLERANCE) + TOLERANCE
        self.act = costs.activation_bytes
        self.stash = costs.weight_stash_bytes if self.split else (0.0,) * num_stages
        self.need = [0.0] * num_ranks
        for stage, rank in enumerate(placement):
            self.need[rank] += self.act[stage]
        roles = {role: index for index, role in enumerate(KIND_ORDERS[kind_order])}
        self.forward_priority, self.gradient_priority = roles["forward"], roles["gradient"]
        self.weight_priority = roles["weight"]
        self.alternate = kind_order == "ALT"
        self.after_forward = [False] * num_ranks  # ALT: the rank's last F or gradient backward was an F
        self.forwards_left = [0] * num_ranks
        self.waiting = self.alternate  # ALT may wait for a forward not yet sent (see _turn)
        for rank in placement:
            self.forwards_left[rank] += num_microbatches
        self.forward_tiebreak = FORWARD_KEYS[forward_key]
        self.last = num_stages - 1
        self.window = list(forward_window) if forward_window is not None else [num_microbatches + 1] * num_stages
        self.defer_weights = defer_weights and self.split
        self.first_rank = placement[0]
        self.enabled: list[dict[_Key, tuple[float, tuple[int, int, int], _Key]]] = [{} for _ in range(num_ranks)]
        self.weights: list[list[tuple[int, int]]] = [[] for _ in range(num_ranks)]
        self.next_admit = 1  # stage-0 forwards are admitted in microbatch order
        self.free = [0.0] * num_ranks
        self.held = [0.0] * num_ranks
        self.reserved = [0.0] * num_ranks
        self.orders: list[list[Action]] = [[] for _ in range(num_ranks)]
        self.open_forwards = [0] * num_stages
        self.admission_ok = True
        # per rank: whether one more microbatch would not fit it (admission needs none such)
        self.over = [False] * num_ranks
        self.num_over = 0

    def run(self) -> Schedule | None:
        """Schedule every action; ``None`` when the rule deadlocks against the memory limit."""
        num_ranks = self.num_ranks
        total = self.costs.num_stages * self.num_microbatches * (3 if self.split else 2)
        scheduled = 0
        decide, start = self._decide, self._start
        if self.num_microbatches:
            self._enable(self.first_rank, (Kind.F, 0, 0), 0.0)
        decisions = [decide(rank) for rank in range(num_ranks)]
        # The rank that can start something first goes next (lowest rank on ties): a heap of
        # (time, rank, version) whose stale entries are skipped.
        versions = [0] * num_ranks
        agenda = [(decisions[r][0], r, 0) for r in range(num_ranks)]
        heapq.heapify(agenda)
        while scheduled < total:
            when, rank, version = heapq.heappop(agenda)
            if version != versions[rank]:
                continue
            chosen = decisions[rank][1]
            if chosen is None:
                if not self.waiting:
                    return None
                # ALT: every rank waits for a forward not yet sent; drop those waits until
                # something starts (the usual priorities then decide, as without ALT)
                self.waiting, touched = False, set(range(num_ranks))
            else:
                touched = start(rank, chosen, when)
                scheduled += 1
                self.waiting = self.alternate
            for r in touched:
                decisions[r] = decide(r)
                versions[r] += 1
                heapq.heappush(agenda, (decisions[r][0], r, versions[r]))
        return Schedule(self.orders, self.placement, self.num_microbatches, name="adaptive")

    def _recheck(self, ranks: range | tuple[int, ...]) -> None:
        """Update whether ``ranks`` have room for one more microbatch, after their memory changed."""
        held, reserved, need, limit, over = self.held, self.reserved, self.need, self.limit, self.over
        for q in ranks:
            full = held[q] + reserved[q] + need[q] > limit
            if full != over[q]:
                over[q] = full
                self.num_over += 1 if full else -1

    def _fits(self, rank: int, stage: int) -> bool:
        """Whether a forward of ``stage`` may start on ``rank`` (window and memory)."""
        if self.open_forwards[stage] >= self.window[stage]:
            return False
        if self.reserve:
            return stage != 0 or self.admission_ok
        return self.held[rank] + self.act[stage] <= self.limit

    def _decide(self, rank: int) -> tuple[float, _Key | None]:
        """When ``rank`` can start something next, and what (``None``: nothing can start)."""
        if self.alternate:
            turn = self._turn(rank)
            if turn is not None:
                return turn
        # two passes over the rank's enabled actions, no list built: this runs about
        # twice per scheduled action and dominates the generator's time
        fits = self._fits
        best: _Key | None = None
        best_prio: tuple[int, int, int] | None = None
        entries = self.enabled[rank]
        heap = self.weights[rank]
        when = self.free[rank]
        if not heap:
            earliest = math.inf
            for key, entry in entries.items():
                if entry[0] < earliest and (key[0] is not _FORWARD or fits(rank, key[1])):
                    earliest = entry[0]
            if earliest == math.inf:
                return math.inf, None
            when = max(when, earliest)
        horizon = when + TOLERANCE * max(1.0, abs(when))
        ready_at = when
        for key, (ready, prio, _) in entries.items():
            if ready <= horizon and (best_prio is None or prio < best_prio) and (
                    key[0] is not _FORWARD or fits(rank, key[1])):
                best, best_prio, ready_at = key, prio, ready
        if heap:
            mb, stage = heap[0]
            if best_prio is None or (self.weight_priority, mb, stage) < best_prio:
                if self.defer_weights:
                    waiting = self._arrives_during(rank, when + self.costs.duration(_WEIGHT, stage, mb))
                    if waiting is not None:
                        return waiting
                best, ready_at = (_WEIGHT, stage, mb), when
        return max(when, ready_at), best

    def _turn(self, rank: int) -> tuple[float, _Key | None] | None:
        """``ALT``: the action whose turn it is (F after a gradient backward, and back), or ``None``.

        The earliest enabled action of the kind whose turn it is runs as soon as it is
        ready; until then the rank fills the wait with a ``W`` (with ``defer_weights``,
        only a ``W`` that ends before it arrives) or waits. A forward's turn also waits
        (filling with ``W``) for a forward not yet sent while the rank has forwards left,
        as the heuristic's rounds do. ``None`` when no action of that kind is due
        (warm-up, cool-down, a forward that does not fit): the usual priorities decide.
        """
        kind = self.gradient if self.after_forward[rank] else _FORWARD
        found: tuple[float, tuple[int, int, int], _Key] | None = None
        for key, entry in self.enabled[rank].items():
            if key[0] is kind and (found is None or entry[:2] < found[:2]) and (
                    kind is not _FORWARD or self._fits(rank, key[1])):
                found = entry
        free, heap = self.free[rank], self.weights[rank]
        if found is None:
            if kind is not _FORWARD or not self.waiting or not self.forwards_left[rank] or self._forward_blocked(rank):
                return None
            if heap:
                mb, stage = heap[0]
                return free, (_WEIGHT, stage, mb)
            return math.inf, None  # wait for the forward to be sent
        ready = found[0]
        if ready <= free + TOLERANCE * max(1.0, abs(free)) or not heap:
            return max(free, ready), found[2]
        mb, stage = heap[0]
        if self.defer_weights and free + self.costs.duration(_WEIGHT, stage, mb) > ready * (1 + TOLERANCE) + TOLERANCE:
            return ready, found[2]
        return free, (_WEIGHT, stage, mb)

    def _forward_blocked(self, rank: int) -> bool:
        """Whether an enabled forward on ``rank`` is held back by its window or memory."""
        return any(key[0] is _FORWARD for key in self.enabled[rank])

    def _arrives_during(self, rank: int, until: float) -> tuple[float, _Key] | None:
        """The first startable forward or gradient backward arriving before ``until``, with its time."""
        fits = self._fits
        found: tuple[float, tuple[int, int, int], _Key] | None = None
        limit = until - TOLERANCE * max(1.0, abs(until))
        for key, entry in self.enabled[rank].items():
            if entry[0] < limit and (found is None or entry[:2] < found[:2]) and (
                    key[0] is not _FORWARD or fits(rank, key[1])):
                found = entry
        return None if found is None else (found[0], found[2])

    def _enable(self, rank: int, key: _Key, ready: float) -> None:
        """Make a forward or gradient backward startable on ``rank`` from time ``ready``."""
        kind, stage, mb = key
        if kind is _FORWARD:
            prio = (self.forward_priority, *self.forward_tiebreak(stage, mb))
        else:
            prio = (self.gradient_priority, mb, stage)
        self.enabled[rank][key] = (ready, prio, key)

    def _start(self, rank: int, chosen: _Key, when: float) -> set[int]:
        """Run ``chosen`` on ``rank`` from ``when``; return the ranks whose next decision may change."""
        kind, stage, mb = chosen
        finish = when + self.costs.duration(kind, stage, mb)
        if kind is _WEIGHT:
            heapq.heappop(self.weights[rank])
        else:
            del self.enabled[rank][chosen]
        self.orders[rank].append(Action(kind, stage, mb))
        self.free[rank] = finish
        if kind is not _WEIGHT:
            self.after_forward[rank] = kind is _FORWARD
            if kind is _FORWARD:
                self.forwards_left[rank] -= 1
        touched = {rank}
        if kind is _FORWARD:
            self._forward_done(rank, stage, mb, finish, touched)
        elif kind is self.gradient:
            self._gradient_done(rank, stage, mb, finish, touched)
        else:
            self.held[rank] -= self.stash[stage]
        if self.reserve:
            self._recheck(range(self.num_ranks) if kind is _FORWARD and stage == 0 else (rank,))
            admission_ok = self.num_over == 0
            if admission_ok != self.admission_ok:
                self.admission_ok = admission_ok
                touched.add(self.first_rank)  # admission looks at every rank's memory
        return touched

    def _forward_done(self, rank: int, stage: int, mb: int, finish: float, touched: set[int]) -> None:
        """Hold the forward's activations and enable what it feeds (the next forward, or the backward)."""
        if self.reserve:
            if stage == 0:
                for q in range(self.num_ranks):
                    self.reserved[q] += self.need[q]
            self.reserved[rank] -= self.act[stage]
        self.held[rank] += self.act[stage]
        self.open_forwards[stage] += 1
        if stage == 0 and self.next_admit < self.num_microbatches:
            self._enable(self.first_rank, (_FORWARD, 0, self.next_admit), finish)
            self.next_admit += 1
        if stage < self.last:
            target = self.placement[stage + 1]
            self._enable(target, (_FORWARD, stage + 1, mb), finish + self.down_delay[stage])
            touched.add(target)
        else:
            self._enable(rank, (self.gradient, stage, mb), finish)

    def _gradient_done(self, rank: int, stage: int, mb: int, finish: float, touched: set[int]) -> None:
        """Free the activations (but W's stash), queue the W, enable the backward upstream."""
        self.held[rank] -= self.act[stage] - self.stash[stage]
        self.open_forwards[stage] -= 1
        if self.split:
            heapq.heappush(self.weights[rank], (mb, stage))
        if stage > 0:
            target = self.placement[stage - 1]
            self._enable(target, (self.gradient, stage - 1, mb), finish + self.up_delay[stage - 1])
            touched.add(target)


def _edge_time(producer: Action, consumer: Action, placement: Sequence[int], boundary: Sequence[float]) -> float:
    """Eager message time of one edge: the boundary's time when it crosses ranks, else 0."""
    message = message_for(producer, consumer, placement)
    return 0.0 if message is None else boundary[message.boundary]


def sequential_schedule(
    num_stages: int, num_microbatches: int, placement: Sequence[int], *, backward: str = "split"
) -> Schedule:
    """One microbatch at a time: its forwards down, then its backwards up (each ``W`` after its backward).

    The slowest order, but it fits the smallest memory limit any order fits and cannot
    deadlock even with rendezvous sends (every receiver has posted before its sender
    sends), so it is the adaptive generator's last resort.
    """
    num_ranks = max(placement) + 1
    gradient = Kind.I if backward == "split" else Kind.B
    orders: list[list[Action]] = [[] for _ in range(num_ranks)]
    for mb in range(num_microbatches):
        for stage in range(num_stages):
            orders[placement[stage]].append(Action(Kind.F, stage, mb))
        for stage in reversed(range(num_stages)):
            orders[placement[stage]].append(Action(gradient, stage, mb))
            if backward == "split":
                orders[placement[stage]].append(Action(Kind.W, stage, mb))
    return Schedule(orders, placement, num_microbatches, name="adaptive")


def forward_windows(
    costs: StageCosts, placement: Sequence[int], comm: CommModel, backward: str,
    memory_limit: float | None = None,
) -> dict[str, list[int] | None]:
    """Forward windows to try (see :func:`list_schedule`), by name, duplicates dropped.

    ``open``: none. ``count``: 1F1B's ``S − s``. ``double``: ZB-H2's ``2(S − s) − 1``.
    ``cost``: ``1 + ⌈R_s / T_F⌉``; ``fill`` and ``zb``: ``1 + ⌊R_s / T_F⌋``, where ``R_s`` is the
    shortest time from the end of ``F(s, mb)`` to the start of its backward (the rest of
    the forward, the backward back up, the messages) and ``T_F`` the forward time per
    microbatch of the rank holding ``s`` (all its chunks): before its first backward a
    rank runs only forwards, so that many keep it busy while the first gradient comes
    back. ``zb`` is the zero-bubble repository's warm-up (``zb.py``'s ``manual_order``,
    sail-sg/zero-bubble-pipeline-parallelism: one forward, then as many as end before
    the gradient arrives; with one stage per rank, also no more than fit
    ``memory_limit`` and fewer than the stage above holds, as that code trims them);
    ``fill`` is that count without the cap and trim; ``cost`` also starts the one that
    straddles the gradient's arrival.
    """
    num_stages = costs.num_stages
    split = backward == "split"
    gradient = Kind.I if split else Kind.B
    boundary = comm.boundary_times(num_stages)
    forward_work: dict[int, float] = {}
    for stage, rank in enumerate(placement):
        forward_work[rank] = forward_work.get(rank, 0.0) + costs.duration(Kind.F, stage, 0)
    cost_window, zb_window = [], []
    round_trip = 0.0  # R_s, built from the last stage up
    trips = [0.0] * num_stages
    for stage in range(num_stages - 2, -1, -1):
        later = stage + 1
        round_trip += costs.duration(Kind.F, later, 0) + costs.duration(gradient, later, 0)
        round_trip += _edge_time(Action(Kind.F, stage, 0), Action(Kind.F, later, 0), placement, boundary)
        round_trip += _edge_time(Action(gradient, later, 0), Action(gradient, stage, 0), placement, boundary)
        trips[stage] = round_trip
    for stage in range(num_stages):
        ratio = trips[stage] / max(forward_work[placement[stage]], TOLERANCE)
        cost_window.append(1 + math.ceil(ratio - TOLERANCE))
        zb_window.append(1 + math.floor(ratio + TOLERANCE))
    fill_window = list(zb_window)
    if len(set(placement)) == num_stages:  # one stage per rank: the heuristic's memory cap and trim
        for stage in range(num_stages):
            if memory_limit is not None and costs.activation_bytes[stage] > 0:
                fit = math.floor(memory_limit / costs.activation_bytes[stage] + TOLERANCE)
                zb_window[stage] = max(1, min(zb_window[stage], fit))
            if stage > 0 and zb_window[stage] >= zb_window[stage - 1]:
                zb_window[stage] = max(1, zb_window[stage - 1] - 1)
    candidates: dict[str, list[int] | None] = {
        "open": None,
        "count": [num_stages - s for s in range(num_stages)],
        "double": [2 * (num_stages - s) - 1 for s in range(num_stages)],
        "cost": cost_window,
        "zb": zb_window,
        "fill": fill_window,
    }
    out: dict[str, list[int] | None] = {}
    for name, window in candidates.items():
        if window not in out.values():
            out[name] = window
    return out
