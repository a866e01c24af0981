"""ModelSpec: formula checks against the literature, frozen semantics, dataflow bytes, bad input."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from pipeplan import hardware, presets, simulate
from pipeplan.errors import InvalidInputError
from pipeplan.layers import LayerProfile
from pipeplan.models.layer_costs import layer_costs, layer_profile
from pipeplan.models.modules import CrossAttention, Embedding, Linear, Projector, TransformerStack, VisionEncoder
from pipeplan.models.spec import ModelSpec
from pipeplan.partition import PartitionOptions, inflight_per_stage, partition_layers
from pipeplan.presets.reference import gpt_1_5b
from pipeplan.schedules import build_schedule


def gpt_layer(h: int, a: int, s: int, **options) -> ModelSpec:
    """One Megatron-LM GPT layer: LayerNorm, biases, dropout, f = 4h."""
    block = TransformerStack(name="layer", num_layers=1, hidden_size=h, num_heads=a, seq_length=s,
                             ffn_hidden_size=4 * h, bias=True, dropout=True, **options)
    return ModelSpec("gpt-layer", (block,))


gpt_shapes = st.tuples(st.integers(1, 16), st.sampled_from([1, 2, 4, 8]), st.integers(1, 64),
                       st.integers(1, 8)).map(lambda t: (t[0] * t[1] * 8, t[1], t[2] * 16, t[3]))


@settings(max_examples=40, deadline=None)
@given(gpt_shapes)
def test_gpt_layer_flops_equal_zero_bubble_table_1(shape):
    # Qi et al. 2023, "Zero Bubble Pipeline Parallelism", Table 1 (one transformer layer):
    # F = sbh(24h + 4s), B = sbh(24h + 8s), W = 24sbh^2.
    h, a, s, b = shape
    cost = layer_costs(gpt_layer(h, a, s), b, recompute="none")[0]
    assert cost.forward_flops == s * b * h * (24 * h + 4 * s)
    assert cost.input_grad_flops == s * b * h * (24 * h + 8 * s)
    assert cost.weight_grad_flops == 24 * s * b * h * h


@settings(max_examples=40, deadline=None)
@given(gpt_shapes, st.sampled_from([1, 2, 4, 8]))
def test_gpt_layer_activations_equal_korthikanti(shape, t):
    # Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models",
    # eq. 1-2 and Table 2 (bytes per layer, 16-bit activations, 1-byte dropout masks).
    h, a, s, b = shape
    assume(a % t == 0)  # tensor parallelism splits whole heads (layer_costs refuses otherwise)
    spec = gpt_layer(h, a, s)
    sbh = s * b * h

    def act(recompute, sp):
        return layer_costs(spec, b, recompute=recompute, tensor_parallel=t, sequence_parallel=sp)[0].activation_bytes

    assert act("none", False) == pytest.approx(sbh * (10 + 24 / t + 5 * a * s / (h * t)), rel=1e-12)
    assert act("none", True) == pytest.approx(sbh * (34 + 5 * a * s / h) / t, rel=1e-12)
    assert act("selective", False) == pytest.approx(sbh * (10 + 24 / t), rel=1e-12)
    assert act("selective", True) == pytest.approx(34 * sbh / t, rel=1e-12)
    assert act("full", False) == 2 * sbh
    assert act("full", True) == pytest.approx(2 * sbh / t, rel=1e-12)
    if t == 1:  # exact in integers: compare the bytes times h
        assert act("none", False) * h == sbh * (34 * h + 5 * a * s)
        assert act("selective", False) == 34 * sbh


def test_weight_stash_is_what_w_needs_and_recompute_adds_backward_work():
    h, a, s, b = 1024, 16, 512, 2
    none, selective, full = (layer_costs(gpt_layer(h, a, s), b, recompute=r)[0] for r in ("none", "selective", "full"))
    # The weight GEMMs' inputs (QKV 2sbh + output projection 2sbh + fc1 2sbh + fc2 8sbh = 14sbh) and the
    # output gradients B made for them (QKV 6sbh + projection 2sbh + fc1 8sbh + fc2 2sbh = 18sbh):
    # 32sbh, the zero-bubble paper's M_W (Qi et al. 2024, Table 1).
    assert none.weight_stash_bytes == 32 * s * b * h == selective.weight_stash_bytes
    assert selective.input_grad_flops - none.input_grad_flops == 4 * b * s * s * h  # the attention core again
    assert full.input_grad_flops - none.input_grad_flops == none.forward_flops
    assert full.weight_stash_bytes <= full.activation_bytes


# --- Megatron-LM's theoretical memory report (megatron/training/theoretical_memory_usage.py) ------------
# Restated from its definitions (read, not copied): parameters of the most loaded shard are
# (transformer block / pp + one embedding table) / tp, with a block layer of 2h(f + 2) + 4h^2 (MHA,
# no linear biases) and a final LayerNorm of 2h; 18 bytes each without a distributed optimizer.
# Activations (sequence parallel + selective recompute) are those of the first stage:
# (L * sbh(18 + 4f/h) + 8sb * pp + sbh * pp) / tp, with pp microbatches in flight (m >= pp).
def megatron_most_loaded(L, h, V, s, b, pp, tp):
    layer = 2 * h * (4 * h + 2) + 4 * h * h
    block = L * layer + 2 * h
    params = (block / pp + V * h) / tp
    activations = (L * s * b * h * (18 + 4 * 4) + 8 * s * b * pp + s * b * h * pp) / tp
    return params, activations


@pytest.mark.parametrize("num_layers, pp, tp", [(22, 2, 1), (24, 4, 1), (24, 4, 2), (24, 8, 2), (22, 1, 1)])
def test_gpt_stage_memory_matches_megatron_theoretical_memory(num_layers, pp, tp):
    spec = gpt_1_5b(num_layers=num_layers)
    s, b, h, V, m = 1024, 2, 2304, 50_304, 16
    layers = layer_costs(spec, b, recompute="selective", tensor_parallel=tp, sequence_parallel=True)
    per_stage = num_layers // pp
    first = layers[: 1 + per_stage]  # the embedding and the first L/pp blocks (the most loaded stage)
    inflight = inflight_per_stage("1f1b", pp, m)[0]
    ours_params = sum(layer.params for layer in first)
    ours_act = inflight * sum(layer.activation_bytes for layer in first)
    theirs_params, theirs_act = megatron_most_loaded(num_layers, h, V, s, b, pp, tp)
    if pp == 1:  # one stage holds the output layer too; Megatron adds its logits and input
        theirs_act += s * b * h * 4 * (1 + V / h) / tp
        ours_params = sum(layer.params for layer in layers) - V * h / tp  # the tied table once
        ours_act = sum(layer.activation_bytes for layer in layers)
    assert ours_params == pytest.approx(theirs_params, rel=0.01)
    assert 18 * ours_params + ours_act == pytest.approx(18 * theirs_params + theirs_act, rel=0.01)
    assert ours_act == pytest.approx(theirs_act, rel=0.01)


def test_megatron_averages_layers_where_stages_are_uneven():
    # 22 layers on 4 stages: Megatron charges 5.5 layers to the first stage; pipeplan's exact split has 6.
    spec = gpt_1_5b()
    layers = layer_costs(spec, 1, recompute="selective")
    block = layers[1].activation_bytes
    _, theirs = megatron_most_loaded(22, 2304, 50_304, 1024, 1, 4, 1)
    ours = 4 * sum(layer.activation_bytes for layer in layers[:7])
    assert ours - theirs == pytest.approx(4 * 0.5 * block, rel=1e-9)


# --- frozen modules -------------------------------------------------------------------------------
def small_vla(**frozen: bool) -> ModelSpec:
    return ModelSpec("small", (
        VisionEncoder(name="vision", image_size=32, patch_size=8, num_layers=2, hidden_size=64, num_heads=4,
                      ffn_hidden_size=256, cameras=2, frozen=frozen.get("vision", False)),
        TransformerStack(name="llm", num_layers=3, hidden_size=64, num_heads=4, seq_length=32, ffn_hidden_size=256,
                         frozen=frozen.get("llm", False)),
        TransformerStack(name="head", num_layers=2, hidden_size=64, num_heads=4, seq_length=32, ffn_hidden_size=256,
                         frozen=frozen.get("head", False)),
    ))


def test_frozen_encoder_with_nothing_upstream_runs_forward_only():
    costs = layer_costs(small_vla(vision=True), 2)
    vision = [c for c in costs if c.modules == ("vision",)]
    assert all(c.input_grad_flops == c.weight_grad_flops == c.activation_bytes == c.trainable_params == 0
               for c in vision)
    assert all(c.forward_flops > 0 and c.params > 0 for c in vision)
    trained = [c for c in costs if c.modules != ("vision",)]
    assert all(c.input_grad_flops > 0 and c.weight_grad_flops > 0 for c in trained)


def test_frozen_middle_module_has_input_gradient_but_no_weight_gradient():
    full = layer_costs(small_vla(), 2)
    frozen = layer_costs(small_vla(llm=True), 2)
    for a, b in zip(full, frozen):
        if b.modules == ("llm",):
            assert b.weight_grad_flops == 0 and b.trainable_params == 0 and b.weight_stash_bytes == 0
            assert b.input_grad_flops == a.input_grad_flops > 0
            # no weight-GEMM inputs kept for a W it never runs: 2 bytes x (QKV, projection, fc1 inputs h, fc2 input f)
            tokens, h, f = 2 * 32, 64, 256
            assert 0 < b.activation_bytes == a.activation_bytes - 2 * tokens * (3 * h + f)
        else:
            assert b == a


def test_patch_embedding_has_no_input_gradient_and_profiles_accept_it():
    spec = small_vla()
    patch = layer_costs(spec, 1)[0]
    assert patch.input_grad_flops == 0 < patch.weight_grad_flops
    profile = layer_profile(spec, hardware.device("cpu"), 1)
    assert profile.weight[0] == profile.backward[0] > 0


def test_forward_only_layers_partition_and_simulate():
    profile = layer_profile(small_vla(vision=True), hardware.device("cpu"), 4)
    assert profile.backward[0] == 0
    costs = profile.stage_costs([3, 3, 2])  # stage 0 is the whole frozen encoder: no backward at all
    assert costs.backward[0] == 0
    for name in ("1f1b", "zb-h1"):
        timeline = simulate(build_schedule(name, num_stages=3, num_microbatches=6), costs)
        assert timeline.makespan > 0
    result = partition_layers(profile, 3, PartitionOptions(num_microbatches=6))
    assert sum(result.layers_per_stage) == profile.num_layers


def test_gr00t_llm_is_frozen_in_the_middle():
    spec = presets.get("gr00t-n1")
    assert not spec.trains("llm") and spec.needs_grad("llm")  # the vision tower below it trains
    llm = [c for c in layer_costs(spec, 1) if c.modules == ("llm",)]
    assert llm and all(c.weight_grad_flops == 0 < c.input_grad_flops for c in llm)


# --- tokens, repeats, joint layers, bytes across cuts --------------------------------------------
def test_token_counts_come_out_of_shapes():
    assert presets.get("driving-6cam").module("vision").tokens == 3456  # lesson 16: 6 cameras, 3456 tokens
    pi0 = presets.get("pi0")
    assert pi0.module_tokens()["vision"] == 3 * (224 // 14) ** 2 == 768
    assert pi0.module("llm").seq_length == 768 + 48  # openpi max_token_len = 48 for pi0
    assert pi0.module("action_expert").seq_length == 1 + 50  # state token + action_horizon


def test_joint_pair_is_one_layer_per_depth_and_sends_both_streams():
    spec = presets.get("pi0")
    costs = layer_costs(spec, 1)
    joint = [c for c in costs if c.modules == ("llm", "action_expert")]
    assert len(joint) == 18 and not any(c.modules == ("action_expert",) for c in costs)
    prefix, suffix = 816 * 2048 * 2, 51 * 1024 * 2
    assert joint[0].send_bytes == prefix + suffix
    assert joint[-1].send_bytes == suffix  # after the last depth only the expert's output goes on


def test_features_read_later_cross_every_cut_until_read():
    spec = presets.get("openvla-7b")
    costs = layer_costs(spec, 1)
    dino = 256 * 1024 * 2
    siglip = [c for c in costs if c.modules == ("siglip",)]
    assert siglip[0].send_bytes == dino + 256 * 1152 * 2  # the patch tokens + the DINOv2 features
    assert siglip[-1].send_bytes == dino + 256 * 1152 * 2  # both outputs, read by the projector
    projector = next(c for c in costs if c.modules == ("projector",))
    text = next(c for c in costs if c.modules == ("text_embedding",))
    assert projector.send_bytes == 256 * 4096 * 2  # the text embedding reads token ids (data), not this
    assert text.send_bytes == 256 * 4096 * 2 + 40 * 4096 * 2  # both are the LLM's input


def test_repeats_multiply_the_action_model_cost():
    spec = presets.get("cogact")
    once = spec.with_frozen({})
    dit = spec.module("action_dit")
    single = ModelSpec("one", tuple(m if m.name != "action_dit" else TransformerStack(**{**dit.__dict__, "repeats": 1})
                                    for m in once.modules))
    eight = [c for c in layer_costs(spec, 2) if c.modules == ("action_dit",)]
    one = [c for c in layer_costs(single, 2) if c.modules == ("action_dit",)]
    assert all(a.forward_flops == 8 * b.forward_flops for a, b in zip(eight, one))


def test_profile_times_are_flops_over_achievable_rate_and_files_round_trip(tmp_path):
    spec = presets.get("pi0")
    gpu = hardware.device("h100-80g", achievable_fraction=0.5)
    profile = layer_profile(spec, gpu, 2)
    costs = layer_costs(spec, 2)
    assert profile.forward[5] == pytest.approx(1e3 * costs[5].forward_flops / (989.4e12 * 0.5))
    assert profile.weight[5] == pytest.approx(1e3 * costs[5].weight_grad_flops / (989.4e12 * 0.5))
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"layers": profile.to_records()}))
    back = LayerProfile.from_file(path)
    assert back.send_bytes == profile.send_bytes and back.weight_stash_bytes == profile.weight_stash_bytes
    assert back.trainable_params == profile.trainable_params and back.names == profile.names
    assert profile.boundary_bytes([10, 20, 20]) == (costs[9].send_bytes, costs[29].send_bytes)


@pytest.mark.parametrize("name", presets.names())
def test_every_preset_round_trips_through_its_json_schema(name):
    spec = presets.get(name)
    back = ModelSpec.from_dict(json.loads(json.dumps(spec.to_dict())))
    assert layer_costs(back, 2) == layer_costs(spec, 2)
    assert all(math.isfinite(c.forward_flops) and c.forward_flops > 0 for c in layer_costs(spec, 1))


def test_the_example_spec_file_loads():
    spec = ModelSpec.from_file("examples/model_spec.json")
    assert spec.module("vision").tokens == 2 * 14 * 14 and spec.module("vision").frozen


# --- bad input ------------------------------------------------------------------------------------
def block(**overrides):
    fields = {"kind": "transformer", "name": "llm", "num_layers": 2, "hidden_size": 64, "num_heads": 4,
              "seq_length": 8, "ffn_hidden_size": 128}
    fields.update(overrides)
    return {key: value for key, value in fields.items() if value is not None}


@pytest.mark.parametrize("module, match", [
    (block(hidden_size=None), r"modules\[0\] \(llm\) lacks hidden_size"),
    (block(num_layers=-2), r"modules\[0\] \(llm\)\.num_layers must be an integer >= 1, got -2"),
    (block(seq_length=2.5), r"seq_length must be an integer >= 1, got 2.5"),
    (block(num_heads=6), r"num_heads = 6 must divide hidden_size = 64"),
    (block(num_kv_heads=3), r"num_kv_heads = 3 must divide num_heads = 4"),
    (block(norm="batchnorm"), r"norm must be one of layernorm, rmsnorm, none"),
    (block(colour="red"), r"unknown keys \['colour'\]"),
    (block(inputs=["vision"]), r"inputs names 'vision', which is not a module listed before it"),
    ({"kind": "conv", "name": "x"}, r"modules\[0\]\.kind must be one of"),
    ({"kind": "vision_encoder", "name": "v", "image_size": 225, "patch_size": 14, "num_layers": 1,
      "hidden_size": 64, "num_heads": 4, "ffn_hidden_size": 64}, r"image_size = 225 must be a multiple of patch_size"),
])
def test_bad_specs_name_the_field(module, match):
    with pytest.raises(InvalidInputError, match=match):
        ModelSpec.from_dict({"name": "bad", "modules": [module]})


def test_joint_and_cross_links_are_checked():
    gemma = TransformerStack(name="llm", num_layers=2, hidden_size=64, num_heads=4, seq_length=8, ffn_hidden_size=64)
    with pytest.raises(InvalidInputError, match=r"joint pair needs equal num_layers"):
        ModelSpec("x", (gemma, TransformerStack(name="e", num_layers=3, hidden_size=32, num_heads=4, seq_length=2,
                                                ffn_hidden_size=32, head_dim=16, joint_with="llm")))
    with pytest.raises(InvalidInputError, match=r"cross_attention.source must name a module listed before it"):
        ModelSpec("x", (TransformerStack(name="h", num_layers=1, hidden_size=64, num_heads=4, seq_length=8,
                                         ffn_hidden_size=64, cross_attention=CrossAttention("later")), gemma))
    with pytest.raises(InvalidInputError, match=r"used twice"):
        ModelSpec("x", (gemma, gemma))
    with pytest.raises(InvalidInputError, match=r"micro_batch_size must be >= 1, got 0"):
        layer_costs(ModelSpec("x", (gemma,)), 0)
    with pytest.raises(InvalidInputError, match=r"recompute must be"):
        layer_costs(ModelSpec("x", (gemma,)), 1, recompute="some")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match=r"has no module 'nope'"):
        ModelSpec("x", (gemma,)).with_frozen({"nope": True})


def test_spec_files_report_their_problems(tmp_path):
    bad = tmp_path / "m.json"
    bad.write_text("{not json")
    with pytest.raises(InvalidInputError, match="is not valid JSON"):
        ModelSpec.from_file(bad)
    with pytest.raises(InvalidInputError, match="does not exist"):
        ModelSpec.from_file(tmp_path / "none.json")
    other = tmp_path / "m.toml"
    other.write_text("")
    with pytest.raises(InvalidInputError, match=r"must end in .json, .yaml or .yml"):
        ModelSpec.from_file(other)


def test_projector_and_embedding_costs():
    spec = ModelSpec("p", (
        Embedding(name="emb", vocab_size=100, hidden_size=8, tokens=5),
        Projector(name="mlp", linears=(Linear(8, 16), Linear(16, 4)), tokens=5),
    ))
    emb, mlp = layer_costs(spec, 3)
    assert emb.forward_flops == 2 * 3 * 5 * 8 and emb.input_grad_flops == 0 and emb.params == 800
    assert mlp.forward_flops == 2 * 3 * 5 * (8 * 16 + 16 * 4) == mlp.weight_grad_flops
    assert mlp.params == 8 * 16 + 16 + 16 * 4 + 4
    assert mlp.send_bytes == 0 and emb.send_bytes == 3 * 5 * 8 * 2
