"""OpenVLA-7B and CogACT: Prismatic DINOv2 + SigLIP fused features into Llama-2 7B.

    from pipeplan.presets.openvla import openvla_7b, cogact
    openvla_7b().num_parameters()      # 7.54e9
    cogact().module("action_dit").repeats   # 8 noise samples per example

Shapes from openvla (prismatic/extern/hf/configuration_prismatic.py: backbone
``dinosiglip-vit-so-224px`` = timm ``vit_large_patch14_reg4_dinov2.lvd142m`` +
``vit_so400m_patch14_siglip_224``; prismatic/util/nn_utils.py FusedMLPProjector
2176 → 8704 → 4096 → 4096; prismatic/models/backbones/llm/llama2.py pads the
vocabulary to a multiple of 64: 32,064). Both towers read the same 224 px image
(256 patches each) and their features are concatenated per patch, so the DINOv2
output crosses every pipeline cut inside the SigLIP tower. The prompt plus the 7
action tokens is taken as 40 text tokens (an assumption: OpenVLA's prompt
"In: What action should the robot take to {instruction}?\\nOut:" is 20–40 tokens).
Recipe (prismatic/conf/vla.py, the OpenVLA run): nothing frozen.

CogACT (microsoft/CogACT: vla/cogactvla.py, action_model/action_model.py,
scripts/train.py) keeps that VLM and feeds the last token's hidden state (the
cognition feature) to a DiT-Base action model (12 blocks, width 768, 12 heads,
in-context conditioning: 1 condition token + 16 action tokens), trained with
``repeated_diffusion_steps = 8`` noise samples per example (scripts/train.py
default). Its LM head still computes logits and a loss (labels are passed) but
only the action loss is backpropagated: a frozen, forward-only layer here.
"""

from __future__ import annotations

from ..models.modules import Embedding, Linear, LMHead, Module, Projector, TransformerStack, VisionEncoder
from ..models.spec import ModelSpec
from ..models.training import ReferenceTraining
from ._components import dinov2_large, llama2_7b_blocks, siglip_so400m

__all__ = ["openvla_7b", "cogact"]

_VOCAB = 32_064  # 32,000 + 1 pad token, padded to a multiple of 64 (prismatic llama2.py)
_TEXT_TOKENS = 40
_PATCHES = 256
#: Prismatic's training defaults (prismatic/conf/vla.py: train_strategy="fsdp-full-shard",
#: enable_gradient_checkpointing=True; prismatic/training/strategies/fsdp.py: "full-shard" is
#: ShardingStrategy.HYBRID_SHARD (shard within a node, replicate across nodes) and a non-reentrant
#: checkpoint_wrapper on every LLM transformer layer only; AdamW). CogACT's training/strategies/fsdp.py
#: and scripts/train.py (use_ema=False) do the same.
def _prismatic(implementation: str, source: str) -> ReferenceTraining:
    return ReferenceTraining(recompute={"llm": "full"}, dp_mode="hsdp", ema=False, optimizer="adamw",
                             implementation=implementation, source=source)


_DIT = "action_model.net."  # CogACT vla/cogactvla.py: self.action_model = ActionModel(...); .net is the DiT


def _unused_last_block(name: str, tower: VisionEncoder, path: str) -> TransformerStack:
    """The tower's last block and final norm, which run but get no gradient (see :func:`_vlm`)."""
    return TransformerStack(name=name, num_layers=1, hidden_size=tower.hidden_size, num_heads=tower.num_heads,
                            seq_length=tower.patches_per_image + tower.extra_tokens,
                            ffn_hidden_size=tower.ffn_hidden_size, bias=True, layer_scale=tower.layer_scale,
                            final_norm=True, frozen=True, inputs=(),
                            fqn=(path + f"blocks.{tower.num_layers}",), fqn_last=(path + "norm",))


