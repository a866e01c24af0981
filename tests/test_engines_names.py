"""engines/_names: every preset's pipeline layers named as its reference code names them."""

from __future__ import annotations

import re

import pytest

from pipeplan import presets
from pipeplan.errors import InvalidInputError
from pipeplan.engines import LayerName, layer_names_in_reference, reference_of
from pipeplan.engines.megatron import megatron_port
from pipeplan.models.layer_costs import layer_costs
from pipeplan.models.modules import Embedding, TransformerStack
from pipeplan.models.spec import ModelSpec
from pipeplan.presets.reference import gpt_1_5b


@pytest.mark.parametrize("name", presets.names())
def test_one_name_per_pipeline_layer_and_no_path_twice(name):
    spec = presets.get(name)
    names = layer_names_in_reference(spec)
    assert len(names) == len(layer_costs(spec, 1))
    paths = [path for layer in names for path in layer.fqns]
    assert len(paths) == len(set(paths)), "a module path is named by two pipeline layers"
    assert all(layer.role in ("embedding", "decoder", "loss", "other") for layer in names)


@pytest.mark.parametrize("name", presets.names())
def test_names_round_trip_through_the_spec_schema(name):
    spec = presets.get(name)
    assert layer_names_in_reference(ModelSpec.from_dict(spec.to_dict())) == layer_names_in_reference(spec)


def test_gpt_ports_to_megatron_with_its_decoder_count():
    # Megatron-LM megatron/core/models/gpt/gpt_model.py: embedding.word_embeddings (+ position_embeddings),
    # decoder.layers.{i}, decoder.final_layernorm, output_layer
    for layers in (22, 5):
        spec = gpt_1_5b(num_layers=layers)
        names = layer_names_in_reference(spec)
        assert megatron_port(spec) and reference_of(spec) == "megatron-gpt"
        assert [n.role for n in names] == ["embedding"] + ["decoder"] * layers + ["loss"]
        assert names[0].fqns == ("embedding.word_embeddings", "embedding.position_embeddings")
        assert [n.fqns for n in names[1:-1]] == [(f"decoder.layers.{i}",) for i in range(layers)]
        assert names[-1].fqns == ("decoder.final_layernorm", "output_layer")
    assert presets.get("gpt-1.5b").module("layers").num_layers == 22  # Qi et al. 2023, Table 3


def test_pi0_pairs_a_gemma_and_an_expert_layer_per_depth():
    spec = presets.get("pi0")
    names = layer_names_in_reference(spec)
    costs = layer_costs(spec, 1)
    pairs = [(n, c) for n, c in zip(names, costs) if c.modules == ("llm", "action_expert")]
    assert len(pairs) == 18  # openpi gemma.py: gemma_2b and gemma_300m depth 18
    for depth, (layer, _) in enumerate(pairs):
        gemma = f"paligemma_with_expert.paligemma.model.language_model.layers.{depth}"
        expert = f"paligemma_with_expert.gemma_expert.model.layers.{depth}"
        assert layer.fqns[0] == gemma and expert in layer.fqns and layer.role == "decoder"
    assert not megatron_port(spec) and reference_of(spec) == "openpi-pytorch"


@pytest.mark.parametrize("name", [n for n in presets.names() if n not in ("dumbbell", "driving-6cam")])
def test_presets_from_reference_code_record_every_path(name):
    spec = presets.get(name)
    assert reference_of(spec) is not None
    assert all(module.fqn is not None for module in spec.modules), "a module without its reference path"
    generated = {f"{m.name}.{i}" for m in spec.modules for i in range(200)}
    assert not generated & {p for layer in layer_names_in_reference(spec) for p in layer.fqns}


def test_a_module_without_paths_gets_generated_names_and_role_other():
    spec = presets.get("dumbbell")
    names = layer_names_in_reference(spec)
    assert names[0] == LayerName(("vision.0",), "other") and names[1] == LayerName(("vision.1",), "other")
    assert names[-1] == LayerName(("action_output.0",), "other")
    assert reference_of(spec) is None and not megatron_port(spec)


def test_vision_paths_put_the_embedding_first_and_the_final_norm_with_the_last_block():
    names = layer_names_in_reference(presets.get("pi0"))
    siglip = "paligemma_with_expert.paligemma.model.vision_tower.vision_model."
    assert names[0].fqns == (siglip + "embeddings",)
    assert names[1].fqns == (siglip + "encoder.layers.0",)
    assert names[27].fqns == (siglip + "encoder.layers.26", siglip + "post_layernorm")


_BLOCK = {"num_layers": 2, "hidden_size": 64, "num_heads": 4, "seq_length": 8, "ffn_hidden_size": 128}


@pytest.mark.parametrize("module, match", [
    (TransformerStack(name="s", fqn=("model.layers",), **_BLOCK), r"modules\[0\] \(s\)\.fqn entry 'model.layers' must be a template with \{i\}"),
    (TransformerStack(name="s", fqn=("model.layers.{j}",), **_BLOCK), r"must be a template with \{i\}"),
    (TransformerStack(name="s", fqn_last=("model.norm",), **_BLOCK), r"fqn_last needs fqn"),
    (TransformerStack(name="s", role="decoder", **_BLOCK), r"role needs fqn"),
    (TransformerStack(name="s", fqn=("l.{i}",), role="encoder", **_BLOCK), r"role must be one of embedding, decoder, loss, other"),  # type: ignore[arg-type]
    (Embedding(name="e", vocab_size=10, hidden_size=4, tokens=2, fqn=("embed.{i}",)), r"must be a module path without braces"),
    (Embedding(name="e", vocab_size=10, hidden_size=4, tokens=2, fqn=()), r"fqn must be a non-empty list"),
    (Embedding(name="e", vocab_size=10, hidden_size=4, tokens=2, fqn=("",)), r"entries must be non-empty module paths"),
])
def test_bad_paths_are_one_clear_error(module, match):
    with pytest.raises(InvalidInputError, match=match):
        ModelSpec("m", (module,))


def test_a_json_spec_records_paths_as_lists():
    payload = {"name": "m", "modules": [
        {"kind": "embedding", "name": "e", "vocab_size": 10, "hidden_size": 64, "tokens": 8,
         "fqn": ["tok"], "role": "embedding"},
        {"kind": "transformer", "name": "s", **_BLOCK, "fqn": ["blocks.{i}"], "fqn_last": ["norm"], "role": "decoder"},
    ]}
    names = layer_names_in_reference(ModelSpec.from_dict(payload))
    assert [n.fqns for n in names] == [("tok",), ("blocks.0",), ("blocks.1", "norm")]
    assert megatron_port(ModelSpec.from_dict(payload))  # every role is one of Megatron's (no loss layer needed)
    with pytest.raises(InvalidInputError, match=re.escape("modules[0] (e).fqn must be a list")):
        ModelSpec.from_dict({"name": "m", "modules": [{**payload["modules"][0], "fqn": "tok"}]})
