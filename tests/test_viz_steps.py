"""Tests of pipeplan.viz.steps: the seed lesson 002 step table."""

from __future__ import annotations

import re
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pipeplan
from pipeplan import CommModel, InvalidInputError, StageCosts, Timeline
from pipeplan.viz import step_table

_ENTRY = re.compile(r"S(\d+): ([FBIW])(\d+)\((\d+)\)")
_LINE = re.compile(r"T=(\d+): (.*)")


def parse(table: str) -> list[tuple[int, list[tuple[int, str, int]]]]:
    """``[(t, [(stage, kind, microbatch), ...]), ...]`` with everything 1-based, checking the syntax."""
    rows = []
    for line in table.splitlines():
        match = _LINE.fullmatch(line)
        assert match, line
        step, body = int(match.group(1)), match.group(2)
        entries = []
        if body != "idle":
            for part in body.split(" | "):
                entry = _ENTRY.fullmatch(part)
                assert entry, part
                assert entry.group(1) == entry.group(3)  # "S2: F2(1)": the subscript is the stage
                entries.append((int(entry.group(1)), entry.group(2), int(entry.group(4))))
        rows.append((step, entries))
    return rows


def seed_case(name: str) -> Timeline:
    # Seed 002 (/work/shared/seeds/002_58c429019bdfa765.txt): M = 3 stages, N = 4
    # microbatches, T_F ≈ T_B (unit costs).
    return pipeplan.simulate(pipeplan.build_schedule(name, num_stages=3, num_microbatches=4),
                             StageCosts.uniform(3, forward=1, backward=1))


@pytest.mark.parametrize("name", ["gpipe", "1f1b"])
def test_seed_002_m3_n4(name: str) -> None:
    rows = parse(step_table(seed_case(name)))
    # The seed's fill phase: F1(1) → F2(1) → F3(1), stage 1 alone at T=1.
    assert rows[0] == (1, [(1, "F", 1)])
    assert (2, "F", 1) in rows[1][1] and (3, "F", 1) in rows[2][1]
    # T_1F1B ≈ N·2 + (2M − 2) = 12 steps for M = 3, N = 4 (the seed's formula); GPipe
    # with F = B also takes 2·(N + M − 1) = 12.
    assert [step for step, _ in rows] == list(range(1, 13))
    # Every action appears exactly once, and each stage runs at most one action a step.
    counted = Counter(entry for _, entries in rows for entry in entries)
    assert counted == Counter((s, k, mb) for k in "FB" for s in range(1, 4) for mb in range(1, 5))
    for _, entries in rows:
        stages = [stage for stage, _, _ in entries]
        assert stages == sorted(set(stages))
    # The drain ends with stage 1's backward of the last microbatch.
    assert rows[-1] == (12, [(1, "B", 4)])


def test_seed_002_1f1b_interleaves_in_steady_state() -> None:
    rows = dict(parse(step_table(seed_case("1f1b"))))
    # Stage 3 runs B3(1) right after F3(1) (T=4), and the middle stage alternates F and B.
    assert rows[4] == [(3, "B", 1)]
    middle = [kind for step in sorted(rows) for stage, kind, _ in rows[step] if stage == 2]
    assert middle == ["F", "F", "B", "F", "B", "F", "B", "B"]
    # 1F1B keeps fewer forwards ahead than GPipe: stage 1 starts its first B at T=6, not T=9.
    first_b = min(step for step, entries in rows.items() if (1, "B", 1) in entries)
    assert first_b == 6


def test_idle_steps_and_longer_actions() -> None:
    # F = 1, B = 2, latency 1 between ranks: a B fills two steps, a gap reads "idle".
    timeline = pipeplan.simulate(pipeplan.build_schedule("gpipe", num_stages=2, num_microbatches=1),
                                 StageCosts([1, 1]), CommModel(latency=1.0))
    lines = step_table(timeline).splitlines()
    assert lines == [
        "T=1: S1: F1(1)",
        "T=2: idle",
        "T=3: S2: F2(1)",
        "T=4: S2: B2(1)",
        "T=5: S2: B2(1)",
        "T=6: idle",
        "T=7: S1: B1(1)",
        "T=8: S1: B1(1)",
    ]


