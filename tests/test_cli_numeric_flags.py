"""Every numeric flag of every verb takes hostile numbers in stride: exit 0 or one line and exit 2 (issue 35).

The flags are read from argparse itself (:func:`pipeplan.cli.build_parser`), so a flag added
later is covered without editing this file. A flag takes a number when its ``type=`` turns a
probe (``1``, ``0.5``, ``1,2``, ``1GiB``, ``1ms``, ``1GB/s``, ``40%``) into a number or a list
of numbers, when its choices are numbers, or when its metavar names a quantity (``N``,
``SECONDS``, ``adam|BYTES``, ...: :data:`NUMERIC_METAVARS`). Each one is fed ``inf``, ``-inf``,
``nan``, ``1e999``, ``-1``, ``0``, a huge integer and a value with a wrong unit on top of a valid
command of its verb (:data:`BASES`); hypothesis adds drawn values and other bases. Each call:

* ends with exit 0 or exit 2, never an exception (a traceback for the user);
* a refusal is one line on stderr that names the flag;
* a non-finite value (``inf``, ``-inf``, ``nan``, ``1e999``) is refused;
* uses at most :data:`CPU_LIMIT_S` CPU seconds of this process (CPU time, not wall: the
  machine may be loaded), a huge value included — no run that grows with an absurd number.

Work that would start processes or time kernels (``run``, ``profile``, ``calibrate``,
``dual-rate``) is stopped at its door: reaching it counts as accepted arguments, unless a huge
integer got there (a count of steps, repeats, seeds or samples that would run for days must be
refused up front; only a bound such as ``--timeout`` may be huge).

    HYPOTHESIS_PROFILE=ci python -m pytest -q tests/test_cli_numeric_flags.py
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import time
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from pipeplan.cli import build_parser, main

from _cpu_limits import CpuTimeExceeded, address_space_room, cpu_time_limit
from _doors import Door, close_doors

CPU_LIMIT_S = 5.0
"""CPU seconds one call may use; the slowest base here takes well under 1 s."""

#: A metavar alternative that stands for a number (``--optimizer adam|BYTES``, ``--partition auto|even|A,B,...``).
NUMERIC_METAVARS = frozenset({"N", "K", "COUNT", "SECONDS", "SIZE", "SIZES", "BYTES", "TIME", "RATE", "FRACTION",
                              "A,B,..."})
_PROBES = ("1", "0.5", "1,2", "1GiB", "1ms", "1GB/s", "40%")
NON_FINITE = ("inf", "-inf", "nan", "1e999")
HUGE = str(10**30)
_WRONG_UNITS = ("4GiB", "20ms", "25GB/s", "4 parsecs")


def _number(value: object) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, (int, float)):
        return True
    return isinstance(value, (list, tuple)) and bool(value) and all(_number(item) for item in value)


def takes_number(action: argparse.Action) -> bool:
    """Whether ``action`` takes a number, by its ``type=``, its choices or its metavar."""
    if not action.option_strings or action.nargs == 0 or action.help == argparse.SUPPRESS:
        return False
    if action.choices is not None:
        return all(_number(choice) for choice in action.choices)
    if action.type in (int, float):
        return True
    if callable(action.type):
        for probe in _PROBES:
            try:
                if _number(action.type(probe)):
                    return True
            except (argparse.ArgumentTypeError, ValueError, TypeError):
                continue
    return any(part in NUMERIC_METAVARS for part in str(action.metavar or "").split("|"))


def wrong_unit(action: argparse.Action) -> str:
    """A number with a unit ``action`` does not take (a size for a time, a time for a size)."""
    for candidate in _WRONG_UNITS:
        try:
            converted = action.type(candidate) if callable(action.type) else candidate
        except (argparse.ArgumentTypeError, ValueError, TypeError):
            return candidate
        if not _number(converted):  # kept as text: the verb checks it later
            return candidate
    return _WRONG_UNITS[-1]


def verbs() -> dict[str, argparse.ArgumentParser]:
    """Each verb's parser (an alias once), from the CLI's own parser."""
    parser = build_parser()
    sub = next(action for action in parser._actions if isinstance(action, argparse._SubParsersAction))
    unique: dict[int, str] = {}
    for name, verb_parser in sub.choices.items():
        unique.setdefault(id(verb_parser), name)
    return {name: sub.choices[name] for name in unique.values()}


def numeric_flags() -> list[tuple[str, str]]:
    """``(verb, long flag)`` of every numeric flag of every verb."""
    return [(verb, max(action.option_strings, key=len)) for verb, parser in verbs().items()
            for action in parser._actions if takes_number(action)]


def _action(verb: str, flag: str) -> argparse.Action:
    return next(action for action in verbs()[verb]._actions if flag in action.option_strings)


_OUT = "{tmp}/out.json"
#: A valid command of each verb (without the verb) that the flag is added to, last one winning.
BASES: dict[str, Sequence[Sequence[str]]] = {
    "simulate": (["--forward", "30,10,10,20"], ["--forward", "30,10,10,20", "--schedule", "adaptive"],
                 ["--forward", "30,10,10,20", "--schedule", "interleaved"],
                 ["--forward", "30,10,10,20", "--schedule", "dual-rate"], ["--preset", "pi0", "--stages", "4"]),
    "partition": (["--layers", "8", "--layer-cost", "1", "--stages", "2"], ["--preset", "pi0", "--stages", "2"]),
    "plan": (["--preset", "pi0", "--gpus", "2", "--global-batch", "4", "--schedules", "1f1b", "--dp-modes", "ddp"],
             ["--preset", "gpt-1.5b", "--gpus", "2", "--global-batch", "4", "--budget", "2"]),
    "check": (["--deepspeed-config", str(Path(__file__).parent / "data" / "check" / "ds_config.json"),
               "--preset", "gpt-1.5b", "--gpus", "2", "--top", "0"],),
    "model": (["--preset", "pi0"],),
    "presets": ([],),
    "profile": (["--out", _OUT],),
    "calibrate": (["--out", _OUT, "--quick"],),
    "run": ([], ["--schedule", "dual-rate", "--nproc", "3"]),
    "demo": (["--story", "lesson16"],),
    "dual-rate": (["--quick"],),
}
#: Where a flag's fixed values run: the verb's first base holding this word (where the flag does something),
#: else its first base.
HOME: dict[str, str] = {"--memory-limit": "adaptive", "--objective": "adaptive", "--virtual-stages": "interleaved",
                        **{flag: "dual-rate" for flag in ("--rate-ratio", "--vision-stages", "--max-staleness",
                                                          "--buffer-frames")},
                        **{flag: "--preset" for flag in ("--micro-batch-size", "--mfu", "--tp", "--action-horizon",
                                                         "--text-tokens", "--cameras", "--image-size")}}


def home_base(verb: str, flag: str) -> int:
    """The index in ``BASES[verb]`` of the base ``flag``'s fixed values run on."""
    word = HOME.get(flag)
    return next((index for index, base in enumerate(BASES[verb]) if word in base), 0)


