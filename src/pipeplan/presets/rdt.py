"""RDT-1B (thu-ml RoboticsDiffusionTransformer): frozen SigLIP and T5-XXL, a 28-block 2048-wide diffusion transformer.

    from pipeplan.presets.rdt import rdt_1b
    spec = rdt_1b()
    spec.module("img_adaptor").tokens          # 4374 = 3 cameras × 2 frames × 729 patches

Shapes: configs/base.yaml (img_history_size 2, action_chunk_size 64, num_cameras 3,
state_dim 128, lang/img adaptors ``mlp2x_gelu``, state adaptor ``mlp3x_gelu``,
lang_token_dim 4096, img_token_dim 1152, rdt hidden 2048, depth 28, 32 heads,
tokenizer_max_length 1024), models/rdt_runner.py (RDTRunner: ``model``, ``lang_adaptor``,
``img_adaptor``, ``state_adaptor`` reading state + mask, 256 wide), models/rdt/model.py
(RDT: ``t_embedder``, ``freq_embedder``, learned ``x_pos_embed`` over horizon + 3 tokens,
``lang_cond_pos_embed`` 1024 rows, ``img_cond_pos_embed`` over 2 · 3 · 729 rows; block
``i`` cross-attends to the language tokens when ``i`` is even and to the image tokens
when odd; ``final_layer``), models/rdt/blocks.py (RDTBlock: RMSNorm, timm self-attention
with qkv bias and q/k RMSNorm, cross-attention ``q``, ``kv`` with biases and q/k RMSNorm,
an MLP of width 2048 = hidden, tanh GELU; FinalLayer: RMSNorm + MLP 2048 → 2048 → 128).
finetune.sh: google/siglip-so400m-patch14-384 (729 patches: 378 px is used here, the
pixels the stride-14 convolution covers) and google/t5-v1_1-xxl (encoder: 24 blocks,
4096 wide, 64 heads, gated-GELU 10,240, vocabulary 32,128), both run under
``torch.no_grad()`` in train/train.py (frozen, forward only; the T5 pass is skipped with
``--precomp_lang_embed``, off in finetune.sh). One noise sample per example. 32 language
tokens by default (an assumption: instructions are padded per batch).

Not expressible exactly (a block here is one attention and one MLP):

* an RDT block has a self-attention, a cross-attention and an MLP. Here each block is
  one layer whose attention is the cross-attention (to the image tokens on even layers,
  14 of 28 as in RDT; odd layers self-attend over the 67 action tokens, standing for the
  cross-attention to the language tokens, whose keys are ``text_tokens`` long) and whose
  MLP is 3 × 2048 wide: the self-attention's q, k, v and output projections (4 · 2048²
  per token) are counted as MLP weights, so weights and linear FLOPs are exact; the
  self-attention's scores (2 · 2 · 67² · 2048 FLOPs a block) are not counted. Each block
  is 6,400 parameters short (two 2048 biases, one RMSNorm and the four 64-wide q/k
  RMSNorms): 179,200 over the 28 blocks (0.015% of the trained parameters);
* T5's relative position bias (32 buckets × 64 heads = 2,048 parameters in block 0) has no
  field: ``text_encoder`` is 2,048 short;
* the learned position tables of the language and image conditions are held by
  ``action_embedding``, as are the time and control-frequency embedders; SigLIP's pooling
  head runs in the reference (``pooler_output``) but its FLOPs are not counted
  (``map_head``: parameters only);
* RDT's EMA copy is kept in bf16 (``ema_rdt.to(dtype=weight_dtype)``); pipeplan charges an
  EMA as fp32 (2 bytes per trained parameter more than RDT holds).
"""

from __future__ import annotations

from ..models.modules import CrossAttention, Embedding, Linear, Module, Projector, TransformerStack
from ..models.spec import ModelSpec
from ..models.training import ReferenceTraining
from ._components import siglip_so400m

__all__ = ["rdt_1b"]

_HIDDEN, _FRAMES, _PATCHES = 2048, 2, 729  # rdt hidden_size; img_history_size; (384 // 14)²
_STATE = 128  # state_token_dim (the unified action/state space, configs/state_vec.py)
_LANG_ROWS = 1024  # tokenizer_max_length: lang_cond_pos_embed rows
_SIGLIP = "vision_encoder.vision_tower.vision_model."  # train.py: SiglipVisionTower(...).vision_tower
_T5 = "text_encoder."  # train.py: T5Embedder(...).model, a T5EncoderModel


