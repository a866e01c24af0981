"""Measuring the machine the runtime runs on: message times and processes sharing cores.

Run inside the ranks (the process group is up), on every rank at once::

    from pipeplan.runtime.calibrate import calibrate_machine
    calibration = calibrate_machine(lambda: step_once(), message_bytes=[4_620_800])   # same on every rank
    calibration.latency, calibration.bandwidth, calibration.slowdown

* **Messages as the runtime sends them** (:func:`busy_sender_delays`): rank 1
  posts its receives ahead, rank 0 stamps the time, posts an eager ``isend`` of
  a float32 tensor of each size and goes straight on computing (the
  representative ``work``), as the runtime does after every action that
  produces a message; rank 1 records when the tensor arrived. The median delay
  is the one-way time of that size, and :func:`~pipeplan.calibration.fit_link`
  turns the samples into latency and bandwidth. On gloo over loopback it is
  several times what a ping-pong between two idle ranks (blocking
  ``send``/``recv`` both ways, this module's earlier measurement) shows;
  docs/fidelity.md has both.
* **Core sharing** (:func:`core_sharing`): for ``k = 1 .. world size`` (round
  robin, ``repeats`` rounds), ranks ``0 .. k-1`` run the same piece of work
  (e.g. one microbatch's forward and backward of the model) at the same time
  while the others wait in a barrier;
  ``slowdown[k - 1]`` is the median time until the last of the ``k`` is done
  over the median time alone. On a machine whose processes each have a free
  core it stays near 1; when processes outnumber free cores it grows towards
  ``k / cores``.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

from .._validation import positive_int
from ..calibration import Calibration, fit_link

__all__ = ["busy_sender_delays", "calibrate_machine", "core_sharing", "slowdown_from_rounds"]


def busy_sender_delays(message_bytes: Sequence[float], work: Callable[[], object], *, repeats: int = 7,
                       warmup: int = 2, device: Any = None) -> list[tuple[float, float]]:
    """``(bytes, one-way ms)`` per size from rank 0 to rank 1 while rank 0 computes; collective on every rank.

    Per size and round: rank 1 posts ``irecv`` for both (ahead, as the runtime
    does); after a barrier, rank 0 reads ``time.perf_counter()`` (one monotonic
    clock for every process of a machine), posts ``isend`` of the stamp and of
    a tensor of that size, runs ``work`` and then waits for its sends; rank 1
    waits for both and takes the delay from the stamp to the arrival of the
    tensor. Other ranks only join the barriers. Returns the median
    per size on every rank (broadcast from rank 1); an empty list in a world of
    one process.
    """
    import torch
    import torch.distributed as dist

    repeats = positive_int("repeats", repeats)
    rank, world = dist.get_rank(), dist.get_world_size()
    if world < 2:
        return []
    buffers = [torch.zeros(max(1, int(size) // 4), dtype=torch.float32, device=device) for size in message_bytes]
    stamp = torch.zeros(1, dtype=torch.float64, device=device)
    delays: list[list[float]] = [[] for _ in buffers]
    for run in range(warmup + repeats):
        for index, buffer in enumerate(buffers):
            # The receives are posted before the message leaves, as the runtime posts them ahead.
            posted: list[Any] = [dist.irecv(stamp, src=0), dist.irecv(buffer, src=0)] if rank == 1 else []
            dist.barrier()
            if rank == 0:
                stamp.fill_(time.perf_counter())
                works: list[Any] = [dist.isend(stamp, dst=1), dist.isend(buffer, dst=1)]
                work()
                for handle in works:
                    handle.wait()
            elif rank == 1:
                for handle in posted:
                    handle.wait()
                if device is not None and torch.device(device).type == "cuda":
                    torch.cuda.synchronize(device)
                if run >= warmup:
                    delays[index].append((time.perf_counter() - float(stamp.item())) * 1e3)
    samples = ([(float(buffer.numel() * 4), statistics.median(runs)) for buffer, runs in zip(buffers, delays)]
               if rank == 1 else [])
    shared = [samples]
    dist.broadcast_object_list(shared, src=1)
    return list(shared[0])


def core_sharing(work: Callable[[], object], *, repeats: int = 7, warmup: int = 2) -> tuple[float, ...]:
    """``slowdown[k - 1]`` for ``k = 1 .. world size`` ranks running ``work`` at once; collective.

    ``work`` runs on ranks ``0 .. k-1`` (they start together, from a barrier)
    while the others wait. A round lasts as long as its slowest busy rank (each
    timed from the barrier it left with the others):
    that is the rate at which ``k`` processes sharing the cores get their work
    done (what :func:`pipeplan.simulate`'s ``slowdown`` charges), whereas the
    first one done may have been favoured by the OS scheduler (four ranks on
    two cores, measured: rank 0 alone gave ``×1.6``, the last rank ``×1.9–2.5``).
    ``slowdown[k - 1]`` is the median round with ``k`` busy over the median
    round alone, broadcast to every rank.
    """
    import torch.distributed as dist

    repeats = positive_int("repeats", repeats)
    rank, world = dist.get_rank(), dist.get_world_size()
    mine: list[list[float]] = [[] for _ in range(world)]
    # Round robin over the busy counts, so load that comes and goes falls on all of them alike.
    for run in range(warmup + repeats):
        for busy in range(1, world + 1):
            dist.barrier()
            elapsed = 0.0
            if rank < busy:
                begin = time.perf_counter()
                work()
                elapsed = (time.perf_counter() - begin) * 1e3
            if run >= warmup:
                mine[busy - 1].append(elapsed)
    everyone: list[Any] = [None] * world
    dist.all_gather_object(everyone, mine)
    return slowdown_from_rounds(everyone)


def slowdown_from_rounds(times: Sequence[Sequence[Sequence[float]]]) -> tuple[float, ...]:
    """Core-sharing factors from every rank's round times.

    ``times[rank][k - 1][i]`` is what ``rank`` measured (ms) in round ``i`` with
    ``k`` ranks busy (0 where it was idle). A round lasts as long as its slowest
    busy rank; ``slowdown[k - 1]`` is the median round with ``k`` busy over the
    median round alone (so ``slowdown[0] == 1``).
    """
    busy_counts = len(times[0])
    rounds = [[max(per_rank[k][i] for per_rank in times) for i in range(len(times[0][k]))]
              for k in range(busy_counts)]
    medians = [statistics.median(r) for r in rounds]
    return tuple([1.0] + [m / medians[0] for m in medians[1:]])


def calibrate_machine(work: Callable[[], object], message_bytes: Sequence[float], *,
                      repeats: int = 7, device: Any = None) -> Calibration:
    """Both measurements as one :class:`~pipeplan.calibration.Calibration`; collective on every rank.

    The link is fitted to :func:`busy_sender_delays` (messages as the runtime
    sends them, the sender computing ``work`` meanwhile).

    Args:
        work: a representative piece of compute (the same on every rank).
        message_bytes: message sizes to time (e.g. the model's boundary sizes);
            a small size is added so the fit sees the latency.
        repeats: timed repetitions of each measurement.
        device: where the message buffers live (CPU for gloo, the rank's GPU for NCCL).
    """
    import torch.distributed as dist

    sizes = sorted({4.0, *(float(size) for size in message_bytes)})
    samples = busy_sender_delays(sizes, work, repeats=repeats, device=device)
    latency, bandwidth = fit_link(samples) if samples else (0.0, float("inf"))
    slowdown = core_sharing(work, repeats=repeats)
    return Calibration(latency=latency, bandwidth=bandwidth, slowdown=slowdown,
                       backend=dist.get_backend(), samples=tuple(samples))
