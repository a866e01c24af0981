"""Failure propagation and blame: one rank fails, every rank stops, the message names the culprit.

Every rank keeps a small :class:`RankState` up to date: the action or phase it is
in, whether it is waiting for a peer (and which), since when, and how it ended.
Under :func:`pipeplan.runtime.spawn` that state lives in shared memory the parent
reads, and decides who is to blame with :func:`explain`. Under torchrun the
watchdog thread publishes it to the c10d store every 0.2 s (a heartbeat), and the
rank whose receive failed reads its peer's before it reports::

    monitor = FaultMonitor.install(store, rank)      # once per process
    with monitor.action(Action("F", 1, 2)):          # what this rank is doing now
        with monitor.waiting(0):                     # blocked on rank 0's message
            ...                                      # an exception here is a communication failure

A rank whose own code raises writes ``"rank r failed in F(stage s, mb i): <error>"``
to the store; the watchdog on every other rank sees it and ends its process
(exit status :data:`PEER_FAILED_EXIT`). A rank that dies (any exit status, a
signal) or hangs in an action writes nothing: its peers' receives fail, and the
wait-for chain (rank 0 waited for rank 1, rank 1 was computing) names it.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from ..errors import RuntimeFailure
from ..schedule import Action

__all__ = [
    "FaultMonitor",
    "FAILURE_KEY",
    "PEER_FAILED_EXIT",
    "RankOutcome",
    "RankState",
    "describe_action",
    "describe_exit",
    "explain",
    "format_failure",
    "is_communication_error",
    "write_torchrun_error_file",
]

FAILURE_KEY = "pipeplan/failure"
_FAILURE_COUNT_KEY = "pipeplan/failure_count"
_STATE_KEY = "pipeplan/state/{rank}"
PEER_FAILED_EXIT = 75
"""Exit status of a process stopped because another rank failed."""

NOT_WAITING = -2
"""``RankState.waiting_on`` when the rank computes (or is between actions)."""
WAITING_ON_GROUP = -1
"""``RankState.waiting_on`` in a collective (barrier, all-gather, all-reduce)."""

RUNNING, FINISHED, RAISED, STOPPED = 0, 1, 2, 3
"""``RankState.outcome``: still running; returned its result; raised (and reported);
stopped by its watchdog because a peer failed or the launcher went away."""

_WHERE_BYTES = 120
_BEAT_EVERY = 4
"""Polls between two heartbeats published to the store (torchrun): 0.2 s at the default poll."""
_TIMEOUT_ENV = "PIPEPLAN_TIMEOUT"  # the same as grid.TIMEOUT_ENV, read here without importing torch


class RankState(ctypes.Structure):
    """One rank's progress, in memory the launcher can read (one per rank in a shared array).

    Fields: ``where`` (text: ``"F(stage 1, mb 2)"`` or a phase), ``in_action``
    (1 inside an action of the schedule), ``waiting_on`` (a global rank,
    :data:`WAITING_ON_GROUP` or :data:`NOT_WAITING`), ``since`` (``time.monotonic()``
    seconds when the rank entered this state), ``outcome`` (:data:`RUNNING`...)
    and ``ended`` (monotonic seconds of the outcome, 0 while running).
    """

    _fields_ = [
        ("where", ctypes.c_char * _WHERE_BYTES),
        ("in_action", ctypes.c_int),
        ("waiting_on", ctypes.c_int),
        ("since", ctypes.c_double),
        ("outcome", ctypes.c_int),
        ("ended", ctypes.c_double),
    ]


def describe_action(action: Action | None, phase: str = "setup") -> str:
    """``"F(stage 1, mb 2)"`` for an action, or ``phase`` when outside any action."""
    if action is None:
        return phase
    return f"{action.kind.value}(stage {action.stage}, mb {action.microbatch})"


_SOURCE_LOCATION = re.compile(r"\[[^\]\s]+\.(?:cc|cpp|h|hpp):\d+\]\s*")
_GLOO_ADVICE = re.compile(r"\.\s*This is typically caused by.*$")


def format_failure(rank: int, where: str, error: BaseException) -> str:
    """The one-line failure message every rank and the launcher show.

    Only the error's first line is kept, without C++ source locations and gloo's
    boilerplate advice ("This is typically caused by...").
    """
    text = str(error).strip().splitlines()[0] if str(error).strip() else ""
    text = _GLOO_ADVICE.sub("", _SOURCE_LOCATION.sub("", text))
    return f"rank {rank} failed in {where}: {type(error).__name__}: {text}".rstrip(": ")


def describe_exit(exit_code: int) -> str:
    """``"exit status 1"`` or ``"signal SIGKILL"`` for a ``multiprocessing`` exit code."""
    if exit_code >= 0:
        return f"exit status {exit_code}"
    try:
        return f"signal {signal.Signals(-exit_code).name}"
    except ValueError:
        return f"signal {-exit_code}"


_TRANSPORT_TEXT = re.compile(
    r"Connection (?:closed|reset) by peer|Timed out waiting|Socket Timeout|Broken pipe|gloo/transport|NCCL"
)


def is_communication_error(error: BaseException) -> bool:
    """Whether ``error`` came from torch.distributed (a peer closed, a receive timed out).

    Some gloo failures (a send on a closed pair) are plain RuntimeErrors, so the
    transport's own wording counts too.
    """
    try:
        import torch.distributed as dist

        if isinstance(error, dist.DistError):
            return True
    except (ImportError, AttributeError):  # torch < 2.1 has no DistError
        pass
    return isinstance(error, RuntimeError) and bool(_TRANSPORT_TEXT.search(str(error)))


def _state_dict(state: RankState, now: float) -> dict[str, Any]:
    return {"where": state.where.decode(errors="replace"), "in_action": state.in_action,
            "waiting_on": state.waiting_on, "age": now - state.since, "outcome": state.outcome}


def _where_of(state: RankState) -> str:
    where = state.where.decode(errors="replace") or "setup"
    if state.waiting_on >= 0:
        return f"{where}, waiting for rank {state.waiting_on}"
    if state.waiting_on == WAITING_ON_GROUP and state.in_action:
        return f"{where}, waiting for its group"
    return where


class FaultMonitor:
    """Per-process progress tracking, failure reporting, and the watchdog.

    Args:
        store: the c10d store shared by all ranks (``None``: report locally only).
        rank: this process's global rank.
        state: where to keep this rank's :class:`RankState` (an element of the
            launcher's shared array); ``None``: a private one, published to the
            store by the watchdog (torchrun).
        poll_interval: seconds between two looks at the store, > 0.
        parent_pid: stop this process when its parent (the launcher) is gone.
    """

    _installed: FaultMonitor | None = None

    def __init__(
        self,
        store: Any,
        rank: int,
        *,
        state: RankState | None = None,
        poll_interval: float = 0.05,
        parent_pid: int | None = None,
    ) -> None:
        self.store = store
        self.rank = rank
        self.publish = state is None
        self.state = state if state is not None else RankState()
        self.poll_interval = poll_interval
        self.parent_pid = parent_pid
        self.current: Action | None = None
        self.phase = "setup"
        self.failed_here = False
        self.comm_peer: int | None = None
        """The peer (or :data:`WAITING_ON_GROUP`) this rank was waiting for when its last error came."""
        self.echoed = False
        """This rank's last failure repeats what another rank reported first (torchrun: a bystander)."""
        self._beats = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._set_where("setup", in_action=False)

    # ------------------------------------------------------------- lifecycle
    @classmethod
    def install(
        cls,
        store: Any,
        rank: int,
        *,
        state: RankState | None = None,
        poll_interval: float = 0.05,
        parent_pid: int | None = None,
    ) -> FaultMonitor:
        """Create (or replace) this process's monitor and start its watchdog."""
        if cls._installed is not None:
            cls._installed.close()
        monitor = cls(store, rank, state=state, poll_interval=poll_interval, parent_pid=parent_pid)
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
    def _set_where(self, where: str, *, in_action: bool) -> None:
        state = self.state
        state.where = where.encode()[: _WHERE_BYTES - 1]
        state.in_action = int(in_action)
        state.waiting_on = NOT_WAITING
        state.since = time.monotonic()

    def enter(self, action: Action | None) -> None:
        """Record that this rank now runs ``action`` (``None``: between actions)."""
        self.current = action
        if action is None:
            self._set_where("between actions" if self.phase == "setup" else self.phase, in_action=False)
        else:
            self._set_where(describe_action(action), in_action=True)

    def finish(self, outcome: int) -> None:
        """Record how this rank ended (:data:`FINISHED`, :data:`RAISED` or :data:`STOPPED`)."""
        self.state.ended = time.monotonic()
        self.state.outcome = outcome

    @contextmanager
    def waiting(self, peer: int) -> Iterator[None]:
        """Mark this rank as blocked on global rank ``peer`` (or :data:`WAITING_ON_GROUP`).

        An exception raised inside is a communication failure: it blames ``peer``
        unless ``peer`` is found to have failed another way.
        """
        state = self.state
        previous, previous_since = state.waiting_on, state.since
        state.waiting_on = peer
        state.since = time.monotonic()
        try:
            yield
        except BaseException:
            self.comm_peer = peer
            raise
        state.waiting_on = previous
        state.since = time.monotonic() if previous == NOT_WAITING else previous_since

    @contextmanager
    def action(self, action: Action) -> Iterator[None]:
        """Track ``action``; an exception inside is reported and re-raised as RuntimeFailure."""
        self.enter(action)
        self.comm_peer = None
        try:
            yield
        except RuntimeFailure:
            raise
        except Exception as error:  # noqa: BLE001 - every failure must reach the other ranks
            raise self._failure(describe_action(action), error) from error
        self.enter(None)

    @contextmanager
    def phase_of(self, phase: str, *, collective: bool = False) -> Iterator[None]:
        """Track a phase outside the actions (``"gather"``, ``"all-reduce"``...).

        ``collective``: the phase is one collective call, so the rank waits for its group.
        """
        previous = self.phase
        self.phase = phase
        self.comm_peer = None
        self._set_where(phase, in_action=False)
        try:
            if collective:
                with self.waiting(WAITING_ON_GROUP):
                    yield
            else:
                yield
        except RuntimeFailure:
            raise
        except Exception as error:  # noqa: BLE001
            raise self._failure(phase, error) from error
        finally:
            self.phase = previous
        self._set_where(previous if self.current is None else describe_action(self.current),
                        in_action=self.current is not None)

    def where(self) -> str:
        """What this rank is doing now, for messages."""
        return describe_action(self.current, self.phase)

    def communication_failed(self, error: BaseException) -> bool:
        """Whether ``error`` (just raised here) came from waiting on a peer."""
        return self.comm_peer is not None or is_communication_error(error)

    def _failure(self, where: str, error: BaseException) -> RuntimeFailure:
        message = format_failure(self.rank, where, error)
        if self.communication_failed(error):
            if self.comm_peer is None:
                self.comm_peer = WAITING_ON_GROUP
            # A receive failed: the peer is the likely culprit. The launcher (spawn)
            # decides from every rank's state; alone (torchrun), ask the store.
            if self.publish:
                message = self._diagnose(message)
            self.report(message, primary=False)
        else:
            self.report(message)
        self.finish(RAISED)
        return RuntimeFailure(message)

    # -------------------------------------------------------------- reporting
    def report(self, message: str, *, primary: bool = True) -> None:
        """Publish ``message`` as the run's failure (the first report wins).

        ``primary=False`` (a receive that failed because of a peer): first give the
        peer a moment to publish its own, truer report.
        """
        self.failed_here = True
        if self.store is None:
            return
        try:
            if not primary:
                deadline = time.monotonic() + 4 * self.poll_interval
                while time.monotonic() < deadline and not self.store.check([FAILURE_KEY]):
                    time.sleep(self.poll_interval / 2)
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
                return str(self.store.get(FAILURE_KEY).decode())
        except Exception:  # noqa: BLE001
            return None
        return None

    def _peer_state(self, peer: int) -> dict[str, Any] | None:
        try:
            key = _STATE_KEY.format(rank=peer)
            if self.store.check([key]):
                return dict(json.loads(self.store.get(key).decode()))
        except Exception:  # noqa: BLE001
            return None
        return None

    def _diagnose(self, message: str, settle: float = 1.0) -> str:
        """Reword a failed receive from the peer's published heartbeat (no launcher to ask).

        Waits up to ``settle`` seconds: a peer that published a failure meanwhile is
        the root cause; one whose heartbeat stopped died; one computing the same
        action all along hung.
        """
        peer = self.comm_peer
        if self.store is None or peer is None or peer < 0:
            return message
        first = self._peer_state(peer)
        deadline = time.monotonic() + settle
        latest = first
        while time.monotonic() < deadline:
            reported = self.peer_failure()
            if reported is not None:
                self.echoed = True
                return reported
            time.sleep(self.poll_interval)
            latest = self._peer_state(peer)
        if first is None or latest is None or latest.get("beat") == first.get("beat"):
            where = first["where"] if first else "setup"
            return f"rank {peer} died or stopped responding in {where} (no heartbeat for {settle:.0f} s); then {message}"
        if latest["outcome"] == RUNNING and latest["waiting_on"] == NOT_WAITING and latest["in_action"]:
            limit = os.environ.get(_TIMEOUT_ENV)
            quoted = f" (timeout {float(limit):g} s)" if limit else ""
            return (f"rank {peer} hung in {latest['where']}: no progress for {latest['age']:.1f} s{quoted}; "
                    f"then {message}")
        return message

    def _publish(self) -> None:
        self._beats += 1
        payload = {**_state_dict(self.state, time.monotonic()), "beat": self._beats}
        self.store.set(_STATE_KEY.format(rank=self.rank), json.dumps(payload))

    def _watch(self) -> None:
        failures = polls = 0
        while not self._stop.wait(self.poll_interval):
            polls += 1
            if self.parent_pid is not None and os.getppid() != self.parent_pid:
                os._exit(PEER_FAILED_EXIT)  # the launcher is gone: nobody is left to report to
            try:
                if self.publish and polls % _BEAT_EVERY == 1:
                    self._publish()
                found = self.store.check([FAILURE_KEY])
                message = self.store.get(FAILURE_KEY).decode() if found else None
                failures = 0
            except Exception:  # noqa: BLE001 - the store went away with the launcher
                failures += 1
                if failures < 3:
                    continue
                if not self.failed_here:
                    self.finish(STOPPED)
                if not self.failed_here and self.publish:
                    sys.stderr.write(f"pipeplan: rank {self.rank} stopping in {self.where()}: "
                                     "the launcher's store is gone\n")
                    sys.stderr.flush()
                os._exit(PEER_FAILED_EXIT)
            if message is None or self.failed_here:
                continue
            self.finish(STOPPED)
            if self.publish:  # under spawn the launcher reports for everyone
                line = (f"pipeplan: rank {self.rank} stopping: {message}" if message.startswith(f"rank {self.rank} ")
                        else f"pipeplan: rank {self.rank} stopping in {self.where()} because {message}")
                write_torchrun_error_file(line, consequence=True)
                sys.stderr.write(line + "\n")
                sys.stderr.flush()
            os._exit(PEER_FAILED_EXIT)


