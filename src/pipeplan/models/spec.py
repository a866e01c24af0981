"""ModelSpec: a model described by its published shapes, turned into per-layer costs.

A :class:`ModelSpec` is an ordered list of modules (a vision encoder, a projector,
an embedding, transformer stacks, an LM head). From the shapes alone it yields,
per pipeline layer, the forward (F), input-gradient (B) and weight-gradient (W)
FLOPs, the parameters, the activation bytes a microbatch leaves until its
backward, the bytes W still needs after B, and the bytes sent to the next stage;
:meth:`ModelSpec.to_layer_profile` turns them into the
:class:`~pipeplan.layers.LayerProfile` that ``partition_layers``, ``simulate`` and
the planner consume::

    from pipeplan import presets, hardware
    spec = presets.get("pi0")
    profile = spec.to_layer_profile(hardware.device("h100-80g"), micro_batch_size=4)
    spec.num_parameters(), spec.module_parameters()["action_expert"]

torch-free (numpy only through :mod:`pipeplan.layers`).

Module kinds (all frozen dataclasses, keyword arguments):

* :class:`VisionEncoder` — a ViT: ``image_size``, ``patch_size``, ``cameras``,
  ``frames`` give the patch tokens (``cameras · frames · (image/patch)²``); each
  image is its own attention sequence. One patch-embedding layer, then
  ``num_layers`` blocks.
* :class:`TransformerStack` — ``num_layers`` blocks: hidden ``h``, heads ``a``,
  KV heads (MHA / GQA / MQA), head dim, FFN width, plain or gated MLP, norm type,
  ``seq_length`` tokens per sequence; optional :class:`CrossAttention` to
  another module's output, or ``joint_with`` another stack (π0's action expert:
  its layer ``i`` attends to the keys/values of the other stack's layer ``i``).
* :class:`Projector` — a chain of linear layers (an MLP projector, action or
  time embeddings).
* :class:`Embedding` and :class:`LMHead` (tied or untied).

Every module has ``frozen`` (no weight gradients, no optimizer state), ``inputs``
(the modules whose outputs it reads; default the previous module, ``()`` for data
only) and ``repeats`` (training samples of the module per example: CogACT draws
8 noise samples per example for its action DiT; π0 and GR00T draw one).
Inference denoising steps never enter the training cost.

Conventions (stated so tests can pin them):

* FLOPs count a multiply-add as 2 and only matrix products (attention scores and
  values included); norms, activations, softmax and biases are not counted, as in
  Narayanan et al. (2021). For a GPT layer this gives the zero-bubble paper's
  Table 1 exactly: ``F = sbh(24h + 4s)``, ``B = sbh(24h + 8s)``, ``W = 24sbh²``.
  An embedding gather costs nothing in FLOPs; it is charged ``2·tokens·h`` (one
  multiply-add per output element) so that every layer has a positive time.
* Activations are 16-bit (2 bytes), dropout masks 1 byte, token ids 8 bytes.
  Per block the stored tensors follow Korthikanti et al. (2022), "Reducing
  Activation Recomputation in Large Transformer Models", §4, generalised to GQA,
  gated MLPs, cross/joint attention and models without dropout; for a GPT layer
  with dropout they give ``sbh(34 + 5as/h)`` without recompute, ``34sbh`` with
  selective recompute and ``2sbh`` with full recompute (divided by ``t`` with
  sequence parallelism, ``sbh(10 + 24/t + 5as/(ht))`` without).
* W-stash bytes are the stored inputs of the weight GEMMs (``14sbh`` for GPT):
  what a split backward keeps after B until W.
* Frozen modules: a layer whose module is frozen has W = 0 and no optimizer
  state. It has a backward (B) only if a gradient must flow through it to a
  trainable module upstream; otherwise it runs only its forward and stores
  nothing (a frozen vision encoder on stage 0). A layer whose input is data (the
  patch embedding, an embedding) has B = 0.
* Recompute: ``"selective"`` recomputes the attention core (scores, softmax,
  dropout) in the backward, so B gains the core's forward FLOPs; ``"full"`` keeps
  only each layer's input and B gains the whole forward.
* ``tensor_parallel = t`` divides every matrix product's FLOPs and every
  parameter by ``t``.
* Send bytes of a layer are the bytes that cross a pipeline cut right after it,
  per microbatch: its own output if the next layer reads it, plus every earlier
  module output still read later (the DINOv2 features past the SigLIP tower,
  GR00T's VLM features past the DiT's first layers). Data inputs (images, token
  ids, noisy actions) are assumed loaded on the stage that reads them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import MISSING, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Literal, Union

from .._validation import positive_float
from ..errors import InvalidInputError

__all__ = [
    "ACTIVATION_BYTES",
    "CrossAttention",
    "Embedding",
    "LMHead",
    "LayerCost",
    "Linear",
    "Module",
    "ModelSpec",
    "Projector",
    "Recompute",
    "TransformerStack",
    "VisionEncoder",
]

#: Bytes of one activation element (bf16 / fp16 training).
ACTIVATION_BYTES = 2
_MASK_BYTES = 1
_TOKEN_ID_BYTES = 8

Recompute = Literal["none", "selective", "full"]
Norm = Literal["layernorm", "rmsnorm", "none"]
_NORM_PARAMS = {"layernorm": 2, "rmsnorm": 1, "none": 0}


# ----------------------------------------------------------------- modules
@dataclass(frozen=True)
class CrossAttention:
    """Cross-attention from a stack to another module's output.

    Args:
        source: name of the module whose output tokens are the keys/values.
        every: layer ``i`` cross-attends when ``i % every == 0`` and self-attends
            otherwise (GR00T N1's DiT interleaves: ``every=2``). The cross layer
            replaces the self-attention of that layer.
        kv_hidden_size: width of the source features the K/V projections read;
            default the source module's output width.
    """

    source: str
    every: int = 1
    kv_hidden_size: int | None = None


@dataclass(frozen=True)
class TransformerStack:
    """``num_layers`` identical pre-norm transformer blocks.

    Args:
        name: unique module name.
        num_layers, hidden_size, num_heads: depth ``L``, width ``h``, query heads ``a``.
        seq_length: tokens per attention sequence ``s``.
        ffn_hidden_size: MLP width ``f``.
        num_kv_heads: key/value heads (default ``num_heads``; 1 = MQA).
        head_dim: per-head width (default ``h / a``, which must then be whole).
        gated_mlp: a gated MLP (SwiGLU / GeGLU: three ``h × f`` matrices) instead of two.
        norm: ``"layernorm"`` (scale + bias), ``"rmsnorm"`` (scale) or ``"none"``
            (a norm without parameters); two per block.
        bias: every linear layer has a bias.
        dropout: dropout after attention probabilities, attention and MLP (masks stored).
        layer_scale: per-channel scales after attention and MLP (DINOv2), ``2h`` parameters.
        adaptive_norm: ``(k1, k2)``: the two norms are modulated by a per-sample
            condition of width ``h`` through ``Linear(h, k·h)`` (π0.5's adaRMSNorm:
            ``(3, 3)``; GR00T's DiT AdaLayerNorm: ``(2, 0)``).
        final_norm: a norm after the last block (its parameters go to the last layer).
        final_norm_adaptive: ``k`` when that final norm is modulated like the others
            (π0.5: 3): ``Linear(h, k·h)`` replaces its scale.
        sequences: attention sequences per example (cameras for a per-image encoder).
        output_tokens: tokens per example the next module reads (default all;
            CogACT's DiT reads one cognition token).
        cross_attention: see :class:`CrossAttention`.
        joint_with: name of the stack listed right before this one whose layer
            ``i`` runs together with this stack's layer ``i``: this stack's queries
            attend to that stack's keys/values of the same layer too (π0's action
            expert and Gemma). The pair forms one pipeline layer per depth.
        inputs, repeats, frozen: see the module doc.
    """

    name: str
    num_layers: int
    hidden_size: int
    num_heads: int
    seq_length: int
    ffn_hidden_size: int
    num_kv_heads: int | None = None
    head_dim: int | None = None
    gated_mlp: bool = False
    norm: Norm = "layernorm"
    bias: bool = False
    dropout: bool = False
    layer_scale: bool = False
    adaptive_norm: tuple[int, int] = (0, 0)
    final_norm: bool = False
    final_norm_adaptive: int = 0
    sequences: int = 1
    output_tokens: int | None = None
    cross_attention: CrossAttention | None = None
    joint_with: str | None = None
    inputs: tuple[str, ...] | None = None
    repeats: int = 1
    frozen: bool = False

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

    @property
    def num_pipeline_layers(self) -> int:
        """Pipeline layers this module contributes on its own (0 when fused into a partner)."""
        return 0 if self.joint_with else self.num_layers

    def output_shape(self) -> tuple[int, int]:
        """``(tokens per example, width)`` of what the next module reads."""
        return (self.tokens if self.output_tokens is None else self.output_tokens), self.hidden_size


@dataclass(frozen=True)
class VisionEncoder:
    """A ViT over ``cameras · frames`` images; each image is one attention sequence.

    Args:
        image_size, patch_size: pixels; ``image_size`` must be a multiple of ``patch_size``.
        cameras, frames: images per example.
        channels: input channels (3).
        extra_tokens: class / register tokens per image kept through the blocks
            (DINOv2 with registers: 5) and dropped from the output.
        position_tokens: learned position embeddings (default one per patch).
        map_head: the checkpoint holds a SigLIP attention-pooling head that the
            model does not run (its parameters count, its FLOPs do not).
        final_norm: a norm after the blocks (default True).
        Other block fields as in :class:`TransformerStack` (bias default True).
    """

    name: str
    image_size: int
    patch_size: int
    num_layers: int
    hidden_size: int
    num_heads: int
    ffn_hidden_size: int
    cameras: int = 1
    frames: int = 1
    channels: int = 3
    extra_tokens: int = 0
    position_tokens: int | None = None
    norm: Norm = "layernorm"
    bias: bool = True
    gated_mlp: bool = False
    layer_scale: bool = False
    map_head: bool = False
    final_norm: bool = True
    inputs: tuple[str, ...] | None = ()
    repeats: int = 1
    frozen: bool = False

    kind = "vision_encoder"

    @property
    def patches_per_image(self) -> int:
        """``(image_size / patch_size)²`` patch tokens per image."""
        return (self.image_size // self.patch_size) ** 2

    @property
    def tokens(self) -> int:
        """Patch tokens per example: ``cameras · frames · patches_per_image``."""
        return self.cameras * self.frames * self.patches_per_image

    @property
    def num_pipeline_layers(self) -> int:
        """The patch embedding plus the blocks."""
        return 1 + self.num_layers

    def output_shape(self) -> tuple[int, int]:
        """``(patch tokens per example, width)``."""
        return self.tokens, self.hidden_size

    def blocks(self) -> TransformerStack:
        """The encoder's blocks as a stack (one sequence per image)."""
        return TransformerStack(
            name=self.name, num_layers=self.num_layers, hidden_size=self.hidden_size,
            num_heads=self.num_heads, seq_length=self.patches_per_image + self.extra_tokens,
            ffn_hidden_size=self.ffn_hidden_size, gated_mlp=self.gated_mlp, norm=self.norm,
            bias=self.bias, layer_scale=self.layer_scale, final_norm=self.final_norm,
            sequences=self.cameras * self.frames, output_tokens=self.tokens, inputs=(),
            repeats=self.repeats, frozen=self.frozen,
        )


@dataclass(frozen=True)
class Linear:
    """One linear layer of a :class:`Projector`: ``in_features → out_features`` on ``tokens``.

    ``tokens`` defaults to the projector's ``tokens``.
    """

    in_features: int
    out_features: int
    tokens: int | None = None


@dataclass(frozen=True)
class Projector:
    """A chain of linear layers with a nonlinearity between consecutive ones.

    Args:
        linears: the layers, in order (see :class:`Linear`).
        tokens: tokens per example each linear runs on (unless it says otherwise).
        bias: every linear has a bias.
        activation: a nonlinearity between consecutive linears (its input is stored).
        norm_params: parameters of norms inside the projector (e.g. Eagle's LayerNorm).
        extra_params: other parameters that cost no FLOPs (learned position
            embeddings, a classifier-free-guidance null condition).
        output_tokens, output_width: what the next module reads (default the last
            linear's tokens and width).
        One pipeline layer.
    """

    name: str
    linears: tuple[Linear, ...]
    tokens: int
    bias: bool = True
    activation: bool = True
    norm_params: int = 0
    extra_params: int = 0
    output_tokens: int | None = None
    output_width: int | None = None
    inputs: tuple[str, ...] | None = None
    repeats: int = 1
    frozen: bool = False

    kind = "projector"

    num_pipeline_layers = 1

    def output_shape(self) -> tuple[int, int]:
        """``(tokens per example, width)`` of the projector's output."""
        last = self.linears[-1]
        tokens = self.output_tokens if self.output_tokens is not None else (last.tokens or self.tokens)
        return tokens, (self.output_width if self.output_width is not None else last.out_features)


@dataclass(frozen=True)
class Embedding:
    """A token embedding table ``vocab_size × hidden_size`` looked up for ``tokens`` ids.

    ``position_tokens`` adds a learned position table (GPT-2 style). ``dropout``
    stores a dropout mask on the output. One pipeline layer; its input is data.
    """

    name: str
    vocab_size: int
    hidden_size: int
    tokens: int
    position_tokens: int = 0
    dropout: bool = False
    inputs: tuple[str, ...] | None = ()
    repeats: int = 1
    frozen: bool = False

    kind = "embedding"

    num_pipeline_layers = 1

    def output_shape(self) -> tuple[int, int]:
        """``(tokens per example, hidden_size)``."""
        return self.tokens, self.hidden_size


@dataclass(frozen=True)
class LMHead:
    """Logits ``hidden_size → vocab_size`` on ``tokens`` positions and the loss.

    ``tied_to`` names the :class:`Embedding` whose table it shares: its parameters
    then count once in :meth:`ModelSpec.num_parameters`, but the layer's ``params``
    in the profile include the copy the last stage must hold (Megatron-LM keeps
    one on each end and all-reduces their gradients). Logits are kept in fp32 for
    the loss (4 bytes each).
    """

    name: str
    vocab_size: int
    hidden_size: int
    tokens: int
    tied_to: str | None = None
    inputs: tuple[str, ...] | None = None
    repeats: int = 1
    frozen: bool = False

    kind = "lm_head"

    num_pipeline_layers = 1

    def output_shape(self) -> tuple[int, int]:
        """``(tokens per example, vocab_size)`` (the logits, read by the loss only)."""
        return self.tokens, self.vocab_size


Module = Union[VisionEncoder, TransformerStack, Projector, Embedding, LMHead]
_KINDS: dict[str, type] = {
    "vision_encoder": VisionEncoder,
    "transformer": TransformerStack,
    "projector": Projector,
    "embedding": Embedding,
    "lm_head": LMHead,
}


# --------------------------------------------------------------- per layer
@dataclass(frozen=True)
class LayerCost:
    """Costs of one pipeline layer for one microbatch (see the module doc's conventions).

    Attributes:
        name: ``module.index`` (or ``a+b.index`` for a joint pair).
        modules: the module(s) the layer belongs to.
        forward_flops, input_grad_flops, weight_grad_flops: F, B and W FLOPs.
        params: parameters held by the layer (per tensor-parallel rank).
        trainable_params: of ``params``, those with gradients and optimizer state.
        activation_bytes: bytes kept from the end of F to the end of B.
        weight_stash_bytes: of those, the bytes W still needs after B.
        send_bytes: bytes crossing a pipeline cut right after this layer.
    """

    name: str
    modules: tuple[str, ...]
    forward_flops: float
    input_grad_flops: float
    weight_grad_flops: float
    params: float
    trainable_params: float
    activation_bytes: float
    weight_stash_bytes: float
    send_bytes: float

    @property
    def backward_flops(self) -> float:
        """B + W FLOPs (the full backward)."""
        return self.input_grad_flops + self.weight_grad_flops


@dataclass
class _Part:
    """Costs of one module's share of a layer before frozen rules are applied."""

    forward: float = 0.0
    linear: float = 0.0  # matrix products with a weight: their dX and dW each cost as much
    core: float = 0.0  # activation-activation products (attention scores, values)
    input_is_data: bool = False  # no input gradient is ever needed (pixels, token ids)
    params: float = 0.0
    act_b: float = 0.0  # stored for B (and W)
    act_w: float = 0.0  # stored for W only (inputs of weight GEMMs)
    act_core: float = 0.0  # attention probabilities etc. (dropped by selective recompute)
    layer_input: float = 0.0  # what full recompute keeps


@dataclass(frozen=True)
class _Shape:
    """Validated options shared by every layer's cost computation."""

    micro_batch_size: int
    recompute: str
    tensor_parallel: int
    sequence_parallel: bool


def _block_part(
    stack: TransformerStack,
    shape: _Shape,
    *,
    layer_index: int,
    kv_tokens: int,
    kv_width: int,
    extra_keys: int,
) -> _Part:
    """One transformer block: FLOPs per microbatch and stored bytes (Korthikanti terms)."""
    t = shape.tensor_parallel
    rep_div = t if shape.sequence_parallel else 1
    n = shape.micro_batch_size * stack.sequences * stack.repeats  # sequences per microbatch
    s, h, f = stack.seq_length, stack.hidden_size, stack.ffn_hidden_size
    qd = stack.num_heads * stack.dim_per_head
    kvd = stack.kv_heads * stack.dim_per_head
    keys = kv_tokens + extra_keys  # keys each query attends to
    a = stack.num_heads
    two = ACTIVATION_BYTES
    mlp_mats = 3 if stack.gated_mlp else 2
    linear = 2.0 * n * (s * h * qd + kv_tokens * kv_width * 2 * kvd + s * qd * h + mlp_mats * s * h * f)
    core = 2.0 * n * 2 * s * keys * qd
    ada = 2.0 * shape.micro_batch_size * stack.repeats * h * h * sum(stack.adaptive_norm)
    linear += ada
    mask = _MASK_BYTES if stack.dropout else 0
    # Stored for B: the norm inputs, Q, K, V, the MLP's nonlinearity inputs, dropout masks.
    act_b_rep = n * s * (2 * two * h + 2 * mask * h)
    act_b_tp = n * (two * s * qd + two * 2 * kv_tokens * kvd)
    act_b_tp += n * s * two * (2 * f if stack.gated_mlp else f)
    # Stored for W only: the inputs of the QKV, output, first and last MLP GEMMs.
    # (A cross layer's K/V GEMMs read the source features, which the stage holds once as a
    # received tensor; they are not counted per layer.)
    act_w_rep = n * s * two * 2 * h
    act_w_tp = n * s * two * (qd + f)
    core_bytes = n * a * s * keys * (two + (mask + two if stack.dropout else 0))
    params = _block_params(stack, layer_index=layer_index, kv_width=kv_width)
    return _Part(
        forward=(linear + core) / t,
        linear=linear / t,
        core=core / t,
        params=params / t,
        act_b=act_b_rep / rep_div + act_b_tp / t,
        act_w=act_w_rep / rep_div + act_w_tp / t,
        act_core=core_bytes / t,
        layer_input=n * s * two * h / rep_div,
    )


def _block_params(stack: TransformerStack, *, layer_index: int, kv_width: int) -> float:
    h, f = stack.hidden_size, stack.ffn_hidden_size
    qd = stack.num_heads * stack.dim_per_head
    kvd = stack.kv_heads * stack.dim_per_head
    mlp_mats = 3 if stack.gated_mlp else 2
    weights = h * qd + 2 * kv_width * kvd + qd * h + mlp_mats * h * f
    biases = (qd + 2 * kvd + h + (2 if stack.gated_mlp else 1) * f + h) if stack.bias else 0
    norms = sum(_NORM_PARAMS[stack.norm] * h for k in stack.adaptive_norm if k == 0)
    ada = sum(k * h * h + k * h for k in stack.adaptive_norm if k)
    scale = 2 * h if stack.layer_scale else 0
    last = layer_index == stack.num_layers - 1
    k = stack.final_norm_adaptive
    final = (k * h * h + k * h if k else _NORM_PARAMS[stack.norm] * h) if stack.final_norm and last else 0
    return float(weights + biases + norms + ada + scale + final)


def _patch_part(encoder: VisionEncoder, shape: _Shape) -> _Part:
    n = shape.micro_batch_size * encoder.repeats
    pixels = encoder.channels * encoder.patch_size**2
    h = encoder.hidden_size
    tokens = encoder.tokens
    linear = 2.0 * n * tokens * pixels * h
    positions = encoder.patches_per_image if encoder.position_tokens is None else encoder.position_tokens
    params = pixels * h + h + positions * h + encoder.extra_tokens * h
    if encoder.map_head:
        # SigLIP's attention-pooling head: a probe token, one attention, a norm and an MLP.
        f = encoder.ffn_hidden_size
        params += h + (4 * h * h + 4 * h) + 2 * h + (2 * h * f + f + h)
    t = shape.tensor_parallel
    return _Part(forward=linear / t, linear=linear / t, input_is_data=True, params=params / t,
                 act_w=n * tokens * pixels * ACTIVATION_BYTES / t,
                 layer_input=n * tokens * pixels * ACTIVATION_BYTES / t)


def _projector_part(projector: Projector, shape: _Shape) -> _Part:
    n = shape.micro_batch_size * projector.repeats
    linear = 0.0
    params = float(projector.norm_params + projector.extra_params)
    act_w = act_b = 0.0
    for index, layer in enumerate(projector.linears):
        tokens = layer.tokens or projector.tokens
        linear += 2.0 * n * tokens * layer.in_features * layer.out_features
        params += layer.in_features * layer.out_features + (layer.out_features if projector.bias else 0)
        act_w += n * tokens * layer.in_features * ACTIVATION_BYTES
        if projector.activation and index + 1 < len(projector.linears):
            act_b += n * tokens * layer.out_features * ACTIVATION_BYTES
    first = projector.linears[0]
    t = shape.tensor_parallel
    return _Part(forward=linear / t, linear=linear / t, params=params / t, act_b=act_b / t, act_w=act_w / t,
                 layer_input=n * (first.tokens or projector.tokens) * first.in_features * ACTIVATION_BYTES / t)


def _embedding_part(embedding: Embedding, shape: _Shape) -> _Part:
    n = shape.micro_batch_size * embedding.repeats
    tokens, h = embedding.tokens, embedding.hidden_size
    t = shape.tensor_parallel
    rep_div = t if shape.sequence_parallel else 1
    gather = 2.0 * n * tokens * h
    ids = n * tokens * _TOKEN_ID_BYTES
    mask = n * tokens * h * _MASK_BYTES if embedding.dropout else 0.0
    params = embedding.vocab_size * h + embedding.position_tokens * h
    return _Part(forward=gather / t, linear=gather / t, input_is_data=True, params=params / t,
                 act_b=mask / rep_div, act_w=ids, layer_input=ids)


def _head_part(head: LMHead, shape: _Shape) -> _Part:
    n = shape.micro_batch_size * head.repeats
    tokens, h, vocab = head.tokens, head.hidden_size, head.vocab_size
    t = shape.tensor_parallel
    linear = 2.0 * n * tokens * h * vocab
    return _Part(forward=linear / t, linear=linear / t, params=vocab * h / t,
                 act_b=n * tokens * vocab * 4 / t, act_w=n * tokens * h * ACTIVATION_BYTES,
                 layer_input=n * tokens * h * ACTIVATION_BYTES)


def _apply_training(part: _Part, *, trains: bool, needs_backward: bool, recompute: str) -> dict[str, float]:
    """F, B, W, bytes of one part once frozen rules and recompute are applied."""
    if not needs_backward:
        return {"forward": part.forward, "input_grad": 0.0, "weight_grad": 0.0,
                "activation": 0.0, "stash": 0.0}
    input_grad = 0.0 if part.input_is_data else part.linear + 2.0 * part.core
    weight_grad = part.linear if trains else 0.0
    stash = part.act_w if trains else 0.0
    stored = part.act_b + stash + part.act_core
    if recompute == "selective":
        input_grad += part.core
        stored -= part.act_core
    elif recompute == "full":
        input_grad += part.forward
        stored = part.layer_input
        stash = min(stash, stored)
    return {"forward": part.forward, "input_grad": input_grad, "weight_grad": weight_grad,
            "activation": stored, "stash": stash}


# ---------------------------------------------------------------- the spec
@dataclass(frozen=True)
class ModelSpec:
    """An ordered list of modules (see the module doc), validated on construction.

    Args:
        name: a label.
        modules: the modules in pipeline order; names are unique.
        description: free text (shapes and sources).

    Raises:
        InvalidInputError: a missing, non-integer or non-positive shape, heads that
            do not divide the hidden size (without ``head_dim``), KV heads that do
            not divide heads, an unknown or later ``inputs`` / ``cross_attention`` /
            ``joint_with`` name, a joint pair of different depths or heads.
    """

    name: str
    modules: tuple[Module, ...]
    description: str = ""
    _index: Mapping[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.modules, (tuple, list)) or not self.modules:
            raise InvalidInputError(f"model {self.name!r}: modules must be a non-empty list")
        object.__setattr__(self, "modules", tuple(self.modules))
        index: dict[str, int] = {}
        for position, module in enumerate(self.modules):
            _check_module(module, position)
            if module.name in index:
                raise InvalidInputError(f"model {self.name!r}: module name {module.name!r} is used twice")
            index[module.name] = position
        object.__setattr__(self, "_index", index)
        for position, module in enumerate(self.modules):
            self._check_links(module, position)

    def _check_links(self, module: Module, position: int) -> None:
        where = f"modules[{position}] ({module.name})"
        for source in self.inputs_of(module):
            if self._index.get(source, position) >= position:
                raise InvalidInputError(
                    f"{where}.inputs names {source!r}, which is not a module listed before it"
                )
        if isinstance(module, TransformerStack):
            cross = module.cross_attention
            if cross is not None and self._index.get(cross.source, position) >= position:
                raise InvalidInputError(
                    f"{where}.cross_attention.source must name a module listed before it, got {cross.source!r}"
                )
            if module.joint_with is not None:
                partner = self.modules[position - 1] if position else None
                if partner is None or partner.name != module.joint_with or not isinstance(partner, TransformerStack):
                    raise InvalidInputError(
                        f"{where}.joint_with must name the transformer stack listed right before it, "
                        f"got {module.joint_with!r}"
                    )
                for attr in ("num_layers", "num_heads", "kv_heads", "dim_per_head"):
                    if getattr(partner, attr) != getattr(module, attr):
                        raise InvalidInputError(
                            f"{where}: a joint pair needs equal {attr}, got {getattr(partner, attr)} "
                            f"({partner.name}) and {getattr(module, attr)} ({module.name})"
                        )
                if partner.joint_with is not None or partner.cross_attention or module.cross_attention:
                    raise InvalidInputError(f"{where}: a joint pair cannot chain or cross-attend")
                if self._index.get(partner.name) is not None:
                    for source in self.inputs_of(module):
                        if self._index[source] >= position - 1:
                            raise InvalidInputError(
                                f"{where}.inputs must come before its joint partner {partner.name!r}, "
                                f"got {source!r}"
                            )

    # ------------------------------------------------------------ structure
    def module(self, name: str) -> Module:
        """The module called ``name``."""
        if name not in self._index:
            raise InvalidInputError(f"model {self.name!r} has no module {name!r}; modules: {', '.join(self._index)}")
        return self.modules[self._index[name]]

    def inputs_of(self, module: Module) -> tuple[str, ...]:
        """Names of the modules whose outputs ``module`` reads (its ``inputs``, resolved)."""
        if module.inputs is not None:
            return tuple(module.inputs)
        position = self._index[module.name]
        if position == 0:
            return ()
        previous = self.modules[position - 1]
        if isinstance(module, TransformerStack) and module.joint_with == previous.name:
            return self.inputs_of(previous) if position >= 2 else ()
        return (previous.name,)

    def trains(self, name: str) -> bool:
        """Whether module ``name`` has trainable parameters."""
        module = self.module(name)
        if isinstance(module, LMHead) and module.tied_to:
            return not module.frozen  # its gradient goes to the shared table
        return not module.frozen and self._own_parameters(module) > 0

    def needs_grad(self, name: str) -> bool:
        """Whether a gradient must reach module ``name``'s output (it or something upstream trains)."""
        module = self.module(name)
        if self.trains(name):
            return True
        upstream = list(self.inputs_of(module))
        if isinstance(module, TransformerStack):
            if module.cross_attention is not None:
                upstream.append(module.cross_attention.source)
            if module.joint_with is not None:
                upstream.append(module.joint_with)
        return any(self.needs_grad(source) for source in upstream)

    # ----------------------------------------------------------- parameters
    def _own_parameters(self, module: Module) -> float:
        shape = _Shape(1, "none", 1, False)
        if isinstance(module, LMHead):
            return 0.0 if module.tied_to else float(module.vocab_size * module.hidden_size)
        return sum(self._parts(module, shape, index)[0].params for index in range(_depth(module)))

    def num_parameters(self, module: str | None = None) -> int:
        """Parameter count of the whole model, or of one module (a tied head counts 0)."""
        if module is not None:
            return int(round(self._own_parameters(self.module(module))))
        return int(round(sum(self._own_parameters(m) for m in self.modules)))

    def module_parameters(self) -> dict[str, int]:
        """Parameters per module, in order."""
        return {m.name: self.num_parameters(m.name) for m in self.modules}

    def trainable_parameters(self) -> int:
        """Parameters with gradients and optimizer state (frozen modules excluded)."""
        return sum(count for name, count in self.module_parameters().items() if self.trains(name))

    def module_tokens(self) -> dict[str, int]:
        """Tokens per example each module processes (a vision encoder: its patch tokens)."""
        out: dict[str, int] = {}
        for m in self.modules:
            out[m.name] = m.tokens if hasattr(m, "tokens") and not isinstance(m, Projector) else m.output_shape()[0]
        return out

    def with_frozen(self, frozen: Mapping[str, bool]) -> ModelSpec:
        """A copy with some modules' ``frozen`` flags replaced (``{"vision": True}``)."""
        for name in frozen:
            self.module(name)
        modules = tuple(replace(m, frozen=bool(frozen[m.name])) if m.name in frozen else m for m in self.modules)
        return ModelSpec(self.name, modules, self.description)

    # ---------------------------------------------------------------- costs
    def _parts(self, module: Module, shape: _Shape, index: int) -> list[_Part]:
        """Costs of layer ``index`` of ``module`` (a joint stack's partner part excluded)."""
        if isinstance(module, VisionEncoder):
            if index == 0:
                return [_patch_part(module, shape)]
            return [_block_part(module.blocks(), shape, layer_index=index - 1, kv_tokens=module.blocks().seq_length,
                                kv_width=module.hidden_size, extra_keys=0)]
        if isinstance(module, TransformerStack):
            cross = module.cross_attention
            if cross is not None and index % cross.every == 0:
                source = self.module(cross.source)
                tokens, width = source.output_shape()
                width = cross.kv_hidden_size or width
                return [_block_part(module, shape, layer_index=index, kv_tokens=tokens, kv_width=width, extra_keys=0)]
            extra = 0
            if module.joint_with is not None:
                extra = self.module(module.joint_with).seq_length  # type: ignore[union-attr]
            return [_block_part(module, shape, layer_index=index, kv_tokens=module.seq_length,
                                kv_width=module.hidden_size, extra_keys=extra)]
        if isinstance(module, Projector):
            return [_projector_part(module, shape)]
        if isinstance(module, Embedding):
            return [_embedding_part(module, shape)]
        return [_head_part(module, shape)]

    def layer_costs(
        self,
        micro_batch_size: int,
        *,
        recompute: Recompute = "selective",
        tensor_parallel: int = 1,
        sequence_parallel: bool = False,
    ) -> list[LayerCost]:
        """Per pipeline layer F, B, W FLOPs and bytes for one microbatch.

        Args:
            micro_batch_size: examples per microbatch ``b`` (>= 1).
            recompute: ``"none"``, ``"selective"`` (default: the attention core is
                recomputed, as flash attention does) or ``"full"``.
            tensor_parallel: tensor-parallel degree ``t`` (FLOPs and params per rank).
            sequence_parallel: with ``t > 1``, norms and dropouts are split too.

        Returns:
            One :class:`LayerCost` per pipeline layer, in order. A joint pair
            (``joint_with``) gives one layer per depth holding both stacks.
        """
        shape = _check_shape(micro_batch_size, recompute, tensor_parallel, sequence_parallel)
        joint = {m.joint_with: m for m in self.modules if isinstance(m, TransformerStack) and m.joint_with}
        rows: list[tuple[str, tuple[str, ...], dict[str, float], float, float]] = []
        owners: list[tuple[str, ...]] = []
        for module in self.modules:
            if isinstance(module, TransformerStack) and module.joint_with:
                continue
            partner = joint.get(module.name)
            for index in range(_depth(module)):
                names = (module.name,) if partner is None else (module.name, partner.name)
                totals = {"forward": 0.0, "input_grad": 0.0, "weight_grad": 0.0, "activation": 0.0, "stash": 0.0}
                params = trainable = 0.0
                for member in ((module,) if partner is None else (module, partner)):
                    backward = self.needs_grad(member.name) or (
                        member is partner and self.needs_grad(module.name)
                    )
                    for part in self._parts(member, shape, index):
                        costs = _apply_training(part, trains=self.trains(member.name),
                                                needs_backward=backward, recompute=shape.recompute)
                        for key in totals:
                            totals[key] += costs[key]
                        params += part.params
                        trainable += part.params if self.trains(member.name) else 0.0
                label = "+".join(names)
                rows.append((f"{label}.{index}", names, totals, params, trainable))
                owners.append(names)
        sends = self._send_bytes(shape, owners)
        return [
            LayerCost(name, names, c["forward"], c["input_grad"], c["weight_grad"], p, tp,
                      c["activation"], c["stash"], send)
            for (name, names, c, p, tp), send in zip(rows, sends)
        ]

    def _output_bytes(self, module: Module, shape: _Shape) -> float:
        tokens, width = module.output_shape()
        return float(shape.micro_batch_size * module.repeats * tokens * width * ACTIVATION_BYTES)

    def _hidden_bytes(self, module: Module, shape: _Shape) -> float:
        if isinstance(module, VisionEncoder):
            blocks = module.blocks()
            return float(shape.micro_batch_size * module.repeats * blocks.tokens * module.hidden_size * ACTIVATION_BYTES)
        if isinstance(module, TransformerStack):
            return float(shape.micro_batch_size * module.repeats * module.tokens * module.hidden_size * ACTIVATION_BYTES)
        return self._output_bytes(module, shape)

    def _send_bytes(self, shape: _Shape, owners: list[tuple[str, ...]]) -> list[float]:
        """Bytes live across the cut after each pipeline layer (module doc, 'Send bytes')."""
        first: dict[str, int] = {}
        last: dict[str, int] = {}
        for position, names in enumerate(owners):
            for name in names:
                first.setdefault(name, position)
                last[name] = position
        last_read: dict[str, int] = {}
        for module in self.modules:
            for source in self.inputs_of(module):
                last_read[source] = max(last_read.get(source, -1), first[module.name])
            if isinstance(module, TransformerStack) and module.cross_attention is not None:
                cross = module.cross_attention
                reads = [first[module.name] + i for i in range(module.num_layers) if i % cross.every == 0]
                last_read[cross.source] = max(last_read.get(cross.source, -1), max(reads))
        sends = []
        for cut in range(len(owners)):
            live = 0.0
            for module in self.modules:
                name = module.name
                if first[name] <= cut < last[name]:
                    live += self._hidden_bytes(module, shape)
                elif last[name] <= cut < last_read.get(name, -1):
                    live += self._output_bytes(module, shape)
            sends.append(live / (shape.tensor_parallel if shape.sequence_parallel else 1))
        sends[-1] = 0.0
        return sends

    def flops_per_sample(self, *, recompute: Recompute = "none") -> dict[str, float]:
        """Training FLOPs (F + B + W) per example by module (a joint pair split by member)."""
        shape = _check_shape(1, recompute, 1, False)
        out: dict[str, float] = {}
        for module in self.modules:
            total = 0.0
            backward = self.needs_grad(module.name) or (
                isinstance(module, TransformerStack) and module.joint_with is not None
                and self.needs_grad(module.joint_with)
            )
            for index in range(_depth(module)):
                for part in self._parts(module, shape, index):
                    costs = _apply_training(part, trains=self.trains(module.name), needs_backward=backward,
                                            recompute=recompute)
                    total += costs["forward"] + costs["input_grad"] + costs["weight_grad"]
            out[module.name] = total
        return out

    def to_layer_profile(
        self,
        hardware: Any,
        micro_batch_size: int,
        *,
        recompute: Recompute = "selective",
        tensor_parallel: int = 1,
        sequence_parallel: bool = False,
    ) -> Any:
        """The :class:`~pipeplan.layers.LayerProfile` of this model on ``hardware``.

        Times are milliseconds per microbatch: ``1e3 · FLOPs / hardware.achievable_flops``
        (see :class:`pipeplan.hardware.Device`). ``backward`` is B + W time,
        ``weight`` the W part; ``params`` are per tensor-parallel rank;
        ``trainable_params``, ``weight_stash_bytes`` and ``send_bytes`` carry the
        frozen, split-backward and boundary information.

        Args:
            hardware: a :class:`~pipeplan.hardware.Device` (or anything with a
                positive ``achievable_flops`` in FLOP/s).
            micro_batch_size, recompute, tensor_parallel, sequence_parallel: as in
                :meth:`layer_costs`.
        """
        from ..layers import LayerProfile

        rate = positive_float("achievable_flops", getattr(hardware, "achievable_flops", None), unit="FLOP/s")
        layers = self.layer_costs(micro_batch_size, recompute=recompute, tensor_parallel=tensor_parallel,
                                  sequence_parallel=sequence_parallel)
        to_ms = 1e3 / rate
        return LayerProfile(
            [layer.forward_flops * to_ms for layer in layers],
            [layer.backward_flops * to_ms for layer in layers],
            [layer.weight_grad_flops * to_ms for layer in layers],
            activation_bytes=[layer.activation_bytes for layer in layers],
            params=[layer.params for layer in layers],
            names=[layer.name for layer in layers],
            weight_stash_bytes=[layer.weight_stash_bytes for layer in layers],
            send_bytes=[layer.send_bytes for layer in layers],
            trainable_params=[layer.trainable_params for layer in layers],
        )

    # ------------------------------------------------------------------ I/O
    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (the schema :meth:`from_dict` reads)."""
        modules = []
        for module in self.modules:
            record: dict[str, Any] = {"kind": module.kind}
            for item in fields(module):  # type: ignore[arg-type]
                value = getattr(module, item.name)
                default = item.default
                if value == default:
                    continue
                if isinstance(value, CrossAttention):
                    value = {k.name: getattr(value, k.name) for k in fields(value)}
                elif isinstance(value, tuple) and value and isinstance(value[0], Linear):
                    value = [[layer.in_features, layer.out_features] + ([layer.tokens] if layer.tokens else [])
                             for layer in value]
                elif isinstance(value, tuple):
                    value = list(value)
                record[item.name] = value
            modules.append(record)
        return {"name": self.name, "description": self.description, "modules": modules}

    @classmethod
    def from_dict(cls, payload: Mapping[str, Any]) -> ModelSpec:
        """Build a spec from :meth:`to_dict`'s schema (see docs/presets.md).

        Raises:
            InvalidInputError: an unknown ``kind`` or key, a missing field, a bad value.
        """
        if not isinstance(payload, Mapping) or "modules" not in payload:
            raise InvalidInputError("a model spec must be an object with 'name' and 'modules'")
        unknown = set(payload) - {"name", "description", "modules"}
        if unknown:
            raise InvalidInputError(f"a model spec has unknown keys {sorted(unknown)}; allowed: name, description, modules")
        raw = payload["modules"]
        if not isinstance(raw, Sequence) or isinstance(raw, (str, bytes)) or not raw:
            raise InvalidInputError("modules must be a non-empty list of objects")
        modules = [_module_from_dict(record, position) for position, record in enumerate(raw)]
        return cls(str(payload.get("name", "model")), tuple(modules), str(payload.get("description", "")))

    @classmethod
    def from_file(cls, path: str | Path) -> ModelSpec:
        """Load a ``.json`` spec (or ``.yaml`` / ``.yml`` when PyYAML is installed).

        Raises:
            InvalidInputError: a missing file, an unknown suffix, unparsable text, or
                a bad spec (see :meth:`from_dict`).
        """
        file = Path(path)
        if not file.is_file():
            raise InvalidInputError(f"spec file {str(file)!r} does not exist")
        suffix = file.suffix.lower()
        text = file.read_text()
        if suffix == ".json":
            try:
                payload = json.loads(text)
            except json.JSONDecodeError as error:
                raise InvalidInputError(f"spec file {str(file)!r} is not valid JSON: {error}") from None
        elif suffix in (".yaml", ".yml"):
            try:
                import yaml  # type: ignore[import-untyped]
            except ImportError:
                raise InvalidInputError(
                    f"spec file {str(file)!r} is YAML, which needs PyYAML (pip install pyyaml); or use .json"
                ) from None
            try:
                payload = yaml.safe_load(text)
            except yaml.YAMLError as error:
                raise InvalidInputError(f"spec file {str(file)!r} is not valid YAML: {error}") from None
        else:
            raise InvalidInputError(f"spec file must end in .json, .yaml or .yml, got {str(file)!r}")
        try:
            return cls.from_dict(payload)
        except TypeError as error:
            raise InvalidInputError(f"spec file {str(file)!r}: {error}") from None


def _depth(module: Module) -> int:
    if isinstance(module, VisionEncoder):
        return 1 + module.num_layers
    if isinstance(module, TransformerStack):
        return module.num_layers
    return 1


def _module_from_dict(record: Any, position: int) -> Module:
    where = f"modules[{position}]"
    if not isinstance(record, Mapping):
        raise InvalidInputError(f"{where} must be an object, got {record!r}")
    kind = record.get("kind")
    if kind not in _KINDS:
        raise InvalidInputError(f"{where}.kind must be one of {', '.join(_KINDS)}, got {kind!r}")
    cls = _KINDS[kind]
    names = {item.name for item in fields(cls)}
    unknown = set(record) - names - {"kind"}
    if unknown:
        raise InvalidInputError(f"{where} ({kind}) has unknown keys {sorted(unknown)}; allowed: {', '.join(sorted(names))}")
    required = [item.name for item in fields(cls)
                if item.default is MISSING and item.default_factory is MISSING and item.name not in record]
    if required:
        raise InvalidInputError(f"{where} ({kind}) lacks {', '.join(required)}")
    values = {key: value for key, value in record.items() if key != "kind"}
    if "cross_attention" in values and values["cross_attention"] is not None:
        cross = values["cross_attention"]
        if not isinstance(cross, Mapping) or "source" not in cross:
            raise InvalidInputError(f"{where}.cross_attention must be an object with a 'source'")
        values["cross_attention"] = CrossAttention(**{k: cross[k] for k in cross if k in ("source", "every", "kv_hidden_size")})
    if "linears" in values:
        try:
            values["linears"] = tuple(Linear(*[int(x) for x in item]) for item in values["linears"])
        except (TypeError, ValueError):
            raise InvalidInputError(f"{where}.linears must be a list of [in_features, out_features(, tokens)]") from None
    for key in ("inputs", "adaptive_norm"):
        if key in values and values[key] is not None:
            if isinstance(values[key], (str, bytes)) or not isinstance(values[key], Sequence):
                raise InvalidInputError(f"{where}.{key} must be a list, got {values[key]!r}")
            values[key] = tuple(values[key])
    return cls(**values)  # type: ignore[no-any-return]


_INT_FIELDS = ("num_layers", "hidden_size", "num_heads", "seq_length", "ffn_hidden_size", "image_size",
               "patch_size", "cameras", "frames", "channels", "vocab_size", "tokens", "repeats", "sequences")
_OPTIONAL_INT_FIELDS = ("num_kv_heads", "head_dim", "output_tokens", "output_width", "position_tokens")
_NON_NEGATIVE_FIELDS = ("extra_tokens", "norm_params", "extra_params", "position_tokens")


def _check_module(module: Any, position: int) -> None:
    if not isinstance(module, tuple(_KINDS.values())):
        raise InvalidInputError(f"modules[{position}] must be a module (one of {', '.join(_KINDS)}), got {module!r}")
    label = getattr(module, "name", None)
    if not isinstance(label, str) or not label:
        raise InvalidInputError(f"modules[{position}].name must be a non-empty string, got {label!r}")
    where = f"modules[{position}] ({label})"
    for key in _INT_FIELDS + _OPTIONAL_INT_FIELDS + _NON_NEGATIVE_FIELDS:
        if not hasattr(module, key):
            continue
        value = getattr(module, key)
        if value is None and key in _OPTIONAL_INT_FIELDS:
            continue
        minimum = 0 if key in _NON_NEGATIVE_FIELDS else 1
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise InvalidInputError(f"{where}.{key} must be an integer >= {minimum}, got {value!r}")
    if hasattr(module, "norm") and module.norm not in _NORM_PARAMS:
        raise InvalidInputError(f"{where}.norm must be one of {', '.join(_NORM_PARAMS)}, got {module.norm!r}")
    if isinstance(module, (TransformerStack, VisionEncoder)):
        heads = module.num_heads
        head_dim = getattr(module, "head_dim", None)
        if head_dim is None and module.hidden_size % heads:
            raise InvalidInputError(
                f"{where}.num_heads = {heads} must divide hidden_size = {module.hidden_size} "
                "(or give head_dim)"
            )
        kv = getattr(module, "num_kv_heads", None)
        if kv is not None and heads % kv:
            raise InvalidInputError(f"{where}.num_kv_heads = {kv} must divide num_heads = {heads}")
    if isinstance(module, VisionEncoder) and module.image_size % module.patch_size:
        raise InvalidInputError(
            f"{where}.image_size = {module.image_size} must be a multiple of patch_size = {module.patch_size}"
        )
    if isinstance(module, TransformerStack):
        ada = module.adaptive_norm
        if len(ada) != 2 or any(isinstance(k, bool) or not isinstance(k, int) or k < 0 for k in ada):
            raise InvalidInputError(f"{where}.adaptive_norm must be two integers >= 0, got {ada!r}")
        cross = module.cross_attention
        if cross is not None:
            if isinstance(cross.every, bool) or not isinstance(cross.every, int) or cross.every < 1:
                raise InvalidInputError(f"{where}.cross_attention.every must be an integer >= 1, got {cross.every!r}")
            kv_width = cross.kv_hidden_size
            if kv_width is not None and (isinstance(kv_width, bool) or not isinstance(kv_width, int) or kv_width < 1):
                raise InvalidInputError(f"{where}.cross_attention.kv_hidden_size must be an integer >= 1, got {kv_width!r}")
    if isinstance(module, Projector):
        if not module.linears:
            raise InvalidInputError(f"{where}.linears must list at least one linear layer")
        for index, layer in enumerate(module.linears):
            for key in ("in_features", "out_features"):
                value = getattr(layer, key)
                if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                    raise InvalidInputError(f"{where}.linears[{index}].{key} must be an integer >= 1, got {value!r}")
    for key in ("frozen",):
        if not isinstance(getattr(module, key), bool):
            raise InvalidInputError(f"{where}.{key} must be true or false, got {getattr(module, key)!r}")


def _check_shape(micro_batch_size: object, recompute: object, tensor_parallel: object,
                 sequence_parallel: object) -> _Shape:
    from .._validation import positive_int

    if recompute not in ("none", "selective", "full"):
        raise InvalidInputError(f"recompute must be 'none', 'selective' or 'full', got {recompute!r}")
    return _Shape(positive_int("micro_batch_size", micro_batch_size), str(recompute),
                  positive_int("tensor_parallel", tensor_parallel), bool(sequence_parallel))

