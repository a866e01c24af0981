"""``pipeplan simulate|run --schedule dual-rate``, ``pipeplan dual-rate`` and their one-line errors."""

from __future__ import annotations

import json
import re

import pytest

from pipeplan import StageCosts, build_schedule, simulate
from pipeplan.analytic import dual_rate_period


SIMULATE = ("simulate", "--schedule", "dual-rate", "--forward", "30,4", "--update", "1,0.5", "-m", "64")


def test_simulate_reports_both_rates_and_the_closed_form(run_cli):
    status, out, _ = run_cli(*SIMULATE, "--rate-ratio", "4", "--width", "80")
    assert status == 0
    period = dual_rate_period([(30, 60, 1)], [(4, 8, 0.5)], rate_ratio=4)
    match = re.search(r"steady state: ([0-9.]+) ms per frame simulated, closed form ([0-9.]+) ms", out)
    assert match and float(match.group(1)) == pytest.approx(period) and float(match.group(2)) == pytest.approx(period)
    assert "Δt of each frame's gradient: vision stage 0: 0, 1 ×15" in out
    assert "U update" in out  # the Gantt's legend knows the update kind


def test_simulate_json_carries_the_dual_rate_metrics(run_cli):
    status, out, _ = run_cli(*SIMULATE, "--rate-ratio", "2", "--max-staleness", "0", "--json")
    assert status == 0
    payload = json.loads(out)
    schedule = build_schedule("dual-rate", num_stages=2, num_microbatches=64, rate_ratio=2, max_staleness=0)
    expected = simulate(schedule, StageCosts([30, 4], update=[1, 0.5]))
    assert payload["makespan"] == pytest.approx(expected.makespan)
    assert payload["dual_rate"]["staleness"] == {"0": [0] * 32}
    assert {a["kind"] for a in payload["actions"]} == {"F", "B", "U"}


@pytest.mark.parametrize(
    "extra, message",
    [
        (("--rate-ratio", "0"), "--rate-ratio must be >= 1, got 0"),
        (("--rate-ratio", "2.5"), "--rate-ratio must be an integer >= 1, got 2.5"),
        (("--rate-ratio", "3"), "-m = 64 must be a multiple of --rate-ratio = 3"),
        (("--max-staleness", "2", "--buffer-frames", "2"), "--buffer-frames = 2 cannot hold --max-staleness = 2"),
        (("--vision-stages", "2"), "--vision-stages must be < the stages = 2"),
    ],
)
def test_simulate_bad_input_is_one_line(run_cli, extra, message):
    status, out, err = run_cli(*SIMULATE, *extra)
    assert status == 2 and out == ""
    assert err.count("\n") == 1 and message in err


def test_rate_options_do_not_apply_to_other_schedules(run_cli):
    status, _out, err = run_cli("simulate", "--forward", "30,4", "-m", "8", "--rate-ratio", "4")
    assert status == 2 and "--rate-ratio does not apply to schedule '1f1b'" in err


@pytest.mark.parametrize(
    "extra, message",
    [
        (("--damping", "0"), "--damping must be in (0, 1]"),
        (("--damping", "1.01"), "--damping must be in (0, 1]"),
        (("--rate-ratio", "-1"), "--rate-ratio must be >= 1, got -1"),
        (("--nproc", "5"), "num_vision_stages = 4 is more than the 3 vision layers"),
        (("--max-staleness", "3", "--buffer-frames", "2"), "--buffer-frames = 2 cannot hold --max-staleness = 3"),
    ],
)
def test_run_bad_input_is_one_line_before_any_process_starts(run_cli, extra, message):
    pytest.importorskip("torch")
    status, _out, err = run_cli("run", "--schedule", "dual-rate", *extra)
    assert status == 2
    assert err.count("\n") == 1 and message in err


@pytest.mark.slow
def test_run_dual_rate_json_passes_the_replay_check(run_cli):
    pytest.importorskip("torch")
    status, out, _ = run_cli("run", "--schedule", "dual-rate", "--rate-ratio", "4", "--damping", "0.95",
                             "--frames", "5", "--batch-size", "8", "--json")
    assert status == 0
    report = json.loads(out)
    assert report["replay_check"]["ok"] and report["replay_check"]["max_abs_diff"] < 1e-5
    assert report["run"]["steps"] == 20 and report["run"]["frames"] == 5
    assert report["run"]["staleness_histogram"] == {"0": 1, "1": 4}
    assert report["metrics"]["step_staleness"] == [0] * 4 + [1] * 16


@pytest.mark.slow
def test_dual_rate_verb_json_has_every_method_field(run_cli):
    pytest.importorskip("torch")
    status, out, err = run_cli("dual-rate", "--quick", "--budget", "0.2", "--json")
    assert status == 0
    assert "4 methods × 1 seed = 4 training runs of 0.2 s" in err  # said before the run, on stderr
    payload = json.loads(out)
    names = [row["name"] for row in payload["methods"]]
    assert names == ["synchronous", "dual-rate λ=1", "dual-rate λ=0.9", "frozen encoder"]
    for row in payload["methods"]:
        assert {"name", "samples_per_s", "final_loss", "time_to_target_s", "seeds"} <= set(row)
        assert row["seeds"] == [0]
    rates = {row["name"]: row["samples_per_s"] for row in payload["methods"]}
    assert rates["dual-rate λ=1"] > 2 * rates["synchronous"]  # k = 4: the vision cost is spread over 4 steps
    assert rates["frozen encoder"] > rates["dual-rate λ=1"]
