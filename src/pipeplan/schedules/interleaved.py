"""Interleaved 1F1B (Megatron-LM's virtual pipeline, Narayanan et al., 2021).

The model is cut into ``S = v·P`` stages; rank ``r`` holds the ``v`` chunks
``r, r + P, r + 2P, ...`` (stage ``s`` lives on rank ``s mod P``). Each rank
runs a warm-up of forwards, a steady phase of one forward then one backward,
and a cool-down of backwards, walking its chunks in microbatch groups::

    from pipeplan.schedules.interleaved import interleaved
    schedule = interleaved(8, 8, virtual_stages=2)    # 4 ranks, 2 chunks each
    [a.label for a in schedule.orders[0][:6]]          # ['F0', 'F1', 'F2', 'F3', 'F0', 'F1']

Order (``m`` a multiple of ``P``: exactly Megatron-LM's
``forward_backward_pipelining_with_interleaving`` with the default group size
``P``). The ``v·m`` forwards of a rank are numbered by a *virtual microbatch*
``k``: the microbatches are cut into groups of ``P``; inside a group the rank
runs chunk 0 on every microbatch of the group, then chunk 1, ... Backwards use
the same table with the chunks reversed (the last chunk first). Rank ``r`` runs
``min(v·m, 2·(P − r − 1) + (v − 1)·P)`` warm-up forwards, then alternates
``F(k + warm-up)``, ``B(k)`` (or ``I(k) W(k)``), then drains the backwards.

Generalisation (``m`` not a multiple of ``P``): the microbatches are cut into
``⌊m / P⌋`` groups whose sizes differ by at most one (larger groups first), so
every group holds at least ``P`` microbatches, as Megatron-LM requires of its
``microbatch_group_size_per_vp_stage`` and as torch's ``ScheduleInterleaved1F1B``
does with its rounds; the warm-up uses the first group's size in place of
``P``. For ``m < P`` there is a single group of all ``m`` microbatches and the
warm-up is capped at the total; the schedule is valid (property-tested) but
carries extra bubbles, since a rank's next chunk waits for microbatch 0 to
come round the ring of ranks. ``v = 1`` is plain 1F1B (warm-up ``P − r − 1``).
"""

from __future__ import annotations

from .._validation import positive_int
from ..errors import InvalidInputError
from ..schedule import Action, BackwardMode, Schedule, kinds_for
from .patterns import loop_placement

__all__ = ["interleaved", "microbatch_groups", "interleaved_warmup", "interleaved_peak_inflight"]


