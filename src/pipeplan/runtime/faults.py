"""Failure propagation: one rank fails, every rank stops, the message names it.

A rank that raises writes ``"rank r failed in F(stage s, mb i): <error>"`` to the
c10d store; a watchdog thread on every other rank polls the store and stops its
process (exit status :data:`PEER_FAILED_EXIT`) within ``poll_interval`` seconds::

    monitor = FaultMonitor.install(store, rank)      # once per process
    with monitor.action(Action("F", 1, 2)):          # what this rank is doing now
        ...                                          # an exception here is reported

:func:`pipeplan.runtime.spawn` reads the same key from the store it hosts, so the
parent raises :class:`~pipeplan.errors.RuntimeFailure` with the root cause even
when the other ranks were stopped in the middle of a blocking receive. A rank
that dies without writing (killed, segfault) is reported by ``spawn`` from its
exit status and the last action recorded in the shared ``tracker``.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from ..errors import RuntimeFailure
from ..schedule import Action

__all__ = [
    "FaultMonitor",
    "FAILURE_KEY",
    "PEER_FAILED_EXIT",
    "describe_action",
    "format_failure",
]

FAILURE_KEY = "pipeplan/failure"
_FAILURE_COUNT_KEY = "pipeplan/failure_count"
PEER_FAILED_EXIT = 75
"""Exit status of a process stopped because another rank failed."""

_KIND_CODES = {"F": 1, "B": 2, "W": 3, "I": 4}
_CODE_KINDS = {code: kind for kind, code in _KIND_CODES.items()}


def describe_action(action: Action | None, phase: str = "setup") -> str:
    """``"F(stage 1, mb 2)"`` for an action, or ``phase`` when outside any action."""
    if action is None:
        return phase
    return f"{action.kind.value}(stage {action.stage}, mb {action.microbatch})"


def format_failure(rank: int, where: str, error: BaseException) -> str:
    """The one-line failure message every rank and the launcher show."""
    text = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return f"rank {rank} failed in {where}: {type(error).__name__}: {text}".rstrip(": ")


def decode_tracker(values: Sequence[int]) -> str:
    """Turn a tracker triple ``(kind code, stage, microbatch)`` back into text."""
    code, stage, microbatch = values
    if code <= 0:
        return "setup" if code == 0 else "between actions"
    return describe_action(Action(_CODE_KINDS[code], stage, microbatch))


class FaultMonitor:
    """Per-process failure reporting and the watchdog that stops on a peer's failure.

    Args:
        store: the c10d store shared by all ranks (``None``: report locally only).
        rank: this process's global rank.
        tracker: optional shared integer array (3 per rank) where the current
            action is mirrored for the launcher; see :func:`decode_tracker`.
        poll_interval: seconds between two looks at the store, > 0.
    """

    _installed: FaultMonitor | None = None

    def __init__(
        self,
        store: Any,
        rank: int,
        *,
        tracker: Any = None,
        poll_interval: float = 0.05,
    ) -> None:
        self.store = store
        self.rank = rank
        self.tracker = tracker
        self.poll_interval = poll_interval
        self.current: Action | None = None
        self.phase = "setup"
        self.failed_here = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------- lifecycle
    @classmethod
    def install(
        cls, store: Any, rank: int, *, tracker: Any = None, poll_interval: float = 0.05
    ) -> FaultMonitor:
        """Create (or replace) this process's monitor and start its watchdog."""
        if cls._installed is not None:
            cls._installed.close()
        monitor = cls(store, rank, tracker=tracker, poll_interval=poll_interval)
        if store is not None:
            monitor._thread = threading.Thread(target=monitor._watch, name="pipeplan-watchdog", daemon=True)
            monitor._thread.start()
        cls._installed = monitor
        return monitor

    @classmethod
    def current_monitor(cls) -> FaultMonitor | None:
        """The monitor installed in this process, if any."""
        return cls._installed

    @classmethod
    def ensure(cls, rank: int) -> FaultMonitor:
        """The installed monitor, or a new one on the default process group's store."""
        if cls._installed is not None:
            return cls._installed
        store = None
        try:
            from torch.distributed import distributed_c10d

            store = distributed_c10d._get_default_store()
        except (RuntimeError, ValueError, AttributeError):
            store = None
        return cls.install(store, rank)

    def close(self) -> None:
        """Stop the watchdog thread."""
        self._stop.set()
        if FaultMonitor._installed is self:
            FaultMonitor._installed = None

    # --------------------------------------------------------------- tracking
    def enter(self, action: Action | None) -> None:
        """Record that this rank now runs ``action`` (``None``: between actions)."""
        self.current = action
        if self.tracker is not None:
            base = 3 * self.rank
            if action is None:
                self.tracker[base] = -1
            else:
                self.tracker[base] = _KIND_CODES[action.kind]
                self.tracker[base + 1] = action.stage
                self.tracker[base + 2] = action.microbatch

    @contextmanager
    def action(self, action: Action) -> Iterator[None]:
        """Track ``action``; an exception inside is reported and re-raised as RuntimeFailure."""
        self.enter(action)
        try:
            yield
        except RuntimeFailure:
            raise
        except Exception as error:  # noqa: BLE001 - every failure must reach the other ranks
            message = format_failure(self.rank, describe_action(action), error)
            self.report(message)
            raise RuntimeFailure(message) from error
        self.enter(None)

    @contextmanager
    def phase_of(self, phase: str) -> Iterator[None]:
        """Track a phase outside the actions (``"gather"``, ``"all-reduce"``...)."""
        previous = self.phase
        self.phase = phase
        try:
            yield
        except RuntimeFailure:
            raise
        except Exception as error:  # noqa: BLE001
            message = format_failure(self.rank, phase, error)
            self.report(message)
            raise RuntimeFailure(message) from error
        finally:
            self.phase = previous

    def where(self) -> str:
        """What this rank is doing now, for messages."""
        return describe_action(self.current, self.phase)

    # -------------------------------------------------------------- reporting
    def report(self, message: str) -> None:
        """Publish ``message`` as the run's failure (the first report wins)."""
        self.failed_here = True
        if self.store is None:
            return
        try:
            if int(self.store.add(_FAILURE_COUNT_KEY, 1)) == 1:
                self.store.set(FAILURE_KEY, message)
        except Exception:  # noqa: BLE001 - the store may be gone with the launcher
            pass

    def peer_failure(self) -> str | None:
        """The failure another rank published, or ``None``."""
        if self.store is None:
            return None
        try:
            if self.store.check([FAILURE_KEY]):
                return self.store.get(FAILURE_KEY).decode()
        except Exception:  # noqa: BLE001
            return None
        return None

    def _watch(self) -> None:
        while not self._stop.wait(self.poll_interval):
            message = self.peer_failure()
            if message is None or self.failed_here:
                continue
            sys.stderr.write(
                f"pipeplan: rank {self.rank} stopping in {self.where()} because {message}\n"
            )
            sys.stderr.flush()
            os._exit(PEER_FAILED_EXIT)