@pytest.fixture(autouse=True)
def _doors(monkeypatch: pytest.MonkeyPatch) -> None:
    close_doors(monkeypatch)


#: Flags that bound work rather than size it: a huge value is no more work (a longer wait on a hang, a spread
#: threshold never crossed).
BOUNDS = frozenset({"--timeout", "--max-spread"})


def run(argv: list[str]) -> tuple[int | None, str, str, float]:
    """``pipeplan *argv`` in-process: (exit status, stdout, stderr, CPU seconds); past a door: status ``None``."""
    out, err = io.StringIO(), io.StringIO()
    status: int | None
    began = time.process_time()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), cpu_time_limit(4 * CPU_LIMIT_S):
        try:
            status = main(argv)
        except SystemExit as exit_:
            status = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 2)
        except Door:
            status = None
    return status, out.getvalue(), err.getvalue(), time.process_time() - began


def check(verb: str, flag: str, base: Sequence[str], value: str, tmp: str) -> None:
    """One call of the property: ``pipeplan VERB BASE FLAG=VALUE``."""
    argv = [verb, *(part.format(tmp=tmp) for part in base), f"{flag}={value}"]
    shown = "pipeplan " + " ".join(argv)
    try:
        with address_space_room(3 * 2**30):
            status, _out, err, seconds = run(argv)
    except CpuTimeExceeded:
        pytest.fail(f"{shown}: ran past {4 * CPU_LIMIT_S:g} CPU s")
    except Exception as error:  # noqa: BLE001 - anything escaping main is a traceback for the user
        pytest.fail(f"{shown} raised {type(error).__name__}: {error}")
    if status is None:  # the arguments passed: the work behind the door must not grow with an absurd number
        assert flag in BOUNDS or not (value.isdigit() and int(value) >= 2**31), (
            f"{shown} reached the real work with {flag} = {value}: refuse it up front")
        status = 0
    assert "Traceback" not in err, f"{shown}:\n{err}"
    assert status in (0, 2), f"{shown} exited {status}:\n{err}"
    assert seconds < CPU_LIMIT_S, f"{shown} used {seconds:.1f} CPU s"
    if value in NON_FINITE:
        assert status == 2, f"{shown} accepted a non-finite value"
    if status == 2:
        lines = [line for line in err.splitlines() if line.strip()]
        assert len(lines) == 1, f"{shown} refused with {len(lines)} lines:\n{err}"
        names = _action(verb, flag).option_strings
        assert any(name in lines[0] for name in names), f"{shown}: the refusal does not name {flag}:\n{err}"


