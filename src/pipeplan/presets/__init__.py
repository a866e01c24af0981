"""Model presets: published VLA models (and two references) as :class:`~pipeplan.models.spec.ModelSpec`.

    >>> from pipeplan import presets
    >>> presets.names()
    ['pi0', 'pi0.5', 'openvla-7b', ...]
    >>> spec = presets.get("pi0")
    >>> spec.num_parameters(), spec.module_parameters()["llm"]
    (3238048528, 1981884416)

Each preset's shapes and sources are in its module's docstring (``pi``,
``openvla``, ``gr00t``, ``reference``) and in docs/presets.md. torch-free.
"""

from __future__ import annotations

from collections.abc import Callable

from ..errors import InvalidInputError
from ..models.spec import ModelSpec
from .gr00t import gr00t_n1
from .openvla import cogact, openvla_7b
from .pi import pi0, pi05
from .reference import driving_6cam, dumbbell, gpt_1_5b

__all__ = ["names", "get"]

_BUILDERS: dict[str, Callable[[], ModelSpec]] = {
    "pi0": pi0,
    "pi0.5": pi05,
    "openvla-7b": openvla_7b,
    "gr00t-n1": gr00t_n1,
    "cogact": cogact,
    "driving-6cam": driving_6cam,
    "dumbbell": dumbbell,
    "gpt-1.5b": gpt_1_5b,
}


def names() -> list[str]:
    """Names of every preset, in a stable order."""
    return list(_BUILDERS)


def get(name: str) -> ModelSpec:
    """The preset ``name`` as a fresh :class:`ModelSpec`.

    Raises:
        InvalidInputError: an unknown name; the message lists the presets.
    """
    if name not in _BUILDERS:
        raise InvalidInputError(f"preset must be one of {', '.join(_BUILDERS)}, got {name!r}")
    return _BUILDERS[name]()
