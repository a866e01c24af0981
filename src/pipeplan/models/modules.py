"""The module kinds a :class:`~pipeplan.models.spec.ModelSpec` is made of (shapes only).

    from pipeplan.models.modules import TransformerStack, VisionEncoder
    vision = VisionEncoder(name="vision", image_size=224, patch_size=14, num_layers=27, hidden_size=1152,
                           num_heads=16, ffn_hidden_size=4304, cameras=3)
    vision.tokens    # 768

Frozen dataclasses with keyword fields; validation happens when a ``ModelSpec``
is built. See :mod:`pipeplan.models.layer_costs` for what each field costs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Union

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
        causal: each token attends only to earlier ones (a decoder LM): a flash kernel
            skips half the score blocks (time only; the FLOP convention counts all).
        attention: ``"eager"`` (default: the scores are materialised, as in
            Megatron-LM's local core attention and Korthikanti et al.'s activation
            counts; ``"selective"`` recompute recomputes them) or ``"flash"``
            (FlashAttention: the scores never reach memory, with or without
            recompute, and the backward kernel recomputes them).
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
        fqn: the module paths of one block in the reference code, each a template with
            ``{i}`` for the block index (``("model.layers.{i}",)``; a one-block stack may give a
            plain path); ``None``: not recorded
            (:mod:`pipeplan.engines._names` generates ``name.i``).
        fqn_first, fqn_last: paths (no ``{i}``) that belong with the first / last block's
            pipeline layer (a final norm: ``("model.norm",)``).
        role: what the blocks are to Megatron-LM (:data:`Role`); needs ``fqn``.
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
    causal: bool = False
    attention: Attention = "eager"
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
    fqn: tuple[str, ...] | None = None
    fqn_first: tuple[str, ...] | None = None
    fqn_last: tuple[str, ...] | None = None
    role: Role | None = None

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
        fqn, fqn_first, fqn_last, role: the reference code's module paths as in
            :class:`TransformerStack`: ``fqn`` templates name block ``{i}`` (pipeline layer
            ``1 + i``), ``fqn_first`` the patch-embedding layer, ``fqn_last`` goes with the last block.
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
    attention: Attention = "eager"
    map_head: bool = False
    final_norm: bool = True
    inputs: tuple[str, ...] | None = ()
    repeats: int = 1
    frozen: bool = False
    fqn: tuple[str, ...] | None = None
    fqn_first: tuple[str, ...] | None = None
    fqn_last: tuple[str, ...] | None = None
    role: Role | None = None

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
        fqn, role: the reference code's module paths of the layer and its Megatron role
            (as in :class:`TransformerStack`, without ``{i}``).
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
    fqn: tuple[str, ...] | None = None
    role: Role | None = None

    kind = "projector"

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
    ``fqn`` and ``role``: the reference code's module paths and Megatron role (as in
    :class:`TransformerStack`, without ``{i}``).
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
    fqn: tuple[str, ...] | None = None
    role: Role | None = None

    kind = "embedding"

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
    the loss (4 bytes each). ``fqn`` and ``role`` as in :class:`Embedding`.
    """

    name: str
    vocab_size: int
    hidden_size: int
    tokens: int
    tied_to: str | None = None
    inputs: tuple[str, ...] | None = None
    repeats: int = 1
    frozen: bool = False
    fqn: tuple[str, ...] | None = None
    role: Role | None = None

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
