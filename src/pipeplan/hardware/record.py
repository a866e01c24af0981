"""One device's record: its cost model, the link inside its nodes, and the names torch reports for it.

The registry (:mod:`pipeplan.hardware.registry`) holds one record per device;
everything that needs to know a device by name asks it::

    >>> from pipeplan import hardware
    >>> record = hardware.get("l40s")
    >>> record.intra_node, record.matches("NVIDIA L40S")
    ('pcie-gen4', True)
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import InvalidInputError
from .links import LINKS, Link
from .roofline import Device

__all__ = ["DeviceRecord"]


@dataclass(frozen=True)
class DeviceRecord:
    """A device preset as the registry holds it.

    Attributes:
        device: the per-operator cost model (peak, memory, efficiencies, their sources).
        intra_node: name of the link between GPUs of one node (a :data:`~pipeplan.hardware.LINKS`
            preset) that a cluster of this device uses unless told otherwise.
        torch_names: regular expressions, searched case-insensitively, that match what
            ``torch.cuda.get_device_name`` reports for this device (``"NVIDIA H100 80GB HBM3"``);
            empty for a device a calibration never maps to this record. No two records may
            match one name.
    """

    device: Device
    intra_node: str
    torch_names: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.intra_node not in LINKS:
            raise InvalidInputError(f"{self.device.name}.intra_node must be one of {', '.join(LINKS)}, "
                                    f"got {self.intra_node!r}")
        for pattern in self.torch_names:
            try:
                re.compile(pattern)
            except re.error as error:
                raise InvalidInputError(f"{self.device.name}.torch_names: {pattern!r} is not a regular "
                                        f"expression ({error})") from None

    @property
    def name(self) -> str:
        """The device's name (what ``--gpu`` takes)."""
        return self.device.name

    @property
    def intra_node_link(self) -> Link:
        """The :class:`~pipeplan.hardware.Link` named by :attr:`intra_node`."""
        return LINKS[self.intra_node]

    def matches(self, torch_name: str) -> bool:
        """Whether torch's device name ``torch_name`` is this device."""
        return any(re.search(pattern, torch_name, flags=re.IGNORECASE) for pattern in self.torch_names)
