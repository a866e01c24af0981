"""Action heads as they train: ``noise_samples`` runs a head's own tokens per sample, its context once.

Issue 33: ``repeats: 10`` charged a cross-attention head's K/V projection of every context token
ten times, where flow-matching and diffusion heads project the context once per example and run
only their own tokens per noise sample. Here: the context part does not grow with the samples,
the head's part grows linearly, ``noise_samples = N`` and ``repeats = N`` differ by exactly the
K/V projections of ``N − 1`` contexts (counted independently from the shapes), for any shapes
(hypothesis); the presets say what their reference code trains on; bad values are one line.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeplan import presets
from pipeplan.errors import InvalidInputError
from pipeplan.models.layer_costs import flops_per_sample, layer_costs
from pipeplan.models.modules import CrossAttention, Embedding, Linear, Projector, TransformerStack, runs_per_example
from pipeplan.models.schema_docs import schema_json
from pipeplan.models.spec import ModelSpec

CONTEXT_TOKENS, CONTEXT_WIDTH = 300, 512


def _vla(*, head_tokens: int = 17, width: int = 256, heads: int = 4, kv_heads: int | None = None,
         layers: int = 4, every: int = 2, context_tokens: int = CONTEXT_TOKENS, context_width: int = CONTEXT_WIDTH,
         kv_width: int | None = None, adaptive: tuple[int, int] = (0, 0), frozen_context: bool = False,
         **head: int) -> ModelSpec:
    """A context (embedding + one block) and a cross-attention head whose ``head`` fields are given."""
    return ModelSpec("vla", (
        Embedding(name="tokens", vocab_size=1000, hidden_size=context_width, tokens=context_tokens,
                  frozen=frozen_context),
        TransformerStack(name="context", num_layers=1, hidden_size=context_width, num_heads=8,
                         seq_length=context_tokens, ffn_hidden_size=4 * context_width, frozen=frozen_context),
        Projector(name="action_embedding", inputs=(), tokens=head_tokens, linears=(Linear(7, width),), **head),
        TransformerStack(name="head", num_layers=layers, hidden_size=width, num_heads=heads, num_kv_heads=kv_heads,
                         seq_length=head_tokens, ffn_hidden_size=4 * width, adaptive_norm=adaptive,
                         cross_attention=CrossAttention("context", every=every, kv_hidden_size=kv_width), **head),
        Projector(name="action_output", tokens=head_tokens, linears=(Linear(width, 7),), **head),
    ))


def _head_layers(spec: ModelSpec, micro_batch_size: int = 1, **options: object) -> list:
    return [cost for cost in layer_costs(spec, micro_batch_size, **options) if cost.modules == ("head",)]


def _kv_forward_flops(spec: ModelSpec) -> float:
    """One context's K/V projection FLOPs per example, from the shapes: ``2 · tokens · width · 2 · kv_heads · d``."""
    head = spec.module("head")
    assert isinstance(head, TransformerStack) and head.cross_attention is not None
    tokens, width = spec.module(head.cross_attention.source).output_shape()
    width = head.cross_attention.kv_hidden_size or width
    return 2.0 * tokens * width * 2 * head.kv_heads * head.dim_per_head


def _cross_layers(spec: ModelSpec) -> int:
    head = spec.module("head")
    assert isinstance(head, TransformerStack) and head.cross_attention is not None
    return sum(1 for i in range(head.num_layers) if i % head.cross_attention.every == 0)


def _op(cost: object, name: str) -> float:
    ops = [op for op in cost.ops if op.name == name]  # type: ignore[attr-defined]
    assert len(ops) == 1, name
    return ops[0].flops


# --- the context part runs once per example, the head's part once per sample ------------------------
@pytest.mark.parametrize("samples", [2, 8, 10])
def test_the_context_kv_projection_does_not_grow_with_samples(samples):
    one = _head_layers(_vla(), recompute="none")
    many = _head_layers(_vla(noise_samples=samples), recompute="none")
    cross = [i for i in range(len(one)) if i % 2 == 0]
    for i in cross:
        for name in ("kv", "kv.dgrad", "kv.wgrad"):
            assert _op(many[i], name) == _op(one[i], name) > 0
        assert _op(one[i], "kv") == _kv_forward_flops(_vla())  # the kernel is the context's projection
        for name in ("q", "proj", "fc1", "fc2", "scores", "context"):  # the head's own tokens
            assert _op(many[i], name) == samples * _op(one[i], name) > 0


@pytest.mark.parametrize("samples", [2, 8, 10])
def test_the_head_part_grows_linearly(samples):
    one, many = _vla(), _vla(noise_samples=samples)
    kv = _kv_forward_flops(one)
    for index, (a, b) in enumerate(zip(_head_layers(one, recompute="none"), _head_layers(many, recompute="none"))):
        context = kv if index % 2 == 0 else 0.0  # the cross layers' once-per-example part (F; B and W alike)
        for pass_ in ("forward_flops", "input_grad_flops", "weight_grad_flops"):
            assert getattr(b, pass_) - context == pytest.approx(samples * (getattr(a, pass_) - context), rel=1e-12)
    # the projectors around the head have no context part: all of them runs per sample
    for name in ("action_embedding", "action_output"):
        assert flops_per_sample(many)[name] == pytest.approx(samples * flops_per_sample(one)[name], rel=1e-12)
    # and nothing upstream changes
    for name in ("tokens", "context"):
        assert flops_per_sample(many)[name] == flops_per_sample(one)[name]


