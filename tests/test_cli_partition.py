"""``pipeplan partition``: tables, JSON, exports and one-line errors."""

from __future__ import annotations

import json
import re

import pytest

import pipeplan
from pipeplan.cli import main
from pipeplan.layers import LayerProfile

LESSON16 = ["partition", "--layers", "32", "--layer-cost", "2", "--first-extra", "16", "--last-extra", "8",
            "--stages", "4"]


def test_lesson16_table_and_bubbles(run_cli):
    status, out, err = run_cli(*LESSON16, "-m", "8")
    assert status == 0, err
    assert "0–2" in out and "3–13" in out and "14–24" in out and "25–31" in out
    assert "slowest stage 22 ms (even split 32 ms)" in out
    assert "bubble" in out and "even split: step" in out


def test_json_matches_the_library(run_cli):
    status, out, _ = run_cli(*LESSON16, "-m", "8", "--json")
    assert status == 0
    payload = json.loads(out)
    assert payload["layers_per_stage"] == [3, 11, 11, 7]
    expected = pipeplan.partition_layers(
        LayerProfile.uniform(32, forward=2 / 3, first_extra=16, last_extra=8), 4, pipeplan.PartitionOptions(num_microbatches=8)
    )
    assert payload["step_time"] == pytest.approx(expected.step_time)
    assert payload["simulated"]["step_time"] == pytest.approx(expected.step_time)
    assert payload["even_split"]["layers_per_stage"] == [8, 8, 8, 8]
    assert payload["simulated"]["bubble_ratio"] < payload["even_split"]["bubble_ratio"]


@pytest.mark.parametrize(
    "engine,expected",
    [
        ("megatron", "--decoder-first-pipeline-num-layers 3 --decoder-last-pipeline-num-layers 7"),
        ("deepspeed", "PIPEPLAN_PARTS = [0, 3, 14, 25, 32]"),
        ("torch", "'layers.3': SplitPoint.BEGINNING"),
    ],
)
def test_exports(run_cli, engine, expected):
    status, out, _ = run_cli(*LESSON16, "--export", engine)
    assert status == 0
    assert expected in out
    if engine == "torch":
        assert "0F0" in out


def test_profile_file_with_memory(run_cli, tmp_path):
    path = tmp_path / "vla.csv"
    rows = ["name,forward,activation_bytes,params", "vision,20,4e9,3e8"]
    rows += [f"layers.{i},2,1e9,2e8" for i in range(16)]
    rows += ["action_head,4,5e8,1e8"]
    path.write_text("\n".join(rows) + "\n")
    status, out, _ = run_cli("partition", str(path), "--stages", "4", "--memory", "40GB", "-m", "8", "--json")
    assert status == 0
    payload = json.loads(out)
    assert max(payload["stage_memory"]) <= 40e9
    assert sum(payload["layers_per_stage"]) == 18


def vla_profile(tmp_path):
    path = tmp_path / "vla.csv"
    rows = ["name,forward,activation_bytes,params", "vision,20,4e9,3e8"]
    rows += [f"layers.{i},2,1e9,2e8" for i in range(16)]
    rows += ["action_head,4,5e8,1e8"]
    path.write_text("\n".join(rows) + "\n")
    return path


def test_zb_v_memory_is_per_rank_in_table_and_json(run_cli, tmp_path):
    # Four stages on two ranks: the capacity is per GPU and the tables say so.
    path = vla_profile(tmp_path)
    status, out, err = run_cli("partition", str(path), "--stages", "4", "--schedule", "zb-v",
                               "--memory", "56GB", "-m", "8", "--json")
    assert status == 0, err
    payload = json.loads(out)
    assert payload["num_ranks"] == 2 and payload["placement"] == [0, 1, 1, 0]
    assert max(payload["rank_memory"]) <= 56e9
    assert payload["rank_memory"][1] == pytest.approx(payload["stage_memory"][1] + payload["stage_memory"][2])
    status, out, _ = run_cli("partition", str(path), "--stages", "4", "--schedule", "zb-v",
                             "--memory", "56GB", "-m", "8")
    assert status == 0
    assert "4 stages on 2 ranks, ≤ 52.2 GiB per rank" in out  # 56e9 bytes: memory is printed in GiB
    assert re.search(r"│ +[0-9.]+ GiB │", out)  # stage memory in GiB
    assert "memory per rank" in out and "0 + 3" in out and "1 + 2" in out


