"""Issue 24, the first hour with profiles: the issue's own commands, small.

Item 1: a measured profile flows into ``plan`` as into ``simulate`` and ``partition``
(one rule for what a profile may hold; a bad file names the file, the layer and the
field). Item 6: profiling on a shared machine. Item 7: ``model --out`` and
``profile --out`` keep a profile of another origin, ``run --profile`` says which model
it built and what made the profile, a missing ``--spec`` says where it looked.
Items 8 and 11 (run and profile's part): ``--recompute``, ``-m`` defaults, ``--width``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pipeplan.calibration import Calibration
from pipeplan.cli import main
from pipeplan.errors import InvalidInputError
from pipeplan.layers import LayerProfile
from pipeplan.schedules import build_schedule, schedule_info
from pipeplan.simulate import simulate

#: a measured split whose halves each cost more than the fused backward (W > B, I + W > B)
SPLIT = dict(forward=[100.0] * 4, backward=[200.0] * 4, weight=[300.0, 260.0, 280.0, 240.0],
             backward_input=[0.0, 150.0, 140.0, 160.0], names=["vit", "block.0", "block.1", "head"],
             activation_bytes=[1e6] * 4, params=[1e6] * 4)


def _out(capsys: pytest.CaptureFixture[str]) -> Any:
    return json.loads(capsys.readouterr().out)


# ---------------------------------------------------------------- item 1
@pytest.mark.timeout(120)
def test_the_issue_profile_then_plan_flow(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``pipeplan profile --model dumbbell --nproc 2 --out prof.json`` then ``plan --profile prof.json ...``."""
    profile = tmp_path / "prof.json"
    assert main(["profile", "--model", "dumbbell", "--nproc", "2", "--layers", "2", "--repeats", "3",
                 "--warmup", "0", "--statistic", "min", "--out", str(profile)]) == 0
    capsys.readouterr()
    measured = LayerProfile.from_file(profile)
    assert measured.backward_input is not None
    # what the user's file held: a split backward half that costs more than the fused B, on a middle layer
    payload = json.loads(profile.read_text())
    payload["layers"][1]["weight"] = 1.5 * payload["layers"][1]["backward"]
    profile.write_text(json.dumps(payload))
    plan = ["plan", "--profile", str(profile), "--gpus", "8", "--global-batch", "64", "--memory", "40GB"]
    assert main(plan) == 0
    assert "best plan" in capsys.readouterr().out
    assert main(["simulate", "--profile", str(profile), "--stages", "2", "--schedule", "zb-h1", "-m", "4"]) == 0
    assert main(["partition", str(profile), "--stages", "2"]) == 0


