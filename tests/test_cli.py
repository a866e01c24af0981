"""The ``pipeplan`` command: simulate and demo, output and one-line errors."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from pipeplan import StageCosts, analytic, build_schedule, simulate
from pipeplan.cli import main


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_simulate_json_matches_the_library(capsys):
    status, out, _ = run_cli(capsys, "simulate", "--forward", "30,10,10,20", "-m", "8", "--json")
    assert status == 0
    payload = json.loads(out)
    expected = simulate(build_schedule("1f1b", num_stages=4, num_microbatches=8), StageCosts([30, 10, 10, 20]))
    assert payload["makespan"] == pytest.approx(expected.makespan)
    assert payload["bubble_ratio"] == pytest.approx(expected.bubble_ratio)
    assert [r["peak_inflight"] for r in payload["ranks"]] == [4, 3, 2, 1]


def test_simulate_forward_only_gives_the_lesson_numbers(capsys):
    status, out, _ = run_cli(capsys, "simulate", "--forward", "30,10,10,20", "-m", "8", "--forward-only", "--json")
    assert status == 0
    payload = json.loads(out)
    assert payload["makespan"] == 280.0
    assert payload["bubble_ratio"] == pytest.approx(analytic.asymmetric_forward_bubble([30, 10, 10, 20], 8))


def test_simulate_human_output_has_gantt_and_table(capsys):
    status, out, _ = run_cli(capsys, "simulate", "--forward", "30,10,10,20", "-m", "4", "--schedule", "gpipe",
                             "--send", "rendezvous", "--comm-latency", "1")
    assert status == 0
    assert "rank 0 |" in out and "rank 3 |" in out
    assert "makespan" in out and "bubble" in out


def test_simulate_iterations_report_the_steady_step_time(capsys):
    argv = ["simulate", "--forward", "1,1,1,1", "--backward", "2,2,2,2", "--weight", "1,1,1,1", "-m", "8",
            "--schedule", "zb-h2", "--iterations", "6"]
    status, out, _ = run_cli(capsys, *argv, "--optimizer", "overlap")
    assert status == 0
    assert "6 steps, optimizer overlap: steady step time 24 ms (first step 27 ms)" in out
    status, out, _ = run_cli(capsys, *argv, "--json")
    payload = json.loads(out)
    assert payload["iterations"] == 6 and payload["optimizer"] == "barrier"
    assert payload["steady_step_time"] == pytest.approx(27.0) and len(payload["step_ends"]) == 6


def test_simulate_step_table(capsys):
    status, out, _ = run_cli(capsys, "simulate", "--forward", "1,1,1", "--backward", "1,1,1", "-m", "4",
                             "--schedule", "gpipe", "--steps")
    assert status == 0
    assert "T=1: S1: F1(1)" in out


def test_simulate_writes_plot_and_trace(capsys, tmp_path):
    png, trace = tmp_path / "g.png", tmp_path / "t.json"
    status, _, _ = run_cli(capsys, "simulate", "--forward", "3,1,2", "-m", "4", "--plot", str(png),
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
        (["--forward", "30,10", "--comm-latency", "-1"], "latency must be a finite number >= 0"),
        (["--forward", "30,10", "--comm-latency", "inf"], "latency must be a finite number >= 0"),
        (["--forward", "1e308,1e308", "--backward", "1e308,1e308"], "makespan overflows to infinity"),
        (["--forward", "1e308,1e308"], "the default backward .* overflows"),
        (["--forward", "30,10", "--iterations", "0"], "iterations must be >= 1, got 0"),
        (["--forward", "30,10", "--optimizer", "later"], "optimizer must be one of barrier, overlap, got 'later'"),
        (["--forward", "1,1", "-m", "4", "--schedule", "zb-h2", "--send", "rendezvous"],
         r"rendezvous sends deadlock between ranks 0 and 1 .*rank 0 is blocked sending the activation of "
         r"F\(stage 0, mb 3\) from rank 0 to F\(stage 1, mb 3\) on rank 1"),
    ],
)
def test_user_errors_are_one_line_and_exit_2(capsys, argv, message):
    status, out, err = run_cli(capsys, "simulate", *argv)
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


def test_demo_tells_the_lesson16_story(capsys):
    status, out, _ = run_cli(capsys, "demo")
    assert status == 0
    assert "280" in out and "50.0%" in out          # the lesson's forward phase
    assert "[3, 11, 11, 7]" in out                  # the re-balanced partition
    assert f"{analytic.asymmetric_bubble_limit([30, 10, 10, 20]):.1%}" in out
    assert "starved upstream" in out


def test_demo_seed002_step_tables(capsys):
    status, out, _ = run_cli(capsys, "demo", "--story", "seed002")
    assert status == 0
    assert out.count("T=1: S1: F1(1)") == 2


def test_demo_rejects_zero_microbatches(capsys):
    status, _, err = run_cli(capsys, "demo", "-m", "0")
    assert status == 2
    assert err.strip() == "pipeplan demo: error: -m/--microbatches must be >= 1, got 0"


@pytest.mark.parametrize("flag", [["-m", "3"], ["--width", "50"]])
def test_demo_seed002_refuses_flags_it_would_ignore(capsys, flag):
    status, _, err = run_cli(capsys, "demo", "--story", "seed002", *flag)
    assert status == 2
    assert err.strip().startswith(f"pipeplan demo: error: {flag[0]}") and "does not apply" in err
