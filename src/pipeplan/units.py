"""Units in and out: one owner for how sizes, bandwidths, fractions and times are written.

pipeplan computes in **bytes**, **milliseconds** and **bytes per millisecond**. On input a
size or a bandwidth names its unit (``80GiB``, ``25GB/s``); on output memory is always in
**GiB** (:func:`format_gib`) and a GPU's capacity is shown with and without headroom in one
form (:func:`format_capacity`)::

    from pipeplan import units
    units.parse_bytes("80GiB", flag="--memory", require_unit=True)   # 85899345920.0
    units.parse_bandwidth("25GB/s", flag="--comm-bandwidth")         # 25000000.0 bytes per ms
    units.parse_fraction("40%", flag="--mfu")                        # 0.4
    units.format_gib(85_899_345_920)                                  # '80 GiB'
    units.format_capacity(80 * units.GIB, headroom=0.1)               # '80 GiB (72 GiB usable, 10% headroom)'

Parsers raise :class:`ValueError` with a message that names ``flag`` and shows an
example, so an argparse type built on them (:func:`argparse_type`) prints one line.
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable, Sequence

__all__ = [
    "GIB",
    "BYTE_UNITS",
    "parse_bytes",
    "parse_bandwidth",
    "parse_fraction",
    "parse_ms",
    "argparse_type",
    "format_gib",
    "format_gib_column",
    "format_memory_column",
    "format_bytes",
    "format_capacity",
    "format_bandwidth",
    "format_figures",
    "FIGURES",
]

GIB = 2**30
"""Bytes in one GiB, the unit of every memory figure pipeplan prints."""

BYTE_UNITS: dict[str, float] = {
    "b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
}
"""Size suffixes, lower-cased: decimal (GB = 10⁹ bytes) and binary (GiB = 2³⁰ bytes)."""

_BITS: dict[str, float] = {"kbit": 1e3 / 8, "mbit": 1e6 / 8, "gbit": 1e9 / 8, "tbit": 1e12 / 8,
                           "kbps": 1e3 / 8, "mbps": 1e6 / 8, "gbps": 1e9 / 8, "tbps": 1e12 / 8}

_NUMBER_UNIT = re.compile(r"\s*([0-9.]+(?:[eE][+-]?[0-9]+)?)\s*([a-zA-Z/]*)\s*")


def _split(text: str, flag: str, example: str) -> tuple[float, str]:
    match = _NUMBER_UNIT.fullmatch(text)
    if match is None:
        raise ValueError(f"{flag} must look like {example}, got {text!r}")
    try:
        value = float(match.group(1))
    except ValueError:
        raise ValueError(f"{flag} must look like {example}, got {text!r}") from None
    return value, match.group(2)


def _positive(value: float, flag: str, text: str) -> float:
    if not (value > 0 and math.isfinite(value)):
        raise ValueError(f"{flag} must be a finite size > 0, got {text!r}")
    return value


def parse_bytes(text: str, *, flag: str, require_unit: bool = False) -> float:
    """Bytes from ``"80GiB"``, ``"80GB"``, ``"512MiB"`` or, unless ``require_unit``, a bare ``"1e9"``.

    ``GB`` is 10⁹ bytes and ``GiB`` 2³⁰ (``80GB`` ≈ 74.5 GiB). With ``require_unit`` a bare
    number is refused, because ``--memory 80`` meaning 80 bytes helps nobody.
    """
    example = "80GiB or 80GB"
    value, unit = _split(text, flag, example)
    if not unit:
        if require_unit:
            raise ValueError(f"{flag} {text} has no unit: write {text.strip()}GiB (2^30 bytes) or "
                             f"{text.strip()}GB (10^9 bytes)")
        return _positive(value, flag, text)
    if unit.lower() not in BYTE_UNITS:
        raise ValueError(f"{flag}: unknown size unit {unit!r} in {text!r}; use B, kB, MB, GB, TB, KiB, MiB, "
                         "GiB or TiB")
    return _positive(value * BYTE_UNITS[unit.lower()], flag, text)


def parse_bandwidth(text: str, *, flag: str) -> float:
    """Bytes per **millisecond** from ``"25GB/s"``, ``"900GiB/s"``, ``"200Gbit/s"`` or ``"400Gbps"``.

    A bare number is refused: bandwidths are quoted per second in bytes or bits, and
    pipeplan's internal unit (bytes per ms) is nobody's habit.
    """
    example = "25GB/s or 200Gbit/s"
    value, unit = _split(text, flag, example)
    key = unit.lower()
    if key.endswith("/s") and key[:-2] in BYTE_UNITS:
        per_second = value * BYTE_UNITS[key[:-2]]
    elif key.endswith("/s") and key[:-2] in _BITS:
        per_second = value * _BITS[key[:-2]]
    elif key in _BITS and key.endswith("ps"):
        per_second = value * _BITS[key]
    elif not unit:
        raise ValueError(f"{flag} {text} has no unit: write e.g. {text.strip()}GB/s (bytes) or "
                         f"{text.strip()}Gbit/s (bits)")
    else:
        raise ValueError(f"{flag} must look like {example}, got {text!r}")
    return _positive(per_second, flag, text) / 1000.0


_TIME_UNITS = {"": 1.0, "ms": 1.0, "s": 1000.0, "us": 1e-3, "µs": 1e-3}


def parse_ms(text: str, *, flag: str) -> float:
    """Milliseconds from ``"0.5"`` (bare: ms, pipeplan's time unit), ``"0.5ms"``, ``"20us"`` or ``"2s"``; >= 0."""
    match = re.fullmatch(r"\s*([0-9.]+(?:[eE][+-]?[0-9]+)?)\s*(ms|s|us|µs)?\s*", text)
    if match is None:
        raise ValueError(f"{flag} must be a time like 0.5 (ms), 0.5ms, 20us or 2s, got {text!r}")
    value = float(match.group(1)) * _TIME_UNITS[match.group(2) or ""]
    if not math.isfinite(value):
        raise ValueError(f"{flag} must be a finite time, got {text!r}")
    return value


def parse_fraction(text: str, *, flag: str, zero: bool = False, one: bool = True) -> float:
    """A fraction from ``"0.4"`` or ``"40%"``; ``"40"`` is refused with the two spellings.

    The range is (0, 1] by default; ``zero`` admits 0 (``--headroom 0``) and ``one=False``
    refuses 1 (a headroom of 100% leaves nothing to plan with).
    """
    stripped = text.strip()
    percent = stripped.endswith("%")
    try:
        value = float(stripped[:-1] if percent else stripped)
    except ValueError:
        raise ValueError(f"{flag} must be a fraction like 0.4 or a percentage like 40%, got {text!r}") from None
    if not math.isfinite(value):
        raise ValueError(f"{flag} must be a finite fraction like 0.4 or a percentage like 40%, got {text!r}")
    if percent:
        value /= 100.0
    elif value > 1:
        raise ValueError(f"{flag} {stripped} is above 1: it is a fraction, write {value / 100:g} or {stripped}%")
    low, high = ("[0" if zero else "(0"), ("1]" if one else "1)")
    if not ((value >= 0 if zero else value > 0) and (value <= 1 if one else value < 1)):
        raise ValueError(f"{flag} must be in {low}, {high} (or {low}%, 100%{high[-1]}), got {text!r}")
    return value


def argparse_type(parse: Callable[..., float], flag: str, **options: bool) -> Callable[[str], float]:
    """An argparse ``type=`` that calls ``parse(text, flag=flag, **options)`` and reports one line."""

    def convert(text: str) -> float:
        try:
            return parse(text, flag=flag, **options)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None

    convert.__name__ = parse.__name__.removeprefix("parse_")  # argparse names the type on odd failures
    return convert


FIGURES = 3
"""Significant figures of a predicted time the cost model stands behind (docs/planner.md, *resolution*)."""


def format_figures(value: float, figures: int = FIGURES) -> str:
    """``value`` to ``figures`` significant figures, never in exponent form: ``1608.04`` → ``"1610"``,
    ``0.98341`` → ``"0.983"``, ``1234567`` → ``"1230000"``, ``7.90`` → ``"7.9"``."""
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    rounded = float(f"{value:.{figures}g}")
    decimals = max(0, figures - 1 - math.floor(math.log10(abs(rounded))))
    text = f"{rounded:.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def _trim(value: float, digits: int) -> str:
    text = f"{value:.{digits}g}"
    return text if "e" not in text else f"{value:,.0f}"


def format_gib(num_bytes: float, *, digits: int = 3, small: bool = True) -> str:
    """Memory in GiB with ``digits`` significant digits: ``85899345920`` → ``"80 GiB"``, ``1.5e9`` → ``"1.4 GiB"``.

    Below 0.01 GiB, where GiB would read ``0`` (a hand-written toy profile), the binary
    unit that suits it: ``1300`` → ``"1.27 KiB"`` — unless ``small`` is false (a table column
    whose other cells are GiB: ``"0.00238 GiB"``, one unit per column; :func:`format_gib_column`).
    """
    if small and num_bytes != 0 and abs(num_bytes) < 0.01 * GIB:
        return format_bytes(num_bytes)
    scaled = num_bytes / GIB
    text = f"{scaled:.{digits}g}"
    if "e" in text:
        text = f"{scaled:,.0f}" if abs(scaled) >= 1 else format_figures(scaled, digits)
    return f"{text} GiB"


def format_gib_column(values: Sequence[float], *, digits: int = 3) -> list[str]:
    """Cells of one table column in one unit: GiB when any is at least 0.01 GiB, else the small values' own."""
    small = all(abs(value) < 0.01 * GIB for value in values)
    return [format_gib(value, digits=digits, small=small) for value in values]


def format_memory_column(values: Sequence[float]) -> list[str]:
    """GPU memory totals of one table column or sentence, in one unit: GiB (:func:`format_gib`) when any is
    1 GiB or more, else each in the binary unit that suits it (:func:`format_bytes`): a small model's
    worst GPU reads ``36.5 MiB``, not ``0.0356 GiB``."""
    if any(abs(value) >= GIB for value in values):
        return [format_gib(value, small=False) for value in values]
    return [format_bytes(value) for value in values]


_BINARY = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def format_bytes(value: float) -> str:
    """A size in the binary unit that suits it: ``1536`` → ``"1.5 KiB"``, ``4`` → ``"4 B"`` (3 digits)."""
    size = float(value)
    for unit in _BINARY:
        if abs(size) < 1024 or unit == _BINARY[-1]:
            return f"{size:.3g} {unit}" if abs(size) < 1000 else f"{size:,.0f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")  # pragma: no cover


def format_capacity(capacity: float, *, headroom: float) -> str:
    """A GPU's memory and what a plan may use: ``"80 GiB (72 GiB usable, 10% headroom)"``.

    ``headroom`` is the share left free, in [0, 1); ``0`` prints the capacity alone.
    """
    if headroom <= 0:
        return format_gib(capacity)
    return f"{format_gib(capacity)} ({format_gib(capacity * (1 - headroom))} usable, {headroom:.0%} headroom)"


def format_bandwidth(bytes_per_ms: float) -> str:
    """A bandwidth per second in decimal bytes: ``25e6`` bytes/ms → ``"25 GB/s"``; ``inf`` → ``"unbounded"``."""
    if not math.isfinite(bytes_per_ms):
        return "unbounded"
    per_second = bytes_per_ms * 1000.0
    for name, size in (("TB/s", 1e12), ("GB/s", 1e9), ("MB/s", 1e6), ("kB/s", 1e3)):
        if per_second >= size:
            return f"{_trim(per_second / size, 3)} {name}"
    return f"{_trim(per_second, 3)} B/s"
