"""A nominal CPU host: the flat model at 1 TFLOP/s, for small planning runs and tests.

Not a measurement of any machine (``pipeplan calibrate`` measures yours); torch
reports no CUDA name for it, so a calibration never maps to this record::

    from pipeplan.hardware import cpu
    cpu.CPU.device.flat                         # True
"""

from __future__ import annotations

from .record import DeviceRecord
from .roofline import Device

__all__ = ["CPU"]

CPU = DeviceRecord(
    Device("cpu", 64 * 2**30, 1e12, memory_bandwidth=50e9, achievable_fraction=1.0,
           description="a nominal CPU host (1 TFLOP/s, 64 GiB, flat model) for small planning runs and "
                       "tests; not a measurement of any machine (`pipeplan calibrate` measures yours)"),
    intra_node="pcie-gen4")
