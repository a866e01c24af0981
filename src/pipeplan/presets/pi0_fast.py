"""π0-FAST (Physical Intelligence, openpi): PaliGemma alone, actions as autoregressive FAST tokens.

    from pipeplan.presets.pi0_fast import pi0_fast
    spec = pi0_fast()
    spec.module("llm").seq_length, spec.module("lm_head").tokens     # (1017, 249)

Shapes from openpi (src/openpi/models/pi0_fast.py ``Pi0FASTConfig``: ``gemma_2b``,
``action_dim`` 32, ``action_horizon`` 32, ``max_token_len`` 250; gemma_fast.py
``get_config("gemma_2b")``: vocabulary 257,152). Three 224 px cameras through SigLIP
So400m/14 (``pool_type="none"``, its head a Dense 1152 → 2048: the projector), then
Gemma 2B over the 768 image tokens and the 250 text tokens, which hold the prompt,
the discretised state and the FAST action tokens (the tokenizer packs the 32-step
chunk into them, so the horizon sets no shape here: the model has no
``action_horizon`` option). ``compute_loss`` feeds all tokens but the last (1017)
and decodes logits only for the 249 target positions, through the embedding table
(``Embedder.decode``: the head is tied to ``text_embedding``). Nothing is frozen
(``get_freeze_filter`` is ``nnx.Nothing`` without LoRA). Module paths: lerobot's
PyTorch port (src/lerobot/policies/pi0_fast/modeling_pi0_fast.py ``PI0FastPytorch``),
which names PaliGemma as openpi's ``PI0Pytorch`` does.
"""

from __future__ import annotations

from dataclasses import replace

from ..errors import InvalidInputError
from ..models.modules import LMHead, Module
from ..models.spec import ModelSpec
from ._components import gemma
from .pi import _OPENPI, _PALIGEMMA_VOCAB, _VLM, _prefix

__all__ = ["pi0_fast"]

#: openpi's defaults as for π0 (remat on every SigLIP and Gemma block, AdamW, fp32 EMA at 0.99,
#: fsdp_devices=1), without the action expert; gemma_fast.py get_config: remat_policy="nothing_saveable".
_TRAINING = replace(_OPENPI, recompute={"vision": "full", "llm": "full"}, implementation="lerobot-pytorch",
                    source="openpi src/openpi/models/gemma_fast.py (remat nothing_saveable), siglip.py, "
                           "src/openpi/training/config.py (TrainConfig: AdamW, ema_decay=0.99, fsdp_devices=1); "
                           "paths: lerobot src/lerobot/policies/pi0_fast/modeling_pi0_fast.py")


def pi0_fast(*, text_tokens: int = 250, cameras: int = 3, image_size: int = 224) -> ModelSpec:
    """π0-FAST: SigLIP + Gemma 2B with a tied LM head over the FAST tokens, 2,923,335,408 parameters.

    Args:
        text_tokens: ``max_token_len`` (250: prompt, state and action tokens; at least 2).
        cameras, image_size: images per example (3) and their side (224 px).
    """
    if text_tokens < 2:
        raise InvalidInputError(f"text_tokens of preset 'pi0-fast' must be >= 2 (a next-token target), "
                                f"got {text_tokens}")
    prefix = _prefix(text_tokens, cameras, image_size)
    sequence = prefix[0].output_shape()[0] + text_tokens - 1  # compute_loss: input_token_embeddings[:, :-1]
    modules: list[Module] = [
        *prefix,
        gemma("llm", "gemma_2b", seq_length=sequence, inputs=("vision_projector", "text_embedding"),
              fqn=(_VLM + "language_model.layers.{i}",), fqn_last=(_VLM + "language_model.norm",), role="decoder"),
        # logits only for the targets tokenized_prompt[:, 1:] (pre_logits[:, -targets.shape[1]:])
        LMHead(name="lm_head", vocab_size=_PALIGEMMA_VOCAB, hidden_size=2048, tokens=text_tokens - 1,
               tied_to="text_embedding", fqn=("paligemma_with_expert.paligemma.lm_head",), role="loss"),
    ]
    return ModelSpec("pi0-fast", tuple(modules), "openpi Pi0FASTConfig: paligemma gemma_2b, FAST action tokens",
                     training=_TRAINING)
