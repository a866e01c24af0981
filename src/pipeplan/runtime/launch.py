"""Starting the processes: :func:`spawn` on one machine, or torchrun's environment.

    from pipeplan.runtime import spawn
    def work(rank, world_size, scale):   # runs in each process, process group ready
        return rank * scale
    spawn(work, 2, 10)                   # [0, 10]

``spawn`` hosts the c10d store itself, so it always knows why a run failed: the
first failing rank writes its message there, the others are stopped by their
watchdog (:mod:`pipeplan.runtime.faults`) and, failing that, terminated by the
parent. It never waits on a failed run longer than ``timeout`` seconds.
"""

from __future__ import annotations

import datetime
import gc
import multiprocessing
import os
import pickle
import queue as queue_module
import socket
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

from .._validation import non_negative_float, positive_int
from ..errors import InvalidInputError, RuntimeFailure
from .faults import FAILURE_KEY, PEER_FAILED_EXIT, FaultMonitor, decode_tracker, format_failure
from .grid import TIMEOUT_ENV

__all__ = ["spawn", "init_from_env", "in_torchrun", "default_backend"]

_HOST = "127.0.0.1"


def default_backend() -> str:
    """``"nccl"`` when CUDA is available, else ``"gloo"``."""
    import torch

    return "nccl" if torch.cuda.is_available() else "gloo"


def in_torchrun() -> bool:
    """True when the environment carries torchrun's ``RANK`` and ``WORLD_SIZE``."""
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def init_from_env(*, backend: str | None = None, timeout: float = 60.0) -> tuple[int, int]:
    """Join the process group torchrun describes; returns ``(rank, world_size)``.

    Installs the failure watchdog on the default store. Idempotent.
    """
    import torch
    import torch.distributed as dist

    os.environ.setdefault(TIMEOUT_ENV, str(timeout))
    if not dist.is_initialized():
        chosen = backend or default_backend()
        if chosen == "nccl":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group(chosen, timeout=datetime.timedelta(seconds=timeout))
    rank = dist.get_rank()
    FaultMonitor.ensure(rank)
    return rank, dist.get_world_size()


