"""What a :class:`~pipeplan.models.spec.ModelSpec` costs to train, per pipeline layer, from its shapes alone.

Per pipeline layer: the forward (F), input-gradient (B) and weight-gradient (W)
FLOPs and kernels, the parameters, the activation bytes a microbatch leaves until
its backward, the bytes W still needs after B, and the bytes sent to the next
stage (:func:`layer_costs`); their times on a device as the
:class:`~pipeplan.layers.LayerProfile` that ``partition_layers``, ``simulate`` and
the planner consume (:func:`layer_profile`); the tensor-parallel collectives
(:func:`tensor_parallel_traffic`) and the training FLOPs per example
(:func:`flops_per_sample`)::

    from pipeplan import presets, hardware
    from pipeplan.models.layer_costs import layer_costs, layer_profile
    spec = presets.get("pi0")
    profile = layer_profile(spec, hardware.device("h100-80g"), micro_batch_size=4)
    layer_costs(spec, 4, recompute="full")[1].activation_bytes

torch-free (numpy only through :mod:`pipeplan.layers`). The per-layer arithmetic
lives in ``pipeplan.models._layer_math`` (FLOPs and bytes) and
``pipeplan.models._layer_ops`` (kernels).

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
* W-stash bytes are what a split backward keeps after B until W: the stored
  inputs of the weight GEMMs (``14sbh`` for GPT) and the output gradients B made
  for them (``18sbh``): ``32sbh``, the zero-bubble paper's ``M_W``.
* Frozen modules: a layer whose module is frozen has W = 0 and no optimizer
  state. It has a backward (B) only if a gradient must flow through it to a
  trainable module upstream; otherwise it runs only its forward and stores
  nothing (a frozen vision encoder on stage 0). A layer whose input is data (the
  patch embedding, an embedding) has B = 0.
* Recompute: ``"selective"`` recomputes the attention core (scores, softmax,
  dropout) in the backward, so B gains the core's forward FLOPs; ``"full"`` keeps
  only each block's input and B gains the whole forward; the other layers (an
  embedding, a vision encoder's patch embedding, a projector, a linear layer, an
  LM head) run as ``"none"``, as under ``"block:N"`` and ``"every:N"`` (engines
  checkpoint transformer blocks only: Megatron-LM's ``TransformerBlock``,
  Megatron-DeepSpeed's ``GPTModelPipe`` through ``PipelineModule._is_checkpointable``,
  torchtitan's per-``TransformerBlock`` ``checkpoint_wrapper``). torchtitan's modes:
  ``"op"`` (its per-op policy) keeps a block's input, its 1st, 3rd, ... weight
  matmuls' outputs and the flash kernel's output, and B gains the other matmuls
  and the memory-bound kernels (``_layer_math._op_policy``; other layers run as
  ``"none"``); ``"every:N"`` is ``"full"`` on every Nth block of a stack and
  ``"none"`` elsewhere, layer by layer. Megatron-LM's ``"block:N"`` and
  ``"uniform:N"`` (:func:`pipeplan.plan.stage_recompute`) depend on a block's place
  in its pipeline stage, so they take the stages (``stage_sizes``; none given: the
  model is one stage). Counting the blocks of each stage from its first (the
  other layers, an embedding or a head, run as ``"none"``: Megatron-LM's
  ``TransformerBlock`` holds transformer layers only): under ``"block:N"`` the
  first N are ``"full"`` and the rest ``"none"``; under ``"uniform:N"`` every
  block is ``"full"`` in time (its forward runs again), and of each group of N
  only the first keeps its input: the group's other blocks keep nothing. The
  group's activations rebuilt during its backward (one microbatch's, N blocks'
  worth under ``"none"``) are a transient not charged, as ``"full"`` does not
  charge the one block it rebuilds.
* ``tensor_parallel = t`` divides every matrix product's FLOPs and every
  parameter by ``t``.
* Noise samples: a module's own tokens run ``repeats · noise_samples`` times per
  example (:func:`~pipeplan.models.modules.runs_per_example`): every GEMM on
  them, their attention to the keys, the activations they store, the bytes they
  send. A cross layer's K/V projection of its source's tokens, the K and V it
  stores and their output gradients run ``repeats`` times only: a flow-matching
  or diffusion head projects its context once per example and its samples share
  those keys and values. ``noise_samples = N`` therefore costs exactly ``N − 1``
  K/V projections (their F, B and W) less than ``repeats = N``, which reruns the
  whole module, context included (a reference that repeats its inputs).
* Send bytes of a layer are the bytes that cross a pipeline cut right after it,
  per microbatch: its own output if the next layer reads it, plus every earlier
  module output still read later (the DINOv2 features past the SigLIP tower,
  GR00T's VLM features past the DiT's first layers). Data inputs (images, token
  ids, noisy actions) are assumed loaded on the stage that reads them.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from .._validation import positive_float
from ..errors import InvalidInputError
from ..hardware import Device
from ..layers import LayerProfile
from ..operations import Op
from ..plan import Recompute, recompute_at, stage_recompute
from ._layer_math import Shape, apply_training, layer_part
from ._layer_ops import PassOps, apply_training_ops, module_ops
from .modules import ACTIVATION_BYTES, LMHead, Module, TransformerStack, VisionEncoder, layer_depth, runs_per_example
from .spec import ModelSpec

__all__ = ["LayerCost", "flops_per_sample", "gathered_input_bytes", "layer_costs", "layer_profile",
           "stage_layer_modes", "tensor_parallel_traffic"]


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
        forward_ops, input_grad_ops, weight_grad_ops: the kernels of F, B and W
            (:mod:`pipeplan.operations`), which a device times.
        tied_to: the name of the layer whose parameters this one shares (a tied
            LM head: its embedding's layer), or ``None``; ``params`` is its copy.
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
    forward_ops: tuple[Op, ...] = field(default=(), repr=False, compare=False)
    input_grad_ops: tuple[Op, ...] = field(default=(), repr=False, compare=False)
    weight_grad_ops: tuple[Op, ...] = field(default=(), repr=False, compare=False)
    tied_to: str | None = None

    @property
    def backward_flops(self) -> float:
        """B + W FLOPs (the full backward)."""
        return self.input_grad_flops + self.weight_grad_flops

    @property
    def ops(self) -> tuple[Op, ...]:
        """Every kernel of the layer's step: F, then B, then W."""
        return self.forward_ops + self.input_grad_ops + self.weight_grad_ops


