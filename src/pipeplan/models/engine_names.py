"""How a model's reference implementation names each pipeline layer (module paths and Megatron roles).

    >>> from pipeplan import presets
    >>> from pipeplan.models.engine_names import layer_names_in_reference, megatron_port, reference_of
    >>> spec = presets.get("gpt-1.5b")
    >>> [name.fqns for name in layer_names_in_reference(spec)[:2]]
    [('embedding.word_embeddings', 'embedding.position_embeddings'), ('decoder.layers.0',)]
    >>> reference_of(spec), megatron_port(spec)
    ('megatron-gpt', True)

A module records its paths on its dataclass (``fqn``: templates with ``{i}`` for a
block; ``fqn_first`` / ``fqn_last``: paths that go with its first / last layer;
``role``, see :mod:`pipeplan.models.modules`); a module without them gets a
generated name ``f"{module.name}.{i}"`` and role ``"other"``. A joint pair's layer
(π0's Gemma and action-expert layer ``i``) carries both stacks' paths. An exporter
(a torchtitan/torch split, Megatron-LM's ``--num-layers`` and
``--account-for-embedding/loss-in-pipeline-split``) reads these. torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass

from .modules import Module, Role, TransformerStack, VisionEncoder, layer_depth
from .spec import ModelSpec

__all__ = ["LayerName", "Role", "layer_names_in_reference", "megatron_port", "reference_of"]

_MEGATRON_ROLES = ("embedding", "decoder", "loss")


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
    """

    fqns: tuple[str, ...]
    role: Role


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


def _role(module: Module) -> Role:
    return "other" if module.fqn is None or module.role is None else module.role


def layer_names_in_reference(spec: ModelSpec) -> list[LayerName]:
    """One :class:`LayerName` per pipeline layer of ``spec``, in pipeline order.

    ``len(result) == len(layer_costs(spec, 1))``. A module without a recorded path
    gets a generated one (``f"{module.name}.{i}"``, ``i`` the module's layer index)
    and role ``"other"``. A joint pair's layer lists the first stack's paths, then
    its partner's, and has the first stack's role.
    """
    partners = {m.joint_with: m for m in spec.modules if isinstance(m, TransformerStack) and m.joint_with}
    names: list[LayerName] = []
    for module in spec.modules:
        if isinstance(module, TransformerStack) and module.joint_with:
            continue
        partner = partners.get(module.name)
        for index in range(layer_depth(module)):
            paths = _paths(module, index) + (_paths(partner, index) if partner is not None else ())
            names.append(LayerName(paths, _role(module)))
    return names


def reference_of(spec: ModelSpec) -> str | None:
    """The implementation the paths name (``"megatron-gpt"``, ``"hf-llama"``, ``"openpi-pytorch"``, ...).

    Read from the spec's reference training defaults
    (:attr:`~pipeplan.models.training.ReferenceTraining.implementation`); ``None``
    when the spec records none.
    """
    return None if spec.training is None else spec.training.implementation


def megatron_port(spec: ModelSpec) -> bool:
    """True when every layer's role is embedding, decoder or loss (the model runs as a Megatron GPT)."""
    return all(name.role in _MEGATRON_ROLES for name in layer_names_in_reference(spec))
