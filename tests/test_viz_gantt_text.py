"""Tests of pipeplan.viz.gantt_text: the plain-text Gantt chart."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pipeplan
from pipeplan import Action, CommModel, InvalidInputError, Schedule, StageCosts, Timeline
from pipeplan.timeline import IdleCause
from pipeplan.viz import text_gantt
from pipeplan.viz.gantt_text import ELISION, IDLE_CHARS

from _builders import chunked_gpipe, simulated_timelines


def with_overhead(timeline: Timeline, gap: float) -> Timeline:
    """A 'measured' copy of ``timeline``: a rank's k-th action (1-based) shifted by k·``gap`` (overhead gaps)."""
    shift = np.concatenate([np.arange(1, len(order) + 1) * gap for order in timeline.schedule.orders])
    return Timeline(timeline.schedule, timeline.start + shift, timeline.end + shift,
                    timeline.blocked_until + shift, source="measured")


@st.composite
def timelines(draw: st.DrawFn) -> Timeline:
    """Simulated timelines, sometimes turned into 'measured' ones with overhead gaps."""
    timeline = draw(simulated_timelines())
    if draw(st.booleans()):
        timeline = with_overhead(timeline, draw(st.sampled_from([0.05, 1.0])))
    return timeline


def rank_lines(chart: str, num_ranks: int) -> list[str]:
    return chart.splitlines()[:num_ranks]


def cells_of(line: str) -> str:
    return line[line.index("|") + 1 : -1]


def test_gpipe_unit_costs_worked_example() -> None:
    # GPipe, P = 3, m = 4, F = B = 1 (lesson 002's M = 3, N = 4): rank 0 runs F at
    # t = 0..4, waits for the gradient of microbatch 0 until t = 8 (it comes back
    # through stages 2 and 1), then runs B until 12 = 2·(m + P − 1). Two columns per unit.
    timeline = pipeplan.simulate(pipeplan.build_schedule("gpipe", num_stages=3, num_microbatches=4),
                                 StageCosts.uniform(3, forward=1, backward=1))
    lines = text_gantt(timeline, width=24, legend=False).splitlines()
    assert lines[0] == "rank 0 |F0F1F2F3<<<<<<<<B0B1B2B3|"
    assert lines[1] == "rank 1 |..F0F1F2F3<<<<B0B1B2B3__|"
    assert lines[2] == "rank 2 |....F0F1F2F3B0B1B2B3____|"
    assert lines[3].split() == ["0", "5", "10"]  # axis: ticks every 5 units = 10 columns
    assert len(lines) == 4


def test_label_falls_back_to_letter_and_continuation_is_blank() -> None:
    # One rank, F = 3, B = 6, m = 1: with 3 columns per unit F0 gets 9 columns, B0 18.
    timeline = pipeplan.simulate(pipeplan.build_schedule("gpipe", num_stages=1, num_microbatches=1),
                                 StageCosts([3.0], [6.0]))
    line = text_gantt(timeline, width=27, legend=False).splitlines()[0]
    assert cells_of(line) == "F0" + " " * 7 + "B0" + " " * 16
    # With one column per 4.5 units, F0 and B0 get one column each: only their letters.
    assert cells_of(text_gantt(timeline, width=2, legend=False).splitlines()[0]) == "FB"


def test_every_idle_cause_gets_its_character() -> None:
    # Rendezvous sends with latency block; unequal stages starve both ways.
    timeline = pipeplan.simulate(pipeplan.build_schedule("1f1b", num_stages=4, num_microbatches=8),
                                 StageCosts([30, 10, 10, 20]), CommModel(latency=3, send_mode="rendezvous"))
    measured = with_overhead(timeline, 5.0)
    chart = text_gantt(measured, width=400, legend=False)
    causes = {interval.cause for interval in measured.idle_intervals()}
    assert causes == set(IdleCause)
    for cause in causes:
        assert IDLE_CHARS[cause] in chart, cause
    assert len(set(IDLE_CHARS.values())) == len(IdleCause)


