"""From raw kernel timings to a calibrated :class:`~pipeplan.hardware.Device` (torch-free).

:mod:`pipeplan.runtime.device_calibration` times the kernels with torch; this
module turns its :class:`Timings` into a Device and a point-to-point Link::

    from pipeplan.hardware.fit import Timings, GemmTiming, device_from_timings
    timings = Timings("cpu", memory_bytes=64e9, num_sms=16, gemms=(GemmTiming(1024, 256, 256, 4e-4), ...), ...)
    device = device_from_timings(timings)      # device.gemm_table, device.memory_efficiency, ...

What each field of the Device comes from:

* ``peak_flops``, ``memory_bandwidth``, ``gemm_tile``: the spec values of the
  device record whose torch names the accelerator's name matches
  (:func:`pipeplan.hardware.match_torch_name`); on anything else (a CPU) the best
  measured rate of a GEMM or attention kernel and the best measured bandwidth of
  a memory-bound kernel, and the 128 × 128 tile.
* ``launch_overhead_ms``: the median time of the smallest kernel.
* ``gemm_table``: one point per measured GEMM, ``efficiency = 2 m n k / (busy ·
  peak_flops)`` where *busy* is the measured time less the launch overhead (the
  device model adds the launch overhead back, so a measured shape is reproduced);
  when the launch overhead is more than half the measured time, *busy* is half
  the measured time instead (such a kernel is mostly launch and says little).
* ``gemm_efficiency``: the median efficiency of the largest quarter of the
  measured GEMMs (by FLOPs, at least one).
* ``attention_efficiency``: the median efficiency of the largest attention
  shape of each kind (causal, not causal); FLOPs of a forward are
  ``4 · b · heads · s² · d``, half of that when causal (FlashAttention-2's count).
* ``memory_efficiency``: the median of ``bytes moved / (busy · memory_bandwidth)``
  over the largest size of each memory-bound kernel (copy, add, layer norm);
  ``random_efficiency`` (when the Device has it) the same for the kernels that draw
  random numbers (``dropout``), left at the Device's default when none was timed.
* the p2p :class:`~pipeplan.hardware.Link`: a least-squares line through
  ``(bytes, one-way seconds)`` (:func:`pipeplan.calibration.fit_link`).

An efficiency above 1 by up to :data:`OVER_PEAK_TOLERANCE` (timer noise) is
read as 1; beyond that the spec peak cannot be right and the timings are refused.

**Refused timings** (one :class:`~pipeplan.errors.InvalidInputError` line): none of
a kind that is needed (GEMMs, memory-bound kernels, launches), any time that is
not finite and > 0 (all zero: the timer did not run), and times that are
**non-monotone in size**: of two kernels of one family (same memory kernel; GEMMs
or attention shapes where one is no smaller in every dimension; p2p messages) whose
sizes differ at least :data:`MONOTONE_SIZE_RATIO` × (4×), the larger taking less
than ``1 − MONOTONE_TOLERANCE`` (75 %) of the smaller one's time, or for p2p
messages ``1 − P2P_MONOTONE_TOLERANCE`` (50 %). Noise between repeats of one
kernel stays well under 25 % after taking medians, so a 4× larger kernel 25 %
faster is a broken measurement; small messages between two processes wait for
the receiver to be scheduled, and on a loaded CPU host their medians were seen
±40 % apart (gloo, 4 B at 191 µs and 64 kB at 123 µs on one run), hence the wider p2p band.
"""

from __future__ import annotations

import dataclasses
import math
import re
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..calibration import fit_link
from ..errors import InvalidInputError
from .device_file import calibrated_link, gemm_point
from .links import Link
from .registry import match_torch_name
from .roofline import Device

__all__ = [
    "GemmTiming", "AttentionTiming", "MemoryTiming", "Timings", "device_from_timings",
    "link_from_timings", "MONOTONE_SIZE_RATIO", "MONOTONE_TOLERANCE", "P2P_MONOTONE_TOLERANCE",
    "OVER_PEAK_TOLERANCE", "DEFAULT_TILE", "RANDOM_KERNELS",
]

MONOTONE_SIZE_RATIO = 4.0
"""Sizes this far apart (or more) must not take less time as they grow (beyond the tolerance)."""
MONOTONE_TOLERANCE = 0.25
"""How much faster (fraction of the smaller one's time) a 4× larger kernel may look before it is refused."""
P2P_MONOTONE_TOLERANCE = 0.5
"""The same for point-to-point messages, whose latency-bound sizes are noisier (see the module doc)."""
OVER_PEAK_TOLERANCE = 0.10
"""Efficiencies up to ``1 + this`` are read as 1; above it the peak is wrong and the timings are refused."""
RANDOM_KERNELS = frozenset({"dropout"})
"""Memory-bound kernels that draw random numbers (``random_efficiency``, not ``memory_efficiency``)."""
DEFAULT_TILE = (128, 128)
"""GEMM output tile of a device that matches no preset (cuBLAS's common 128 × 128 CTA tile)."""


