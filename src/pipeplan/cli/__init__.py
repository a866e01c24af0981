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
import difflib
import importlib
import os
import re
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import PipeplanError

__all__ = ["main", "build_parser", "OneLineParser", "flag_names"]

# Verb modules, in the order ``pipeplan --help`` lists them.
_VERBS = ("simulate", "partition", "plan", "check", "presets", "model", "profile", "calibrate", "run", "demo", "dual_rate")  # module stems; dual_rate_cmd adds "dual-rate"


#: A token argparse would read as a flag though it is a negative number or list: ``-5``, ``-5,10``, ``-.5``.
_NEGATIVE = re.compile(r"-[0-9.]")


def _join_negative_values(parser: argparse.ArgumentParser, args: list[str]) -> list[str]:
    """``--forward -5,10`` as ``--forward=-5,10``, so the flag's own check names what is wrong.

    argparse reads a value starting with ``-`` (other than a plain ``-5``) as a flag and says only
    "expected one argument"; joined, the value reaches the flag's validation, whose one line says
    which bound it breaks. Only a flag taking one value and a token that cannot be a flag are joined.
    """
    joined: list[str] = []
    index = 0
    while index < len(args):
        token = args[index]
        if token == "--":
            return joined + args[index:]
        action = parser._option_string_actions.get(token)
        following = args[index + 1] if index + 1 < len(args) else ""
        if (action is not None and action.nargs is None and token.startswith("--") and _NEGATIVE.match(following)
                and following not in parser._option_string_actions):
            joined.append(f"{token}={following}")
            index += 2
            continue
        joined.append(token)
        index += 1
    return joined


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose errors are one line (no usage block) and exit 2.

    Abbreviations are off (``--global 256`` is not ``--global-batch``), and a flag it does
    not know is named with the closest one it does: ``unrecognized argument --memroy (did
    you mean --memory?)`` — also when the misspelt flag left a required one missing.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)
        self._seen: list[str] = []

    def parse_known_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:  # type: ignore[override]
        self._seen = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(_join_negative_values(self, self._seen), namespace)

    def parse_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:  # type: ignore[override]
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            self._verb_parser(parsed).refuse_unknown(extras)
        return parsed

    def _verb_parser(self, parsed: argparse.Namespace) -> OneLineParser:
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction) and getattr(parsed, "verb", None) in action.choices:
                chosen = action.choices[parsed.verb]
                return chosen if isinstance(chosen, OneLineParser) else self
        return self

    def refuse_unknown(self, extras: Sequence[str]) -> Any:
        """Exit 2 naming each token in ``extras`` this parser does not take, with the closest flag."""
        flags = self._unknown_flags(extras)
        others = [token for token in extras if not token.startswith("-")]
        parts = [self._suggest(flag) for flag in flags]
        if others and not flags:
            parts.append(f"unrecognized arguments: {' '.join(others)}")
        self.error("; ".join(parts) or f"unrecognized arguments: {' '.join(extras)}")

    def _flags(self, *, visible: bool = False) -> list[str]:
        """The long flags this parser takes; ``visible``: only those ``--help`` shows (not renamed ones)."""
        return [flag for action in self._actions for flag in action.option_strings
                if flag.startswith("--") and not (visible and action.help == argparse.SUPPRESS)]

    def _unknown_flags(self, tokens: Sequence[str]) -> list[str]:
        known = set(self._flags())
        return [token.split("=", 1)[0] for token in tokens
                if token.startswith("--") and token.split("=", 1)[0] not in known and token != "--"]

    def _suggest(self, flag: str) -> str:
        flags = self._flags(visible=True)
        close = [known for known in flags if known.startswith(flag)][:3]  # an abbreviation: the flags it starts
        if not close:
            names = {known[2:]: known for known in flags}
            close = [names[name] for name in difflib.get_close_matches(flag[2:], list(names), n=1, cutoff=0.7)]
        return f"unrecognized argument {flag}" + (f" (did you mean {' or '.join(close)}?)" if close else "")

    def error(self, message: str) -> Any:
        unknown = self._unknown_flags(self._seen)
        if unknown and message.startswith("the following arguments are required"):
            message = "; ".join(self._suggest(flag) for flag in unknown)
        named = re.match(r"argument ([^:]+): (.*)", message, re.S)
        if named and any(named.group(2).startswith(flag) for flag in named.group(1).split("/")):
            message = named.group(2)  # "argument --gpus: --gpus must be >= 1": say the flag once
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


