"""Schedules and timelines shared by several test modules.

    from _builders import chunked_gpipe, simulated_timelines
    schedule = chunked_gpipe([0, 1, 1, 0], num_microbatches=3)      # a V placement
"""

from __future__ import annotations

from hypothesis import strategies as st

import pipeplan
from pipeplan import Action, CommModel, DeadlockError, Schedule, StageCosts, Timeline


def chunked_gpipe(placement: list[int], num_microbatches: int, backward: str = "full") -> Schedule:
    """Every forward of a rank's chunks in stage order, then every backward in reverse."""
    num_ranks = max(placement) + 1
    orders: list[list[Action]] = [[] for _ in range(num_ranks)]
    for rank in range(num_ranks):
        stages = [s for s, r in enumerate(placement) if r == rank]
        for stage in stages:
            orders[rank] += [Action("F", stage, mb) for mb in range(num_microbatches)]
        if backward != "none":
            for stage in reversed(stages):
                for mb in range(num_microbatches):
                    if backward == "split":
                        orders[rank] += [Action("I", stage, mb), Action("W", stage, mb)]
                    else:
                        orders[rank].append(Action("B", stage, mb))
    return Schedule(orders, placement, num_microbatches, name="chunked-gpipe")


@st.composite
def simulated_timelines(draw: st.DrawFn) -> Timeline:
    """Simulated timelines of GPipe, 1F1B, V and looped chunk placements; any backward;
    random costs and activation bytes; eager or rendezvous sends."""
    backward = draw(st.sampled_from(["full", "split", "none"]))
    num_microbatches = draw(st.integers(1, 5))
    family = draw(st.sampled_from(["gpipe", "1f1b", "v", "looped"]))
    if family in ("gpipe", "1f1b"):
        schedule = pipeplan.build_schedule(family, num_stages=draw(st.integers(1, 4)),
                                           num_microbatches=num_microbatches, backward=backward)
    else:
        ranks = draw(st.integers(1, 3))
        second = list(reversed(range(ranks))) if family == "v" else list(range(ranks))
        schedule = chunked_gpipe(list(range(ranks)) + second, num_microbatches, backward)
    stages = schedule.num_stages
    costs = StageCosts(draw(st.lists(st.floats(0.1, 10.0), min_size=stages, max_size=stages)),
                       activation_bytes=draw(st.lists(st.floats(0, 1e9), min_size=stages, max_size=stages)))
    comm = CommModel(latency=draw(st.sampled_from([0.0, 0.5, 3.0])),
                     send_mode=draw(st.sampled_from(["eager", "rendezvous"])))
    try:
        return pipeplan.simulate(schedule, costs, comm)
    except DeadlockError:  # the naive chunked order can deadlock on rendezvous sends
        return pipeplan.simulate(schedule, costs, CommModel(latency=comm.latency))
