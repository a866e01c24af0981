"""Starting the processes: :func:`spawn` on one machine, or torchrun's environment.

    from pipeplan.runtime import spawn
    def work(rank, world_size, scale):   # runs in each process, process group ready
        return rank * scale
    spawn(work, 2, 10)                   # [0, 10]

``spawn`` hosts the c10d store itself and reads every rank's progress from
shared memory (:class:`~pipeplan.runtime.faults.RankState`), so it always knows
who failed: a rank that died (any exit status or signal), raised, or hung in one
action past ``timeout``; :func:`~pipeplan.runtime.faults.explain` words it. The
others are stopped by their watchdog or, failing that, terminated by the parent.
It never waits on a failed run longer than ``timeout`` seconds, ends every rank
on SIGINT/SIGTERM, and its ranks die with it.
"""
from __future__ import annotations

import ctypes
import datetime
import gc
import math
import multiprocessing
import os
import pickle
import queue as queue_module
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from .._validation import positive_int
from ..errors import InvalidInputError, RuntimeFailure
from .faults import (FINISHED, NOT_WAITING, RAISED, RUNNING, FaultMonitor, RankOutcome, RankState, explain,
                     format_failure)
from .grid import TIMEOUT_ENV

__all__ = ["spawn", "init_from_env", "in_torchrun", "default_backend", "check_timeout", "RunInterrupted",
           "MIN_TIMEOUT"]

_HOST = "127.0.0.1"

MIN_TIMEOUT = 1.0
"""Seconds: the smallest timeout accepted. It bounds connecting the ranks and every
receive, which take a good part of a second on a loaded machine; below it a healthy
run fails in C++ store code instead of reporting a stuck rank."""


class RunInterrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM reached :func:`spawn`; every rank has been ended.

    Attributes:
        signum: the signal number; ``str(error)`` says where each rank was.
    """

    def __init__(self, message: str, signum: int) -> None:
        super().__init__(message)
        self.signum = signum


def check_timeout(field: str, value: object) -> float:
    """``value`` as seconds >= :data:`MIN_TIMEOUT` and finite, else one-line InvalidInputError naming ``field``."""
    try:
        seconds = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise InvalidInputError(f"{field} must be a number of seconds, got {value!r}") from None
    if isinstance(value, bool) or not math.isfinite(seconds) or seconds <= 0:
        raise InvalidInputError(f"{field} must be a number of seconds > 0, got {seconds}")
    if seconds < MIN_TIMEOUT:
        raise InvalidInputError(
            f"{field} must be at least {MIN_TIMEOUT:g} second(s), got {seconds:g}: it bounds connecting "
            "the ranks and every receive, which a healthy run cannot do faster"
        )
    return seconds


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

    timeout = check_timeout("timeout", timeout)
    os.environ.setdefault(TIMEOUT_ENV, str(timeout))
    if not dist.is_initialized():
        chosen = backend or default_backend()
        if chosen == "nccl":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group(chosen, timeout=datetime.timedelta(seconds=timeout))
    rank = dist.get_rank()
    FaultMonitor.ensure(rank)
    return rank, dist.get_world_size()


def _die_with_parent(parent_pid: int) -> None:
    """Ask Linux to SIGKILL this process when its parent dies (the watchdog checks too)."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent_pid:
        os._exit(1)


