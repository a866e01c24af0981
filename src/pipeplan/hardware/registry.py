"""The device registry: name → :class:`~pipeplan.hardware.DeviceRecord`, one line per device.

A new GPU is one record in one module (a family's module, or a new one named
in the import below) and one line in :data:`DEVICES`; the CLI's ``--gpu``
choices, a cluster's default intra-node link and the calibration's mapping of
torch's device name all come from here::

    >>> from pipeplan import hardware
    >>> hardware.get("h100-80g").intra_node, hardware.intra_node_link("a100-80g").name
    ('nvlink-h100', 'nvlink-a100')
    >>> hardware.match_torch_name("NVIDIA A100-SXM4-40GB").name
    'a100-40g'
"""

from __future__ import annotations

from dataclasses import replace

from ..errors import InvalidInputError
from . import ada, ampere, cpu, hopper
from .links import Link, link
from .record import DeviceRecord
from .roofline import Device

__all__ = ["DEVICES", "FALLBACK_INTRA_NODE", "get", "device", "device_names", "match_torch_name",
           "intra_node_link"]

#: Every device, in the order the CLI lists them: one line each.
DEVICES: dict[str, DeviceRecord] = {record.name: record for record in (
    ampere.A100_40G,
    ampere.A100_80G,
    hopper.H100_80G,
    hopper.H100_96G,
    hopper.H200_141G,
    ada.L40S,
    cpu.CPU,
)}

#: The link inside a node of a device no record names (a calibrated device of another GPU): NVLink 4.
FALLBACK_INTRA_NODE = "nvlink-h100"


def device_names() -> list[str]:
    """Names of the device presets (``--gpu``'s choices)."""
    return list(DEVICES)


def get(name: str) -> DeviceRecord:
    """The record of the device ``name``.

    Raises:
        InvalidInputError: an unknown name (the message lists the presets).
    """
    if name not in DEVICES:
        raise InvalidInputError(f"gpu must be one of {', '.join(DEVICES)}, got {name!r}")
    return DEVICES[name]


def device(name: str, *, achievable_fraction: float | None = None) -> Device:
    """The device preset ``name``'s cost model, optionally with another ``achievable_fraction``.

    Raises:
        InvalidInputError: an unknown name (the message lists the presets) or a
            fraction outside (0, 1].
    """
    preset = get(name).device
    if achievable_fraction is None:
        return preset
    return replace(preset, achievable_fraction=achievable_fraction)


def match_torch_name(torch_name: str) -> DeviceRecord | None:
    """The record whose :attr:`~DeviceRecord.torch_names` match ``torch.cuda.get_device_name``'s ``torch_name``.

    ``None`` for a name no record matches (a CPU, another GPU).
    """
    return next((record for record in DEVICES.values() if record.matches(torch_name)), None)


def intra_node_link(device_name: str) -> Link:
    """The link inside a node of the device ``device_name``.

    The record's :attr:`~DeviceRecord.intra_node`; :data:`FALLBACK_INTRA_NODE` for a
    name no record holds (a device file of another GPU).
    """
    record = DEVICES.get(device_name)
    return record.intra_node_link if record is not None else link(FALLBACK_INTRA_NODE)