def microbatch_groups(num_microbatches: int, num_ranks: int) -> list[int]:
    """Sizes of the microbatch groups a rank walks through chunk by chunk.

    ``⌊m / P⌋`` groups (at least one) whose sizes differ by at most one, larger
    first; for ``m`` a multiple of ``P`` every group holds ``P`` microbatches.
    """
    rounds = max(1, num_microbatches // num_ranks)
    base, extra = divmod(num_microbatches, rounds)
    return [base + 1 if index < extra else base for index in range(rounds)]


def interleaved_warmup(rank: int, num_ranks: int, num_microbatches: int, virtual_stages: int) -> int:
    """Warm-up forwards of ``rank``: ``min(v·m, 2·(P − r − 1) + (v − 1)·N)``.

    ``N`` is the first microbatch group's size (``P`` when ``P`` divides ``m``);
    for ``v = 1`` it is 1F1B's ``min(m, P − r − 1)``.
    """
    total = virtual_stages * num_microbatches
    if virtual_stages == 1:
        return min(num_microbatches, num_ranks - rank - 1)
    group = microbatch_groups(num_microbatches, num_ranks)[0]
    return min(total, 2 * (num_ranks - rank - 1) + (virtual_stages - 1) * group)


def interleaved_peak_inflight(rank: int, num_ranks: int, num_microbatches: int, virtual_stages: int) -> int:
    """Peak (stage, microbatch) pairs in flight on ``rank``: warm-up + 1, capped at ``v·m``.

    Every forward of the warm-up and the first steady forward are held before the
    first backward frees one; afterwards each forward is paired with a backward.
    Each pair holds one chunk's activations (``1/v`` of a 1F1B stage's).
    """
    warmup = interleaved_warmup(rank, num_ranks, num_microbatches, virtual_stages)
    return min(virtual_stages * num_microbatches, warmup + 1)


def _table(num_microbatches: int, num_ranks: int, virtual_stages: int) -> list[tuple[int, int]]:
    """``(microbatch, chunk)`` of each virtual microbatch, in forward order."""
    table: list[tuple[int, int]] = []
    first = 0
    for size in microbatch_groups(num_microbatches, num_ranks):
        for chunk in range(virtual_stages):
            table.extend((mb, chunk) for mb in range(first, first + size))
        first += size
    return table


def interleaved(
    num_stages: int,
    num_microbatches: int,
    *,
    virtual_stages: int = 2,
    backward: BackwardMode = "full",
) -> Schedule:
    """Build the interleaved 1F1B schedule.

    Args:
        num_stages: total model stages ``S`` (a multiple of ``virtual_stages``);
            the schedule has ``P = S / v`` ranks and stage ``s`` sits on rank ``s mod P``.
        num_microbatches: microbatches per step (``m >= 1``; see the module doc
            for ``m`` that is not a multiple of ``P``).
        virtual_stages: chunks per rank ``v >= 1``; ``v = 1`` gives 1F1B's order.
        backward: ``"full"`` (``B``); ``"split"`` puts each ``W`` right after its ``I``;
            ``"none"`` gives the forwards in table order.

    Returns:
        A schedule named ``"interleaved"``.

    Memory bound (tested): rank ``r`` holds at most
    ``min(v·m, interleaved_warmup(r, P, m, v) + 1)`` (stage, microbatch) pairs,
    i.e. ``min(v·m, 2·(P − r − 1) + (v − 1)·P + 1)`` for ``m`` a multiple of ``P``
    and ``v >= 2``; each pair is one chunk (``1/v`` of a rank's layers).

    Raises:
        InvalidInputError: ``num_stages`` not a multiple of ``virtual_stages``, or
            an out-of-range argument.
    """
    num_stages = positive_int("num_stages", num_stages)
    num_microbatches = positive_int("num_microbatches", num_microbatches)
    virtual_stages = positive_int("virtual_stages", virtual_stages)
    kinds_for(backward)  # raises on an unknown mode
    if num_stages % virtual_stages:
        raise InvalidInputError(
            f"num_stages = {num_stages} must be a multiple of virtual_stages = {virtual_stages} "
            "(each of the num_stages / virtual_stages ranks holds virtual_stages chunks)"
        )
    num_ranks = num_stages // virtual_stages
    table = _table(num_microbatches, num_ranks, virtual_stages)
    total = len(table)

    def stage_of(rank: int, chunk: int) -> int:
        return chunk * num_ranks + rank

    orders = []
    for rank in range(num_ranks):
        forwards = [Action("F", stage_of(rank, chunk), mb) for mb, chunk in table]
        if backward == "none":
            orders.append(forwards)
            continue
        backwards: list[list[Action]] = []
        for mb, chunk in table:
            stage = stage_of(rank, virtual_stages - 1 - chunk)
            if backward == "split":
                backwards.append([Action("I", stage, mb), Action("W", stage, mb)])
            else:
                backwards.append([Action("B", stage, mb)])
        warmup = interleaved_warmup(rank, num_ranks, num_microbatches, virtual_stages)
        order = forwards[:warmup]
        for step in range(total - warmup):
            order.append(forwards[warmup + step])
            order.extend(backwards[step])
        for step in range(total - warmup, total):
            order.extend(backwards[step])
        orders.append(order)
    return Schedule(orders, loop_placement(num_ranks, virtual_stages), num_microbatches, name="interleaved")
