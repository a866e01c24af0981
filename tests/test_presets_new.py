"""The new VLA presets (issue 22, part 2): exact parameter counts per module from the published shapes.

Each count below is recomputed here from the reference's shapes, layer by layer, with the source
file in a comment; none is read back from pipeplan's own arithmetic.
"""

from __future__ import annotations

import pytest

from pipeplan import presets
from pipeplan.errors import InvalidInputError
from pipeplan.engines import layer_names_in_reference, reference_of
from pipeplan.models.layer_costs import layer_costs


def _linear(i: int, o: int, bias: bool = True) -> int:
    return i * o + (o if bias else 0)


def _vit_block(h: int, f: int, *, bias: bool = True, norm: int = 2) -> int:
    # q, k, v, out and fc1, fc2 (with biases), two norms of `norm` parameters per channel
    return 4 * _linear(h, h, bias) + _linear(h, f, bias) + _linear(f, h, bias) + 2 * norm * h


def _siglip_so400m(patches: int = 256) -> int:
    # openpi siglip.py So400m/14 / HF SiglipVisionModel: patch conv 14·14·3 → 1152 with bias, a position
    # table of one row per patch, 27 encoder layers (1152, MLP 4304), post_layernorm
    h = 1152
    return (14 * 14 * 3 * h + h) + patches * h + 27 * _vit_block(h, 4304) + 2 * h


def _gemma_2b_blocks() -> int:
    # openpi gemma.py get_config("gemma_2b"): 18 layers, width 2048, 8 query heads × 256, 1 KV head,
    # GeGLU 16,384, two RMSNorms per layer, no biases; final_norm
    h, hd = 2048, 256
    attn = h * 8 * hd + 2 * h * 1 * hd + 8 * hd * h
    return 18 * (attn + 3 * h * 16_384 + 2 * h) + h


def test_pi0_fast_exact_count_per_module():
    # openpi src/openpi/models/pi0_fast.py (Pi0FASTConfig, Pi0FAST.__init__: SigLIP So400m/14 with
    # num_classes=2048, pool_type="none"), gemma_fast.py (Embedder: 257,152 × 2048, decode = embedding.T)
    spec = presets.get("pi0-fast")
    expected = {
        "vision": _siglip_so400m(),
        "vision_projector": _linear(1152, 2048),  # siglip head Dense(num_classes=2048)
        "text_embedding": 257_152 * 2048,
        "llm": _gemma_2b_blocks(),
        "lm_head": 0,  # tied: Embedder.decode
    }
    assert spec.module_parameters() == expected
    assert spec.num_parameters() == sum(expected.values()) == 2_923_335_408
    assert spec.trainable_parameters() == spec.num_parameters()  # no freeze filter without LoRA
    # compute_loss: 768 image + 250 text tokens minus the last; logits for the 249 targets only
    assert spec.module("llm").seq_length == 3 * 256 + 250 - 1
    assert spec.module("lm_head").tokens == 249
    head = next(c for c in layer_costs(spec, 1) if c.name == "lm_head.0")
    assert head.forward_flops == 2 * 249 * 2048 * 257_152
    training = spec.training
    assert training is not None and training.ema and training.mode_of("llm") == "full"
    assert "action_horizon" not in presets.options("pi0-fast")  # FAST packs the chunk into the text tokens
    with pytest.raises(InvalidInputError, match="text_tokens of preset 'pi0-fast' must be >= 2"):
        presets.get("pi0-fast", text_tokens=1)


def _gr00t_category_mlps(e: int = 32, w: int = 1536, hid: int = 1024, state: int = 64, action: int = 32):
    # flow_matching_action_head.py: CategorySpecificLinear holds W (e, in, out) and b (e, out) per layer
    state_encoder = e * (_linear(state, hid) + _linear(hid, w))
    action_encoder = e * (_linear(action, w) + _linear(2 * w, w) + _linear(w, w))  # W1, W2, W3
    action_decoder = e * (_linear(hid, hid) + _linear(hid, action))
    return state_encoder, action_encoder, action_decoder