def layer_costs(
    spec: ModelSpec,
    micro_batch_size: int,
    *,
    recompute: Recompute | Mapping[str, Recompute] = "selective",
    tensor_parallel: int = 1,
    sequence_parallel: bool = False,
    stage_sizes: Sequence[int] | None = None,
) -> list[LayerCost]:
    """Per pipeline layer F, B, W FLOPs and bytes of ``spec`` for one microbatch.

    Args:
        spec: the model.
        micro_batch_size: examples per microbatch ``b`` (>= 1).
        recompute: ``"none"``, ``"selective"`` (default: the attention core is
            recomputed, as flash attention does) or ``"full"``, or another mode of
            :func:`~pipeplan.plan.check_recompute`; or a mode per module name (a
            module not named: ``"none"``).
        tensor_parallel: tensor-parallel degree ``t`` (FLOPs and params per rank).
        sequence_parallel: with ``t > 1``, norms and dropouts are split too.
        stage_sizes: pipeline layers per stage, for ``"block:N"`` and ``"uniform:N"``
            (module doc); ``None``: the whole model is one stage. Other modes ignore it.

    Returns:
        One :class:`LayerCost` per pipeline layer, in order. A joint pair
        (``joint_with``) gives one layer per depth holding both stacks.

    Raises:
        InvalidInputError: a bad option, or a ``tensor_parallel`` that does not
            divide some module's heads or FFN width (the message names the module).
    """
    modes = spec.recompute_modes(recompute)
    placed = stage_layer_modes(spec, recompute, stage_sizes)
    shape = Shape.checked(micro_batch_size, "none", tensor_parallel, sequence_parallel)
    _check_tensor_parallel(spec, shape.tensor_parallel)
    joint = {m.joint_with: m for m in spec.modules if isinstance(m, TransformerStack) and m.joint_with}
    rows: list[tuple[str, tuple[str, ...], dict[str, float], float, float, PassOps]] = []
    owners: list[tuple[str, ...]] = []
    seen: dict[tuple[str, int, bool, str], tuple[dict[str, float], float, PassOps]] = {}
    for module in spec.modules:
        if isinstance(module, TransformerStack) and module.joint_with:
            continue
        partner = joint.get(module.name)
        for index in range(layer_depth(module)):
            names = (module.name,) if partner is None else (module.name, partner.name)
            totals = {"forward": 0.0, "input_grad": 0.0, "weight_grad": 0.0, "activation": 0.0, "stash": 0.0}
            params = trainable = 0.0
            kernels = PassOps()
            for member in ((module,) if partner is None else (module, partner)):
                backward = spec.needs_grad(member.name) or (
                    member is partner and spec.needs_grad(module.name)
                )
                trains = spec.trains(member.name)
                mode = _layer_mode(member, index, modes[member.name]) if placed is None else placed[len(rows)][0]
                # identical layers cost the same: compute one of each kind once per call
                key = (member.name, _layer_kind(member, index), backward, mode)
                if key not in seen:
                    part = layer_part(member, shape, index, spec.module)
                    costs = apply_training(part, trains=trains, needs_backward=backward, recompute=mode)
                    run = apply_training_ops(module_ops(member, shape, index, spec.module), trains=trains,
                                             needs_backward=backward, input_is_data=part.input_is_data,
                                             recompute=mode)
                    seen[key] = (costs, part.params, run)
                costs, part_params, run = seen[key]
                for name in totals:
                    totals[name] += costs[name]
                params += part_params
                trainable += part_params if trains else 0.0
                kernels = PassOps(kernels.forward + run.forward, kernels.input_grad + run.input_grad,
                                  kernels.weight_grad + run.weight_grad)
            if placed is not None and not placed[len(rows)][1]:  # inside a uniform:N group: its input is kept
                totals["activation"] = totals["stash"] = 0.0
            label = "+".join(names)
            rows.append((f"{label}.{index}", names, totals, params, trainable, kernels))
            owners.append(names)
    sends = _send_bytes(spec, shape, owners)
    tied = {m.name: f"{spec.module(m.tied_to).name}.0" for m in spec.modules if isinstance(m, LMHead) and m.tied_to}
    return [
        LayerCost(name, names, c["forward"], c["input_grad"], c["weight_grad"], p, tp,
                  c["activation"], c["stash"], send, k.forward, k.input_grad, k.weight_grad,
                  tied_to=tied.get(names[0]))
        for (name, names, c, p, tp, k), send in zip(rows, sends)
    ]


