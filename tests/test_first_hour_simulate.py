"""Issue 24, the first hour of use: simulate, partition, dual-rate and demo, with the issue's commands.

Each test runs the command a new user typed (or its small equivalent where the real one takes
long: the summary, the stderr note, the refusal are what is checked, not a 148 MB file).
"""

from __future__ import annotations

import json
import re
import types

import pytest

import pipeplan
from pipeplan import StageCosts, build_schedule, simulate
from pipeplan.cli import main
from pipeplan.cli import simulate_cmd
from pipeplan.limits import REPORT_STEP_ACTIONS
from pipeplan.viz.gantt_text import ELISION

DUMBBELL = ("simulate", "--forward", "30,10,10,20")
LESSON16 = ("partition", "--layers", "32", "--layer-cost", "2", "--first-extra", "16", "--last-extra", "8",
            "--stages", "4")


def parse_error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    """The one stderr line of an argparse-level refusal (exit 2)."""
    with pytest.raises(SystemExit) as caught:
        main(argv)
    err = capsys.readouterr().err
    assert caught.value.code == 2 and err.count("\n") == 1 and "Traceback" not in err
    return err


# ------------------------------------------------------------------ item 2: memory units
def test_partition_infeasible_memory_is_in_gib_not_raw_bytes(run_cli):
    status, out, err = run_cli(*LESSON16, "--layer-params", "1e9", "--memory", "10GB")
    assert status == 2 and out == "" and err.count("\n") == 1
    assert "--memory = 9.313 GiB fits no partition" in err  # 10e9 bytes
    assert re.search(r"smallest capacity that fits is [0-9.]+ GiB, needed by stage 0", err)
    assert "e+" not in err and " bytes fits" not in err


def test_partition_tables_print_memory_in_gib(run_cli, tmp_path):
    path = tmp_path / "vla.csv"
    path.write_text("name,forward,activation_bytes,params\nvision,20,4e9,3e8\n"
                    + "".join(f"layers.{i},2,1e9,2e8\n" for i in range(8)))
    status, out, _ = run_cli("partition", str(path), "--stages", "4", "--schedule", "zb-v", "--memory", "80GiB")
    assert status == 0
    assert "≤ 80 GiB per rank" in out and "(capacity 80 GiB)" in out
    assert re.search(r"│ +[0-9.]+ GiB │", out)  # stage and rank memory in GiB
    assert " GB" not in out


def test_comm_bandwidth_needs_a_unit(capsys):
    err = parse_error(capsys, [*DUMBBELL, "--comm-bandwidth", "25", "--boundary-bytes", "1e6"])
    assert "--comm-bandwidth 25 has no unit: write e.g. 25GB/s (bytes) or 25Gbit/s (bits)" in err


def test_comm_bandwidth_and_sizes_with_units_match_bytes_per_ms(run_cli):
    status, out, _ = run_cli(*DUMBBELL, "-m", "8", "--comm-bandwidth", "25GB/s", "--boundary-bytes", "64MiB",
                             "--activation-bytes", "1GiB,512MiB,512MiB,256MiB", "--json")
    assert status == 0
    payload = json.loads(out)
    costs = StageCosts([30, 10, 10, 20], activation_bytes=[2**30, 2**29, 2**29, 2**28])
    expected = simulate(build_schedule("1f1b", num_stages=4, num_microbatches=8), costs,
                        pipeplan.CommModel(0.0, 25e9 / 1000, 64 * 2**20))  # 25 GB/s = 25e6 bytes per ms
    assert payload["makespan"] == pytest.approx(expected.makespan)
    assert payload["ranks"][0]["peak_bytes"] == pytest.approx(4 * 2**30)


def test_memory_limit_a_size_needs_a_unit_a_count_is_a_bare_integer(run_cli, capsys):
    adaptive = [*DUMBBELL, "--schedule", "adaptive"]
    err = parse_error(capsys, [*adaptive, "--memory-limit", "4.5"])
    assert "--memory-limit 4.5 has no unit, so it is a count of microbatches" in err and "4.5GiB" in err
    status, _, err = run_cli(*adaptive, "--memory-limit", "4", "--activation-bytes", "1GiB,1GiB,1GiB,1GiB")
    assert status == 2 and "write the limit as a size, e.g. --memory-limit 4GiB" in err
    status, _, err = run_cli(*adaptive, "--memory-limit", "12GiB")
    assert status == 2 and "--memory-limit 12 GiB is a size and needs --activation-bytes" in err
    for argv in (["--memory-limit", "3"], ["--memory-limit", "3GiB", "--activation-bytes", "1GiB,1GiB,1GiB,1GiB"]):
        status, out, _ = run_cli(*adaptive, *argv, "--json")
        assert status == 0 and max(r["peak_inflight"] for r in json.loads(out)["ranks"]) <= 3


