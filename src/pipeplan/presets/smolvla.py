"""SmolVLA (Hugging Face lerobot): SmolVLM2-500M cut to 16 layers, frozen, and a 0.75-width action expert.

    from pipeplan.presets.smolvla import smolvla
    spec = smolvla()
    spec.trainable_parameters()          # 99,880,992: the expert and the four projections

Shapes and code (lerobot src/lerobot/policies/smolvla/): configuration_smolvla.py
(``vlm_model_name`` HuggingFaceTB/SmolVLM2-500M-Video-Instruct, ``num_vlm_layers`` 16,
``expert_width_multiplier`` 0.75, ``attention_mode`` cross_attn, ``self_attn_every_n_layers``
2, ``chunk_size`` 50, ``max_state_dim`` / ``max_action_dim`` 32, ``tokenizer_max_length``
48, ``resize_imgs_with_padding`` 512 × 512, ``freeze_vision_encoder`` and
``train_expert_only`` true, ``train_state_proj`` true; AdamW betas (0.9, 0.95));
smolvlm_with_expert.py (SmolVLMWithExpertModel: the VLM's text model keeps its first 16
layers; the expert is a Llama copy of its text config at width 720 with MLP
``get_intermediate_size(720)`` = 2048, 15 heads × 64, 5 KV heads, no embedding; on the
cross-attention layers its ``k_proj`` / ``v_proj`` read the VLM's 320-wide keys and values
of the same layer); modeling_smolvla.py (VLAFlowMatching: ``state_proj`` 32 → 960 as one
prefix token, ``action_in_proj``, ``action_time_mlp_in`` 1440 → 720, ``action_time_mlp_out``,
``action_out_proj``; images × √960, 64 tokens each after the connector). SmolVLM2-500M:
SigLIP-B/16 at 512 px (768 wide, 12 layers, MLP 3072, 1024 patches), the connector's pixel
shuffle (scale 4: 64 tokens of 12,288) and ``Linear(12288, 960, bias=False)``, SmolLM2-360M
(960 wide, 15 heads × 64, 5 KV heads, SwiGLU 2560, vocabulary 49,280) and an untied
``lm_head`` that SmolVLA never runs (``set_requires_grad`` names it among the parameters).
The VLM is frozen, but the trained ``state_proj`` token enters it, so its layers run a
backward for the input gradient (B, no W); the vision tower runs forward only. Three
cameras by default (an assumption: lerobot takes the dataset's image features).

Approximations (parameters exact per module): the expert cross-attends on SmolVLA's odd
layers and self-attends (jointly over the VLM prefix and its own tokens) on the even ones;
here it cross-attends on the even layers (``every=2`` counts from 0), so the two kinds of
layer of each pair are swapped; it reads the VLM's last output instead of each layer's
keys and values (a pipeline cut inside the VLM sends the prefix hidden state, not the
16 layers' K/V), and its self-attention layers' scores over the prefix keys are not
counted. The unused ``lm_head`` is charged one token of forward (95 MFLOP).
"""

from __future__ import annotations

from ..models.modules import CrossAttention, Embedding, Linear, LMHead, Module, Projector, TransformerStack, VisionEncoder
from ..models.spec import ModelSpec
from ..models.training import ReferenceTraining

__all__ = ["smolvla"]

_VLM, _EXPERT, _VOCAB = 960, 720, 49_280
_TOKENS_PER_IMAGE = 64  # (512 / 16)² patches / pixel-shuffle scale 4²
# Module paths: SmolVLAPolicy.model = VLAFlowMatching; .vlm_with_expert.vlm = SmolVLMForConditionalGeneration
_ROOT = "model.vlm_with_expert."
_SMOLVLM = _ROOT + "vlm.model."