@pytest.mark.parametrize("samples", [2, 10])
def test_samples_and_repeats_differ_by_exactly_the_context_kv_share(samples):
    repeated, sampled = _vla(repeats=samples), _vla(noise_samples=samples)
    kv = _kv_forward_flops(sampled) * _cross_layers(sampled)
    # F, B (the K/V projection's input gradient reaches the trained context) and W of the K/V GEMMs
    difference = flops_per_sample(repeated)["head"] - flops_per_sample(sampled)["head"]
    assert difference == pytest.approx((samples - 1) * 3 * kv, rel=1e-12)


def test_the_issue_case_a_cross_attention_head_over_a_long_context():
    """driving-6cam's DiT-B head over 3520 LLM tokens: ``repeats: 10`` was ~99% context K/V (the issue's 98%)."""
    spec = presets.get("driving-6cam")

    def head(**fields: int) -> float:
        names = ("action_embedding", "action_head", "action_output")
        changed = ModelSpec("x", tuple(replace(m, **fields) if m.name in names else m for m in spec.modules))
        return flops_per_sample(changed)["action_head"]

    once, repeated, sampled = head(), head(repeats=10), head(noise_samples=10)
    llm = spec.module("llm")
    stack = spec.module("action_head")
    assert isinstance(llm, TransformerStack) and isinstance(stack, TransformerStack)
    kv = 3 * 2.0 * llm.seq_length * llm.hidden_size * 2 * stack.kv_heads * stack.dim_per_head * stack.num_layers
    assert repeated == pytest.approx(10 * once, rel=1e-12)
    assert 10 * kv / repeated > 0.95  # what the issue measured: the context projection, ten times
    assert sampled == pytest.approx(once + 9 * (once - kv), rel=1e-12) and sampled < 1.1 * once


def test_the_context_keys_and_values_are_stored_once():
    samples, b = 8, 2
    one = _head_layers(_vla(repeats=samples), b, recompute="selective")
    many = _head_layers(_vla(noise_samples=samples), b, recompute="selective")
    head = _vla().module("head")
    assert isinstance(head, TransformerStack)
    kv_bytes = b * CONTEXT_TOKENS * 2 * head.kv_heads * head.dim_per_head * 2  # K and V, bf16
    for index, (a, c) in enumerate(zip(one, many)):
        assert a.activation_bytes - c.activation_bytes == (samples - 1) * kv_bytes * (index % 2 == 0)
        assert c.send_bytes == a.send_bytes  # the head's hidden state is per sample either way


def test_without_cross_attention_samples_price_as_repeats():
    """A head with no context part (CogACT's in-context DiT): the two fields price alike, layer by layer."""
    spec = presets.get("cogact")
    sampled = ModelSpec("s", tuple(replace(m, repeats=1, noise_samples=8) if m.name.startswith("action_") else m
                                   for m in spec.modules))
    assert layer_costs(sampled, 2) == layer_costs(spec, 2)
    assert [c.ops for c in layer_costs(sampled, 2)] == [c.ops for c in layer_costs(spec, 2)]


def test_samples_multiply_repeats_and_count_per_sample_conditions():
    both = _vla(repeats=2, noise_samples=3, adaptive=(2, 0))
    assert runs_per_example(both.module("head")) == 6 and runs_per_example(both.module("tokens")) == 1
    six = _vla(repeats=6, adaptive=(2, 0))
    kv = _kv_forward_flops(both) * _cross_layers(both)
    # the adaLN modulation is per sample (the time differs); only the context K/V runs twice, not six times
    assert flops_per_sample(six)["head"] - flops_per_sample(both)["head"] == pytest.approx(4 * 3 * kv, rel=1e-12)


@settings(max_examples=60, deadline=None)
@given(samples=st.integers(1, 12), repeats=st.integers(1, 3), head_tokens=st.integers(1, 64),
       heads=st.sampled_from([1, 2, 4, 8]), kv_div=st.sampled_from([1, 2, 4]), head_dim=st.sampled_from([8, 16, 32]),
       layers=st.integers(1, 5), every=st.integers(1, 3), context_tokens=st.integers(1, 500),
       kv_width=st.sampled_from([None, 64, 96]), micro_batch=st.integers(1, 3), frozen=st.booleans(),
       recompute=st.sampled_from(["none", "selective", "full"]))
