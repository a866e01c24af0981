"""CogACT's DiT-S and DiT-L action-model variants (microsoft/CogACT), on the same OpenVLA VLM as ``cogact``.

    from pipeplan.presets.cogact_dit import cogact_dit
    spec = cogact_dit("DiT-L")
    spec.module("action_dit").num_layers       # 24

action_model/action_model.py: ``DiT_S`` = DiT(depth 6, hidden 384, 4 heads), ``DiT_B`` =
(12, 768, 12) (the ``cogact`` preset, scripts/train.py's default ``action_model_type``),
``DiT_L`` = (24, 1024, 16); action_model/models.py: the same embedders (action, history,
timestep, the cognition-feature ``z_embedder`` 4096 → hidden with its 4096-wide null
condition, 17 positions), blocks without adaLN and the final Linear(hidden, 7), all
scaled with the width; ``learn_sigma`` false. Everything else — the VLM, the forward-only
LM head, 8 repeated diffusion samples, the training defaults — is the ``cogact`` preset's.
"""

from __future__ import annotations

from dataclasses import replace

from ..errors import InvalidInputError
from ..models.modules import Linear, Module, Projector, TransformerStack
from ..models.spec import ModelSpec
from .openvla import cogact

__all__ = ["cogact_dit", "cogact_dit_s", "cogact_dit_l", "COGACT_DIT_SIZES"]

#: action_model/action_model.py DiT_models: depth, hidden size, heads.
COGACT_DIT_SIZES: dict[str, tuple[int, int, int]] = {"DiT-S": (6, 384, 4), "DiT-B": (12, 768, 12),
                                                      "DiT-L": (24, 1024, 16)}
_ACTION_DIM, _COGNITION = 7, 4096


def cogact_dit(size: str, *, text_tokens: int = 40) -> ModelSpec:
    """CogACT with the ``size`` action model (a key of :data:`COGACT_DIT_SIZES`)."""
    if size not in COGACT_DIT_SIZES:
        raise InvalidInputError(f"CogACT action model must be one of {', '.join(COGACT_DIT_SIZES)}, got {size!r}")
    depth, width, heads = COGACT_DIT_SIZES[size]
    base = cogact(text_tokens=text_tokens)
    embedding, dit, output = (base.module(name) for name in ("action_embedding", "action_dit", "action_output"))
    assert isinstance(embedding, Projector) and isinstance(dit, TransformerStack) and isinstance(output, Projector)
    positions = dit.seq_length  # 1 cognition token + 16 actions
    scaled: dict[str, Module] = {
        "action_embedding": replace(
            embedding, output_width=width,
            linears=(Linear(_ACTION_DIM, width), Linear(256, width, tokens=1), Linear(width, width, tokens=1),
                     Linear(_COGNITION, width, tokens=1)),
            # history embedder (built, unused), the positions, the classifier-free-guidance null condition
            extra_params=_ACTION_DIM * width + width + positions * width + _COGNITION),
        "action_dit": replace(dit, num_layers=depth, hidden_size=width, num_heads=heads, ffn_hidden_size=4 * width),
        "action_output": replace(output, linears=(Linear(width, _ACTION_DIM),)),
    }
    modules = tuple(scaled.get(module.name, module) for module in base.modules)
    name = f"cogact-{size.lower()}"
    return ModelSpec(name, modules, f"microsoft/CogACT with the {size} action model ({depth} × {width}), "
                     "repeated_diffusion_steps=8", training=base.training)


def cogact_dit_s(*, text_tokens: int = 40) -> ModelSpec:
    """CogACT with DiT-S (6 × 384): see :func:`cogact_dit`."""
    return cogact_dit("DiT-S", text_tokens=text_tokens)


def cogact_dit_l(*, text_tokens: int = 40) -> ModelSpec:
    """CogACT with DiT-L (24 × 1024): see :func:`cogact_dit`."""
    return cogact_dit("DiT-L", text_tokens=text_tokens)