def test_gr00t_n15_exact_count_per_module():
    # nvidia/GR00T-N1.5-3B config.json (action_head_cfg, backbone_cfg) and the N1.5 Eagle 2.5 config
    # (gr00t/model/backbone/eagle2_hg_model/config.json: SigLIP 1152/27/4304, mlp_connector_layers 1,
    # Qwen3-1.7B 2048, 16 × 128 heads, 8 KV heads, SwiGLU 6144, vocabulary 151,680, tied)
    h = 1152
    siglip_head = h + (3 * h * h + 3 * h) + _linear(h, h) + 2 * h + _linear(h, 4304) + _linear(4304, h)
    qwen3_layer = (2048 * 2048 + 2 * 2048 * 1024 + 2048 * 2048) + 3 * 2048 * 6144 + 2 * 2048
    qk_norms = 2 * 128  # q_norm, k_norm per layer: not expressible in a stack (see the preset's doc)
    w = 1536
    state_encoder, action_encoder, action_decoder = _gr00t_category_mlps()
    # cross_attention_dit.py: TimestepEncoder (TimestepEmbedding 256 → w → w), BasicTransformerBlock
    # (attn1 q/k/v/out with biases; k, v read the 2048-wide VL features on even blocks, AdaLayerNorm
    # Linear(w, 2w), norm3 without affine, FeedForward gelu-approximate 4w with biases)
    def dit_block(kv: int) -> int:
        return _linear(w, w) + 2 * _linear(kv, w) + _linear(w, w) + _linear(w, 2 * w) + _linear(w, 4 * w) \
            + _linear(4 * w, w)
    # SelfAttentionTransformer: 4 BasicTransformerBlocks, 2048 wide (32 × 64), LayerNorms with affine
    vl_block = 4 * _linear(2048, 2048) + _linear(2048, 8192) + _linear(8192, 2048) + 2 * 2 * 2048
    expected = {
        "vision": _siglip_so400m() + siglip_head,  # eagle_backbone.py (N1.5) keeps the head
        "vision_projector": _linear(1152, 2048),  # mlp1: one Linear without pixel shuffle
        "text_embedding": 151_680 * 2048,
        "llm": 12 * qwen3_layer + 2048,  # select_layer 12, final norm
        "lm_head": 0,  # tied
        "action_embedding": state_encoder + action_encoder + 1024 * w + 32 * w + 2 * 2048
        + _linear(256, w) + _linear(w, w),  # + positions, future_tokens, vlln, timestep encoder
        "vl_self_attention": 4 * vl_block,
        "action_dit": 8 * dit_block(2048) + 8 * dit_block(w),
        "action_output": _linear(w, 2 * w) + _linear(w, 1024) + action_decoder,  # proj_out_1, proj_out_2
    }
    spec = presets.get("gr00t-n1.5")
    assert spec.module_parameters() == expected
    assert spec.num_parameters() + 12 * qk_norms == 2_413_522_880  # the checkpoint, q/k norms included
    # scripts/gr00t_finetune.py (N1.5): tune_llm=False, tune_visual=False: only the action head trains
    trained = sum(expected[m] for m in ("action_embedding", "vl_self_attention", "action_dit", "action_output"))
    assert spec.trainable_parameters() == trained == 1_068_806_144
    assert spec.module("action_dit").seq_length == 1 + 32 + 16  # state, future tokens, actions
    costs = {c.name: c for c in layer_costs(spec, 1)}
    for frozen in ("vision.1", "llm.11", "lm_head.0"):
        assert costs[frozen].input_grad_flops == costs[frozen].weight_grad_flops == 0  # forward only
    assert costs["lm_head.0"].forward_flops == 2 * (256 + 32) * 2048 * 151_680  # logits on every token
    assert presets.get("gr00t-n1.5", cameras=2).module("llm").seq_length == 2 * 256 + 32


