"""Argument helpers shared by the verbs: number lists, sizes, output files, progress.

    from pipeplan.cli._common import float_list, progress
    float_list("--forward")("30,10,10,20")   # [30.0, 10.0, 10.0, 20.0]
    with progress(3, "simulating") as advance:  # a bar on stderr once the work passes ~1 s
        advance(1, "building the schedule")
"""

from __future__ import annotations

import argparse
import difflib
import os
import json
import math
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from rich.console import Console

from .._files import check_output_path
from ..errors import InvalidInputError

__all__ = [
    "float_list",
    "memory_size",
    "name_choice",
    "positive",
    "byte_size",
    "default_microbatches",
    "renamed_flag",
    "print_json",
    "make_console",
    "require_torch",
    "check_scaled",
    "refuse_unless",
    "text_width",
    "gantt_width",
    "output_path",
    "report_written",
    "write_machine_text",
    "progress",
]

def float_list(field: str) -> Callable[[str], list[float]]:
    """An argparse type for comma-separated numbers, naming ``field`` on error."""

    def parse(text: str) -> list[float]:
        parts = text.split(",")
        for index, part in enumerate(parts):
            if not part.strip():  # numbered from 0, as the stages they stand for
                raise argparse.ArgumentTypeError(
                    f"{field}[{index}] is empty in {text!r} ({len(parts)} entries, from 0); give one number per "
                    "entry, like 30,10,10,20"
                )
        try:
            return [float(part) for part in parts]
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{field} must be comma-separated numbers like 30,10,10,20, got {text!r}"
            ) from None

    return parse


def byte_size(flag: str, *, require_unit: bool = False) -> Callable[[str], float]:
    """An argparse type for a size in bytes, bare (``1e9``) or with a unit (``200MB``, ``2GiB``), naming ``flag``.

    ``require_unit`` refuses a bare number (:func:`memory_size`).
    """
    from .. import units

    return units.argparse_type(units.parse_bytes, flag, require_unit=require_unit)


def name_choice(flag: str, names: Callable[[], Sequence[str]]) -> Callable[[str], str]:
    """An argparse type for one of ``names()`` (presets, GPUs): a wrong name is one line naming the closest.

    ``--gpu h100`` → ``--gpu 'h100' is not one of a100-40g, ..., h100-80g, ... (did you mean h100-80g?)``.
    """

    def parse(text: str) -> str:
        known = list(names())
        if text in known:
            return text
        close = [name for name in known if name.startswith(text)][:2] or \
            difflib.get_close_matches(text, known, n=1, cutoff=0.5)
        hint = f" (did you mean {' or '.join(close)}?)" if close else ""
        raise argparse.ArgumentTypeError(f"{flag} {text!r} is not one of {', '.join(known)}{hint}")

    return parse


def positive(flag: str, kind: Callable[[str], Any] = int) -> Callable[[str], Any]:
    """An argparse type for a number > 0 (``int`` or ``float``), naming ``flag``: ``--gpus must be >= 1, got 0``."""

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag} must be a{'n integer' if kind is int else ' number'}, "
                                             f"got {text!r}") from None
        if not (value > 0 and math.isfinite(value)):
            raise argparse.ArgumentTypeError(f"{flag} must be {'>= 1' if kind is int else '> 0'}, got {text}")
        return value

    return parse


def memory_size(flag: str) -> Callable[[str], float]:
    """An argparse type for a memory capacity: a size with its unit (``80GiB``, ``80GB``); a bare number is refused."""
    return byte_size(flag, require_unit=True)


def renamed_flag(parser: Any, old: str, new: str, meaning: str) -> None:
    """Refuse ``old`` (a flag this verb renamed) with one line naming ``new``; hidden from ``--help``.

    Not an alias: the old spelling does nothing but say where the flag went.
    """

    class Renamed(argparse.Action):
        def __call__(self, parser: Any, namespace: Any, values: Any, option_string: str | None = None) -> None:
            raise argparse.ArgumentError(self, f"was renamed {new} ({meaning})")

    parser.add_argument(old, nargs="?", action=Renamed, help=argparse.SUPPRESS)