def test_property_any_shapes(samples, repeats, head_tokens, heads, kv_div, head_dim, layers, every, context_tokens,
                             kv_width, micro_batch, frozen, recompute):
    kv_heads = max(heads // kv_div, 1)
    shape = dict(head_tokens=head_tokens, width=heads * head_dim, heads=heads, kv_heads=kv_heads, layers=layers,
                 every=every, context_tokens=context_tokens, kv_width=kv_width, frozen_context=frozen)
    base = _vla(**shape, repeats=repeats)
    sampled = _vla(**shape, repeats=repeats, noise_samples=samples)
    repeated = _vla(**shape, repeats=repeats * samples)
    kv = _kv_forward_flops(base) * repeats  # once per run of the whole module
    # the head's F grows linearly but for the context part, which stays
    for a, c in zip(_head_layers(base, micro_batch, recompute=recompute),
                    _head_layers(sampled, micro_batch, recompute=recompute)):
        context = micro_batch * kv if a.name.endswith(tuple(f".{i}" for i in range(0, layers, every))) else 0.0
        assert c.forward_flops - context == pytest.approx(samples * (a.forward_flops - context), rel=1e-9)
    # samples vs repeats: exactly the K/V of (samples − 1) contexts, F + B + W (B, W as the context needs)
    passes = 3  # the head trains: W; its source trains or not, B is charged the same (the convention)
    difference = flops_per_sample(repeated)["head"] - flops_per_sample(sampled)["head"]
    assert difference == pytest.approx((samples - 1) * passes * kv * _cross_layers(base), rel=1e-9, abs=1e-3)
    assert sum(c.activation_bytes for c in _head_layers(sampled, micro_batch, recompute=recompute)) <= \
        sum(c.activation_bytes for c in _head_layers(repeated, micro_batch, recompute=recompute))


# --- presets say what their reference code trains on -----------------------------------------------------
@pytest.mark.parametrize("preset, head", [("pi0", "action_expert"), ("pi0.5", "action_expert"),
                                          ("gr00t-n1", "action_dit"), ("gr00t-n1.5", "action_dit"),
                                          ("rdt-1b", "rdt"), ("smolvla", "action_expert")])
def test_flow_matching_and_diffusion_presets_train_on_one_noise_sample(preset, head):
    module = presets.get(preset).module(head)
    # openpi pi0.py compute_loss, GR00T FlowmatchingActionHead.forward, RDT rdt_runner.compute_loss, lerobot
    # VLAFlowMatching.forward: one time / timestep per example (the preset modules cite file and line)
    assert isinstance(module, TransformerStack) and module.noise_samples == 1 and module.repeats == 1


@pytest.mark.parametrize("preset", ["cogact", "cogact-dit-s", "cogact-dit-l"])
def test_cogact_repeats_its_context_with_its_samples(preset):
    spec = presets.get(preset)
    for name in ("action_embedding", "action_dit", "action_output"):
        module = spec.module(name)
        assert module.repeats == 8 and runs_per_example(module) == 8  # cogactvla.py repeats the cognition feature


# --- the schema: a spec file says it, the docs and --schema list it, bad values are one line ----------------
def _record(**head: object) -> dict:
    payload = _vla().to_dict()
    for record in payload["modules"]:
        if record["name"] == "head":
            record.update(head)
    return payload


def test_a_spec_file_says_noise_samples_and_round_trips(tmp_path):
    spec = ModelSpec.from_dict(_record(noise_samples=10))
    assert spec.module("head").noise_samples == 10  # type: ignore[union-attr]
    path = tmp_path / "head.json"
    path.write_text(json.dumps(spec.to_dict()))
    back = ModelSpec.from_file(path)
    assert layer_costs(back, 2) == layer_costs(spec, 2) != layer_costs(_vla(), 2)
    for kind in ("transformer", "projector"):
        assert "noise_samples" in [f["name"] for f in schema_json()["kinds"][kind]["fields"]]
    assert "noise_samples" not in [f["name"] for f in schema_json()["kinds"]["vision_encoder"]["fields"]]


@pytest.mark.parametrize("value", [0, -1, "10", 2.5, True, None, [10]])
def test_bad_noise_samples_are_one_line_naming_module_and_field(value):
    with pytest.raises(InvalidInputError) as caught:
        ModelSpec.from_dict(_record(noise_samples=value))
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("modules[3] (head).noise_samples must be an integer >= 1, got "), message


def test_bad_noise_samples_in_python_are_refused_too():
    spec = _vla()
    bad = tuple(replace(m, noise_samples=0) if m.name == "head" else m for m in spec.modules)
    with pytest.raises(InvalidInputError, match=r"^modules\[3\] \(head\)\.noise_samples must be an integer >= 1"):
        ModelSpec("m", bad)


def test_the_cli_refuses_a_bad_value_in_one_line(run_cli, tmp_path):
    path = tmp_path / "head.json"
    path.write_text(json.dumps(_record(noise_samples="10")))
    status, out, err = run_cli("model", "--spec", str(path))
    assert status == 2 and not out
    assert err.strip().count("\n") == 0 and "modules[3] (head).noise_samples" in err and "Traceback" not in err
    path.write_text(json.dumps(_record(noise_samples=10)))
    status, out, _ = run_cli("model", "--spec", str(path), "--json")
    assert status == 0 and json.loads(out)