def test_rdt_1b_exact_count_per_module():
    # RoboticsDiffusionTransformer configs/base.yaml, models/rdt_runner.py, models/rdt/model.py, blocks.py
    h, horizon, image_rows = 2048, 64, 2 * 3 * 729  # img_history_size × num_cameras × SigLIP-384 patches
    # RDTBlock: norm1, timm Attention (qkv + bias, q/k RmsNorm over 64, proj + bias), norm2, CrossAttention
    # (q, kv, proj with biases, q/k RmsNorm), norm3, Mlp h → h → h with biases
    block = h + _linear(h, 3 * h) + 2 * 64 + _linear(h, h) + h + _linear(h, h) + _linear(h, 2 * h) + 2 * 64 \
        + _linear(h, h) + h + 2 * _linear(h, h)
    short_per_block = 2 * h + h + 4 * 64  # see the preset's doc: two biases, one norm, the q/k norms
    embedders = 2 * (_linear(256, h) + _linear(h, h))  # t_embedder, freq_embedder
    positions = (horizon + 3) * h + 1024 * h + image_rows * h  # x_pos, lang_cond_pos, img_cond_pos
    state_adaptor = _linear(2 * 128, h) + 2 * _linear(h, h)  # mlp3x_gelu over state + mask
    # T5 v1.1 XXL encoder: 24 blocks (q, k, v, o 4096², gated-GELU wi_0, wi_1, wo 10,240, two RMS norms),
    # relative_attention_bias 32 × 64 in block 0, final_layer_norm, shared 32,128 × 4096
    t5_block = 4 * 4096 * 4096 + 3 * 4096 * 10_240 + 2 * 4096
    # SigLIP so400m-patch14-384 with its pooling head (as in the GR00T N1.5 test): 729 positions
    siglip = _siglip_so400m(patches=729) + 1152 + (3 * 1152 ** 2 + 3 * 1152) + _linear(1152, 1152) + 2 * 1152 \
        + _linear(1152, 4304) + _linear(4304, 1152)
    expected = {
        "vision": siglip,
        "text_embedding": 32_128 * 4096,
        "text_encoder": 24 * t5_block + 32 * 64 + 4096 - 32 * 64,  # relative bias not expressible
        "img_adaptor": _linear(1152, h) + _linear(h, h),
        "lang_adaptor": _linear(4096, h) + _linear(h, h),
        "action_embedding": state_adaptor + embedders + positions,
        "rdt": 28 * (block - short_per_block),
        "action_output": h + _linear(h, h) + _linear(h, 128),  # FinalLayer: norm_final, ffn_final
    }
    spec = presets.get("rdt-1b")
    assert spec.module_parameters() == expected
    trained = sum(v for k, v in expected.items() if k not in ("vision", "text_embedding", "text_encoder"))
    assert spec.trainable_parameters() == trained
    assert trained + 28 * short_per_block == 1_228_319_872  # RDTRunner's "Diffusion params"
    # a block's weights (qkv, proj; q, kv, proj; fc1, fc2) run on each of the 67 tokens: linear FLOPs exact,
    # plus the modelled attention scores over the 67 tokens (an odd layer, which stands for the language one)
    weights = _linear(h, 3 * h, False) + 3 * _linear(h, h, False) + _linear(h, 2 * h, False) + 2 * _linear(h, h, False)
    costs = {c.name: c for c in layer_costs(spec, 1)}
    cross, self_ = costs["rdt.0"], costs["rdt.1"]
    assert self_.forward_flops == 2 * 67 * weights + 2 * 2 * 67 * 67 * h
    kv = 2 * image_rows * h * 2 * h  # the kv projection over the 4374 image tokens, even layers
    assert cross.forward_flops - self_.forward_flops == kv - 2 * 67 * h * 2 * h + 2 * 2 * 67 * (image_rows - 67) * h
    assert costs["text_encoder.0"].input_grad_flops == costs["vision.1"].input_grad_flops == 0  # no_grad
    training = spec.training
    assert training is not None and training.dp_mode == "zero2" and training.ema  # configs/zero2.json, EMAModel


