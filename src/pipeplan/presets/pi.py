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

from ..models.spec import Embedding, Linear, ModelSpec, Module, Projector
from ._components import gemma, siglip_so400m

__all__ = ["pi0", "pi05"]

_PALIGEMMA_VOCAB = 257_152  # openpi gemma.py PALIGEMMA_VOCAB_SIZE
_ACTION_DIM, _HORIZON, _EXPERT = 32, 50, 1024  # Pi0Config defaults; gemma_300m width


def _prefix(text_tokens: int) -> list[Module]:
    vision = siglip_so400m("vision", cameras=3)
    return [
        vision,
        Projector(name="vision_projector", linears=(Linear(1152, 2048),), tokens=vision.tokens, activation=False),
        Embedding(name="text_embedding", vocab_size=_PALIGEMMA_VOCAB, hidden_size=2048, tokens=text_tokens),
    ]


def pi0() -> ModelSpec:
    """π0: SigLIP + Gemma 2B (PaliGemma 3B) and a 311M action expert, 3.24B parameters."""
    text = 48
    suffix = 1 + _HORIZON
    modules: list[Module] = [
        *_prefix(text),
        Projector(name="action_embedding", inputs=(), tokens=_HORIZON, output_tokens=suffix, output_width=_EXPERT,
                  linears=(Linear(_ACTION_DIM, _EXPERT), Linear(_ACTION_DIM, _EXPERT, tokens=1),
                           Linear(2 * _EXPERT, _EXPERT), Linear(_EXPERT, _EXPERT))),
        gemma("llm", "gemma_2b", seq_length=3 * 256 + text, inputs=("vision_projector", "text_embedding")),
        gemma("action_expert", "gemma_300m", seq_length=suffix, joint_with="llm", inputs=("action_embedding",)),
        Projector(name="action_output", linears=(Linear(_EXPERT, _ACTION_DIM),), tokens=_HORIZON),
    ]
    return ModelSpec("pi0", tuple(modules), "openpi Pi0Config(pi05=False): paligemma gemma_2b + gemma_300m expert")


def pi05() -> ModelSpec:
    """π0.5: π0's layout with 200 text tokens, no state token and adaRMSNorm time conditioning."""
    text = 200
    modules: list[Module] = [
        *_prefix(text),
        Projector(name="action_embedding", inputs=(), tokens=_HORIZON, output_tokens=_HORIZON, output_width=_EXPERT,
                  linears=(Linear(_ACTION_DIM, _EXPERT), Linear(_EXPERT, _EXPERT, tokens=1),
                           Linear(_EXPERT, _EXPERT, tokens=1))),
        gemma("llm", "gemma_2b", seq_length=3 * 256 + text, inputs=("vision_projector", "text_embedding")),
        gemma("action_expert", "gemma_300m", seq_length=_HORIZON, joint_with="llm", inputs=("action_embedding",),
              adaptive_norm=(3, 3), final_norm_adaptive=3),
        Projector(name="action_output", linears=(Linear(_EXPERT, _ACTION_DIM),), tokens=_HORIZON),
    ]
    return ModelSpec("pi0.5", tuple(modules), "openpi Pi0Config(pi05=True): adaRMS expert, 200 text tokens")
