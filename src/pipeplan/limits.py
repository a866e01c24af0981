"""How large a schedule, simulation or chart this machine can hold, checked up front.

A size that cannot fit in memory is refused before any work starts, with one line
that gives the size, the estimate and the memory available::

    >>> from pipeplan.limits import SCHEDULE_BYTES_PER_ACTION, check_actions_size
    >>> check_actions_size(num_stages=4, num_microbatches=10**10, backward="full",
    ...                    bytes_per_action=SCHEDULE_BYTES_PER_ACTION)
    Traceback (most recent call last):
    pipeplan.errors.InvalidInputError: num_stages = 4 × num_microbatches = 10000000000 × 2 action kinds
      = 8e+10 actions would need ~11.6 TiB of memory; this machine has ... available

Estimates are bytes per action (and per text-Gantt cell) measured by
``benchmarks/action_memory.py`` (peak resident-set growth; table in
docs/simulator.md), rounded up, times the action count ``stages × m × kinds``.
The limit is the memory available right now: ``MemAvailable`` in /proc/meminfo
(else ``sysconf`` available pages), capped by what the process's address-space
limit (``ulimit -v``) leaves; where none is known nothing is refused.
Everything below the limit runs in time proportional to its size.
"""

from __future__ import annotations

import os

from .errors import InvalidInputError

__all__ = [
    "SCHEDULE_BYTES_PER_ACTION",
    "SIMULATION_BYTES_PER_ACTION",
    "GANTT_BYTES_PER_CELL",
    "MAX_GANTT_WIDTH",
    "MAX_REPEATS",
    "MAX_STEPS",
    "MAX_GPUS",
    "MAX_GLOBAL_BATCH",
    "MAX_LOCAL_PROCESSES",
    "MAX_LOCAL_BATCH",
    "REPORT_STEP_ACTIONS",
    "ITERATION_BYTES",
    "ITERATION_BYTES_PER_RANK",
    "available_memory",
    "action_count",
    "check_actions_size",
    "check_simulation_size",
    "check_gantt_size",
    "check_iterations_size",
]

#: A built schedule (its Action tuples and orders): measured 113–132 B per action.
SCHEDULE_BYTES_PER_ACTION = 160
#: Schedule + simulation + Timeline + the CLI's views: measured 653–898 B per action.
SIMULATION_BYTES_PER_ACTION = 1000
#: One character of a text Gantt (cell lists, joined lines, printed unwrapped): measured 8.5 B.
GANTT_BYTES_PER_CELL = 10

#: The widest text Gantt drawn: wider than any terminal or page by far (a 4K screen shows
#: about 400 columns); beyond it drawing only costs time (``--width 1e8`` took 26 s).
MAX_GANTT_WIDTH = 10_000

#: The most timed (or warm-up) runs a measurement takes: more only lengthen it, by hours.
MAX_REPEATS = 1_000

#: The most steps a run executes (warm-up and measured alike).
MAX_STEPS = 10_000

#: The most GPUs a plan is searched for: ~10x the largest clusters trained on (about 10^5 GPUs).
#: Above it a count is a typo, and the search's divisor and layout loops grow with it (``plan --gpus 1e30``
#: never ended).
MAX_GPUS = 2**20
#: The largest global batch (samples per optimizer step) a plan is searched for: far above any
#: published recipe (thousands to a few million tokens' worth of examples); ``plan --global-batch 1e30``
#: never ended.
MAX_GLOBAL_BATCH = 2**20
#: The most processes a verb starts on this machine (``run``/``profile`` ``--nproc``): each one
#: imports torch (~0.3 GB); past it a count is a typo, not a machine.
MAX_LOCAL_PROCESSES = 1024
#: The most examples per step a verb runs on this machine's built-in models (``run``/``profile``
#: ``--batch-size``), and so the most microbatches: more only lengthen each step.
MAX_LOCAL_BATCH = 2**16

#: The largest step a verb simulates only to report it (``pipeplan partition``'s step and bubble):
#: ~0.5 GB and ~2.5 s at the simulator's ~480 B and ~2.5 µs per action. Past it the report says
#: the step was not simulated; ``partition --layers 1000 --stages 1000`` (m = 2000: 4e6 actions)
#: took 2 GB and 10 s for a trivial partition before.
REPORT_STEP_ACTIONS = 1_000_000

#: Each simulated iteration keeps its ranks' end times: measured 285 B per iteration at 4 ranks
#: and 1,641 B at 32 (peak resident-set growth, 1f1b, ``simulate(..., iterations=n)``), i.e.
#: ~91 B + ~48 B per rank; rounded up.
ITERATION_BYTES = 100
ITERATION_BYTES_PER_RANK = 80

_KINDS = {"none": 1, "full": 2, "split": 3}


def available_memory() -> float | None:
    """Bytes of memory available to a new allocation now, or ``None`` when unknown.

    The machine's available memory, and no more than this process's address-space
    limit (``ulimit -v``) leaves.
    """
    machine = _machine_available()
    room = _address_space_room()
    if machine is None or room is None:
        return machine if room is None else room
    return min(machine, room)


