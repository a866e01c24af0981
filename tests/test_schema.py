"""The model schema has one source (the module dataclasses' field metadata): checks, docs and ``model --schema`` agree.

Issue 33: a spec's ``"gated_mlp": "false"`` was read as true while ``"hidden_size": "4096"`` was
refused; the docs' field table missed a dozen fields; leaving ``attention`` out silently charged
eager attention. Here every field of every module kind is driven through the loader with values of
the wrong type (hypothesis), the docs are compared with the schema, and every default that a spec
file may leave out silently is shown to move a real model's costs by less than 5%.
"""

from __future__ import annotations

import json
import sys
import typing
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeplan import hardware
from pipeplan.errors import InvalidInputError
from pipeplan.models._schema import FieldSpec, field_specs
from pipeplan.models.layer_costs import layer_costs, layer_profile
from pipeplan.models.modules import (
    MODULE_KINDS,
    CrossAttention,
    Embedding,
    Linear,
    LMHead,
    Projector,
    TransformerStack,
    VisionEncoder,
)
from pipeplan.models.schema_docs import model_defaults, schema_json, schema_markdown, schema_rows
from pipeplan.models.spec import ModelSpec

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
from _markers import read_between  # noqa: E402

#: A valid record of each kind, with only its required fields (the module is named after its kind).
VALID: dict[str, dict[str, Any]] = {
    "vision_encoder": {"image_size": 28, "patch_size": 14, "num_layers": 2, "hidden_size": 64, "num_heads": 4,
                       "ffn_hidden_size": 128},
    "transformer": {"num_layers": 2, "hidden_size": 64, "num_heads": 4, "seq_length": 8, "ffn_hidden_size": 128},
    "projector": {"linears": [[64, 32]], "tokens": 4},
    "embedding": {"vocab_size": 100, "hidden_size": 64, "tokens": 8},
    "lm_head": {"vocab_size": 100, "hidden_size": 64, "tokens": 8},
}
FIELDS = [(kind, spec) for kind, cls in MODULE_KINDS.items() for spec in field_specs(cls)]


def record(kind: str, **values: Any) -> dict[str, Any]:
    return {"kind": kind, "name": f"my_{kind}", **VALID[kind], **values}


def load(*modules: dict[str, Any]) -> ModelSpec:
    return ModelSpec.from_dict({"name": "m", "modules": list(modules)})


_NOT_INTEGERS = st.one_of(st.text(alphabet="0123456789", min_size=1, max_size=5), st.booleans(),
                          st.floats(allow_nan=False, allow_infinity=False), st.lists(st.integers(1, 9), max_size=2),
                          st.dictionaries(st.just("n"), st.integers()))
_NOT_BOOLEANS = st.one_of(st.sampled_from(["false", "true", "yes", "no", "0", "1", "False", ""]),
                          st.integers(), st.floats(allow_nan=False), st.lists(st.booleans(), max_size=2))
_NOT_STRINGS = st.one_of(st.just(""), st.integers(), st.booleans(), st.lists(st.text(max_size=3), max_size=2),
                         st.dictionaries(st.just("n"), st.text(max_size=2)))


