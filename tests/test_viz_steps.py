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
    """``[(t, [(stage, kind, microbatch), ...]), ...]`` with everything 0-based, checking the syntax."""
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
                assert entry.group(1) == entry.group(3)  # "S1: F1(0)": the subscript is the stage
                entries.append((int(entry.group(1)), entry.group(2), int(entry.group(4))))
        rows.append((step, entries))
    return rows


def seed_case(name: str) -> Timeline:
    # Seed 002 (/work/shared/seeds/002_58c429019bdfa765.txt): 3 stages (the seed's M), 4
    # microbatches (the seed's N), T_F ≈ T_B (unit costs). The seed counts from 1, the table from 0.
    return pipeplan.simulate(pipeplan.build_schedule(name, num_stages=3, num_microbatches=4),
                             StageCosts.uniform(3, forward=1, backward=1))


@pytest.mark.parametrize("name", ["gpipe", "1f1b"])
def test_seed_002_m3_n4(name: str) -> None:
    rows = parse(step_table(seed_case(name)))
    # The seed's fill phase F1(1) → F2(1) → F3(1) is F0(0) → F1(0) → F2(0): stage 0 alone at T=0.
    assert rows[0] == (0, [(0, "F", 0)])
    assert (1, "F", 0) in rows[1][1] and (2, "F", 0) in rows[2][1]
    # T_1F1B ≈ N·2 + (2M − 2) = 12 steps for the seed's M = 3 stages, N = 4 microbatches;
    # GPipe with F = B also takes 2·(N + M − 1) = 12.
    assert [step for step, _ in rows] == list(range(12))
    # Every action appears exactly once, and each stage runs at most one action a step.
    counted = Counter(entry for _, entries in rows for entry in entries)
    assert counted == Counter((s, k, mb) for k in "FB" for s in range(3) for mb in range(4))
    for _, entries in rows:
        stages = [stage for stage, _, _ in entries]
        assert stages == sorted(set(stages))
    # The drain ends with stage 0's backward of the last microbatch.
    assert rows[-1] == (11, [(0, "B", 3)])


def test_seed_002_1f1b_interleaves_in_steady_state() -> None:
    rows = dict(parse(step_table(seed_case("1f1b"))))
    # The last stage runs B2(0) right after F2(0) (T=3), and the middle stage alternates F and B.
    assert rows[3] == [(2, "B", 0)]
    middle = [kind for step in sorted(rows) for stage, kind, _ in rows[step] if stage == 1]
    assert middle == ["F", "F", "B", "F", "B", "F", "B", "B"]
    # 1F1B keeps fewer forwards ahead than GPipe: stage 0 starts its first B at T=5, not T=8.
    first_b = min(step for step, entries in rows.items() if (0, "B", 0) in entries)
    assert first_b == 5


def test_idle_steps_and_longer_actions() -> None:
    # F = 1, B = 2, latency 1 between ranks: a B fills two steps, a gap reads "idle".
    timeline = pipeplan.simulate(pipeplan.build_schedule("gpipe", num_stages=2, num_microbatches=1),
                                 StageCosts([1, 1]), CommModel(latency=1.0))
    lines = step_table(timeline).splitlines()
    assert lines == [
        "T=0: S0: F0(0)",
        "T=1: idle",
        "T=2: S1: F1(0)",
        "T=3: S1: B1(0)",
        "T=4: S1: B1(0)",
        "T=5: idle",
        "T=6: S0: B0(0)",
        "T=7: S0: B0(0)",
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
        # Steps are 0-based like the stages and microbatches: the action [start, end) covers steps start .. end-1.
        assert occupied[(stage, kind, mb)] == list(range(int(record.start), int(record.end)))


def test_rejects_an_action_that_lasts_no_time() -> None:
    schedule = pipeplan.build_schedule("gpipe", num_stages=1, num_microbatches=1)
    measured = Timeline(schedule, [0.0, 1.0], [1.0, 1.0], source="measured")
    with pytest.raises(InvalidInputError, match=r"at least one unit \(1\); B\(stage 0, mb 0\) on rank 0 lasts 0"):
        step_table(measured)
