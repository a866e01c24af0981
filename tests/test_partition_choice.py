"""``--partition auto|even|a,b,...``: what the one parser accepts and refuses, and what each choice resolves to."""

from __future__ import annotations

import pytest

from pipeplan.errors import InvalidInputError
from pipeplan.layers import LayerProfile
from pipeplan.partition import even_split, partition_layers
from pipeplan.partition.choice import parse_partition, resolve_partition


@pytest.mark.parametrize("text,expected", [
    ("auto", "auto"), ("even", "even"), ("3,4,3", [3, 4, 3]), ("7", [7]), (" 2, 5", [2, 5]),
    ("0,4", [0, 4]), ("-1,2", [-1, 2]),  # counts are the caller's to check against its model
])
def test_accepted(text, expected):
    assert parse_partition(text) == expected


@pytest.mark.parametrize("text", ["3,x", "", "3,,4", "1.5,2", "Auto", "balanced", "3;4"])
def test_refused_naming_the_flag_and_the_value(text):
    with pytest.raises(InvalidInputError) as error:
        parse_partition(text)
    assert str(error.value) == f"--partition must be 'auto', 'even' or numbers like 3,4,3, got {text!r}"


def test_the_message_takes_the_callers_flag_and_example():
    with pytest.raises(InvalidInputError, match=r"^--split must be 'auto', 'even' or numbers like 6,4, got 'a'$"):
        parse_partition("a", flag="--split", example="6,4")


def test_resolved():
    profile = LayerProfile([4, 1, 3, 5, 4, 4, 3, 4, 3, 5])
    assert resolve_partition([6, 4], profile, 2) == [6, 4]
    assert resolve_partition((6, 4), profile, 2) == [6, 4]
    assert resolve_partition("even", profile, 3) == list(even_split(10, 3))
    assert resolve_partition("auto", profile, 3) == list(partition_layers(profile, 3).layers_per_stage)
