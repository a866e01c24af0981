"""Octo-Small and Octo-Base (octo-models/octo): conv stems, a frozen T5-base, a block-causal transformer, a diffusion head.

    from pipeplan.presets.octo import octo
    spec = octo("small")
    spec.module("transformer").seq_length     # 658 = 16 language + 2 × (256 + 64 + 1) tokens

Shapes from scripts/configs/octo_pretrain_config.py (two ImageTokenizers with
``SmallStem16``, each stacking the observation with the goal image (6 channels): primary
at 256 × 256 (256 tokens), wrist at 128 × 128 (64 tokens); LanguageTokenizer ``t5-base``
with ``finetune_encoder=False`` and 16 tokens (``max_length`` 16), ``frozen_keys``
``*hf_model*``; one ``readout_action`` token per timestep; ``window_size`` 2;
``DiffusionActionHead`` with mean pooling, ``action_horizon`` 4, ``action_dim`` 7, one
diffusion sample), scripts/configs/config.py (``max_horizon`` 10), components/
transformer.py ``common_transformer_sizes`` (vit_s: 384 wide, 12 layers, 6 heads, MLP
1536; vit_b: 768, 12, 12, 3072; no dropout), vit_encoders.py (SmallStem: four 3 × 3
stride-2 StdConvs with 32, 96, 192, 384 features, each with a bias and a GroupNorm, then
a 1 × 1 ``embedding`` conv to 512), octo_module.py (a Dense projection per token group to
the token width, learned position embeddings: ``(16, w)`` for the language group,
``(max_horizon, n, w)`` for each observation and readout group) and diffusion.py
(ScoreActor: learnable FourierFeatures 32, MLP 64 → 32, MLPResNet: Dense 256, three
LayerNorm + 1024-wide residual blocks, Dense to 4 · 7). Training (scripts/train.py): state
replicated, the batch data-parallel, ``optax.adamw``, no rematerialisation, no EMA.

Convolutions are expressed as linears over their output positions (im2col): ``Linear(k² ·
c_in, c_out, tokens=H_out · W_out)``, exact in parameters and FLOPs; a stem's projector
also holds its GroupNorms, the token projection and the group's position table. T5's
relative position bias (32 buckets × 12 heads = 384 parameters) has no field: the frozen
``text_encoder`` is 384 parameters short. The readout tokens' position table is held by
``language_projection``.
"""

from __future__ import annotations

from ..errors import InvalidInputError
from ..models.modules import Embedding, Linear, Module, Projector, TransformerStack
from ..models.spec import ModelSpec
from ..models.training import ReferenceTraining

__all__ = ["octo", "octo_small", "octo_base", "OCTO_SIZES"]

#: common_transformer_sizes (octo/model/components/transformer.py): width, layers, heads, MLP width.
OCTO_SIZES: dict[str, tuple[int, int, int, int]] = {"small": (384, 12, 6, 1536), "base": (768, 12, 12, 3072)}
_WINDOW, _MAX_HORIZON, _ACTION_DIM = 2, 10, 7
_STEM_FEATURES = (32, 96, 192, 384)
_TRANSFORMER = "octo_transformer."
_BLOCKS = _TRANSFORMER + "BlockTransformer_0.Transformer_0."
_T5 = _TRANSFORMER + "task_tokenizers_language.hf_model."


def _stem(name: str, side: int, width: int) -> Projector:
    """An ImageTokenizer's SmallStem16 (obs + goal image, 6 channels) and its projection, as im2col linears."""
    linears, channels, size = [], 6, side
    for features in _STEM_FEATURES:
        size //= 2  # 3 × 3, stride 2, padding 1
        linears.append(Linear(9 * channels, features, tokens=_WINDOW * size * size))
        channels = features
    tokens = size * size
    linears += [Linear(channels, 512, tokens=_WINDOW * tokens),  # the 1 × 1 "embedding" conv
                Linear(512, width, tokens=_WINDOW * tokens)]  # obs_{name}_projection
    path = _TRANSFORMER + f"observation_tokenizers_{name}"
    return Projector(name=f"{name}_stem", inputs=(), tokens=_WINDOW * tokens, linears=tuple(linears),
                     norm_params=2 * sum(_STEM_FEATURES), extra_params=_MAX_HORIZON * tokens * width,
                     fqn=(path, _TRANSFORMER + f"obs_{name}_projection", _TRANSFORMER + f"obs_{name}_pos_embedding"))


