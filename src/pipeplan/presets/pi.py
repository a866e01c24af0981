"""π0 and π0.5 (Physical Intelligence, openpi): PaliGemma plus a Gemma-shaped action expert.

    from pipeplan.presets.pi import pi0
    spec = pi0()
    spec.module_tokens()["llm"]        # 816 = 3 cameras × 256 patches + 48 text tokens

Shapes from openpi (src/openpi/models/pi0.py, pi0_config.py, gemma.py, siglip.py):
three 224 px cameras through SigLIP So400m/14 (768 tokens), a linear projection to
Gemma 2B, ``max_token_len`` text tokens (48 for π0, 200 for π0.5), and the action
expert (``gemma_300m``) over the suffix (π0: 1 state + 50 action tokens; π0.5: 50
action tokens). At every layer the suffix queries attend to the prefix keys and
values of the same Gemma layer (one joint attention, block-causal mask), so
Gemma layer ``i`` and expert layer ``i`` form one pipeline layer here: a pipeline
cut between depths sends both the prefix (816 × 2048) and the suffix (51 × 1024)
hidden states. π0.5 conditions the expert on the flow-matching time with
adaRMSNorm (each norm a ``Linear(1024, 3·1024)``). Training draws one noise
sample and one time per example; nothing is frozen in the full fine-tune recipe.
"""

from __future__ import annotations

from typing import Any

from ..models.modules import Embedding, Linear, Module, Projector
from ..models.spec import ModelSpec
from ..models.training import ReferenceTraining
from ._components import gemma, siglip_so400m

__all__ = ["pi0", "pi05"]

#: openpi's training defaults: every Gemma block (models/gemma.py: nn.remat(policy=nothing_saveable))
#: and every SigLIP block (models/siglip.py: remat_policy="nothing_saveable") is fully recomputed; the
#: expert is one of Gemma's two weight sets in the same remat block. TrainConfig (training/config.py):
#: AdamW, ema_decay=0.99 (an fp32 EMA copy), fsdp_devices=1 (plain data parallelism: parameters
#: replicated; FSDP only with fsdp_devices > 1).
_OPENPI = ReferenceTraining(
    recompute={"vision": "full", "llm": "full", "action_expert": "full"}, dp_mode="ddp", ema=True,
    optimizer="adamw", implementation="openpi-pytorch",
    source="openpi src/openpi/models/gemma.py, siglip.py (nn.remat nothing_saveable), "
           "src/openpi/training/config.py (TrainConfig: AdamW, ema_decay=0.99, fsdp_devices=1)")
_PALIGEMMA_VOCAB = 257_152  # openpi gemma.py PALIGEMMA_VOCAB_SIZE
# Module paths in openpi's PyTorch port (src/openpi/models_pytorch/pi0_pytorch.py PI0Pytorch,
# gemma_pytorch.py PaliGemmaWithExpertModel: an HF PaliGemmaForConditionalGeneration and a GemmaForCausalLM).
_VLM = "paligemma_with_expert.paligemma.model."
_SIGLIP = _VLM + "vision_tower.vision_model."
_EXPERT_PATH = "paligemma_with_expert.gemma_expert.model."
_ACTION_DIM, _HORIZON, _EXPERT = 32, 50, 1024  # Pi0Config defaults; gemma_300m width
#: Noise samples per example in training: openpi src/openpi/models/pi0.py (commit 15a9616) compute_loss,
#: lines 195-211: ``time = jax.random.beta(time_rng, 1.5, 1, batch_shape)`` (one time per example) and one joint
#: prefix + suffix forward. sample_actions' ``num_steps = 10`` are inference denoising steps, not training.
_NOISE_SAMPLES = 1