def _vlm(prefix: str = "", *, text_tokens: int, output_tokens: int | None = None) -> list[Module]:
    """The Prismatic VLM; module paths as in prismatic/models/vlms/prismatic.py (PrismaticVLM), under ``prefix``.

    Both featurizers return the *second-to-last* block's patches
    (prismatic/models/backbones/vision/dinosiglip_vit.py: ``get_intermediate_layers(n={len(blocks) - 2})``).
    timm 0.9.10 (openvla's pin) still runs every block in ``_intermediate_layers``, so the last block
    costs its forward, but nothing reads its output: it, the final norm (not applied) and SigLIP's
    ``attn_pool`` head (not run) get no gradient. The last block and norm are therefore a frozen,
    forward-only module here (``inputs=()``: no gradient flows into it); the pooling head's parameters
    stay counted on SigLIP's patch layer without FLOPs (``map_head``), as trainable: FSDP holds them
    in the trained (requires_grad) parameters like the rest of the tower.
    """
    seq = _PATCHES + text_tokens
    dino, siglip = prefix + "vision_backbone.dino_featurizer.", prefix + "vision_backbone.siglip_featurizer."
    llama = prefix + "llm_backbone.llm.model."
    dino_tower = dinov2_large("dinov2", num_layers=23, final_norm=False, fqn=(dino + "blocks.{i}",),
                              fqn_first=tuple(dino + name for name in ("patch_embed", "cls_token", "reg_token",
                                                                        "pos_embed")))
    # timm's attn_pool (the MAP head) is charged to the patch-embedding layer, so its path goes there
    siglip_tower = siglip_so400m("siglip", num_layers=26, final_norm=False, map_head=True, fqn=(siglip + "blocks.{i}",),
                                 fqn_first=tuple(siglip + name for name in ("patch_embed", "pos_embed", "attn_pool")))
    return [
        dino_tower,
        _unused_last_block("dinov2_last", dino_tower, dino),
        siglip_tower,
        _unused_last_block("siglip_last", siglip_tower, siglip),
        Projector(name="projector", inputs=("dinov2", "siglip"), tokens=_PATCHES,
                  linears=(Linear(2176, 8704), Linear(8704, 4096), Linear(4096, 4096)), fqn=(prefix + "projector",)),
        Embedding(name="text_embedding", vocab_size=_VOCAB, hidden_size=4096, tokens=text_tokens,
                  fqn=(llama + "embed_tokens",), role="embedding"),
        llama2_7b_blocks("llm", seq_length=seq, inputs=("projector", "text_embedding"), output_tokens=output_tokens,
                         fqn=(llama + "layers.{i}",), fqn_last=(llama + "norm",), role="decoder"),
    ]


def openvla_7b(*, text_tokens: int = _TEXT_TOKENS) -> ModelSpec:
    """OpenVLA-7B: 7.54B parameters; actions are 7 tokens of the LM head's vocabulary (``text_tokens``: prompt + 7)."""
    modules = [*_vlm(text_tokens=text_tokens),
               LMHead(name="lm_head", vocab_size=_VOCAB, hidden_size=4096, tokens=_PATCHES + text_tokens,
                               fqn=("llm_backbone.llm.lm_head",), role="loss")]
    training = _prismatic("prismatic", "openvla prismatic/conf/vla.py, prismatic/training/strategies/fsdp.py")
    return ModelSpec("openvla-7b", tuple(modules), "openvla/openvla-7b: prism-dinosiglip-224px + Llama-2 7B",
                     training=training)


def cogact(*, text_tokens: int = _TEXT_TOKENS) -> ModelSpec:
    """CogACT-Base: OpenVLA's VLM plus an 89M DiT-B action model trained on 8 noise samples per example."""
    # ``repeats``, not ``noise_samples``: vla/cogactvla.py (commit b174a1b) lines 150-153 repeat the actions *and*
    # the cognition feature ``repeated_diffusion_steps`` times (8: scripts/train.py) before the action model, so
    # the z_embedder reruns per sample; the cognition token is in the DiT's sequence (no cross-attention), so
    # the two fields would price the DiT alike
    repeats, width, actions = 8, 768, 16
    modules: list[Module] = [
        *_vlm("vlm.", text_tokens=text_tokens, output_tokens=1),
        # CogACT passes labels to the VLM (vla/cogactvla.py), so Llama's LM head computes logits and a loss over
        # the prompt; only the action loss is backpropagated (training/strategies/base_strategy_cogact.py),
        # so no gradient reaches the head: frozen and forward-only (inputs=()), its 131M parameters held.
        LMHead(name="lm_head", vocab_size=_VOCAB, hidden_size=4096, tokens=_PATCHES + text_tokens, frozen=True,
               inputs=(), fqn=("vlm.llm_backbone.llm.lm_head",), role="loss"),
        Projector(name="action_embedding", inputs=("llm",), tokens=actions, repeats=repeats,
                  output_tokens=actions + 1, output_width=width,
                  linears=(Linear(7, width), Linear(256, width, tokens=1), Linear(width, width, tokens=1),
                           Linear(4096, width, tokens=1)),
                  # history embedder (7 → 768, built but unused), 17 position embeddings, the CFG null condition
                  extra_params=7 * width + width + (actions + 1) * width + 4096,
                  fqn=tuple(_DIT + name for name in ("x_embedder", "t_embedder", "z_embedder", "history_embedder",
                                                     "positional_embedding"))),
        TransformerStack(name="action_dit", num_layers=12, hidden_size=width, num_heads=12, seq_length=actions + 1,
                         ffn_hidden_size=4 * width, bias=True, norm="none", repeats=repeats,
                         fqn=(_DIT + "blocks.{i}",)),
        Projector(name="action_output", linears=(Linear(width, 7),), tokens=actions + 1, repeats=repeats,
                  fqn=(_DIT + "final_layer",)),
    ]
    training = _prismatic("cogact", "CogACT scripts/train.py, training/strategies/fsdp.py, base_strategy_cogact.py")
    return ModelSpec("cogact", tuple(modules), "microsoft/CogACT: OpenVLA VLM + DiT-B, repeated_diffusion_steps=8",
                     training=training)
