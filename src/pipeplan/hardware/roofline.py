"""The per-operator roofline: what one operation costs on one device.

A :class:`Device` times one :class:`~pipeplan.operations.Op` as a roofline with
a shape-dependent GEMM efficiency (docs/cost_model.md gives the formulas and
every constant's source)::

    GEMM, attention:  time = max(FLOPs / (peak · efficiency(op)), bytes / HBM bandwidth) + launch
    memory-bound:     time = bytes / (HBM bandwidth · memory_efficiency) + launch

* a GEMM's efficiency is ``gemm_efficiency`` (a large, well-shaped GEMM) times
  its wave quantisation ``tiles / (waves · SMs)`` for ``⌈m/tm⌉·⌈n/tn⌉`` output
  tiles, times its pipeline fill ``k / (k + gemm_fill_k)``; a measured
  ``gemm_table`` (``pipeplan calibrate``) replaces that curve by the nearest
  measured shape (:meth:`Device.gemm_fallbacks` lists the shapes it stood in for);
* a fused attention kernel runs at ``attention_efficiency`` of peak on the work
  it does (half the score blocks when causal);
* a memory-bound kernel moves its bytes at ``memory_bandwidth · memory_efficiency``,
  or ``random_efficiency`` for one that draws a dropout mask; tiled GEMM and
  attention kernels stream their operands at the full bandwidth.

With ``achievable_fraction`` set, the device is the older flat model instead:
every counted FLOP at ``peak_flops × achievable_fraction`` (``--mfu``)::

    >>> from pipeplan import hardware
    >>> from pipeplan.operations import gemm
    >>> a100 = hardware.device("a100-80g")
    >>> round(a100.op_milliseconds(gemm("fc1", m=6144, n=9216, k=2304)), 3)  # 261 GFLOP, 0.883 x 0.947 of 312 T
    1.004
    >>> hardware.device("h100-80g", achievable_fraction=0.45).achievable_flops
    445230000000000.0

Units: bytes, FLOP/s, bytes/s; times in milliseconds (pipeplan's CLI unit).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from .._validation import non_negative_float, positive_float, positive_int
from ..errors import InvalidInputError
from ..operations import Op

__all__ = ["Device", "GemmPoint"]


def _fraction(name: str, value: float) -> float:
    """``value`` checked to lie in (0, 1]."""
    number = positive_float(name, value)
    if number > 1:
        raise InvalidInputError(f"{name} must be in (0, 1], got {value!r}")
    return number


@dataclass(frozen=True)
class GemmPoint:
    """One measured GEMM: shape ``m × k`` by ``k × n`` and the fraction of peak it reached."""

    m: int
    n: int
    k: int
    efficiency: float

    def __post_init__(self) -> None:
        for name in ("m", "n", "k"):
            positive_int(f"gemm_table {name}", getattr(self, name))
        _fraction("gemm_table efficiency", self.efficiency)


@dataclass(frozen=True)
class Device:
    """One accelerator (or a CPU) as the cost model sees it (module doc: the formula).

    Attributes:
        name: the device's name (a record's, or a calibrated device's).
        memory_bytes: memory a process can allocate, bytes (what ``nvidia-smi`` reports).
        peak_flops: dense 16-bit tensor-core FLOP/s (no structured sparsity).
        memory_bandwidth: device-memory (HBM) bandwidth, bytes/s, from the spec sheet.
        gemm_efficiency: fraction of ``peak_flops`` a large, well-shaped GEMM reaches, (0, 1].
        attention_efficiency: fraction of ``peak_flops`` a fused (flash) attention kernel
            reaches on the FLOPs it executes, (0, 1].
        memory_efficiency: fraction of ``memory_bandwidth`` a training step's
            elementwise, norm and softmax kernels reach, (0, 1].
        random_efficiency: the same for kernels that draw random numbers (dropout
            masks), (0, 1].
        launch_overhead_ms: fixed time per kernel, ms.
        num_sms: streaming multiprocessors (one output tile each per wave).
        gemm_tile: output tile ``(rows, columns)`` of the wave-quantisation model.
        gemm_fill_k: the reduction depth a tile spends filling its software pipeline
            before its first multiply (stages × K-block): a GEMM of depth ``k`` keeps
            ``k / (k + gemm_fill_k)`` of its time multiplying.
        gemm_table: measured GEMMs (``pipeplan calibrate``); when given, a GEMM's
            efficiency is that of the nearest measured shape (log distance).
        achievable_fraction: when set, the flat model: every counted FLOP at
            ``peak_flops × achievable_fraction`` and no memory-bound time.
        description: where the numbers come from.
        sources: per constant, its source (a datasheet, a paper, a fit).
    """

    name: str
    memory_bytes: float
    peak_flops: float
    memory_bandwidth: float = 1e12
    gemm_efficiency: float = 0.8
    attention_efficiency: float = 0.5
    memory_efficiency: float = 0.8
    random_efficiency: float = 0.4
    launch_overhead_ms: float = 0.0
    num_sms: int = 108
    gemm_tile: tuple[int, int] = (128, 128)
    gemm_fill_k: int = 128
    gemm_table: tuple[GemmPoint, ...] = ()
    achievable_fraction: float | None = None
    description: str = ""
    sources: Mapping[str, str] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        positive_float(f"{self.name}.memory_bytes", self.memory_bytes, unit="bytes")
        positive_float(f"{self.name}.peak_flops", self.peak_flops, unit="FLOP/s")
        positive_float(f"{self.name}.memory_bandwidth", self.memory_bandwidth, unit="bytes/s")
        for name in ("gemm_efficiency", "attention_efficiency", "memory_efficiency", "random_efficiency"):
            _fraction(name, getattr(self, name))
        non_negative_float("launch_overhead_ms", self.launch_overhead_ms)
        positive_int("num_sms", self.num_sms)
        if len(self.gemm_tile) != 2:
            raise InvalidInputError(f"gemm_tile must be (rows, columns), got {self.gemm_tile!r}")
        for size in self.gemm_tile:
            positive_int("gemm_tile", size)
        object.__setattr__(self, "gemm_tile", tuple(self.gemm_tile))
        object.__setattr__(self, "gemm_table", tuple(self.gemm_table))
        if self.achievable_fraction is not None:
            _fraction("achievable_fraction", self.achievable_fraction)

    @property
    def flat(self) -> bool:
        """Whether this is the flat model (``achievable_fraction`` set)."""
        return self.achievable_fraction is not None

    @property
    def achievable_flops(self) -> float:
        """The flat model's rate, FLOP/s: ``peak × achievable_fraction`` (else ``peak × gemm_efficiency``)."""
        fraction = self.achievable_fraction if self.achievable_fraction is not None else self.gemm_efficiency
        return self.peak_flops * fraction

    def milliseconds(self, flops: float) -> float:
        """Time of ``flops`` at :attr:`achievable_flops`, in ms."""
        return 1e3 * flops / self.achievable_flops

    def gemm_efficiency_at(self, m: int, n: int, k: int, batch: int = 1) -> tuple[float, bool]:
        """Fraction of peak a (batched) GEMM of this shape reaches, and whether that is measured.

        From ``gemm_table``: the nearest measured shape in ``log m, log n, log k``
        (``True`` only when the shape itself was measured). Otherwise
        ``gemm_efficiency`` times the wave quantisation ``tiles / (⌈tiles / SMs⌉ · SMs)``
        of the ``batch · ⌈m/tm⌉ · ⌈n/tn⌉`` output tiles, times the pipeline fill
        ``k / (k + gemm_fill_k)``.
        """
        if self.gemm_table:
            best = self._nearest_gemm(m, n, k)
            return best.efficiency, (best.m, best.n, best.k) == (m, n, k)
        rows, columns = self.gemm_tile
        tiles = batch * math.ceil(m / rows) * math.ceil(n / columns)
        waves = math.ceil(tiles / self.num_sms)
        fill = k / (k + self.gemm_fill_k)
        return self.gemm_efficiency * fill * tiles / (waves * self.num_sms), False

    def op_milliseconds(self, op: Op) -> float:
        """Time of one operation, ms (module doc: the roofline)."""
        if self.achievable_fraction is not None:
            return 1e3 * op.flops / self.achievable_flops
        if op.kind == "memory":
            efficiency = self.random_efficiency if op.random else self.memory_efficiency
            return 1e3 * op.bytes / (self.memory_bandwidth * efficiency) + self.launch_overhead_ms
        stream = op.bytes / self.memory_bandwidth  # tiled kernels stream their operands at the roof
        if op.kind == "gemm":
            efficiency = self.gemm_efficiency_at(op.m, op.n, op.k, op.batch)[0]
            compute = op.flops / (self.peak_flops * efficiency)
        else:
            work = op.flops * (0.5 if op.causal else 1.0)
            compute = work / (self.peak_flops * self.attention_efficiency)
        return 1e3 * max(compute, stream) + self.launch_overhead_ms

    def ops_milliseconds(self, ops: Sequence[Op]) -> float:
        """Total time of ``ops`` run one after another, ms."""
        return float(sum(self.op_milliseconds(op) for op in ops))

    def summary(self) -> str:
        """The model in use in one line (what ``plan`` and ``model`` print)."""
        peak = f"{self.peak_flops / 1e12:.4g} TFLOP/s"
        if self.achievable_fraction is not None:
            return f"{self.name}, flat model: every FLOP at {self.achievable_fraction:.3g} of {peak}"
        gemms = (f"{len(self.gemm_table)} measured GEMM shapes" if self.gemm_table else
                 f"GEMMs at {self.gemm_efficiency:.3g} of {peak} (waves, pipeline fill)")
        return (f"{self.name}, per-operator roofline: {gemms}, flash attention {self.attention_efficiency:.2g}, "
                f"HBM {self.memory_bandwidth / 1e9:,.0f} GB/s x {self.memory_efficiency:.2g} "
                f"(dropout x {self.random_efficiency:.2g}), {1e3 * self.launch_overhead_ms:.3g} us a kernel")

    def gemm_fallbacks(self, ops: Iterable[Op]) -> list[dict[str, list[int]]]:
        """The GEMM shapes of ``ops`` a measured ``gemm_table`` does not hold, each with the shape used instead.

        Empty without a table (the curve covers every shape). What ``model --json``
        and ``plan --json`` report as ``"gemm_fallbacks"``.
        """
        if not self.gemm_table:
            return []
        seen: dict[tuple[int, int, int], tuple[int, int, int]] = {}
        for op in ops:
            shape = (op.m, op.n, op.k)
            if op.kind != "gemm" or shape in seen:
                continue
            nearest = self._nearest_gemm(*shape)
            seen[shape] = (nearest.m, nearest.n, nearest.k)
        return [{"shape": list(shape), "nearest_measured": list(used)} for shape, used in seen.items()
                if shape != used]

    def _nearest_gemm(self, m: int, n: int, k: int) -> GemmPoint:
        """The measured GEMM nearest to ``m × n × k`` in log distance."""
        key = (math.log(m), math.log(n), math.log(k))
        return min(self.gemm_table, key=lambda p: (math.log(p.m) - key[0]) ** 2
                   + (math.log(p.n) - key[1]) ** 2 + (math.log(p.k) - key[2]) ** 2)
