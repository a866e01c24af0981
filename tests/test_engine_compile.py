"""``--compile on|off``: torch.compile priced for torchtitan and plain torch, refused for Megatron-LM and DeepSpeed.

The eager factor (TORCHTITAN_EAGER_FACTORS) divided by the compile speedup fitted to torchtitan's published pair
(benchmarks/torchtitan_compile.py), never below the device's fused kernels; written to and read back from a
torchtitan config.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from pipeplan import engines
from pipeplan.engines._eager import TORCHTITAN_COMPILE_SPEEDUP, TORCHTITAN_EAGER_FACTORS
from pipeplan.engines.torchtitan_config import read_torchtitan_config

PLAN = ["plan", "--preset", "gpt-1.5b", "--gpus", "8", "--global-batch", "32", "--gpu", "a100-80g", "--tp", "1",
        "--pp", "1", "--dp-modes", "fsdp", "--micro-batch-size", "2", "--top", "1"]


@pytest.mark.parametrize("name", ["torchtitan", "torch"])
def test_compile_divides_the_eager_factor_by_the_speedup_never_below_one(name: str) -> None:
    engine = engines.get(name)
    eager = TORCHTITAN_EAGER_FACTORS["a100-80g"]
    assert engine.compute_factor("a100-80g") == eager == engine.compute_factor("a100-80g", {"compile": "off"})
    assert engine.compute_factor("a100-80g", {"compile": "on"}) == pytest.approx(eager / TORCHTITAN_COMPILE_SPEEDUP)
    assert 1.0 < engine.compute_factor("a100-80g", {"compile": "on"}) < eager
    # a device with no eager factor fitted: its kernel model is fused already, compile changes nothing
    assert engine.compute_factor("h100-80g", {"compile": "on"}) == 1.0 == engine.compute_factor("h100-80g")
    assert engine.knobs.get("compile").default == "off"


def _step_ms(run_cli, *extra: str) -> float:
    status, out, err = run_cli(*PLAN, *extra, "--json")
    assert status == 0, err
    plan = json.loads(out)["plans"][0]
    return plan["step_time"] * 1e3 * plan["time_unit_seconds"]


@pytest.mark.parametrize("name", ["torchtitan", "torch"])
def test_compile_on_prices_a_faster_step_and_says_so(run_cli, name: str) -> None:
    off = _step_ms(run_cli, "--engine", name)
    assert _step_ms(run_cli, "--engine", name, "--compile", "off") == off
    on = _step_ms(run_cli, "--engine", name, "--compile", "on")
    assert on < off
    status, out, err = run_cli(*PLAN, "--engine", name, "--compile", "on", "--json")
    assumptions = json.loads(out)["assumptions"]
    assert assumptions["compile"] == "on (given: --compile)" and "torch.compile" in assumptions["kernels"]
    status, out, err = run_cli(*PLAN, "--engine", name, "--json")
    assert json.loads(out)["assumptions"]["compile"] == "off (assumed: give --compile to pin it)"


@pytest.mark.parametrize("engine", [None, "megatron", "deepspeed"])
def test_engines_with_fused_kernels_refuse_compile_in_one_line(run_cli, engine: str | None) -> None:
    pinned = ["--engine", engine] if engine else []
    status, out, err = run_cli(*PLAN, *pinned, "--compile", "on")
    assert status == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert f"--compile: {engine or 'megatron'} has no such knob: its kernels are fused already" in err


def test_a_value_compile_does_not_take_is_one_line(run_cli) -> None:
    status, _, err = run_cli(*PLAN, "--engine", "torchtitan", "--compile", "yes")
    assert status == 2 and "--compile for torchtitan must be one of on, model, off, got 'yes'" in err


@pytest.mark.parametrize("target", ["torchtitan", "torchtitan-toml"])
@pytest.mark.parametrize("value", ["on", "off"])
def test_plan_export_then_check_gives_the_same_step_with_compile(run_cli, tmp_path: Path, target: str,
                                                                 value: str) -> None:
    status, out, err = run_cli(*PLAN, "--engine", "torchtitan", "--compile", value, "--export", target, "--json")
    assert status == 0, err
    planned = json.loads(out)["export"]["plan"]
    status, _, err = run_cli(*PLAN, "--engine", "torchtitan", "--compile", value, "--export", target, "--out",
                             str(tmp_path / "t"))
    assert status == 0, err
    text = "\n".join(path.read_text() for path in (tmp_path / "t").iterdir())
    assert ("COMPILE = True" in text or "enable = true" in text) == (value == "on")
    status, out, err = run_cli("check", "--torchtitan-config", str(tmp_path / "t"), "--preset", "gpt-1.5b", "--gpus", "8",
                               "--global-batch", "32", "--gpu", "a100-80g", "--top", "0", "--json")
    assert status == 0, err
    checked = json.loads(out)
    step = planned["step_time"] * 1e3 * planned["time_unit_seconds"]
    assert checked["predicted"]["step_ms"] == pytest.approx(step, rel=1e-12)
    assert checked["config"]["settings"]["compile"]["value"] == value


def test_the_reader_reads_compile_from_toml_and_python_configs(tmp_path: Path) -> None:
    toml = tmp_path / "train.toml"
    toml.write_text("[parallelism]\ntensor_parallel_degree = 1\n[compile]\nenable = true\n")
    config = read_torchtitan_config(toml)
    assert config.value("compile") == "on" and config.source_of("compile") == "train.toml: [compile] enable = true"
    toml.write_text("[parallelism]\ntensor_parallel_degree = 1\n")
    assert read_torchtitan_config(toml).value("compile") == "off"  # the release's default, named as such
    assert "torchtitan default" in read_torchtitan_config(toml).source_of("compile")
    python = tmp_path / "config.py"
    python.write_text(textwrap.dedent("""\
        def config():
            c = Trainer.Config(parallelism=ParallelismConfig(tensor_parallel_degree=2))
            c.compile.enable = True
            return c
    """))
    assert read_torchtitan_config(python).value("compile") == "on"
    python.write_text("c = Trainer.Config(compile=CompileConfig(enable=False), "
                      "parallelism=ParallelismConfig(tensor_parallel_degree=2))\n")
    assert read_torchtitan_config(python).value("compile") == "off"


def test_checks_best_plans_keep_the_files_compile(run_cli) -> None:
    """examples/check/llama3_8b.toml sets [compile] enable = true: read as --compile on, and its best plans' files in
    torchtitan set it again."""
    example = Path(__file__).resolve().parents[1] / "examples" / "check" / "llama3_8b.toml"
    status, out, err = run_cli("check", "--torchtitan-config", str(example), "--top", "1", "--json")
    assert status == 0, err
    data = json.loads(out)
    assert data["config"]["pinned"]["compile"]["value"] == "on"
    assert "compile.enable = true" not in " ".join(data["config"]["ignored"])
    files = data["best"]["same_engine"][0]["files"]
    assert "COMPILE = True" in files["torchtitan_config.py"]


@pytest.mark.parametrize("value", ["on", "off"])
def test_partition_export_writes_the_compile_it_priced(run_cli, value: str) -> None:
    status, out, err = run_cli("partition", "--preset", "gpt-1.5b", "--stages", "2", "--engine", "torchtitan",
                               "--compile", value, "--export", "torchtitan-toml", "--json")
    assert status == 0, err
    text = json.loads(out)["export"]["files"]["torchtitan.toml"]
    assert f"enable = {'true' if value == 'on' else 'false'}" in text.split("[compile]")[1]


@pytest.mark.parametrize("value", ["on", "off"])
def test_plan_torch_export_then_check_gives_the_same_step_with_compile(run_cli, tmp_path: Path, value: str) -> None:
    plan = [*PLAN, "--pp", "2", "--schedules", "1f1b", "--engine", "torch", "--compile", value, "--export", "torch"]
    status, out, err = run_cli(*plan, "--json")
    assert status == 0, err
    planned = json.loads(out)["export"]["plan"]
    status, _, err = run_cli(*plan, "--out", str(tmp_path / "t"))
    assert status == 0, err
    assert f"COMPILE = {value == 'on'}" in (tmp_path / "t" / "split_spec.py").read_text()
    status, out, err = run_cli("check", "--torch-export", str(tmp_path / "t"), "--preset", "gpt-1.5b", "--gpus", "8",
                               "--global-batch", "32", "--gpu", "a100-80g", "--top", "0", "--json")
    assert status == 0, err
    checked = json.loads(out)
    assert checked["config"]["settings"]["compile"]["value"] == value
    step = planned["step_time"] * 1e3 * planned["time_unit_seconds"]
    assert checked["predicted"]["step_ms"] == pytest.approx(step, rel=1e-12)


@pytest.mark.parametrize("verb", [["model"], ["simulate", "--stages", "2"]])
def test_model_and_simulate_name_the_device_in_the_kernels_line(run_cli, verb: list[str]) -> None:
    status, out, err = run_cli(*verb, "--preset", "gpt-1.5b", "--gpu", "a100-80g", "--engine", "torchtitan",
                               "--compile", "on", "--json")
    assert status == 0, err
    kernels = json.loads(out)["assumptions"]["kernels"]
    assert kernels.startswith("torchtitan's kernels on a100-80g") and "no eager factor" not in kernels
