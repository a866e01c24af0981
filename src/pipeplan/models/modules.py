"""The module kinds a :class:`~pipeplan.models.spec.ModelSpec` is made of (shapes only), and their schema.

    from pipeplan.models.modules import TransformerStack, VisionEncoder
    vision = VisionEncoder(name="vision", image_size=224, patch_size=14, num_layers=27, hidden_size=1152,
                           num_heads=16, ffn_hidden_size=4304, cameras=3)
    vision.tokens    # 768

Frozen dataclasses with keyword fields. **Each field's metadata is the one source of the
model schema**: its type (the annotation), range (``min`` / ``max``), unit, meaning (``doc``)
and, for a default that changes the cost by more than a few percent, the words a plan's
assumptions use when a spec file leaves it out (``reported``). :mod:`pipeplan.models._schema`
turns it into the checks (run when a ``ModelSpec`` is built or a spec file is read), the field
table of docs/presets.md (``benchmarks/model_schema.py --write``) and ``pipeplan model --schema``.
See :mod:`pipeplan.models.layer_costs` for what each field costs.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field
from typing import Any, Literal, Union

__all__ = [
    "ACTIVATION_BYTES",
    "Attention",
    "CrossAttention",
    "Embedding",
    "LMHead",
    "Linear",
    "Module",
    "MODULE_KINDS",
    "NORM_PARAMS",
    "Norm",
    "ROLES",
    "Role",
    "Projector",
    "TransformerStack",
    "VisionEncoder",
    "layer_depth",
    "runs_per_example",
    "spec_field",
]

#: Bytes of one activation element (bf16 / fp16 training).
ACTIVATION_BYTES = 2

Norm = Literal["layernorm", "rmsnorm", "none"]
Attention = Literal["eager", "flash"]
#: Parameters per channel of each norm type.
NORM_PARAMS = {"layernorm": 2, "rmsnorm": 1, "none": 0}
#: What a module's layers are to Megatron-LM (see :mod:`pipeplan.engines._names`): a decoder
#: layer (``--num-layers``), the word embedding or the loss (final norm + output layer), or "other".
Role = Literal["embedding", "decoder", "loss", "other"]
ROLES: tuple[str, ...] = ("embedding", "decoder", "loss", "other")


def spec_field(default: Any = MISSING, *, doc: str, minimum: int | None = None, maximum: int | None = None,
               unit: str = "", reported: str = "") -> Any:
    """A module field with its schema metadata (the one source of checks, docs and ``model --schema``).

    Args:
        default: the value when a spec leaves the field out (none: the field is required).
        doc: what the field means (one or two sentences; markdown code spans allowed).
        minimum, maximum: the allowed range of an integer field (of each entry of a pair).
        unit: what an integer counts (``"tokens"``, ``"pixels"``).
        reported: for a default that changes the cost by more than a few percent, what it
            assumes, in words (``"eager (scores stored, not FlashAttention)"``); a spec file that leaves the field out has it listed in the
            plan's ``model defaults`` assumption.
    """
    metadata = {"doc": doc, "min": minimum, "max": maximum, "unit": unit, "reported": reported}
    if default is MISSING:
        return field(metadata=metadata)
    return field(default=default, metadata=metadata)


# Field texts shared by several kinds (one wording each).
_NAME = "unique module name (other modules' `inputs`, `cross_attention.source`, `joint_with`, `tied_to` name it)."
_INPUTS = "names of the modules whose outputs this one reads; `null`: the previous module, `[]`: data only."
_REPEATS = "runs of the whole module per example, everything it reads included (the reference repeats its inputs)."
_REPEATS_HEAD = ("runs of the whole module per example, everything it reads included: the reference repeats its "
                 "inputs, context too (CogACT repeats the cognition feature and the actions 8 times). A head that "
                 "reads its context once per example and trains on several noise samples says `noise_samples`.")
_NOISE_SAMPLES = ("noise samples (diffusion timesteps, flow-matching times) the head trains on per example: the "
                  "stack's own tokens (their self-attention, MLP, queries and attention to the context's keys "
                  "and values) run once per sample, what depends on the context only runs once per example (a "
                  "cross layer's K/V projection of the `cross_attention.source` tokens; a joint partner's keys "
                  "and values are the partner's). π0, GR00T, RDT, SmolVLA: 1. Inference denoising steps never "
                  "enter the training cost. Multiplies `repeats`.")
_PROJECTOR_SAMPLES = ("noise samples per example, as a stack's `noise_samples`: every linear runs once per sample "
                      "(a projector has no once-per-example part; an embedder of the context that runs once "
                      "belongs in a projector of its own). Multiplies `repeats`.")
_FROZEN = "no weight gradients and no optimizer state (W = 0)."
_FQN = ("the module paths of one block in the reference code, each a template with `{i}` for the block index "
        "(`[\"model.layers.{i}\"]`; a one-block stack may give a plain path); `null`: not recorded "
        "(engine exports name it `name.i`).")
_FQN_ONE = "the reference code's module paths of this layer (no `{i}`); `null`: not recorded."
_ROLE = ("what the layers are to Megatron-LM: `embedding`, `decoder`, `loss` or `other`; needs `fqn`.")
_ATTENTION = ("`eager`: the attention scores are materialised (Megatron-LM's local core attention, "
              "Korthikanti et al.'s activation counts; `selective` recompute recomputes them); `flash`: "
              "FlashAttention (the scores never reach memory, the backward kernel recomputes them).")
_ATTENTION_REPORTED = "eager (scores stored, not FlashAttention)"
_GATED = "a gated MLP (SwiGLU / GeGLU: three `h × f` matrices) instead of two."
_GATED_REPORTED = "false (two-matrix MLP, not SwiGLU/GeGLU)"
_NORM = "`layernorm` (scale + bias), `rmsnorm` (scale) or `none` (no parameters); two per block."
_LAYER_SCALE = "per-channel scales after attention and MLP (DINOv2), `2h` parameters."


@dataclass(frozen=True)
class CrossAttention:
    """Cross-attention from a stack to another module's output (a stack's ``cross_attention`` object).

    The cross layer replaces the self-attention of that layer.
    """

    source: str = spec_field(doc="name of the module whose output tokens are the keys and values.")
    every: int = spec_field(1, minimum=1, unit="layers",
                            doc="layer `i` cross-attends when `i % every == 0` and self-attends otherwise "
                                "(GR00T N1's DiT interleaves: 2).")
    kv_hidden_size: int | None = spec_field(None, minimum=1, unit="channels",
                                            doc="width of the source features the K/V projections read; "
                                                "default the source module's output width.")


@dataclass(frozen=True)
class TransformerStack:
    """``num_layers`` identical pre-norm transformer blocks (one pipeline layer each; a joint pair: one per depth).

    Fields: see each field's ``doc`` (``pipeplan model --schema``, docs/presets.md).
    """

    name: str = spec_field(doc=_NAME)
    num_layers: int = spec_field(unit="blocks", doc="depth `L`.", minimum=1)
    hidden_size: int = spec_field(unit="channels", doc="width `h`.", minimum=1)
    num_heads: int = spec_field(unit="heads", doc="query heads `a`.", minimum=1)
    seq_length: int = spec_field(unit="tokens", doc="tokens per attention sequence `s`.", minimum=1)
    ffn_hidden_size: int = spec_field(unit="channels", doc="MLP width `f`.", minimum=1)
    num_kv_heads: int | None = spec_field(None, minimum=1, unit="heads",
                                          doc="key/value heads (GQA; 1 = MQA); must divide `num_heads`.",
                                          reported="num_heads (no GQA)")
    head_dim: int | None = spec_field(None, minimum=1, unit="channels",
                                      doc="per-head width; default `h / a`, which must then be whole.")
    gated_mlp: bool = spec_field(False, doc=_GATED, reported=_GATED_REPORTED)
    norm: Norm = spec_field("layernorm", doc=_NORM)
    bias: bool = spec_field(False, doc="every linear layer has a bias.")
    qkv_bias: bool = spec_field(False, doc="the query, key and value projections have biases and no other linear "
                                           "does (Qwen2); no effect with `bias`.")
    qk_norm: bool = spec_field(False, doc="a norm over each head's queries and keys (Qwen3), `2 × head_dim` "
                                          "parameters per block; their inputs are stored too.",
                               reported="false (no per-head query/key norms)")
    post_norms: bool = spec_field(False, doc="a norm after attention and after the MLP too (Gemma 2): four per "
                                             "block instead of two; their inputs are stored too.",
                                  reported="false (two norms per block, not Gemma 2's four)")
    dropout: bool = spec_field(False, doc="dropout after attention probabilities, attention and MLP (masks stored).",
                               reported="false (no dropout masks)")
    causal: bool = spec_field(False, doc="each token attends only to earlier ones (a decoder LM): a flash kernel "
                                         "skips half the score blocks (time only; the FLOP convention counts all).",
                              reported="false (bidirectional attention)")
    attention: Attention = spec_field("eager", doc=_ATTENTION, reported=_ATTENTION_REPORTED)
    layer_scale: bool = spec_field(False, doc=_LAYER_SCALE)
    adaptive_norm: tuple[int, int] = spec_field(
        (0, 0), minimum=0, unit="× h",
        doc="`[k1, k2]`: the two norms are modulated by a per-sample condition of width `h` through "
            "`Linear(h, k·h)` (π0.5's adaRMSNorm: `[3, 3]`; GR00T's DiT AdaLayerNorm: `[2, 0]`).")
    final_norm: bool = spec_field(False, doc="a norm after the last block (its parameters go to the last layer).")
    final_norm_adaptive: int = spec_field(0, minimum=0, unit="× h",
                                          doc="`k` when that final norm is modulated like the others (π0.5: 3): "
                                              "`Linear(h, k·h)` replaces its scale.")
    sequences: int = spec_field(1, minimum=1, unit="sequences",
                                doc="attention sequences per example (cameras for a per-image encoder).")
    output_tokens: int | None = spec_field(None, minimum=1, unit="tokens",
                                           doc="tokens per example the next module reads; default all "
                                               "(CogACT's DiT reads one cognition token).")
    cross_attention: CrossAttention | None = spec_field(
        None, doc="an object `{source, every, kv_hidden_size}`: cross-attention to another module's output.")
    joint_with: str | None = spec_field(
        None, doc="name of the stack listed right before this one whose layer `i` runs together with this "
                  "stack's layer `i`: this stack's queries attend to that stack's keys/values of the same "
                  "layer too (π0's action expert and Gemma). The pair forms one pipeline layer per depth.")
    inputs: tuple[str, ...] | None = spec_field(None, doc=_INPUTS)
    repeats: int = spec_field(1, minimum=1, unit="runs", doc=_REPEATS_HEAD)
    noise_samples: int = spec_field(1, minimum=1, unit="samples", doc=_NOISE_SAMPLES)
    frozen: bool = spec_field(False, doc=_FROZEN)
    fqn: tuple[str, ...] | None = spec_field(None, doc=_FQN)
    fqn_first: tuple[str, ...] | None = spec_field(
        None, doc="paths (no `{i}`) that belong with the first block's pipeline layer; needs `fqn`.")
    fqn_last: tuple[str, ...] | None = spec_field(
        None, doc="paths (no `{i}`) that belong with the last block's pipeline layer (a final norm: "
                  "`[\"model.norm\"]`); needs `fqn`.")
    role: Role | None = spec_field(None, doc=_ROLE)

    kind = "transformer"

    @property
    def kv_heads(self) -> int:
        """Key/value heads."""
        return self.num_heads if self.num_kv_heads is None else self.num_kv_heads

    @property
    def dim_per_head(self) -> int:
        """Per-head width ``d``."""
        return self.hidden_size // self.num_heads if self.head_dim is None else self.head_dim

    @property
    def tokens(self) -> int:
        """Tokens per example this stack processes (``sequences · seq_length``)."""
        return self.sequences * self.seq_length

    def output_shape(self) -> tuple[int, int]:
        """``(tokens per example, width)`` of what the next module reads."""
        return (self.tokens if self.output_tokens is None else self.output_tokens), self.hidden_size


@dataclass(frozen=True)
class VisionEncoder:
    """A ViT over ``cameras · frames`` images, each image one attention sequence (patch embedding + one layer per block).

    Fields: see each field's ``doc`` (``pipeplan model --schema``, docs/presets.md).
    """

    name: str = spec_field(doc=_NAME)
    image_size: int = spec_field(unit="pixels", doc="image side; a multiple of `patch_size`.", minimum=1)
    patch_size: int = spec_field(unit="pixels", doc="patch side.", minimum=1)
    num_layers: int = spec_field(unit="blocks", doc="depth `L`.", minimum=1)
    hidden_size: int = spec_field(unit="channels", doc="width `h`.", minimum=1)
    num_heads: int = spec_field(unit="heads", doc="attention heads `a`.", minimum=1)
    ffn_hidden_size: int = spec_field(unit="channels", doc="MLP width `f`.", minimum=1)
    cameras: int = spec_field(1, minimum=1, unit="images", doc="images per example (one per camera).")
    frames: int = spec_field(1, minimum=1, unit="images", doc="frames per camera per example.")
    channels: int = spec_field(3, minimum=1, unit="channels", doc="input image channels.")
    extra_tokens: int = spec_field(0, minimum=0, unit="tokens",
                                   doc="class / register tokens per image kept through the blocks "
                                       "(DINOv2 with registers: 5) and dropped from the output.")
    position_tokens: int | None = spec_field(None, minimum=0, unit="tokens",
                                             doc="learned position embeddings; default one per patch.")
    extra_params: int = spec_field(0, minimum=0, unit="parameters",
                                   doc="other parameters that cost no FLOPs (DINOv2's mask token).")
    norm: Norm = spec_field("layernorm", doc=_NORM)
    bias: bool = spec_field(True, doc="every linear layer has a bias.",
                            reported="true (every linear layer has a bias)")
    gated_mlp: bool = spec_field(False, doc=_GATED, reported=_GATED_REPORTED)
    layer_scale: bool = spec_field(False, doc=_LAYER_SCALE)
    attention: Attention = spec_field("eager", doc=_ATTENTION, reported=_ATTENTION_REPORTED)
    map_head: bool = spec_field(False, doc="the checkpoint holds a SigLIP attention-pooling head that the model "
                                           "does not run (its parameters count, its FLOPs do not).")
    final_norm: bool = spec_field(True, doc="a norm after the blocks.")
    inputs: tuple[str, ...] | None = spec_field((), doc=_INPUTS + " A vision encoder reads images (`[]`).")
    repeats: int = spec_field(1, minimum=1, unit="runs", doc=_REPEATS)
    frozen: bool = spec_field(False, doc=_FROZEN)
    fqn: tuple[str, ...] | None = spec_field(None, doc=_FQN + " Block `{i}` is pipeline layer `1 + i`.")
    fqn_first: tuple[str, ...] | None = spec_field(
        None, doc="paths (no `{i}`) of the patch-embedding layer; needs `fqn`.")
    fqn_last: tuple[str, ...] | None = spec_field(
        None, doc="paths (no `{i}`) that belong with the last block's pipeline layer; needs `fqn`.")
    role: Role | None = spec_field(None, doc=_ROLE)

    kind = "vision_encoder"

    @property
    def patches_per_image(self) -> int:
        """``(image_size / patch_size)²`` patch tokens per image."""
        return (self.image_size // self.patch_size) ** 2

    @property
    def tokens(self) -> int:
        """Patch tokens per example: ``cameras · frames · patches_per_image``."""
        return self.cameras * self.frames * self.patches_per_image

    def output_shape(self) -> tuple[int, int]:
        """``(patch tokens per example, width)``."""
        return self.tokens, self.hidden_size

    def blocks(self) -> TransformerStack:
        """The encoder's blocks as a stack (one sequence per image)."""
        return TransformerStack(
            name=self.name, num_layers=self.num_layers, hidden_size=self.hidden_size,
            num_heads=self.num_heads, seq_length=self.patches_per_image + self.extra_tokens,
            ffn_hidden_size=self.ffn_hidden_size, gated_mlp=self.gated_mlp, norm=self.norm,
            bias=self.bias, layer_scale=self.layer_scale, final_norm=self.final_norm, attention=self.attention,
            sequences=self.cameras * self.frames, output_tokens=self.tokens, inputs=(),
            repeats=self.repeats, frozen=self.frozen,
        )