@dataclass(frozen=True)
class GemmTiming:
    """``(m × k) @ (k × n)`` took ``seconds`` (median of repeats)."""

    m: int
    n: int
    k: int
    seconds: float

    @property
    def flops(self) -> float:
        """``2 m n k``."""
        return 2.0 * self.m * self.n * self.k


@dataclass(frozen=True)
class AttentionTiming:
    """One scaled-dot-product attention forward over ``(batch, heads, seq_length, head_dim)``."""

    batch: int
    heads: int
    seq_length: int
    head_dim: int
    causal: bool
    seconds: float

    @property
    def flops(self) -> float:
        """``4 · b · heads · s² · d`` (QKᵀ and PV), half when causal (FlashAttention-2's convention)."""
        full = 4.0 * self.batch * self.heads * self.seq_length**2 * self.head_dim
        return full / 2 if self.causal else full


@dataclass(frozen=True)
class MemoryTiming:
    """A memory-bound ``kernel`` ("copy", "add", "layer_norm", "dropout") that moved ``bytes`` (read + written)."""

    kernel: str
    bytes: float
    seconds: float


_KINDS: dict[str, type] = {"gemms": GemmTiming, "attention": AttentionTiming, "memory": MemoryTiming}


@dataclass(frozen=True)
class Timings:
    """Raw timings of one accelerator, seconds (what :func:`device_from_timings` fits).

    Attributes:
        device_name: torch's name of the device (``"NVIDIA H100 80GB HBM3"``, ``"cpu"``).
        memory_bytes: memory a process can allocate, bytes.
        num_sms: streaming multiprocessors (cores on a CPU).
        gemms, attention, memory: the kernels timed.
        launch: seconds per launch of the smallest kernel, one value per repeat.
        p2p: ``(bytes, one-way seconds)`` per message size between two ranks (empty: not measured).
        dtype: element type of the GEMMs, attention and memory kernels.
    """

    device_name: str
    memory_bytes: float
    num_sms: int
    gemms: tuple[GemmTiming, ...] = ()
    attention: tuple[AttentionTiming, ...] = ()
    memory: tuple[MemoryTiming, ...] = ()
    launch: tuple[float, ...] = ()
    p2p: tuple[tuple[float, float], ...] = ()
    dtype: str = "bfloat16"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (the device file keeps it in its measurement notes)."""
        payload: dict[str, Any] = {"device_name": self.device_name, "memory_bytes": self.memory_bytes,
                                   "num_sms": self.num_sms, "dtype": self.dtype, "launch": list(self.launch),
                                   "p2p": [list(pair) for pair in self.p2p]}
        for kind in _KINDS:
            payload[kind] = [dataclasses.asdict(item) for item in getattr(self, kind)]
        return payload

    @classmethod
    def from_dict(cls, payload: Mapping[str, Any]) -> Timings:
        """Read :meth:`to_dict`'s form."""
        try:
            kinds = {kind: tuple(item_type(**item) for item in payload.get(kind, ()))
                     for kind, item_type in _KINDS.items()}
            return cls(str(payload["device_name"]), float(payload["memory_bytes"]), int(payload["num_sms"]),
                       launch=tuple(float(t) for t in payload.get("launch", ())),
                       p2p=tuple((float(size), float(t)) for size, t in payload.get("p2p", ())),
                       dtype=str(payload.get("dtype", "bfloat16")), **kinds)
        except (KeyError, TypeError, ValueError) as error:
            raise InvalidInputError(f"timings are malformed: {error!r}") from None


def _label(item: Any) -> str:
    if isinstance(item, GemmTiming):
        return f"GEMM {item.m}x{item.n}x{item.k}"
    if isinstance(item, AttentionTiming):
        causal = "causal " if item.causal else ""
        return f"{causal}attention b{item.batch} h{item.heads} s{item.seq_length} d{item.head_dim}"
    if isinstance(item, MemoryTiming):
        return f"{item.kernel} of {item.bytes:.4g} bytes"
    return f"p2p message of {item[0]:.4g} bytes"


def _check_times(timings: Timings) -> None:
    """Every time finite and > 0; the needed kinds present; all zero is named as such."""
    groups: list[tuple[str, list[tuple[str, float]]]] = [
        (kind, [(_label(item), item.seconds) for item in getattr(timings, kind)]) for kind in _KINDS
    ]
    groups.append(("launch", [(f"launch {index}", t) for index, t in enumerate(timings.launch)]))
    groups.append(("p2p", [(_label(pair), pair[1]) for pair in timings.p2p]))
    every = [t for _kind, entries in groups for _label_, t in entries]
    if every and all(t == 0 for t in every):
        raise InvalidInputError("calibration timings are all zero: the timer did not run (no time to fit a device to)")
    for kind in ("gemms", "memory", "launch"):
        if not getattr(timings, kind):
            raise InvalidInputError(f"calibration timings have no {kind} entries (a device needs them)")
    for kind, entries in groups:
        for label, seconds in entries:
            if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not math.isfinite(seconds) \
                    or seconds <= 0:
                raise InvalidInputError(f"calibration timing of {label} must be a time > 0 s, got {seconds!r}")