def gathered_input_bytes(spec: ModelSpec, micro_batch_size: int,
                         recompute: Recompute | Mapping[str, Recompute] | None = None,
                         stage_sizes: Sequence[int] | None = None) -> list[float]:
    """Per pipeline layer, the bytes of its trained blocks' column-parallel GEMM inputs over the whole sequence.

    A transformer block's QKV and first MLP GEMMs read the norms' outputs, ``2·n·s·h`` 16-bit
    values per microbatch (Korthikanti et al. 2022's ``4sbh`` of the ``act_w`` terms); under
    sequence parallelism Megatron-LM saves each one's ``1/t`` shard and gathers it again in the
    backward (what :func:`layer_costs` stores), while an engine that saves the gathered input
    (DTensor's ``ColwiseParallel``) keeps all of it. Layers without blocks, frozen ones and those
    that run no backward: 0. Independent of ``t`` (the whole sequence's bytes). ``recompute``
    given: only the blocks it leaves storing them (``"none"``, or ``"selective"``, which reruns the
    attention core only), modes resolved as :func:`layer_costs` resolves them (``stage_sizes`` for
    ``block:N`` / ``uniform:N``).
    """
    modes = None if recompute is None else spec.recompute_modes(recompute)
    placed = None if recompute is None else stage_layer_modes(spec, recompute, stage_sizes)
    shape = Shape.checked(micro_batch_size, "none", 1, False)
    joint = {m.joint_with: m for m in spec.modules if isinstance(m, TransformerStack) and m.joint_with}
    out: list[float] = []
    for module in spec.modules:
        if isinstance(module, TransformerStack) and module.joint_with:
            continue
        partner = joint.get(module.name)
        for index in range(layer_depth(module)):
            total = 0.0
            for member in ((module,) if partner is None else (module, partner)):
                stored = modes is None or (_layer_mode(member, index, modes[member.name]) if placed is None
                                           else placed[len(out)][0]) in ("none", "selective")
                if stored and spec.trains(member.name) and spec.needs_grad(member.name):
                    total += layer_part(member, shape, index, spec.module).gathered
            out.append(total)
    return out