def test_memory_limit_help_says_which_is_which(capsys):
    with pytest.raises(SystemExit):
        main(["simulate", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--memory-limit SIZE|COUNT" in text and "a size with its unit (e.g. 12GiB;" in text
    assert "or a bare integer, a count of microbatches in flight" in text
    assert "--comm-latency TIME time per message between ranks: ms (0.5)" in text and "--comm-bandwidth RATE bandwidth" in text


# ------------------------------------------------------------------ item 4: the barcode Gantt
def test_a_128_microbatch_text_gantt_on_16_ranks_is_readable(run_cli):
    status, out, _ = run_cli("simulate", "--forward", ",".join(["1"] * 16), "-m", "128")
    assert status == 0
    rank0 = next(line for line in out.splitlines() if line.startswith("rank 0 "))
    start, middle, end = rank0[rank0.index("|") + 1:-1].split(ELISION)
    assert start.startswith("F0 F1 F2") and "B" in middle and end.rstrip().endswith("B127")
    assert "elided: the start, the middle and the end of the step" in out


# ------------------------------------------------------------ item 5: silent work, huge outputs
def test_large_simulate_json_is_summarised_unless_actions_is_asked(run_cli):
    # The issue's -m 100000 (800,000 actions, 148 MB) in small: 40,000 actions, past the 20,000 listed.
    status, out, err = run_cli(*DUMBBELL, "-m", "5000", "--json")
    assert status == 0
    payload = json.loads(out)
    assert payload["actions_listed"] is False and payload["num_actions"] == 40_000
    assert "actions" not in payload and "idle" not in payload
    assert payload["makespan"] > 0 and len(payload["ranks"]) == 4 and "bubble_ratio" in payload
    assert "40,000 actions, more than 20,000: printing the summary" in err and "--actions" in err
    status, out, err = run_cli(*DUMBBELL, "-m", "5000", "--json", "--actions")
    assert status == 0 and len(json.loads(out)["actions"]) == 40_000 and err == ""
    status, out, _ = run_cli(*DUMBBELL, "-m", "8", "--json")  # small: every action, as before
    assert json.loads(out)["actions_listed"] is True and len(json.loads(out)["actions"]) == 64


def test_summary_threshold_is_the_module_constant(run_cli, monkeypatch):
    monkeypatch.setattr(simulate_cmd, "JSON_ACTIONS_LIMIT", 10)
    status, out, err = run_cli(*DUMBBELL, "-m", "8", "--json")
    assert status == 0 and json.loads(out)["actions_listed"] is False and "64 actions" in err


def test_partition_of_1000_layers_on_1000_stages_is_quick(run_cli, monkeypatch):
    # The exact command (10 CPU s and 2 GB before): the answer needs no 4e6-action step.
    import pipeplan.schedules.inflight as inflight

    built: list[int] = []
    real = inflight.build_schedule
    monkeypatch.setattr(inflight, "build_schedule", lambda *a, **k: built.append(1) or real(*a, **k))
    status, out, _ = run_cli("partition", "--layers", "1000", "--layer-cost", "3", "--stages", "1000", "--json")
    assert status == 0 and built == []
    payload = json.loads(out)
    assert payload["layers_per_stage"] == [1] * 1000 and payload["num_microbatches"] == 2000
    assert payload["simulated"] is None and "4,000,000 actions" in payload["not_simulated"]
    status, out, _ = run_cli("partition", "--layers", "1000", "--layer-cost", "3", "--stages", "1000")
    assert "step not simulated (1000 stages × m = 2000 is 4,000,000 actions" in " ".join(out.split())
    assert 1000 * 2000 * 2 > REPORT_STEP_ACTIONS >= 40 * 80 * 2  # the small case below is simulated
    status, out, _ = run_cli("partition", "--layers", "40", "--layer-cost", "3", "--stages", "40", "--json")
    assert json.loads(out)["simulated"]["step_time"] > 0


def test_dual_rate_says_what_it_will_do_before_the_long_run(run_cli, monkeypatch):
    pytest.importorskip("torch")
    import pipeplan.dualrate.study as study

    seen = {}

    def fake_study(**options):
        seen.update(options)
        return types.SimpleNamespace(to_dict=lambda: {"methods": []})

    monkeypatch.setattr(study, "run_study", fake_study)
    status, out, err = run_cli("dual-rate", "--json")
    assert status == 0 and json.loads(out) == {"methods": []}
    assert "pipeplan dual-rate: 9 methods × 3 seeds = 27 training runs of 1 s" in err
    assert re.search(r"about \d+ s, longer on a busy machine", err)
    assert len(seen["methods"]) == 9 and list(seen["seeds"]) == [0, 1, 2]


# ----------------------------------------------------------------- item 8: one vocabulary
@pytest.mark.parametrize("verb, old, new", [
    (list(DUMBBELL), ["--optimizer", "overlap"], "--step-boundary"),
    (list(DUMBBELL), ["--steps"], "--step-table"),
    (list(LESSON16), ["--chunks-per-rank", "2"], "--virtual-stages"),
    (list(LESSON16), ["--bytes-per-param", "16"], "--optimizer"),
])
def test_renamed_flags_point_to_their_new_name(capsys, verb, old, new):
    assert f"argument {old[0]}: was renamed {new}" in parse_error(capsys, [*verb, *old])


def test_new_names_work(run_cli):
    argv = ["simulate", "--forward", "1,1,1,1", "--backward", "2,2,2,2", "--weight", "1,1,1,1", "-m", "8",
            "--schedule", "zb-h2", "--iterations", "6", "--step-boundary", "overlap", "--json"]
    status, out, _ = run_cli(*argv)
    assert status == 0 and json.loads(out)["step_boundary"] == "overlap" and json.loads(out)["steady_step_time"] == 24
    status, adam, _ = run_cli(*LESSON16, "--layer-params", "1e8", "--optimizer", "adam", "--json")
    status, sixteen, _ = run_cli(*LESSON16, "--layer-params", "1e8", "--optimizer", "16", "--json")
    assert json.loads(adam)["stage_memory"] == json.loads(sixteen)["stage_memory"]
    status, eight, _ = run_cli(*LESSON16, "--layer-params", "1e8", "--optimizer", "8", "--json")
    assert json.loads(eight)["stage_memory"][1] == pytest.approx(json.loads(adam)["stage_memory"][1] / 2)
    status, _, err = run_cli(*LESSON16, "--optimizer", "sgd")
    assert status == 2 and err.startswith("pipeplan partition: error: --optimizer:")


def test_microbatches_default_to_twice_the_pipeline_ranks(run_cli):
    for argv, micro in [((*DUMBBELL,), 8), (("simulate", "--forward", "1,1,1,1", "--schedule", "zb-v"), 4),
                        (("simulate", "--forward", "1,1,1,1,1,1", "--schedule", "interleaved"), 6),
                        (("simulate", "--forward", "1,1,1,1,1,1", "--schedule", "interleaved",
                          "--virtual-stages", "3"), 4),
                        (("simulate", "--forward", "30,4", "--update", "1,0.5", "--schedule", "dual-rate"), 4)]:
        status, out, err = run_cli(*argv, "--json")
        assert status == 0, err
        assert json.loads(out)["num_microbatches"] == micro, argv
    for argv, micro in [((*LESSON16,), 8), ((*LESSON16, "--schedule", "zb-v"), 4)]:
        status, out, _ = run_cli(*argv, "--json")
        assert json.loads(out)["num_microbatches"] == micro


def test_demo_help_has_a_description_and_each_storys_defaults(capsys):
    with pytest.raises(SystemExit):
        main(["demo", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for words in ("Tell one worked story", "pi0 (default)", "lesson16", "m = 8", "seed002", "N = 3 stages",
                  "M = 4 microbatches", "seed003", "dual-rate", "pi0", "M is the microbatch count"):
        assert words in text, words


# ----------------------------------------------------------------------- item 11: smaller
def test_no_activation_sizes_claim_no_bytes(run_cli):
    status, out, _ = run_cli(*DUMBBELL, "-m", "8")
    assert status == 0
    assert "peak activations" not in out and " 4 B" not in out
    assert "no activation sizes given" in out
    status, out, _ = run_cli(*DUMBBELL, "-m", "8", "--activation-bytes", "1GiB,1GiB,1GiB,1GiB")
    assert "peak activations" in out and "4 GiB" in out


def test_step_tables_count_from_zero_like_the_gantt(run_cli):
    status, out, _ = run_cli("simulate", "--forward", "1,1,1", "--backward", "1,1,1", "-m", "4",
                             "--schedule", "gpipe", "--step-table")
    assert status == 0
    assert "T=0: S0: F0(0)" in out and "T=11: S0: B0(3)" in out and "S3" not in out
    assert "rank 0 |F0" in out


def test_seed_demos_give_m_and_n_one_meaning(run_cli):
    status, out, _ = run_cli("demo", "--story", "seed002")
    assert status == 0
    assert out.count("N = 3 stages, M = 4 microbatches") == 2
    assert "M=3 stages" not in out


def test_json_claims_no_bytes_without_sizes_and_names_the_step_boundary(run_cli):
    # newcomer walk: "peak_bytes": 4.0 (a microbatch count) and the old "optimizer" key survived in --json
    status, out, _ = run_cli("simulate", "--forward", "30,10,10,20", "--json")
    payload = json.loads(out)
    assert status == 0 and payload["step_boundary"] == "barrier" and "optimizer" not in payload
    assert all("peak_bytes" not in rank for rank in payload["ranks"])
    status, out, _ = run_cli("simulate", "--forward", "30,10,10,20", "--activation-bytes", "1MiB,1MiB,1MiB,1MiB", "--json")
    assert [rank["peak_bytes"] for rank in json.loads(out)["ranks"]] == [4 * 2**20, 3 * 2**20, 2 * 2**20, 2**20]


@pytest.mark.parametrize(("argv", "line"), [
    # newcomer walk: each of these exited 0 and the flag changed nothing
    ("partition --layers 32 --layer-cost 2 --stages 4 --memory 1GiB", "--memory does not apply without sizes"),
    ("partition --layers 32 --layer-cost 2 --stages 4 --gpu a100-80g",
     "--gpu applies to a model from shapes (--preset or --spec), not to --layers"),
    ("partition --layers 32 --layer-cost 2 --stages 4 --micro-batch-size 4", "--micro-batch-size applies to a model"),
    ("simulate --forward 30,10,10,20 --boundary-bytes 1MiB", "--boundary-bytes does not apply without --comm-bandwidth"),
    ("simulate --forward 30,10,10,20 --tp 2", "--tp applies to a model from shapes (--preset or --spec), not to --forward"),
])
def test_a_flag_that_would_do_nothing_is_refused(run_cli, argv, line):
    status, out, err = run_cli(*argv.split())
    assert status == 2 and out == "" and line in err and err.count("\n") == 1


def test_partition_of_a_preset_says_memory_is_unchecked_and_never_a_negative_bubble(run_cli):
    # newcomer walk: openvla-7b on one stage holds 113 GiB with no word that an 80 GB GPU cannot hold it,
    # and the bubble printed as -0.00%
    status, out, err = run_cli("partition", "--preset", "openvla-7b", "--stages", "1")
    assert status == 0, err
    assert "memory not checked: --memory (e.g. 71.7GiB) fits the stages in a GPU; h100-80g has 79.6 GiB" in out
    assert "-0.00%" not in out and "bubble 0.00%" in out


def test_the_step_table_says_how_to_read_it(run_cli):
    # newcomer walk: the step table's F1(0) (stage 1, microbatch 0) beside the Gantt's F1 (microbatch 1)
    status, out, _ = run_cli("simulate", "--forward", "1,1,1", "--backward", "1,1,1", "-m", "4", "--schedule",
                             "gpipe", "--step-table")
    assert status == 0
    key, first = out.split("step table: ", 1)[1].splitlines()[:2]
    assert "Fk(m): stage k's forward of microbatch m" in key and first == "T=0: S0: F0(0)"
