"""GR00T N1 (NVIDIA Isaac-GR00T): the Eagle-2 VLM cut at layer 12 and a cross-attention DiT.

    from pipeplan.presets.gr00t import gr00t_n1
    spec = gr00t_n1()
    spec.trains("llm"), spec.needs_grad("llm")    # (False, True): B but no W

Shapes: Eagle-2 (gr00t/model/backbone/eagle2_hg_model/config.json): a SigLIP
``siglip_vision_model`` 1152/27/4304/16 at 224 px (256 patches, pixel-shuffled
by 0.5 to 64 tokens of 4 · 1152), the ``mlp1`` projector (LayerNorm, 4608 → 2048
→ 2048), SmolLM2-1.7B (2048 wide, 32 heads, SwiGLU 8192, vocab 49,164, tied)
of which GR00T keeps the first 12 of 24 layers (paper: middle-layer features)
and projects them 2048 → 1536. The action head
(gr00t/model/action_head/flow_matching_action_head.py, cross_attention_dit.py;
N1 config: 16 DiT blocks, 32 heads × 48 = 1536, AdaLayerNorm, dropout 0.2,
``interleave_self_attention``, output 1536 → 1024) reads a state token and 16
action tokens (17: N1's head concatenates ``state_features, action_features``;
the 32 ``future_tokens``, ``vlln`` and ``vl_self_attention`` are N1.5 code),
cross-attends to the VLM tokens on even blocks and self-attends on odd ones, and
decodes with embodiment-specific MLPs (32 embodiments; one runs per example, all
hold parameters). The Eagle backbone replaces SigLIP's pooling head by
``Identity`` (eagle_backbone.py), so it holds no parameters here. Text is taken as
32 tokens (an assumption). Recipe (scripts/gr00t_finetune.py of the N1 release):
``tune_llm=False`` freezes the whole language model, ``embed_tokens`` included,
while the vision tower, projectors and DiT train (``tune_visual=True``), so the
LLM layers have an input-gradient backward (B) but no W. One noise sample per
example.
"""

from __future__ import annotations

from ..models.modules import CrossAttention, Embedding, Linear, Module, Projector, TransformerStack
from ..models.spec import ModelSpec
from ..models.training import ReferenceTraining
from ._components import siglip_so400m

__all__ = ["gr00t_n1"]

_EMBODIMENTS = 32
_TEXT_TOKENS = 32
_IMAGE_TOKENS = 64  # 256 patches, pixel shuffle 0.5
# Module paths in Isaac-GR00T (gr00t/model/gr00t_n1.py: backbone = EagleBackbone, action_head =
# FlowmatchingActionHead; backbone/eagle_backbone.py: self.model is the Eagle-2 chat model, self.linear).
_EAGLE = "backbone.model."
_SIGLIP = _EAGLE + "vision_model.vision_model."
_LLM = _EAGLE + "language_model.model."
_HEAD = "action_head."


def _category_params(*pairs: tuple[int, int]) -> int:
    """Weights and biases of one embodiment's MLP with these (in, out) layers."""
    return sum(i * o + o for i, o in pairs)


def gr00t_n1(*, action_horizon: int = 16, text_tokens: int = _TEXT_TOKENS) -> ModelSpec:
    """GR00T-N1-2B: 2.2B parameters, 1.34B of them in the VLM (paper); ``action_horizon`` 16 (N1 config)."""
    width, hidden, horizon, action_dim, state_dim = 1536, 1024, action_horizon, 32, 64
    tokens = 1 + horizon
    state_mlp = ((state_dim, hidden), (hidden, width))
    action_mlp = ((action_dim, width), (2 * width, width), (width, width))
    decoder_mlp = ((hidden, hidden), (hidden, action_dim))
    seq = _IMAGE_TOKENS + text_tokens
    modules: list[Module] = [
        siglip_so400m("vision", fqn=(_SIGLIP + "encoder.layers.{i}",),
                      fqn_first=(_SIGLIP + "embeddings",), fqn_last=(_SIGLIP + "post_layernorm",)),
        Projector(name="vision_projector", tokens=_IMAGE_TOKENS, norm_params=2 * 4 * 1152,
                  linears=(Linear(4 * 1152, 2048), Linear(2048, 2048)), fqn=(_EAGLE + "mlp1",)),
        Embedding(name="text_embedding", vocab_size=49_164, hidden_size=2048, tokens=text_tokens, frozen=True,
                  fqn=(_LLM + "embed_tokens",), role="embedding"),
        TransformerStack(name="llm", num_layers=12, hidden_size=2048, num_heads=32, seq_length=seq,
                         ffn_hidden_size=8192, gated_mlp=True, norm="rmsnorm", final_norm=True, frozen=True,
                         inputs=("vision_projector", "text_embedding"), fqn=(_LLM + "layers.{i}",),
                         fqn_last=(_LLM + "norm",), role="decoder"),
        Projector(name="vlm_projection", linears=(Linear(2048, width),), tokens=seq, activation=False,
                  fqn=("backbone.linear",)),
        Projector(name="action_embedding", inputs=(), tokens=horizon, output_tokens=tokens, output_width=width,
                  linears=(Linear(state_dim, hidden, tokens=1), Linear(hidden, width, tokens=1),
                           Linear(action_dim, width), Linear(2 * width, width), Linear(width, width),
                           Linear(256, width, tokens=1), Linear(width, width, tokens=1)),
                  # the other 31 embodiments' state and action MLPs, 1024 positions (max_seq_len)
                  extra_params=(_EMBODIMENTS - 1) * _category_params(*state_mlp, *action_mlp) + 1024 * width,
                  fqn=tuple(_HEAD + name for name in ("state_encoder", "action_encoder", "position_embedding",
                                                      "model.timestep_encoder"))),
        # one noise sample per example: gr00t/model/action_head/flow_matching_action_head.py (commit 04c7ee1)
        # FlowmatchingActionHead.forward, ``t = self.sample_time(actions.shape[0], ...)``; its ``expand_batch``
        # (default None) would repeat the VL features too, which is ``repeats``, not ``noise_samples``
        TransformerStack(name="action_dit", num_layers=16, hidden_size=width, num_heads=32, head_dim=48,
                         seq_length=tokens, ffn_hidden_size=4 * width, bias=True, norm="none", dropout=True,
                         adaptive_norm=(2, 0), cross_attention=CrossAttention("vlm_projection", every=2),
                         noise_samples=1, fqn=(_HEAD + "model.transformer_blocks.{i}",)),
        Projector(name="action_output", tokens=tokens,
                  linears=(Linear(width, 2 * width, tokens=1), Linear(width, hidden), Linear(hidden, hidden),
                           Linear(hidden, action_dim)),
                  extra_params=(_EMBODIMENTS - 1) * _category_params(*decoder_mlp),
                  fqn=tuple(_HEAD + name for name in ("model.norm_out", "model.proj_out_1", "model.proj_out_2",
                                                      "action_decoder"))),
    ]
    # scripts/gr00t_finetune.py (N1 release): HF Trainer (AdamW, DDP over torchrun), no gradient
    # checkpointing, no EMA; tune_llm=False, tune_visual=True, tune_projector=True, tune_diffusion_model=True.
    training = ReferenceTraining(dp_mode="ddp", ema=False, optimizer="adamw", implementation="gr00t",
                                 source="Isaac-GR00T scripts/gr00t_finetune.py, gr00t/model/backbone/eagle_backbone.py")
    return ModelSpec("gr00t-n1", tuple(modules), "nvidia/GR00T-N1-2B: Eagle-2 (layer 12) + 16-block DiT",
                     training=training)
