"""Stage → rank placements that schedules share: one stage per rank, chunks in a loop, chunks in a V.

    from pipeplan.schedules.patterns import loop_placement, v_placement
    loop_placement(3, 2)    # (0, 1, 2, 0, 1, 2): stage s on rank s mod P (interleaved 1F1B)
    v_placement(3, 2)       # (0, 1, 2, 2, 1, 0): down the ranks, then back up (ZB-V)

``placement[s]`` is the rank holding stage ``s``, as in
:attr:`pipeplan.Schedule.placement`. These are the only definitions of the two
patterns; the generators, the chunk placer (:mod:`pipeplan.partition.placement`)
and the planner read them from here.
"""

from __future__ import annotations

__all__ = ["loop_placement", "v_placement"]


def loop_placement(num_ranks: int, chunks_per_rank: int) -> tuple[int, ...]:
    """Chunks in a loop: stage ``s`` of ``P·v`` on rank ``s mod P`` (``v = 1``: one stage per rank)."""
    return tuple(stage % num_ranks for stage in range(num_ranks * chunks_per_rank))


def v_placement(num_ranks: int, chunks_per_rank: int = 2) -> tuple[int, ...]:
    """Chunks in a V (a zigzag for ``v > 2``): ranks ``0..P-1`` for even chunks, ``P-1..0`` for odd ones.

    With two chunks stage ``s`` sits on rank ``s`` for ``s < P``, else on ``2P − 1 − s``,
    so rank ``r`` holds stages ``r`` and ``2P − 1 − r``.
    """
    out: list[int] = []
    for chunk in range(chunks_per_rank):
        out.extend(range(num_ranks) if chunk % 2 == 0 else range(num_ranks - 1, -1, -1))
    return tuple(out)