def _worker(
    rank: int,
    world_size: int,
    port: int,
    backend: str,
    timeout: float,
    threads: int,
    tracker: Any,
    results: Any,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
) -> None:
    import torch
    import torch.distributed as dist

    os.environ.update(
        MASTER_ADDR=_HOST, MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world_size),
        LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world_size), **{TIMEOUT_ENV: str(timeout)},
    )
    # After a fork, never garbage-collect what the parent left behind: a parent
    # object that owns a thread (a TCPStore server, say) would join a thread that
    # does not exist here and abort or hang this process.
    gc.freeze()
    torch.set_num_threads(threads)
    store = dist.TCPStore(_HOST, port, world_size, is_master=False,
                          timeout=datetime.timedelta(seconds=timeout))
    monitor = FaultMonitor.install(store, rank, tracker=tracker)
    status = 0
    try:
        if backend == "nccl":
            torch.cuda.set_device(rank % max(1, torch.cuda.device_count()))
        dist.init_process_group(backend, store=store, rank=rank, world_size=world_size,
                                timeout=datetime.timedelta(seconds=timeout))
        value = fn(rank, world_size, *args)
        # Plain pickle: tensors travel by value, not as shared memory that dies with this process.
        results.put((rank, "ok", pickle.dumps(value)))
    except BaseException as error:  # noqa: BLE001 - report everything, including SystemExit
        message = str(error) if isinstance(error, RuntimeFailure) else format_failure(rank, monitor.where(), error)
        monitor.report(message)
        results.put((rank, "error", (message, traceback.format_exc(), isinstance(error, InvalidInputError))))
        status = 1
    monitor.close()
    if status == 0 and dist.is_initialized():
        dist.destroy_process_group()
    results.close()
    results.join_thread()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def spawn(
    fn: Callable[..., Any],
    world_size: int,
    *args: Any,
    backend: str = "gloo",
    timeout: float = 60.0,
    start_method: str | None = None,
) -> list[Any]:
    """Run ``fn(rank, world_size, *args)`` in ``world_size`` fresh processes.

    Each process joins a new process group (``backend``, a free port on this
    machine) before ``fn`` runs and leaves it after. ``fn`` and ``args`` must be
    picklable when the start method is ``"spawn"`` (the default with CUDA);
    ``"fork"`` (the default on CPU) starts much faster.

    Args:
        fn: the work of one rank; its return value must be picklable.
        world_size: number of processes, >= 1.
        backend: ``"gloo"`` (CPU) or ``"nccl"`` (one GPU per process).
        timeout: seconds: the process group's operation timeout, and how long the
            others may take to stop once one rank has failed.
        start_method: ``"fork"``, ``"spawn"`` or ``"forkserver"``.

    Returns:
        The per-rank return values, in rank order.

    Raises:
        RuntimeFailure: a rank raised or died; the message names the rank, the
            action it was in and the original error.
        InvalidInputError: every failing rank rejected its input (a world size,
            schedule or partition mismatch found before the first step).
    """
    world_size = positive_int("world_size", world_size)
    timeout = non_negative_float("timeout", timeout)
    if backend not in ("gloo", "nccl"):
        raise InvalidInputError(f"backend must be 'gloo' or 'nccl', got {backend!r}")
    import torch
    import torch.distributed as dist

    if start_method is None:
        cuda_started = backend == "nccl" or torch.cuda.is_initialized()
        start_method = "spawn" if cuda_started or sys.platform != "linux" else "fork"
    if start_method not in multiprocessing.get_all_start_methods():
        raise InvalidInputError(
            f"start_method must be one of {', '.join(multiprocessing.get_all_start_methods())}, got {start_method!r}"
        )
    context: Any = multiprocessing.get_context(start_method)  # typeshed's BaseContext lacks Process
    # Fork first, then start the store's server thread: a fork while that thread
    # holds a lock would leave the child blocked on it forever.
    port = _free_port()
    threads = max(1, (os.cpu_count() or 1) // world_size)
    tracker = context.Array("i", [0] * (3 * world_size), lock=False)
    results = context.Queue()
    processes = [
        context.Process(
            target=_worker,
            args=(rank, world_size, port, backend, timeout, threads, tracker, results, fn, args),
            name=f"pipeplan-rank{rank}",
            daemon=False,
        )
        for rank in range(world_size)
    ]
    for process in processes:
        process.start()
    try:
        store = dist.TCPStore(_HOST, port, world_size + 1, is_master=True,
                              timeout=datetime.timedelta(seconds=max(timeout, 1.0)), wait_for_workers=False)
    except Exception as error:  # noqa: BLE001 - the port was taken between choosing and binding it
        for process in processes:
            process.kill()
            process.join(5.0)
        raise RuntimeFailure(f"could not host the c10d store on port {port}: {error}") from error
    values: dict[int, Any] = {}
    errors: dict[int, tuple[str, str, bool]] = {}
    failed_at: float | None = None
    try:
        while True:
            try:
                rank, status, payload = results.get(timeout=0.05)
                if status == "ok":
                    values[rank] = payload
                else:
                    errors[rank] = payload
                    failed_at = failed_at or time.monotonic()
                continue
            except queue_module.Empty:
                pass
            alive = [p for p in processes if p.is_alive()]
            for rank, process in enumerate(processes):
                if process.exitcode not in (None, 0) and rank not in errors and failed_at is None:
                    failed_at = time.monotonic()
            if not alive:
                _drain(results, values, errors)
                break
            if failed_at is not None and time.monotonic() - failed_at > timeout:
                for process in alive:
                    process.terminate()
                for process in alive:
                    process.join(2.0)
                    if process.is_alive():
                        process.kill()
                _drain(results, values, errors)
                break
    finally:
        for process in processes:
            if process.is_alive():
                process.kill()
            process.join(5.0)
    if not errors and len(values) == world_size:
        del store
        return [pickle.loads(values[rank]) for rank in range(world_size)]
    message = _failure_message(store, processes, tracker, errors, values)
    # The exception's traceback keeps this frame alive: drop the store (and its
    # server thread) now, so no later fork inherits it.
    del store
    if errors and all(e[2] for e in errors.values()) and all(p.exitcode in (0, 1) for p in processes):
        raise InvalidInputError(message)  # every rank rejected its input before the first step
    raise RuntimeFailure(message)


def _free_port() -> int:
    """A TCP port on the loopback interface that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((_HOST, 0))
        return int(probe.getsockname()[1])


def _drain(results: Any, values: dict[int, Any], errors: dict[int, tuple[str, str, bool]]) -> None:
    while True:
        try:
            rank, status, payload = results.get(timeout=0.2)
        except queue_module.Empty:
            return
        if status == "ok":
            values[rank] = payload
        else:
            errors[rank] = payload


def _failure_message(
    store: Any,
    processes: list[Any],
    tracker: Any,
    errors: dict[int, tuple[str, str, bool]],
    values: dict[int, Any],
) -> str:
    """The root cause first: a rank that died, else the store's message, else any error."""
    reported = None
    try:
        if store.check([FAILURE_KEY]):
            reported = store.get(FAILURE_KEY).decode()
    except Exception:  # noqa: BLE001
        reported = None
    if reported is None and errors:
        reported = errors[min(errors)][0]
    dead = [
        f"rank {rank} died with exit status {process.exitcode} in "
        f"{decode_tracker(tracker[3 * rank: 3 * rank + 3])}"
        for rank, process in enumerate(processes)
        if process.exitcode not in (0, None, 1, PEER_FAILED_EXIT) and rank not in values and rank not in errors
    ]
    parts = dead + ([reported] if reported else [])
    root = parts[0] if parts else "a rank stopped without a result"
    message = "; then ".join(parts) if parts else root
    named = {int(part.split()[1]) for part in parts if part.startswith("rank ") and part.split()[1].isdigit()}
    stopped = sorted(rank for rank in range(len(processes)) if rank not in values and rank not in named)
    if stopped:
        message += " (stopped: " + ", ".join(
            f"rank {rank} in {decode_tracker(tracker[3 * rank: 3 * rank + 3])}" for rank in stopped
        ) + ")"
    traceback_text = next((errors[r][1] for r in sorted(errors) if errors[r][0] == root), None)
    if traceback_text and os.environ.get("PIPEPLAN_TRACEBACK"):
        message += "\n" + traceback_text
    return message