def layer_profile(
    spec: ModelSpec,
    hardware: Device,
    micro_batch_size: int,
    *,
    recompute: Recompute | Mapping[str, Recompute] = "selective",
    tensor_parallel: int = 1,
    sequence_parallel: bool = False,
    stage_sizes: Sequence[int] | None = None,
) -> LayerProfile:
    """The :class:`~pipeplan.layers.LayerProfile` of ``spec`` on ``hardware``.

    Times are milliseconds per microbatch: each layer's F, B and W kernels
    timed by :meth:`pipeplan.hardware.Device.op_milliseconds` (with the flat
    model, ``achievable_fraction`` set, ``1e3 · FLOPs / achievable_flops``).
    ``backward`` is B + W time, ``weight`` the W part; ``params`` are per
    tensor-parallel rank; ``trainable_params``, ``weight_stash_bytes`` and
    ``send_bytes`` carry the frozen, split-backward and boundary information.

    Args:
        spec: the model.
        hardware: a :class:`~pipeplan.hardware.Device` (or anything with a
            positive ``achievable_flops`` in FLOP/s: the flat model).
        micro_batch_size, recompute, tensor_parallel, sequence_parallel, stage_sizes: as in
            :func:`layer_costs`.
    """
    layers = layer_costs(spec, micro_batch_size, recompute=recompute, tensor_parallel=tensor_parallel,
                         sequence_parallel=sequence_parallel, stage_sizes=stage_sizes)
    if isinstance(hardware, Device) and not hardware.flat:
        forward = [hardware.ops_milliseconds(layer.forward_ops) for layer in layers]
        weight = [hardware.ops_milliseconds(layer.weight_grad_ops) for layer in layers]
        backward = [hardware.ops_milliseconds(layer.input_grad_ops) + w for layer, w in zip(layers, weight)]
    else:
        rate = positive_float("achievable_flops", getattr(hardware, "achievable_flops", None), unit="FLOP/s")
        to_ms = 1e3 / rate
        forward = [layer.forward_flops * to_ms for layer in layers]
        backward = [layer.backward_flops * to_ms for layer in layers]
        weight = [layer.weight_grad_flops * to_ms for layer in layers]
    return LayerProfile(
        forward,
        backward,
        weight,
        activation_bytes=[layer.activation_bytes for layer in layers],
        params=[layer.params for layer in layers],
        names=[layer.name for layer in layers],
        weight_stash_bytes=[layer.weight_stash_bytes for layer in layers],
        send_bytes=[layer.send_bytes for layer in layers],
        trainable_params=[layer.trainable_params for layer in layers],
        tied_to=[[other.name for other in layers].index(layer.tied_to) if layer.tied_to else -1 for layer in layers],
    )


def tensor_parallel_traffic(
    spec: ModelSpec, micro_batch_size: int, *, recompute: Recompute | Mapping[str, Recompute] = "selective",
    stage_sizes: Sequence[int] | None = None,
) -> list[tuple[int, int, float, float]]:
    """Per pipeline layer of ``spec``, the tensor-parallel collectives of one microbatch.

    Returns ``(forward passes, backward passes, forward bytes, backward bytes)``
    per layer, the bytes summed over the passes.

    Megatron-LM's tensor parallelism (Shoeybi et al. 2019, §3; with sequence
    parallelism, Korthikanti et al. 2022, §4.2.2) puts, in every transformer
    block, two collectives in the forward (after the attention and after the
    MLP: an all-reduce, or with sequence parallelism an all-gather before and
    a reduce-scatter after each, the same ring volume) and two in the
    backward. Counted here as **ring passes** (an all-reduce is two, an
    all-gather or reduce-scatter one) of the block's full activation
    ``b · repeats · noise_samples · tokens · h · 2`` bytes: 4 forward, 4 backward, and 4 more
    in the backward under ``"full"`` recompute (the forward runs again).
    The word embedding, the LM head, a projector or linear module and a
    patch embedding have one pass each way (the vocabulary-parallel
    embedding's all-reduce of its output, the head's all-gather of its input).
    A layer without a backward has no backward passes. Joint pairs add up.
    ``stage_sizes``: as in :func:`layer_costs` (a block ``"full"`` under
    ``"block:N"`` or ``"uniform:N"`` runs its forward's passes again).
    """
    modes = spec.recompute_modes(recompute)
    placed = stage_layer_modes(spec, recompute, stage_sizes)
    shape = Shape.checked(micro_batch_size, "none", 1, False)
    joint = {m.joint_with: m for m in spec.modules if isinstance(m, TransformerStack) and m.joint_with}
    out: list[tuple[int, int, float, float]] = []
    for module in spec.modules:
        if isinstance(module, TransformerStack) and module.joint_with:
            continue
        partner = joint.get(module.name)
        for index in range(layer_depth(module)):
            forward = backward = 0
            forward_bytes = backward_bytes = 0.0
            for member in ((module,) if partner is None else (module, partner)):
                grads = spec.needs_grad(member.name) or (member is partner and spec.needs_grad(module.name))
                block = isinstance(member, TransformerStack) or (isinstance(member, VisionEncoder) and index > 0)
                passes = 4 if block else 1
                mode = _layer_mode(member, index, modes[member.name]) if placed is None else placed[len(out)][0]
                # full recompute runs the forward's 4 again; torchtitan's per-op policy its 2 all-gathers
                # (the inputs of the recomputed wk and w3: reduce-scatter outputs are saved)
                extra = (passes if mode == "full" else 2 if mode == "op" else 0) if block else 0
                size = _hidden_bytes(member, shape)
                back = (passes + extra) if grads else 0
                forward += passes
                backward += back
                forward_bytes += passes * size
                backward_bytes += back * size
            out.append((forward, backward, forward_bytes, backward_bytes))
    return out


