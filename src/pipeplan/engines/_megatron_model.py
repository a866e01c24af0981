"""The GPT a Megatron-LM line's shape flags describe, as a :class:`~pipeplan.models.spec.ModelSpec`.

    from pipeplan.engines._megatron_flags import _collect
    from pipeplan.engines._megatron_model import _model
    flags = _collect("--num-layers 24 --hidden-size 2048 --num-attention-heads 16 --seq-length 2048 "
                     "--max-position-embeddings 2048 --tokenizer-type GPT2BPETokenizer".split(), "gpt.sh")
    spec, source = _model(flags, 1, "gpt")
    spec.modules[0].vocab_size                    # 50304: GPT-2's 50257 padded to a multiple of 128

No model without ``--num-layers``, ``--hidden-size``, ``--num-attention-heads`` and
``--seq-length`` (a note names what is missing). The defaults and derived sizes are
Megatron-LM's at d98e8a64: the MLP width and the position table (``validate_args``),
the vocabulary padding (``vocab_size_with_padding``), the attention kernel
(``--transformer-impl`` and ``--attention-backend``).
"""

from __future__ import annotations

import math

from ..errors import InvalidInputError
from ..models.modules import Attention, Embedding, LMHead, Norm, TransformerStack
from ..models.spec import ModelSpec
from ._megatron_flags import _Flags
from ._megatron_vocab import MODEL_FLAGS, TOKENIZER_VOCAB

_SHAPE = ("--num-layers", "--hidden-size", "--num-attention-heads", "--seq-length")


def _model(flags: _Flags, tp: int, name: str) -> tuple[ModelSpec | None, str]:
    """The GPT the shape flags describe, as ``benchmarks/engine_fidelity.py`` builds one; ``None`` without a shape."""
    missing = [flag for flag in _SHAPE if not flags.given(flag)]
    shape_given = [flag for flag in _SHAPE[1:] if flags.given(flag)]
    if missing:
        if shape_given:
            flags.notes.append(f"no model read: the line gives {', '.join(shape_given)} but not {', '.join(missing)}")
        return None, ""
    used = list(_SHAPE)
    layers, hidden, heads, seq = (flags.integer(flag) for flag in _SHAPE)
    vocab, vocab_flags = _vocabulary(flags, tp)
    used += vocab_flags
    ffn = flags.integer("--ffn-hidden-size") if flags.given("--ffn-hidden-size") else None
    gated = flags.given("--swiglu")
    if ffn is None:  # validate_args: 4h, or 2/3 of it rounded down to a multiple of 64 with SwiGLU
        ffn = int((4 * hidden * 2 / 3) / 64) * 64 if gated else 4 * hidden
    kv_heads = None
    if flags.given("--group-query-attention"):
        kv_heads = flags.integer("--num-query-groups") if flags.given("--num-query-groups") else 1
    head_dim = flags.integer("--kv-channels") if flags.given("--kv-channels") else None
    if head_dim is None and hidden % heads:
        raise InvalidInputError(f"--num-attention-heads {heads} does not divide --hidden-size {hidden}; "
                                "give --kv-channels")
    if head_dim == hidden // heads and not hidden % heads:
        head_dim = None
    norm = flags.one("--normalization") if flags.given("--normalization") else "LayerNorm"
    norms: dict[str, Norm] = {"LayerNorm": "layernorm", "RMSNorm": "rmsnorm"}
    if norm not in norms:
        raise InvalidInputError(f"--normalization must be LayerNorm or RMSNorm, got {norm!r}")
    position = flags.one("--position-embedding-type") if flags.given("--position-embedding-type") else "learned_absolute"
    if flags.given("--use-rotary-position-embeddings"):
        position = "rope"
    if flags.given("--no-position-embedding") and position != "rope":  # validate_args raises for it
        raise InvalidInputError("--no-position-embedding without rope: Megatron-LM refuses it (deprecated); "
                                "use --position-embedding-type none")
    positions_known = ("learned_absolute", "rope", "yarn", "mrope", "relative", "none")
    if position not in positions_known:
        raise InvalidInputError(f"--position-embedding-type must be one of {', '.join(positions_known)}, "
                                f"got {position!r}")
    position_tokens = 0
    if position == "learned_absolute":
        position_tokens = flags.integer("--max-position-embeddings") if flags.given("--max-position-embeddings") else seq
        if not flags.given("--max-position-embeddings"):
            flags.notes.append("--max-position-embeddings not given: the learned position table is taken as "
                               "--seq-length rows (Megatron-LM requires the flag)")
    elif position == "relative":
        flags.notes.append("--position-embedding-type relative: its bias table is not priced")
    hidden_dropout = flags.number("--hidden-dropout") if flags.given("--hidden-dropout") else 0.1
    attention_dropout = flags.number("--attention-dropout") if flags.given("--attention-dropout") else 0.1
    dropout = hidden_dropout > 0 or attention_dropout > 0
    attention = _attention(flags)
    tied = not flags.given("--untie-embeddings-and-output-weights")
    used += [flag for flag in MODEL_FLAGS if flags.given(flag) and flag not in used]
    spec = ModelSpec(name, (
        Embedding(name="embedding", vocab_size=vocab, hidden_size=hidden, tokens=seq, position_tokens=position_tokens,
                  dropout=hidden_dropout > 0),
        TransformerStack(name="decoder", num_layers=layers, hidden_size=hidden, num_heads=heads, seq_length=seq,
                         ffn_hidden_size=ffn, num_kv_heads=kv_heads, head_dim=head_dim, gated_mlp=gated,
                         norm=norms[norm], bias=not flags.given("--disable-bias-linear"), dropout=dropout,
                         causal=True, attention=attention, final_norm=True),
        LMHead(name="output_layer", vocab_size=vocab, hidden_size=hidden, tokens=seq,
               tied_to="embedding" if tied else None),
    ), description=f"Megatron-LM GPT read from {flags.path}")
    return spec, " ".join(flags.text(flag) for flag in used if flags.given(flag))


