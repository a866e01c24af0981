"""A model spec file at another sample shape: the mix's shape fields applied to its modules.

A preset is a builder that takes ``cameras``, ``text_tokens``, ... (:mod:`pipeplan.presets`);
a spec file (``--spec``) is a flat list of modules with their token counts written out.
:func:`spec_shapes` says which shape fields a spec takes and its own value of each, and
:func:`reshape_spec` rebuilds it at another shape::

    from pipeplan.models.spec import ModelSpec
    from pipeplan.batches.spec_shapes import reshape_spec, spec_shapes
    spec = ModelSpec.from_file("examples/model_spec.json")
    spec_shapes(spec)                       # {'cameras': 2, 'image_size': 224, 'text_tokens': 32, 'action_horizon': 16}
    one = reshape_spec(spec, {"cameras": 1})
    one.module("llm").seq_length            # 228: 196 patch tokens + 32 text tokens (424 at 2 cameras)

Which modules a field sets (the *sources*):

* ``cameras``, ``image_size``: every ``vision_encoder`` (its ``cameras``, its ``image_size``);
* ``text_tokens``: every ``embedding`` (its ``tokens``);
* ``action_horizon``: every ``projector`` that reads data only (``inputs: []``) and whose
  name contains ``action`` (its ``tokens``; an ``output_tokens`` or a linear's own
  ``tokens`` at least as large keeps its offset: π0's 1 + horizon).

Then the tokens follow the module graph: a module whose inputs (``inputs``, default the
previous module) now give ``d`` tokens more (or fewer) than at the spec's own shape, and
which at the spec's shape runs on at least as many tokens as its inputs give (a
concatenation: an LLM over image and text tokens, a projector over every patch, an LM
head over every position), runs on ``d`` more: a ``transformer``'s ``seq_length``
(one sequence per example), a ``projector``'s ``tokens``, an ``lm_head``'s ``tokens``,
and an ``output_tokens`` as large as those. A module that runs on fewer tokens than
its inputs give (a resampler, pooled tokens, a loss on some positions) keeps its
count. A cross-attention source is read from its module as reshaped. torch-free.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any, TypeGuard

from ..errors import InvalidInputError
from ..models.modules import Embedding, LMHead, Module, Projector, TransformerStack, VisionEncoder
from ..models.spec import ModelSpec

__all__ = ["spec_shapes", "reshape_spec", "missing_field"]


def _is_action_input(module: Module) -> TypeGuard[Projector]:
    return isinstance(module, Projector) and module.inputs == () and "action" in module.name.lower()


def spec_shapes(spec: ModelSpec) -> dict[str, int]:
    """The shape fields ``spec`` takes and its own value of each (the first source module's)."""
    out: dict[str, int] = {}
    vision = [m for m in spec.modules if isinstance(m, VisionEncoder)]
    if vision:
        out["cameras"] = vision[0].cameras
        out["image_size"] = vision[0].image_size
    embeddings = [m for m in spec.modules if isinstance(m, Embedding)]
    if embeddings:
        out["text_tokens"] = embeddings[0].tokens
    actions = [m for m in spec.modules if _is_action_input(m)]
    if actions:
        out["action_horizon"] = actions[0].tokens
    return out


_WHY_MISSING = {
    "cameras": "no vision_encoder module",
    "image_size": "no vision_encoder module",
    "text_tokens": "no embedding module",
    "action_horizon": "no projector named *action* that reads data only (inputs: [])",
}


def missing_field(spec: ModelSpec, field: str) -> str | None:
    """Why ``spec`` cannot take shape field ``field`` (``"no embedding module"``), or ``None`` if it can."""
    if field in spec_shapes(spec):
        return None
    return _WHY_MISSING.get(field, "not a shape field")


def _offset(value: int | None, old: int, new: int) -> int | None:
    """A count that was at least ``old`` keeps its offset above it when ``old`` becomes ``new``."""
    return value if value is None or value < old else value + new - old


def _set_source(module: Module, shape: Mapping[str, int]) -> Module:
    """``module`` with the fields it is a source of set."""
    if isinstance(module, VisionEncoder) and ("cameras" in shape or "image_size" in shape):
        return replace(module, cameras=shape.get("cameras", module.cameras),
                       image_size=shape.get("image_size", module.image_size))
    if isinstance(module, Embedding) and "text_tokens" in shape:
        return replace(module, tokens=shape["text_tokens"])
    if isinstance(module, Projector) and "action_horizon" in shape and _is_action_input(module):
        return _projector_tokens(module, shape["action_horizon"])
    return module


def _projector_tokens(module: Projector, tokens: int) -> Projector:
    old = module.tokens
    linears = tuple(replace(linear, tokens=_offset(linear.tokens, old, tokens)) for linear in module.linears)
    return replace(module, tokens=tokens, linears=linears, output_tokens=_offset(module.output_tokens, old, tokens))


def _follow(module: Module, varied: int, delta: int) -> Module:
    """``module`` when ``varied`` of the tokens its inputs give came from the sources and now number ``delta`` more."""
    if isinstance(module, TransformerStack):
        if module.sequences != 1 or module.seq_length < varied:
            return module
        return replace(module, seq_length=module.seq_length + delta,
                       output_tokens=_offset(module.output_tokens, varied, varied + delta))
    if isinstance(module, Projector):
        return module if module.tokens < varied else _projector_tokens(module, module.tokens + delta)
    if isinstance(module, LMHead):
        return module if module.tokens < varied else replace(module, tokens=module.tokens + delta)
    return module


def _varied_out(module: Module, updated: Module, varied_in: int) -> int:
    """Of ``module``'s output tokens at the spec's shape, how many came from the sources."""
    if updated is module:
        return 0
    if isinstance(module, (VisionEncoder, Embedding)):
        return module.output_shape()[0]
    if isinstance(module, Projector) and _is_action_input(module):
        return module.tokens
    return min(varied_in, module.output_shape()[0])


def reshape_spec(spec: ModelSpec, shape: Mapping[str, int]) -> ModelSpec:
    """``spec`` at another sample shape (``{"cameras": 1}``); see the module doc for the rules.

    Raises:
        InvalidInputError: a field the spec does not take (naming what it lacks), or a shape
            its modules refuse (an image size the patch does not divide, a count below 1).
    """
    for key in shape:
        why = missing_field(spec, key)
        if why is not None:
            raise InvalidInputError(f"spec {spec.name!r} has no shape field {key!r} ({why}); its shape fields: "
                                    f"{', '.join(spec_shapes(spec)) or 'none'}")
    if all(spec_shapes(spec).get(key) == value for key, value in shape.items()):
        return spec
    old_out = {m.name: m.output_shape()[0] for m in spec.modules}
    new_out: dict[str, int] = {}
    varied: dict[str, int] = {}
    modules: list[Any] = []
    for module in spec.modules:
        reads = [name for name in spec.inputs_of(module) if name in old_out]
        varied_in = sum(varied[name] for name in reads)
        updated = _set_source(module, shape)
        if updated is module:
            delta = sum(new_out[name] - old_out[name] for name in reads)
            if delta:
                updated = _follow(module, varied_in, delta)
        for value in _counts(updated):
            if value < 1:
                raise InvalidInputError(f"spec {spec.name!r} at {_words(shape)}: module {module.name!r} would run on "
                                        f"{value} tokens")
        modules.append(updated)
        new_out[module.name] = updated.output_shape()[0]
        varied[module.name] = _varied_out(module, updated, varied_in)
    try:
        return ModelSpec(name=spec.name, modules=tuple(modules), description=spec.description,
                         training=spec.training, defaulted=spec.defaulted, assumed=spec.assumed)
    except InvalidInputError as error:
        raise InvalidInputError(f"spec {spec.name!r} at {_words(shape)}: {error}") from None


def _counts(module: Module) -> list[int]:
    if isinstance(module, TransformerStack):
        return [module.seq_length] + ([module.output_tokens] if module.output_tokens is not None else [])
    if isinstance(module, Projector):
        return [module.tokens] + [t for t in [module.output_tokens, *(lin.tokens for lin in module.linears)]
                                  if t is not None]
    if isinstance(module, LMHead):
        return [module.tokens]
    return []


def _words(shape: Mapping[str, int]) -> str:
    return ", ".join(f"{key}={value}" for key, value in shape.items())