def write_torchrun_error_file(message: str, *, consequence: bool = False) -> None:
    """Give torchrun this rank's one-line failure, for its "Root Cause" report.

    torchrun prints a report whenever a rank exits non-zero; with the error file
    (``$TORCHELASTIC_ERROR_FILE``, set by torchrun for each rank) it shows
    ``message`` instead of a link to its docs. torchrun names as root cause the
    failure with the smallest timestamp, in whole seconds; ``consequence`` (a rank
    stopped because a peer failed first) stamps the next second, so a tie never
    blames the bystander.
    """
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if not path:
        return
    stamp = int(time.time()) + (1 if consequence else 0)
    data = {"message": {"message": message, "extraInfo": {"py_callstack": message, "timestamp": str(stamp)}}}
    try:
        with open(path, "w") as handle:
            json.dump(data, handle)
    except OSError:
        pass


# ------------------------------------------------------------------- blame
@dataclass
class RankOutcome:
    """What the launcher knows about one rank once the run has stopped.

    Attributes:
        rank: global rank.
        state: its last :class:`RankState`.
        exit_code: the process's ``multiprocessing`` exit code (negative: a
            signal), ``None`` if unknown or still running.
        error: the failure message the rank sent, if it raised.
        comm_peer: for an error, the rank it was waiting for (``None``: its own
            code raised; :data:`WAITING_ON_GROUP`: a collective).
        ended_by_launcher: the launcher terminated it (timeout, signal).
        seen_dead_at: monotonic seconds when the launcher first saw it exit.
    """

    rank: int
    state: RankState
    exit_code: int | None = None
    error: str | None = None
    comm_peer: int | None = None
    ended_by_launcher: bool = False
    seen_dead_at: float = 0.0

    @property
    def died(self) -> bool:
        """It ended without reporting: ``os._exit``, ``sys.exit``, a signal, exit status 75 of its own."""
        return (self.exit_code is not None and self.state.outcome == RUNNING
                and self.error is None and not self.ended_by_launcher)

    @property
    def computing(self) -> bool:
        """Inside an action and not waiting for anyone (the state a hung rank is in)."""
        return (self.state.outcome in (RUNNING, STOPPED) and self.error is None
                and bool(self.state.in_action) and self.state.waiting_on == NOT_WAITING)


