"""What the engines make of a model before any plan: a plain GPT's Megatron roles, refusals, invented paths.

* A spec with an embedding, one transformer stack and an LM head and nothing recorded (no
  ``fqn``, no ``role``: examples/gpt-6.2b.json) is a GPT to Megatron-LM (:func:`gpt_roles`).
* A refusal that depends on the model alone (Megatron-LM and a VLA) comes before the search
  (:meth:`Engine.model_refusal`, asked by ``plan``), with the export's own words.
* Paths pipeplan invents (``vision.0``) are flagged in the notes of every export that names
  modules, and in the torch export's file.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from pipeplan import engines, presets
from pipeplan.engines import gpt_roles, invented_note, layer_names_in_reference
from pipeplan.engines.megatron import megatron_model_refusal, megatron_port
from pipeplan.errors import InvalidInputError
from pipeplan.models.modules import CrossAttention, Linear, Projector
from pipeplan.models.spec import ModelSpec
from pipeplan.plan import Plan
from pipeplan.presets.reference import zero_bubble_gpt

ROOT = Path(__file__).resolve().parent.parent
PLAIN_GPT = ROOT / "examples" / "gpt-6.2b.json"


def _plain() -> ModelSpec:
    return ModelSpec.from_file(PLAIN_GPT)


def test_the_plain_gpt_example_records_no_paths_or_roles_and_is_the_presets_shape():
    spec = _plain()
    assert all(module.fqn is None and module.role is None for module in spec.modules)
    assert spec.training is None
    assert spec.module("layers").num_layers == 30  # Qi et al. 2023 Table 3: 6.2B GPT, 30 layers, hidden 4096
    assert spec.num_parameters() == zero_bubble_gpt("6.2b").num_parameters()


def test_a_plain_gpt_gets_megatrons_roles_and_keeps_invented_paths():
    spec = _plain()
    assert gpt_roles(spec) == {"embedding": "embedding", "layers": "decoder", "output_layer": "loss"}
    names = layer_names_in_reference(spec)
    assert [name.role for name in names] == ["embedding"] + ["decoder"] * 30 + ["loss"]
    assert names[1].fqns == ("layers.0",) and all(name.invented for name in names)
    assert megatron_port(spec) and megatron_model_refusal(spec) == ""


def test_what_is_not_a_plain_gpt_gets_no_roles():
    spec = _plain()
    stack = spec.module("layers")
    head = spec.module("output_layer")
    crossed = dataclasses.replace(stack, cross_attention=CrossAttention(source="embedding"))
    projector = Projector(name="projector", linears=(Linear(4096, 4096),), tokens=1024)
    variants = {
        "cross-attention": (spec.modules[0], crossed, head),
        "a fourth module": (*spec.modules[:2], projector, head),
        "no LM head": spec.modules[:2],
        "head first": (head, spec.modules[0], stack),
    }
    for what, modules in variants.items():
        other = ModelSpec("variant", tuple(modules))
        assert gpt_roles(other) is None, what
        assert "not GPT layers" in megatron_model_refusal(other), what
    for name in ("pi0", "dumbbell", "openvla-7b"):
        assert gpt_roles(presets.get(name)) is None


def test_recorded_roles_win_over_the_inferred_ones():
    spec = presets.get("gpt-1.5b")  # records roles and Megatron's paths
    names = layer_names_in_reference(spec)
    assert names[0].fqns[0] == "embedding.word_embeddings" and not any(name.invented for name in names)
    assert [n.role for n in names] == ["embedding"] + ["decoder"] * 22 + ["loss"]


def test_model_refusal_is_the_exports_own_line_and_only_megatron_refuses_a_vla():
    vla = presets.get("pi0")
    refusal = engines.get("megatron").model_refusal(vla)
    plan = Plan(pp=2, dp=1, layers_per_stage=(len(layer_names_in_reference(vla)) - 20, 20), placement=(0, 1))
    with pytest.raises(InvalidInputError) as error:
        engines.get("megatron").export(plan, names=layer_names_in_reference(vla))
    assert refusal == str(error.value) and refusal.startswith("Megatron-LM has no port of this model")
    for name in ("deepspeed", "torchtitan", "torch"):
        assert engines.get(name).model_refusal(vla) == ""
    assert engines.get("megatron").model_refusal(presets.get("gpt-1.5b")) == ""


def test_plan_refuses_a_model_megatron_cannot_run_before_searching(run_cli, monkeypatch):
    from pipeplan.cli import plan_cmd

    def no_search(*args, **kwargs):
        raise AssertionError("searched before refusing the model")

    monkeypatch.setattr(plan_cmd, "search", no_search)
    code, out, err = run_cli("plan", "--preset", "dumbbell", "--gpus", "16", "--global-batch", "128", "--tp", "2",
                             "--pp", "4", "--export", "megatron")
    assert code == 2 and out == ""
    assert err.strip().count("\n") == 0 and "not GPT layers" in err


def test_plan_json_still_gives_megatrons_refusal_and_mapping_per_plan(run_cli):
    """--json holds every engine's export of every plan: a refusal there comes with the stage → module table."""
    import json

    code, out, err = run_cli("plan", "--preset", "dumbbell", "--gpus", "8", "--global-batch", "64", "--pp", "2",
                             "--json", "--export", "megatron", "--top", "1")
    assert code == 0, err
    payload = json.loads(out)
    megatron = payload["plans"][0]["exports"]["megatron"]
    assert "not GPT layers" in megatron["error"] and megatron["mapping"].startswith("stage\trank")
    # the export section claims no plan the engine would run instead: it runs none of this model
    assert payload["export"]["plan"] is None and payload["export"]["plan_index"] is None
    assert "not GPT layers" in payload["export"]["why"]


def test_plan_exports_a_plain_gpt_spec_to_megatron(run_cli, tmp_path):
    code, out, err = run_cli("plan", "--spec", str(PLAIN_GPT), "--gpus", "16", "--global-batch", "128", "--tp", "2",
                             "--pp", "4", "--export", "megatron", "--out", str(tmp_path / "out"))
    assert code == 0, err
    line = (tmp_path / "out" / "megatron_args.sh").read_text()
    assert "--num-layers 30" in line and "--tensor-model-parallel-size 2" in line
    assert "--pipeline-model-parallel-size 4" in line
    assert "invented" not in out  # Megatron's flags name no module


def test_invented_paths_are_noted_where_the_files_name_modules(run_cli):
    spec = presets.get("dumbbell")  # no module records its paths
    names = layer_names_in_reference(spec)
    note = invented_note(names)
    assert note.startswith("the module paths of vision, ") and "vision.0" in note and '"fqn"' in note
    assert invented_note(layer_names_in_reference(presets.get("pi0"))) == ""
    plan = Plan(pp=2, dp=1, layers_per_stage=(len(names) // 2, len(names) - len(names) // 2), placement=(0, 1))
    assert note in engines.get("torch").notes(plan, names)
    assert note not in engines.get("megatron").notes(plan, names)
    exports = engines.plan_exports(plan, names)
    assert note in exports["torch"]["notes"]
    code, out, err = run_cli("plan", "--preset", "dumbbell", "--gpus", "8", "--global-batch", "64", "--pp", "2",
                             "--export", "torch")
    assert code == 0, err
    assert "note: the module paths of vision, " in out