def _attention(flags: _Flags) -> Attention:
    """``flash`` or ``eager``: Megatron-LM with Transformer Engine (its default ``--transformer-impl``) and
    ``--attention-backend auto`` (the default) runs a fused/flash kernel; ``unfused`` and ``local`` do not."""
    impl = flags.one("--transformer-impl") if flags.given("--transformer-impl") else "transformer_engine"
    backend = flags.one("--attention-backend") if flags.given("--attention-backend") else "auto"
    backends = ("flash", "fused", "unfused", "local", "auto")
    if backend not in backends:
        raise InvalidInputError(f"--attention-backend must be one of {', '.join(backends)}, got {backend!r}")
    if backend in ("unfused", "local") or (impl == "local" and backend == "auto"):
        return "flash" if flags.given("--use-flash-attn") else "eager"
    return "flash"


def _vocabulary(flags: _Flags, tp: int) -> tuple[int, list[str]]:
    """The padded vocabulary (``vocab_size_with_padding``: up to a multiple of --make-vocab-size-divisible-by × tp)."""
    if flags.given("--padded-vocab-size"):
        return flags.integer("--padded-vocab-size"), ["--padded-vocab-size"]
    used = []
    if flags.given("--vocab-size"):
        size = flags.integer("--vocab-size")
        used.append("--vocab-size")
    elif flags.given("--tokenizer-type") and flags.one("--tokenizer-type") in TOKENIZER_VOCAB:
        size = TOKENIZER_VOCAB[flags.one("--tokenizer-type")]
        used.append("--tokenizer-type")
    else:
        what = (f"--tokenizer-type {flags.one('--tokenizer-type')}" if flags.given("--tokenizer-type")
                else "no --tokenizer-type")
        raise InvalidInputError(f"{flags.path} gives the GPT's shape but not its vocabulary ({what}, whose size "
                                "pipeplan does not know): give --vocab-size")
    if flags.given("--no-pad-vocab-size"):
        return size, used + ["--no-pad-vocab-size"]
    divisor = flags.integer("--make-vocab-size-divisible-by") if flags.given("--make-vocab-size-divisible-by") else 128
    if flags.given("--make-vocab-size-divisible-by"):
        used.append("--make-vocab-size-divisible-by")
    multiple = divisor * tp
    return math.ceil(size / multiple) * multiple, used