@dataclass(frozen=True)
class Linear:
    """One linear layer of a projector (in a file: ``[in_features, out_features]`` or ``[in, out, tokens]``)."""

    in_features: int = spec_field(minimum=1, unit="channels", doc="input width.")
    out_features: int = spec_field(minimum=1, unit="channels", doc="output width.")
    tokens: int | None = spec_field(None, minimum=1, unit="tokens",
                                    doc="tokens per example it runs on; default the projector's `tokens`.")


@dataclass(frozen=True)
class Projector:
    """A chain of linear layers with a nonlinearity between consecutive ones (one pipeline layer).

    Fields: see each field's ``doc`` (``pipeplan model --schema``, docs/presets.md).
    """

    name: str = spec_field(doc=_NAME)
    linears: tuple[Linear, ...] = spec_field(
        doc="the layers in order, each `[in_features, out_features]` or `[in, out, tokens]`; at least one.")
    tokens: int = spec_field(unit="tokens", doc="tokens per example each linear runs on (unless it says otherwise).",
                             minimum=1)
    bias: bool = spec_field(True, doc="every linear has a bias.")
    activation: bool = spec_field(True, doc="a nonlinearity between consecutive linears (its input is stored).")
    norm_params: int = spec_field(0, minimum=0, unit="parameters",
                                  doc="parameters of norms inside the projector (e.g. Eagle's LayerNorm).")
    extra_params: int = spec_field(0, minimum=0, unit="parameters",
                                   doc="other parameters that cost no FLOPs (learned position embeddings, "
                                       "a classifier-free-guidance null condition).")
    output_tokens: int | None = spec_field(None, minimum=1, unit="tokens",
                                           doc="tokens per example the next module reads; default the last "
                                               "linear's tokens.")
    output_width: int | None = spec_field(None, minimum=1, unit="channels",
                                          doc="width the next module reads; default the last linear's "
                                              "`out_features`.")
    inputs: tuple[str, ...] | None = spec_field(None, doc=_INPUTS)
    repeats: int = spec_field(1, minimum=1, unit="runs", doc=_REPEATS_HEAD)
    noise_samples: int = spec_field(1, minimum=1, unit="samples", doc=_PROJECTOR_SAMPLES)
    frozen: bool = spec_field(False, doc=_FROZEN)
    fqn: tuple[str, ...] | None = spec_field(None, doc=_FQN_ONE)
    role: Role | None = spec_field(None, doc=_ROLE)

    kind = "projector"

    def output_shape(self) -> tuple[int, int]:
        """``(tokens per example, width)`` of the projector's output."""
        last = self.linears[-1]
        tokens = self.output_tokens if self.output_tokens is not None else (last.tokens or self.tokens)
        return tokens, (self.output_width if self.output_width is not None else last.out_features)


