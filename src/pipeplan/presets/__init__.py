"""Model presets: published VLA models (and two references) as :class:`~pipeplan.models.spec.ModelSpec`.

    >>> from pipeplan import presets
    >>> presets.names()
    ['pi0', 'pi0.5', 'pi0-fast', ...]
    >>> spec = presets.get("pi0")
    >>> spec.num_parameters(), spec.module_parameters()["llm"]
    (3238048528, 1981884416)

Each preset's shapes and sources are in its module's docstring (``pi``,
``pi0_fast``, ``openvla``, ``openvla_oft``, ``gr00t``, ``gr00t_n15``, ``cogact_dit``,
``rdt``, ``smolvla``, ``octo``, ``reference``) and in docs/presets.md. torch-free.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from ..errors import InvalidInputError
from ..models.spec import ModelSpec
from .cogact_dit import cogact_dit_l, cogact_dit_s
from .gr00t import gr00t_n1
from .gr00t_n15 import gr00t_n15
from .openvla import cogact, openvla_7b
from .openvla_oft import openvla_oft
from .pi import pi0, pi05
from .pi0_fast import pi0_fast
from .rdt import rdt_1b
from .smolvla import smolvla
from .octo import octo_base, octo_small
from .reference import driving_6cam, dumbbell, gpt_1_5b

__all__ = ["names", "get", "options", "OPTION_LIMITS"]

#: The shape options a preset may take (``presets.get(name, action_horizon=10)``) and the
#: largest value accepted (beyond it a size is a typo, not a model).
OPTION_LIMITS: dict[str, int] = {"action_horizon": 1024, "text_tokens": 32_768, "cameras": 64, "image_size": 4096}

_BUILDERS: dict[str, Callable[..., ModelSpec]] = {
    "pi0": pi0,
    "pi0.5": pi05,
    "pi0-fast": pi0_fast,
    "openvla-7b": openvla_7b,
    "openvla-oft": openvla_oft,
    "gr00t-n1": gr00t_n1,
    "gr00t-n1.5": gr00t_n15,
    "cogact": cogact,
    "cogact-dit-s": cogact_dit_s,
    "cogact-dit-l": cogact_dit_l,
    "rdt-1b": rdt_1b,
    "smolvla": smolvla,
    "octo-small": octo_small,
    "octo-base": octo_base,
    "driving-6cam": driving_6cam,
    "dumbbell": dumbbell,
    "gpt-1.5b": gpt_1_5b,
}


def names() -> list[str]:
    """Names of every preset, in a stable order."""
    return list(_BUILDERS)


def options(name: str) -> dict[str, int]:
    """The shape options preset ``name`` takes, with their defaults (``{"action_horizon": 50, ...}``)."""
    if name not in _BUILDERS:
        raise InvalidInputError(f"preset must be one of {', '.join(_BUILDERS)}, got {name!r}")
    parameters = inspect.signature(_BUILDERS[name]).parameters.values()
    return {p.name: p.default for p in parameters if p.name in OPTION_LIMITS}


def get(name: str, **overrides: int) -> ModelSpec:
    """The preset ``name`` as a fresh :class:`ModelSpec`, with some shape options changed.

    Args:
        name: one of :func:`names`.
        overrides: options of that preset (:func:`options`): ``action_horizon``,
            ``text_tokens``, ``cameras``, ``image_size`` where the model has them.

    Raises:
        InvalidInputError: an unknown name (the message lists the presets), an option the
            preset lacks, or a size below 1 or above :data:`OPTION_LIMITS`.
    """
    allowed = options(name)
    for option, value in overrides.items():
        if option not in allowed:
            has = ", ".join(allowed) or "none"
            raise InvalidInputError(f"preset {name!r} has no option {option!r}; its options: {has}")
        limit = OPTION_LIMITS[option]
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= limit:
            raise InvalidInputError(f"{option} of preset {name!r} must be an integer in 1..{limit}, got {value!r}")
    chosen: dict[str, Any] = dict(overrides)
    return _BUILDERS[name](**chosen)
