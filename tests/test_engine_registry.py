"""engines/: the registry, the records agreeing with their exports, and a new engine added as one module."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pipeplan import data_parallel, engines
from pipeplan.engines import Engine, LayerName
from pipeplan.errors import InvalidInputError
from pipeplan.plan import Plan
from pipeplan.schedules import SCHEDULES, schedule_info

SRC = Path(__file__).resolve().parent.parent / "src"


def test_the_registry_lists_every_engine_and_what_export_takes():
    assert engines.names() == ("megatron", "deepspeed", "torchtitan", "torch")
    assert engines.targets() == ("megatron", "deepspeed", "torchtitan", "torch", "torchtitan-toml")
    assert engines.by_target("torchtitan-toml") is engines.get("torchtitan")
    for name in engines.names():
        engine = engines.get(name)
        assert isinstance(engine, Engine) and engine.name == name
        assert engine.files.targets[0] == name  # an engine writes its own name first


@pytest.mark.parametrize("call", [engines.get, engines.by_target])
def test_an_unknown_engine_is_one_line_naming_the_known_ones(call):
    with pytest.raises(InvalidInputError, match=r"engine must be one of megatron, deepspeed, .*got 'jax'"):
        call("jax")


def test_a_target_the_engine_does_not_write_is_refused():
    with pytest.raises(InvalidInputError, match="deepspeed writes deepspeed, not 'torchtitan-toml'"):
        engines.get("deepspeed").export([4, 4], "torchtitan-toml")


def _gpt(num_layers: int) -> list[LayerName]:
    """A GPT's layer names (every engine has a port of it): embedding, decoder layers, loss."""
    return ([LayerName(("embedding",), "embedding")] + [LayerName((f"decoder.layers.{i}",), "decoder")
                                                         for i in range(num_layers - 2)]
            + [LayerName(("output_layer",), "loss")])


def _plan(schedule: str, pp: int, dp_mode: str) -> Plan:
    """A plan of ``schedule`` on ``pp`` ranks (two chunks each in a loop or a V), 4 layers per stage."""
    info = schedule_info(schedule)
    placement = info.placement(pp, 2)
    return Plan(pp=pp, dp=4, layers_per_stage=(4,) * len(placement), placement=placement, schedule=schedule,
                num_microbatches=8, dp_mode=dp_mode)


@pytest.mark.parametrize("name", engines.names())
@pytest.mark.parametrize("pp", [1, 2])
def test_each_record_says_which_data_parallel_modes_its_export_runs(name, pp):
    engine = engines.get(name)
    listed = engine.runs.dp_modes_with_pipeline if pp > 1 else engine.runs.dp_modes_without_pipeline
    for mode in data_parallel.names():
        plan = _plan("1f1b", pp, mode)
        refusal = engine.refusal(plan, _gpt(plan.num_layers))
        assert (refusal == "") == (listed is None or mode in listed), (mode, refusal)


@pytest.mark.parametrize("name", engines.names())
def test_each_record_says_which_schedules_its_export_runs(name):
    engine = engines.get(name)
    fixed = [schedule for schedule in SCHEDULES if not schedule_info(schedule).cost_aware
             and schedule != "dual-rate"]  # dual-rate is its own runtime's, never exported
    for schedule in fixed:
        plan = _plan(schedule, 2, "ddp")
        refusal = engine.refusal(plan, _gpt(plan.num_layers))
        runs = engine.runs.schedules is None or schedule in engine.runs.schedules
        assert (refusal == "") == runs, (schedule, refusal)