def _machine_available() -> float | None:
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return float(line.split()[1]) * 1024  # the file counts KiB
    except (OSError, ValueError, IndexError):
        pass
    try:
        return float(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, ValueError, OSError):
        return None


def _address_space_room() -> float | None:
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
        if soft == resource.RLIM_INFINITY:
            return None
        with open("/proc/self/statm", encoding="ascii") as handle:
            used = int(handle.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        return float(max(0, soft - used))
    except (ImportError, OSError, ValueError, IndexError):
        return None


def action_count(num_stages: int, num_microbatches: int, backward: str = "split") -> int:
    """Actions a complete schedule holds: ``stages × m × kinds`` (F; F, B; or F, B, W)."""
    return num_stages * num_microbatches * _KINDS.get(backward, 3)


def _human(value: float) -> str:
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if size < 1024:
            return f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} EiB"


def _refuse_if_too_big(what: str, needed: float) -> None:
    available = available_memory()
    if available is not None and needed > available:
        raise InvalidInputError(
            f"{what} would need ~{_human(needed)} of memory; this machine has {_human(available)} available"
        )


def check_memory(what: str, needed_bytes: float) -> None:
    """Raise :class:`InvalidInputError` when ``what`` needs more than the memory available now.

    ``what`` names the input and how the estimate was made; the message adds both sizes.
    """
    _refuse_if_too_big(what, needed_bytes)


BUILTIN_LAYER_BYTES = 4 * (12 * 64**2 + 13 * 64)
"""fp32 weight bytes of one transformer block of the built-in models (hidden 64: 12·h² + 13·h)."""


def check_builtin_model_size(layers: int, processes: int) -> None:
    """Raise when a built-in model of ``layers`` blocks cannot fit: its weights and gradients,
    in the parent and in each of ``processes`` ranks, against the memory available now."""
    check_memory(
        f"--layers {layers} (the built-in model: {BUILTIN_LAYER_BYTES} bytes of weights per layer, "
        f"weights and gradients in {processes + 1} processes)",
        2.0 * layers * BUILTIN_LAYER_BYTES * (processes + 1),
    )


def check_actions_size(
    *,
    num_stages: int,
    num_microbatches: int,
    backward: str,
    bytes_per_action: int,
    names: tuple[str, str] = ("num_stages", "num_microbatches"),
) -> int:
    """Raise :class:`InvalidInputError` when a schedule of this size, at ``bytes_per_action``, cannot fit in memory.

    The schedule registry's :func:`pipeplan.schedules.check_schedule_size` picks ``bytes_per_action``
    for a schedule (its own build cost, else :data:`SCHEDULE_BYTES_PER_ACTION` or
    :data:`SIMULATION_BYTES_PER_ACTION`).

    Args:
        num_stages, num_microbatches: the size (validated integers >= 1).
        backward: ``"full"``, ``"split"`` or ``"none"`` (how many action kinds).
        bytes_per_action: memory one action needs, bytes.
        names: how the message names the two sizes (the CLI passes its flags).

    Returns:
        The number of actions.
    """
    actions = action_count(num_stages, num_microbatches, backward)
    kinds = _KINDS.get(backward, 3)
    _refuse_if_too_big(
        f"{names[0]} = {num_stages} × {names[1]} = {num_microbatches} × {kinds} action "
        f"kind{'s' if kinds > 1 else ''} = {actions:.3g} actions",
        actions * bytes_per_action,
    )
    return actions


def check_simulation_size(num_actions: int) -> None:
    """Raise when simulating a schedule of ``num_actions`` actions cannot fit in memory."""
    extra = SIMULATION_BYTES_PER_ACTION - SCHEDULE_BYTES_PER_ACTION  # the schedule exists already
    _refuse_if_too_big(f"simulating {num_actions:.3g} actions", num_actions * extra)


def check_gantt_size(width: int, num_ranks: int, *, field: str = "width") -> None:
    """Raise when a text Gantt ``width`` columns wide for ``num_ranks`` ranks is wider than
    :data:`MAX_GANTT_WIDTH` or cannot fit in memory."""
    if width > MAX_GANTT_WIDTH:
        raise InvalidInputError(f"{field} must be <= {MAX_GANTT_WIDTH} columns, got {width} "
                                "(a text Gantt wider than that cannot be read; --plot draws a picture)")
    cells = (width + 1) * (num_ranks + 1)  # one line per rank and the time axis
    _refuse_if_too_big(f"{field} = {width} ({num_ranks} ranks: {cells:.3g} characters)",
                       cells * GANTT_BYTES_PER_CELL)


def check_iterations_size(iterations: int, num_ranks: int, *, field: str = "iterations") -> None:
    """Raise when simulating ``iterations`` steps of ``num_ranks`` ranks cannot fit in memory."""
    _refuse_if_too_big(f"{field} = {iterations} steps × {num_ranks} ranks",
                       iterations * (ITERATION_BYTES + ITERATION_BYTES_PER_RANK * num_ranks))
