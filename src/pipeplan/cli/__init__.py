"""The ``pipeplan`` command: one sub-module per verb.

    $ pipeplan simulate --forward 30,10,10,20 -m 8 --schedule 1f1b
    $ pipeplan demo

Every verb module exposes ``register(subparsers)``, which adds its parser and sets
``func``. A :class:`~pipeplan.errors.PipeplanError` (bad input, infeasible plan,
failed rank) or an argument the parser rejects is printed as one line on stderr
and the command exits 2; so is a number that overflows floating point inside numpy.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import PipeplanError

__all__ = ["main", "build_parser", "OneLineParser"]

# Verb modules, in the order ``pipeplan --help`` lists them.
_VERBS = ("simulate", "partition", "plan", "presets", "model", "profile", "calibrate", "run", "demo", "dual_rate")  # module stems; dual_rate_cmd adds "dual-rate"


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose errors are one line (no usage block) and exit 2."""

    def error(self, message: str) -> Any:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every available verb (sub-parsers share its class)."""
    from .. import __version__

    parser = OneLineParser(
        prog="pipeplan",
        description="Plan, simulate and run pipeline-parallel training for unequal stages.",
    )
    parser.add_argument("--version", action="version", version=f"pipeplan {__version__}")
    subparsers = parser.add_subparsers(dest="verb", metavar="VERB")
    subparsers.required = True
    for verb in _VERBS:
        try:
            module = importlib.import_module(f"{__name__}.{verb}_cmd")
        except ModuleNotFoundError as error:
            if error.name == f"{__name__}.{verb}_cmd":
                continue  # verb not built yet
            raise
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (0 ok, 2 user error)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        with np.errstate(over="raise"):  # an overflow is an error to report, not a warning to scroll past
            status = args.func(args)
    except PipeplanError as error:
        print(f"pipeplan {args.verb}: error: {error}", file=sys.stderr)
        return 2
    except FloatingPointError as error:
        print(f"pipeplan {args.verb}: error: a number is too large to compute with ({error}); "
              "rescale the inputs (e.g. seconds instead of ms, GB instead of bytes)", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"pipeplan {args.verb}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader stopped early (`| head`): not an error of ours
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # Python flushes stdout at exit: let that go nowhere
        return 0
    return int(status or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
