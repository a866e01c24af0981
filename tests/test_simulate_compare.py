"""``compare_schedules`` and ``simulate --schedules``: every schedule on the same ranks, the best marked."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pipeplan
from pipeplan import InvalidInputError, StageCosts
from pipeplan.calibration import Calibration
from pipeplan.layers import LayerProfile
from pipeplan.partition.schedule_compare import compare_schedules
from pipeplan.predict import predict
from pipeplan.schedules import SCHEDULES, schedule_info

FORWARD = [30.0, 10.0, 10.0, 20.0]


def test_every_row_runs_on_the_same_ranks() -> None:
    result = compare_schedules(StageCosts(FORWARD), num_microbatches=8, virtual_stages=3)
    assert [row.schedule for row in result.rows] == list(SCHEDULES)
    for row in result.rows:
        assert row.num_ranks == 4 and row.num_microbatches == 8
        assert row.num_stages == row.chunks_per_rank * 4
        if row.timeline is not None:
            assert row.timeline.num_ranks == 4  # the schedule that ran, not only the row's word for it
            assert row.timeline.schedule.num_stages == row.num_stages
    chunks = {row.schedule: row.chunks_per_rank for row in result.rows}
    assert chunks["interleaved"] == 3 and chunks["zb-v"] == 2 and chunks["1f1b"] == 1


def test_a_chunked_row_is_the_step_of_the_stages_split_on_the_same_ranks() -> None:
    # the trap: `simulate --schedule interleaved --forward 30,10,10,20` runs the four times as chunks on 2 ranks;
    # here each stage is split into 2 equal chunks in model order and the 8 chunks run on the 4 ranks
    result = compare_schedules(StageCosts(FORWARD), num_microbatches=8, schedules=["interleaved", "zb-v"])
    halves = StageCosts([t / 2 for t in FORWARD for _ in range(2)])
    for row in result.rows:
        built = pipeplan.build_schedule(row.schedule, num_stages=8, num_microbatches=8,
                                        **schedule_info(row.schedule).shape_options(2))
        assert built.num_ranks == 4
        assert row.step == pytest.approx(pipeplan.simulate(built, halves).makespan)
    on_two = pipeplan.build_schedule("interleaved", num_stages=4, num_microbatches=8, virtual_stages=2)
    assert on_two.num_ranks == 2  # what --schedule interleaved alone does with four stage times


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=40), min_size=2, max_size=4),
       st.integers(min_value=1, max_value=10))
def test_the_rows_marked_best_have_the_smallest_step(forward: list[int], micro: int) -> None:
    result = compare_schedules(StageCosts(forward), num_microbatches=micro,
                               schedules=["gpipe", "1f1b", "interleaved", "zb-h1", "zb-v"])
    steps = [row.step for row in result.rows if row.step is not None]
    least = min(steps)
    for row in result.rows:
        if row.step is not None:
            assert row.best == (row.step <= least * (1 + 1e-9)), (row.label, row.step, least)
        else:
            assert not row.best
    assert result.best is not None and result.best.step == least


def test_a_schedule_that_cannot_run_gets_a_row_with_its_reason() -> None:
    result = compare_schedules(StageCosts(FORWARD), num_microbatches=8, schedules=["1f1b", "zb-v", "dual-rate"],
                               options={"backward": "none"})
    rows = {row.schedule: row for row in result.rows}
    assert rows["1f1b"].step is not None and rows["1f1b"].reason is None and rows["1f1b"].best
    assert rows["zb-v"].step is None and not rows["zb-v"].best and "split" in str(rows["zb-v"].reason)
    assert rows["dual-rate"].step is None and "stale gradients" in str(rows["dual-rate"].reason)
    # per-boundary message sizes fit one stage per rank only
    comm = pipeplan.CommModel(latency=1.0, bandwidth=1e6, boundary_bytes=[1e6, 2e6, 3e6])
    split = compare_schedules(StageCosts(FORWARD), num_microbatches=8, schedules=["1f1b", "interleaved"], comm=comm)
    assert split.rows[0].step is not None
    assert split.rows[1].step is None and "per boundary" in str(split.rows[1].reason)


def test_costs_per_microbatch_run_one_stage_per_rank_only() -> None:
    costs = StageCosts.per_microbatch([[30.0, 15.0], [10.0, 10.0]])
    result = compare_schedules(costs, num_microbatches=2, schedules=["1f1b", "zb-v"])
    assert result.rows[0].step == pytest.approx(pipeplan.simulate(
        pipeplan.build_schedule("1f1b", num_stages=2, num_microbatches=2), costs).makespan)
    assert result.rows[1].step is None and "per microbatch" in str(result.rows[1].reason)


def test_a_profile_is_cut_for_each_layout_and_predicted_with_its_calibration() -> None:
    calibration = Calibration(latency=0.5, bandwidth=1e6, slowdown=(1.0, 1.3, 1.6, 1.9))
    profile = LayerProfile.uniform(12, forward=1.0).replaced(calibration=calibration)
    result = compare_schedules(profile, num_microbatches=8, num_ranks=4, schedules=["1f1b", "interleaved", "zb-v"],
                               messages=lambda sizes: calibration.comm_model(list(sizes) or 0.0),
                               slowdown=calibration.slowdown)
    for row in result.rows:
        assert row.layers_per_stage is not None and sum(row.layers_per_stage) == 12
        assert len(row.layers_per_stage) == row.num_stages == row.chunks_per_rank * 4
    one = result.rows[0]
    schedule = pipeplan.build_schedule("1f1b", num_stages=4, num_microbatches=8)
    assert one.step == pytest.approx(predict(profile, schedule, list(one.layers_per_stage or ())).makespan)
    # given layers per stage: chunked layouts cut each stage; too few layers for the chunks is a reason
    given_cut = compare_schedules(profile, num_microbatches=8, partition=[5, 3, 2, 2], virtual_stages=3,
                                  schedules=["1f1b", "interleaved"])
    assert given_cut.num_ranks == 4 and given_cut.rows[0].layers_per_stage == (5, 3, 2, 2)
    assert given_cut.rows[1].step is None and "stage 2 holds 2 layer(s)" in str(given_cut.rows[1].reason)


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(InvalidInputError, match="schedule must be one of"):
        compare_schedules(StageCosts(FORWARD), num_microbatches=8, schedules=["1f1b", "nope"])
    with pytest.raises(InvalidInputError, match="num_ranks is 2"):
        compare_schedules(StageCosts(FORWARD), num_microbatches=8, num_ranks=2)
    with pytest.raises(InvalidInputError, match="needs num_ranks"):
        compare_schedules(LayerProfile.uniform(8, forward=1.0), num_microbatches=8)


def test_cli_table_fits_80_columns_and_marks_the_best(run_cli, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    status, out, err = run_cli("simulate", "--forward", "30,10,10,20", "-m", "8", "--schedules", "all")
    assert status == 0, err
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert "4 ranks, 8 microbatches" in lines[0]
    best = [line for line in lines if line.rstrip().endswith("*")]
    assert len(best) == 1 and best[0].startswith("interleaved v=2")
    assert "dual-rate did not run:" in out and "bubble ratio: the share of all ranks' time" in out


def test_cli_json_rows(run_cli) -> None:
    status, out, err = run_cli("simulate", "--forward", "30,10,10,20", "-m", "8", "--schedules",
                               "1f1b,zb-v,interleaved", "--virtual-stages", "3", "--forward-only", "--json")
    assert status == 0, err
    payload = json.loads(out)
    assert payload["num_ranks"] == 4 and payload["num_microbatches"] == 8
    rows = {row["schedule"]: row for row in payload["rows"]}
    assert set(rows) == {"1f1b", "zb-v", "interleaved"}
    assert rows["interleaved"]["virtual_stages"] == 3 and rows["interleaved"]["num_stages"] == 12
    assert rows["zb-v"]["step"] is None and rows["zb-v"]["reason"]
    ran = [row for row in payload["rows"] if row["step"] is not None]
    assert payload["best"] == min(ran, key=lambda row: row["step"])["label"]
    assert all(row["num_ranks"] == 4 for row in payload["rows"])
    assert {"bubble_ratio", "peak_inflight", "peak_activations", "best", "reason"} <= set(rows["1f1b"])


@pytest.mark.parametrize("argv, line", [
    ("--schedules 1f1b,nope", "--schedules must be 'all' or names from"),
    ("--schedules 1f1b,1f1b", "names a schedule twice"),
    ("--schedules all --schedule zb-h1", "--schedule does not apply with --schedules"),
    ("--schedules all --plot x.png", "--plot does not apply with --schedules"),
    ("--schedules all --iterations 3", "--iterations does not apply with --schedules"),
    ("--schedules all --stages 2", "--partition and --stages apply only with --profile"),
    ("--schedules 1f1b,zb-v --virtual-stages 3", "--virtual-stages does not apply to --schedules 1f1b,zb-v"),
    ("--schedules 1f1b,zb-h1 --memory-limit 2", "--memory-limit does not apply to --schedules 1f1b,zb-h1"),
    ("--schedules all --width 60", "--width does not apply with --schedules"),
])
def test_cli_refusals_are_one_line(run_cli, argv: str, line: str) -> None:
    status, out, err = run_cli("simulate", "--forward", "30,10,10,20", *argv.split())
    assert status == 2 and out == "" and line in err and err.count("\n") == 1


def test_cli_profile_rows_share_the_ranks(run_cli, tmp_path) -> None:
    path = tmp_path / "prof.json"
    LayerProfile.uniform(12, forward=1.0).to_file(str(path))
    status, out, err = run_cli("simulate", "--profile", str(path), "--stages", "3", "--schedules", "all", "--json")
    assert status == 0, err
    payload = json.loads(out)
    assert payload["num_ranks"] == 3 and payload["num_microbatches"] == 6
    for row in payload["rows"]:
        assert row["num_ranks"] == 3
        if row["step"] is not None:
            assert sum(row["layers_per_stage"]) == 12 and len(row["layers_per_stage"]) == row["num_stages"]


def test_single_schedule_with_chunks_says_how_many_ranks(run_cli) -> None:
    status, _out, err = run_cli("simulate", "--forward", "30,10,10,20", "-m", "8", "--schedule", "interleaved")
    assert status == 0
    assert "ran as 2 chunks on each of 2 ranks" in err and "--schedules 1f1b,interleaved" in err


def test_cli_preset_rows_share_the_ranks_and_count_bytes(run_cli) -> None:
    status, out, err = run_cli("simulate", "--preset", "gpt-1.5b", "--gpu", "a100-80g", "--micro-batch-size", "6",
                               "--stages", "4", "-m", "8", "--schedules", "1f1b,zb-v,interleaved", "--json")
    assert status == 0, err
    payload = json.loads(out)
    assert payload["activation_unit"] == "bytes"
    for row in payload["rows"]:
        assert row["num_ranks"] == 4 and row["step"] > 0 and row["peak_activations"] > 1e6  # bytes, not counts
        assert len(row["layers_per_stage"]) == row["num_stages"]
