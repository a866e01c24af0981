"""Timing the local accelerator with torch: GEMMs, attention, memory-bound kernels, launches, p2p.

What ``pipeplan calibrate`` measures; :func:`pipeplan.hardware.fit.device_from_timings`
turns the result into a Device::

    from pipeplan.runtime.device_calibration import time_device
    timings = time_device(quick=True)             # CUDA device 0 when there is one, else torch's CPU kernels
    timings.gemms[0].seconds, timings.p2p

Method: every kernel runs ``warmup`` times, then ``repeats`` timed samples; the
value kept is the median. On CUDA a sample is one call between two CUDA events
(the GPU's own clock); on CPU, ``time.perf_counter`` around the call. The launch
overhead is a sample of 100 back-to-back one-element adds (synchronised once)
divided by 100. Kernels run in bfloat16 on CUDA (what training runs) and float32
on CPU (torch's CPU bfloat16 GEMMs are emulated on most CPUs). A CPU is timed
as one rank of a local two-rank pipeline sees it: with the intra-op threads
:func:`~pipeplan.runtime.launch.threads_per_process` gives each of two ranks
(half the cores), which also keeps a sample from waiting on a thread that
another process holds off its core.

The grids (``quick`` keeps the CUDA grid's M sweep on one shape, and the CPU grid
is small so it runs in a few CPU seconds):

* GEMMs ``(M × K) @ (K × N)``: M in 16, 64, 256, 1024, 4096, 8192 against the
  (N, K) of a transformer layer of hidden 4096 (QKV 12288 × 4096, output 4096 ×
  4096, MLP 16384 × 4096 and 4096 × 16384); on CPU hidden 256 (QKV, output, MLP down).
* attention (``scaled_dot_product_attention``, forward) causal and not, 32 heads
  of 128 over sequences 512 … 4096 (CPU: 4 heads of 64 over 128 … 512).
* memory-bound: copy (reads and writes n bytes: 2n moved), add (3n), layer norm
  over rows of 4096 (2n), dropout (p = 0.1, training: 2n and its one-byte-per-element
  mask), at 16 MiB … 1 GiB (CPU: 1 … 16 MiB).
* point-to-point (two ranks, :func:`pipeplan.runtime.calibrate.busy_sender_delays`
  with nothing to compute): NCCL between GPUs 0 and 1, gloo between two CPU
  processes; skipped with a note when there is one GPU.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as functional

from .._validation import positive_int
from ..hardware.fit import AttentionTiming, GemmTiming, MemoryTiming, Timings
from .launch import threads_per_process

__all__ = ["time_device", "gemm_shapes", "time_p2p", "LAUNCH_BATCH"]

LAUNCH_BATCH = 100
"""One-element adds per launch-overhead sample."""

_MIB = 2**20
_CUDA_MS = (16, 64, 256, 1024, 4096, 8192)
_CUDA_NK = ((12288, 4096), (4096, 4096), (16384, 4096), (4096, 16384))
_CPU_MS = (16, 64, 256, 1024, 4096, 8192)
_CPU_NK = ((768, 256), (256, 256), (256, 768))


def gemm_shapes(*, cuda: bool, quick: bool) -> list[tuple[int, int, int]]:
    """The ``(m, n, k)`` grid: every M against each (N, K) of a transformer layer (``quick``: one (N, K))."""
    nk = _CUDA_NK if cuda else _CPU_NK
    return [(m, n, k) for n, k in (nk[1:2] if quick else nk) for m in (_CUDA_MS if cuda else _CPU_MS)]


def _attention_shapes(*, cuda: bool, quick: bool) -> list[tuple[int, int, int, int]]:
    """``(batch, heads, seq, head_dim)`` of the attention grid."""
    if cuda:
        seqs = (1024, 4096) if quick else (512, 1024, 2048, 4096)
        return [(1, 32, s, 128) for s in seqs]
    return [(1, 4, s, 64) for s in ((128, 512) if quick else (128, 256, 512))]


def _memory_sizes(*, cuda: bool, quick: bool) -> list[int]:
    """Bytes of the memory-bound kernels' input tensor."""
    if cuda:
        return [64 * _MIB, 1024 * _MIB] if quick else [16 * _MIB, 64 * _MIB, 256 * _MIB, 1024 * _MIB]
    return [_MIB, 4 * _MIB] if quick else [_MIB, 4 * _MIB, 16 * _MIB]


