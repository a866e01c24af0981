"""Device files: a calibrated :class:`~pipeplan.hardware.Device` (and its point-to-point link) as JSON.

``pipeplan calibrate --out device.json`` writes one; ``plan``, ``model`` and
``partition`` read it with ``--device device.json``::

    from pipeplan.hardware.device_file import read_device, write_device
    loaded = read_device("device.json")           # DeviceFile(device, p2p, measurement)
    loaded.device.gemm_efficiency, loaded.p2p      # the fitted Device; a Link or None

The file (``version`` 1)::

    {"format": "pipeplan-device", "version": 1,
     "device": {the fields of hardware.Device (REQUIRED_FIELDS at least; a field left out takes
                the Device's default); "gemm_table": [[m, n, k, efficiency], ...],
                "gemm_tile": [rows, cols], "achievable_fraction": null for the per-operator model},
     "p2p": {"latency_ms": 0.012, "bandwidth": 4.1e10},          # optional; bytes/s one way
     "measurement": {free notes: torch version, device name, when, repeats, the raw timings}}

Every bad file is one :class:`~pipeplan.errors.InvalidInputError` line naming the
file and the field: another format or version, a missing or unknown field, an
efficiency outside (0, 1], a non-positive peak, bandwidth or memory, a malformed
GEMM table. The fit from raw timings to a Device is :mod:`pipeplan.hardware.fit`.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._files import check_output_path, read_text
from ..errors import InvalidInputError
from .links import Link
from .roofline import Device, GemmPoint

__all__ = ["FORMAT", "VERSION", "REQUIRED_FIELDS", "DeviceFile", "device_fields", "read_device", "write_device",
           "parse_device", "calibrated_link", "gemm_point"]

FORMAT = "pipeplan-device"
VERSION = 1

_TOP_KEYS = ("format", "version", "device", "p2p", "measurement")
_P2P_KEYS = ("latency_ms", "bandwidth")


@dataclass(frozen=True)
class DeviceFile:
    """What a device file holds.

    Attributes:
        device: the calibrated :class:`~pipeplan.hardware.Device`.
        p2p: the measured point-to-point :class:`~pipeplan.hardware.Link` (``None``
            when the calibration had one accelerator, or ran with ``--no-p2p``).
        measurement: free notes on how it was measured (torch version, device
            name, date, repeats, raw timings), JSON values.
    """

    device: Device
    p2p: Link | None = None
    measurement: Mapping[str, Any] = field(default_factory=dict)


def _json_value(value: Any) -> Any:
    """A field value as JSON: GEMM points and tuples as lists, mappings as objects."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [_json_value(getattr(value, f.name)) for f in dataclasses.fields(value)]
    if isinstance(value, (tuple, list)):
        return [_json_value(item) for item in value]
    if isinstance(value, Mapping):
        return {str(key): _json_value(item) for key, item in value.items()}
    return value


def device_fields(device: Device) -> dict[str, Any]:
    """Every field of ``device`` (a :class:`~pipeplan.hardware.Device`) as JSON values.

    The ``"device"`` object of a device file and of ``plan``/``model --json``:
    ``gemm_table`` as ``[[m, n, k, efficiency], ...]``, ``gemm_tile`` as a list.
    """
    return {f.name: _json_value(getattr(device, f.name)) for f in dataclasses.fields(device)}


def write_device(path: str | os.PathLike[str], device: Device, *, p2p: Link | None = None,
                 measurement: Mapping[str, Any] | None = None) -> Path:
    """Write ``device`` (and the optional ``p2p`` link and notes) as a version-1 device file; returns the path.

    Raises:
        InvalidInputError: the path cannot be written, or the notes are not JSON values.
    """
    file = check_output_path(path, "device file")
    payload: dict[str, Any] = {"format": FORMAT, "version": VERSION, "device": device_fields(device)}
    if p2p is not None:
        payload["p2p"] = {"latency_ms": p2p.latency_ms, "bandwidth": p2p.bandwidth}
    payload["measurement"] = dict(measurement or {})
    try:
        text = json.dumps(payload, indent=1, allow_nan=False)
    except (TypeError, ValueError) as error:
        raise InvalidInputError(f"device file {str(file)!r}: the measurement notes are not JSON: {error}") from None
    file.write_text(text + "\n", encoding="utf-8")
    return file


