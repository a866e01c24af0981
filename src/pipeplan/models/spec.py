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

Module kinds (frozen dataclasses in :mod:`pipeplan.models.modules`, re-exported here;
the per-layer arithmetic lives in ``pipeplan.models._layer_math``, the file schema
(to and from dicts, field checks, JSON/YAML) in ``pipeplan.models._schema``):

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

import functools

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from .._validation import positive_float
from ..errors import InvalidInputError
from ..hardware import Device
from ..layers import LayerProfile
from ..operations import Op
from ._layer_math import (
    Part,
    Shape,
    apply_training,
    block_part,
    embedding_part,
    head_part,
    patch_part,
    projector_part,
)
from ._layer_ops import PassOps, apply_training_ops, module_ops
from ._schema import check_module, module_record, modules_from_payload, read_payload
from .training import ReferenceTraining
from .modules import (
    ACTIVATION_BYTES,
    CrossAttention,
    Embedding,
    Linear,
    LMHead,
    Module,
    Projector,
    TransformerStack,
    VisionEncoder,
)

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

Recompute = Literal["none", "selective", "full"]


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
    training: ReferenceTraining | None = field(default=None, compare=False)
    _index: Mapping[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.modules, (tuple, list)) or not self.modules:
            raise InvalidInputError(f"model {self.name!r}: modules must be a non-empty list")
        object.__setattr__(self, "modules", tuple(self.modules))
        index: dict[str, int] = {}
        for position, module in enumerate(self.modules):
            check_module(module, position)
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
    @functools.cached_property
    def _parameter_counts(self) -> dict[str, float]:
        """Each module's own parameters, computed once (the planner asks thousands of times)."""
        shape = Shape(1, "none", 1, False)
        counts: dict[str, float] = {}
        for module in self.modules:
            if isinstance(module, LMHead):
                counts[module.name] = 0.0 if module.tied_to else float(module.vocab_size * module.hidden_size)
            else:
                counts[module.name] = sum(self._parts(module, shape, index)[0].params
                                          for index in range(_depth(module)))
        return counts

    def _own_parameters(self, module: Module) -> float:
        return self._parameter_counts[module.name]

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
        return ModelSpec(self.name, modules, self.description, self.training)

    # ---------------------------------------------------------------- costs
    def _parts(self, module: Module, shape: Shape, index: int) -> list[Part]:
        """Costs of layer ``index`` of ``module`` (a joint stack's partner part excluded)."""
        if isinstance(module, VisionEncoder):
            if index == 0:
                return [patch_part(module, shape)]
            return [block_part(module.blocks(), shape, layer_index=index - 1, kv_tokens=module.blocks().seq_length,
                                kv_width=module.hidden_size, extra_keys=0)]
        if isinstance(module, TransformerStack):
            cross = module.cross_attention
            if cross is not None and index % cross.every == 0:
                source = self.module(cross.source)
                tokens, width = source.output_shape()
                width = cross.kv_hidden_size or width
                return [block_part(module, shape, layer_index=index, kv_tokens=tokens, kv_width=width, extra_keys=0)]
            extra = 0
            if module.joint_with is not None:
                extra = self.module(module.joint_with).seq_length  # type: ignore[union-attr]
            return [block_part(module, shape, layer_index=index, kv_tokens=module.seq_length,
                                kv_width=module.hidden_size, extra_keys=extra)]
        if isinstance(module, Projector):
            return [projector_part(module, shape)]
        if isinstance(module, Embedding):
            return [embedding_part(module, shape)]
        return [head_part(module, shape)]

    def layer_costs(
        self,
        micro_batch_size: int,
        *,
        recompute: Recompute | Mapping[str, Recompute] = "selective",
        tensor_parallel: int = 1,
        sequence_parallel: bool = False,
    ) -> list[LayerCost]:
        """Per pipeline layer F, B, W FLOPs and bytes for one microbatch.

        Args:
            micro_batch_size: examples per microbatch ``b`` (>= 1).
            recompute: ``"none"``, ``"selective"`` (default: the attention core is
                recomputed, as flash attention does) or ``"full"``; or a mode per
                module name (a module not named: ``"none"``).
            tensor_parallel: tensor-parallel degree ``t`` (FLOPs and params per rank).
            sequence_parallel: with ``t > 1``, norms and dropouts are split too.

        Returns:
            One :class:`LayerCost` per pipeline layer, in order. A joint pair
            (``joint_with``) gives one layer per depth holding both stacks.
        """
        modes = self.recompute_modes(recompute)
        shape = _check_shape(micro_batch_size, "none", tensor_parallel, sequence_parallel)
        self._check_tensor_parallel(shape.tensor_parallel)
        joint = {m.joint_with: m for m in self.modules if isinstance(m, TransformerStack) and m.joint_with}
        rows: list[tuple[str, tuple[str, ...], dict[str, float], float, float, PassOps]] = []
        owners: list[tuple[str, ...]] = []
        seen: dict[tuple[str, int, bool], list[tuple[dict[str, float], float, PassOps]]] = {}
        for module in self.modules:
            if isinstance(module, TransformerStack) and module.joint_with:
                continue
            partner = joint.get(module.name)
            for index in range(_depth(module)):
                names = (module.name,) if partner is None else (module.name, partner.name)
                totals = {"forward": 0.0, "input_grad": 0.0, "weight_grad": 0.0, "activation": 0.0, "stash": 0.0}
                params = trainable = 0.0
                kernels = PassOps()
                for member in ((module,) if partner is None else (module, partner)):
                    backward = self.needs_grad(member.name) or (
                        member is partner and self.needs_grad(module.name)
                    )
                    trains = self.trains(member.name)
                    # identical layers cost the same: compute one of each kind once per call
                    key = (member.name, _layer_kind(member, index), backward)
                    if key not in seen:
                        seen[key] = []
                        for part in self._parts(member, shape, index):
                            costs = apply_training(part, trains=trains, needs_backward=backward,
                                                   recompute=modes[member.name])
                            run = apply_training_ops(module_ops(member, shape, index, self.module), trains=trains,
                                                     needs_backward=backward, input_is_data=part.input_is_data,
                                                     recompute=modes[member.name])
                            seen[key].append((costs, part.params, run))
                    for costs, part_params, run in seen[key]:
                        for name in totals:
                            totals[name] += costs[name]
                        params += part_params
                        trainable += part_params if trains else 0.0
                        kernels = PassOps(kernels.forward + run.forward, kernels.input_grad + run.input_grad,
                                          kernels.weight_grad + run.weight_grad)
                label = "+".join(names)
                rows.append((f"{label}.{index}", names, totals, params, trainable, kernels))
                owners.append(names)
        sends = self._send_bytes(shape, owners)
        tied = {m.name: f"{self.module(m.tied_to).name}.0" for m in self.modules if isinstance(m, LMHead) and m.tied_to}
        return [
            LayerCost(name, names, c["forward"], c["input_grad"], c["weight_grad"], p, tp,
                      c["activation"], c["stash"], send, k.forward, k.input_grad, k.weight_grad,
                      tied_to=tied.get(names[0]))
            for (name, names, c, p, tp, k), send in zip(rows, sends)
        ]

    def recompute_modes(self, recompute: Recompute | Mapping[str, Recompute]) -> dict[str, Recompute]:
        """The recompute mode of every module: one mode for all, or a mode per module name (others ``"none"``).

        Raises:
            InvalidInputError: an unknown mode or module name.
        """
        if isinstance(recompute, str):
            _check_shape(1, recompute, 1, False)
            return {module.name: recompute for module in self.modules}
        out: dict[str, Recompute] = {module.name: "none" for module in self.modules}
        for name, mode in recompute.items():
            self.module(name)
            _check_shape(1, mode, 1, False)
            out[name] = mode
        return out

    def recompute_units(self) -> list[tuple[str, ...]]:
        """The modules whose recompute mode changes a cost (transformer blocks), as pipeline-layer owners.

        A joint pair (``joint_with``) runs as one layer per depth and is one unit:
        ``("llm", "action_expert")``.
        """
        partners = {m.joint_with: m.name for m in self.modules if isinstance(m, TransformerStack) and m.joint_with}
        units: list[tuple[str, ...]] = []
        for module in self.modules:
            if isinstance(module, TransformerStack) and module.joint_with:
                continue
            if isinstance(module, (TransformerStack, VisionEncoder)):
                partner = partners.get(module.name)
                units.append((module.name,) if partner is None else (module.name, partner))
        return units

    def tensor_parallel_traffic(
        self, micro_batch_size: int, *, recompute: Recompute | Mapping[str, Recompute] = "selective",
    ) -> list[tuple[int, int, float, float]]:
        """Per pipeline layer, the tensor-parallel collectives of one microbatch.

        Returns ``(forward passes, backward passes, forward bytes, backward bytes)``
        per layer, the bytes summed over the passes.

        Megatron-LM's tensor parallelism (Shoeybi et al. 2019, §3; with sequence
        parallelism, Korthikanti et al. 2022, §4.2.2) puts, in every transformer
        block, two collectives in the forward (after the attention and after the
        MLP: an all-reduce, or with sequence parallelism an all-gather before and
        a reduce-scatter after each, the same ring volume) and two in the
        backward. Counted here as **ring passes** (an all-reduce is two, an
        all-gather or reduce-scatter one) of the block's full activation
        ``b · repeats · tokens · h · 2`` bytes: 4 forward, 4 backward, and 4 more
        in the backward under ``"full"`` recompute (the forward runs again).
        The word embedding, the LM head, a projector or linear module and a
        patch embedding have one pass each way (the vocabulary-parallel
        embedding's all-reduce of its output, the head's all-gather of its input).
        A layer without a backward has no backward passes. Joint pairs add up.
        """
        modes = self.recompute_modes(recompute)
        shape = _check_shape(micro_batch_size, "none", 1, False)
        joint = {m.joint_with: m for m in self.modules if isinstance(m, TransformerStack) and m.joint_with}
        out: list[tuple[int, int, float, float]] = []
        for module in self.modules:
            if isinstance(module, TransformerStack) and module.joint_with:
                continue
            partner = joint.get(module.name)
            for index in range(_depth(module)):
                forward = backward = 0
                forward_bytes = backward_bytes = 0.0
                for member in ((module,) if partner is None else (module, partner)):
                    grads = self.needs_grad(member.name) or (member is partner and self.needs_grad(module.name))
                    block = isinstance(member, TransformerStack) or (isinstance(member, VisionEncoder) and index > 0)
                    passes = 4 if block else 1
                    extra = passes if block and modes[member.name] == "full" else 0
                    size = self._hidden_bytes(member, shape)
                    back = (passes + extra) if grads else 0
                    forward += passes
                    backward += back
                    forward_bytes += passes * size
                    backward_bytes += back * size
                out.append((forward, backward, forward_bytes, backward_bytes))
        return out

    def _check_tensor_parallel(self, t: int) -> None:
        """Tensor parallelism splits whole heads and the MLP evenly (Megatron-LM requires it)."""
        if t == 1:
            return
        for module in self.modules:
            if isinstance(module, (TransformerStack, VisionEncoder)):
                kv = module.kv_heads if isinstance(module, TransformerStack) else module.num_heads
                for what, count in (("attention heads", module.num_heads), ("key/value heads", kv),
                                    ("FFN width", module.ffn_hidden_size)):
                    if count % t and not (what == "key/value heads" and t % count == 0):
                        raise InvalidInputError(
                            f"tensor_parallel={t} must divide module {module.name!r}'s {what} ({count})")

    def _output_bytes(self, module: Module, shape: Shape) -> float:
        tokens, width = module.output_shape()
        return float(shape.micro_batch_size * module.repeats * tokens * width * ACTIVATION_BYTES)

    def _hidden_bytes(self, module: Module, shape: Shape) -> float:
        if isinstance(module, VisionEncoder):
            blocks = module.blocks()
            return float(shape.micro_batch_size * module.repeats * blocks.tokens * module.hidden_size * ACTIVATION_BYTES)
        if isinstance(module, TransformerStack):
            return float(shape.micro_batch_size * module.repeats * module.tokens * module.hidden_size * ACTIVATION_BYTES)
        return self._output_bytes(module, shape)

    def _send_bytes(self, shape: Shape, owners: list[tuple[str, ...]]) -> list[float]:
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
                    costs = apply_training(part, trains=self.trains(module.name), needs_backward=backward,
                                            recompute=recompute)
                    total += costs["forward"] + costs["input_grad"] + costs["weight_grad"]
            out[module.name] = total
        return out

    def to_layer_profile(
        self,
        hardware: Device,
        micro_batch_size: int,
        *,
        recompute: Recompute | Mapping[str, Recompute] = "selective",
        tensor_parallel: int = 1,
        sequence_parallel: bool = False,
    ) -> LayerProfile:
        """The :class:`~pipeplan.layers.LayerProfile` of this model on ``hardware``.

        Times are milliseconds per microbatch: each layer's F, B and W kernels
        timed by :meth:`pipeplan.hardware.Device.op_milliseconds` (with the flat
        model, ``achievable_fraction`` set, ``1e3 · FLOPs / achievable_flops``).
        ``backward`` is B + W time, ``weight`` the W part; ``params`` are per
        tensor-parallel rank; ``trainable_params``, ``weight_stash_bytes`` and
        ``send_bytes`` carry the frozen, split-backward and boundary information.

        Args:
            hardware: a :class:`~pipeplan.hardware.Device` (or anything with a
                positive ``achievable_flops`` in FLOP/s: the flat model).
            micro_batch_size, recompute, tensor_parallel, sequence_parallel: as in
                :meth:`layer_costs`.
        """
        layers = self.layer_costs(micro_batch_size, recompute=recompute, tensor_parallel=tensor_parallel,
                                  sequence_parallel=sequence_parallel)
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

    # ------------------------------------------------------------------ I/O
    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (the schema :meth:`from_dict` reads)."""
        modules = [module_record(module) for module in self.modules]
        return {"name": self.name, "description": self.description, "modules": modules}

    @classmethod
    def from_dict(cls, payload: Mapping[str, Any]) -> ModelSpec:
        """Build a spec from :meth:`to_dict`'s schema (see docs/presets.md).

        Raises:
            InvalidInputError: an unknown ``kind`` or key, a missing field, a bad value.
        """
        modules = modules_from_payload(payload)
        return cls(str(payload.get("name", "model")), modules, str(payload.get("description", "")))

    @classmethod
    def from_file(cls, path: str | Path) -> ModelSpec:
        """Load a ``.json`` spec (or ``.yaml`` / ``.yml`` when PyYAML is installed).

        Raises:
            InvalidInputError: a missing file, an unknown suffix, unparsable text, or
                a bad spec (see :meth:`from_dict`).
        """
        file = Path(path)
        payload = read_payload(file)
        try:
            return cls.from_dict(payload)
        except TypeError as error:
            raise InvalidInputError(f"spec file {str(file)!r}: {error}") from None


def _layer_kind(module: Module, index: int) -> int:
    """A representative of the layers of ``module`` that cost what layer ``index`` costs.

    Blocks differ only in being the last (a final norm) or, for a stack with
    cross-attention, in attending across; a vision encoder's layer 0 is its
    patch embedding.
    """
    depth = _depth(module)
    if index in (0, depth - 1):
        return index
    if isinstance(module, TransformerStack) and module.cross_attention is not None:
        every = module.cross_attention.every
        return next(i for i in range(1, depth - 1) if (i % every == 0) == (index % every == 0))
    return 1


def _depth(module: Module) -> int:
    if isinstance(module, VisionEncoder):
        return 1 + module.num_layers
    if isinstance(module, TransformerStack):
        return module.num_layers
    return 1


def _check_shape(micro_batch_size: object, recompute: object, tensor_parallel: object,
                 sequence_parallel: object) -> Shape:
    from .._validation import positive_int

    if recompute not in ("none", "selective", "full"):
        raise InvalidInputError(f"recompute must be 'none', 'selective' or 'full', got {recompute!r}")
    return Shape(positive_int("micro_batch_size", micro_batch_size), str(recompute),
                  positive_int("tensor_parallel", tensor_parallel), bool(sequence_parallel))

