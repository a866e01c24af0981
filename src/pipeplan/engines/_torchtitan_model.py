"""torchtitan's llama3 as a :class:`~pipeplan.models.spec.ModelSpec`, and the stages torchtitan cuts it into.

    from pipeplan.engines._torchtitan_model import llama3_spec, torchtitan_default_parts
    llama3_spec("8B", 8192).name                    # 'llama3-8B'
    torchtitan_default_parts(4, 6, 1, 1)[0]         # ['tok_embeddings', 'layers.0']

The flavours' dimensions and the stage rule are torchtitan e347b1e5e's, cited beside each;
:mod:`.torchtitan_config` re-exports the public names.
"""

from __future__ import annotations

import math

from ..errors import InvalidInputError
from ..models.modules import Embedding, LMHead, TransformerStack
from ..models.spec import ModelSpec
from ._torchtitan_keys import TOML_COMMIT

__all__ = ["LLAMA3_FLAVOURS", "llama3_spec", "torchtitan_default_parts"]

#: torchtitan's llama3 flavours pipeplan builds: (dim, n_layers, n_heads, n_kv_heads, ffn_dim_multiplier,
#: multiple_of, vocab_size). pytorch/torchtitan e347b1e5e torchtitan/models/llama3/__init__.py (llama3_args)
#: and model/args.py (TransformerModelArgs defaults: vocab_size 128256, multiple_of 256, n_kv_heads None).
LLAMA3_FLAVOURS: dict[str, tuple[int, int, int, int | None, float | None, int, int]] = {
    "debugmodel": (256, 6, 16, None, None, 256, 2048),
    "8B": (4096, 32, 32, 8, 1.3, 1024, 128_256),
    "70B": (8192, 80, 64, 8, 1.3, 4096, 128_256),
    "405B": (16384, 126, 128, 8, 1.2, 4096, 128_256),
}


def _ffn_hidden(dim: int, multiple_of: int, multiplier: float | None) -> int:
    """torchtitan's SwiGLU width: ``int(2·4·dim/3)``, times the multiplier, rounded up to ``multiple_of``.

    torchtitan/models/llama3/model/model.py (FeedForward.__init__), e347b1e5e.
    """
    hidden = int(2 * (4 * dim) / 3)
    if multiplier is not None:
        hidden = int(multiplier * hidden)
    return multiple_of * math.ceil(hidden / multiple_of)


def llama3_spec(flavour: str, seq_length: int) -> ModelSpec:
    """torchtitan's llama3 ``flavour`` (a key of :data:`LLAMA3_FLAVOURS`) at ``seq_length`` tokens per sample.

    RoPE (no parameters), GQA, RMSNorm, a SwiGLU MLP, SDPA (flash) attention, causal, an
    untied output head; in torchtitan's module names (``tok_embeddings``, ``layers.N``,
    ``norm`` + ``output``: pipeplan's loss layer).
    """
    dim, layers, heads, kv, multiplier, multiple_of, vocab = LLAMA3_FLAVOURS[flavour]
    modules = (
        Embedding(name="tok_embeddings", vocab_size=vocab, hidden_size=dim, tokens=seq_length,
                  fqn=("tok_embeddings",), role="embedding"),
        TransformerStack(name="layers", num_layers=layers, hidden_size=dim, num_heads=heads, seq_length=seq_length,
                         ffn_hidden_size=_ffn_hidden(dim, multiple_of, multiplier), num_kv_heads=kv, gated_mlp=True,
                         norm="rmsnorm", causal=True, attention="flash", final_norm=True, fqn=("layers.{i}",),
                         role="decoder"),
        LMHead(name="output", vocab_size=vocab, hidden_size=dim, tokens=seq_length, fqn=("norm", "output"),
               role="loss"),
    )
    return ModelSpec(f"llama3-{flavour}", modules,
                     f"torchtitan llama3 {flavour} (torchtitan/models/llama3/__init__.py, {TOML_COMMIT})")


def torchtitan_default_parts(stages: int, layers: int, first: int, last: int) -> list[list[str]]:
    """torchtitan's module lists for ``stages`` stages of a decoder of ``layers`` layers.

    The rule of torchtitan e347b1e5e ``generate_llm_fqn_per_model_part`` (distributed/pipeline_parallel.py):
    the embedding counts as ``first`` layers and ``norm`` + ``output`` as ``last``; the total is dealt
    evenly, the first stages one more where it does not divide.

    Raises:
        InvalidInputError: where torchtitan refuses the split (an empty stage, a weight above a stage's share).
    """
    if stages == 1:
        return [["tok_embeddings", *(f"layers.{i}" for i in range(layers)), "norm", "output"]]
    base, extra = divmod(layers + first + last, stages)
    if base == 0 or first > base or last > base:
        raise InvalidInputError(f"torchtitan cannot split {layers} layers (+{first} +{last}) into {stages} stages")
    parts: list[list[str]] = []
    current = 0
    for stage in range(stages):
        share = base + (stage < extra) - (first if stage == 0 else last if stage == stages - 1 else 0)
        taken = [f"layers.{i}" for i in range(current, min(layers, current + share))]
        current += len(taken)
        parts.append((["tok_embeddings"] if stage == 0 else []) + taken +
                     (["norm", "output"] if stage == stages - 1 else []))
    return parts


def _layers_in(part: list[str]) -> int:
    """pipeplan's layers in one model part: one per module path, torchtitan's final ``norm`` counted with the head."""
    heads = {"output", "lm_head"}
    return len(part) - (1 if "norm" in part and heads & set(part) else 0)
