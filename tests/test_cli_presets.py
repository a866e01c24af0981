"""``pipeplan presets``, ``pipeplan model`` and ``pipeplan partition --preset``."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from pipeplan.cli import main
from pipeplan.layers import LayerProfile


def test_presets_table_and_json(capsys):
    assert main(["presets"]) == 0
    out = capsys.readouterr().out
    for name in ("pi0", "gr00t-n1", "driving-6cam", "llm (frozen)"):
        assert name in out
    assert main(["presets", "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    pi0 = next(p for p in payload if p["name"] == "pi0")
    assert pi0["parameters"] == sum(m["parameters"] for m in pi0["modules"])
    assert {m["name"]: m["tokens"] for m in pi0["modules"]}["llm"] == 816


def test_model_writes_a_profile_partition_reads(tmp_path, capsys):
    out = tmp_path / "prof.json"
    assert main(["model", "--preset", "pi0", "--gpu", "h100-80g", "--micro-batch-size", "4", "--out", str(out)]) == 0
    captured = capsys.readouterr()
    assert "llm+action_expert.0" in captured.out and captured.err == f"wrote {out}\n"
    profile = LayerProfile.from_file(out)
    assert profile.num_layers == 1 + 27 + 1 + 1 + 1 + 18 + 1
    assert main(["partition", str(out), "--stages", "4", "--json"]) == 0
    from_file = json.loads(capsys.readouterr().out)
    assert main(["partition", "--preset", "pi0", "--stages", "4", "--gpu", "h100-80g",
                 "--micro-batch-size", "4", "--json"]) == 0
    direct = json.loads(capsys.readouterr().out)
    assert direct["layers_per_stage"] == from_file["layers_per_stage"]
    assert sum(direct["layers_per_stage"]) == profile.num_layers


def test_model_json_by_module_spec_file_and_freeze(capsys, tmp_path):
    assert main(["model", "--spec", "examples/model_spec.json", "--json"]) == 0
    layers = json.loads(capsys.readouterr().out)["layers"]
    assert layers[0]["backward"] == 0  # the example's vision encoder is frozen: forward only
    assert main(["model", "--preset", "gr00t-n1", "--unfreeze", "llm", "--by-module"]) == 0
    assert "llm" in capsys.readouterr().out
    csv = tmp_path / "p.csv"
    assert main(["model", "--preset", "dumbbell", "--out", str(csv), "--recompute", "full"]) == 0
    assert LayerProfile.from_file(csv).num_layers == 1 + 8 + 32 + 4 + 1


@pytest.mark.parametrize("argv, message", [
    (["model", "--preset", "pi1"], "--preset 'pi1' is not one of pi0, pi0.5"),
    (["model", "--preset", "pi0", "--gpu", "v100"], "--gpu 'v100' is not one of a100-40g"),
    (["model", "--preset", "pi0", "--micro-batch-size", "0"], "--micro-batch-size must be >= 1, got 0"),
    (["model"], "give --preset"),
    (["model", "--preset", "pi0", "--spec", "examples/model_spec.json"], "not both"),
    (["model", "--preset", "pi0", "--freeze", "eyes"], "has no module 'eyes'"),
    (["partition", "--preset", "cogact", "--layers", "4", "--layer-cost", "1", "--stages", "2"], "not several"),
])
def test_bad_input_is_one_line_and_exit_2(argv, message):
    result = subprocess.run([sys.executable, "-m", "pipeplan", *argv], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.stderr


@pytest.mark.parametrize("argv, message", [
    (["model", "--preset", "pi0", "--freeze", "vision,,llm"], "--freeze[1] is empty in 'vision,,llm' (3 entries, from 0)"),
    (["model", "--preset", "pi0", "--unfreeze", ""], "--unfreeze[0] is empty in '' (1 entries, from 0)"),
    (["model", "--preset", "pi0", "--freeze", "llm", "--unfreeze", "llm"], "'llm' is given to both"),
    (["model", "--preset", "pi0", "--sequence-parallel", "on"], "--sequence-parallel does not apply"),
    (["partition", "--preset", "pi0", "--stages", "2", "--sequence-parallel", "on"], "--sequence-parallel does not apply"),
])
def test_spec_flags_that_are_empty_contradictory_or_do_not_apply_are_refused(argv, message, capsys):
    assert main(argv) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], lines


@pytest.mark.parametrize("make, reason", [
    (lambda path: path.mkdir(), "is a directory"),
    (lambda path: path.write_bytes(b""), "is empty"),
    (lambda path: path.write_bytes(b"\xff\xfe{}"), "is not UTF-8 text"),
])
def test_spec_file_errors_name_the_real_reason(make, reason, tmp_path, capsys):
    spec = tmp_path / "spec.json"
    make(spec)
    assert main(["model", "--spec", str(spec)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and reason in lines[0], lines