class _Timer:
    """Median seconds of ``fn`` after warm-up, with the device's clock."""

    def __init__(self, device: torch.device, *, warmup: int, repeats: int) -> None:
        self.device, self.warmup, self.repeats = device, warmup, repeats
        self.cuda = device.type == "cuda"

    def samples(self, fn: Callable[[], object]) -> list[float]:
        for _ in range(self.warmup):
            fn()
        out = []
        for _ in range(self.repeats):
            if self.cuda:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                fn()
                end.record()
                end.synchronize()
                out.append(start.elapsed_time(end) / 1e3)
            else:
                began = time.perf_counter()
                fn()
                out.append(time.perf_counter() - began)
        return out

    def median(self, fn: Callable[[], object]) -> float:
        return statistics.median(self.samples(fn))


def _gemms(timer: _Timer, dtype: torch.dtype, shapes: Sequence[tuple[int, int, int]]) -> list[GemmTiming]:
    out = []
    for m, n, k in shapes:
        a = torch.randn(m, k, device=timer.device, dtype=dtype)
        b = torch.randn(k, n, device=timer.device, dtype=dtype)
        c = torch.empty(m, n, device=timer.device, dtype=dtype)
        out.append(GemmTiming(m, n, k, timer.median(lambda: torch.matmul(a, b, out=c))))
    return out


def _attention(timer: _Timer, dtype: torch.dtype, shapes: Sequence[tuple[int, int, int, int]]) -> list[AttentionTiming]:
    out = []
    for batch, heads, seq, dim in shapes:
        q, k, v = (torch.randn(batch, heads, seq, dim, device=timer.device, dtype=dtype) for _ in range(3))
        for causal in (False, True):
            seconds = timer.median(lambda: functional.scaled_dot_product_attention(q, k, v, is_causal=causal))
            out.append(AttentionTiming(batch, heads, seq, dim, causal, seconds))
    return out


