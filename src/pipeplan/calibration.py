"""What a machine adds to the layer costs: message times and processes sharing cores.

A :class:`Calibration` is measured once, beside the layer profile, in the same
processes the runtime will use (``pipeplan profile`` writes it into the profile
file), and turns into the simulator's inputs::

    >>> from pipeplan.calibration import Calibration, fit_link
    >>> calibration = Calibration(latency=0.12, bandwidth=2.5e6, slowdown=(1.0, 1.9), backend="gloo")
    >>> calibration.comm_model([4_620_800])       # the CommModel for one boundary of 4.6 MB
    CommModel(latency=0.12, bandwidth=2500000.0, boundary_bytes=(4620800.0,), send_mode='eager')
    >>> [round(value, 6) for value in fit_link([(0, 0.12), (2.5e6, 1.12), (5e6, 2.12)])]  # (bytes, ms) samples
    [0.12, 2500000.0]

Fields and units (times in ms, like every pipeplan cost):

* ``latency`` (ms) and ``bandwidth`` (bytes per ms): a one-way message of ``n``
  bytes takes ``latency + n / bandwidth``, fitted by :func:`fit_link` to
  one-way delays timed as the runtime sends messages
  (:func:`pipeplan.runtime.calibrate.busy_sender_delays`).
* ``slowdown``: ``slowdown[k - 1]`` is how much longer the same work takes on
  each of ``k`` processes computing at the same time than on one alone
  (``slowdown[0] = 1``). On a machine with fewer free cores than processes this
  is about ``k / cores``; on one with a core per process and memory to spare it
  stays near 1. :func:`pipeplan.simulate` charges it (``slowdown``).
* ``samples``: the ``(bytes, one-way ms)`` pairs the link was fitted to, kept so
  a reader can check the fit.

:meth:`Calibration.describe_link` says the link in words, with units, and why a
bandwidth came out unbounded (``latency 0.148 ms, bandwidth unbounded (latency-bound
at these sizes: ...)``).

:func:`load_warning` says when a profile's core sharing was likely measured under other
jobs' load (the profile records the 1-minute load average, ``os.getloadavg()``, before
measuring, and the cores): then a run on a quieter machine is faster than predicted.
"""


from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ._validation import finite_floats, non_negative_float, positive_float
from .costs import CommModel, SendMode
from .units import format_bandwidth, format_bytes
from .errors import InvalidInputError

__all__ = ["Calibration", "fit_link", "load_warning", "INFLATED_SHARING"]

#: A core-sharing factor this many times what the profile's processes and threads on the machine's
#: cores explain (``max(1, processes × threads / cores)``) is taken as measured under others' load.
INFLATED_SHARING = 1.5

#: Load average (runnable processes, 1-minute) above the cores the profile's own processes leave free,
#: tolerated before :func:`load_warning` speaks: half a core, the noise of an idle desktop.
LOAD_MARGIN = 0.5