def _worker(
    rank: int,
    world_size: int,
    port: int,
    backend: str,
    timeout: float,
    threads: int,
    states: Any,
    parent_pid: int,
    results: Any,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
) -> None:
    # The parent ends the ranks on Ctrl-C (which the terminal sends to all of
    # them) and SIGTERM: ignore the one, die at once on the other.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _die_with_parent(parent_pid)
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
    try:
        store = dist.TCPStore(_HOST, port, world_size, is_master=False,
                              timeout=datetime.timedelta(seconds=timeout))
    except Exception as error:  # noqa: BLE001 - the parent's store did not answer in time
        results.put((rank, "error", (format_failure(rank, "setup", error), traceback.format_exc(), False, -1)))
        results.close()
        results.join_thread()
        os._exit(1)
    monitor = FaultMonitor.install(store, rank, state=states[rank], parent_pid=parent_pid)
    status = 0
    try:
        if backend == "nccl":
            torch.cuda.set_device(rank % max(1, torch.cuda.device_count()))
        dist.init_process_group(backend, store=store, rank=rank, world_size=world_size,
                                timeout=datetime.timedelta(seconds=timeout))
        value = fn(rank, world_size, *args)
        # Plain pickle: tensors travel by value, not as shared memory that dies with this process.
        results.put((rank, "ok", pickle.dumps(value)))
        monitor.finish(FINISHED)
    except SystemExit as error:
        # sys.exit() in the rank's code: leave as os._exit would, so the parent
        # reports the rank's own exit status (not a peer's lost connection).
        status = error.code if isinstance(error.code, int) else (0 if error.code is None else 1)
        if not isinstance(error.code, (int, type(None))):
            print(error.code, file=sys.stderr)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    except BaseException as error:  # noqa: BLE001 - report everything
        if isinstance(error, RuntimeFailure):
            message = str(error)
        else:
            message = format_failure(rank, monitor.where(), error)
            comm = monitor.communication_failed(error)
            monitor.report(message, primary=not comm)
            monitor.finish(RAISED)
        peer = monitor.comm_peer if monitor.communication_failed(error) else None
        results.put((rank, "error", (message, traceback.format_exc(), isinstance(error, InvalidInputError), peer)))
        status = 1
    monitor.close()
    if status == 0 and dist.is_initialized():
        dist.destroy_process_group()
    results.close()
    results.join_thread()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


@contextmanager
def _signals_stop_the_run() -> Iterator[None]:
    """While inside, SIGTERM raises (like SIGINT's KeyboardInterrupt) in the main thread."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, _frame: Any) -> None:
        # One stop is enough: a second signal while the ranks are being ended must not
        # interrupt that (and escape with no message).
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        raise RunInterrupted(f"interrupted by {signal.Signals(signum).name}", signum)

    previous = signal.signal(signal.SIGTERM, stop)
    previous_int = signal.getsignal(signal.SIGINT)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, previous_int)


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
        timeout: seconds, >= :data:`MIN_TIMEOUT`: the process group's operation
            timeout, the longest one action may compute before its rank counts
            as hung, and how long the others may take to stop once one rank has failed.
        start_method: ``"fork"``, ``"spawn"`` or ``"forkserver"``.

    Returns:
        The per-rank return values, in rank order.

    Raises:
        RuntimeFailure: a rank raised, died or hung; the message names that rank
            first (its error, exit status or signal, and the action it was in),
            then what the others were doing.
        InvalidInputError: every failing rank rejected its input (a world size,
            schedule or partition mismatch found before the first step).
        RunInterrupted: SIGINT or SIGTERM arrived; every rank was ended first.
    """
    world_size = positive_int("world_size", world_size)
    timeout = check_timeout("timeout", timeout)
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
    threads = threads_per_process(world_size)
    states = context.Array(RankState, world_size, lock=False)
    results = context.Queue()
    processes = [
        context.Process(
            target=_worker,
            args=(rank, world_size, port, backend, timeout, threads, states, os.getpid(), results, fn, args),
            name=f"pipeplan-rank{rank}",
            daemon=False,
        )
        for rank in range(world_size)
    ]
    with _signals_stop_the_run():
        run = _Run(processes, states, results, timeout)
        try:
            for process in processes:
                process.start()
            try:
                store = dist.TCPStore(_HOST, port, world_size + 1, is_master=True,
                                      timeout=datetime.timedelta(seconds=timeout), wait_for_workers=False)
            except Exception as error:  # noqa: BLE001 - the port was taken between choosing and binding it
                run.end_all()
                raise RuntimeFailure(f"could not host the c10d store on port {port}: {error}") from error
            run.watch()
        except KeyboardInterrupt as stop:  # SIGINT, or SIGTERM through _signals_stop_the_run
            run.end_all()
            signum = stop.signum if isinstance(stop, RunInterrupted) else signal.SIGINT
            where = ", ".join(f"rank {o.rank} in {o.state.where.decode() or 'setup'}" for o in run.outcomes())
            raise RunInterrupted(f"interrupted by {signal.Signals(signum).name}; ended {where}", signum) from None
        finally:
            run.end_all()
    if not run.errors and len(run.values) == world_size:
        del store
        return [pickle.loads(run.values[rank]) for rank in range(world_size)]
    message = explain(run.outcomes(), timeout=timeout, hung_rank=run.hung_rank)
    root_traceback = next((run.errors[r][1] for r in sorted(run.errors) if message.startswith(run.errors[r][0])),
                          None)
    if root_traceback and os.environ.get("PIPEPLAN_TRACEBACK"):
        message += "\n" + root_traceback
    # The exception's traceback keeps this frame alive: drop the store (and its
    # server thread) now, so no later fork inherits it.
    del store
    if run.errors and all(e[2] for e in run.errors.values()) and all(p.exitcode in (0, 1) for p in processes):
        raise InvalidInputError(message)  # every rank rejected its input before the first step
    raise RuntimeFailure(message)


