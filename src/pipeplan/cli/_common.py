"""Argument helpers shared by the verbs: number lists, sizes, output options.

    from pipeplan.cli._common import float_list
    float_list("forward")("30,10,10,20")   # [30.0, 10.0, 10.0, 20.0]
"""

from __future__ import annotations

import argparse
import os
import json
import re
import sys
from collections.abc import Callable
from typing import Any

from rich.console import Console

__all__ = ["float_list", "parse_bytes", "print_json", "make_console", "require_torch"]

_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def float_list(field: str) -> Callable[[str], list[float]]:
    """An argparse type for comma-separated numbers, naming ``field`` on error."""

    def parse(text: str) -> list[float]:
        try:
            return [float(part) for part in text.split(",") if part.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{field} must be comma-separated numbers like 30,10,10,20, got {text!r}"
            ) from None

    return parse


def parse_bytes(text: str) -> float:
    """``"80GB"`` → 8e10, ``"24GiB"`` → 24·2**30, ``"1e9"`` → 1e9 (an argparse type)."""
    match = re.fullmatch(r"\s*([0-9.eE+-]+)\s*([a-zA-Z]*)\s*", text)
    if not match or match.group(2).lower() not in _UNITS:
        raise argparse.ArgumentTypeError(f"a size must look like 80GB or 24GiB, got {text!r}")
    try:
        value = float(match.group(1)) * _UNITS[match.group(2).lower()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"a size must look like 80GB or 24GiB, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"a size must be > 0, got {text!r}")
    return value


def print_json(payload: Any) -> None:
    """Write ``payload`` as indented JSON on stdout."""
    json.dump(payload, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")


def make_console() -> Console:
    """A rich console that does not wrap wide Gantt charts when output is piped.

    A terminal keeps its own width; a pipe or file gets ``COLUMNS`` or 200 columns.
    """
    console = Console()
    if not console.is_terminal:
        console = Console(width=int(os.environ.get("COLUMNS", "200")))
    return console


def require_torch(what: str) -> None:
    """Raise a one-line :class:`InvalidInputError` when torch cannot be imported.

    Planning and simulation need numpy only; ``what`` (e.g. ``"pipeplan run"``)
    runs real modules and names itself in the message.
    """
    try:
        import torch  # noqa: F401
    except ImportError:
        from ..errors import InvalidInputError

        raise InvalidInputError(
            f"{what} needs PyTorch, which is not installed: pip install 'pipeplan[torch]' "
            "(any torch >= 2.2, CPU or CUDA build)"
        ) from None
