"""Presets against their reference code: exact counts from the published shapes, options, training defaults."""

from __future__ import annotations

import pytest

from pipeplan import presets
from pipeplan.errors import InvalidInputError
from pipeplan.models.layer_costs import layer_costs, layer_profile


def _linear(i: int, o: int, bias: bool = True) -> int:
    return i * o + (o if bias else 0)


def _siglip_block(h: int = 1152, f: int = 4304) -> int:
    # timm / HF SigLIP encoder layer: q, k, v, out with biases, fc1/fc2 with biases, 2 LayerNorms
    return 4 * _linear(h, h) + _linear(h, f) + _linear(f, h) + 2 * 2 * h


def test_gr00t_n1_exact_count_from_its_shapes():
    # Isaac-GR00T (N1): eagle2_hg_model/config.json (SigLIP 1152/27/4304 at 224 px, mlp1, SmolLM2 2048/32 heads/
    # SwiGLU 8192, vocabulary 49,164), eagle_backbone.py (head -> Identity, 12 layers kept, linear 2048 -> 1536),
    # flow_matching_action_head.py + cross_attention_dit.py (32 embodiments, 16 DiT blocks of 1536, no future tokens).
    h = 1152
    vision = (14 * 14 * 3 * h + h) + 256 * h + 27 * _siglip_block() + 2 * h
    mlp1 = 2 * 4 * h + _linear(4 * h, 2048) + _linear(2048, 2048)
    text = 49_164 * 2048
    llm = 12 * (4 * 2048 * 2048 + 3 * 2048 * 8192 + 2 * 2048) + 2048
    e, w, hid = 32, 1536, 1024
    state = e * (_linear(64, hid) + _linear(hid, w))
    action = e * (_linear(32, w) + _linear(2 * w, w) + _linear(w, w))
    timestep = _linear(256, w) + _linear(w, w)
    positions = 1024 * w
    # a DiT block: attn1 (q, k, v with bias, out with bias; k/v read 1536-wide VLM features), AdaLayerNorm
    # Linear(w, 2w), FeedForward GELU 4w with biases (norm3 without affine)
    block = 4 * _linear(w, w) + _linear(w, 2 * w) + _linear(w, 4 * w) + _linear(4 * w, w)
    out = _linear(w, 2 * w) + _linear(w, hid)  # proj_out_1, proj_out_2
    decoder = e * (_linear(hid, hid) + _linear(hid, 32))
    total = (vision + mlp1 + text + llm + _linear(2048, w) + state + action + timestep + positions + 16 * block
             + out + decoder)
    spec = presets.get("gr00t-n1")
    assert spec.num_parameters() == total == 2_190_016_752
    assert spec.module("action_dit").seq_length == 1 + 16  # 1 state + 16 action tokens (N1)
    assert not spec.trains("text_embedding") and not spec.trains("llm")  # tune_llm=False
    assert spec.trainable_parameters() == total - text - llm


def test_openvla_last_vision_blocks_run_forward_only():
    # prismatic dinosiglip_vit.py: get_intermediate_layers(n={len(blocks) - 2}); timm 0.9.10 runs every block
    spec = presets.get("openvla-7b")
    assert spec.num_parameters() == 7_541_237_184  # HF openvla/openvla-7b
    costs = {c.name: c for c in layer_costs(spec, 1)}
    for last in ("dinov2_last.0", "siglip_last.0"):
        assert costs[last].forward_flops > 0
        assert costs[last].input_grad_flops == costs[last].weight_grad_flops == costs[last].activation_bytes == 0
    assert costs["dinov2.23"].weight_grad_flops > 0  # the feature block trains
    assert spec.module("dinov2").num_layers == 23 and spec.module("siglip").num_layers == 26