def wrong_values(spec: FieldSpec) -> st.SearchStrategy[Any]:
    """Values of the wrong type (or out of range) for a field, by what the schema says it holds."""
    base = spec.base
    origin, args = typing.get_origin(base), typing.get_args(base)
    below = [st.integers(max_value=spec.minimum - 1)] if spec.minimum is not None else []
    if base is bool:
        return _NOT_BOOLEANS
    if base is int:
        return st.one_of(_NOT_INTEGERS, *below)
    if base is str:
        return _NOT_STRINGS
    if origin is typing.Literal:
        return st.one_of(st.text(max_size=8).filter(lambda text: text not in args), st.integers(), st.booleans(),
                         st.lists(st.sampled_from(args), min_size=1, max_size=2))
    if base is CrossAttention:
        return st.one_of(st.text(max_size=5), st.integers(), st.lists(st.text(max_size=3), max_size=2),
                         st.fixed_dictionaries({"source": st.just("my_embedding"), "every": _NOT_INTEGERS}),
                         st.fixed_dictionaries({"source": _NOT_STRINGS}),
                         st.fixed_dictionaries({"source": st.just("my_embedding"), "evry": st.integers(1, 3)}))
    if args == (Linear, ...):
        return st.one_of(st.just([]), st.text(max_size=3), st.integers(),
                         st.lists(st.lists(st.integers(1, 9), max_size=1), min_size=1, max_size=2),
                         st.tuples(st.tuples(st.integers(1, 9), _NOT_INTEGERS)).map(lambda t: [list(t[0])]))
    if args == (str, ...):
        return st.one_of(st.text(min_size=1, max_size=5), st.integers(), st.booleans(),
                         st.lists(st.one_of(st.integers(), st.booleans(), st.none()), min_size=1, max_size=2))
    assert all(arg is int for arg in args), base  # a fixed number of integers
    return st.one_of(st.lists(st.integers(0, 3), max_size=len(args) - 1).filter(lambda v: len(v) != len(args)),
                     st.lists(st.integers(0, 3), min_size=len(args) + 1, max_size=len(args) + 2),
                     st.lists(_NOT_INTEGERS, min_size=len(args), max_size=len(args)),
                     st.text(max_size=3), st.integers())


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(FIELDS), st.data())
def test_a_wrong_type_in_any_field_is_one_line_naming_module_and_field(kind_field, data):
    kind, spec = kind_field
    value = data.draw(wrong_values(spec), label=f"{kind}.{spec.name}")
    bad = record(kind, **{spec.name: value})
    module = f"my_{kind}" if spec.name != "name" else kind  # a bad name: the record is named by its kind
    # an embedding before it, so that a cross-attention source is a module listed before
    with pytest.raises(InvalidInputError) as caught:
        load(record("embedding", name="my_embedding", hidden_size=64), bad)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"modules[1] ({module}).{spec.name}") or \
        message.startswith(f"modules[1] ({module}) has unknown keys"), message


@pytest.mark.parametrize("kind, field", [(kind, spec.name) for kind, spec in FIELDS if spec.base is bool])
@pytest.mark.parametrize("text", ["false", "true", "yes", "no", "0"])
def test_booleans_as_strings_are_refused(kind, field, text):
    with pytest.raises(InvalidInputError, match=rf"^modules\[0\] \(my_{kind}\)\.{field} must be true or false"):
        load(record(kind, **{field: text}))


def test_the_issue_examples():
    with pytest.raises(InvalidInputError, match=r"modules\[0\] \(my_transformer\)\.gated_mlp must be true or false"):
        load(record("transformer", gated_mlp="false"))
    with pytest.raises(InvalidInputError, match=r"\.hidden_size must be an integer >= 1, got '4096'"):
        load(record("transformer", hidden_size="4096"))
    with pytest.raises(InvalidInputError, match=r"did you mean 'gated_mlp'\?"):
        load(record("transformer", gated_mpl=True))
    with pytest.raises(InvalidInputError, match=r"linears\[0\]\.out_features must be an integer >= 1, got 32.0"):
        load(record("projector", linears=[[64, 32.0]]))
    # the same checks for a module built in Python
    with pytest.raises(InvalidInputError, match=r"modules\[0\] \(s\)\.causal must be true or false"):
        ModelSpec("m", (TransformerStack(name="s", **VALID["transformer"], causal="no"),))  # type: ignore[arg-type]


@pytest.mark.parametrize("kind, spec", FIELDS, ids=lambda v: getattr(v, "name", v))
def test_every_field_the_loader_accepts_is_documented(kind, spec):
    assert spec.doc and spec.doc.endswith("."), (kind, spec.name)
    if spec.name == "name":
        good: Any = f"my_{kind}"
    else:
        good = VALID[kind][spec.name] if spec.required else spec.json_default()
    load(record(kind, **{spec.name: good}))  # the loader takes the field
    rows = [row for row in schema_rows(MODULE_KINDS[kind]) if row[0] == spec.name]
    assert len(rows) == 1 and rows[0][3] == spec.doc
    block = read_between(ROOT / "docs" / "presets.md", "model-schema")
    section = block.split(f"**`{kind}`**", 1)[1].split("**`", 1)[0]
    assert f"| `{spec.name}` |" in section, (kind, spec.name)
    names = [entry["name"] for entry in schema_json()["kinds"][kind]["fields"]]
    assert spec.name in names


