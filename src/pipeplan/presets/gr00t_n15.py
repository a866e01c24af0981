"""GR00T N1.5 (NVIDIA Isaac-GR00T): a frozen Eagle 2.5 VLM (SigLIP + Qwen3-1.7B cut at 12) and a trained DiT head.

    from pipeplan.presets.gr00t_n15 import gr00t_n15
    spec = gr00t_n15()
    spec.module("action_dit").seq_length        # 49 = 1 state + 32 future + 16 action tokens

Shapes: the N1.5 checkpoint config (nvidia/GR00T-N1.5-3B config.json, ``GR00T_N1_5``:
``backbone_cfg`` select_layer 12, project_to_dim null, tune_llm false; ``action_head_cfg``
backbone_embedding_dim 2048, input_embedding_dim 1536, hidden_size 1024, max_state_dim 64,
action_dim 32, action_horizon 16, 32 embodiments, num_target_vision_tokens 32, use_vlln,
``vl_self_attention_cfg`` 4 layers × 32 heads × 64, ``diffusion_model_cfg`` 16 layers × 32
heads × 48, cross_attention_dim 2048, output_dim 1024, interleave_self_attention) and the
N1.5 Eagle 2.5 config (gr00t/model/backbone/eagle2_hg_model/config.json of the N1.5 release:
``Eagle2_5_VLForConditionalGeneration``, SigLIP 1152/27/4304/16 at 224 px without pixel
shuffle (256 tokens per image), ``mlp_connector_layers`` 1 (one Linear 1152 → 2048),
vision ``select_layer`` 27, Qwen3-1.7B: 2048 wide, 16 heads × 128, 8 KV heads, SwiGLU
6144, vocabulary 151,680, tied).

Code (N1.5 release): gr00t/model/backbone/eagle_backbone.py keeps the first 12 Qwen3
layers and reads ``hidden_states[12]`` (the final norm applied); it does not remove
SigLIP's pooling ``head`` (unlike N1) nor Qwen3's ``lm_head``: ``self.eagle_model(...)``
runs the tied head over every token (logits nobody reads) and SigLIP's head and
post-layernorm (features are ``hidden_states[27]``, before them). The action head
(gr00t/model/action_head/flow_matching_action_head.py, cross_attention_dit.py) applies
``vlln`` (LayerNorm 2048) and ``vl_self_attention`` to the VL features, concatenates
``state_features, future_tokens, action_features`` (1 + 32 + 16 = 49 tokens) and runs the
DiT, whose even blocks cross-attend to the 2048-wide VL features and odd blocks
self-attend. Fine-tuning (scripts/gr00t_finetune.py of N1.5): ``tune_llm=False``,
``tune_visual=False`` (the vision tower and ``mlp1`` frozen), ``tune_projector`` and
``tune_diffusion_model`` true: only the action head trains, so the whole VLM runs forward
only. One camera (``video.ego_view``) and 32 text tokens by default (assumptions).

Not expressible exactly: Qwen3's per-head ``q_norm`` / ``k_norm`` (RMSNorm over 128
channels, 256 parameters a layer, 3,072 in all) have no field in a transformer stack, so
``llm`` is 3,072 parameters (1.3 ppm of the model) short of the checkpoint; ``vlln``'s
4,096 parameters are held by ``action_embedding`` (the layer before ``vl_self_attention``);
SigLIP's pooling head and post-layernorm hold their parameters without FLOPs (``map_head``;
the head's forward, about 0.3% of the tower's, is not counted).
"""

from __future__ import annotations

from dataclasses import replace

from ..models.modules import CrossAttention, Embedding, Linear, LMHead, Module, Projector, TransformerStack
from ..models.spec import ModelSpec
from ..models.training import ReferenceTraining
from ._components import siglip_so400m
from .gr00t import _HEAD, _TEXT_TOKENS, gr00t_n1

__all__ = ["gr00t_n15"]

_PATCHES = 256  # 224 px / 14, no pixel shuffle (use_pixel_shuffle false)
_FUTURE_TOKENS = 32  # num_target_vision_tokens
_VL_WIDTH = 2048  # backbone_embedding_dim (project_to_dim null: eagle_linear is Identity)
# Module paths (N1.5 release): gr00t/model/gr00t_n1.py GR00T_N1_5 (backbone, action_head);
# eagle_backbone.py: self.eagle_model = Eagle2_5_VLForConditionalGeneration (vision_model = HF
# SiglipVisionModel, mlp1, language_model = HF Qwen3ForCausalLM).
_EAGLE = "backbone.eagle_model."
_SIGLIP = _EAGLE + "vision_model.vision_model."
_QWEN = _EAGLE + "language_model."


