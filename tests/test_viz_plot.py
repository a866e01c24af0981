"""Tests of pipeplan.viz.plot: the matplotlib Gantt and memory figure."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import pipeplan
from pipeplan import Action, CommModel, InvalidInputError, PipeplanError, Schedule, StageCosts, Timeline
from pipeplan.viz import plot_timeline
from pipeplan.viz.plot import KIND_COLORS, _draw_gantt, _timeline_figure, gantt_windows, plot_plan

pytest.importorskip("matplotlib")


def v_schedule(num_microbatches: int) -> Schedule:
    """Two ranks, four stages placed 0, 1, 1, 0 (a V), split backward, GPipe-like order."""
    placement = [0, 1, 1, 0]
    orders: list[list[Action]] = [[], []]
    for rank in (0, 1):
        stages = [s for s, r in enumerate(placement) if r == rank]
        for stage in stages:
            orders[rank] += [Action("F", stage, mb) for mb in range(num_microbatches)]
        for stage in reversed(stages):
            for mb in range(num_microbatches):
                orders[rank] += [Action("I", stage, mb), Action("W", stage, mb)]
    return Schedule(orders, placement, num_microbatches, name="v")


def one_f_one_b() -> Timeline:
    return pipeplan.simulate(pipeplan.build_schedule("1f1b", num_stages=4, num_microbatches=8),
                             StageCosts([30, 10, 10, 20]), CommModel(latency=3, send_mode="rendezvous"))


def bars(axes) -> dict[str, list[tuple[float, float]]]:  # noqa: ANN001 - a matplotlib Axes
    """Collection label -> sorted (start, width) of its rectangles."""
    out = {}
    for collection in axes.collections:
        spans = []
        for path in collection.get_paths():
            xs = path.vertices[:, 0]
            spans.append((float(xs.min()), float(xs.max() - xs.min())))
        out[collection.get_label()] = sorted(spans)
    return out


def test_gantt_bars_match_the_timeline() -> None:
    timeline = one_f_one_b()
    figure = _timeline_figure(timeline, memory=True, title=None)
    gantt, memory = figure.axes
    drawn = bars(gantt)
    for rank in range(timeline.num_ranks):
        for kind in "FB":
            expected = sorted((r.start, r.end - r.start) for r in timeline.records(rank) if r.action.kind == kind)
            np.testing.assert_allclose(drawn[f"_rank{rank}:{kind}:0"], expected)
        for cause in {iv.cause for iv in timeline.idle_intervals(rank)}:
            intervals = [iv for iv in timeline.idle_intervals(rank) if iv.cause == cause]
            expected = sorted((iv.start, iv.end - iv.start) for iv in intervals)
            np.testing.assert_allclose(drawn[f"_rank{rank}:idle:{cause.value}"], expected)
    # F and B have their own colours.
    face = {label: tuple(c.get_facecolor()[0][:3]) for label, c in zip(drawn, gantt.collections)}
    assert face["_rank0:F:0"] != face["_rank0:B:0"]
    # Microbatch numbers on the bars (every bar is wide enough at this scale).
    labels = sorted(text.get_text() for text in gantt.texts)
    assert labels == sorted(str(r.action.microbatch) for r in timeline.records())
    legend = [text.get_text() for text in gantt.get_legend().get_texts()]
    assert legend[:2] == ["forward", "backward"] and "idle: blocked" in legend
    # One memory step line per rank, following Timeline.memory up to the makespan.
    assert len(memory.lines) == timeline.num_ranks
    for rank, line in enumerate(memory.lines):
        trace = timeline.memory(rank)
        np.testing.assert_allclose(line.get_xdata(), [*trace.times, timeline.makespan])
        np.testing.assert_allclose(line.get_ydata(), [*trace.inflight, trace.inflight[-1]])
    assert memory.get_ylabel() == "in-flight\nmicrobatches"
    assert "1f1b (simulated)" in figure.get_suptitle()


def test_chunks_split_backward_and_byte_axis() -> None:
    schedule = v_schedule(3)
    timeline = pipeplan.simulate(schedule, StageCosts([1, 2, 1.5, 1], activation_bytes=[2**20] * 4))
    figure = _timeline_figure(timeline, memory=True, title="custom")
    gantt, memory = figure.axes
    drawn = bars(gantt)
    # Rank 0 holds stages 0 (first chunk) and 3 (second chunk, drawn lighter).
    assert len(drawn["_rank0:W:0"]) == 3 and len(drawn["_rank0:W:1"]) == 3
    colors = {c.get_label(): tuple(c.get_facecolor()[0][:3]) for c in gantt.collections}
    assert colors["_rank0:F:0"] != colors["_rank0:F:1"]
    green = tuple(int(KIND_COLORS["W"][i : i + 2], 16) / 255 for i in (1, 3, 5))
    assert colors["_rank0:W:0"] == pytest.approx(green)
    legend = [text.get_text() for text in gantt.get_legend().get_texts()]
    assert legend[:3] == ["forward", "input grad", "weight grad"] and "a rank's 2nd, 4th, ... chunk" in legend
    # Peak 6 microbatches x 1 MiB on rank 0: the axis is in MiB.
    assert memory.get_ylabel() == "in-flight\nactivations (MiB)"
    np.testing.assert_allclose(memory.lines[0].get_ydata()[:-1], timeline.memory(0).bytes / 2**20)
    assert max(memory.lines[0].get_ydata()) == 6
    assert figure.get_suptitle() == "custom"


def test_memory_false_draws_only_the_gantt() -> None:
    figure = _timeline_figure(one_f_one_b(), memory=False, title=None)
    assert len(figure.axes) == 1


def test_forward_only_memory_panel_says_nothing_is_held() -> None:
    timeline = pipeplan.simulate(pipeplan.build_schedule("gpipe", num_stages=3, num_microbatches=4,
                                                         backward="none"), StageCosts([3, 1, 2]))
    memory = _timeline_figure(timeline, memory=True, title=None).axes[1]
    assert [text.get_text() for text in memory.texts] == ["forward only: no activations are kept for a backward"]
    assert memory.get_ylim() == (0, 1)


def test_hatches_only_while_they_are_cheap() -> None:
    small = _timeline_figure(one_f_one_b(), memory=False, title=None).axes[0]
    assert {c.get_hatch() for c in small.collections if c.get_label().endswith(":idle:blocked")} == {"////"}
    # 16 ranks x 64 microbatches of blocking sends: far more than 400 blocked intervals.
    big = pipeplan.simulate(pipeplan.build_schedule("1f1b", num_stages=16, num_microbatches=64),
                            StageCosts.uniform(16), CommModel(latency=1, send_mode="rendezvous"))
    assert sum(iv.cause.value == "blocked" for iv in big.idle_intervals()) > 400
    *gantts, memory = _timeline_figure(big, memory=True, title=None).axes
    assert len(gantts) == 2  # 64 microbatches: the step's start and end (test_many_microbatches_...)
    assert all({c.get_hatch() for c in gantt.collections} == {None} for gantt in gantts)
    # 16 memory lines, no two of the same colour.
    assert len({tuple(line.get_color()) for line in memory.lines}) == 16


def test_narrow_bars_get_no_number() -> None:
    # 200 microbatches on one rank drawn whole: bars far narrower than a digit.
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    timeline = pipeplan.simulate(pipeplan.build_schedule("gpipe", num_stages=1, num_microbatches=200),
                                 StageCosts([1.0]))
    gantt = Figure().subplots()
    _draw_gantt(gantt, timeline, timeline.makespan, Patch=Patch)
    assert len(gantt.texts) == 0


def test_many_microbatches_draw_the_start_and_the_end_not_a_barcode() -> None:
    # issue 24 item 4: a 128-microbatch step drawn whole is a barcode
    timeline = pipeplan.simulate(pipeplan.build_schedule("1f1b", num_stages=4, num_microbatches=128),
                                 StageCosts([3, 3, 3, 3]))
    (start, first_end), (last_start, end) = gantt_windows(timeline)
    # (ranks − 1 + 4) microbatches' share of the step, c = makespan / (m + ranks − 1), at each end
    share = 7 * timeline.makespan / (128 + 3)
    assert start == 0 and end == timeline.makespan
    assert first_end == pytest.approx(share) and last_start == pytest.approx(timeline.makespan - share)
    figure = _timeline_figure(timeline, memory=True, title=None)
    left, right, memory = figure.axes
    assert left.get_xlim() == pytest.approx((0, share)) and right.get_xlim() == pytest.approx((last_start, end))
    assert "not drawn" in right.get_title(loc="left") and memory.get_xlim() == pytest.approx((0, end))
    # the windows are wide enough to number their bars: microbatch 0 on the left, 127 on the right
    assert "0" in {t.get_text() for t in left.texts} and "127" in {t.get_text() for t in right.texts}
    # few microbatches: one window, the whole step
    assert gantt_windows(one_f_one_b()) == [(0.0, one_f_one_b().makespan)]


@pytest.mark.parametrize("name", ["step.png", "step.svg"])
def test_writes_png_and_svg(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    plot_timeline(one_f_one_b(), path)
    data = path.read_bytes()
    if name.endswith(".png"):
        assert data[:8] == b"\x89PNG\r\n\x1a\n"
    else:
        assert b"<svg" in data[:1000]


def test_rejects_unknown_extension_and_unwritable_path(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match=r"path must end in \.png, \.svg, \.pdf.*step\.jpg"):
        plot_timeline(one_f_one_b(), tmp_path / "step.jpg")
    with pytest.raises(InvalidInputError, match="cannot write the plot"):
        plot_timeline(one_f_one_b(), tmp_path / "missing" / "step.png")


def test_missing_matplotlib_says_how_to_install(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # makes "import matplotlib..." raise ImportError
    with pytest.raises(PipeplanError, match="pip install matplotlib"):
        plot_timeline(one_f_one_b(), tmp_path / "step.png")


def test_importing_pipeplan_viz_does_not_import_matplotlib() -> None:
    code = "import sys, pipeplan, pipeplan.viz; assert 'matplotlib' not in sys.modules, 'imported'"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_plot_plan_draws_total_memory_against_capacity_and_the_step_parts(tmp_path: Path) -> None:
    # issue 24 item 4: the PNG showed activations only, and makespan 986.4 ms where the table said 991.66 ms
    from pipeplan.planner import Cluster, SearchOptions, search
    from _planner_models import gpt_workload

    result = search(gpt_workload(num_layers=8, hidden=512, heads=8, seq=512), Cluster.of("h100-80g", 4), 16,
                    SearchOptions(pp=4, dp_modes=["ddp"], top=1))
    plan = result.best
    path = tmp_path / "plan.png"
    plot_plan(plan, path, title="gpt")
    assert path.stat().st_size > 1000
    from pipeplan.viz.plot import step_parts

    figure = _timeline_figure(plan.timeline, memory=True, title=step_parts(plan),
                              static_bytes=[m.parameters + m.gradients + m.optimizer for m in plan.memory],
                              capacity=plan.memory_capacity)
    memory = figure.axes[-1]
    peaks = [max(line.get_ydata()) for line in memory.lines if line.get_label().startswith("rank")]
    assert peaks == pytest.approx([total / 2**30 for total in plan.peak_memory], rel=1e-9)  # the table's total
    capacity = [line for line in memory.lines if line.get_label().startswith("capacity")]
    assert capacity and capacity[0].get_ydata()[0] == pytest.approx(plan.memory_capacity / 2**30)
    title = step_parts(plan)
    assert title.startswith("pipeline makespan ") and title.endswith("ms (the table's)")
    assert "optimizer step" in title and plan.step_time > plan.pipeline_time
