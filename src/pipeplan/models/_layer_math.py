"""FLOPs, parameters and stored bytes of one layer of each module kind (private).

    part = block_part(stack, Shape(4, "selective", 1, False), layer_index=0, kv_tokens=816,
                       kv_width=2048, extra_keys=0, cross=False)
    costs = apply_training(part, trains=True, needs_backward=True, recompute="selective")
    layer_part(spec.modules[0], Shape.checked(1, "none", 1, False), 0, spec.module).params

The conventions are stated in :mod:`pipeplan.models.layer_costs`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .._validation import positive_int
from ..plan import check_recompute
from .modules import (
    ACTIVATION_BYTES,
    NORM_PARAMS,
    Embedding,
    LMHead,
    Module,
    Projector,
    TransformerStack,
    VisionEncoder,
    runs_per_example,
)

__all__ = ["Part", "Shape", "apply_training", "block_matmuls", "block_part", "block_params", "embedding_part", "head_part",
           "layer_part", "patch_part", "projector_part"]

_MASK_BYTES = 1
_LSE_BYTES = 4  # the flash kernel's log-sum-exp, fp32 per query and head
_TOKEN_ID_BYTES = 8


@dataclass
class Part:
    """Costs of one module's share of a layer before frozen rules are applied."""

    forward: float = 0.0
    linear: float = 0.0  # matrix products with a weight: their dX and dW each cost as much
    core: float = 0.0  # activation-activation products (attention scores, values)
    input_is_data: bool = False  # no input gradient is ever needed (pixels, token ids)
    params: float = 0.0
    act_b: float = 0.0  # stored for B (and W)
    act_w: float = 0.0  # stored for W only (inputs of weight GEMMs)
    grad_w: float = 0.0  # made by B, kept for W: the output gradients of the weight GEMMs
    act_core: float = 0.0  # attention probabilities etc. (dropped by selective recompute)
    layer_input: float = 0.0  # what full recompute keeps
    op_saved: float | None = None  # what torchtitan's per-op recompute keeps (a block's; None: not a block)
    op_flops: float = 0.0  # the forward FLOPs per-op recompute runs again in the backward
    # the column-parallel GEMMs' inputs over the whole sequence (a block's QKV and first MLP inputs, in ``act_w``
    # as ``1/t`` of it under sequence parallelism): what DTensor's ColwiseParallel saves gathered instead
    gathered: float = 0.0


@dataclass(frozen=True)
class Shape:
    """Validated options shared by every layer's cost computation."""

    micro_batch_size: int
    recompute: str
    tensor_parallel: int
    sequence_parallel: bool

    @classmethod
    def checked(cls, micro_batch_size: object, recompute: object, tensor_parallel: object,
                sequence_parallel: object) -> Shape:
        """The options, validated.

        Raises:
            InvalidInputError: a recompute mode other than ``"none"``, ``"selective"``,
                ``"full"``, ``"op"``, ``"every:N"``, or a micro-batch size or tensor-parallel
                degree below 1.
        """
        check_recompute(recompute)
        return cls(positive_int("micro_batch_size", micro_batch_size), str(recompute),
                   positive_int("tensor_parallel", tensor_parallel), bool(sequence_parallel))


def layer_part(module: Module, shape: Shape, index: int, lookup: Callable[[str], Module]) -> Part:
    """Layer ``index`` of ``module`` (``lookup`` finds a cross-attention source or joint partner).

    A joint stack's part leaves out its partner's; the pair's layer adds both.
    """
    if isinstance(module, VisionEncoder):
        if index == 0:
            return patch_part(module, shape)
        return block_part(module.blocks(), shape, layer_index=index - 1, kv_tokens=module.blocks().seq_length,
                          kv_width=module.hidden_size, extra_keys=0, cross=False)
    if isinstance(module, TransformerStack):
        cross = module.cross_attention
        if cross is not None and index % cross.every == 0:
            tokens, width = lookup(cross.source).output_shape()
            width = cross.kv_hidden_size or width
            return block_part(module, shape, layer_index=index, kv_tokens=tokens, kv_width=width, extra_keys=0,
                              cross=True)
        extra = 0
        if module.joint_with is not None:
            extra = lookup(module.joint_with).seq_length  # type: ignore[union-attr]
        return block_part(module, shape, layer_index=index, kv_tokens=module.seq_length,
                          kv_width=module.hidden_size, extra_keys=extra, cross=False)
    if isinstance(module, Projector):
        return projector_part(module, shape)
    if isinstance(module, Embedding):
        return embedding_part(module, shape)
    return head_part(module, shape)


