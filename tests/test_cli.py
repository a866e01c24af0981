"""The ``pipeplan`` command: simulate and demo, output and one-line errors."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

import pipeplan

from pipeplan import StageCosts, analytic, build_schedule, simulate
from pipeplan.cli import main


def test_simulate_json_matches_the_library(run_cli):
    status, out, _ = run_cli("simulate", "--forward", "30,10,10,20", "-m", "8", "--json")
    assert status == 0
    payload = json.loads(out)
    expected = simulate(build_schedule("1f1b", num_stages=4, num_microbatches=8), StageCosts([30, 10, 10, 20]))
    assert payload["makespan"] == pytest.approx(expected.makespan)
    assert payload["bubble_ratio"] == pytest.approx(expected.bubble_ratio)
    assert [r["peak_inflight"] for r in payload["ranks"]] == [4, 3, 2, 1]


def test_simulate_forward_only_gives_the_lesson_numbers(run_cli):
    status, out, _ = run_cli("simulate", "--forward", "30,10,10,20", "-m", "8", "--forward-only", "--json")
    assert status == 0
    payload = json.loads(out)
    assert payload["makespan"] == 280.0
    assert payload["bubble_ratio"] == pytest.approx(analytic.asymmetric_forward_bubble([30, 10, 10, 20], 8))


def test_simulate_human_output_has_gantt_and_table(run_cli):
    status, out, _ = run_cli("simulate", "--forward", "30,10,10,20", "-m", "4", "--schedule", "gpipe",
                             "--send", "rendezvous", "--comm-latency", "1")
    assert status == 0
    assert "rank 0 |" in out and "rank 3 |" in out
    assert "makespan" in out and "bubble" in out


def test_simulate_iterations_report_the_steady_step_time(run_cli):
    argv = ["simulate", "--forward", "1,1,1,1", "--backward", "2,2,2,2", "--weight", "1,1,1,1", "-m", "8",
            "--schedule", "zb-h2", "--iterations", "6"]
    status, out, _ = run_cli(*argv, "--step-boundary", "overlap")
    assert status == 0
    assert "6 steps, step boundary overlap: steady step time 24 ms (first step 27 ms)" in out
    status, out, _ = run_cli(*argv, "--json")
    payload = json.loads(out)
    assert payload["iterations"] == 6 and payload["step_boundary"] == "barrier"
    assert payload["steady_step_time"] == pytest.approx(27.0) and len(payload["step_ends"]) == 6


def test_simulate_step_table(run_cli):
    status, out, _ = run_cli("simulate", "--forward", "1,1,1", "--backward", "1,1,1", "-m", "4",
                             "--schedule", "gpipe", "--step-table")
    assert status == 0
    assert "T=0: S0: F0(0)" in out


def test_simulate_writes_plot_and_trace(run_cli, tmp_path):
    png, trace = tmp_path / "g.png", tmp_path / "t.json"
    status, _, _ = run_cli("simulate", "--forward", "3,1,2", "-m", "4", "--plot", str(png),
                           "--trace", str(trace))
    assert status == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    events = json.loads(trace.read_text())["traceEvents"]
    assert sum(1 for e in events if e.get("ph") == "X" and e.get("cat") != "idle") >= 3 * 4 * 2


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--forward", "30,nan,10"], r"forward\[1\] must be finite"),
        (["--forward", "30,-1,10"], r"forward\[1\] must be > 0"),
        (["--forward", "30,10", "-m", "0"], "-m/--microbatches must be >= 1, got 0"),
        (["--forward", "30,10", "--backward", "1"], "backward has 1 entries, expected 2"),
        (["--forward", "30,10", "--schedule", "2f2b"], "--schedule must be one of"),
        (["--forward", "30,10", "--comm-latency", "-1"], r"--comm-latency must be a time like 0.5 \(ms\), 0.5ms, 20us or 2s, got '-1'"),
        (["--forward", "30,10", "--comm-latency", "inf"], r"--comm-latency must be a time like 0.5 \(ms\), 0.5ms, 20us or 2s, got 'inf'"),
        (["--forward", "1e308,1e308", "--backward", "1e308,1e308"], "makespan overflows to infinity"),
        (["--forward", "1e308,1e308"], "the default backward .* overflows"),
        (["--forward", "30,10", "--iterations", "0"], "iterations must be >= 1, got 0"),
        (["--forward", "30,10", "--width", "100000000"], "--width must be <= 10000 columns, got 100000000"),
        (["--forward", "30,10", "--step-boundary", "overlap"], "--step-boundary does not apply with one step"),
        (["--forward", "30,10", "--update", "1,1"], "--update does not apply to schedule '1f1b'"),
        (["--forward", "1,1", "-m", "4", "--schedule", "zb-h2", "--send", "rendezvous"],
         r"rendezvous sends deadlock between ranks 0 and 1 .*rank 0 is blocked sending the activation of "
         r"F\(stage 0, mb 3\) from rank 0 to F\(stage 1, mb 3\) on rank 1"),
    ],
)
def test_user_errors_are_one_line_and_exit_2(run_cli, argv, message):
    status, out, err = run_cli("simulate", *argv)
    assert status == 2
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pipeplan simulate: error:")
    assert re.search(message, lines[0])


def test_argparse_errors_exit_2_without_traceback():
    result = subprocess.run([sys.executable, "-m", "pipeplan", "simulate", "--forward", "a,b"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "--forward must be comma-separated numbers" in result.stderr


def test_demo_tells_the_lesson16_story(run_cli):
    status, out, _ = run_cli("demo", "--story", "lesson16")
    assert status == 0
    assert "280" in out and "50.0%" in out          # the lesson's forward phase
    assert "[3, 11, 11, 7]" in out                  # the re-balanced partition
    assert f"{analytic.asymmetric_bubble_limit([30, 10, 10, 20]):.1%}" in out
    assert "starved upstream" in out


def test_the_default_demo_is_the_planner_story():
    # issue 24 item 7: the first command a user runs shows the main job (planning), not a lesson
    from pipeplan.cli import build_parser

    assert build_parser().parse_args(["demo"]).story == "pi0"


def test_demo_seed002_step_tables(run_cli):
    status, out, _ = run_cli("demo", "--story", "seed002")
    assert status == 0
    assert out.count("T=0: S0: F0(0)") == 2


def test_demo_rejects_zero_microbatches(run_cli):
    status, _, err = run_cli("demo", "--story", "lesson16", "-m", "0")
    assert status == 2
    assert err.strip() == "pipeplan demo: error: -m/--microbatches must be >= 1, got 0"


@pytest.mark.parametrize("flag", [["-m", "3"], ["--width", "50"]])
def test_demo_seed002_refuses_flags_it_would_ignore(run_cli, flag):
    status, _, err = run_cli("demo", "--story", "seed002", *flag)
    assert status == 2
    assert err.strip().startswith(f"pipeplan demo: error: {flag[0]}") and "does not apply" in err


# ----------------------------------------------------------------- hardening: bad input, one line
def _one_error_line(err: str, verb: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"pipeplan {verb}: error:"), err
    return lines[0]


def test_empty_list_entry_is_refused(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["simulate", "--forward", "30,10,,20"])
    captured = capsys.readouterr()
    assert exit_.value.code == 2 and captured.out == ""
    assert "--forward[2] is empty in '30,10,,20' (4 entries, from 0)" in _one_error_line(captured.err, "simulate")


@pytest.mark.parametrize("argv, flag", [
    (["--json", "--step-table"], "--step-table"),
    (["--actions"], "--actions"),
    (["--json", "--width", "0"], "--width"),
    (["--weight", "1,1,1,1"], "--weight"),
    (["--forward-only", "--backward", "1,1,1,1"], "--backward"),
    (["--comm-bandwidth", "10GB/s"], "--comm-bandwidth"),
])
def test_flags_that_do_not_apply_are_refused(run_cli, argv, flag):
    status, _, err = run_cli("simulate", "--forward", "30,10,10,20", *argv)
    assert status == 2
    line = _one_error_line(err, "simulate")
    assert f"error: {flag} does not apply" in line


def test_memory_limit_in_bytes_needs_activation_bytes(run_cli):
    status, _, err = run_cli("simulate", "--forward", "30,10,10,20", "--schedule", "adaptive",
                             "--memory-limit", "12GB")
    assert status == 2 and "needs --activation-bytes" in _one_error_line(err, "simulate")
    status, _, _ = run_cli("simulate", "--forward", "30,10,10,20", "--schedule", "adaptive",
                           "--memory-limit", "12GB", "--activation-bytes", "4e9,1e9,1e9,2e9")
    assert status == 0


def test_sizes_past_memory_are_refused_up_front(run_cli, monkeypatch):
    from pipeplan import limits

    status, _, err = run_cli("simulate", "--forward", "30,10,10,20", "-m", "10000000000")
    assert status == 2
    assert re.search(r"m = 10000000000 × 2 action kinds = 8e\+10 actions would need ~.* of memory",
                     _one_error_line(err, "simulate"))
    monkeypatch.setattr(limits, "available_memory", lambda: 1e5)
    status, out, err = run_cli("simulate", "--forward", "1,1", "--width", "10000")
    assert status == 2 and out == ""
    assert "--width = 10000" in _one_error_line(err, "simulate") and "would need" in err
    monkeypatch.setattr(limits, "available_memory", lambda: 1e9)
    for verb, argv, what in [("partition", ["--layers", "8", "--layer-cost", "1", "--stages", "4", "-m",
                                            "1000000000"], "m = 1000000000"),
                             ("demo", ["--story", "lesson16", "-m", "100000"], "64 × -m")]:
        status, out, err = run_cli(verb, *argv)
        assert status == 2 and out == ""
        assert what in _one_error_line(err, verb) and "would need" in err


def test_partition_of_one_layer_per_stage_builds_its_schedule_once(run_cli, monkeypatch):
    import pipeplan.schedules.inflight as schedules  # where build_with_costs looks it up

    calls = []
    real = schedules.build_schedule

    def counting(*args, **kwargs):
        calls.append(kwargs.get("num_microbatches"))
        return real(*args, **kwargs)

    monkeypatch.setattr(schedules, "build_schedule", counting)
    status, out, _ = run_cli("partition", "--layers", "40", "--layer-cost", "1", "--stages", "40", "--json")
    assert status == 0 and calls == [80]
    payload = json.loads(out)
    assert payload["simulated"]["step_time"] == payload["even_split"]["step_time"]


def test_partition_bubble_without_resimulating_matches_the_simulator(run_cli):
    status, out, _ = run_cli("partition", "--layers", "32", "--layer-cost", "6", "--first-extra", "48",
                             "--last-extra", "24", "--stages", "4", "-m", "8", "--json")
    assert status == 0
    payload = json.loads(out)
    timeline = simulate(build_schedule("1f1b", num_stages=4, num_microbatches=8),
                        StageCosts([22.0, 22.0, 22.0, 22.0]))  # forward thirds of 66 ms per stage
    assert payload["simulated"]["step_time"] == pytest.approx(timeline.makespan)
    assert payload["simulated"]["bubble_ratio"] == pytest.approx(timeline.bubble_ratio)


def test_overflowing_extra_names_its_flag(run_cli):
    status, _, err = run_cli("partition", "--layers", "32", "--layer-cost", "2", "--last-extra", "1e308",
                             "--stages", "4")
    assert status == 2
    assert "--last-extra = 1e+308 is too large" in _one_error_line(err, "partition")
    assert "RuntimeWarning" not in err


def test_profile_file_errors_name_the_reason(run_cli, tmp_path):
    binary = tmp_path / "binary.csv"
    binary.write_bytes(b"\xff\xfe\x00")
    for path, reason in [(binary, "is not UTF-8"), (tmp_path, "is a directory"), ("/dev/null", "not a regular file")]:
        status, _, err = run_cli("partition", str(path), "--stages", "2")
        assert status == 2 and reason in _one_error_line(err, "partition")


def test_version_and_wrote_lines(run_cli, capsys, tmp_path):
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip() == f"pipeplan {pipeplan.__version__}"
    png, trace = tmp_path / "g.png", tmp_path / "t.json"
    status, out, err = run_cli("simulate", "--forward", "3,1,2", "-m", "4", "--plot", str(png),
                               "--trace", str(trace), "--json")
    assert status == 0 and json.loads(out)["makespan"] > 0
    assert err.splitlines() == [f"wrote {png}", f"wrote {trace}"]


def test_unwritable_output_is_refused_before_the_work(run_cli, tmp_path):
    status, out, err = run_cli("simulate", "--forward", "3,1,2", "--plot", str(tmp_path / "no" / "g.png"))
    assert status == 2 and out == ""
    assert "does not exist" in _one_error_line(err, "simulate")


def test_progress_bar_appears_only_on_a_terminal_after_the_delay():
    import io
    import time

    from rich.console import Console

    from pipeplan.cli._common import progress

    terminal = io.StringIO()
    with progress(2, "simulating", delay=0.0, console=Console(file=terminal, force_terminal=True)) as advance:
        time.sleep(0.3)
        advance(1, "drawing")
        time.sleep(0.3)
    assert "drawing" in terminal.getvalue() or "simulating" in terminal.getvalue()
    quick = io.StringIO()
    with progress(2, "simulating", delay=5.0, console=Console(file=quick, force_terminal=True)) as advance:
        advance(2)
    assert quick.getvalue() == ""
    piped = io.StringIO()
    with progress(2, "simulating", delay=0.0, console=Console(file=piped)) as advance:
        time.sleep(0.2)
        advance(2)
    assert piped.getvalue() == ""


@pytest.mark.parametrize("forward, schedule, chunks", [("1e30", "interleaved", 2), ("1,2,3", "zb-v", 2)])
def test_stage_times_that_do_not_fill_the_ranks_name_forward(capsys, forward, schedule, chunks):
    # Found by tests/test_cli_numeric_flags.py: one stage time under interleaved was refused naming only
    # --virtual-stages, though --forward set the stage count.
    assert main(["simulate", "--forward", forward, "--schedule", schedule]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "--forward gives" in err and f"multiple of {chunks}" in err