def read_device(path: str | os.PathLike[str]) -> DeviceFile:
    """Read and check a device file (see the module doc).

    Raises:
        InvalidInputError: one line naming the file and the first bad field.
    """
    where = f"device file {str(path)!r}"
    text = read_text(path, "device file")
    try:
        payload = json.loads(text)
    except json.JSONDecodeError as error:
        raise InvalidInputError(f"{where} is not valid JSON: {error}") from None
    return parse_device(payload, where=where)


def parse_device(payload: object, *, where: str = "device file") -> DeviceFile:
    """The :class:`DeviceFile` of a parsed JSON ``payload``; errors start with ``where``."""
    if not isinstance(payload, dict):
        raise InvalidInputError(f"{where}: must hold a JSON object, got {type(payload).__name__}")
    if payload.get("format") != FORMAT:
        raise InvalidInputError(f"{where}: format must be {FORMAT!r} (a file from pipeplan calibrate), "
                                f"got {payload.get('format')!r}")
    if payload.get("version") != VERSION or isinstance(payload.get("version"), bool):
        raise InvalidInputError(f"{where}: version must be {VERSION} (this pipeplan reads version {VERSION}), "
                                f"got {payload.get('version')!r}")
    _check_keys(where, "the file", payload, required=("format", "version", "device"), allowed=_TOP_KEYS)
    device = _parse_device_fields(where, payload["device"])
    p2p = None
    if payload.get("p2p") is not None:
        p2p = _parse_p2p(where, payload["p2p"], device.name)
    measurement = payload.get("measurement", {})
    if not isinstance(measurement, dict):
        raise InvalidInputError(f"{where}: measurement must be an object of notes, got {measurement!r:.60}")
    return DeviceFile(device, p2p, measurement)


def _check_keys(where: str, what: str, payload: Mapping[str, Any], *, required: tuple[str, ...],
                allowed: tuple[str, ...]) -> None:
    missing = [key for key in required if key not in payload]
    if missing:
        raise InvalidInputError(f"{where}: {what} is missing {', '.join(missing)}")
    unknown = sorted(set(payload) - set(allowed))
    if unknown:
        raise InvalidInputError(f"{where}: {what} has unknown field(s) {', '.join(unknown)}; "
                                f"allowed: {', '.join(allowed)}")