@dataclass(frozen=True)
class Embedding:
    """A token embedding table ``vocab_size × hidden_size`` looked up for ``tokens`` ids (one pipeline layer; its input is data).

    Fields: see each field's ``doc`` (``pipeplan model --schema``, docs/presets.md).
    """

    name: str = spec_field(doc=_NAME)
    vocab_size: int = spec_field(unit="tokens", doc="rows of the table.", minimum=1)
    hidden_size: int = spec_field(unit="channels", doc="width of each row.", minimum=1)
    tokens: int = spec_field(unit="tokens", doc="ids looked up per example.", minimum=1)
    position_tokens: int = spec_field(0, minimum=0, unit="tokens",
                                      doc="rows of a learned position table (GPT-2 style); 0: none.")
    dropout: bool = spec_field(False, doc="a dropout mask is stored on the output.")
    inputs: tuple[str, ...] | None = spec_field((), doc=_INPUTS + " An embedding reads token ids (`[]`).")
    repeats: int = spec_field(1, minimum=1, unit="runs", doc=_REPEATS)
    frozen: bool = spec_field(False, doc=_FROZEN)
    fqn: tuple[str, ...] | None = spec_field(None, doc=_FQN_ONE)
    role: Role | None = spec_field(None, doc=_ROLE)

    kind = "embedding"

    def output_shape(self) -> tuple[int, int]:
        """``(tokens per example, hidden_size)``."""
        return self.tokens, self.hidden_size