def block_part(
    stack: TransformerStack,
    shape: Shape,
    *,
    layer_index: int,
    kv_tokens: int,
    kv_width: int,
    extra_keys: int,
    cross: bool,
) -> Part:
    """One transformer block: FLOPs per microbatch and stored bytes (Korthikanti terms).

    ``cross``: the keys and values are the ``kv_tokens`` of a cross-attention source,
    projected once per example (``repeats`` times), not once per noise sample.
    """
    t = shape.tensor_parallel
    rep_div = t if shape.sequence_parallel else 1
    n = shape.micro_batch_size * stack.sequences * runs_per_example(stack)  # sequences per microbatch
    # rows of the K/V projection: the context's once per example (cross), else the stack's own tokens
    kv_rows = shape.micro_batch_size * stack.sequences * stack.repeats * kv_tokens if cross else n * kv_tokens
    s, h, f = stack.seq_length, stack.hidden_size, stack.ffn_hidden_size
    qd = stack.num_heads * stack.dim_per_head
    kvd = stack.kv_heads * stack.dim_per_head
    keys = kv_tokens + extra_keys  # keys each query attends to
    a = stack.num_heads
    two = ACTIVATION_BYTES
    mlp_mats = 3 if stack.gated_mlp else 2
    linear = 2.0 * (n * (s * h * qd + s * qd * h + mlp_mats * s * h * f) + kv_rows * kv_width * 2 * kvd)
    core = 2.0 * n * 2 * s * keys * qd
    ada = 2.0 * shape.micro_batch_size * runs_per_example(stack) * h * h * sum(stack.adaptive_norm)
    linear += ada
    mask = _MASK_BYTES if stack.dropout else 0
    # Stored for B: the norm inputs, Q, K, V, the MLP's nonlinearity inputs, dropout masks.
    norms = 4 if stack.post_norms else 2  # Gemma 2's post-attention and post-MLP norms store their inputs too
    act_b_rep = n * s * (norms * two * h + 2 * mask * h)
    act_b_tp = n * two * s * qd + kv_rows * two * 2 * kvd
    if stack.qk_norm:  # the queries and keys before their per-head norms
        act_b_tp += two * (n * s * qd + kv_rows * kvd)
    act_b_tp += n * s * two * (2 * f if stack.gated_mlp else f)
    # Stored for W only: the inputs of the QKV, output, first and last MLP GEMMs.
    # (A cross layer's K/V GEMMs read the source features, which the stage holds once as a
    # received tensor; they are not counted per layer.)
    act_w_rep = n * s * two * 2 * h
    act_w_tp = n * s * two * (qd + f)
    # Made by B for W: the output gradients of the QKV (or Q and K/V), output, fc1 and fc2 GEMMs.
    grad_w_rep = n * s * two * 2 * h
    fc1_out = 2 * f if stack.gated_mlp else f
    grad_w_tp = n * two * (s * qd + s * fc1_out) + kv_rows * two * 2 * kvd
    # materialised scores (eager attention); a flash kernel never stores them
    core_bytes = 0 if stack.attention == "flash" else n * a * s * keys * (two + (mask + two if stack.dropout else 0))
    params = block_params(stack, layer_index=layer_index, kv_width=kv_width)
    op_saved, op_flops = _op_policy(stack, shape, kv_tokens=kv_tokens, kv_width=kv_width, core=core / t)
    return Part(
        forward=(linear + core) / t,
        linear=linear / t,
        core=core / t,
        params=params / t,
        act_b=act_b_rep / rep_div + act_b_tp / t,
        act_w=act_w_rep / rep_div + act_w_tp / t,
        grad_w=grad_w_rep / rep_div + grad_w_tp / t,
        act_core=core_bytes / t,
        layer_input=n * s * two * h / rep_div,
        op_saved=op_saved,
        op_flops=op_flops,
        gathered=act_w_rep,
    )


