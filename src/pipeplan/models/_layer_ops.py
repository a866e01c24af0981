"""The kernels of one layer's forward, input-gradient and weight-gradient passes (private).

    ops = block_ops(stack, Shape(6, "none", 1, False), layer_index=0, kv_tokens=1024,
                    kv_width=2304, extra_keys=0, cross=False)
    [op.name for op in ops.weight_grad]    # ['qkv.wgrad', 'proj.wgrad', 'fc1.wgrad', 'fc2.wgrad', ...]

Which kernels a pass runs follows Megatron-LM's GPT layer (the layout the zero-bubble
paper measured): fused bias + activation, fused bias + dropout + residual add, one
kernel per norm, a weight-gradient GEMM per linear that accumulates into an fp32
gradient (``--gradient-accumulation-fusion``), bias gradients with the weight
gradients. Attention is FlashAttention (one fused kernel each way; the backward does
2.5× the forward's FLOPs, Dao 2023 §3.1) unless recompute is ``"none"``: then the
scores are materialised (Megatron's local core attention: a batched GEMM, a fused
scale-mask-softmax, dropout, a second batched GEMM), as the stored activations of
that mode already assume. ``t`` (tensor parallel) splits heads and the FFN; with
sequence parallelism the norms, dropouts and residuals work on ``1/t`` of the tokens.
B holds what the input gradient needs (including norm weight gradients, computed by
the same kernels); W only the weight GEMMs and bias reductions, as zero-bubble splits.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..operations import HALF, Op, attention, gemm, memory
from ._layer_math import Shape, block_matmuls
from .modules import Embedding, LMHead, Module, Projector, TransformerStack, VisionEncoder, runs_per_example

__all__ = ["PassOps", "apply_training_ops", "module_ops", "block_ops", "embedding_ops", "head_ops", "patch_ops",
           "projector_ops"]

_FP32 = 4
_MASK = 1
#: Bytes per logit of the loss, read and written: the fp32 cast, the max and sum passes and the
#: stored softmax (F); the softmax read and the 16-bit logit gradient written (B).
_LOSS_FORWARD = (HALF + 2 * _FP32, 2 * _FP32)
_LOSS_BACKWARD = (_FP32, HALF)


@dataclass(frozen=True)
class PassOps:
    """The kernels of one layer's F, B and W, before frozen and recompute rules apply."""

    forward: tuple[Op, ...] = ()
    input_grad: tuple[Op, ...] = ()
    weight_grad: tuple[Op, ...] = ()
    core: tuple[Op, ...] = ()  # the forward's materialised attention kernels (selective recompute reruns them)
    #: the kernels torchtitan's per-op recompute reruns before B (a block's; ``None``: not a block, runs as none)
    op_rerun: tuple[Op, ...] | None = None


def _linear(name: str, tokens: int, n_in: int, n_out: int, bias: bool) -> tuple[Op, Op, list[Op]]:
    """A linear layer's forward GEMM, its input-gradient GEMM and its weight-gradient kernels."""
    forward = gemm(name, m=tokens, n=n_out, k=n_in)
    dgrad = gemm(f"{name}.dgrad", m=tokens, n=n_in, k=n_out)
    # wgrad accumulates into an fp32 main gradient: read and write 4 bytes per weight instead of writing 2
    wgrad = [gemm(f"{name}.wgrad", m=n_out, n=n_in, k=tokens, extra_bytes=(2 * _FP32 - HALF) * n_in * n_out)]
    if bias:
        wgrad.append(memory(f"{name}.bgrad", read=tokens * n_out * HALF, written=n_out * _FP32))
    return forward, dgrad, wgrad


def _norm(name: str, elements: float) -> tuple[Op, list[Op]]:
    """A norm's forward kernel and its backward (the norm's own kernel plus the residual gradient add)."""
    return (memory(name, read=elements * HALF, written=elements * HALF),
            [memory(f"{name}.bwd", read=2 * elements * HALF, written=elements * HALF),
             memory(f"{name}.residual_grad", read=2 * elements * HALF, written=elements * HALF)])


def _residual(name: str, elements: float, dropout: bool) -> tuple[Op, list[Op]]:
    """Bias + dropout + residual add, fused (Megatron's bias_dropout_add), and its backward."""
    mask = elements * _MASK if dropout else 0.0
    forward = memory(name, read=2 * elements * HALF, written=elements * HALF + mask, random=dropout)
    backward = [memory(f"{name}.bwd", read=elements * HALF + mask, written=elements * HALF)] if dropout else []
    return forward, backward