def smolvla(*, action_horizon: int = 50, text_tokens: int = 48, cameras: int = 3) -> ModelSpec:
    """SmolVLA: 450,046,176 parameters, 99,880,992 trained (the expert and projections).

    Args:
        action_horizon: ``chunk_size`` (50). text_tokens: ``tokenizer_max_length`` (48).
        cameras: 512 px images per example (3, an assumption).
    """
    vision = VisionEncoder(name="vision", image_size=512, patch_size=16, num_layers=12, hidden_size=768,
                           num_heads=12, ffn_hidden_size=3072, cameras=cameras, frozen=True,
                           fqn=(_SMOLVLM + "vision_model.encoder.layers.{i}",),
                           fqn_first=(_SMOLVLM + "vision_model.embeddings",),
                           fqn_last=(_SMOLVLM + "vision_model.post_layernorm",))
    image_tokens = cameras * _TOKENS_PER_IMAGE
    prefix = image_tokens + text_tokens + 1  # images, language, the state token
    modules: list[Module] = [
        vision,
        Projector(name="connector", inputs=("vision",), tokens=image_tokens, bias=False, activation=False,
                  linears=(Linear(16 * 768, _VLM),), frozen=True, fqn=(_SMOLVLM + "connector",)),
        Embedding(name="text_embedding", vocab_size=_VOCAB, hidden_size=_VLM, tokens=text_tokens, frozen=True,
                  fqn=(_SMOLVLM + "text_model.embed_tokens",), role="embedding"),
        Projector(name="state_proj", inputs=(), tokens=1, linears=(Linear(32, _VLM),), fqn=("model.state_proj",)),
        TransformerStack(name="llm", num_layers=16, hidden_size=_VLM, num_heads=15, num_kv_heads=5, head_dim=64,
                         seq_length=prefix, ffn_hidden_size=2560, gated_mlp=True, norm="rmsnorm", final_norm=True,
                         frozen=True, inputs=("connector", "text_embedding", "state_proj"),
                         fqn=(_SMOLVLM + "text_model.layers.{i}",), fqn_last=(_SMOLVLM + "text_model.norm",),
                         role="decoder"),
        # held (untied, frozen) but never run by SmolVLA
        LMHead(name="lm_head", vocab_size=_VOCAB, hidden_size=_VLM, tokens=1, frozen=True, inputs=(),
               fqn=(_ROOT + "vlm.lm_head",), role="loss"),
        Projector(name="action_embedding", inputs=(), tokens=action_horizon,
                  linears=(Linear(32, _EXPERT), Linear(2 * _EXPERT, _EXPERT), Linear(_EXPERT, _EXPERT)),
                  fqn=("model.action_in_proj", "model.action_time_mlp_in", "model.action_time_mlp_out")),
        # one noise sample per example: modeling_smolvla.py (lerobot commit 7427f31) VLAFlowMatching.forward,
        # line 697, ``time = self.sample_time(actions.shape[0], actions.device)``
        TransformerStack(name="action_expert", num_layers=16, hidden_size=_EXPERT, num_heads=15, num_kv_heads=5,
                         head_dim=64, seq_length=action_horizon, ffn_hidden_size=2048, gated_mlp=True,
                         norm="rmsnorm", final_norm=True, inputs=("action_embedding",), noise_samples=1,
                         cross_attention=CrossAttention("llm", every=2, kv_hidden_size=5 * 64),
                         fqn=(_ROOT + "lm_expert.layers.{i}",), fqn_last=(_ROOT + "lm_expert.norm",)),
        Projector(name="action_output", tokens=action_horizon, linears=(Linear(_EXPERT, 32),),
                  fqn=("model.action_out_proj",)),
    ]
    # lerobot configs/parallelism.py: DDP unless dp_shard > 1; configs/default.py: EMAConfig(enable=False);
    # the policy's AdamW preset (get_optimizer_preset); SmolVLA enables no gradient checkpointing
    training = ReferenceTraining(dp_mode="ddp", ema=False, optimizer="adamw", implementation="lerobot-pytorch",
                                 source="lerobot src/lerobot/policies/smolvla/configuration_smolvla.py, "
                                        "smolvlm_with_expert.py, modeling_smolvla.py; configs/default.py, "
                                        "configs/parallelism.py")
    return ModelSpec("smolvla", tuple(modules), "lerobot/smolvla_base: SmolVLM2-500M (16 layers, frozen) + "
                     "0.75-width expert, chunk 50", training=training)