def default_microbatches(given: int | None, pipeline_ranks: int, *, batch_size: int | None = None,
                         multiple: int = 1) -> int:
    """``-m`` as given, else the one default of every verb: **2 × the pipeline ranks**.

    ``batch_size`` (examples per step, ``run``/``profile``) caps the default, since every
    microbatch holds at least one example; ``multiple`` rounds it up (dual-rate: whole frames).
    """
    if given is not None:
        return int(given)
    micro = 2 * max(1, pipeline_ranks)
    micro = -(-micro // multiple) * multiple
    return micro if batch_size is None else max(1, min(micro, batch_size))


def check_scaled(flag: str, value: float | None, factor: float, why: str) -> None:
    """Raise naming ``flag`` when ``value × factor`` (what the step adds up) overflows floating point."""
    if value is not None and not math.isfinite(value * factor):
        raise InvalidInputError(
            f"{flag} = {value:g} is too large: {why} (× {factor:g}) overflows floating point; "
            "rescale (e.g. seconds instead of ms)"
        )


def refuse_unless(applies: bool, flag: str, reason: str) -> None:
    """Raise the one-line error for a flag given where it does nothing: ``--steps does not apply: ...``."""
    if not applies:
        raise InvalidInputError(f"{flag} does not apply {reason}")


#: The text Gantt's width when no ``--width`` is given and the terminal is wide enough, characters.
GANTT_WIDTH = 100


def gantt_width(columns: int, ranks: int = 1000) -> int:
    """Time columns for a text Gantt of ``ranks`` ranks that fits ``columns`` characters.

    :data:`GANTT_WIDTH` at most; the rank label (``rank 999``) and the two bars take the
    rest (at least 10 time columns, however narrow the terminal).
    """
    return max(10, min(GANTT_WIDTH, columns - len(f"rank {ranks - 1} |") - 1))


def text_width(args: argparse.Namespace) -> int:
    """Check ``--width`` (refused with ``--json``, which draws no Gantt) and set its default; returns it.

    The default is :data:`GANTT_WIDTH` (100) or, on a narrower terminal (``COLUMNS`` where
    output is piped), what keeps each chart line within it (:func:`gantt_width`).

    Whether a Gantt that wide fits is :func:`pipeplan.limits.check_gantt_size`'s,
    once the caller knows its ranks.
    """
    from .._validation import positive_int

    if getattr(args, "json", False):
        refuse_unless(args.width is None, "--width", "with --json (it sets the text Gantt's width)")
    args.width = positive_int("--width", gantt_width(make_console().width) if args.width is None else args.width)
    return int(args.width)


def output_path(path: str | None, flag: str) -> str | None:
    """Check before any work that ``path`` (a ``--plot``/``--trace`` file) can be written, a plot in a format it has."""
    if path is not None:
        if flag == "--plot":
            from ..viz.plot import PLOT_FORMATS

            if os.path.splitext(path)[1].lower() not in PLOT_FORMATS:
                raise InvalidInputError(f"--plot {path!r} must end in {', '.join(PLOT_FORMATS)} "
                                        "(the extension picks the format)")
        check_output_path(path, flag)
    return path


def report_written(path: str) -> None:
    """Tell the user where an output file went (on stderr, so ``--json`` stays clean)."""
    print(f"wrote {path}", file=sys.stderr)


def write_machine_text(text: str) -> None:
    """Write machine text (flags, CSV, config files) on stdout as it is: never through rich, never wrapped.

    It ends in exactly one newline, so a CSV gains no blank row.
    """
    sys.stdout.write(text.rstrip("\n") + "\n")
    sys.stdout.flush()


@contextmanager
def progress(
    total: float, description: str, *, delay: float = 1.0, console: Console | None = None
) -> Iterator[Callable[..., None]]:
    """A rich progress bar on stderr that appears only once the work has run ``delay`` seconds.

    Yields ``advance(amount, description=None)``; ``total`` is in the same units
    (actions, say). Nothing is drawn when stderr is not a terminal, so pipes and
    ``--json`` output stay clean.
    """
    console = console or Console(stderr=True)
    if not console.is_terminal or not total > 0:
        yield lambda amount, description=None: None
        return
    from rich.progress import BarColumn, Progress, SpinnerColumn, TaskProgressColumn, TextColumn, TimeElapsedColumn

    bar = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), TaskProgressColumn(),
                   TimeElapsedColumn(), console=console, transient=True)
    task = bar.add_task(description, total=total)
    lock = threading.Lock()
    finished = False

    def start() -> None:
        with lock:
            if not finished:
                bar.start()

    timer = threading.Timer(delay, start)
    timer.daemon = True
    timer.start()

    def advance(amount: float, description: str | None = None) -> None:
        bar.update(task, advance=amount, description=description)

    try:
        yield advance
    finally:
        with lock:
            finished = True
            timer.cancel()
            bar.stop()


def print_json(payload: Any) -> None:
    """Write ``payload`` as indented JSON on stdout."""
    json.dump(payload, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")


def make_console() -> Console:
    """A rich console that does not wrap wide Gantt charts when output is piped.

    A terminal keeps its own width; a pipe or file gets ``COLUMNS`` or 200 columns.
    """
    console = Console()
    if not console.is_terminal:
        console = Console(width=int(os.environ.get("COLUMNS", "200")))
    return console


def require_torch(what: str) -> None:
    """Raise a one-line :class:`InvalidInputError` when torch cannot be imported.

    Planning and simulation need numpy only; ``what`` (e.g. ``"pipeplan run"``)
    runs real modules and names itself in the message.
    """
    try:
        import torch  # noqa: F401
    except ImportError:
        from ..errors import InvalidInputError

        raise InvalidInputError(
            f"{what} needs PyTorch, which is not installed: pip install 'pipeplan[torch]' "
            "(any torch >= 2.2, CPU or CUDA build)"
        ) from None
