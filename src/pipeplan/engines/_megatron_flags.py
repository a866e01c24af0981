"""Megatron-LM's flags grouped with their values and sorted: priced, ignored, refused, or a near miss refused.

    from pipeplan.engines._megatron_flags import _collect
    flags = _collect(["--tensor-model-parallel-size", "2", "--lr", "3e-4"], "train.sh")
    flags.integer("--tensor-model-parallel-size")   # 2
    flags.source("--tensor-model-parallel-size")    # 'train.sh: --tensor-model-parallel-size 2'
    flags.ignored                                   # ['--lr 3e-4']
    _collect(["--tensor-model-paralel-size", "2"], "train.sh")   # InvalidInputError: ... (did you mean ...?)

The last occurrence of a flag wins, as argparse does. A flag of :data:`REFUSED_FLAGS` set
to anything but Megatron-LM's default is refused with its reason; a retired spelling is
read as the new one, with a note; a flag in no list is refused when difflib's ratio to a
known one is at least 0.9 (a typo), else listed in ``ignored`` "(not a flag pipeplan
knows; not priced)". :class:`_Flags` gives each value checked, and each field's source.
"""

from __future__ import annotations

import difflib
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..errors import InvalidInputError
from ._megatron_shell import _UNASSIGNED
from ._megatron_vocab import IGNORED_FLAGS, MODEL_FLAGS, PRICED_FLAGS, REFUSED_FLAGS, RETIRED_FLAGS

_NOT_A_FLAG = "(not a flag pipeplan knows; not priced)"
_NEAR_MISS_CUTOFF = 0.9


@dataclass
class _Flags:
    """Megatron-LM's flags as given: flag → its values (the last occurrence wins, as argparse does)."""

    path: str
    values: dict[str, list[str]] = field(default_factory=dict)
    ignored: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def given(self, flag: str) -> bool:
        return flag in self.values

    def text(self, flag: str) -> str:
        values = self.values[flag]
        return " ".join([flag] + [shlex.quote(v) for v in values])

    def source(self, *flags: str) -> str:
        return f"{self.path}: " + " ".join(self.text(flag) for flag in flags if self.given(flag))

    def default(self, flag: str, what: str = "") -> str:
        return f"Megatron-LM default{' ' + what if what else ''} ({self.path} does not set {flag})"

    def one(self, flag: str) -> str:
        values = self.values[flag]
        if len(values) != 1:
            raise InvalidInputError(f"{flag} takes one value, got {len(values)} ({self.text(flag)})")
        _needs_value(flag, values[0], self.path)
        return values[0]

    def integer(self, flag: str, minimum: int = 1) -> int:
        value = self.one(flag)
        try:
            number = int(value)
        except ValueError:
            raise InvalidInputError(f"{flag} must be an integer >= {minimum}, got {value!r}") from None
        if number < minimum:
            raise InvalidInputError(f"{flag} must be an integer >= {minimum}, got {number}")
        return number

    def number(self, flag: str) -> float:
        value = self.one(flag)
        try:
            return float(value)
        except ValueError:
            raise InvalidInputError(f"{flag} must be a number, got {value!r}") from None


def _needs_value(flag: str, value: str, path: str) -> None:
    if value.startswith(_UNASSIGNED):
        raise InvalidInputError(f"{flag} is {value[1:]}, which {path} never assigns (pipeplan runs no shell: "
                                "write the value, or assign it in the file)")


_KNOWN = {**PRICED_FLAGS, **MODEL_FLAGS}


def _collect(args: Sequence[str], path: str) -> _Flags:
    """Group ``args`` into flags and values; classify each flag (priced, ignored, refused, typo, unknown)."""
    flags = _Flags(path)
    known = sorted(set(_KNOWN) | set(IGNORED_FLAGS) | set(REFUSED_FLAGS))
    index = 0
    while index < len(args):
        word = args[index]
        if word.startswith(_UNASSIGNED):
            raise InvalidInputError(f"{word[1:]} is never assigned in {path}, and the line needs it (pipeplan runs "
                                    "no shell: write its flags out, or assign it in the file)")
        if not word.startswith("--"):
            raise InvalidInputError(f"{path}: {word!r} is not a Megatron-LM flag (flags start with --)")
        name, equals, value = word.partition("=")
        values = [value] if equals else []
        index += 1
        while not equals and index < len(args) and not args[index].startswith("--"):
            values.append(args[index])
            index += 1
        name = RETIRED_FLAGS.get(name, name) if name not in _KNOWN else name
        if word.partition("=")[0] in RETIRED_FLAGS:
            flags.notes.append(f"{word.partition('=')[0]} is Megatron-LM's older spelling of {name}; read as it")
        kind = _KNOWN.get(name)
        if kind is not None:
            if kind == "flag" and values:
                unassigned = [v for v in values if v.startswith(_UNASSIGNED)]
                if unassigned:  # the words after a switch: a variable the line needs
                    raise InvalidInputError(f"{unassigned[0][1:]} is never assigned in {path}, and the line needs "
                                            "it (pipeplan runs no shell: write its flags out, or assign it in the file)")
                raise InvalidInputError(f"{name} takes no value, got {' '.join(values)!r}")
            if kind != "flag" and not values:
                raise InvalidInputError(f"{name} needs a value")
            flags.values[name] = values
        elif name in REFUSED_FLAGS:
            default, what = REFUSED_FLAGS[name]
            if not (default and values == [default]):
                raise InvalidInputError(f"{' '.join([name] + values)}: {what}")
            flags.ignored.append(" ".join([name] + values))
        elif name in IGNORED_FLAGS:
            flags.ignored.append(" ".join([name] + [v.lstrip(_UNASSIGNED) for v in values]))
        else:
            close = difflib.get_close_matches(name, known, n=1, cutoff=_NEAR_MISS_CUTOFF)
            if close:
                raise InvalidInputError(f"{name} is not a Megatron-LM flag (did you mean {close[0]}?)")
            flags.ignored.append(" ".join([name] + [v.lstrip(_UNASSIGNED) for v in values]) + " " + _NOT_A_FLAG)
    return flags