def octo(size: str, *, action_horizon: int = 4, text_tokens: int = 16) -> ModelSpec:
    """Octo-``size`` (``"small"``: 27,042,060 trained parameters; ``"base"``: 92,830,092) with its frozen T5-base."""
    if size not in OCTO_SIZES:
        raise InvalidInputError(f"octo size must be one of {', '.join(OCTO_SIZES)}, got {size!r}")
    width, layers, heads, mlp = OCTO_SIZES[size]
    primary, wrist = _stem("primary", 256, width), _stem("wrist", 128, width)
    tokens = text_tokens + _WINDOW * (primary.tokens // _WINDOW + wrist.tokens // _WINDOW + 1)
    out = _ACTION_DIM * action_horizon
    modules: list[Module] = [
        primary,
        wrist,
        # t5-base's encoder (FlaxT5EncoderModel): ReLU FFN 3072, no biases, RMS norms; stop_gradient on its output
        Embedding(name="text_embedding", vocab_size=32_128, hidden_size=768, tokens=text_tokens, frozen=True,
                  fqn=(_T5 + "shared",)),
        TransformerStack(name="text_encoder", num_layers=12, hidden_size=768, num_heads=12, seq_length=text_tokens,
                         ffn_hidden_size=3072, norm="rmsnorm", final_norm=True, frozen=True,
                         fqn=(_T5 + "encoder.block.{i}",), fqn_last=(_T5 + "encoder.final_layer_norm",)),
        Projector(name="language_projection", inputs=("text_encoder",), tokens=text_tokens,
                  linears=(Linear(768, width),), extra_params=text_tokens * width + _MAX_HORIZON * width,
                  fqn=(_TRANSFORMER + "task_language_projection", _TRANSFORMER + "task_language_pos_embedding",
                       _TRANSFORMER + "readout_action_pos_embedding")),
        TransformerStack(name="transformer", num_layers=layers, hidden_size=width, num_heads=heads,
                         seq_length=tokens, ffn_hidden_size=mlp, bias=True, final_norm=True,
                         inputs=("language_projection", "primary_stem", "wrist_stem"),
                         fqn=(_BLOCKS + "encoderblock_{i}",), fqn_last=(_BLOCKS + "encoder_norm",)),
        # DiffusionActionHead: mean-pool the readout token of each timestep, ScoreActor over (cond, obs, actions)
        Projector(name="action_head", inputs=("transformer",), tokens=_WINDOW,
                  linears=(Linear(32, 64), Linear(64, 32), Linear(32 + width + out, 256),
                           *(layer for _ in range(3) for layer in (Linear(256, 1024), Linear(1024, 256))),
                           Linear(256, out)),
                  norm_params=3 * 2 * 256, extra_params=16,  # the blocks' LayerNorms; FourierFeatures kernel
                  fqn=("heads_action.diffusion_model",)),
    ]
    training = ReferenceTraining(dp_mode="ddp", ema=False, optimizer="adamw", implementation="octo-jax",
                                 source="octo scripts/train.py (replicated state, data-parallel batch, "
                                        "optax.adamw), scripts/configs/octo_pretrain_config.py")
    return ModelSpec(f"octo-{size}", tuple(modules), f"rail-berkeley/octo-{size}: SmallStem16 ×2, frozen T5-base, "
                     f"ViT-{size[0].upper()} block transformer, diffusion head", training=training)


def octo_small(*, action_horizon: int = 4, text_tokens: int = 16) -> ModelSpec:
    """Octo-Small (ViT-S, 27M trained parameters): see :func:`octo`."""
    return octo("small", action_horizon=action_horizon, text_tokens=text_tokens)


def octo_base(*, action_horizon: int = 4, text_tokens: int = 16) -> ModelSpec:
    """Octo-Base (ViT-B, 93M trained parameters): see :func:`octo`."""
    return octo("base", action_horizon=action_horizon, text_tokens=text_tokens)
