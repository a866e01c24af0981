"""Loading a user's model factory and cutting an ``nn.Sequential`` into stages (torch).

    from pipeplan.models.loading import load_model, split_sequential
    model, loss_fn, make_batch = load_model("pipeplan.models.vla:build_default_model")
    stages = split_sequential(model, [3, 4, 3])
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Sequence
from typing import Any

from torch import nn

from ..errors import InvalidInputError
from . import BUILTIN_MODELS, DEFAULT_MODEL

__all__ = ["load_model", "split_sequential", "FACTORY_SIGNATURE"]

#: What a user's factory is, as ``--model`` documents it (docs/cli.md, "Your own model").
FACTORY_SIGNATURE = ("factory() -> (model, loss_fn, make_batch): model a torch.nn.Sequential whose children are "
                     "the layers; loss_fn(output, targets) a scalar tensor, the mean over the batch; "
                     "make_batch(batch_size, seed=N) a pair (inputs, targets) of tensors with batch_size rows")


def _with_working_directory() -> None:
    """Let a module in the current directory be imported, as ``python -m`` would (the ``pipeplan``
    script's own ``sys.path`` does not hold it): the directory goes last, so it shadows no installed
    package. Spawned ranks inherit ``sys.path``."""
    here = os.getcwd()
    if "" not in sys.path and here not in sys.path:
        sys.path.append(here)


def load_model(spec: str = DEFAULT_MODEL, **options: Any) -> tuple[nn.Sequential, Any, Any]:
    """Import ``"package.module:factory"`` (or a :data:`BUILTIN_MODELS` name) and call ``factory(**options)``.

    The module is looked up on ``sys.path`` and then in the current directory. The
    factory's signature is :data:`FACTORY_SIGNATURE`.

    Args:
        spec: module path and factory name separated by one colon, or a
            built-in name (``"vla"``, ``"dumbbell"``).
        **options: keyword arguments passed to the factory (for example
            ``num_layers=8`` for the default model).

    Returns:
        The factory's ``(model, loss_fn, make_batch)``.

    Raises:
        InvalidInputError: a malformed spec, a module that fails to import, a
            missing or non-callable factory, or a factory that does not return an
            ``nn.Sequential`` with a callable loss and batch maker.
    """
    if isinstance(spec, str) and spec in BUILTIN_MODELS:
        spec = BUILTIN_MODELS[spec]
    if not isinstance(spec, str) or spec.count(":") != 1:
        raise InvalidInputError(
            f"model must look like 'package.module:factory', got {spec!r} (or name a built-in model: "
            f"{', '.join(BUILTIN_MODELS)})"
        )
    module_name, factory_name = (part.strip() for part in spec.split(":"))
    if not module_name or not factory_name:
        raise InvalidInputError(f"model must look like 'package.module:factory', got {spec!r}")
    _with_working_directory()
    try:
        module = importlib.import_module(module_name)
    except Exception as error:  # an import can fail in any way; report it as one line
        raise InvalidInputError(
            f"model {spec!r}: cannot import module {module_name!r}: {type(error).__name__}: {error}"
        ) from None
    factory = getattr(module, factory_name, None)
    if not callable(factory):
        raise InvalidInputError(f"model {spec!r}: module {module_name!r} has no callable {factory_name!r}")
    try:
        built = factory(**options)
    except TypeError as error:
        raise InvalidInputError(f"model {spec!r}: factory rejected options {options}: {error}") from None
    if not (isinstance(built, tuple) and len(built) == 3):
        raise InvalidInputError(
            f"model {spec!r}: factory must return (model, loss_fn, make_batch), got {type(built).__name__} "
            f"({FACTORY_SIGNATURE})"
        )
    model, loss_fn, make_batch = built
    if not isinstance(model, nn.Sequential) or len(model) == 0:
        raise InvalidInputError(
            f"model {spec!r}: the model must be a non-empty torch.nn.Sequential, got {type(model).__name__}"
        )
    if not callable(loss_fn) or not callable(make_batch):
        raise InvalidInputError(f"model {spec!r}: loss_fn and make_batch must be callable")
    return model, loss_fn, make_batch


def split_sequential(model: nn.Sequential, layers_per_stage: Sequence[int]) -> list[nn.Sequential]:
    """Cut ``model`` into consecutive stages of ``layers_per_stage[s]`` children each.

    The stages share the model's modules (no copy), so their parameters are the
    model's parameters.

    Raises:
        InvalidInputError: a count below 1, or counts that do not add up to ``len(model)``.
    """
    counts = [int(count) for count in layers_per_stage]
    if not counts or any(count < 1 for count in counts):
        raise InvalidInputError(f"layers_per_stage must be counts >= 1, got {list(layers_per_stage)}")
    if sum(counts) != len(model):
        raise InvalidInputError(
            f"layers_per_stage {counts} adds up to {sum(counts)}, but the model has {len(model)} layers"
        )
    stages = []
    start = 0
    for count in counts:
        stages.append(nn.Sequential(*(model[index] for index in range(start, start + count))))
        start += count
    return stages