def test_cogact_runs_its_lm_head_forward_only():
    # CogACT vla/cogactvla.py passes labels to the VLM; only the action loss is backpropagated
    spec = presets.get("cogact")
    head = next(c for c in layer_costs(spec, 1) if c.name == "lm_head.0")
    assert head.forward_flops == 2 * (256 + 40) * 4096 * 32_064 and head.input_grad_flops == 0
    assert spec.num_parameters() - presets.get("openvla-7b").num_parameters() == sum(
        spec.num_parameters(m) for m in ("action_embedding", "action_dit", "action_output"))


def test_reference_training_defaults():
    openpi = presets.get("pi0").training
    assert openpi is not None and openpi.ema and openpi.dp_mode == "ddp"  # openpi TrainConfig: fsdp_devices=1
    assert {openpi.mode_of(m) for m in ("vision", "llm", "action_expert")} == {"full"}
    for name in ("openvla-7b", "cogact"):
        training = presets.get(name).training
        assert training is not None and training.mode_of("llm") == "full" and training.mode_of("siglip") == "none"
        assert training.dp_mode == "hsdp"  # prismatic fsdp.py: "full-shard" -> ShardingStrategy.HYBRID_SHARD
    gr00t = presets.get("gr00t-n1").training
    assert gr00t is not None and gr00t.recompute == {} and gr00t.default_recompute == "none"
    for name in presets.names():
        spec = presets.get(name)
        if spec.training is not None:
            for module in spec.training.recompute:
                spec.module(module)  # a recompute entry names a module of the spec


@pytest.mark.parametrize("horizon", [10, 15, 16, 50])
def test_pi0_action_horizon_is_an_option(horizon):
    spec = presets.get("pi0", action_horizon=horizon)
    assert spec.module("action_expert").seq_length == 1 + horizon
    assert spec.module("action_output").tokens == horizon
    assert spec.num_parameters() == presets.get("pi0").num_parameters()  # shapes, not weights
    assert presets.get("pi0").module("action_expert").seq_length == 51  # Pi0Config default stays 50


def test_shape_options_change_the_token_counts():
    spec = presets.get("pi0", cameras=2, image_size=448, text_tokens=64)
    assert spec.module("llm").seq_length == 2 * (448 // 14) ** 2 + 64
    assert presets.get("gr00t-n1", action_horizon=8).module("action_dit").seq_length == 9


@pytest.mark.parametrize("name, option, value, match", [
    ("gpt-1.5b", "action_horizon", 10, r"preset 'gpt-1.5b' has no option 'action_horizon'; its options: none"),
    ("openvla-7b", "cameras", 2, r"has no option 'cameras'; its options: text_tokens"),
    ("pi0", "action_horizon", 0, r"action_horizon of preset 'pi0' must be an integer in 1..1024, got 0"),
    ("pi0", "cameras", 10_000, r"must be an integer in 1..64"),
])
def test_bad_options_are_one_clear_error(name, option, value, match):
    with pytest.raises(InvalidInputError, match=match):
        presets.get(name, **{option: value})


@pytest.mark.parametrize("argv", [
    ["--preset", "gpt-1.5b", "--action-horizon", "10"],
    ["--preset", "pi0", "--action-horizon", "0"],
    ["--preset", "pi0", "--cameras", "1000"],
])
def test_bad_options_on_the_cli_are_one_line_exit_2(run_cli, argv):
    status, out, err = run_cli("model", *argv)
    assert status == 2 and out == "" and err.count("\n") == 1


def test_model_table_and_presets_listing_agree_on_every_count(run_cli):
    import json
    status, out, _ = run_cli("presets", "--json")
    listed = {row["name"]: row["parameters"] for row in json.loads(out)}
    assert listed == {name: presets.get(name).num_parameters() for name in presets.names()}
    for name in ("gpt-1.5b", "cogact"):
        spec = presets.get(name)
        held, _trained = layer_profile(spec, __import__("pipeplan").hardware.device("h100-80g"), 1).held_params()
        assert held == spec.num_parameters()  # a tied table once: 1.52B for gpt-1.5b in both views
