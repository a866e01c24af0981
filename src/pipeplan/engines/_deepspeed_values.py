"""A ``ds_config.json``'s values checked as DeepSpeed 0.19.8's pydantic models take them, each refusal one line.

    from pipeplan.engines._deepspeed_values import _elements, _flag, _positive, _stage
    _stage("ds_config.json", "2")                               # 2 (ZeroStageEnum takes "2" and 2.0 too)
    _flag("ds_config.json: zero_optimization.overlap_comm", "on")   # True (pydantic's lax bool)
    _elements("ds_config.json: zero_optimization.reduce_bucket_size", 5e8)   # 500000000
    _positive("ds_config.json: train_batch_size", 0)            # InvalidInputError: ... must be > 0, got 0 ...

Each takes the place the value was found (for the message) and the value as JSON parsed it.
"""

from __future__ import annotations

import json
from typing import Any

from ..errors import InvalidInputError

#: pydantic's lax bool, which DeepSpeed's models validate ``overlap_comm`` with: besides true and false, 0 and
#: 1 and these strings in any case (pydantic 2 docs, "Standard Library Types": bool).
_TRUE = frozenset({"1", "on", "t", "true", "y", "yes"})
_FALSE = frozenset({"0", "off", "f", "false", "n", "no"})


def _json(value: Any) -> str:
    """``value`` as the JSON file spells it."""
    return json.dumps(value)


def _positive(where: str, raw: Any) -> int:
    """A batch key's value: a positive whole number (DeepSpeed asserts each is > 0)."""
    if isinstance(raw, float) and raw.is_integer():
        raw = int(raw)
    if not isinstance(raw, int) or isinstance(raw, bool):
        raise InvalidInputError(f"{where} must be a whole number, got {_json(raw)}")
    if raw <= 0:
        raise InvalidInputError(f"{where} must be > 0, got {raw} (DeepSpeed asserts it)")
    return raw


def _stage(name: str, raw: Any) -> int:
    """``zero_optimization.stage``: 0 to 3 (pydantic's ``ZeroStageEnum`` also takes ``"2"`` and ``2.0``)."""
    value: Any = raw
    if isinstance(raw, str) and raw.strip().isdigit():
        value = int(raw)
    elif isinstance(raw, float) and raw.is_integer():
        value = int(raw)
    if not isinstance(value, int) or isinstance(value, bool) or value not in (0, 1, 2, 3):
        raise InvalidInputError(f"{name}: zero_optimization.stage must be 0, 1, 2 or 3, got {_json(raw)}")
    return value


def _flag(where: str, raw: Any) -> bool:
    """A bool as DeepSpeed's pydantic models take it: true/false, 0/1, or one of pydantic's strings (``"on"``)."""
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, (int, float)) and raw in (0, 1):
        return bool(raw)
    if isinstance(raw, str) and raw.lower() in _TRUE | _FALSE:
        return raw.lower() in _TRUE
    raise InvalidInputError(f"{where} must be true or false, got {_json(raw)}")


def _elements(where: str, raw: Any, *, zero: bool = False) -> int:
    """A count of elements > 0 (``zero``: ≥ 0, as ZeRO-3's ``stage3_*`` sizes, ``ge=0``) as DeepSpeed's pydantic
    models take an int: a whole number, ``5e8``, ``"500000000"``.

    (pydantic also takes ``true`` as 1; pipeplan refuses it.)
    """
    value: Any = raw
    if isinstance(raw, float) and raw.is_integer():
        value = int(raw)
    elif isinstance(raw, str):
        try:
            value = int(raw)
        except ValueError:
            pass
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidInputError(f"{where} must be a whole number of elements, got {_json(raw)}")
    if value < 0 or (value == 0 and not zero):
        raise InvalidInputError(f"{where} must be {'>= 0' if zero else '> 0'}, got {_json(raw)} (DeepSpeed's model "
                                f"asks {'ge' if zero else 'gt'}=0)")
    return value