def _hung(outcomes: Sequence[RankOutcome], now: float) -> RankOutcome | None:
    """The rank at the end of the wait-for chain of the ranks whose receives failed, if computing."""
    by_rank = {o.rank: o for o in outcomes}
    for start in outcomes:
        peer, seen = start.comm_peer, set()
        while peer is not None and peer >= 0 and peer in by_rank and peer not in seen:
            seen.add(peer)
            target = by_rank[peer]
            if target.computing:
                return target
            peer = target.state.waiting_on if target.error is None else None
    computing = [o for o in outcomes if o.computing]
    if any(o.comm_peer is not None for o in outcomes) and computing:
        return min(computing, key=lambda o: o.state.since)  # the one stuck longest
    return None


def explain(outcomes: Sequence[RankOutcome], *, timeout: float, hung_rank: int | None = None,
            now: float | None = None) -> str:
    """The one-line failure report: the culprit first, then what the others were doing.

    The culprit is, in this order: a rank that died (its exit status or signal and
    its last action); a rank whose own code raised; a rank that hung (``hung_rank``,
    or the end of the wait-for chain of the failed receives: computing one action
    while its peers waited for it); else the first failed receive.

    Args:
        outcomes: every rank's :class:`RankOutcome`.
        timeout: seconds of the run's timeout, quoted for a hang.
        hung_rank: a rank the launcher itself found stuck in one action past ``timeout``.
        now: monotonic seconds (default: now), for how long a hung rank was stuck.
    """
    now = time.monotonic() if now is None else now
    by_rank = {o.rank: o for o in outcomes}
    culprit: RankOutcome | None = None
    headline = ""
    dead = sorted((o for o in outcomes if o.died), key=lambda o: (o.seen_dead_at, o.rank))
    raised = [o for o in outcomes if o.error is not None and o.comm_peer is None]
    if dead:
        culprit = dead[0]
        headline = (f"rank {culprit.rank} died with {describe_exit(culprit.exit_code or 0)} "
                    f"in {_where_of(culprit.state)}")
    elif raised:
        culprit = raised[0]
        headline = str(culprit.error)
    else:
        culprit = by_rank.get(hung_rank) if hung_rank is not None else _hung(outcomes, now)
        if culprit is not None:
            stuck = (culprit.state.ended or now) - culprit.state.since
            headline = (f"rank {culprit.rank} hung in {_where_of(culprit.state)}: no progress for "
                        f"{stuck:.1f} s (timeout {timeout:g} s)")
        else:
            failed = [o for o in outcomes if o.error is not None]
            if failed:
                culprit = failed[0]
                headline = str(culprit.error)
    if culprit is None:
        return "a rank stopped without a result"
    others = [o for o in outcomes if o is not culprit]
    then = [str(o.error) for o in others if o.error is not None and o.error != headline]
    then += [f"rank {o.rank} died with {describe_exit(o.exit_code or 0)} in {_where_of(o.state)}"
             for o in others if o.died]
    stopped = [f"rank {o.rank} in {_where_of(o.state)}" for o in others
               if o.error is None and not o.died and o.state.outcome != FINISHED]
    message = "; then ".join([headline, *then])
    if stopped:
        message += " (stopped: " + ", ".join(stopped) + ")"
    return message