def block_ops(stack: TransformerStack, shape: Shape, *, layer_index: int, kv_tokens: int, kv_width: int,
              extra_keys: int, cross: bool) -> PassOps:
    """One transformer block (the conventions of :func:`pipeplan.models._layer_math.block_part`).

    ``cross``: queries from this stack, keys and values projected from a source's
    ``kv_tokens`` once per example (a ``kv`` GEMM over ``repeats`` copies, not one
    per noise sample); otherwise one fused ``qkv`` GEMM over the stack's own tokens.
    """
    t = shape.tensor_parallel
    rep = t if shape.sequence_parallel else 1
    n = shape.micro_batch_size * stack.sequences * runs_per_example(stack)
    s, h, f = stack.seq_length, stack.hidden_size, stack.ffn_hidden_size
    heads, kv_heads, d = stack.num_heads // t or 1, max(stack.kv_heads // t, 1), stack.dim_per_head
    qd, kvd = heads * d, kv_heads * d
    tokens, keys = n * s, kv_tokens + extra_keys
    hidden = tokens * h / rep  # elements of a replicated (or sequence-parallel) activation
    forward: list[Op] = []
    input_grad: list[Op] = []
    weight_grad: list[Op] = []

    def linear(name: str, rows: int, n_in: int, n_out: int) -> None:
        bias = stack.bias or (stack.qkv_bias and name in ("qkv", "q", "kv"))
        op, dgrad, wgrad = _linear(name, rows, n_in, n_out, bias)
        forward.append(op)
        input_grad.insert(0, dgrad)
        weight_grad.extend(wgrad)

    def elementwise(op: Op, backward: list[Op]) -> None:
        forward.append(op)
        input_grad[:0] = backward

    for which, k in enumerate(stack.adaptive_norm):
        if k:  # the condition's modulation GEMM (one row per sample)
            linear(f"ada{which + 1}", shape.micro_batch_size * runs_per_example(stack), h, k * h)
    elementwise(*_norm("norm1", hidden))
    if not cross:
        linear("qkv", tokens, h, qd + 2 * kvd)
    else:  # cross attention: queries from this stack, keys and values from the source, once per example
        linear("q", tokens, h, qd)
        linear("kv", shape.micro_batch_size * stack.sequences * stack.repeats * kv_tokens, kv_width, 2 * kvd)
    if stack.qk_norm:  # one kernel over each head's queries and keys (Qwen3's q_norm, k_norm)
        kv_rows = shape.micro_batch_size * stack.sequences * stack.repeats * kv_tokens if cross else n * kv_tokens
        elementwise(*_norm("qk_norm", tokens * qd + kv_rows * kvd))
    problems = n * heads
    scores = float(problems) * s * keys
    core_start = len(forward)
    if stack.attention == "eager":  # materialised scores (Megatron local core attention)
        elementwise(gemm("scores", m=s, n=keys, k=d, batch=problems),
                    [gemm("scores.dgrad_q", m=s, n=d, k=keys, batch=problems),
                     gemm("scores.dgrad_k", m=keys, n=d, k=s, batch=problems)])
        elementwise(memory("softmax", read=scores * HALF, written=scores * HALF),
                    [memory("softmax.bwd", read=2 * scores * HALF, written=scores * HALF)])
        if stack.dropout:
            elementwise(memory("attention_dropout", read=scores * HALF, written=scores * (HALF + _MASK), random=True),
                        [memory("attention_dropout.bwd", read=scores * (HALF + _MASK), written=scores * HALF)])
        elementwise(gemm("context", m=s, n=d, k=keys, batch=problems),
                    [gemm("context.dgrad_p", m=s, n=keys, k=d, batch=problems),
                     gemm("context.dgrad_v", m=keys, n=d, k=s, batch=problems)])
        elementwise(memory("context.copy", read=tokens * qd * HALF, written=tokens * qd * HALF),
                    [memory("context.copy.bwd", read=tokens * qd * HALF, written=tokens * qd * HALF)])
        core = tuple(forward[core_start:])
    else:  # FlashAttention forward and backward kernels
        core_flops = 4.0 * scores * d
        io = (2 * tokens * qd + 2 * n * keys * kvd) * HALF
        elementwise(attention("attention", flops=core_flops, bytes=io, queries=s, keys=keys, head_dim=d,
                              problems=problems, causal=stack.causal),
                    [attention("attention.bwd", flops=2.5 * core_flops, bytes=2 * io, queries=s, keys=keys,
                               head_dim=d, problems=problems, causal=stack.causal)])
        core = ()
    linear("proj", tokens, qd, h)
    if stack.post_norms:
        elementwise(*_norm("post_attention_norm", hidden))
    elementwise(*_residual("residual1", hidden, stack.dropout))
    elementwise(*_norm("norm2", hidden))
    width = (2 if stack.gated_mlp else 1) * f // t
    linear("fc1", tokens, h, width)
    act = tokens * f // t
    elementwise(memory("activation", read=tokens * width * HALF, written=act * HALF),
                [memory("activation.bwd", read=(act + tokens * width) * HALF, written=tokens * width * HALF)])
    linear("fc2", tokens, f // t, h)
    if stack.post_norms:
        elementwise(*_norm("post_mlp_norm", hidden))
    elementwise(*_residual("residual2", hidden, stack.dropout))
    block_end = len(forward) - 1  # the second residual add: nothing after it is needed by the backward
    if stack.final_norm and layer_index == stack.num_layers - 1:
        elementwise(*_norm("final_norm", hidden))
    return PassOps(tuple(forward), tuple(input_grad), tuple(weight_grad), core,
                   _op_rerun(stack, shape, forward[:block_end], core, kv_tokens=kv_tokens, kv_width=kv_width))


def _op_rerun(stack: TransformerStack, shape: Shape, forward: list[Op], core: tuple[Op, ...], *, kv_tokens: int,
              kv_width: int) -> tuple[Op, ...]:
    """What torchtitan's per-op recompute runs again of a block (``pipeplan.models._layer_math._op_policy``).

    Every memory-bound kernel of the forward up to the second residual add (torchtitan's
    non-reentrant checkpoint stops recomputing once the backward has what it needs), the
    block's 2nd, 4th, ... weight matmuls (each its own GEMM here, also where the forward fuses
    them: wk, wo and w3 of a Llama block) and, with materialised attention, its core.
    """
    matmuls = block_matmuls(stack, shape, kv_tokens=kv_tokens, kv_width=kv_width)
    again = [gemm(f"{name}.recompute", m=int(rows), n=int(n_out), k=int(n_in))
             for position, (name, rows, n_in, n_out) in enumerate(matmuls) if position % 2 == 1]
    elementwise = [op for op in forward if op.kind == "memory" and op not in core]
    return tuple(elementwise) + tuple(again) + core


def patch_ops(encoder: VisionEncoder, shape: Shape) -> PassOps:
    """The patch embedding: a GEMM over unfolded patches plus the position add; its input is pixels."""
    t = shape.tensor_parallel
    tokens = shape.micro_batch_size * encoder.repeats * encoder.tokens
    pixels, h = encoder.channels * encoder.patch_size**2, encoder.hidden_size // t
    op, _, wgrad = _linear("patch", tokens, pixels, h, True)
    unfold = memory("unfold", read=tokens * pixels * HALF, written=tokens * pixels * HALF)
    position = memory("position_add", read=2 * tokens * h * HALF, written=tokens * h * HALF)
    return PassOps((unfold, op, position), (), tuple(wgrad))


def projector_ops(projector: Projector, shape: Shape) -> PassOps:
    """A chain of linears with activations between them."""
    n = shape.micro_batch_size * runs_per_example(projector)
    t = shape.tensor_parallel
    forward: list[Op] = []
    input_grad: list[Op] = []
    weight_grad: list[Op] = []
    for index, layer in enumerate(projector.linears):
        tokens = n * (layer.tokens or projector.tokens)
        op, dgrad, wgrad = _linear(f"linear{index}", tokens, layer.in_features, max(layer.out_features // t, 1),
                                   projector.bias)
        forward.append(op)
        input_grad.insert(0, dgrad)
        weight_grad.extend(wgrad)
        if projector.activation and index + 1 < len(projector.linears):
            size = tokens * layer.out_features / t
            forward.append(memory(f"activation{index}", read=size * HALF, written=size * HALF))
            input_grad.insert(0, memory(f"activation{index}.bwd", read=2 * size * HALF, written=size * HALF))
    return PassOps(tuple(forward), tuple(input_grad), tuple(weight_grad))


def embedding_ops(embedding: Embedding, shape: Shape) -> PassOps:
    """A token (and position) embedding: gathers forward, a scatter-add into the fp32 table gradient."""
    t = shape.tensor_parallel
    tokens = shape.micro_batch_size * embedding.repeats * embedding.tokens
    h, vocab = embedding.hidden_size, embedding.vocab_size // t
    elements = tokens * h
    forward = [memory("gather", read=elements * HALF + tokens * 8, written=elements * HALF)]
    weight_grad = [memory("scatter_add", read=elements * HALF + tokens * 8 + vocab * h * _FP32,
                          written=vocab * h * _FP32)]
    if embedding.position_tokens:
        forward.append(memory("position_add", read=2 * elements * HALF, written=elements * HALF))
    if embedding.dropout:
        forward.append(memory("dropout", read=elements * HALF, written=elements * (HALF + _MASK), random=True))
        weight_grad.insert(0, memory("dropout.bwd", read=elements * (HALF + _MASK), written=elements * HALF))
    return PassOps(tuple(forward), (), tuple(weight_grad))


def head_ops(head: LMHead, shape: Shape) -> PassOps:
    """The output layer: the logits GEMM and the cross-entropy over the vocabulary."""
    t = shape.tensor_parallel
    tokens = shape.micro_batch_size * head.repeats * head.tokens
    vocab = head.vocab_size // t
    op, dgrad, wgrad = _linear("logits", tokens, head.hidden_size, vocab, False)
    logits = float(tokens) * vocab
    loss = memory("cross_entropy", read=logits * _LOSS_FORWARD[0], written=logits * _LOSS_FORWARD[1])
    loss_grad = memory("cross_entropy.bwd", read=logits * _LOSS_BACKWARD[0], written=logits * _LOSS_BACKWARD[1])
    return PassOps((op, loss), (loss_grad, dgrad), tuple(wgrad))


def apply_training_ops(ops: PassOps, *, trains: bool, needs_backward: bool, input_is_data: bool,
                       recompute: str) -> PassOps:
    """The kernels that run once frozen rules and recompute apply (:func:`_layer_math.apply_training`'s rules).

    No backward: the forward only. A frozen layer runs no W; a layer whose input is
    data needs no B. ``"full"`` recompute runs the forward again before B;
    ``"selective"`` the materialised attention kernels (none for flash attention,
    whose backward kernel recomputes the scores itself); ``"op"`` (torchtitan's
    per-op policy) a block's :attr:`PassOps.op_rerun` (other layers: as ``"none"``).
    """
    if not needs_backward:
        return PassOps(ops.forward)
    input_grad = () if input_is_data else ops.input_grad
    if recompute == "full" and not input_is_data:
        input_grad = ops.forward + input_grad
    elif recompute == "selective" and not input_is_data:
        input_grad = ops.core + input_grad
    elif recompute == "op" and ops.op_rerun is not None and not input_is_data:
        input_grad = ops.op_rerun + input_grad
    return PassOps(ops.forward, input_grad, ops.weight_grad if trains else ())


def module_ops(module: Module, shape: Shape, index: int, lookup: Callable[[str], Module]) -> PassOps:
    """The kernels of layer ``index`` of ``module`` (``lookup`` finds a cross-attention source or joint partner)."""
    if isinstance(module, VisionEncoder):
        if index == 0:
            return patch_ops(module, shape)
        blocks = module.blocks()
        return block_ops(blocks, shape, layer_index=index - 1, kv_tokens=blocks.seq_length,
                         kv_width=module.hidden_size, extra_keys=0, cross=False)
    if isinstance(module, TransformerStack):
        cross = module.cross_attention
        if cross is not None and index % cross.every == 0:
            tokens, width = lookup(cross.source).output_shape()
            return block_ops(module, shape, layer_index=index, kv_tokens=tokens,
                             kv_width=cross.kv_hidden_size or width, extra_keys=0, cross=True)
        partner = lookup(module.joint_with) if module.joint_with else None
        extra = partner.seq_length if isinstance(partner, TransformerStack) else 0
        return block_ops(module, shape, layer_index=index, kv_tokens=module.seq_length,
                         kv_width=module.hidden_size, extra_keys=extra, cross=False)
    if isinstance(module, Projector):
        return projector_ops(module, shape)
    if isinstance(module, Embedding):
        return embedding_ops(module, shape)
    return head_ops(module, shape)