def _eagle_25(cameras: int, text_tokens: int) -> list[Module]:
    """The frozen Eagle 2.5 VLM: SigLIP, ``mlp1``, Qwen3 embeddings, 12 layers and the (forward-only) tied head."""
    image_tokens = cameras * _PATCHES
    seq = image_tokens + text_tokens
    return [
        siglip_so400m("vision", cameras=cameras, map_head=True, frozen=True, fqn=(_SIGLIP + "encoder.layers.{i}",),
                      fqn_first=(_SIGLIP + "embeddings", _SIGLIP + "head"), fqn_last=(_SIGLIP + "post_layernorm",)),
        Projector(name="vision_projector", linears=(Linear(1152, 2048),), tokens=image_tokens, activation=False,
                  frozen=True, fqn=(_EAGLE + "mlp1",)),
        Embedding(name="text_embedding", vocab_size=151_680, hidden_size=2048, tokens=text_tokens, frozen=True,
                  fqn=(_QWEN + "model.embed_tokens",), role="embedding"),
        TransformerStack(name="llm", num_layers=12, hidden_size=2048, num_heads=16, num_kv_heads=8, head_dim=128,
                         seq_length=seq, ffn_hidden_size=6144, gated_mlp=True, norm="rmsnorm", final_norm=True,
                         causal=True, frozen=True, inputs=("vision_projector", "text_embedding"),
                         fqn=(_QWEN + "model.layers.{i}",), fqn_last=(_QWEN + "model.norm",), role="decoder"),
        # Qwen3ForCausalLM computes logits for every position (no labels, nothing reads them): forward only
        LMHead(name="lm_head", vocab_size=151_680, hidden_size=2048, tokens=seq, tied_to="text_embedding",
               frozen=True, inputs=(), fqn=(_QWEN + "lm_head",), role="loss"),
    ]


def gr00t_n15(*, action_horizon: int = 16, text_tokens: int = _TEXT_TOKENS, cameras: int = 1) -> ModelSpec:
    """GR00T-N1.5-3B: 2,413,522,880 parameters in the checkpoint, 1,068,806,144 of them (the action head) trained.

    Args:
        action_horizon: actions per chunk (16, the N1.5 config).
        text_tokens: prompt tokens of the VLM (32, an assumption). cameras: 224 px views per example (1).
    """
    width = 1536
    tokens = 1 + _FUTURE_TOKENS + action_horizon
    # N1's state / action encoders, timestep encoder, positions and embodiment decoders are N1.5's too
    # (flow_matching_action_head.py); N1.5 adds vlln, the future tokens and vl_self_attention.
    n1 = gr00t_n1(action_horizon=action_horizon)
    n1_embedding, n1_output = n1.module("action_embedding"), n1.module("action_output")
    assert isinstance(n1_embedding, Projector) and isinstance(n1_output, Projector)
    fqn = n1_embedding.fqn or ()
    modules: list[Module] = [
        *_eagle_25(cameras, text_tokens),
        replace(n1_embedding, output_tokens=tokens,
                norm_params=2 * _VL_WIDTH,  # vlln: LayerNorm(2048) on the VL features
                extra_params=n1_embedding.extra_params + _FUTURE_TOKENS * width,  # + the 32 future tokens
                fqn=(*fqn[:3], _HEAD + "future_tokens", _HEAD + "vlln", *fqn[3:])),
        # SelfAttentionTransformer over the VL tokens: BasicTransformerBlock, LayerNorm with affine, biases,
        # GELU 4 × 2048, dropout 0.2
        TransformerStack(name="vl_self_attention", num_layers=4, hidden_size=_VL_WIDTH, num_heads=32, head_dim=64,
                         seq_length=cameras * _PATCHES + text_tokens, ffn_hidden_size=4 * _VL_WIDTH, bias=True,
                         dropout=True, inputs=("llm",), fqn=(_HEAD + "vl_self_attention.transformer_blocks.{i}",)),
        TransformerStack(name="action_dit", num_layers=16, hidden_size=width, num_heads=32, head_dim=48,
                         seq_length=tokens, ffn_hidden_size=4 * width, bias=True, norm="none", dropout=True,
                         adaptive_norm=(2, 0), cross_attention=CrossAttention("vl_self_attention", every=2),
                         noise_samples=1,  # as N1: flow_matching_action_head.py samples one t per example
                         inputs=("action_embedding",), fqn=(_HEAD + "model.transformer_blocks.{i}",)),
        replace(n1_output, tokens=tokens),  # norm_out, proj_out_1/2, the embodiments' action decoders
    ]
    # scripts/gr00t_finetune.py (N1.5): HF Trainer, optim="adamw_torch", gradient_checkpointing=False, DDP, no EMA
    training = ReferenceTraining(dp_mode="ddp", ema=False, optimizer="adamw", implementation="gr00t",
                                 source="Isaac-GR00T N1.5 scripts/gr00t_finetune.py, gr00t/model/backbone/"
                                        "eagle_backbone.py, gr00t/model/action_head/flow_matching_action_head.py")
    return ModelSpec("gr00t-n1.5", tuple(modules),
                     "nvidia/GR00T-N1.5-3B: frozen Eagle 2.5 (Qwen3 layer 12) + VL self-attention + 16-block DiT",
                     training=training)