def _t5_xxl_encoder(text_tokens: int) -> list[Module]:
    """google/t5-v1_1-xxl's encoder, frozen: the shared table and 24 gated-GELU blocks (no biases, RMS norms)."""
    return [
        Embedding(name="text_embedding", vocab_size=32_128, hidden_size=4096, tokens=text_tokens, frozen=True,
                  fqn=(_T5 + "shared",)),
        TransformerStack(name="text_encoder", num_layers=24, hidden_size=4096, num_heads=64, seq_length=text_tokens,
                         ffn_hidden_size=10_240, gated_mlp=True, norm="rmsnorm", final_norm=True, frozen=True,
                         fqn=(_T5 + "encoder.block.{i}",), fqn_last=(_T5 + "encoder.final_layer_norm",)),
    ]


def rdt_1b(*, action_horizon: int = 64, text_tokens: int = 32, cameras: int = 3) -> ModelSpec:
    """RDT-1B: 1,228,319,872 trained parameters in the reference (pipeplan: 179,200 fewer, see the module doc).

    Args:
        action_horizon: ``action_chunk_size`` (64). text_tokens: T5 tokens per instruction (32, an assumption).
        cameras: ``num_cameras`` (3); each contributes ``img_history_size`` = 2 frames.
    """
    h = _HIDDEN
    vision = siglip_so400m("vision", cameras=cameras, frames=_FRAMES, image_size=378, map_head=True, frozen=True,
                           fqn=(_SIGLIP + "encoder.layers.{i}",), fqn_first=(_SIGLIP + "embeddings", _SIGLIP + "head"),
                           fqn_last=(_SIGLIP + "post_layernorm",))
    image_tokens = vision.tokens
    tokens = action_horizon + 3  # timestep, control frequency, state, actions
    modules: list[Module] = [
        vision,
        *_t5_xxl_encoder(text_tokens),
        Projector(name="img_adaptor", inputs=("vision",), tokens=image_tokens,
                  linears=(Linear(1152, h), Linear(h, h)), fqn=("img_adaptor",)),
        Projector(name="lang_adaptor", inputs=("text_encoder",), tokens=text_tokens,
                  linears=(Linear(4096, h), Linear(h, h)), fqn=("lang_adaptor",)),
        Projector(name="action_embedding", inputs=(), tokens=1 + action_horizon, output_tokens=tokens, output_width=h,
                  linears=(Linear(2 * _STATE, h), Linear(h, h), Linear(h, h),  # state_adaptor: state + mask
                           Linear(256, h, tokens=1), Linear(h, h, tokens=1),  # t_embedder
                           Linear(256, h, tokens=1), Linear(h, h, tokens=1)),  # freq_embedder
                  extra_params=(tokens + _LANG_ROWS + image_tokens) * h,  # x_pos, lang_cond_pos, img_cond_pos
                  fqn=("state_adaptor", "model.t_embedder", "model.freq_embedder", "model.x_pos_embed",
                       "model.lang_cond_pos_embed", "model.img_cond_pos_embed")),
        # one noise sample per example: models/rdt_runner.py (commit deb71d8) compute_loss, lines 188-191,
        # ``timesteps = torch.randint(0, self.num_train_timesteps, (batch_size,))``
        TransformerStack(name="rdt", num_layers=28, hidden_size=h, num_heads=32, seq_length=tokens,
                         ffn_hidden_size=3 * h, bias=True, norm="rmsnorm", noise_samples=1,
                         cross_attention=CrossAttention("img_adaptor", every=2), fqn=("model.blocks.{i}",)),
        Projector(name="action_output", tokens=tokens, linears=(Linear(h, h), Linear(h, _STATE)), norm_params=h,
                  fqn=("model.final_layer",)),
    ]
    # finetune.sh / configs/zero2.json: DeepSpeed ZeRO stage 2; train/train.py: AdamW, an EMAModel of the RDT
    # stepped every step, gradient checkpointing off unless --gradient_checkpointing
    training = ReferenceTraining(dp_mode="zero2", ema=True, optimizer="adamw", implementation="rdt",
                                 source="RoboticsDiffusionTransformer finetune.sh, configs/zero2.json, "
                                        "train/train.py, models/rdt_runner.py")
    return ModelSpec("rdt-1b", tuple(modules), "robotics-diffusion-transformer/rdt-1b: frozen SigLIP-384 + T5-XXL, "
                     "28 × 2048 DiT over 64 actions", training=training)