def _check_monotone(family: str, items: Sequence[tuple[str, tuple[float, ...], float]], *,
                    tolerance: float = MONOTONE_TOLERANCE) -> None:
    """Refuse a kernel at least 4× larger (no smaller in any dimension) that is faster by more than ``tolerance``."""
    for small_label, small, small_time in items:
        for big_label, big, big_time in items:
            if not all(b >= s for b, s in zip(big, small)):
                continue
            if math.prod(big) < MONOTONE_SIZE_RATIO * math.prod(small):
                continue
            if big_time < (1 - tolerance) * small_time:
                raise InvalidInputError(
                    f"calibration timings are non-monotone in size ({family}): {big_label} took "
                    f"{big_time:.3g} s, less than {1 - tolerance:.0%} of the {small_time:.3g} s of "
                    f"{small_label}, which is at least {MONOTONE_SIZE_RATIO:g}x smaller; re-run the calibration "
                    "on an idle machine")


def _check_sizes(timings: Timings) -> None:
    _check_monotone("GEMMs", [(_label(g), (g.m, g.n, g.k), g.seconds) for g in timings.gemms])
    for causal in (False, True):
        _check_monotone("attention", [(_label(a), (a.batch, a.heads, a.seq_length, a.seq_length, a.head_dim),
                                       a.seconds) for a in timings.attention if a.causal is causal])
    for kernel in sorted({item.kernel for item in timings.memory}):
        _check_monotone(kernel, [(_label(item), (item.bytes,), item.seconds)
                                 for item in timings.memory if item.kernel == kernel])


def _busy(seconds: float, launch: float) -> float:
    """The measured time less the launch overhead (half the time when launch is most of it)."""
    return seconds - launch if seconds > 2 * launch else seconds / 2


def _efficiency(label: str, achieved: float, peak: float, what: str) -> float:
    ratio = achieved / peak
    if ratio > 1 + OVER_PEAK_TOLERANCE:
        raise InvalidInputError(
            f"calibration: {label} reached {ratio:.2f}x the {what} ({peak:.4g}); the device is not the preset its "
            "name matched, or the timer is wrong")
    return min(ratio, 1.0)


def _median_of_largest(values: Sequence[tuple[float, float]], share: float = 0.25) -> float:
    """Median of the second entries of the largest ``share`` by the first (at least one)."""
    ranked = sorted(values, key=lambda pair: pair[0], reverse=True)
    return statistics.median(eff for _size, eff in ranked[:max(1, math.ceil(share * len(ranked)))])


def _largest_per_family(items: Sequence[Any], family: Any, size: Any) -> list[Any]:
    best: dict[Any, Any] = {}
    for item in items:
        key = family(item)
        if key not in best or size(item) > size(best[key]):
            best[key] = item
    return list(best.values())