@pytest.mark.parametrize("flag,value", [("--layer-params", "1e9"), ("--layer-activation", "1GB")])
def test_layer_flags_with_a_profile_file_are_refused(run_cli, tmp_path, flag, value):
    status, out, err = run_cli("partition", str(vla_profile(tmp_path)), "--stages", "2", flag, value)
    assert status == 2 and out == ""
    assert err.count("\n") == 1 and f"{flag} only applies with --layers" in err


def test_help_names_the_units(capsys):
    with pytest.raises(SystemExit):
        main(["partition", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "F + B + W time of one layer per microbatch, ms" in text
    assert "S/2 for zb-v and interleaved" in text
    assert "memory capacity per rank (GPU)" in text


def test_memory_infeasible_is_one_line_exit_2(run_cli):
    status, out, err = run_cli(*LESSON16, "--layer-params", "1e9", "--memory", "10GB")
    assert status == 2
    assert out == ""
    assert err.count("\n") == 1
    assert "smallest capacity that fits is" in err and "needed by stage" in err


@pytest.mark.parametrize(
    "argv,match",
    [
        (["partition", "--stages", "4"], "give a profile file, or both --layers"),
        (["partition", "--layers", "3", "--layer-cost", "1", "--stages", "4"], "--stages must be <="),
        (["partition", "--layers", "8", "--layer-cost", "0", "--stages", "4"], "--layer-cost must be > 0"),
        (["partition", "/nonexistent.csv", "--stages", "2"], "does not exist"),
        (["partition", "--layers", "8", "--layer-cost", "1", "--stages", "2", "--schedule", "nope"],
         "schedule must be one of"),
        (["partition", "--layers", "4", "--layer-cost", "2", "--layer-params", "1e307", "--optimizer", "1000",
          "--stages", "2"], "layer bytes add up past the largest float"),
        (["partition", "--layers", "4", "--layer-cost", "1e307", "--stages", "2"], "makespan overflows"),
    ],
)
def test_bad_input_exits_2(run_cli, argv, match):
    status, _, err = run_cli(*argv)
    assert status == 2
    assert match in err
    assert err.count("\n") == 1


def test_argparse_errors_exit_2(capsys):
    with pytest.raises(SystemExit) as caught:
        main(["partition", "--layers", "8", "--layer-cost", "1", "--stages", "2", "--memory", "lots"])
    assert caught.value.code == 2


def test_virtual_stages(run_cli, tmp_path):
    path = tmp_path / "vision.json"
    path.write_text(json.dumps([{"forward": 40 / 3, "name": "vision"}]
                               + [{"forward": 2 / 3, "name": f"blocks.{i}"} for i in range(30)]))
    # --stages counts the stages (chunks) as in simulate: 8 chunks on 4 ranks
    status, out, _ = run_cli("partition", str(path), "--stages", "8", "--virtual-stages", "2", "--json")
    assert status == 0
    payload = json.loads(out)
    assert len(payload["placement"]) == 8
    assert payload["max_load"] == pytest.approx(payload["lower_bound"])
    status, out, _ = run_cli("partition", str(path), "--stages", "8", "--virtual-stages", "2")
    assert status == 0 and "rank loads" in out and "into 8 chunks on 4 ranks" in out
    status, _, err = run_cli("partition", str(path), "--stages", "7", "--virtual-stages", "2")
    assert status == 2 and "must fill the ranks evenly" in err