def test_plan_charges_a_measured_split_as_simulate_does(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "split.json"
    profile = LayerProfile(**SPLIT)  # type: ignore[arg-type]
    profile.to_file(path)
    assert main(["plan", "--profile", str(path), "--gpus", "2", "--pp", "2", "--global-batch", "8",
                 "--memory", "40GB", "--schedules", "zb-h1", "--partition", "2,2", "--dp-modes", "ddp",
                 "--json"]) == 0
    best = _out(capsys)["plans"][0]
    assert best["schedule"] == "zb-h1" and best["layers_per_stage"] == [2, 2]
    costs = profile.stage_costs([2, 2])
    expected = simulate(build_schedule("zb-h1", num_stages=2, num_microbatches=best["microbatches"]), costs)
    # the planner's messages (a few µs on its link) are all that differ from the simulator without any
    assert best["pipeline_time"] == pytest.approx(expected.makespan, rel=1e-4)
    # and I, W as measured are what it ran: with I = B - W (the unmeasured convention) it would be far off
    assert costs.duration("W", 1, 0) == 520.0 and costs.duration("I", 1, 0) == 300.0 > costs.backward[1] - 520.0
    assert main(["simulate", "--profile", str(path), "--partition", "2,2", "--schedule", "zb-h1",
                 "-m", str(best["microbatches"]), "--json"]) == 0
    assert _out(capsys)["makespan"] == pytest.approx(expected.makespan)


@pytest.mark.parametrize("verb", [
    ["plan", "--gpus", "2", "--global-batch", "4", "--memory", "40GB", "--profile"],
    ["simulate", "--stages", "2", "--profile"],
    ["partition", "--stages", "2"],
])
def test_a_truly_invalid_profile_names_file_layer_and_field(tmp_path: Path, capfd: pytest.CaptureFixture[str],
                                                            verb: list[str]) -> None:
    path = tmp_path / "bad.csv"
    path.write_text("name,forward,backward,weight\nvit,1,2,1\nblock.0,1,2,3\n")  # W > B and no measured I
    assert main([*verb[:-1], verb[-1], str(path)] if verb[-1] == "--profile" else [verb[0], str(path), *verb[1:]]) == 2
    err = capfd.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"profile file {str(path)!r}, layer 1 (block.0): weight = 3.0 must be <= backward = 2.0" in err


# ---------------------------------------------------------------- item 6
def test_an_unbounded_bandwidth_says_why() -> None:
    latency_bound = Calibration(latency=0.148, bandwidth=float("inf"), samples=((4.0, 0.15), (16384.0, 0.148)))
    assert latency_bound.describe_link() == (
        "latency 0.148 ms, bandwidth unbounded (latency-bound at these sizes: messages of 4 B to 16 KiB "
        "took no measurably longer than the smallest)")
    assert Calibration(latency=0.1, bandwidth=25e6).describe_link() == "latency 0.100 ms, bandwidth 25 GB/s"


# ---------------------------------------------------------------- item 7
def test_model_out_keeps_a_measured_profile(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "prof.json"
    LayerProfile(**SPLIT, measurement={"source": "measured", "model": "dumbbell", "layers": 2,  # type: ignore[arg-type]
                                       "repeats": 3}).to_file(path)
    before = path.read_text()
    assert main(["model", "--preset", "pi0", "--out", str(path)]) == 2
    err = capfd.readouterr().err
    assert err.count("\n") == 1 and str(path) in err
    assert "holds a profile measured by pipeplan profile (--model dumbbell --layers 2)" in err and "--force" in err
    assert path.read_text() == before
    assert main(["model", "--preset", "pi0", "--out", str(path), "--force"]) == 0
    assert capfd.readouterr().err == f"wrote {path}\n"
    shapes = LayerProfile.from_file(path)
    assert shapes.measurement["source"] == "shapes" and shapes.measurement["preset"] == "pi0"
    # and back: profile --out refuses to replace the shapes file, before measuring anything
    assert main(["profile", "--layers", "1", "--nproc", "1", "--out", str(path)]) == 2
    assert "holds a profile computed from shapes by pipeplan model (pi0 on h100-80g)" in capfd.readouterr().err


def test_run_refuses_another_models_measured_profile_of_the_same_depth() -> None:
    # newcomer walk: `run --profile measured.json` (of --model dumbbell) built the default vla model and ran
    pytest.importorskip("torch")
    from pipeplan.runtime.loop import check_profile_fits

    notes = {"source": "measured", "model": "dumbbell", "layers": 2}
    profile = LayerProfile(**SPLIT, measurement=notes)  # type: ignore[arg-type]
    check_profile_fits(profile, 4, model="--model dumbbell --layers 2")  # its own model: accepted
    with pytest.raises(InvalidInputError, match=r"but this run builds --model vla --layers 2: its times are another "
                                                r"model's; run --model dumbbell --layers 2"):
        check_profile_fits(profile, 4, model="--model vla --layers 2")
    with pytest.raises(InvalidInputError, match="builds --model dumbbell --layers 3"):
        check_profile_fits(profile, 4, model="--model dumbbell --layers 3")
    # second walk: a profile from shapes cut to the run's depth ran and predicted -76%
    shapes = LayerProfile(**SPLIT, measurement={"source": "shapes", "model": "dumbbell"})  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="computed from shapes .* not a model pipeplan run builds"):
        check_profile_fits(shapes, 4, model="--model dumbbell --layers 2")


def test_run_names_the_model_it_builds_and_the_profile_origin(tmp_path: Path, capfd: pytest.CaptureFixture[str],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    import pipeplan.runtime

    monkeypatch.setattr(pipeplan.runtime, "spawn", lambda *a, **k: pytest.fail("spawned for a bad profile"))
    path = tmp_path / "prof.json"
    assert main(["model", "--preset", "pi0", "--out", str(path)]) == 0
    capfd.readouterr()
    assert main(["run", "--profile", str(path), "--model", "dumbbell"]) == 2
    err = capfd.readouterr().err
    assert err.count("\n") == 1
    assert f"--profile {str(path)!r} has 50 layers, computed from shapes by pipeplan model (pi0 on h100-80g); " \
           "the model this run builds (--model dumbbell --layers 8) has 10: measure this model " \
           "(pipeplan profile --model dumbbell --layers 8 --out PROFILE)" in err


def test_a_missing_spec_says_where_it_looked(tmp_path: Path, capfd: pytest.CaptureFixture[str],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["model", "--spec", "examples/model_spec.json"]) == 2
    err = capfd.readouterr().err
    assert err.count("\n") == 1
    assert f"no file at {tmp_path / 'examples' / 'model_spec.json'}" in err
    assert "the example spec is examples/model_spec.json in the pipeplan repository" in err
    assert "pipeplan presets" in err


# ---------------------------------------------------------- items 8 and 11
@pytest.mark.parametrize("argv, expected", [
    (["--nproc", "4", "--dp", "2"], 4),    # 2 × the pipeline ranks, nproc / dp
    (["--nproc", "4"], 8),
    (["--nproc", "4", "-m", "3"], 3),
])
def test_run_microbatches_default_to_twice_the_pipeline_ranks(monkeypatch: pytest.MonkeyPatch,
                                                              argv: list[str], expected: int) -> None:
    pytest.importorskip("torch")
    import pipeplan.runtime

    seen: dict[str, Any] = {}

    def capture(_work: Any, _world: int, config: dict[str, Any], **_options: Any) -> None:
        seen.update(config)
        raise SystemExit(0)

    monkeypatch.setattr(pipeplan.runtime, "spawn", capture)
    with pytest.raises(SystemExit):
        main(["run", "--layers", "4", *argv])
    assert seen["microbatches"] == expected and seen["checkpoint"] is False


def test_profile_microbatches_default_to_twice_nproc(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    import pipeplan.runtime.loop

    seen: dict[str, Any] = {}

    def capture(*_args: Any, **options: Any) -> None:
        seen.update(options)
        raise SystemExit(0)

    monkeypatch.setattr(pipeplan.runtime.loop, "profile_model", capture)
    with pytest.raises(SystemExit):
        main(["profile", "--nproc", "4", "--out", str(tmp_path / "p.json")])
    assert seen["microbatches"] == 8 and seen["batch_size"] == 16


@pytest.mark.parametrize("argv, expected", [
    (["--json", "--width", "50"], "--width does not apply with --json"),
    (["--checkpoint"], "--checkpoint"),
    (["--recompute", "selective"], "invalid choice: 'selective'"),
])
def test_run_refuses_with_one_line(capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                                   argv: list[str], expected: str) -> None:
    pytest.importorskip("torch")
    import pipeplan.runtime

    monkeypatch.setattr(pipeplan.runtime, "spawn", lambda *a, **k: pytest.fail("spawned for a bad command"))
    with pytest.raises(SystemExit) as stop:
        raise SystemExit(main(["run", "--layers", "2", *argv]))
    assert stop.value.code == 2
    err = capfd.readouterr().err
    assert expected in err and err.count("\n") == 1


def test_the_planner_bounds_hold_when_a_measured_split_is_cheaper_than_b(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # I + W below B (a hand-written or noisy file): a split schedule then beats the fused bound F + B
    path = tmp_path / "cheap_split.json"
    LayerProfile(**{**SPLIT, "weight": [200.0, 40.0, 40.0, 40.0],  # type: ignore[arg-type]
                    "backward_input": [0.0, 40.0, 40.0, 40.0]}).to_file(path)
    assert main(["plan", "--profile", str(path), "--gpus", "2", "--pp", "2", "--global-batch", "8",
                 "--memory", "40GB", "--dp-modes", "ddp", "--json"]) == 0
    result = _out(capsys)
    best = result["plans"][0]
    assert schedule_info(best["schedule"]).split_backward and result["lower_bound"] <= best["step_time"]
