"""Issue 24 item 8: the spec verbs share one vocabulary (--tp, --mfu 0.4|40%, --recompute reference)."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

RunCli = Callable[..., tuple[int, str, str]]


def test_mfu_as_a_percentage_or_a_fraction_gives_the_same_profile(run_cli: RunCli) -> None:
    _, fraction, _ = run_cli("model", "--preset", "pi0", "--mfu", "0.4", "--json")
    _, percent, _ = run_cli("model", "--preset", "pi0", "--mfu", "40%", "--json")
    assert json.loads(fraction)["layers"] == json.loads(percent)["layers"]


def test_mfu_forty_message(capsys: pytest.CaptureFixture[str]) -> None:
    from pipeplan.cli import main

    with pytest.raises(SystemExit):
        main(["plan", "--preset", "pi0", "--gpus", "8", "--global-batch", "64", "--mfu", "40"])
    err = capsys.readouterr().err
    assert "--mfu 40 is above 1: it is a fraction, write 0.4 or 40%" in err and "achievable_fraction" not in err


@pytest.mark.parametrize(("argv", "line"), [
    ("model --preset pi0 --tensor-parallel 2", "argument --tensor-parallel: was renamed --tp"),
    ("partition --stages 4 --preset pi0 --tensor-parallel 2", "argument --tensor-parallel: was renamed --tp"),
    ("run --checkpoint", "argument --checkpoint: was renamed --recompute full"),
])
def test_an_old_spelling_names_its_new_flag(argv: str, line: str, capsys: pytest.CaptureFixture[str]) -> None:
    from pipeplan.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(argv.split())
    assert exit_info.value.code == 2
    assert line in capsys.readouterr().err


def test_memory_needs_a_unit(capsys: pytest.CaptureFixture[str]) -> None:
    # issue 24: `--memory 80` meant 80 bytes ("no plan fits 8e-08 GB per GPU")
    from pipeplan.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(["plan", "--preset", "pi0", "--gpus", "8", "--global-batch", "64", "--memory", "80"])
    assert exit_info.value.code == 2
    assert "--memory 80 has no unit: write 80GiB (2^30 bytes) or 80GB (10^9 bytes)" in capsys.readouterr().err


def test_recompute_defaults_to_the_reference_recipe(run_cli: RunCli) -> None:
    # openpi's reference trains pi0 with full remat on every module (ModelSpec.training, models/training.py)
    _, default, _ = run_cli("model", "--preset", "pi0", "--json")
    _, full, _ = run_cli("model", "--preset", "pi0", "--recompute", "full", "--json")
    _, none, _ = run_cli("model", "--preset", "pi0", "--recompute", "none", "--json")
    from pipeplan import presets

    training = presets.get("pi0").training
    assert training is not None and training.recompute
    named = set(training.recompute)
    rows = zip(json.loads(default)["layers"], json.loads(full)["layers"], json.loads(none)["layers"])
    checked = 0
    for mine, all_full, all_none in rows:
        module = mine["name"].split(".")[0]
        if "+" in module:  # a layer two modules share (pi0's joint attention): checked through its parts' rows
            continue
        want = all_full if training.mode_of(module) == "full" else all_none
        assert mine == want, module
        checked += module in named
    assert checked > 0


def test_tp_splits_the_layers(run_cli: RunCli) -> None:
    _, one, _ = run_cli("model", "--preset", "openvla-7b", "--json")
    _, two, _ = run_cli("model", "--preset", "openvla-7b", "--tp", "2", "--json")
    params = lambda text: sum(layer["params"] for layer in json.loads(text)["layers"])  # noqa: E731
    assert params(two) < params(one)