def test_chunks_use_upper_and_lower_case_and_legend_names_stages() -> None:
    schedule = chunked_gpipe([0, 1, 1, 0], 2, "split")
    timeline = pipeplan.simulate(schedule, StageCosts([1, 1, 1, 1]))
    chart = text_gantt(timeline, width=200)
    rank0 = cells_of(chart.splitlines()[0])
    # Rank 0 holds stages 0 (upper case) and 3 (lower case).
    assert "F0" in rank0 and "f0" in rank0 and "i1" in rank0 and "w1" in rank0 and "I1" in rank0
    assert "rank 0: stage 0 upper case; stage 3 lower case" in chart
    assert "rank 1: stage 1 upper case; stage 2 lower case" in chart


def test_action_shorter_than_a_column_still_shows_its_letter() -> None:
    # Stage 1's forward lasts 0.01 of a 100-unit makespan: far less than one of 20 columns.
    timeline = pipeplan.simulate(pipeplan.build_schedule("gpipe", num_stages=2, num_microbatches=1,
                                                         backward="none"), StageCosts([99.99, 0.01]))
    line = cells_of(text_gantt(timeline, width=20, legend=False).splitlines()[1])
    assert line.count("F") == 1


def test_legend_lists_scale_and_idle_characters() -> None:
    timeline = pipeplan.simulate(pipeplan.build_schedule("1f1b", num_stages=2, num_microbatches=2),
                                 StageCosts([2, 2]))
    chart = text_gantt(timeline, width=40)
    assert f"makespan {timeline.makespan:g}" in chart
    assert "> starved upstream" in chart and "# blocked" in chart
    assert len(text_gantt(timeline, legend=False).splitlines()) == timeline.num_ranks + 1
    assert "stages: rank r holds stage r" in chart


def test_legend_names_an_unusual_placement() -> None:
    # Stage 0 on rank 1, stage 1 on rank 0, and an idle rank 2 without stages.
    schedule = Schedule([[Action("F", 1, 0), Action("B", 1, 0)], [Action("F", 0, 0), Action("B", 0, 0)], []],
                        [1, 0], 1)
    timeline = pipeplan.simulate(schedule, StageCosts([1, 1]))
    chart = text_gantt(timeline, width=20)
    assert "stages: rank 0 = stage 1, rank 1 = stage 0, rank 2 = stage -" in chart
    assert chart.splitlines()[2] == "rank 2 |" + "_" * 20 + "|"  # idle all step: drain


@pytest.mark.parametrize("width", [0, -3, 2.5, "wide", True])
def test_rejects_bad_width(width: object) -> None:
    timeline = pipeplan.simulate(pipeplan.build_schedule("gpipe", num_stages=2, num_microbatches=2),
                                 StageCosts([1, 1]))
    with pytest.raises(InvalidInputError, match="width"):
        text_gantt(timeline, width=width)  # type: ignore[arg-type]


@settings(max_examples=40, deadline=None)
@given(timeline=timelines(), width=st.integers(1, 160))
def test_rank_lines_have_equal_width_and_valid_cells(timeline: Timeline, width: int) -> None:
    chart = text_gantt(timeline, width=width, elide=False)
    lines = rank_lines(chart, timeline.num_ranks)
    assert len({len(line) for line in lines}) == 1
    allowed = set(IDLE_CHARS.values()) | set("FBIWfbiw0123456789 ")
    scale = width / timeline.makespan
    for rank, line in enumerate(lines):
        assert line.startswith(f"rank {rank}")
        cells = cells_of(line)
        assert len(cells) == width
        assert set(cells) <= allowed
        # An idle character sits only where an idle interval of that cause covers the column.
        for col, char in enumerate(cells):
            if char in IDLE_CHARS.values():
                cause = next(c for c, ch in IDLE_CHARS.items() if ch == char)
                assert any(
                    iv.cause == cause and round(iv.start * scale) <= col < round(iv.end * scale)
                    for iv in timeline.idle_intervals(rank)
                )
        # Every action whose label fits shows its label where it starts.
        case = {s: i % 2 == 0 for i, s in enumerate(timeline.schedule.stages_of(rank))}
        for record in timeline.records(rank):
            first, last = round(record.start * scale), round(record.end * scale)
            letter = record.action.kind if case[record.action.stage] else record.action.kind.lower()
            label = f"{letter}{record.action.microbatch}"
            if last - first >= len(label):
                assert cells[first : first + len(label)] == label
            elif last > first:
                assert cells[first] == letter