def fit_link(samples: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """Least-squares ``(latency ms, bandwidth bytes/ms)`` of ``time = latency + bytes / bandwidth``.

    Args:
        samples: ``(bytes, one-way time in ms)`` pairs, at least one; with a
            single size the bandwidth is infinite and the latency the mean time.

    Returns:
        The latency (clamped at 0) and the bandwidth (``inf`` when the fitted
        slope is not positive: size did not cost measurable time).
    """
    if not samples:
        raise InvalidInputError("fit_link needs at least one (bytes, ms) sample, got none")
    sizes = np.array([float(s) for s, _t in samples])
    times = np.array([float(t) for _s, t in samples])
    if not np.all(np.isfinite(times)) or np.any(times < 0):
        raise InvalidInputError(f"message times must be finite and >= 0 ms, got {times.tolist()}")
    if np.ptp(sizes) == 0:
        return float(times.mean()), math.inf
    slope, intercept = np.polyfit(sizes, times, 1)
    if slope <= 0:
        return max(float(times.mean()), 0.0), math.inf
    return max(float(intercept), 0.0), float(1.0 / slope)


@dataclass(frozen=True)
class Calibration:
    """Message cost and core sharing of one machine and backend (see the module doc).

    Args:
        latency: one-way time of an empty message, ms, >= 0.
        bandwidth: bytes per ms, > 0 (``inf``: size costs nothing).
        slowdown: per number of processes computing at once (1, 2, ...), the
            factor on every action's time; the first entry must be 1.
        backend: the process-group backend it was measured on (``"gloo"``, ``"nccl"``).
        samples: the ``(bytes, one-way ms)`` samples behind ``latency`` and ``bandwidth``.
    """

    latency: float = 0.0
    bandwidth: float = math.inf
    slowdown: tuple[float, ...] = (1.0,)
    backend: str = "gloo"
    samples: tuple[tuple[float, float], ...] = field(default=())

    def __post_init__(self) -> None:
        object.__setattr__(self, "latency", non_negative_float("calibration.latency", self.latency))
        object.__setattr__(
            self, "bandwidth", positive_float("calibration.bandwidth", self.bandwidth, allow_inf=True)
        )
        slowdown = finite_floats("calibration.slowdown", self.slowdown)
        if slowdown[0] != 1.0:
            raise InvalidInputError(
                f"calibration.slowdown[0] must be 1 (one process alone is the reference), got {slowdown[0]}"
            )
        object.__setattr__(self, "slowdown", slowdown)
        pairs = []
        for index, pair in enumerate(self.samples):
            if len(pair) != 2:
                raise InvalidInputError(f"calibration.samples[{index}] must be [bytes, ms], got {pair!r}")
            pairs.append((non_negative_float(f"calibration.samples[{index}] bytes", pair[0]),
                          non_negative_float(f"calibration.samples[{index}] ms", pair[1])))
        object.__setattr__(self, "samples", tuple(pairs))
        if not isinstance(self.backend, str) or not self.backend:
            raise InvalidInputError(f"calibration.backend must be a name like 'gloo', got {self.backend!r}")

    def comm_model(self, boundary_bytes: float | Sequence[float] = 0.0, *,
                   send_mode: SendMode = "eager") -> CommModel:
        """The :class:`~pipeplan.costs.CommModel` of this link for the given boundary sizes (bytes)."""
        return CommModel(latency=self.latency, bandwidth=self.bandwidth, boundary_bytes=boundary_bytes,
                         send_mode=send_mode)

    def describe_link(self) -> str:
        """The link in words: ``latency 0.148 ms, bandwidth 2.5 GB/s``, saying why when the bandwidth is unbounded.

        An unbounded bandwidth is what :func:`fit_link` returns when message size
        cost no measurable time: the link is latency-bound at the sizes measured
        (the model's boundary sizes), or only one size was measured.
        """
        link = f"latency {self.latency:.3f} ms, bandwidth {format_bandwidth(self.bandwidth)}"
        if math.isfinite(self.bandwidth):
            return link
        sizes = sorted({size for size, _ms in self.samples})
        if len(sizes) > 1:
            return (f"{link} (latency-bound at these sizes: messages of {format_bytes(sizes[0])} to "
                    f"{format_bytes(sizes[-1])} took no measurably longer than the smallest)")
        if sizes:
            return f"{link} (one message size measured, {format_bytes(sizes[0])}: size costs nothing in the fit)"
        return f"{link} (not measured: messages cost the latency alone)"

    def slowdown_for(self, processes: int) -> float:
        """The factor for ``processes`` computing at once (the last measured one beyond the table)."""
        if processes <= 1:
            return 1.0
        return self.slowdown[min(processes, len(self.slowdown)) - 1]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (the inverse of :meth:`from_dict`); an infinite bandwidth is ``null``."""
        return {
            "latency": self.latency,
            "bandwidth": None if math.isinf(self.bandwidth) else self.bandwidth,
            "slowdown": list(self.slowdown),
            "backend": self.backend,
            "samples": [list(pair) for pair in self.samples],
        }

    @classmethod
    def from_dict(cls, payload: Mapping[str, Any]) -> Calibration:
        """Read :meth:`to_dict`'s form; names the key that is missing or unknown."""
        if not isinstance(payload, Mapping):
            raise InvalidInputError(f"calibration must be an object, got {payload!r}")
        allowed = {"latency", "bandwidth", "slowdown", "backend", "samples"}
        unknown = set(payload) - allowed
        if unknown:
            raise InvalidInputError(f"calibration has unknown keys {sorted(unknown)}; allowed: {', '.join(sorted(allowed))}")
        missing = {"latency", "bandwidth", "slowdown"} - set(payload)
        if missing:
            raise InvalidInputError(f"calibration lacks {', '.join(sorted(missing))}")
        bandwidth = payload["bandwidth"]
        slowdown = payload["slowdown"]
        if isinstance(slowdown, (str, bytes)) or not isinstance(slowdown, Sequence) or not slowdown:
            raise InvalidInputError(f"calibration.slowdown must be a non-empty list of numbers, got {slowdown!r}")
        samples = payload.get("samples", [])
        if isinstance(samples, (str, bytes)) or not isinstance(samples, Sequence):
            raise InvalidInputError(f"calibration.samples must be a list of [bytes, ms], got {samples!r}")
        return cls(
            latency=payload["latency"],
            bandwidth=math.inf if bandwidth is None else bandwidth,
            slowdown=tuple(slowdown),
            backend=payload.get("backend", "gloo"),
            samples=tuple(tuple(pair) for pair in samples),
        )


def load_warning(measurement: Mapping[str, Any], calibration: Calibration | None) -> str | None:
    """One line when the profile's core sharing was likely measured under other jobs' load, else ``None``.

    ``measurement`` holds what ``pipeplan profile`` records: ``loadavg_before`` (the 1-, 5- and
    15-minute load averages before measuring), ``loadavg_calibration`` (the same just before the
    core-sharing calibration, which counts the measuring process's own ``threads`` too), ``cpu_count``,
    ``nproc`` and ``threads_per_process``. Others' load is the larger of the 1-minute average
    before measuring and the one before the calibration less those ``threads``. It speaks when either

    * others' load was above the cores the profile's own ``nproc × threads`` leave free, by more
      than :data:`LOAD_MARGIN`: others' processes then shared the cores; or
    * the calibration's factor for ``nproc`` busy exceeds :data:`INFLATED_SHARING` times the
      ``max(1, nproc × threads / cores)`` that the profile's own processes explain.

    A profile without these notes (an older file, one computed from shapes) gets ``None``.
    """
    cores = measurement.get("cpu_count")
    nproc = measurement.get("nproc")
    given = measurement.get("threads_per_process")
    threads = given if isinstance(given, int) and given > 0 else 1
    if not isinstance(cores, int) or cores < 1 or not isinstance(nproc, int) or nproc < 1:
        return None
    own = nproc * threads
    reasons = []
    others = [(_one_minute(measurement.get("loadavg_before")), "before measuring"),
              (_one_minute(measurement.get("loadavg_calibration")) - threads, "besides its own before the "
                                                                              "calibration")]
    value, when = max(others, key=lambda pair: pair[0])
    if value > max(cores - own, 0) + LOAD_MARGIN:
        reasons.append(f"others' load average {value:.1f} on {cores} core(s) {when}, {own} thread(s) of its own to "
                       "come")
    if calibration is not None and nproc > 1:
        factor = calibration.slowdown_for(nproc)
        explained = max(1.0, own / cores)
        if factor > INFLATED_SHARING * explained:
            reasons.append(f"sharing x{factor:.2f} with {nproc} busy where {nproc} x {threads} thread(s) on "
                           f"{cores} core(s) explain x{explained:.2f}")
    if not reasons:
        return None
    return ("core sharing measured under other jobs' load (" + "; ".join(reasons) + "): predictions may be "
            "too slow for a quieter machine; re-run pipeplan profile when uptime shows a low load")


def _one_minute(load: object) -> float:
    """The 1-minute entry of a recorded ``os.getloadavg()`` list; ``-inf`` when there is none."""
    if isinstance(load, Sequence) and not isinstance(load, (str, bytes)) and load \
            and isinstance(load[0], (int, float)) and math.isfinite(load[0]):
        return float(load[0])
    return -math.inf