_VALUES = (st.sampled_from([*NON_FINITE, "-1", "0", HUGE, "1", "-0", "1e308", "0.5", "1e-300"])
           | st.integers(2**31, 10**40).map(str)
           | st.builds("{}{}".format, st.sampled_from(["1", "4", "0.5"]),
                       st.sampled_from(["GiB", "GB", "ms", "s", "us", "GB/s", "%", "x"])))


@pytest.fixture(scope="module")
def tmp(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("numeric-flags"))


def test_every_verb_has_a_base_command() -> None:
    """A new verb gets a valid command in BASES, so its numeric flags are fed on top of one that runs."""
    assert set(BASES) == set(verbs())


def test_flags_are_found_from_the_parser() -> None:
    """The walk finds the flags issue 35 is about and leaves out words, paths and switches."""
    found = set(numeric_flags())
    for expected in [("simulate", "--memory-limit"), ("plan", "--mfu"), ("plan", "--global-batch"),
                     ("simulate", "--comm-bandwidth"), ("plan", "--optimizer"), ("dual-rate", "--budget"),
                     ("plan", "--cameras"), ("run", "--damping")]:
        assert expected in found
    for word in [("plan", "--preset"), ("plan", "--export"), ("simulate", "--plot"), ("plan", "--json"),
                 ("simulate", "--schedule")]:
        assert word not in found


@pytest.mark.parametrize(("verb", "flag"), numeric_flags(), ids=[f"{verb} {flag}" for verb, flag in numeric_flags()])
def test_numeric_flag_refuses_hostile_values_in_one_line(verb: str, flag: str, tmp: str) -> None:
    bases = BASES[verb]
    home = home_base(verb, flag)
    fixed = [*NON_FINITE, "-1", "0", HUGE, wrong_unit(_action(verb, flag))]

    @settings(max_examples=int(os.environ.get("PIPEPLAN_NUMERIC_EXAMPLES", "2")), database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
    @given(value=_VALUES, base=st.sampled_from(range(len(bases))))
    def prop(value: str, base: int) -> None:
        check(verb, flag, bases[base], value, tmp)

    for value in fixed:
        prop = example(value=value, base=home)(prop)
    prop()
