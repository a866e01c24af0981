"""Measuring the machine the runtime runs on: message times and processes sharing cores.

Run inside the ranks (the process group is up), on every rank at once::

    from pipeplan.runtime.calibrate import calibrate_machine
    calibration = calibrate_machine(lambda: step_once(), message_bytes=[4_620_800])   # same on every rank
    calibration.latency, calibration.bandwidth, calibration.slowdown

* **Messages** (:func:`ping_pong`): ranks 0 and 1 bounce a float32 tensor of each
  size with blocking ``send``/``recv``, the calls the runtime's messages use; half
  the median round trip is the one-way time of that size. :func:`~pipeplan.calibration.fit_link`
  turns the samples into latency and bandwidth.
* **Core sharing** (:func:`core_sharing`): for ``k = 1 .. world size`` (round
  robin, ``repeats`` rounds), ranks ``0 .. k-1`` run the same piece of work
  (e.g. one microbatch's forward and backward of the model) at the same time
  while the others wait in a barrier;
  ``slowdown[k - 1]`` is rank 0's median time with ``k`` busy over its median
  time alone. On a machine whose processes each have a free core it stays near
  1; when processes outnumber free cores it grows towards ``k / cores``.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

from .._validation import positive_int
from ..calibration import Calibration, fit_link

__all__ = ["calibrate_machine", "core_sharing", "ping_pong"]


def ping_pong(message_bytes: Sequence[float], *, repeats: int = 20, warmup: int = 5,
              device: Any = None) -> list[tuple[float, float]]:
    """``(bytes, one-way ms)`` per size between ranks 0 and 1 (others idle); collective on every rank.

    Returns the samples on every rank (broadcast from rank 0); an empty list in a
    world of one process.
    """
    import torch
    import torch.distributed as dist

    repeats = positive_int("repeats", repeats)
    rank, world = dist.get_rank(), dist.get_world_size()
    if world < 2:
        return []
    buffers = [torch.zeros(max(1, int(size) // 4), dtype=torch.float32, device=device) for size in message_bytes]
    times: list[list[float]] = [[] for _ in buffers]
    dist.barrier()
    # Round robin over the sizes, so a burst of load does not fall on one size's runs only.
    for run in range(warmup + repeats):
        for index, buffer in enumerate(buffers):
            begin = time.perf_counter()
            if rank == 0:
                dist.send(buffer, dst=1)
                dist.recv(buffer, src=1)
            elif rank == 1:
                dist.recv(buffer, src=0)
                dist.send(buffer, dst=0)
            elapsed = (time.perf_counter() - begin) * 1e3
            if run >= warmup:
                times[index].append(elapsed / 2.0)
    samples = [(float(buffer.numel() * 4), statistics.median(runs)) for buffer, runs in zip(buffers, times)]
    shared = [samples]
    dist.broadcast_object_list(shared, src=0)
    return list(shared[0])


def core_sharing(work: Callable[[], object], *, repeats: int = 7, warmup: int = 2) -> tuple[float, ...]:
    """``slowdown[k - 1]`` for ``k = 1 .. world size`` ranks running ``work`` at once; collective.

    ``work`` runs on ranks ``0 .. k-1`` while the others wait; the result (rank
    0's median over ``repeats`` timed runs with ``k`` busy, divided by its median
    alone) is broadcast to every rank.
    """
    import torch.distributed as dist

    repeats = positive_int("repeats", repeats)
    rank, world = dist.get_rank(), dist.get_world_size()
    times: list[list[float]] = [[] for _ in range(world)]
    # Round robin over the busy counts, so load that comes and goes falls on all of them alike.
    for run in range(warmup + repeats):
        for busy in range(1, world + 1):
            dist.barrier()
            if rank < busy:
                begin = time.perf_counter()
                work()
                elapsed = (time.perf_counter() - begin) * 1e3
                if run >= warmup:
                    times[busy - 1].append(elapsed)
    dist.barrier()
    medians = [statistics.median(runs) if rank == 0 else 0.0 for runs in times]
    factors = [1.0] + [m / medians[0] for m in medians[1:]] if rank == 0 else [1.0] * world
    shared = [factors]
    dist.broadcast_object_list(shared, src=0)
    return tuple(float(f) for f in shared[0])


def calibrate_machine(work: Callable[[], object], message_bytes: Sequence[float], *,
                      repeats: int = 7, device: Any = None) -> Calibration:
    """Both measurements as one :class:`~pipeplan.calibration.Calibration`; collective on every rank.

    Args:
        work: a representative piece of compute (the same on every rank).
        message_bytes: message sizes to ping-pong (e.g. the model's boundary sizes);
            a small size is added so the fit sees the latency.
        repeats: timed repetitions of each measurement.
        device: where the ping-pong buffers live (CPU for gloo, the rank's GPU for NCCL).
    """
    import torch.distributed as dist

    sizes = sorted({4.0, *(float(size) for size in message_bytes)})
    samples = ping_pong(sizes, repeats=max(repeats, 10), device=device)
    latency, bandwidth = fit_link(samples) if samples else (0.0, float("inf"))
    slowdown = core_sharing(work, repeats=repeats)
    return Calibration(latency=latency, bandwidth=bandwidth, slowdown=slowdown,
                       backend=dist.get_backend(), samples=tuple(samples))
