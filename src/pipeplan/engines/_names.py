"""How the model's own code names each pipeline layer, as every engine's export reads it.

    >>> from pipeplan import presets
    >>> from pipeplan.engines import layer_names_in_reference, reference_of
    >>> spec = presets.get("gpt-1.5b")
    >>> [name.fqns for name in layer_names_in_reference(spec)[:2]]
    [('embedding.word_embeddings', 'embedding.position_embeddings'), ('decoder.layers.0',)]
    >>> reference_of(spec)
    'megatron-gpt'

A module records its paths on its dataclass (``fqn``: templates with ``{i}`` for a
block; ``fqn_first`` / ``fqn_last``: paths that go with its first / last layer;
``role``, see :mod:`pipeplan.models.modules`); a module without them gets an
invented name ``f"{module.name}.{i}"`` (:attr:`LayerName.invented`, said by
:func:`invented_note`) and role ``"other"`` — except in a plain GPT
(:func:`gpt_roles`: an embedding, one transformer stack, an LM head), whose layers
are Megatron's embedding, decoder layers and loss whatever their paths. A joint
pair's layer (π0's Gemma and action-expert layer ``i``) carries both stacks' paths.

    >>> from pipeplan.models.spec import ModelSpec
    >>> plain = ModelSpec.from_dict({"name": "gpt", "modules": [
    ...     {"kind": "embedding", "name": "embedding", "vocab_size": 512, "hidden_size": 64, "tokens": 32},
    ...     {"kind": "transformer", "name": "layers", "num_layers": 2, "hidden_size": 64, "num_heads": 4,
    ...      "seq_length": 32, "ffn_hidden_size": 256},
    ...     {"kind": "lm_head", "name": "lm_head", "vocab_size": 512, "hidden_size": 64, "tokens": 32}]})
    >>> gpt_roles(plain)
    {'embedding': 'embedding', 'layers': 'decoder', 'lm_head': 'loss'}
    >>> [(name.fqns[0], name.role) for name in layer_names_in_reference(plain)][:2]
    [('embedding.0', 'embedding'), ('layers.0', 'decoder')]

A plan without reference names (a profile, layer counts) gets them guessed by
:func:`layer_names`: each of the plan's own layer names is taken as a module path,
with the role guessed from its module: an ``embedding``/``tok_embeddings`` first
layer is the embedding, an ``output_layer``/``lm_head`` last layer the loss, every
other one a decoder layer. Which roles an engine can run is the engine's own
(:func:`pipeplan.engines.megatron.megatron_port`). torch-free.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ..errors import InvalidInputError
from ..models.modules import Embedding, LMHead, Module, Role, TransformerStack, VisionEncoder, layer_depth
from ..models.spec import ModelSpec
from ..plan import Plan

__all__ = ["LayerName", "Role", "layer_names_in_reference", "reference_of", "layer_names", "stage_fqns",
           "module_of", "gpt_roles", "invented_note"]

_EMBEDDING_MODULES = ("embedding", "embed", "embeddings", "tok_embeddings", "word_embeddings", "wte")
_LOSS_MODULES = ("output_layer", "lm_head", "loss", "output", "head")


@dataclass(frozen=True)
class LayerName:
    """How the model's reference implementation names one pipeline layer.

    Attributes:
        fqns: module paths (fully qualified names) in the reference code that this
            pipeline layer covers, e.g. ``("model.layers.3",)``; a joint pair's layer
            (π0's Gemma + action expert at one depth) has both stacks' paths.
        role: for Megatron-LM: ``"decoder"`` = a transformer layer counted by
            ``--num-layers``; ``"embedding"`` / ``"loss"`` = what
            ``--account-for-embedding-in-pipeline-split`` /
            ``--account-for-loss-in-pipeline-split`` treat as a layer (the word
            embedding; the final norm + output layer + loss); ``"other"`` = no
            Megatron equivalent (vision tower, projector, action head ...).
        invented: the paths are pipeplan's own (``f"{module.name}.{i}"``): the spec
            does not record where the module lives in the model's code (its ``fqn``).
    """

    fqns: tuple[str, ...]
    role: Role
    invented: bool = field(default=False, compare=False)


# ------------------------------------------------------------------ from a model spec
def _paths(module: Module, index: int) -> tuple[str, ...]:
    """The paths of layer ``index`` of ``module`` (generated when the module records none)."""
    if module.fqn is None:
        return (f"{module.name}.{index}",)
    if not isinstance(module, (TransformerStack, VisionEncoder)):
        return module.fqn
    depth = layer_depth(module)
    block = index - 1 if isinstance(module, VisionEncoder) else index
    paths: list[str] = []
    if index == 0 and module.fqn_first:
        paths += module.fqn_first
    if block >= 0:
        paths += [template.format(i=block) for template in module.fqn]
    if index == depth - 1 and module.fqn_last:
        paths += module.fqn_last
    return tuple(paths)


def gpt_roles(spec: ModelSpec) -> dict[str, Role] | None:
    """Megatron-LM's roles of a plain GPT's modules, by module name; ``None`` when ``spec`` is no plain GPT.

    A plain GPT is what Megatron-LM's ``GPTModel`` builds (megatron/core/models/gpt/gpt_model.py:
    ``embedding``, ``decoder.layers``, ``output_layer``): exactly three modules, an
    :class:`~pipeplan.models.modules.Embedding` first, one
    :class:`~pipeplan.models.modules.TransformerStack` reading it (no cross-attention,
    no joint partner), an :class:`~pipeplan.models.modules.LMHead` last reading the
    stack. Its roles: ``"embedding"``, ``"decoder"``, ``"loss"`` — whatever paths the
    spec records or does not. A role the spec records itself is kept
    (:func:`layer_names_in_reference` reads it first).
    """
    modules = spec.modules
    if len(modules) != 3:
        return None
    embedding, stack, head = modules
    if not (isinstance(embedding, Embedding) and isinstance(stack, TransformerStack) and isinstance(head, LMHead)):
        return None
    if stack.cross_attention is not None or stack.joint_with is not None or stack.repeats != 1:
        return None
    if spec.inputs_of(embedding) or spec.inputs_of(stack) != (embedding.name,) or spec.inputs_of(head) != (stack.name,):
        return None
    return {embedding.name: "embedding", stack.name: "decoder", head.name: "loss"}


def _role(module: Module, inferred: dict[str, Role] | None) -> Role:
    if module.role is not None and module.fqn is not None:
        return module.role
    if inferred is not None:
        return inferred[module.name]
    return "other"


def layer_names_in_reference(spec: ModelSpec) -> list[LayerName]:
    """One :class:`LayerName` per pipeline layer of ``spec``, in pipeline order.

    ``len(result) == len(layer_costs(spec, 1))``. A module without a recorded path
    gets a generated one (``f"{module.name}.{i}"``, ``i`` the module's layer index)
    and role ``"other"``. A joint pair's layer lists the first stack's paths, then
    its partner's, and has the first stack's role.
    """
    partners = {m.joint_with: m for m in spec.modules if isinstance(m, TransformerStack) and m.joint_with}
    inferred = gpt_roles(spec)
    names: list[LayerName] = []
    for module in spec.modules:
        if isinstance(module, TransformerStack) and module.joint_with:
            continue
        partner = partners.get(module.name)
        invented = module.fqn is None or (partner is not None and partner.fqn is None)
        for index in range(layer_depth(module)):
            paths = _paths(module, index) + (_paths(partner, index) if partner is not None else ())
            names.append(LayerName(paths, _role(module, inferred), invented))
    return names


def invented_note(names: Sequence[LayerName] | None) -> str:
    """One line saying which module paths pipeplan invented (``""`` when none were).

    A spec module without ``fqn`` gets paths ``f"{module.name}.{i}"``; an export that
    names modules (torch, torchtitan, DeepSpeed) then names modules the user's model
    may not have. The line names the modules and the field that gives their real paths.
    """
    modules = list(dict.fromkeys(module_of(name.fqns[0]) for name in names or () if name.invented and name.fqns))
    if not modules:
        return ""
    shown = ", ".join(modules[:6]) + (f" and {len(modules) - 6} more" if len(modules) > 6 else "")
    return (f"the module paths of {shown} are invented ({modules[0]}.0, {modules[0]}.1, ...): the spec records no "
            "\"fqn\" for them; set each module's \"fqn\" to its path in your model (docs/exports.md) before using "
            "these files")


def reference_of(spec: ModelSpec) -> str | None:
    """The implementation the paths name (``"megatron-gpt"``, ``"hf-llama"``, ``"openpi-pytorch"``, ...).

    Read from the spec's reference training defaults
    (:attr:`~pipeplan.models.training.ReferenceTraining.implementation`); ``None``
    when the spec records none.
    """
    return None if spec.training is None else spec.training.implementation


# ------------------------------------------------------------------ for a plan
def module_of(name: str) -> str:
    """The module part of a pipeplan layer name: ``"embedding.0"`` → ``"embedding"``."""
    head, _, tail = name.rpartition(".")
    return head if head and tail.isdigit() else name


def _guessed(plan: Plan) -> list[LayerName]:
    names = list(plan.layer_names) or [f"layers.{i}" for i in range(plan.num_layers)]
    roles: list[Role] = ["decoder"] * len(names)
    if len(names) > 1 and module_of(names[0]) in _EMBEDDING_MODULES:
        roles[0] = "embedding"
    if len(names) > 1 and module_of(names[-1]) in _LOSS_MODULES:
        roles[-1] = "loss"
    return [LayerName(fqns=(name,), role=role) for name, role in zip(names, roles)]


def layer_names(plan: Plan, names: Sequence[LayerName] | None) -> list[LayerName]:
    """One :class:`LayerName` per layer of ``plan``: ``names`` checked, or guessed from the plan.

    Raises:
        InvalidInputError: ``names`` does not hold one entry per layer.
    """
    if names is None:
        return _guessed(plan)
    names = list(names)
    if len(names) != plan.num_layers:
        raise InvalidInputError(
            f"the reference layer names hold {len(names)} entries, the plan has {plan.num_layers} layers "
            "(one name per pipeline layer)"
        )
    return names


def stage_fqns(plan: Plan, names: Sequence[LayerName] | None) -> list[list[str]]:
    """The module paths each stage holds, in stage order (a joint layer gives all its paths)."""
    resolved = layer_names(plan, names)
    return [[fqn for index in span for fqn in resolved[index].fqns] for span in plan.layer_ranges]