def block_matmuls(stack: TransformerStack, shape: Shape, *, kv_tokens: int,
                  kv_width: int) -> list[tuple[str, float, float, float]]:
    """A block's weight matmuls in the order its forward calls ``aten.mm``: ``(name, rows, n_in, n_out)`` per rank.

    torchtitan's Llama block (torchtitan/models/llama/model.py at 0413364) calls ``wq``, ``wk``,
    ``wv`` (separate linears), ``wo``, then ``w1``, ``w3`` (the gate and up projections of the
    gated MLP) and ``w2``; adaptive-norm modulation GEMMs come first and cross attention's
    ``k``, ``v`` read the source's tokens. Per tensor-parallel rank: the column-parallel outputs
    (q, k, v, w1, w3) and the row-parallel inputs (wo, w2) are divided by ``t``; a row-parallel
    output is the full width (its partial sum, before the reduction).
    """
    t = shape.tensor_parallel
    n = shape.micro_batch_size * stack.sequences * stack.repeats
    s, h, f = stack.seq_length, stack.hidden_size, stack.ffn_hidden_size
    qd = stack.num_heads * stack.dim_per_head / t
    kvd = stack.kv_heads * stack.dim_per_head / t
    tokens = float(n * s)
    out = [(f"ada{which + 1}", float(shape.micro_batch_size * stack.repeats), float(h), float(k * h))
           for which, k in enumerate(stack.adaptive_norm) if k]
    kv_rows, kv_in = float(n * kv_tokens), float(kv_width)
    out += [("wq", tokens, float(h), qd), ("wk", kv_rows, kv_in, kvd), ("wv", kv_rows, kv_in, kvd),
            ("wo", tokens, qd, float(h))]
    if stack.gated_mlp:
        out += [("w1", tokens, float(h), f / t), ("w3", tokens, float(h), f / t)]
    else:
        out.append(("w1", tokens, float(h), f / t))
    out.append(("w2", tokens, f / t, float(h)))
    return out


def _op_policy(stack: TransformerStack, shape: Shape, *, kv_tokens: int, kv_width: int,
               core: float) -> tuple[float, float]:
    """Bytes torchtitan's per-op recompute keeps of one block, and the forward FLOPs it runs again.

    torchtitan/parallelisms/parallelize_llama.py at 0413364 (``checkpoint_wrapper``,
    ``selective_ac_option = "op"``): the block is checkpointed with a policy that saves the
    outputs of ``aten.mm`` (except every second one: the 2nd, 4th, ... of the block's forward),
    of the flash / memory-efficient SDPA kernels and of ``reduce_scatter``; everything else (the
    norms, RoPE, SiLU, the products and adds, the unsaved matmuls) runs again before the
    block's backward. Kept: the block's input, the saved matmuls' outputs and, with a flash
    kernel, its output and log-sum-exp (fp32 per query and head); with materialised (eager)
    attention the batched matmuls are not ``aten.mm`` and the core runs again too.
    """
    t = shape.tensor_parallel
    rep_div = t if shape.sequence_parallel else 1
    n = shape.micro_batch_size * stack.sequences * stack.repeats
    s = stack.seq_length
    two = ACTIVATION_BYTES
    saved = n * s * two * stack.hidden_size / rep_div
    flops = 0.0
    for position, (_, rows, n_in, n_out) in enumerate(block_matmuls(stack, shape, kv_tokens=kv_tokens,
                                                                     kv_width=kv_width)):
        if position % 2 == 0:  # the 1st, 3rd, ... matmul: its output is saved
            saved += rows * n_out * two
        else:
            flops += 2.0 * rows * n_in * n_out
    if stack.attention == "flash":
        saved += n * s * (stack.num_heads * stack.dim_per_head / t * two + stack.num_heads / t * _LSE_BYTES)
    else:
        flops += core
    return saved, flops


def block_params(stack: TransformerStack, *, layer_index: int, kv_width: int) -> float:
    h, f = stack.hidden_size, stack.ffn_hidden_size
    qd = stack.num_heads * stack.dim_per_head
    kvd = stack.kv_heads * stack.dim_per_head
    mlp_mats = 3 if stack.gated_mlp else 2
    weights = h * qd + 2 * kv_width * kvd + qd * h + mlp_mats * h * f
    biases = (qd + 2 * kvd + h + (2 if stack.gated_mlp else 1) * f + h) if stack.bias else 0
    if stack.qkv_bias and not stack.bias:
        biases = qd + 2 * kvd
    norms = sum(NORM_PARAMS[stack.norm] * h for k in stack.adaptive_norm if k == 0)
    norms += 2 * NORM_PARAMS[stack.norm] * h if stack.post_norms else 0
    norms += 2 * NORM_PARAMS[stack.norm] * stack.dim_per_head if stack.qk_norm else 0
    ada = sum(k * h * h + k * h for k in stack.adaptive_norm if k)
    scale = 2 * h if stack.layer_scale else 0
    last = layer_index == stack.num_layers - 1
    k = stack.final_norm_adaptive
    final = (k * h * h + k * h if k else NORM_PARAMS[stack.norm] * h) if stack.final_norm and last else 0
    return float(weights + biases + norms + ada + scale + final)


