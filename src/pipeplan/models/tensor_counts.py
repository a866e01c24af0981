"""How many trainable parameter tensors each pipeline layer of a spec holds (what per-tensor engine hooks cost by).

    from pipeplan import presets
    from pipeplan.models.tensor_counts import layer_tensor_counts
    layer_tensor_counts(presets.get("pi0"))    # [3, 16, 16, ..., 1]: one count per pipeline layer

DeepSpeed registers a hook on every trainable parameter tensor; its host cost grows with the
number of tensors, not their size (docs/engines.md, "DeepSpeed"). The counts follow the same
layout as the layer's kernels (:mod:`pipeplan.models._layer_ops`, Megatron-LM's GPT layer):
per transformer block one fused ``qkv`` weight (``q`` and ``kv`` for cross attention), ``proj``,
``fc1`` (a gated MLP's gate and up fused) and ``fc2``, a bias beside each where the stack has
biases, each norm's weight (and bias for LayerNorm), each adaptive-norm modulation's weight and
bias, two layer-scale vectors where present, and the final norm on the last block. A Hugging
Face model keeps ``q``/``k``/``v`` and gate/up apart: a Llama block is 9 tensors there, 6 here.
Patch embedding: the projection's weight and bias, the position table and the extra tokens
(and SigLIP's pooling head: 11 more); a projector: a weight (and bias) per linear, a norm's two,
one for its extra parameters; an embedding: its table and its position table; a tied head
none (its table is the embedding's). A frozen module's tensors get no hooks: 0. A joint pair's
layer holds both stacks' blocks. Tensor parallelism splits each tensor, never their number.
"""

from __future__ import annotations

from ._layer_math import NORM_PARAMS
from .modules import Embedding, LMHead, Module, Projector, TransformerStack, VisionEncoder, layer_depth
from .spec import ModelSpec

__all__ = ["layer_tensor_counts", "module_layer_tensors"]

#: SigLIP's attention-pooling head: the probe, the attention's in and out projections (weight and bias
#: each), its LayerNorm (2) and its MLP's two linears (weight and bias each)
_MAP_HEAD = 1 + 4 + 2 + 4


def _block(stack: TransformerStack, index: int, cross: bool) -> int:
    """Tensors of one transformer block (the module doc's layout)."""
    per_linear = 2 if stack.bias else 1
    linears = (2 if cross else 1) + 3  # qkv (q, kv), proj, fc1, fc2
    norms = sum(NORM_PARAMS[stack.norm] if k == 0 else 2 for k in stack.adaptive_norm)  # a modulation: w + b
    scale = 2 if stack.layer_scale else 0
    final = 0
    if stack.final_norm and index == stack.num_layers - 1:
        final = 2 if stack.final_norm_adaptive else NORM_PARAMS[stack.norm]
    return int(linears * per_linear + norms + scale + final)


def module_layer_tensors(module: Module, index: int) -> int:
    """Parameter tensors of pipeline layer ``index`` of ``module``, trainable or not."""
    if isinstance(module, VisionEncoder):
        if index == 0:
            positions = module.patches_per_image if module.position_tokens is None else module.position_tokens
            return 2 + (positions > 0) + (module.extra_tokens > 0) + (_MAP_HEAD if module.map_head else 0)
        return _block(module.blocks(), index - 1, False)
    if isinstance(module, TransformerStack):
        cross = module.cross_attention is not None and index % module.cross_attention.every == 0
        return _block(module, index, cross)
    if isinstance(module, Projector):
        per_linear = 2 if module.bias else 1
        return len(module.linears) * per_linear + (2 if module.norm_params else 0) + (module.extra_params > 0)
    if isinstance(module, Embedding):
        return 1 + (module.position_tokens > 0)
    assert isinstance(module, LMHead)
    return 0 if module.tied_to else 1


def layer_tensor_counts(spec: ModelSpec) -> list[int]:
    """Trainable parameter tensors per pipeline layer of ``spec``, in :func:`~pipeplan.models.layer_costs.layer_costs` order."""
    joint = {m.joint_with: m for m in spec.modules if isinstance(m, TransformerStack) and m.joint_with}
    counts = []
    for module in spec.modules:
        if isinstance(module, TransformerStack) and module.joint_with:
            continue
        partner = joint.get(module.name)
        members = (module,) if partner is None else (module, partner)
        for index in range(layer_depth(module)):
            counts.append(sum(module_layer_tensors(m, index) for m in members if spec.trains(m.name)))
    return counts
