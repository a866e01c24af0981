"""simulate_partition: the one way from layers per stage to a simulated Timeline."""

from __future__ import annotations

import numpy as np
import pytest

from pipeplan import build_schedule, simulate
from pipeplan.costs import CommModel
from pipeplan.layers import LayerProfile
from pipeplan.partition.steptime import StepTimer, partition_schedule, simulate_partition

PROFILE = LayerProfile.from_costs([3.0, 1.0, 2.0, 5.0, 1.0, 1.0, 4.0, 2.0])
SIZES = [2, 2, 3, 1]


@pytest.mark.parametrize("schedule", ["1f1b", "gpipe", "zb-h1", "adaptive"])
def test_simulate_partition_is_build_then_simulate(schedule):
    costs = PROFILE.stage_costs(SIZES)
    extra = {"costs": costs} if schedule == "adaptive" else {}
    expected = simulate(build_schedule(schedule, num_stages=4, num_microbatches=6, **extra), costs)
    for source in (PROFILE, costs):  # a profile is summed per stage; stage costs are used as they are
        timeline = simulate_partition(source, SIZES, schedule, 6)
        assert np.array_equal(timeline.start, expected.start) and np.array_equal(timeline.end, expected.end)


def test_a_built_schedule_runs_as_given():
    built = build_schedule("1f1b", num_stages=4, num_microbatches=3)
    comm = CommModel(latency=0.5)
    timeline = simulate_partition(PROFILE, SIZES, built, 99, comm=comm)  # m comes from the schedule
    assert timeline.schedule is built
    assert timeline.makespan == simulate(built, PROFILE.stage_costs(SIZES), comm).makespan


def test_placement_goes_to_the_generator():
    timeline = simulate_partition(PROFILE, SIZES, "adaptive", 4, placement=(0, 1, 1, 0))
    assert tuple(timeline.schedule.placement) == (0, 1, 1, 0)
    built = partition_schedule("adaptive", 4, 4, PROFILE.stage_costs(SIZES), placement=(0, 1, 1, 0))
    assert built.orders == timeline.schedule.orders


def test_step_timer_reads_the_same_simulation():
    for schedule, options in (("interleaved", {"virtual_stages": 2}), ("adaptive", {})):
        step = StepTimer(PROFILE, schedule, 4, 4, options)
        assert step([0, 2, 4, 7, 8]) == simulate_partition(PROFILE, SIZES, schedule, 4, options=options).makespan
