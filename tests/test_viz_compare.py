"""Predicted over measured: the overlay plot and the two-group Perfetto trace."""

from __future__ import annotations

import json

import numpy as np
import pytest

import pipeplan
from pipeplan.errors import InvalidInputError
from pipeplan.timeline import Timeline
from pipeplan.viz import comparison_trace, plot_comparison, write_trace

pytest.importorskip("matplotlib")


def pair() -> tuple[Timeline, Timeline]:
    schedule = pipeplan.build_schedule("zb-h1", num_stages=2, num_microbatches=3)
    predicted = pipeplan.simulate(schedule, pipeplan.StageCosts([2.0, 1.0], activation_bytes=[1e6, 2e6]))
    slower = pipeplan.simulate(schedule, pipeplan.StageCosts([2.5, 1.5], activation_bytes=[1e6, 2e6]))
    measured = Timeline(schedule, slower.start, slower.end, activation_bytes=[1e6, 2e6], source="measured")
    return predicted, measured


def test_both_gantts_and_memories_share_one_time_axis():
    from pipeplan.viz.compare_plot import comparison_figure

    predicted, measured = pair()
    figure = comparison_figure(predicted, measured)
    axes = figure.axes
    assert len(axes) == 4
    for panel in axes:
        assert panel.get_xlim() == (0.0, pytest.approx(measured.makespan))
    for panel, timeline in zip(axes[:2], (predicted, measured)):
        spans = {}
        for collection in panel.collections:
            label = collection.get_label()
            if ":idle:" in label:
                continue
            spans[label] = [tuple(path.vertices[0]) for path in collection.get_paths()]
        starts = sorted(x for values in spans.values() for x, _y in values)
        np.testing.assert_allclose(starts, sorted(timeline.start))
    assert "predicted" in axes[0].get_title(loc="left") and "measured" in axes[1].get_title(loc="left")
    assert len(axes[2].get_lines()) == 2 and len(axes[3].get_lines()) == 2  # one memory line per rank


def test_plot_file_and_errors(tmp_path):
    predicted, measured = pair()
    plot_comparison(predicted, measured, tmp_path / "cmp.png")
    assert (tmp_path / "cmp.png").read_bytes().startswith(b"\x89PNG")
    with pytest.raises(InvalidInputError, match="must end in"):
        plot_comparison(predicted, measured, tmp_path / "cmp.jpg")
    other = pipeplan.simulate(pipeplan.build_schedule("1f1b", num_stages=3, num_microbatches=3),
                              pipeplan.StageCosts([1, 1, 1]))
    with pytest.raises(InvalidInputError, match="different schedules"):
        plot_comparison(predicted, other, tmp_path / "cmp.png")


def test_trace_holds_two_process_groups(tmp_path):
    predicted, measured = pair()
    trace = comparison_trace(predicted, measured)
    names = {e["pid"]: e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "process_name"}
    assert names == {0: "predicted", 1: "measured"}
    for group, timeline in ((0, predicted), (1, measured)):
        actions = [e for e in trace["traceEvents"] if e["ph"] == "X" and e["pid"] == group and e["cat"] != "idle"]
        assert len(actions) == timeline.schedule.num_actions
        assert sorted(e["ts"] for e in actions) == pytest.approx(sorted(timeline.start * 1000.0))
        assert {e["tid"] for e in actions} == {0, 2}  # rank r's compute thread is 2 r
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"}
    assert threads[(1, 3)] == "rank 1 idle"
    assert trace["otherData"]["measured"]["makespan"] == measured.makespan
    write_trace(predicted, tmp_path / "cmp.json", measured=measured)
    assert json.loads((tmp_path / "cmp.json").read_text()) == json.loads(json.dumps(trace))
