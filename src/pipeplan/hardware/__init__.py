"""Devices and links: what an operation and a message cost on real hardware.

The one owner of the device vocabulary. Each device is one
:class:`DeviceRecord` (its :class:`Device` cost model with peak, memory,
efficiencies and their sources; its default intra-node link; the names torch
reports for it) in a family module (:mod:`~pipeplan.hardware.ampere`,
:mod:`~pipeplan.hardware.hopper`, :mod:`~pipeplan.hardware.ada`,
:mod:`~pipeplan.hardware.cpu`), listed on one line of
:mod:`~pipeplan.hardware.registry`. :mod:`~pipeplan.hardware.roofline` is the
per-operator cost model, :mod:`~pipeplan.hardware.links` the NCCL link presets,
:mod:`~pipeplan.hardware.device_file` a calibrated device as JSON and
:mod:`~pipeplan.hardware.fit` the fit of raw timings to a device::

    >>> from pipeplan import hardware
    >>> hardware.get("h100-80g").device is hardware.device("h100-80g")
    True
    >>> hardware.intra_node_link("l40s").name, hardware.link("ib-ndr").latency_ms
    ('pcie-gen4', 0.02)
"""

from __future__ import annotations

from .ampere import A100_FIT, LAUNCH_OVERHEAD_MS
from .links import LINKS, Link, link, link_names
from .record import DeviceRecord
from .registry import DEVICES, FALLBACK_INTRA_NODE, device, device_names, get, intra_node_link, match_torch_name
from .roofline import Device, GemmPoint

__all__ = [
    "Device", "GemmPoint", "DeviceRecord", "Link", "DEVICES", "LINKS", "FALLBACK_INTRA_NODE", "A100_FIT",
    "LAUNCH_OVERHEAD_MS", "get", "device", "device_names", "match_torch_name", "intra_node_link", "link",
    "link_names",
]