class _Run:
    """The parent's view of the ranks of one :func:`spawn`: results, exits, and when to stop them."""

    def __init__(self, processes: list[Any], states: Any, results: Any, timeout: float) -> None:
        self.processes = processes
        self.states = states
        self.results = results
        self.timeout = timeout
        self.values: dict[int, Any] = {}
        self.errors: dict[int, tuple[str, str, bool, int | None]] = {}
        self.seen_dead: dict[int, float] = {}
        self.ended_by_launcher: set[int] = set()
        self.hung_rank: int | None = None

    def _take(self, wait: float) -> bool:
        try:
            rank, status, payload = self.results.get(timeout=wait)
        except queue_module.Empty:
            return False
        if status == "ok":
            self.values[rank] = payload
        else:
            self.errors[rank] = payload
        return True

    def watch(self) -> None:
        """Collect results until every rank ended, stopping the rest once one failed or hung."""
        failed_at: float | None = None
        while True:
            if self._take(0.05):
                failed_at = failed_at or (time.monotonic() if self.errors else None)
                continue
            now = time.monotonic()
            alive, stuck = [], []
            for rank, process in enumerate(self.processes):
                if process.exitcode is None:
                    alive.append(rank)
                    state = self.states[rank]
                    if (state.outcome == RUNNING and state.in_action and state.waiting_on == NOT_WAITING
                            and now - state.since > self.timeout):
                        stuck.append((state.since, rank))  # computing one action for longer than the timeout
                elif rank not in self.seen_dead:
                    self.seen_dead[rank] = now
                    if self.states[rank].outcome != FINISHED:
                        failed_at = failed_at or now
            if stuck:
                self.hung_rank = min(stuck)[1]  # the one stuck longest
            if not alive:
                break
            if self.hung_rank is not None or (failed_at is not None and now - failed_at > self.timeout):
                break
        self.end_all()
        while self._take(0.2):
            pass

    def end_all(self) -> None:
        """Terminate (SIGTERM), then kill, every rank still running; reap them all."""
        alive = [(rank, p) for rank, p in enumerate(self.processes) if p.pid is not None and p.is_alive()]
        for rank, process in alive:
            self.ended_by_launcher.add(rank)
            process.terminate()
        deadline = time.monotonic() + 2.0
        for _rank, process in alive:
            process.join(max(0.0, deadline - time.monotonic()))
            if process.is_alive():
                process.kill()
        for process in self.processes:
            if process.pid is not None:
                process.join(5.0)

    def outcomes(self) -> list[RankOutcome]:
        """Every rank's :class:`RankOutcome` for :func:`~pipeplan.runtime.faults.explain`."""
        out = []
        for rank, process in enumerate(self.processes):
            error = self.errors.get(rank)
            out.append(RankOutcome(
                rank=rank, state=self.states[rank], exit_code=process.exitcode,
                error=error[0] if error else None, comm_peer=error[3] if error else None,
                ended_by_launcher=rank in self.ended_by_launcher,
                seen_dead_at=self.seen_dead.get(rank, math.inf),
            ))
        return out


def threads_per_process(nproc: int) -> int:
    """Intra-op threads each of ``nproc`` local ranks gets from :func:`spawn` (the profile uses the same)."""
    return max(1, (os.cpu_count() or 1) // nproc)


def _free_port() -> int:
    """A TCP port on the loopback interface that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((_HOST, 0))
        return int(probe.getsockname()[1])