def test_the_loader_accepts_no_field_the_schema_lacks():
    for kind, cls in MODULE_KINDS.items():
        documented = {spec.name for spec in field_specs(cls)}
        assert documented == set(cls.__dataclass_fields__)  # type: ignore[attr-defined]
        with pytest.raises(InvalidInputError, match="unknown keys"):
            load(record(kind, not_a_field=1))


def test_the_docs_table_is_what_the_schema_generates():
    # the same check as tests/test_docs_tables.py, stated for this schema
    assert read_between(ROOT / "docs" / "presets.md", "model-schema").startswith(schema_markdown())


# --- defaults that a spec file may leave out --------------------------------------------------------
#: Reference models, each with the module kind it varies: a 7B LLM (Llama 2 7B shapes: h 4096, 32 layers, 32 heads,
#: f 11008, s 4096, vocabulary 32000; arXiv:2307.09288 Table 1) with its embedding and head, and a SigLIP So400m/14
#: tower at 224 px (arXiv:2303.15343) alone; a projector between them in a VLA. A module is varied where it is
#: most of the cost, so "a few percent" is of a model a user plans.
LLM = TransformerStack(name="llm", num_layers=32, hidden_size=4096, num_heads=32, seq_length=4096, ffn_hidden_size=11008)
VIT = VisionEncoder(name="vision", image_size=224, patch_size=14, num_layers=27, hidden_size=1152, num_heads=16,
                    ffn_hidden_size=4304)
EMB = Embedding(name="tokens", vocab_size=32000, hidden_size=4096, tokens=4096)
HEAD = LMHead(name="head", vocab_size=32000, hidden_size=4096, tokens=4096)
PROJ = Projector(name="projector", linears=(Linear(1152, 4096), Linear(4096, 4096)), tokens=256)
VLA = (VIT, PROJ, replace(EMB, tokens=3840), replace(LLM, inputs=("projector", "tokens")), HEAD)
REFERENCES: dict[str, list[tuple[Any, ...]]] = {  # the models, with the module to vary first
    "transformer": [(LLM, EMB, HEAD), (replace(LLM, attention="flash"), EMB, HEAD)],
    "vision_encoder": [(VIT,), (replace(VIT, attention="flash"),)],
    "projector": [VLA[1:2] + VLA[:1] + VLA[2:]],
    "embedding": [(EMB, LLM, HEAD)],
    "lm_head": [(HEAD, EMB, LLM)],
}
#: ``frozen`` is left unreported on purpose: training is what a plan is for, and the trained parameter
#: count is printed by ``model`` and ``presets``.
UNREPORTED_ON_PURPOSE = {"frozen"}


def _costs(modules: tuple[Any, ...]) -> dict[str, float]:
    order = {m.name: i for i, m in enumerate(VLA + (EMB, HEAD, LLM))}  # pipeline order, whatever came first
    spec = ModelSpec("x", tuple(sorted(modules, key=lambda m: order[m.name])))
    device = hardware.device("h100-80g")
    out: dict[str, float] = {"params": spec.num_parameters()}
    for mode in ("none", "selective"):
        costs = layer_costs(spec, 1, recompute=mode)
        profile = layer_profile(spec, device, 1, recompute=mode)
        out[f"activations {mode}"] = sum(cost.activation_bytes for cost in costs)
        out[f"flops {mode}"] = sum(c.forward_flops + c.input_grad_flops + c.weight_grad_flops for c in costs)
        out[f"ms {mode}"] = sum(profile.forward) + sum(profile.backward)
    return out


def _largest_change(modules: tuple[Any, ...], name: str, value: Any) -> float:
    """The largest relative change of the model's costs when its first module's ``name`` becomes ``value``."""
    before = _costs(modules)
    after = _costs((replace(modules[0], **{name: value}),) + modules[1:])
    return max(abs(after[key] - before[key]) / before[key] for key in before if before[key])


