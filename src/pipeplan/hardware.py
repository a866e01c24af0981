"""Devices and links: what an operation and a message cost on real hardware.

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
every counted FLOP at ``peak_flops × achievable_fraction`` (``--mfu``).
A :class:`Link` turns bytes into time as ``latency + bytes / bandwidth``,
producing the simulator's :class:`~pipeplan.costs.CommModel`::

    >>> from pipeplan import hardware
    >>> from pipeplan.operations import gemm
    >>> a100 = hardware.device("a100-80g")
    >>> round(a100.op_milliseconds(gemm("fc1", m=6144, n=9216, k=2304)), 3)  # 261 GFLOP, 0.883 x 0.947 of 312 T
    1.004
    >>> hardware.device("h100-80g", achievable_fraction=0.45).achievable_flops
    445230000000000.0
    >>> hardware.link("nvlink-h100").comm_model(boundary_bytes=[2e7, 2e7, 2e7])
    CommModel(latency=0.003, bandwidth=80000000.0, boundary_bytes=(20000000.0, 20000000.0, 20000000.0),
              send_mode='eager')

Units: bytes, FLOP/s, bytes/s; times in milliseconds (pipeplan's CLI unit),
bytes per millisecond for ``comm_model``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from ._validation import non_negative_float, positive_float, positive_int
from .costs import CommModel, SendMode
from .errors import InvalidInputError
from .operations import Op

__all__ = ["Device", "GemmPoint", "Link", "DEVICES", "LINKS", "device", "link", "device_names", "link_names"]

_MIB = 2**20


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
        name: preset name.
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


@dataclass(frozen=True)
class Link:
    """A point-to-point link between two ranks: ``latency + bytes / bandwidth``.

    The numbers are what NCCL reaches on the link (nccl-tests), not its line
    rate: point-to-point ``send``/``recv`` at pipeline-message sizes (a few to a
    few hundred MB) for ``bandwidth``, and the all-reduce *bus* bandwidth
    (nccl-tests' ``busbw``) for collectives, which reach a different rate.

    Attributes:
        name: preset name.
        latency_ms: fixed time per message (and per ring step of a collective), milliseconds.
        bandwidth: bytes per second one point-to-point message reaches, one direction.
        description: where the numbers come from.
        allreduce_bandwidth: bus bandwidth of an all-reduce (also used for a
            reduce-scatter or an all-gather), bytes/s; ``None``: ``bandwidth``.
            A ring all-reduce of ``S`` bytes over ``g`` ranks then takes
            ``2 (g - 1) / g · S / allreduce_bandwidth`` (nccl-tests' definition of busbw).
    """

    name: str
    latency_ms: float
    bandwidth: float
    description: str = ""
    allreduce_bandwidth: float | None = None

    def __post_init__(self) -> None:
        non_negative_float(f"{self.name}.latency_ms", self.latency_ms)
        positive_float(f"{self.name}.bandwidth", self.bandwidth, unit="bytes/s")
        if self.allreduce_bandwidth is not None:
            positive_float(f"{self.name}.allreduce_bandwidth", self.allreduce_bandwidth, unit="bytes/s")

    @property
    def bus_bandwidth(self) -> float:
        """The collectives' bus bandwidth, bytes/s: ``allreduce_bandwidth``, else ``bandwidth``."""
        return self.bandwidth if self.allreduce_bandwidth is None else self.allreduce_bandwidth

    def milliseconds(self, num_bytes: float) -> float:
        """Time of one message of ``num_bytes``, in ms."""
        return self.latency_ms + 1e3 * non_negative_float("num_bytes", num_bytes) / self.bandwidth

    def comm_model(
        self, boundary_bytes: float | Sequence[float] = 0.0, *, send_mode: SendMode = "eager"
    ) -> CommModel:
        """The simulator's :class:`CommModel` for this link, in milliseconds."""
        return CommModel(latency=self.latency_ms, bandwidth=self.bandwidth / 1e3,
                         boundary_bytes=boundary_bytes, send_mode=send_mode)


# Peaks, bandwidths and SM counts are NVIDIA datasheet values; memory as nvidia-smi reports it.
# The efficiencies are the cost model's constants: docs/cost_model.md says which are fitted (the
# A100's, to the zero-bubble paper's Table 9 only) and which are taken from published benchmarks.
#: Constants of the A100's per-operator model, fitted by benchmarks/cost_model.py --fit.
A100_FIT = {"gemm_efficiency": 0.883, "memory_efficiency": 0.55, "random_efficiency": 0.245}
#: A kernel's fixed cost, ms (cited, not fitted: see the sources below).
LAUNCH_OVERHEAD_MS = 0.004
_A100 = {
    "peak_flops": 312e12, "num_sms": 108, "attention_efficiency": 0.6, "launch_overhead_ms": LAUNCH_OVERHEAD_MS,
    **A100_FIT,
    "sources": {
        "peak_flops": "NVIDIA A100 datasheet: 312 TFLOP/s dense bf16/fp16 tensor",
        "memory_bandwidth": "NVIDIA A100 datasheet: 1,555 GB/s (40GB HBM2), 2,039 GB/s (80GB HBM2e)",
        "num_sms": "NVIDIA A100 whitepaper: 108 SMs",
        "gemm_tile": "a 128 x 128 output tile, CUTLASS's and cuBLAS's common tensor-core tile",
        "gemm_efficiency": "fitted to Qi et al. 2024 (Zero Bubble PP) Table 9, 1.5B and 6.2B T_W "
                           "(benchmarks/cost_model.py --fit)",
        "memory_efficiency": "fitted to Qi et al. 2024 Table 9, 1.5B and 6.2B T_F and T_B",
        "random_efficiency": "fitted to Qi et al. 2024 Table 9, 1.5B and 6.2B T_F and T_B (dropout-mask kernels)",
        "launch_overhead_ms": "a kernel's fixed cost on the GPU, a few microseconds (NVIDIA, 'CUDA Graphs', "
                              "developer blog 2019: ~4 us launch overhead per kernel); not fitted",
        "attention_efficiency": "Dao 2023 (FlashAttention-2) Fig. 4: 155-203 of 312 TFLOP/s fwd+bwd, A100, "
                                "d=128, seq 2k-16k",
        "gemm_fill_k": "CUTLASS's sm80 GEMM main loop: 4 pipeline stages of a 32-deep K block before the first MMA",
    },
}
_HOPPER = {
    "peak_flops": 989.4e12, "num_sms": 132, "gemm_efficiency": 0.81, "attention_efficiency": 0.3,
    "memory_efficiency": A100_FIT["memory_efficiency"], "random_efficiency": A100_FIT["random_efficiency"],
    "launch_overhead_ms": LAUNCH_OVERHEAD_MS,
    "sources": {
        "peak_flops": "NVIDIA H100/H200 datasheets: 989.4 TFLOP/s dense bf16 (half the 1979 sparse figure)",
        "memory_bandwidth": "NVIDIA datasheets: 3.35 TB/s (H100 SXM5 HBM3), 4.8 TB/s (H200 HBM3e)",
        "num_sms": "NVIDIA H100 whitepaper: 132 SMs (SXM5)",
        "gemm_efficiency": "Bekman, ML Engineering, 'Maximum Achievable Matmul FLOPS' table: 794.5 of 989 "
                           "TFLOP/s bf16 at 2048x2048x13312 (H200 the same), / the fill at k = 13312",
        "attention_efficiency": "Dao 2023 (FlashAttention-2) Fig. 7: 265-326 of 989 TFLOP/s fwd+bwd, H100, d=128, "
                                "seq 2k",
        "memory_efficiency": "the A100 fit (the same eager kernels), not measured on this device",
        "random_efficiency": "the A100 fit", "launch_overhead_ms": "the A100 launch overhead",
        "gemm_fill_k": "as the A100's (CUTLASS sm80/sm90 pipelines of the same depth)",
    },
}
DEVICES: dict[str, Device] = {
    d.name: d
    for d in (
        Device("a100-40g", 40_960 * _MIB, memory_bandwidth=1555e9, **_A100,  # type: ignore[arg-type]
               description="A100 SXM4 40GB: 312 TFLOP/s dense bf16, 1,555 GB/s HBM2, 40960 MiB"),
        Device("a100-80g", 81_920 * _MIB, memory_bandwidth=2039e9, **_A100,  # type: ignore[arg-type]
               description="A100 SXM4 80GB: 312 TFLOP/s dense bf16, 2,039 GB/s HBM2e, 81920 MiB"),
        Device("h100-80g", 81_559 * _MIB, memory_bandwidth=3.35e12, **_HOPPER,  # type: ignore[arg-type]
               description="H100 SXM5 80GB: 989.4 TFLOP/s dense bf16, 3.35 TB/s HBM3, 81559 MiB"),
        Device("h200-141g", 143_771 * _MIB, memory_bandwidth=4.8e12, **_HOPPER,  # type: ignore[arg-type]
               description="H200 SXM 141GB: H100 compute, 4.8 TB/s HBM3e, 143771 MiB"),
        Device("l40s", 46_068 * _MIB, 362.05e12, memory_bandwidth=864e9, num_sms=142, gemm_efficiency=0.75,
               attention_efficiency=0.4, memory_efficiency=A100_FIT["memory_efficiency"],
               random_efficiency=A100_FIT["random_efficiency"], launch_overhead_ms=LAUNCH_OVERHEAD_MS,
               description="L40S 48GB GDDR6: 362.05 TFLOP/s dense bf16, 864 GB/s, 46068 MiB",
               sources={"peak_flops": "NVIDIA L40S datasheet: 362.05 TFLOP/s dense bf16",
                        "memory_bandwidth": "NVIDIA L40S datasheet: 864 GB/s GDDR6",
                        "num_sms": "NVIDIA Ada whitepaper: 142 SMs (L40S)",
                        "gemm_efficiency": "assumed (no published L40S matmul measurement found; run "
                                           "`pipeplan calibrate`): below the A100's 0.87 and H100's 0.80 MAMF",
                        "attention_efficiency": "assumed between the A100 and H100 FlashAttention-2 figures",
                        "memory_efficiency": "the A100 fit", "random_efficiency": "the A100 fit",
                        "launch_overhead_ms": "the A100 launch overhead", "gemm_fill_k": "as the A100's"}),
        Device("cpu", 64 * 2**30, 1e12, memory_bandwidth=50e9, achievable_fraction=1.0,
               description="a nominal CPU host (1 TFLOP/s, 64 GiB, flat model) for small planning runs and "
                           "tests; not a measurement of any machine (`pipeplan calibrate` measures yours)"),
    )
}

# One direction of each link, at what NCCL reaches (nccl-tests), not the line rate. Point-to-point
# ``bandwidth`` is nccl-tests sendrecv at pipeline-message sizes; ``allreduce_bandwidth`` is
# all_reduce_perf's busbw at large sizes. Sources (each also in docs/presets.md):
#  [#149]  github.com/NVIDIA/nccl-tests/issues/149 (NVIDIA, sjeaugey): A100 NVLink3 SM copies reach
#          ~20 of each link's 25 GB/s (128-byte payloads), ~230 GB/s all-reduce busbw on 8 A100s.
#  [#175]  github.com/NVIDIA/nccl-tests/issues/175: 8x A100 SXM one node, all_reduce busbw 232.5 GB/s.
#  [#331]  github.com/NVIDIA/nccl-tests/issues/331: sendrecv between two A100s over 4 NVLink3 links
#          (100 GB/s line rate) peaks at 72 GB/s (at 2 GB); 9.85 us for 8 bytes.
#  [#268]  github.com/NVIDIA/nccl-tests/issues/268: sendrecv between two H100s over NVLink4: 80 GB/s in
#          the default configuration, rising only at GB sizes to a ~180 GB/s plateau.
#  [#1487] github.com/NVIDIA/nccl/issues/1487: nccl-tests sendrecv latency between two NVLink H100s ~3 us.
#  [#272]  github.com/NVIDIA/nccl-tests/issues/272: 8x H200 NVLink4, all_reduce busbw 475 GB/s (NVLS);
#  [#290]  github.com/NVIDIA/nccl-tests/issues/290 (NVIDIA, AddyLaddy): 476 GB/s is the expected H100
#          single-node all-reduce; NDR 400 Gb/s gives 46-48 GB/s per NIC.
#  [#412]  github.com/NVIDIA/nccl/issues/412 (NVIDIA, sjeaugey): HDR 200 Gb/s: 24 GB/s busbw per NIC.
#  [#150]  github.com/NVIDIA/nccl-tests/issues/150: A100 over HDR, one GPU per node, 8-byte all_reduce 19-20 us.
#  [#495]  github.com/NVIDIA/nccl/issues/495: RoCE, 8x 100 Gb/s NICs reach 600 of 800 Gb/s (75 %),
#          "roughly matching our expectation" (NVIDIA, kwen2501).
#  [#214]  github.com/NVIDIA/nccl-tests/issues/214: sendrecv between two nodes (A40, Ethernet) 31-34 us
#          for <= 8 KB.
#  [bam54] github.com/ZaidQureshi/bam/issues/54: PCIe 4.0 x16 measured peak 25 of 32 GB/s.
#  [#1639] github.com/NVIDIA/nccl/issues/1639 (NVIDIA, sjeaugey on 8 PCIe GPUs): PCIe all-reduce is bound
#          by what CPU and memory deliver; 28 GB/s busbw over PCIe 5 (64 GB/s line) is "impressive".
# Derived (not measured on that link, say so): nvlink-a100 p2p = [#268]'s 80 GB/s x NVLink3/NVLink4
# (300/450) = 53 GB/s; pcie-gen4 all-reduce = [#1639]'s 44 % of line rate x 32 GB/s = 14 GB/s;
# roce-400g = [#495]'s 75 % of 50 GB/s = 37.5 GB/s. Not fitted to any training measurement: the
# zero-bubble paper's T_comm (A100 NVLink, 28.3 MB in 0.601 ms: 47 GB/s) is a check (docs/presets.md).
LINKS: dict[str, Link] = {
    link_.name: link_
    for link_ in (
        Link("nvlink-a100", 0.010, 53e9,
             "NVLink 3 (A100, 300 GB/s each way): NCCL sendrecv ~53 GB/s (nccl-tests #268 scaled by "
             "300/450), all-reduce busbw 230 GB/s (nccl-tests #149, #175), 10 us (nccl-tests #331)",
             allreduce_bandwidth=230e9),
        Link("nvlink-h100", 0.003, 80e9,
             "NVLink 4 (H100/H200, 450 GB/s each way): NCCL sendrecv 80 GB/s (nccl-tests #268), all-reduce "
             "busbw 475 GB/s with NVLS (nccl-tests #272, #290), 3 us (nccl #1487)",
             allreduce_bandwidth=475e9),
        Link("pcie-gen4", 0.010, 25e9,
             "PCIe 4.0 x16 (L40S has no NVLink; 32 GB/s line rate): 25 GB/s measured peak (bam #54), "
             "all-reduce busbw ~14 GB/s (nccl #1639 scaled to Gen4)",
             allreduce_bandwidth=14e9),
        Link("ib-hdr", 0.020, 24e9,
             "InfiniBand HDR, 200 Gb/s per GPU: 24 GB/s per NIC (nccl #412), 20 us (nccl-tests #150)"),
        Link("ib-ndr", 0.020, 46e9,
             "InfiniBand NDR, 400 Gb/s per GPU: 46-48 GB/s per NIC (nccl-tests #290), 20 us (as HDR)"),
        Link("roce-400g", 0.030, 37.5e9,
             "RoCE v2 at 400 Gb/s per GPU: ~75 % of line rate, 37.5 GB/s (nccl #495), 30 us (nccl-tests #214)"),
    )
}


def device_names() -> list[str]:
    """Names of the device presets."""
    return list(DEVICES)


def link_names() -> list[str]:
    """Names of the link presets."""
    return list(LINKS)


def device(name: str, *, achievable_fraction: float | None = None) -> Device:
    """The device preset ``name``, optionally with another ``achievable_fraction``.

    Raises:
        InvalidInputError: an unknown name (the message lists the presets) or a
            fraction outside (0, 1].
    """
    if name not in DEVICES:
        raise InvalidInputError(f"gpu must be one of {', '.join(DEVICES)}, got {name!r}")
    preset = DEVICES[name]
    if achievable_fraction is None:
        return preset
    return replace(preset, achievable_fraction=achievable_fraction)


def link(name: str) -> Link:
    """The link preset ``name``.

    Raises:
        InvalidInputError: an unknown name (the message lists the presets).
    """
    if name not in LINKS:
        raise InvalidInputError(f"link must be one of {', '.join(LINKS)}, got {name!r}")
    return LINKS[name]