def flops_per_sample(spec: ModelSpec, *, recompute: Recompute = "none") -> dict[str, float]:
    """Training FLOPs (F + B + W) per example of each module of ``spec`` (a joint pair split by member)."""
    shape = Shape.checked(1, recompute, 1, False)
    out: dict[str, float] = {}
    for module in spec.modules:
        total = 0.0
        backward = spec.needs_grad(module.name) or (
            isinstance(module, TransformerStack) and module.joint_with is not None
            and spec.needs_grad(module.joint_with)
        )
        for index in range(layer_depth(module)):
            part = layer_part(module, shape, index, spec.module)
            costs = apply_training(part, trains=spec.trains(module.name), needs_backward=backward,
                                   recompute=_layer_mode(module, index, recompute))
            total += costs["forward"] + costs["input_grad"] + costs["weight_grad"]
        out[module.name] = total
    return out


def _check_tensor_parallel(spec: ModelSpec, t: int) -> None:
    """Tensor parallelism splits whole heads and the MLP evenly (Megatron-LM requires it)."""
    if t == 1:
        return
    for module in spec.modules:
        if isinstance(module, (TransformerStack, VisionEncoder)):
            kv = module.kv_heads if isinstance(module, TransformerStack) else module.num_heads
            for what, count in (("attention heads", module.num_heads), ("key/value heads", kv),
                                ("FFN width", module.ffn_hidden_size)):
                if count % t and not (what == "key/value heads" and t % count == 0):
                    raise InvalidInputError(
                        f"tensor_parallel={t} must divide module {module.name!r}'s {what} ({count})")


def _output_bytes(module: Module, shape: Shape) -> float:
    tokens, width = module.output_shape()
    return float(shape.micro_batch_size * runs_per_example(module) * tokens * width * ACTIVATION_BYTES)


def _hidden_bytes(module: Module, shape: Shape) -> float:
    if isinstance(module, VisionEncoder):
        blocks = module.blocks()
        return float(shape.micro_batch_size * module.repeats * blocks.tokens * module.hidden_size * ACTIVATION_BYTES)
    if isinstance(module, TransformerStack):
        return float(shape.micro_batch_size * runs_per_example(module) * module.tokens * module.hidden_size
                     * ACTIVATION_BYTES)
    return _output_bytes(module, shape)


def _send_bytes(spec: ModelSpec, shape: Shape, owners: list[tuple[str, ...]]) -> list[float]:
    """Bytes live across the cut after each pipeline layer (module doc, 'Send bytes')."""
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    for position, names in enumerate(owners):
        for name in names:
            first.setdefault(name, position)
            last[name] = position
    last_read: dict[str, int] = {}
    for module in spec.modules:
        for source in spec.inputs_of(module):
            last_read[source] = max(last_read.get(source, -1), first[module.name])
        if isinstance(module, TransformerStack) and module.cross_attention is not None:
            cross = module.cross_attention
            reads = [first[module.name] + i for i in range(module.num_layers) if i % cross.every == 0]
            last_read[cross.source] = max(last_read.get(cross.source, -1), max(reads))
    sends = []
    for cut in range(len(owners)):
        live = 0.0
        for module in spec.modules:
            name = module.name
            if first[name] <= cut < last[name]:
                live += _hidden_bytes(module, shape)
            elif last[name] <= cut < last_read.get(name, -1):
                live += _output_bytes(module, shape)
        sends.append(live / (shape.tensor_parallel if shape.sequence_parallel else 1))
    sends[-1] = 0.0
    return sends


