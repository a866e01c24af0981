"""How the model's own code names each pipeline layer, as the exports read it.

    from pipeplan.planner.export._names import layer_names
    names = layer_names(plan, None)        # from the plan's layer names when no reference names are given
    [n.role for n in names]                # ['embedding', 'decoder', ..., 'loss']

The reference names are :class:`pipeplan.models.engine_names.LayerName` (module paths
and a Megatron role per pipeline layer). Without them, each of the plan's own layer
names is taken as a module path, with the role guessed from its module: an
``embedding``/``tok_embeddings`` first layer is the embedding, an
``output_layer``/``lm_head`` last layer the loss, every other one a decoder layer.
"""

from __future__ import annotations

from collections.abc import Sequence

from ...errors import InvalidInputError
from ...models.engine_names import LayerName, Role
from ...plan import Plan

__all__ = ["LayerName", "layer_names", "stage_fqns", "module_of"]

_EMBEDDING_MODULES = ("embedding", "embed", "embeddings", "tok_embeddings", "word_embeddings", "wte")
_LOSS_MODULES = ("output_layer", "lm_head", "loss", "output", "head")


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