def test_smolvla_exact_count_per_module():
    # lerobot policies/smolvla: configuration_smolvla.py, smolvlm_with_expert.py, modeling_smolvla.py;
    # SmolVLM2-500M-Video-Instruct: SigLIP-B/16 at 512 px, connector Linear(12288, 960, bias=False),
    # SmolLM2-360M text model (960, 15 × 64 heads, 5 KV heads, SwiGLU 2560, vocabulary 49,280), untied lm_head
    v, t, e = 768, 960, 720
    expert_mlp = 2048  # get_intermediate_size(720): 256 · ceil(4 · int(2 · 720 / 3) / 256)
    assert 256 * -(-4 * int(2 * e / 3) // 256) == expert_mlp
    vlm_layer = (t * t + 2 * t * 320 + t * t) + 3 * t * 2560 + 2 * t
    expert_self = (e * t + 2 * e * 320 + t * e) + 3 * e * expert_mlp + 2 * e
    expert_cross = (e * t + 2 * 320 * 320 + t * e) + 3 * e * expert_mlp + 2 * e  # k/v read the VLM's K/V
    expected = {
        "vision": (16 * 16 * 3 * v + v) + 1024 * v + 12 * _vit_block(v, 3072) + 2 * v,
        "connector": 16 * v * t,
        "text_embedding": 49_280 * t,
        "state_proj": _linear(32, t),
        "llm": 16 * vlm_layer + t,  # num_vlm_layers 16, text_model.norm
        "lm_head": 49_280 * t,
        "action_embedding": _linear(32, e) + _linear(2 * e, e) + _linear(e, e),
        "action_expert": 8 * expert_self + 8 * expert_cross + e,
        "action_output": _linear(e, 32),
    }
    spec = presets.get("smolvla")
    assert spec.module_parameters() == expected
    assert spec.num_parameters() == 450_046_176
    # train_expert_only, freeze_vision_encoder; train_state_proj
    trained = {"state_proj", "action_embedding", "action_expert", "action_output"}
    assert {m.name for m in spec.modules if spec.trains(m.name)} == trained
    assert spec.trainable_parameters() == 99_880_992
    costs = {c.name: c for c in layer_costs(spec, 1)}
    assert costs["vision.1"].input_grad_flops == 0  # frozen, nothing trained upstream
    assert costs["llm.0"].input_grad_flops > 0 and costs["llm.0"].weight_grad_flops == 0  # the state token's path
    assert spec.module("llm").seq_length == 3 * 64 + 48 + 1
    assert presets.get("smolvla", action_horizon=10).module("action_expert").seq_length == 10


def _small_stem16(channels: int = 6) -> int:
    # octo vit_encoders.py SmallStem: StdConv 3×3 (32, 96, 192, 384) with biases and GroupNorm scale + bias,
    # then the 1×1 "embedding" Conv to 512
    total = 0
    for features in (32, 96, 192, 384):
        total += 3 * 3 * channels * features + features + 2 * features
        channels = features
    return total + _linear(384, 512)


@pytest.mark.parametrize("size, width, mlp, total", [
    ("small", 384, 1536, 27_042_060),  # vit_s (transformer.py common_transformer_sizes)
    ("base", 768, 3072, 92_830_092),  # vit_b
])
def test_octo_exact_count_per_module(size, width, mlp, total):
    # octo scripts/configs/octo_pretrain_config.py, octo_module.py, tokenizers.py, diffusion.py
    w = width
    block = 2 * 2 * w + 4 * _linear(w, w) + _linear(w, mlp) + _linear(mlp, w)  # LN, MHA, LN, MlpBlock
    # ScoreActor: FourierFeatures kernel (16, 1), cond MLP (64, 32), MLPResNet 256 wide, 3 blocks, out 4 · 7
    head = 16 + _linear(32, 64) + _linear(64, 32) + _linear(32 + w + 28, 256) \
        + 3 * (2 * 256 + _linear(256, 1024) + _linear(1024, 256)) + _linear(256, 28)
    t5_block = 4 * 768 * 768 + 2 * 768 * 3072 + 2 * 768  # t5-base: ReLU FFN, no biases
    expected = {
        # stem + obs_{name}_projection + obs_{name}_pos_embedding (max_horizon 10 × tokens × w)
        "primary_stem": _small_stem16() + _linear(512, w) + 10 * 256 * w,
        "wrist_stem": _small_stem16() + _linear(512, w) + 10 * 64 * w,
        "text_embedding": 32_128 * 768,
        "text_encoder": 12 * t5_block + 768,  # relative_attention_bias (32 × 12) not expressible
        "language_projection": _linear(768, w) + 16 * w + 10 * w,  # + task and readout position tables
        "transformer": 12 * block + 2 * w,  # encoder_norm
        "action_head": head,
    }
    spec = presets.get(f"octo-{size}")
    assert spec.module_parameters() == expected
    assert spec.trainable_parameters() == total  # frozen_keys=("*hf_model*",): T5 excluded
    assert spec.num_parameters() + 32 * 12 == total + 109_628_544  # + t5-base's encoder, 109.6M
    assert spec.module("transformer").seq_length == 16 + 2 * (256 + 64 + 1)  # window 2
    stem = next(c for c in layer_costs(spec, 1) if c.name == "primary_stem.0")
    # each conv as im2col over its output positions (2 frames): 128², 64², 32², 16² and the 1×1 conv, projection
    convs = [(128, 54, 32), (64, 288, 96), (32, 864, 192), (16, 1728, 384), (16, 384, 512), (16, 512, w)]
    assert stem.forward_flops == sum(2 * 2 * side * side * i * o for side, i, o in convs)


def _lora(i: int, o: int, r: int = 32) -> int:
    return r * (i + o)  # peft LoRA: A (r × in) and B (out × r)


def test_openvla_oft_extra_modules_exact():
    # openvla-oft vla-scripts/finetune.py (LoRA r=32, target_modules="all-linear"), LIBERO.md recipe,
    # prismatic/models/action_heads.py (L1RegressionActionHead: MLPResNet(2, 7 · 4096, 4096, 7)),
    # prismatic/models/projectors.py (ProprioProjector 8 → 4096 → 4096), prismatic/vla/constants.py (LIBERO)
    llama = 32 * (4 * _lora(4096, 4096) + 2 * _lora(4096, 11_008) + _lora(11_008, 4096))
    dino = 24 * (_lora(1024, 3 * 1024) + _lora(1024, 1024) + _lora(1024, 4096) + _lora(4096, 1024))
    siglip = 27 * (_lora(1152, 3 * 1152) + _lora(1152, 1152) + _lora(1152, 4304) + _lora(4304, 1152))
    attn_pool = _lora(1152, 1152) + _lora(1152, 2 * 1152) + _lora(1152, 1152) + _lora(1152, 4304) \
        + _lora(4304, 1152)  # timm MAP head: q, kv, proj, mlp
    projector = _lora(2176, 8704) + _lora(8704, 4096) + _lora(4096, 4096)
    head = 2 * 7 * 4096 + _linear(7 * 4096, 4096) + 2 * (2 * 4096 + _linear(4096, 4096)) + 2 * 4096 \
        + _linear(4096, 7)
    spec, openvla = presets.get("openvla-oft"), presets.get("openvla-7b")
    extra = {"lora_adapters": llama + dino + siglip + attn_pool + projector,
             "proprio_projector": _linear(8, 4096) + _linear(4096, 4096), "action_head": head}
    assert {name: spec.num_parameters(name) for name in extra} == extra
    assert spec.num_parameters() - openvla.num_parameters() == sum(extra.values()) == 277_499_911
    assert spec.trainable_parameters() == 277_499_911  # LoRA: the base weights are frozen
    for name, count in openvla.module_parameters().items():
        split = spec.num_parameters(f"{name}_patch") if name in ("dinov2", "siglip") else 0
        assert spec.num_parameters(name) + split == count  # the same base weights (towers: patch layer apart)
    costs = {c.name: c for c in layer_costs(spec, 1)}
    # under LoRA the frozen base layers still run their backward (B), but no W of their own
    assert costs["dinov2.1"].input_grad_flops > 0 and costs["dinov2.1"].weight_grad_flops == 0
    assert costs["dinov2_last.0"].input_grad_flops == 0  # features from the second-to-last block
    assert costs["siglip_patch.0"].input_grad_flops == costs["siglip_patch.0"].activation_bytes == 0  # a conv
    assert costs["lm_head.0"].input_grad_flops == 0  # logits computed (labels passed), L1 loss only
    # 2 images × 256 patches, the proprio token, 33 prompt + 56 action positions + stop
    assert spec.module("llm").seq_length == 2 * 256 + 1 + 33 + 56 + 1
    assert spec.module("action_head").tokens == 8


@pytest.mark.parametrize("name, depth, width, total", [
    ("cogact-dit-s", 6, 384, 12_476_807),  # CogACT action_model/action_model.py DiT_S
    ("cogact", 12, 768, 88_986_887),  # DiT_B, the default action_model_type
    ("cogact-dit-l", 24, 1024, 307_764_231),  # DiT_L
])
def test_cogact_action_model_exact_count_per_module(name, depth, width, total):
    # CogACT action_model/models.py: x_embedder Linear(7, w), t_embedder (256 → w → w), z_embedder
    # Linear(4096, w) + a 4096-wide null condition, history_embedder Linear(7, w), 17 positions,
    # DiTBlock (timm Attention qkv + proj with biases, Mlp 4w, no adaLN), FinalLayer Linear(w, 7)
    w = width
    expected = {
        "action_embedding": _linear(7, w) + _linear(256, w) + _linear(w, w) + _linear(4096, w) + 4096
        + _linear(7, w) + 17 * w,
        "action_dit": depth * (_linear(w, 3 * w) + _linear(w, w) + _linear(w, 4 * w) + _linear(4 * w, w)),
        "action_output": _linear(w, 7),
    }
    spec = presets.get(name)
    assert {m: spec.num_parameters(m) for m in expected} == expected
    assert sum(expected.values()) == total
    vlm = presets.get("cogact")
    assert spec.num_parameters() - total == vlm.num_parameters() - 88_986_887  # the same VLM
    assert spec.module("action_dit").repeats == 8  # repeated_diffusion_steps
    assert spec.training == vlm.training


_NEW = ["pi0-fast", "gr00t-n1.5", "rdt-1b", "smolvla", "octo-small", "octo-base", "openvla-oft", "cogact-dit-s",
        "cogact-dit-l"]


def test_new_presets_name_their_reference_paths():
    names = {name: layer_names_in_reference(presets.get(name)) for name in _NEW}
    assert all(reference_of(presets.get(name)) is not None for name in _NEW)
    # one pipeline layer per DiT block, as the reference names it
    gr00t = [n.fqns for n in names["gr00t-n1.5"] if n.fqns[0].startswith("action_head.model.transformer_blocks")]
    assert gr00t == [(f"action_head.model.transformer_blocks.{i}",) for i in range(16)]
    assert ("model.blocks.27",) in [n.fqns for n in names["rdt-1b"]]  # RDTRunner.model.blocks, depth 28
    expert = [n for n in names["smolvla"] if any("lm_expert.layers." in p for p in n.fqns)]
    assert len(expert) == 16 and expert[-1].fqns[-1] == "model.vlm_with_expert.lm_expert.norm"
    oft = [p for n in names["openvla-oft"] for p in n.fqns]
    assert "vision_backbone.fused_featurizer.blocks.25" in oft and "language_model.model.layers.31" in oft
    assert [n.role for n in names["pi0-fast"]].count("decoder") == 18


@pytest.mark.parametrize("name", _NEW)
def test_model_verb_runs_for_each_new_preset(run_cli, name):
    status, out, err = run_cli("model", "--preset", name, "--gpu", "h100-80g", "--micro-batch-size", "1")
    assert status == 0, err
    assert out


@pytest.mark.parametrize("name, option, value, match", [
    ("pi0-fast", "action_horizon", 10, r"preset 'pi0-fast' has no option 'action_horizon'"),
    ("octo-small", "cameras", 3, r"preset 'octo-small' has no option 'cameras'"),
    ("rdt-1b", "action_horizon", 0, r"must be an integer in 1..1024, got 0"),
    ("smolvla", "cameras", 65, r"must be an integer in 1..64"),
])
def test_new_presets_reject_options_they_lack(name, option, value, match):
    with pytest.raises(InvalidInputError, match=match):
        presets.get(name, **{option: value})


@pytest.mark.parametrize("name, option, module, expected", [
    ("gr00t-n1.5", {"action_horizon": 8}, "action_dit", 1 + 32 + 8),
    ("rdt-1b", {"action_horizon": 32}, "rdt", 32 + 3),
    ("rdt-1b", {"cameras": 1}, "img_adaptor", 2 * 729),
    ("octo-base", {"text_tokens": 8}, "transformer", 8 + 2 * 321),
    ("openvla-oft", {"cameras": 1}, "llm", 256 + 1 + 90),
])
def test_new_presets_shape_options(name, option, module, expected):
    spec = presets.get(name, **option)
    shape = spec.module(module)
    assert (getattr(shape, "seq_length", None) or getattr(shape, "tokens")) == expected