def stage_layer_modes(spec: ModelSpec, recompute: Recompute | Mapping[str, Recompute],
                      stage_sizes: Sequence[int] | None = None) -> list[tuple[Recompute, bool]] | None:
    """Per pipeline layer of ``spec``, ``(mode, keeps its input)`` under ``"block:N"`` or ``"uniform:N"``.

    ``None`` for any other recompute (a layer's mode does not depend on its stage). The
    rule is the module doc's: blocks counted from each stage's first; a layer that is not
    a block runs ``"none"``. ``stage_sizes``: pipeline layers per stage (``None``: one stage).

    Raises:
        InvalidInputError: ``"block:N"`` or ``"uniform:N"`` given for one module among others
            (Megatron-LM applies one method to every stage), or ``stage_sizes`` that are
            not positive or do not add up to the model's layers.
    """
    if not isinstance(recompute, str):
        staged = sorted({mode for mode in recompute.values() if stage_recompute(mode) is not None})
        if staged:
            raise InvalidInputError(f"recompute {staged[0]!r} is a method per pipeline stage (Megatron-LM's "
                                    "--recompute-method); give it as the one mode of the model, not per module")
        return None
    method = stage_recompute(recompute)
    if method is None:
        return None
    kind, count = method
    blocks = _block_layers(spec)
    sizes = [len(blocks)] if stage_sizes is None else [int(size) for size in stage_sizes]
    if any(size < 1 for size in sizes) or sum(sizes) != len(blocks):
        raise InvalidInputError(f"stage_sizes {list(sizes)} must be positive and add up to the model's "
                                f"{len(blocks)} layers")
    out: list[tuple[Recompute, bool]] = []
    for size in sizes:
        position = 0  # the block's place among its stage's blocks
        for block in blocks[len(out):len(out) + size]:
            if not block:
                out.append(("none", True))
                continue
            if kind == "block":
                out.append(("full" if position < count else "none", True))
            else:
                out.append(("full", position % count == 0))
            position += 1
    return out


def _block_layers(spec: ModelSpec) -> list[bool]:
    """Per pipeline layer, whether it is a transformer block (a stack's layer, a vision encoder's after its patch
    embedding; a joint pair's layer is one block)."""
    out: list[bool] = []
    for module in spec.modules:
        if isinstance(module, TransformerStack) and module.joint_with:
            continue
        for index in range(layer_depth(module)):
            out.append(isinstance(module, TransformerStack) or (isinstance(module, VisionEncoder) and index > 0))
    return out


def _layer_mode(module: Module, index: int, mode: Recompute) -> Recompute:
    """The mode layer ``index`` of ``module`` runs under ``mode``: ``every:N`` resolved per block, ``full`` on
    transformer blocks only (an embedding, a patch embedding, a projector, a linear layer or a head runs ``none``:
    module doc).

    torchtitan checkpoints transformer blocks only: under ``every:N`` block ``i`` of a stack (of a
    vision encoder, its blocks after the patch embedding) is ``"full"`` when ``(i + 1) % N == 0``
    (:func:`pipeplan.plan.recompute_at`), every other layer ``"none"``. Other modes pass through.
    """
    if mode == "full" and not (isinstance(module, TransformerStack) or (isinstance(module, VisionEncoder) and index > 0)):
        return "none"  # engines checkpoint transformer blocks only: no embedding, projector, linear or head
    if not mode.startswith("every:"):
        return mode
    if isinstance(module, TransformerStack):
        return recompute_at(mode, index)
    if isinstance(module, VisionEncoder) and index > 0:
        return recompute_at(mode, index - 1)
    return "none"


def _layer_kind(module: Module, index: int) -> int:
    """A representative of the layers of ``module`` that cost what layer ``index`` costs.

    Blocks differ only in being the last (a final norm) or, for a stack with
    cross-attention, in attending across; a vision encoder's layer 0 is its
    patch embedding.
    """
    depth = layer_depth(module)
    if index in (0, depth - 1):
        return index
    if isinstance(module, TransformerStack) and module.cross_attention is not None:
        every = module.cross_attention.every
        return next(i for i in range(1, depth - 1) if (i % every == 0) == (index % every == 0))
    return 1