def test_a_refused_export_carries_what_the_engine_gives_instead():
    plan = Plan(pp=2, dp=1, layers_per_stage=(2, 2), placement=(0, 1), num_microbatches=4,
                layer_names=("vision.0", "vision.1", "llm.0", "llm.1"))
    names = [LayerName((f"vision.{i}",), "other") for i in range(2)] + [LayerName((f"llm.{i}",), "decoder")
                                                                         for i in range(2)]
    exported = engines.plan_exports(plan, names)
    assert exported["megatron"]["error"].startswith("Megatron-LM has no port of this model")
    assert exported["megatron"]["mapping"].splitlines()[1] == "0\t0\t0\tother\tvision.0"
    assert "error" not in exported["torch"]
    gpt = engines.plan_exports(_plan("zb-h1", 2, "ddp"), _gpt(4))  # refused for its schedule, not its model
    assert set(gpt["megatron"]) == {"error"}


# ------------------------------------------------------------------ a new engine, added as one module
_FAKE = '''"""A fake engine for tests/test_engine_registry.py: one file with the plan's layers per stage."""

from __future__ import annotations

from collections.abc import Sequence

from ..plan import Plan
from ..schedule import Schedule
from ._common import ExportFile
from ._names import LayerName
from .record import Engine, Files, Runs


def _write(plan: Plan, target: str, names: Sequence[LayerName] | None, *, schedule: Schedule | None,
           gpus_per_node: int) -> list[ExportFile]:
    return [ExportFile("fake.txt", f"{list(plan.layers_per_stage)} on {plan.pp} ranks\\n")]


ENGINE = Engine("fake", Runs(schedules=("1f1b",)), Files(targets=("fake",), write=_write))
'''


@pytest.fixture(scope="module")
def with_fake(tmp_path_factory) -> Path:
    """A copy of src/ with the fake engine: its module, its import and its one line in the registry."""
    root = tmp_path_factory.mktemp("src")
    shutil.copytree(SRC / "pipeplan", root / "pipeplan", ignore=shutil.ignore_patterns("__pycache__"))
    package = root / "pipeplan" / "engines"
    (package / "fake.py").write_text(_FAKE)
    registry = (package / "__init__.py").read_text()
    for old, new in (("from . import deepspeed, megatron, pipelining, torchtitan\n",
                      "from . import deepspeed, fake, megatron, pipelining, torchtitan\n"),
                     ("    pipelining.ENGINE,\n)", "    pipelining.ENGINE,\n    fake.ENGINE,\n)")):
        assert registry.count(old) == 1, old
        registry = registry.replace(old, new)
    (package / "__init__.py").write_text(registry)
    return root


def _pipeplan(src: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(src))
    return subprocess.run([sys.executable, "-m", "pipeplan", *argv], capture_output=True, text=True, env=env,
                          timeout=300)


_PLAN = ("plan", "--preset", "gpt-1.5b", "--gpus", "4", "--global-batch", "16", "--pp", "2",
         "--micro-batch-size", "2", "--schedules", "1f1b,zb-h1", "--top", "3")


def test_a_new_engine_is_one_module_and_one_registry_line(with_fake):
    result = _pipeplan(with_fake, *_PLAN, "--export", "fake", "--json")
    assert result.returncode == 0, result.stderr
    payload = json.loads(result.stdout)
    for entry in payload["plans"]:
        layers = entry["layers_per_stage"]
        assert entry["exports"]["fake"] == {"text": f"# ==> fake.txt <==\n{layers} on 2 ranks\n",
                                            "files": {"fake.txt": f"{layers} on 2 ranks\n"}, "notes": []}
        assert list(entry["exports"])[-1] == "fake" and "megatron" in entry["exports"]
    printed = _pipeplan(with_fake, *_PLAN, "--export", "fake")  # the fastest plan it runs, its file printed
    assert printed.returncode == 0, printed.stderr
    assert "fake (plan 1)" in printed.stdout
    assert f"{payload['plans'][0]['layers_per_stage']} on 2 ranks\n" in printed.stdout
    refused = _pipeplan(with_fake, *_PLAN, "--export", "jax")  # the choices come from the registry
    assert refused.returncode == 2
    assert "'torch', 'fake', 'torchtitan-toml')" in refused.stderr


def test_the_real_registry_has_no_fake():
    assert "fake" not in engines.targets()