def _prefix(text_tokens: int, cameras: int, image_size: int) -> list[Module]:
    vision = siglip_so400m("vision", cameras=cameras, image_size=image_size, fqn=(_SIGLIP + "encoder.layers.{i}",),
                           fqn_first=(_SIGLIP + "embeddings",), fqn_last=(_SIGLIP + "post_layernorm",))
    return [
        vision,
        Projector(name="vision_projector", linears=(Linear(1152, 2048),), tokens=vision.tokens, activation=False,
                  fqn=(_VLM + "multi_modal_projector",)),
        Embedding(name="text_embedding", vocab_size=_PALIGEMMA_VOCAB, hidden_size=2048, tokens=text_tokens,
                  fqn=(_VLM + "language_model.embed_tokens",), role="embedding"),
    ]


def _gemma_pair(prefix: list[Module], suffix: int, horizon: int, **expert: Any) -> list[Module]:
    """Gemma 2B over the prefix and the joint action expert over the suffix (one pipeline layer per depth)."""
    prefix_tokens = sum(m.output_shape()[0] for m in prefix if m.name in ("vision_projector", "text_embedding"))
    return [
        gemma("llm", "gemma_2b", seq_length=prefix_tokens, inputs=("vision_projector", "text_embedding"),
              fqn=(_VLM + "language_model.layers.{i}",), fqn_last=(_VLM + "language_model.norm",), role="decoder"),
        gemma("action_expert", "gemma_300m", seq_length=suffix, joint_with="llm", inputs=("action_embedding",),
              noise_samples=_NOISE_SAMPLES, fqn=(_EXPERT_PATH + "layers.{i}",), fqn_last=(_EXPERT_PATH + "norm",),
              **expert),
        Projector(name="action_output", linears=(Linear(_EXPERT, _ACTION_DIM),), tokens=horizon,
                  fqn=("action_out_proj",)),
    ]


def pi0(*, action_horizon: int = _HORIZON, text_tokens: int = 48, cameras: int = 3, image_size: int = 224) -> ModelSpec:
    """π0: SigLIP + Gemma 2B (PaliGemma 3B) and a 311M action expert, 3.24B parameters.

    Args:
        action_horizon: actions per chunk (Pi0Config default 50; openpi's fine-tune configs use 10, 15, 16).
        text_tokens: ``max_token_len`` (48). cameras, image_size: images per example (3) and their side (224 px).
    """
    suffix = 1 + action_horizon
    prefix = _prefix(text_tokens, cameras, image_size)
    modules: list[Module] = [
        *prefix,
        Projector(name="action_embedding", inputs=(), tokens=action_horizon, output_tokens=suffix,
                  output_width=_EXPERT,
                  linears=(Linear(_ACTION_DIM, _EXPERT), Linear(_ACTION_DIM, _EXPERT, tokens=1),
                           Linear(2 * _EXPERT, _EXPERT), Linear(_EXPERT, _EXPERT)),
                  fqn=("action_in_proj", "state_proj", "action_time_mlp_in", "action_time_mlp_out")),
        *_gemma_pair(prefix, suffix, action_horizon),
    ]
    return ModelSpec("pi0", tuple(modules), "openpi Pi0Config(pi05=False): paligemma gemma_2b + gemma_300m expert",
                     training=_OPENPI)


def pi05(*, action_horizon: int = _HORIZON, text_tokens: int = 200, cameras: int = 3,
         image_size: int = 224) -> ModelSpec:
    """π0.5: π0's layout with 200 text tokens, no state token and adaRMSNorm time conditioning (options as :func:`pi0`)."""
    prefix = _prefix(text_tokens, cameras, image_size)
    modules: list[Module] = [
        *prefix,
        Projector(name="action_embedding", inputs=(), tokens=action_horizon, output_tokens=action_horizon,
                  output_width=_EXPERT,
                  linears=(Linear(_ACTION_DIM, _EXPERT), Linear(_EXPERT, _EXPERT, tokens=1),
                           Linear(_EXPERT, _EXPERT, tokens=1)),
                  fqn=("action_in_proj", "time_mlp_in", "time_mlp_out")),
        *_gemma_pair(prefix, action_horizon, action_horizon, adaptive_norm=(3, 3), final_norm_adaptive=3),
    ]
    return ModelSpec("pi0.5", tuple(modules), "openpi Pi0Config(pi05=True): adaRMS expert, 200 text tokens",
                     training=_OPENPI)