# ---------------------------------------------------------------- field checks
def _number(field_name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InvalidInputError(f"{field_name} must be a finite number, got {value!r:.60}")
    return float(value)


def _positive(field_name: str, value: object) -> float:
    number = _number(field_name, value)
    if number <= 0:
        raise InvalidInputError(f"{field_name} must be > 0, got {value!r}")
    return number


def _non_negative(field_name: str, value: object) -> float:
    number = _number(field_name, value)
    if number < 0:
        raise InvalidInputError(f"{field_name} must be >= 0, got {value!r}")
    return number


def _fraction(field_name: str, value: object) -> float:
    number = _number(field_name, value)
    if not 0 < number <= 1:
        raise InvalidInputError(f"{field_name} must be in (0, 1], got {value!r}")
    return number


def _optional_fraction(field_name: str, value: object) -> float | None:
    return None if value is None else _fraction(field_name, value)


def _count(field_name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidInputError(f"{field_name} must be an integer >= 1, got {value!r:.60}")
    return value


def _text(field_name: str, value: object) -> str:
    if not isinstance(value, str):
        raise InvalidInputError(f"{field_name} must be a string, got {value!r:.60}")
    return value


def _name(field_name: str, value: object) -> str:
    if not _text(field_name, value).strip():
        raise InvalidInputError(f"{field_name} must be a non-empty name, got {value!r}")
    return str(value)


def _tile(field_name: str, value: object) -> tuple[int, int]:
    if not isinstance(value, list) or len(value) != 2:
        raise InvalidInputError(f"{field_name} must be [rows, cols], got {value!r:.60}")
    return _count(f"{field_name}[0]", value[0]), _count(f"{field_name}[1]", value[1])


def _gemm_table(field_name: str, value: object) -> tuple[GemmPoint, ...]:
    if not isinstance(value, list):
        raise InvalidInputError(f"{field_name} must be a list of [m, n, k, efficiency], got {value!r:.60}")
    points = []
    for index, row in enumerate(value):
        where = f"{field_name}[{index}]"
        if not isinstance(row, list) or len(row) != 4:
            raise InvalidInputError(f"{where} must be [m, n, k, efficiency], got {row!r:.60}")
        m, n, k = (_count(f"{where}.{axis}", size) for axis, size in zip("mnk", row[:3]))
        points.append(gemm_point(m, n, k, _fraction(f"{where}.efficiency", row[3])))
    return tuple(points)


def _sources(field_name: str, value: object) -> dict[str, str]:
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise InvalidInputError(f"{field_name} must be an object of field → source text, got {value!r:.60}")
    return dict(value)


def gemm_point(m: int, n: int, k: int, efficiency: float) -> GemmPoint:
    """A :class:`~pipeplan.hardware.GemmPoint`: measured efficiency (FLOPs / (time · peak)) of one ``m × n × k`` GEMM.

    Raises:
        InvalidInputError: a size < 1 or an efficiency outside (0, 1].
    """
    return GemmPoint(m=m, n=n, k=k, efficiency=efficiency)


#: Device fields a version-1 file must carry (the others, and fields the Device gains later, may be left
#: out: the Device's defaults apply).
REQUIRED_FIELDS = ("name", "memory_bytes", "peak_flops", "memory_bandwidth", "gemm_efficiency",
                   "attention_efficiency", "memory_efficiency", "launch_overhead_ms", "num_sms", "gemm_tile")

#: The check of each Device field a file may carry (fields the Device gains later pass through unchecked).
_FIELD_CHECKS: dict[str, Callable[[str, Any], Any]] = {
    "name": _name,
    "memory_bytes": _positive,
    "peak_flops": _positive,
    "memory_bandwidth": _positive,
    "gemm_efficiency": _fraction,
    "attention_efficiency": _fraction,
    "memory_efficiency": _fraction,
    "random_efficiency": _fraction,
    "launch_overhead_ms": _non_negative,
    "num_sms": _count,
    "gemm_tile": _tile,
    "gemm_fill_k": _count,
    "gemm_table": _gemm_table,
    "achievable_fraction": _optional_fraction,
    "description": _text,
    "sources": _sources,
}


def _parse_device_fields(where: str, payload: object) -> Device:
    if not isinstance(payload, dict):
        raise InvalidInputError(f"{where}: device must be an object of Device fields, got {payload!r:.60}")
    fields = dataclasses.fields(Device)
    required = tuple(dict.fromkeys(REQUIRED_FIELDS + tuple(
        f.name for f in fields if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)))
    _check_keys(where, "device", payload, required=required, allowed=tuple(f.name for f in fields))
    values: dict[str, Any] = {}
    try:
        for key, value in payload.items():
            check = _FIELD_CHECKS.get(key)
            values[key] = check(f"device.{key}", value) if check is not None else value
        return Device(**values)
    except InvalidInputError as error:
        raise InvalidInputError(f"{where}: {error}") from None
    except (TypeError, ValueError) as error:  # the Device's own checks, worded by it
        raise InvalidInputError(f"{where}: device: {error}") from None


def _parse_p2p(where: str, payload: object, device_name: str) -> Link:
    if not isinstance(payload, dict):
        raise InvalidInputError(f"{where}: p2p must be an object with latency_ms and bandwidth, got {payload!r:.60}")
    _check_keys(where, "p2p", payload, required=_P2P_KEYS, allowed=_P2P_KEYS)
    try:
        latency = _non_negative("p2p.latency_ms", payload["latency_ms"])
        bandwidth = _positive("p2p.bandwidth", payload["bandwidth"])
    except InvalidInputError as error:
        raise InvalidInputError(f"{where}: {error}") from None
    return calibrated_link(device_name, latency, bandwidth)


def calibrated_link(device_name: str, latency_ms: float, bandwidth: float) -> Link:
    """The :class:`~pipeplan.hardware.Link` of a device file's ``p2p``: ``latency_ms`` ms, ``bandwidth`` bytes/s."""
    return Link(name=f"{device_name} p2p (calibrated)", latency_ms=latency_ms, bandwidth=bandwidth,
                         description="point-to-point, measured by pipeplan calibrate")