def _alternatives(spec: FieldSpec) -> list[Any]:
    if spec.base is bool:
        return [not spec.default]
    if typing.get_origin(spec.base) is typing.Literal and not spec.optional:
        return [arg for arg in typing.get_args(spec.base) if arg != spec.default]
    return []


@pytest.mark.parametrize("kind, spec", [(kind, spec) for kind, spec in FIELDS if _alternatives(spec)],
                         ids=lambda v: getattr(v, "name", v))
def test_a_default_left_out_silently_moves_costs_by_less_than_5_percent(kind, spec):
    changes = [_largest_change(module, spec.name, value)
               for module in REFERENCES[kind] for value in _alternatives(spec)]
    if spec.reported:  # reported: and it does matter somewhere (causal only with flash attention)
        assert max(changes) >= 0.05, (kind, spec.name, changes)
    elif spec.name not in UNREPORTED_ON_PURPOSE:
        assert max(changes) < 0.05, (f"{kind}.{spec.name}: its default changes a reference's costs by "
                                     f"{max(changes):.1%}; give it reported= in pipeplan/models/modules.py")


def test_grouped_query_attention_left_out_is_reported_and_matters():
    assert _largest_change((LLM, EMB, HEAD), "num_kv_heads", 8) >= 0.05
    spec = load(record("transformer"))
    assert "num_kv_heads = num_heads (no GQA) in my_transformer" in model_defaults(spec)


def test_a_spec_file_reports_the_defaults_it_left_out():
    spec = load(record("transformer"), record("vision_encoder", attention="flash", bias=False, inputs=[]))
    text = model_defaults(spec)
    parts = text.split(" (left out of the spec file")[0].split("; ")
    assert "attention = eager (scores stored, not FlashAttention) in my_transformer" in parts
    assert "gated_mlp = false (two-matrix MLP, not SwiGLU/GeGLU) in my_transformer, my_vision_encoder" in parts
    assert not any(part.startswith("bias") for part in parts)
    given_all = record("transformer", attention="flash", causal=True, gated_mlp=True, dropout=False, num_kv_heads=2,
                       qk_norm=False, post_norms=False)
    assert model_defaults(load(given_all)) == ""
    assert model_defaults(ModelSpec("m", (LLM,))) == ""  # built in Python: nothing was left out of a file
    assert spec.with_frozen({"my_transformer": True}).defaulted == spec.defaulted


def test_plan_and_model_say_the_defaults(run_cli, tmp_path):
    path = tmp_path / "m.json"
    path.write_text(json.dumps({"name": "m", "modules": [record("transformer")]}))
    status, out, err = run_cli("plan", "--spec", str(path), "--gpus", "2", "--global-batch", "4", "--json")
    assert status == 0, err
    assert "attention = eager" in json.loads(out)["assumptions"]["model defaults"]
    status, out, err = run_cli("model", "--spec", str(path))
    assert status == 0, err
    assert "model defaults: " in out and "attention = eager" in out
    status, out, err = run_cli("model", "--spec", str(path), "--json")
    assert "attention = eager" in json.loads(out)["model defaults"]
    status, out, err = run_cli("plan", "--preset", "gpt-1.5b", "--gpus", "2", "--global-batch", "4", "--json")
    assert status == 0, err
    assert "model defaults" not in json.loads(out)["assumptions"]  # presets state every field on purpose


def test_model_schema_prints_every_field(run_cli):
    status, out, err = run_cli("model", "--schema", "--json")
    assert status == 0, err
    payload = json.loads(out)
    for kind, cls in MODULE_KINDS.items():
        assert [entry["name"] for entry in payload["kinds"][kind]["fields"]] == [s.name for s in field_specs(cls)]
    status, out, err = run_cli("model", "--schema")
    assert status == 0 and "transformer (TransformerStack)" in out and "cross_attention (CrossAttention)" in out
    status, out, err = run_cli("model", "--schema", "--preset", "pi0")
    assert status == 2 and "takes no model" in err and "Traceback" not in err
