"""Checks at the public boundary that turn bad numbers into one clear error.

    >>> from pipeplan._validation import positive_int
    >>> positive_int("num_microbatches", 8)
    8
    >>> positive_int("num_microbatches", 0)
    Traceback (most recent call last):
    pipeplan.errors.InvalidInputError: num_microbatches must be >= 1, got 0
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .errors import InvalidInputError

__all__ = [
    "positive_int",
    "finite_floats",
    "non_negative_float",
    "positive_float",
    "expect_instance",
]


def _not_a_number(value: object) -> bool:
    """True for values ``float()`` would take but that are not numbers: ``True``, ``False``.

    Numeric strings stay accepted: the CSV loader hands its cells over as text.
    """
    return isinstance(value, (bool, np.bool_))


def expect_instance(field: str, value: object, expected: type, example: str) -> Any:
    """Return ``value`` if it is an ``expected``, else raise naming ``field`` and the type wanted.

    ``example`` shows how to make one, e.g. ``"StageCosts(forward=[30, 10, 10, 20])"``.
    """
    if not isinstance(value, expected):
        raise InvalidInputError(
            f"{field} must be a {expected.__name__} (e.g. {example}), got {type(value).__name__} {value!r:.60}"
        )
    return value


def positive_int(field: str, value: object, *, minimum: int = 1, maximum: int | None = None,
                 why: str = "") -> int:
    """Return ``value`` as an int, or raise if it is not an integer >= ``minimum`` (and <= ``maximum``).

    ``why`` (shown after a value over ``maximum``) says what the limit protects.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise InvalidInputError(f"{field} must be an integer >= {minimum}, got {value!r}")
    if not float(value).is_integer():
        raise InvalidInputError(f"{field} must be an integer >= {minimum}, got {value!r}")
    number = int(value)
    if number < minimum:
        raise InvalidInputError(f"{field} must be >= {minimum}, got {number}")
    if maximum is not None and number > maximum:
        raise InvalidInputError(f"{field} must be <= {maximum}, got {number}" + (f" ({why})" if why else ""))
    return number


def finite_floats(
    field: str,
    values: object,
    *,
    length: int | None = None,
    allow_zero: bool = False,
) -> tuple[float, ...]:
    """Return ``values`` as a tuple of finite floats > 0 (or >= 0 with ``allow_zero``).

    Raises:
        InvalidInputError: naming ``field``, the offending index and value, or the length.
    """
    if isinstance(values, (str, bytes)) or not isinstance(values, (Sequence, np.ndarray)):
        raise InvalidInputError(f"{field} must be a list of numbers, got {values!r}")
    out: list[float] = []
    for index, raw in enumerate(values):
        try:
            if _not_a_number(raw):
                raise TypeError
            number = float(raw)
        except (TypeError, ValueError):
            raise InvalidInputError(f"{field}[{index}] must be a number, got {raw!r}") from None
        if not math.isfinite(number):
            raise InvalidInputError(f"{field}[{index}] must be finite, got {number}")
        if number < 0 or (number == 0 and not allow_zero):
            bound = ">= 0" if allow_zero else "> 0"
            raise InvalidInputError(f"{field}[{index}] must be {bound}, got {number}")
        out.append(number)
    if not out:
        raise InvalidInputError(f"{field} must not be empty")
    if length is not None and len(out) != length:
        raise InvalidInputError(f"{field} has {len(out)} entries, expected {length} (one per stage)")
    return tuple(out)


def non_negative_float(field: str, value: object) -> float:
    """Return ``value`` as a finite float >= 0, or raise naming ``field``."""
    try:
        if _not_a_number(value):
            raise TypeError
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise InvalidInputError(f"{field} must be a finite number >= 0, got {value!r}") from None
    if not math.isfinite(number) or number < 0:
        raise InvalidInputError(f"{field} must be a finite number >= 0, got {value!r}")
    return number


def positive_float(field: str, value: object, *, unit: str = "", allow_inf: bool = False) -> float:
    """Return ``value`` as a float > 0 (``inf`` only with ``allow_inf``), or raise naming ``field``."""
    what = f"a number{' of ' + unit if unit else ''} > 0"
    try:
        if _not_a_number(value):
            raise TypeError
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise InvalidInputError(f"{field} must be {what}, got {value!r}") from None
    if math.isnan(number) or number <= 0 or (math.isinf(number) and not allow_inf):
        raise InvalidInputError(f"{field} must be {what}, got {value!r}")
    return number
