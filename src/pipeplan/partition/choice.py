"""The ``--partition auto|even|a,b,...`` choice: parsed once, resolved into layers per stage once.

    from pipeplan.partition.choice import parse_partition, resolve_partition
    choice = parse_partition("3,4,3")                  # [3, 4, 3]; "auto" and "even" stay strings
    resolve_partition("even", profile, num_stages=4)   # layers per stage of an even split

``"auto"`` is the balanced partition of a layer profile
(:func:`~pipeplan.partition.partition_layers`), ``"even"`` the even split of the
layers (:func:`~pipeplan.partition.even_split`), and a comma list the layers of
each stage. The CLI's ``simulate --profile`` and ``run`` and the runtime's
:class:`~pipeplan.runtime.loop.RunConfig` use these two functions; each checks the
counts against its own model and says so in its own words. Torch-free.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import InvalidInputError
from ..layers import LayerProfile
from .solver import even_split, partition_layers

__all__ = ["PartitionChoice", "parse_partition", "resolve_partition"]

#: ``"auto"``, ``"even"`` or the layers of each stage.
PartitionChoice = str | Sequence[int]

_NAMED = ("auto", "even")


def parse_partition(text: str, *, flag: str = "--partition", example: str = "3,4,3") -> str | list[int]:
    """``"auto"`` or ``"even"`` as given, else the comma list's integers (not yet checked against a model).

    Args:
        text: the option's value.
        flag: how the message names the option.
        example: the layer counts the message shows as an example.

    Raises:
        InvalidInputError: an entry that is not an integer, naming ``flag`` and the value.
    """
    if text in _NAMED:
        return text
    try:
        return [int(part) for part in text.split(",")]
    except ValueError:
        raise InvalidInputError(f"{flag} must be 'auto', 'even' or numbers like {example}, got {text!r}") from None


def resolve_partition(choice: PartitionChoice, profile: LayerProfile, num_stages: int) -> list[int]:
    """Layers per stage for ``choice``: the counts as given, ``"even"``'s split of the profile's
    layers into ``num_stages``, or else (``"auto"``) the balanced partition of ``profile``."""
    if not isinstance(choice, str):
        return list(choice)
    if choice == "even":
        return list(even_split(profile.num_layers, num_stages))
    return list(partition_layers(profile, num_stages).layers_per_stage)