def _memory(timer: _Timer, dtype: torch.dtype, sizes: Sequence[int]) -> list[MemoryTiming]:
    out = []
    width = 4096
    for size in sizes:
        elements = size // torch.tensor([], dtype=dtype).element_size()
        rows = max(1, elements // width)
        x, y = (torch.randn(rows, width, device=timer.device, dtype=dtype) for _ in range(2))
        z = torch.empty_like(x)
        moved = x.numel() * x.element_size()
        out.append(MemoryTiming("copy", 2.0 * moved, timer.median(lambda: z.copy_(x))))
        out.append(MemoryTiming("add", 3.0 * moved, timer.median(lambda: torch.add(x, y, out=z))))
        out.append(MemoryTiming("layer_norm", 2.0 * moved,
                                timer.median(lambda: functional.layer_norm(x, (width,)))))
        out.append(MemoryTiming("dropout", 2.0 * moved + x.numel(),
                                timer.median(lambda: functional.dropout(x, 0.1, training=True))))
    return out


def _launches(timer: _Timer) -> list[float]:
    a = torch.ones(1, device=timer.device)
    b = torch.ones(1, device=timer.device)

    def batch() -> None:
        for _ in range(LAUNCH_BATCH):
            torch.add(a, b, out=a)

    return [seconds / LAUNCH_BATCH for seconds in timer.samples(batch)]


def _p2p_rank(rank: int, world_size: int, sizes: list[float], repeats: int, cuda: bool) -> list[tuple[float, float]]:
    from .calibrate import busy_sender_delays

    device = torch.device("cuda", rank) if cuda else None
    samples = busy_sender_delays(sizes, lambda: None, repeats=repeats, device=device)
    return [(size, ms / 1e3) for size, ms in samples]


def time_p2p(sizes: Sequence[float], *, repeats: int = 5,
             timeout: float = 120.0) -> tuple[list[tuple[float, float]], str]:
    """``(bytes, one-way seconds)`` per size between two local ranks, and a note of how (or why not).

    NCCL between GPUs 0 and 1 when there are two, gloo between two CPU processes
    when there is no GPU; with one GPU nothing is measured (NCCL cannot put two
    ranks on one GPU, and gloo would time host copies, not the GPU's link).
    """
    from .launch import spawn

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if gpus == 1:
        return [], "p2p skipped: one GPU (NCCL needs a GPU per rank)"
    backend = "nccl" if gpus >= 2 else "gloo"
    samples = spawn(_p2p_rank, 2, [float(s) for s in sizes], repeats, gpus >= 2, backend=backend,
                    timeout=timeout)[0]
    return samples, f"p2p: {backend}, 2 ranks, {len(sizes)} sizes, median of {repeats}"


def _p2p_sizes(*, cuda: bool, quick: bool) -> list[float]:
    if cuda:
        return [4.0, 64e3, 1 * _MIB, 16 * _MIB, 64 * _MIB] + ([] if quick else [256 * _MIB])
    return [4.0, 64e3, 1 * _MIB, 4 * _MIB]


def _memory_bytes(device: torch.device) -> float:
    if device.type == "cuda":
        return float(torch.cuda.get_device_properties(device).total_memory)
    return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def time_device(*, quick: bool = False, repeats: int | None = None, p2p: bool = True,
                device: str | torch.device | None = None, notes: list[str] | None = None) -> Timings:
    """Time the grids of the module doc on ``device`` (default CUDA device 0, else the CPU).

    Args:
        quick: the smaller grids (and 3 repeats unless ``repeats`` is given).
        repeats: timed samples per kernel (default 3 quick, else 10 on CUDA and 5 on CPU).
        p2p: also time point-to-point messages between two local ranks.
        device: where to run.
        notes: a list the function appends lines to (what was skipped, how p2p ran).

    Returns:
        The raw :class:`~pipeplan.hardware.fit.Timings`, seconds.
    """
    target = torch.device(device if device is not None else ("cuda" if torch.cuda.is_available() else "cpu"))
    cuda = target.type == "cuda"
    if cuda and target.index is None:
        target = torch.device("cuda", torch.cuda.current_device())
    count = positive_int("repeats", repeats) if repeats is not None else (3 if quick else (10 if cuda else 5))
    timer = _Timer(target, warmup=2 if cuda else 1, repeats=count)
    dtype = torch.bfloat16 if cuda else torch.float32
    messages: list[tuple[float, float]] = []
    if p2p:  # first: the two ranks start before this process holds the grids' tensors and threads
        messages, how = time_p2p(_p2p_sizes(cuda=cuda, quick=quick), repeats=count)
        if notes is not None:
            notes.append(how)
    threads = torch.get_num_threads()
    if not cuda:
        torch.set_num_threads(threads_per_process(2))
        if notes is not None:
            notes.append(f"cpu: {torch.get_num_threads()} intra-op thread(s), one rank of a two-rank pipeline")
    try:
        with torch.no_grad():
            gemms = _gemms(timer, dtype, gemm_shapes(cuda=cuda, quick=quick))
            attention = _attention(timer, dtype, _attention_shapes(cuda=cuda, quick=quick))
            memory = _memory(timer, dtype, _memory_sizes(cuda=cuda, quick=quick))
            launch = _launches(timer)
        sms = torch.cuda.get_device_properties(target).multi_processor_count if cuda else torch.get_num_threads()
    finally:
        torch.set_num_threads(threads)
    name = torch.cuda.get_device_name(target) if cuda else "cpu"
    return Timings(name, _memory_bytes(target), int(sms), gemms=tuple(gemms), attention=tuple(attention),
                   memory=tuple(memory), launch=tuple(launch), p2p=tuple(messages),
                   dtype=str(dtype).removeprefix("torch."))