#: The library's argument names as each verb's flags spell them (every verb, then per verb).
_FLAGS: dict[str, str] = {"memory_capacity": "--memory", "micro_batch_size": "--micro-batch-size",
                          "global_batch": "--global-batch", "gpus_per_node": "--gpus-per-node",
                          "tensor_parallel": "--tp", "iterations": "--iterations", "virtual_stages": "--virtual-stages",
                          "num_microbatches": "-m", "schedules": "--schedules", "rate_ratio": "--rate-ratio",
                          "vision_stages": "--vision-stages", "max_staleness": "--max-staleness",
                          "buffer_frames": "--buffer-frames", "damping": "--damping"}
_VERB_FLAGS: dict[str, dict[str, str]] = {
    "partition": {"num_stages": "--stages", "partition": "--partition", "num_layers": "--layers"},
    "plan": {"num_stages": "--stages", "partition": "--partition", "num_gpus": "--gpus",
             "max_virtual_stages": "--max-virtual-stages"},
    "simulate": {"num_stages": "the stages", "partition": "--partition"},
    "run": {"num_envs": "--batch-size"},
}
#: Names replaced only as a message's first word, its subject (``pp=8 must divide ...``): elsewhere they are
#: prose of the library's (``the smallest memory that fits (pp=4, dp=1)``, ``the distributed optimizer``).
_LEADING_FLAGS: dict[str, dict[str, str]] = {
    "plan": {"pp": "--pp", "tp": "--tp", "optimizer": "--optimizer"},
}
#: simulate's per-stage lists: named as flags only indexed or counted (``forward[2] must``, ``backward has 1
#: entries``), since a profile file's message names its own fields (``layer 1 (block.0): weight = 3.0``).
_LIST_FLAGS = {"forward": "--forward", "backward": "--backward", "weight": "--weight", "update": "--update",
               "activation_bytes": "--activation-bytes"}


def flag_names(verb: str, message: str) -> str:
    """``message`` with the library's argument names (``memory_capacity = 20 GiB``) as ``verb``'s flags (``--memory``).

    Only a name that is the subject of its clause is replaced: followed by ``must``, ``=``,
    ``has``, ``is`` or an index (``forward[2] must be > 0``).
    """
    names = {**_FLAGS, **_VERB_FLAGS.get(verb, {})}
    pattern = re.compile(r"(?<![\w-])(" + "|".join(map(re.escape, sorted(names, key=len, reverse=True)))
                         + r")(?=\[|\s*=|\s+(?:must|has|is)\b)")
    message = pattern.sub(lambda match: names[match.group(1)], message)
    leading = re.match(r"(\w+)(?=\s*=|\s)", message)
    if leading and leading.group(1) in _LEADING_FLAGS.get(verb, {}):
        message = _LEADING_FLAGS[verb][leading.group(1)] + message[leading.end():]
    if verb == "simulate":
        lists = re.compile(r"(?<![\w-])(" + "|".join(_LIST_FLAGS) + r")(?=\[|\s+has\b)")
        message = lists.sub(lambda match: _LIST_FLAGS[match.group(1)], message)
    return message


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
    """Run the command line; returns the exit status (0 ok, 2 user error, 130 interrupted).

    Ctrl-C at any moment after the package is imported (building the parser, reading the
    flags, the work) prints one line, ``pipeplan: interrupted``, and returns 130 (128 + SIGINT).
    """
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
    except KeyboardInterrupt:
        print("pipeplan: interrupted", file=sys.stderr)
        return 130
    try:
        with np.errstate(over="raise"):  # an overflow is an error to report, not a warning to scroll past
            status = args.func(args)
    except PipeplanError as error:
        print(f"pipeplan {args.verb}: error: {flag_names(args.verb, str(error))}", file=sys.stderr)
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