@dataclass(frozen=True)
class LMHead:
    """Logits ``hidden_size → vocab_size`` on ``tokens`` positions and the loss (one pipeline layer).

    A tied head's parameters count once in :meth:`ModelSpec.num_parameters`, but the layer's
    ``params`` in the profile include the copy the last stage must hold (Megatron-LM keeps one
    on each end and all-reduces their gradients). Logits are kept in fp32 for the loss (4 bytes
    each). Fields: see each field's ``doc`` (``pipeplan model --schema``, docs/presets.md).
    """

    name: str = spec_field(doc=_NAME)
    vocab_size: int = spec_field(unit="tokens", doc="logits per position.", minimum=1)
    hidden_size: int = spec_field(unit="channels", doc="input width.", minimum=1)
    tokens: int = spec_field(unit="tokens", doc="positions per example that get logits and a loss.", minimum=1)
    tied_to: str | None = spec_field(None, doc="name of the `embedding` whose table it shares (tied weights).")
    inputs: tuple[str, ...] | None = spec_field(None, doc=_INPUTS)
    repeats: int = spec_field(1, minimum=1, unit="runs", doc=_REPEATS)
    frozen: bool = spec_field(False, doc=_FROZEN)
    fqn: tuple[str, ...] | None = spec_field(None, doc=_FQN_ONE)
    role: Role | None = spec_field(None, doc=_ROLE)

    kind = "lm_head"

    def output_shape(self) -> tuple[int, int]:
        """``(tokens per example, vocab_size)`` (the logits, read by the loss only)."""
        return self.tokens, self.vocab_size


Module = Union[VisionEncoder, TransformerStack, Projector, Embedding, LMHead]
MODULE_KINDS: dict[str, type] = {
    "vision_encoder": VisionEncoder,
    "transformer": TransformerStack,
    "projector": Projector,
    "embedding": Embedding,
    "lm_head": LMHead,
}


def layer_depth(module: Module) -> int:
    """Pipeline layers of ``module`` as per-layer costs count them.

    A vision encoder: its patch embedding and its blocks; a transformer stack: its
    blocks (a joint pair's two stacks share one layer per depth); any other module: one.
    """
    if isinstance(module, VisionEncoder):
        return 1 + module.num_layers
    if isinstance(module, TransformerStack):
        return module.num_layers
    return 1


def runs_per_example(module: Module) -> int:
    """Passes over ``module``'s own tokens per example: ``repeats · noise_samples``.

    What a transformer stack reads from its ``cross_attention`` source (the K/V
    projection of the context) runs ``repeats`` times only; everything else of a
    module runs this many times (:mod:`pipeplan.models.layer_costs`, "Noise samples").
    """
    samples = module.noise_samples if isinstance(module, (TransformerStack, Projector)) else 1
    return module.repeats * samples
