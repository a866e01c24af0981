"""pipeplan.units: sizes and bandwidths name their unit on input; memory prints in GiB."""

from __future__ import annotations

import argparse

import pytest
from hypothesis import given, strategies as st

from pipeplan import units


@pytest.mark.parametrize(("text", "expected"), [
    ("80GiB", 80 * 2**30), ("80GB", 80e9), ("512MiB", 512 * 2**20), ("1.5 TB", 1.5e12), ("7b", 7),
])
def test_parse_bytes_reads_decimal_and_binary_units(text: str, expected: float) -> None:
    assert units.parse_bytes(text, flag="--memory", require_unit=True) == pytest.approx(expected)


def test_a_bare_memory_is_refused_with_both_spellings() -> None:
    # issue 24: `--memory 80` used to mean 80 bytes ("no plan fits 8e-08 GB per GPU")
    with pytest.raises(ValueError, match=r"--memory 80 has no unit: write 80GiB .* or 80GB"):
        units.parse_bytes("80", flag="--memory", require_unit=True)
    assert units.parse_bytes("80", flag="--boundary-bytes") == 80


@pytest.mark.parametrize("text", ["", "GB", "80 parsecs", "-3GB", "0GiB", "1e999GB"])
def test_bad_sizes_name_the_flag(text: str) -> None:
    with pytest.raises(ValueError, match="--memory"):
        units.parse_bytes(text, flag="--memory", require_unit=True)


@pytest.mark.parametrize(("text", "bytes_per_second"), [
    ("25GB/s", 25e9), ("900GiB/s", 900 * 2**30), ("200Gbit/s", 25e9), ("400Gbps", 50e9), ("12 MB/s", 12e6),
])
def test_bandwidths_come_back_in_bytes_per_ms(text: str, bytes_per_second: float) -> None:
    assert units.parse_bandwidth(text, flag="--comm-bandwidth") == pytest.approx(bytes_per_second / 1000)


def test_a_bare_bandwidth_is_refused() -> None:
    with pytest.raises(ValueError, match=r"--comm-bandwidth 25 has no unit: write e.g. 25GB/s"):
        units.parse_bandwidth("25", flag="--comm-bandwidth")


@pytest.mark.parametrize(("text", "expected"), [("0.4", 0.4), ("40%", 0.4), ("100%", 1.0), ("1", 1.0)])
def test_fractions_read_both_spellings(text: str, expected: float) -> None:
    assert units.parse_fraction(text, flag="--mfu") == pytest.approx(expected)


def test_a_percentage_without_its_sign_names_the_flag_and_both_spellings() -> None:
    # issue 24: `--mfu 40` failed naming achievable_fraction, an internal field
    with pytest.raises(ValueError, match=r"--mfu 40 is above 1: it is a fraction, write 0.4 or 40%"):
        units.parse_fraction("40", flag="--mfu")
    for bad in ("0", "-0.1", "150%", "forty"):
        with pytest.raises(ValueError, match="--mfu"):
            units.parse_fraction(bad, flag="--mfu")


def test_argparse_type_reports_one_line() -> None:
    parser = argparse.ArgumentParser(exit_on_error=False)
    parser.add_argument("--memory", type=units.argparse_type(units.parse_bytes, "--memory", require_unit=True))
    assert parser.parse_args(["--memory", "40GiB"]).memory == 40 * 2**30
    with pytest.raises(argparse.ArgumentError, match="has no unit"):
        parser.parse_args(["--memory", "40"])


def test_memory_prints_in_gib_and_capacity_shows_headroom() -> None:
    assert units.format_gib(80 * 2**30) == "80 GiB"
    assert units.format_gib(1.5e9) == "1.4 GiB"
    assert units.format_gib(1.71349e10) == "16 GiB"
    assert units.format_capacity(80 * 2**30, headroom=0.1) == "80 GiB (72 GiB usable, 10% headroom)"
    assert units.format_capacity(80 * 2**30, headroom=0) == "80 GiB"


def test_bandwidth_prints_per_second_and_says_when_unbounded() -> None:
    assert units.format_bandwidth(25e6) == "25 GB/s"
    assert units.format_bandwidth(float("inf")) == "unbounded"


@given(st.floats(min_value=0.01, max_value=1e6))
def test_gib_round_trip(gib: float) -> None:
    parsed = units.parse_bytes(f"{gib!r}GiB", flag="--memory", require_unit=True)
    assert float(units.format_gib(parsed, digits=3).split()[0].replace(",", "")) == pytest.approx(gib, rel=6e-3)


def test_tiny_memory_falls_back_to_the_unit_that_suits_it() -> None:
    # a hand-written toy profile of a few KiB would otherwise read "0 GiB"
    assert units.format_gib(1300) == "1.27 KiB"
    assert units.format_gib(0) == "0 GiB"


def test_headroom_admits_zero_and_refuses_the_whole_gpu() -> None:
    assert units.parse_fraction("0", flag="--headroom", zero=True, one=False) == 0
    assert units.parse_fraction("10%", flag="--headroom", zero=True, one=False) == pytest.approx(0.1)
    for whole in ("1", "100%"):
        with pytest.raises(ValueError, match=r"--headroom must be in \[0, 1\)"):
            units.parse_fraction(whole, flag="--headroom", zero=True, one=False)


@pytest.mark.parametrize(("value", "text"), [
    (1608.04, "1610"), (0.98341, "0.983"), (1234567, "1230000"), (7.90, "7.9"), (747.33, "747"), (0, "0"),
])
def test_figures_never_use_an_exponent(value: float, text: str) -> None:
    assert units.format_figures(value) == text


@given(st.floats(min_value=1e-6, max_value=1e12))
def test_figures_round_to_three_significant_digits(value: float) -> None:
    text = units.format_figures(value)
    assert "e" not in text
    assert float(text) == pytest.approx(value, rel=5e-3)


def test_a_column_keeps_one_unit() -> None:
    # newcomer walk: a partition table showed "0.0238 GiB" above "8.91 MiB"
    assert units.format_gib_column([2.5e7, 2.9e6]) == ["0.0233 GiB", "0.0027 GiB"]
    assert units.format_gib_column([9.34e6, 1300]) == ["8.91 MiB", "1.27 KiB"]  # all small: their own units
    assert units.format_gib(2**50, small=False) == "1,048,576 GiB"


@pytest.mark.parametrize(("text", "ms"), [("0.5", 0.5), ("0.5ms", 0.5), ("20us", 0.02), ("20µs", 0.02), ("2s", 2000.0)])
def test_times_are_ms_bare_or_carry_their_unit(text: str, ms: float) -> None:
    # newcomer walk: `--comm-latency 1ms` failed with argparse's "invalid float value"
    assert units.parse_ms(text, flag="--comm-latency") == pytest.approx(ms)


@pytest.mark.parametrize("text", ["-1", "nan", "1 parsec", "ms"])
def test_a_bad_time_names_the_flag(text: str) -> None:
    with pytest.raises(ValueError, match="--comm-latency must be a time like 0.5"):
        units.parse_ms(text, flag="--comm-latency")
