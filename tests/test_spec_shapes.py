"""A spec file at another sample shape (``--mix`` with ``--spec``): the presets' builders are the check.

A preset builds its modules for any shape; the same preset's modules at its default
shape, written out as a spec, must give the builder's modules at another shape when
:func:`reshape_spec` applies the shape. The cases where the rules cannot see what a
builder knows (a loss on one position fewer than the text, per-image pooling, a state
token counted in the action projector) are listed in docs/uneven_batches.md and
checked here to differ, so the list stays true.
"""

from __future__ import annotations

import json

import pytest

from pipeplan import presets
from pipeplan.batches.mix import mix_costs, parse_mix
from pipeplan.batches.pipeline import mix_pipeline_step
from pipeplan.batches.spec_shapes import missing_field, reshape_spec, spec_shapes
from pipeplan.errors import InvalidInputError
from pipeplan.models.spec import ModelSpec

AGREE = [
    ("pi0", "cameras", (1, 4)), ("pi0", "image_size", (112, 448)), ("pi0", "text_tokens", (10, 100)),
    ("pi0", "action_horizon", (8, 30)),
    ("pi0.5", "cameras", (1, 4)), ("pi0.5", "text_tokens", (10, 100)), ("pi0.5", "action_horizon", (8, 30)),
    ("pi0-fast", "cameras", (1, 4)), ("pi0-fast", "image_size", (112, 448)),
    ("openvla-7b", "text_tokens", (10, 100)),
    ("gr00t-n1", "action_horizon", (8, 30)), ("gr00t-n1", "text_tokens", (10, 100)),
    ("gr00t-n1.5", "action_horizon", (8, 30)), ("gr00t-n1.5", "cameras", (1,)),
    ("rdt-1b", "text_tokens", (10, 100)),
    ("smolvla", "action_horizon", (8, 30)), ("smolvla", "text_tokens", (10, 100)),
]
DIFFER = [  # (preset, field, value, the module the rules leave as it was)
    ("pi0-fast", "text_tokens", 10, "lm_head"),       # its loss runs on text_tokens - 1 positions
    ("smolvla", "cameras", 1, "connector"),           # pixel shuffle pools every camera's tokens 16:1
    ("rdt-1b", "action_horizon", 8, "action_embedding"),  # its projector runs on the horizon + 1 state token
]


@pytest.mark.parametrize("preset, field, values", AGREE, ids=[f"{p}-{f}" for p, f, _ in AGREE])
def test_a_preset_as_a_spec_reshapes_to_what_its_builder_gives(preset: str, field: str, values: tuple[int, ...]):
    written = ModelSpec.from_dict(presets.get(preset).to_dict())  # the preset as a spec file holds it
    assert field in spec_shapes(written)
    for value in values:
        assert reshape_spec(written, {field: value}).modules == presets.get(preset, **{field: value}).modules


@pytest.mark.parametrize("preset, field, value, module", DIFFER, ids=[f"{p}-{f}" for p, f, _, _ in DIFFER])
def test_the_documented_misses_still_miss(preset: str, field: str, value: int, module: str):
    got = reshape_spec(presets.get(preset), {field: value})
    assert got.module(module) != presets.get(preset, **{field: value}).module(module)


def test_the_example_spec_follows_cameras_text_and_horizon_through_its_graph():
    spec = ModelSpec.from_file("examples/model_spec.json")
    assert spec_shapes(spec) == {"cameras": 2, "image_size": 224, "text_tokens": 32, "action_horizon": 16}
    one = reshape_spec(spec, {"cameras": 1})
    assert (one.module("vision").cameras, one.module("projector").tokens, one.module("llm").seq_length) == (1, 196, 228)
    short = reshape_spec(spec, {"action_horizon": 8, "text_tokens": 10})
    assert short.module("llm").seq_length == 424 - 22
    assert [short.module(name).output_shape()[0] for name in ("action_embedding", "action_head", "action_output")] == [8] * 3
    assert reshape_spec(spec, {"cameras": 2}) is spec  # its own shape


def test_a_field_the_spec_lacks_or_a_shape_it_refuses_is_one_line():
    gpt = ModelSpec.from_file("examples/gpt-6.2b.json")
    assert missing_field(gpt, "cameras") == "no vision_encoder module"
    with pytest.raises(InvalidInputError, match=r"has no shape field 'action_horizon' \(no projector named \*action\*"):
        reshape_spec(gpt, {"action_horizon": 4})
    with pytest.raises(InvalidInputError, match="image_size"):
        reshape_spec(ModelSpec.from_file("examples/model_spec.json"), {"image_size": 100})  # 16 does not divide it


def test_simulate_and_plan_take_a_mix_with_a_spec(run_cli, tmp_path):
    mix = tmp_path / "mix.csv"
    mix.write_text("cameras,action_horizon,count\n1,16,4\n4,8,1\n")
    status, out, err = run_cli("simulate", "--spec", "examples/model_spec.json", "--stages", "2", "-m", "4",
                               "--mix", str(mix), "--json")
    assert status == 0, err
    payload = json.loads(out)
    spec = ModelSpec.from_file("examples/model_spec.json")
    costs = mix_costs(lambda **shape: reshape_spec(spec, shape),
                      parse_mix([{"cameras": 1, "action_horizon": 16, "count": 4},
                                 {"cameras": 4, "action_horizon": 8, "count": 1}]))
    # the LLM runs on 3 × 196 more image tokens (the frozen ViT at one sample is mostly kernel overheads)
    assert costs.module_ms[1]["llm"] > 1.4 * costs.module_ms[0]["llm"]
    step = mix_pipeline_step(costs, payload["layers_per_stage"], 4, 1)  # what simulate timed, from the library
    assert payload["mix"]["mean_sample_ms"] == pytest.approx(step.mean_sample_ms, rel=1e-9)
    assert payload["mix"]["balanced_mean_ms"] == pytest.approx(step.balanced_mean_ms, rel=1e-9)
    status, out, err = run_cli("plan", "--spec", "examples/model_spec.json", "--gpus", "8", "--global-batch", "64",
                               "--mix", str(mix), "--json")
    assert status == 0, err
    rows = [row for row in json.loads(out)["mix"]["rows"] if row["re_ranked"]]
    assert rows and all(row["expected_ms"] > 0 for row in rows)
    for argv in (("simulate", "--spec", "examples/gpt-6.2b.json", "--stages", "2"),
                 ("plan", "--spec", "examples/gpt-6.2b.json", "--gpus", "8", "--global-batch", "64")):
        status, _, err = run_cli(*argv, "--mix", str(mix))
        assert status == 2 and len(err.strip().splitlines()) == 1
        assert "field 'cameras' is not a shape of spec examples/gpt-6.2b.json (no vision_encoder module)" in err
    status, _, err = run_cli("simulate", "--profile", str(tmp_path / "p.csv"), "--mix", str(mix))
    assert status == 2 and len(err.strip().splitlines()) == 1
    assert "a --profile holds layer times measured at one sample shape, not at the mix's" in err
