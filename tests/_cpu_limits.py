"""Bounds for a test that runs the CLI in-process: CPU time (not wall time) and address space.

    from _cpu_limits import CpuTimeExceeded, cpu_time_limit
    with cpu_time_limit(10):      # raises CpuTimeExceeded once this process has used 10 more CPU s
        main(["simulate", "--forward", "30,10,10,20"])

The limit counts this process's CPU time (``ITIMER_PROF``: user + system, every thread),
so a loaded machine, where a call waits for a core, does not trip it; an endless loop does.
"""

from __future__ import annotations

import contextlib
import os
import resource
import signal
from collections.abc import Iterator


class CpuTimeExceeded(BaseException):
    """Raised inside the call once it has used its CPU seconds (BaseException: no ``except Exception`` eats it)."""


@contextlib.contextmanager
def cpu_time_limit(seconds: float) -> Iterator[None]:
    """Raise :class:`CpuTimeExceeded` in the block once this process has spent ``seconds`` more CPU seconds."""

    def expired(signum: int, frame: object) -> None:  # noqa: ARG001
        raise CpuTimeExceeded(f"used more than {seconds:g} CPU s")

    previous = signal.signal(signal.SIGPROF, expired)
    signal.setitimer(signal.ITIMER_PROF, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, previous)


@contextlib.contextmanager
def address_space_room(extra_bytes: int) -> Iterator[None]:
    """Cap this process's address space at what it uses now plus ``extra_bytes``.

    An input that would allocate more fails with ``MemoryError`` (a bug the test reports)
    instead of summoning the machine's OOM killer.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    with open("/proc/self/statm", encoding="ascii") as handle:
        used = int(handle.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    cap = used + extra_bytes
    if soft != resource.RLIM_INFINITY:
        cap = min(cap, soft)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