def test_explicit_and_inferred_units() -> None:
    # All costs are multiples of 2: the inferred unit is 2, so each action is one step.
    timeline = pipeplan.simulate(pipeplan.build_schedule("1f1b", num_stages=2, num_microbatches=2),
                                 StageCosts([2, 2], [4, 4], activation_bytes=None))
    inferred = parse(step_table(timeline))
    assert len(inferred) == timeline.makespan / 2
    halved = parse(step_table(timeline, unit=1))
    assert len(halved) == timeline.makespan
    # Fractions work: F = 0.5, B = 1.5 gives a grid of 0.5.
    fractional = pipeplan.simulate(pipeplan.build_schedule("gpipe", num_stages=2, num_microbatches=2),
                                   StageCosts([0.5, 0.5], [1.5, 1.5]))
    assert len(parse(step_table(fractional))) == fractional.makespan / 0.5


def test_rejects_times_off_any_grid() -> None:
    timeline = pipeplan.simulate(pipeplan.build_schedule("gpipe", num_stages=2, num_microbatches=2),
                                 StageCosts([1.0, 2 ** 0.5]))
    with pytest.raises(InvalidInputError, match="multiples of one time unit"):
        step_table(timeline)


def test_rejects_times_off_the_given_grid() -> None:
    timeline = pipeplan.simulate(pipeplan.build_schedule("gpipe", num_stages=2, num_microbatches=2),
                                 StageCosts([1.0, 1.5]))
    with pytest.raises(InvalidInputError, match=r"grid of unit 1: F\(stage 1, mb 0\) on rank 1"):
        step_table(timeline, unit=1)
    assert parse(step_table(timeline))  # the inferred unit 0.5 fits


def test_rejects_a_grid_too_fine_to_print() -> None:
    timeline = pipeplan.simulate(pipeplan.build_schedule("gpipe", num_stages=2, num_microbatches=1),
                                 StageCosts([1.0, 1.000001]))
    too_fine = r"largest unit .* share is 1e-06, which would take 6e\+06 steps \(at most 100000"
    with pytest.raises(InvalidInputError, match=too_fine):
        step_table(timeline)
    with pytest.raises(InvalidInputError, match="would print 6000003 steps of unit 1e-06"):
        step_table(timeline, unit=1e-6)


@pytest.mark.parametrize("unit", [0, -1, float("nan"), "one"])
def test_rejects_bad_unit(unit: object) -> None:
    with pytest.raises(InvalidInputError, match="unit must be"):
        step_table(seed_case("gpipe"), unit=unit)  # type: ignore[arg-type]


@settings(max_examples=40, deadline=None)
@given(
    name=st.sampled_from(["gpipe", "1f1b"]),
    backward=st.sampled_from(["full", "split", "none"]),
    num_stages=st.integers(1, 4),
    num_microbatches=st.integers(1, 5),
    data=st.data(),
)
def test_integer_costs_every_action_fills_its_steps(
    name: str, backward: str, num_stages: int, num_microbatches: int, data: st.DataObject
) -> None:
    forward = data.draw(st.lists(st.integers(1, 3), min_size=num_stages, max_size=num_stages))
    latency = data.draw(st.sampled_from([0, 1, 2]))
    send_mode = data.draw(st.sampled_from(["eager", "rendezvous"]))
    timeline = pipeplan.simulate(pipeplan.build_schedule(name, num_stages=num_stages,
                                                         num_microbatches=num_microbatches, backward=backward),
                                 StageCosts(forward), CommModel(latency=latency, send_mode=send_mode))
    rows = parse(step_table(timeline, unit=1))
    occupied: dict[tuple[int, str, int], list[int]] = {}
    for step, entries in rows:
        assert len({stage for stage, _, _ in entries}) == len(entries)
        for entry in entries:
            occupied.setdefault(entry, []).append(step)
    assert len(occupied) == timeline.schedule.num_actions
    for record in timeline.records():
        kind, stage, mb = record.action
        # Steps are 1-based: the action [start, end) covers steps start+1 .. end.
        assert occupied[(stage + 1, kind, mb + 1)] == list(range(int(record.start) + 1, int(record.end) + 1))


def test_rejects_an_action_that_lasts_no_time() -> None:
    schedule = pipeplan.build_schedule("gpipe", num_stages=1, num_microbatches=1)
    measured = Timeline(schedule, [0.0, 1.0], [1.0, 1.0], source="measured")
    with pytest.raises(InvalidInputError, match=r"at least one unit \(1\); B\(stage 0, mb 0\) on rank 0 lasts 0"):
        step_table(measured)