# ------------------------------------------------------------------ elision (issue 24 item 4)
def test_many_microbatches_per_column_draw_start_middle_and_end() -> None:
    # m = 128 on 16 ranks at 100 columns: one column of the whole step would hold ~3 actions.
    timeline = pipeplan.simulate(pipeplan.build_schedule("1f1b", num_stages=16, num_microbatches=128),
                                 StageCosts.uniform(16, forward=1))
    chart = text_gantt(timeline, width=100)
    lines = chart.splitlines()
    ranks = rank_lines(chart, 16)
    assert {len(cells_of(line)) for line in ranks} == {100}
    assert all(cells_of(line).count(ELISION) == 2 for line in ranks)
    start, middle, end = cells_of(ranks[0]).split(ELISION)
    assert start.startswith("F0 F1 F2 ")  # the warm-up, labelled
    assert "B" in middle and "F" in middle  # the steady state alternates
    assert end.rstrip().endswith("B127")  # the cool-down: rank 0 ends with the last backward
    assert cells_of(ranks[15]).split(ELISION)[2].endswith("_" * 10)  # the last rank drains
    assert "elided:" in chart and "ms (" in chart
    # The marks leave out exactly the time between the windows, which the legend names.
    elided = next(line for line in lines if line.startswith("elided:"))
    numbers = [float(n.replace(",", "")) for n in re.findall(r"([0-9][0-9,.]*) ms \(", elided)]
    assert len(numbers) == 2 and 0 < sum(numbers) < timeline.makespan
    # elide=False keeps the one-scale chart.
    assert ELISION not in text_gantt(timeline, width=100, elide=False)


def test_small_charts_are_not_elided() -> None:
    timeline = pipeplan.simulate(pipeplan.build_schedule("1f1b", num_stages=4, num_microbatches=8),
                                 StageCosts(forward=[30, 10, 10, 20]))
    assert text_gantt(timeline, width=60) == text_gantt(timeline, width=60, elide=False)
    assert "elided" not in text_gantt(timeline, width=60)


@settings(max_examples=30, deadline=None)
@given(timeline=timelines(), width=st.integers(1, 160))
def test_elided_charts_keep_equal_widths_and_valid_cells(timeline: Timeline, width: int) -> None:
    chart = text_gantt(timeline, width=width)
    lines = rank_lines(chart, timeline.num_ranks)
    allowed = set(IDLE_CHARS.values()) | set("FBIWfbiw0123456789 …")
    for line in lines:
        cells = cells_of(line)
        assert len(cells) == width and set(cells) <= allowed
    marks = {cells_of(line).count(ELISION) for line in lines}
    assert marks in ({0}, {2})


def test_an_elided_chart_names_the_callers_way_to_the_whole_step():
    # newcomer walk: plan printed "a wider chart (--width)" though plan has no --width
    timeline = pipeplan.simulate(pipeplan.build_schedule("1f1b", num_stages=4, num_microbatches=128),
                                 pipeplan.StageCosts([1.0] * 4))
    assert "a wider chart (--width) or --plot shows the whole step" in text_gantt(timeline, width=60)
    chart = text_gantt(timeline, width=60, wider="--plot")
    assert "; --plot shows the whole step" in chart and "--width" not in chart