def device_from_timings(timings: Timings, *, reference: Device | None = None, match_preset: bool = True) -> Device:
    """The calibrated :class:`~pipeplan.hardware.Device` of ``timings`` (see the module doc).

    Args:
        timings: what :func:`pipeplan.runtime.device_calibration.time_device` measured.
        reference: the spec device (peak FLOP/s, HBM bandwidth, tile); default the
            record :func:`~pipeplan.hardware.match_torch_name` finds, when ``match_preset``.
        match_preset: look the preset up by name; ``False`` treats the device as
            unknown (peak and bandwidth from the measurement).

    Raises:
        InvalidInputError: refused timings (see the module doc), in one line.
    """
    _check_times(timings)
    _check_sizes(timings)
    record = match_torch_name(timings.device_name) if match_preset else None
    if reference is None and record is not None:
        reference = record.device
    launch = statistics.median(timings.launch)
    gemm_rates = [(g, g.flops / _busy(g.seconds, launch)) for g in timings.gemms]
    attention_rates = [(a, a.flops / _busy(a.seconds, launch)) for a in timings.attention]
    memory_rates = [(m, m.bytes / _busy(m.seconds, launch)) for m in timings.memory]
    if reference is not None:
        peak, bandwidth = float(reference.peak_flops), float(reference.memory_bandwidth)
        tile = reference.gemm_tile
        basis = f"{reference.name} spec"
    else:
        peak = max(rate for _item, rate in gemm_rates + attention_rates)
        bandwidth = max(rate for _item, rate in memory_rates)
        tile, basis = DEFAULT_TILE, "best measured"
    table = tuple(gemm_point(g.m, g.n, g.k, _efficiency(_label(g), rate, peak, "peak FLOP/s"))
                  for g, rate in gemm_rates)
    gemm_efficiency = _median_of_largest([(g.flops, point.efficiency) for (g, _r), point in zip(gemm_rates, table)])
    largest_attention = _largest_per_family([a for a, _r in attention_rates], lambda a: a.causal, lambda a: a.flops)
    attention_efficiency = (statistics.median(_efficiency(_label(a), a.flops / _busy(a.seconds, launch), peak,
                                                          "peak FLOP/s") for a in largest_attention)
                            if largest_attention else gemm_efficiency)
    largest_memory = _largest_per_family(timings.memory, lambda m: m.kernel, lambda m: m.bytes)
    memory_efficiencies = {m.kernel: _efficiency(_label(m), m.bytes / _busy(m.seconds, launch), bandwidth,
                                                 "memory bandwidth") for m in largest_memory}
    plain = [eff for kernel, eff in memory_efficiencies.items() if kernel not in RANDOM_KERNELS]
    random = [eff for kernel, eff in memory_efficiencies.items() if kernel in RANDOM_KERNELS]
    memory_efficiency = statistics.median(plain or random)
    fields: dict[str, Any] = {
        "name": _device_name(timings),
        "memory_bytes": float(timings.memory_bytes),
        "peak_flops": peak,
        "memory_bandwidth": bandwidth,
        "gemm_efficiency": gemm_efficiency,
        "attention_efficiency": attention_efficiency,
        "memory_efficiency": memory_efficiency,
        "launch_overhead_ms": launch * 1e3,
        "num_sms": int(timings.num_sms),
        "gemm_tile": tile,
        "gemm_table": table,
        "achievable_fraction": None,
        "description": f"calibrated by pipeplan calibrate on {timings.device_name} ({timings.dtype}); "
                       f"peak FLOP/s and memory bandwidth: {basis}",
        "sources": {
            "peak_flops": f"{basis} ({peak:.4g} FLOP/s)",
            "memory_bandwidth": f"{basis} ({bandwidth:.4g} bytes/s)",
            "gemm_efficiency": f"median of the largest {max(1, math.ceil(len(table) / 4))} of {len(table)} "
                               "measured GEMMs",
            "attention_efficiency": (f"median of the largest causal and non-causal attention of "
                                     f"{len(timings.attention)} measured" if largest_attention
                                     else "no attention measured: the GEMM efficiency"),
            "memory_efficiency": "median over the largest size of "
                                 + ", ".join(sorted(set(memory_efficiencies) - RANDOM_KERNELS)),
            "launch_overhead_ms": f"median of {len(timings.launch)} timings of the smallest kernel",
        },
    }
    if random:
        fields["random_efficiency"] = statistics.median(random)
        fields["sources"]["random_efficiency"] = "median over the largest size of " + ", ".join(
            sorted(set(memory_efficiencies) & RANDOM_KERNELS))
    return Device(**fields)


def link_from_timings(timings: Timings) -> Link | None:
    """The point-to-point :class:`~pipeplan.hardware.Link` fitted to ``timings.p2p``, or ``None`` without samples.

    Its name is the fitted device's (``"h100-80g p2p (calibrated)"``), as a device file reads back.

    Raises:
        InvalidInputError: refused samples (see the module doc), or a time that does not grow with size.
    """
    if not timings.p2p:
        return None
    for pair in timings.p2p:
        if not (math.isfinite(pair[1]) and pair[1] > 0):
            raise InvalidInputError(f"calibration timing of {_label(pair)} must be a time > 0 s, got {pair[1]!r}")
    _check_monotone("p2p", [(_label(pair), (pair[0],), pair[1]) for pair in timings.p2p],
                    tolerance=P2P_MONOTONE_TOLERANCE)
    latency_ms, bytes_per_ms = fit_link([(size, seconds * 1e3) for size, seconds in timings.p2p])
    if math.isinf(bytes_per_ms):
        raise InvalidInputError("calibration: p2p message time does not grow with message size; "
                                "time larger messages (the fit needs a bandwidth)")
    return calibrated_link(_device_name(timings), latency_ms, bytes_per_ms * 1e3)


def _device_name(timings: Timings) -> str:
    """The fitted device's name: the preset it matches, else torch's name as a slug."""
    record = match_torch_name(timings.device_name)
    return record.name if record is not None else _slug(timings.device_name)


def _slug(device_name: str) -> str:
    """``"AMD Instinct MI300X"`` → ``"amd-instinct-mi300x"``; empty → ``"device"``."""
    return re.sub(r"[^a-z0-9]+", "-", device_name.lower()).strip("-") or "device"