def patch_part(encoder: VisionEncoder, shape: Shape) -> Part:
    n = shape.micro_batch_size * encoder.repeats
    pixels = encoder.channels * encoder.patch_size**2
    h = encoder.hidden_size
    tokens = encoder.tokens
    linear = 2.0 * n * tokens * pixels * h
    positions = encoder.patches_per_image if encoder.position_tokens is None else encoder.position_tokens
    params = pixels * h + h + positions * h + encoder.extra_tokens * h + encoder.extra_params
    if encoder.map_head:
        # SigLIP's attention-pooling head: a probe token, one attention, a norm and an MLP.
        f = encoder.ffn_hidden_size
        params += h + (4 * h * h + 4 * h) + 2 * h + (2 * h * f + f + h)
    t = shape.tensor_parallel
    return Part(forward=linear / t, linear=linear / t, input_is_data=True, params=params / t,
                 act_w=n * tokens * pixels * ACTIVATION_BYTES / t, grad_w=n * tokens * h * ACTIVATION_BYTES / t,
                 layer_input=n * tokens * pixels * ACTIVATION_BYTES / t)


def projector_part(projector: Projector, shape: Shape) -> Part:
    n = shape.micro_batch_size * runs_per_example(projector)
    linear = 0.0
    params = float(projector.norm_params + projector.extra_params)
    act_w = act_b = grad_w = 0.0
    for index, layer in enumerate(projector.linears):
        tokens = layer.tokens or projector.tokens
        linear += 2.0 * n * tokens * layer.in_features * layer.out_features
        params += layer.in_features * layer.out_features + (layer.out_features if projector.bias else 0)
        act_w += n * tokens * layer.in_features * ACTIVATION_BYTES
        grad_w += n * tokens * layer.out_features * ACTIVATION_BYTES
        if projector.activation and index + 1 < len(projector.linears):
            act_b += n * tokens * layer.out_features * ACTIVATION_BYTES
    first = projector.linears[0]
    t = shape.tensor_parallel
    return Part(forward=linear / t, linear=linear / t, params=params / t, act_b=act_b / t, act_w=act_w / t,
                 grad_w=grad_w / t, layer_input=n * (first.tokens or projector.tokens) * first.in_features * ACTIVATION_BYTES / t)


def embedding_part(embedding: Embedding, shape: Shape) -> Part:
    n = shape.micro_batch_size * embedding.repeats
    tokens, h = embedding.tokens, embedding.hidden_size
    t = shape.tensor_parallel
    rep_div = t if shape.sequence_parallel else 1
    gather = 2.0 * n * tokens * h
    ids = n * tokens * _TOKEN_ID_BYTES
    mask = n * tokens * h * _MASK_BYTES if embedding.dropout else 0.0
    params = embedding.vocab_size * h + embedding.position_tokens * h
    return Part(forward=gather / t, linear=gather / t, input_is_data=True, params=params / t,
                 act_b=mask / rep_div, act_w=ids, layer_input=ids)


def head_part(head: LMHead, shape: Shape) -> Part:
    n = shape.micro_batch_size * head.repeats
    tokens, h, vocab = head.tokens, head.hidden_size, head.vocab_size
    t = shape.tensor_parallel
    linear = 2.0 * n * tokens * h * vocab
    return Part(forward=linear / t, linear=linear / t, params=vocab * h / t,
                 act_b=n * tokens * vocab * 4 / t, act_w=n * tokens * h * ACTIVATION_BYTES,
                 grad_w=n * tokens * vocab * ACTIVATION_BYTES / t, layer_input=n * tokens * h * ACTIVATION_BYTES)


def apply_training(part: Part, *, trains: bool, needs_backward: bool, recompute: str) -> dict[str, float]:
    """F, B, W, bytes of one part once frozen rules and recompute are applied."""
    if not needs_backward:
        return {"forward": part.forward, "input_grad": 0.0, "weight_grad": 0.0,
                "activation": 0.0, "stash": 0.0}
    input_grad = 0.0 if part.input_is_data else part.linear + 2.0 * part.core
    weight_grad = part.linear if trains else 0.0
    inputs = part.act_w if trains else 0.0
    stored = part.act_b + inputs + part.act_core
    # W still needs its GEMMs' inputs and the output gradients B made (Qi et al. 2024: 32sbh for GPT)
    stash = inputs + (part.grad_w if trains else 0.0)
    if recompute == "selective":
        input_grad += part.core
        stored -= part.act_core
    elif recompute == "full":
        input_grad += part.forward
        stored = part.layer_input
    elif recompute == "op" and part.op_saved is not None:  # torchtitan's per-op policy (blocks only)
        input_grad += part.op_flops
        stored = part.op_saved
    stash = min(stash, stored)  # a profile's stash is part of what the layer holds
    return {"forward": part.forward, "input_grad": input_grad, "weight_grad": weight_grad,
            "activation": stored, "stash": stash}
