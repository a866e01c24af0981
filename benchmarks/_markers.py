"""The one convention for tables a benchmark writes into the docs (shared by every benchmark).

A table lives between ``<!-- name:start -->`` and ``<!-- name:end -->`` in a docs page;
``python benchmarks/X.py`` prints it and ``python benchmarks/X.py --write`` rewrites it
(:func:`add_write_flag`, :func:`replace_between`). Two kinds of block:

* **computed** (simulator, planner, partitioner, cost model only): the block is exactly
  what the code computes, with no date or elapsed time in it, its last line is
  :func:`computed_line`, and tests/test_docs_tables.py recomputes it and asserts the docs
  text equals it;
* **measured** (CPU seconds, resident memory, multi-process runs): its last line is
  :func:`measured_line`, ``Measured 2026-12-02 on x86_64, ...: `python benchmarks/X.py --write`.``
  (date, machine note, exact command), which the test checks for; the values are not checked.

    from _markers import replace_between, read_between
    replace_between("docs/simulator.md", "simulate-speed", table_markdown)
    assert read_between("docs/simulator.md", "simulate-speed") == table_markdown
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path

__all__ = ["print_or_write", "add_write_flag", "read_between", "replace_between", "computed_line", "measured_line", "MEASURED",
           "mask_columns", "run_command", "signed"]

#: The last line of a measured block: its date, the machine, then the command in backquotes.
MEASURED = re.compile(r"^Measured (\d{4}-\d{2}-\d{2})(?: \d{2}:\d{2} UTC)? on (.+?): "
                      r"`(python benchmarks/\S+\.py[^`]*)`(?:; (.+))?\.$")


def _markers(name: str) -> tuple[str, str]:
    return f"<!-- {name}:start -->", f"<!-- {name}:end -->"


def replace_between(path: str | Path, name: str, body: str) -> None:
    """Put ``body`` between ``<!-- name:start -->`` and ``<!-- name:end -->`` in ``path``.

    The markers are appended to the file if missing. Says ``wrote PATH (name)`` on stderr.
    """
    path = Path(path)
    start, end = _markers(name)
    text = path.read_text() if path.exists() else ""
    block = f"{start}\n{body.rstrip()}\n{end}"
    if start in text and end in text:
        head, rest = text.split(start, 1)
        _, tail = rest.split(end, 1)
        text = head + block + tail
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    path.write_text(text)
    print(f"wrote {path} ({name})", file=sys.stderr)


def read_between(path: str | Path, name: str) -> str:
    """The text between the ``name`` markers of ``path`` (without the markers; trailing blanks dropped).

    Raises:
        KeyError: ``path`` has no such pair of markers.
    """
    text = Path(path).read_text()
    start, end = _markers(name)
    if text.count(start) != 1 or text.count(end) != 1 or text.index(start) > text.index(end):
        raise KeyError(f"{Path(path).name} has no single {start} ... {end} pair")
    return text.split(start, 1)[1].split(end, 1)[0].strip("\n").rstrip()


def add_write_flag(parser: argparse.ArgumentParser, doc: str | Path) -> None:
    """``--write`` (record the tables in ``doc``) and ``--no-write`` (print only: the default)."""
    name = Path(doc).name
    parser.add_argument("--write", dest="write", action="store_true", default=False,
                        help=f"record the tables in docs/{name} (default: print only)")
    parser.add_argument("--no-write", dest="write", action="store_false", help="print only (the default)")


def print_or_write(doc: str | Path, name: str, block: Callable[[], str], description: str,
                   argv: list[str] | None = None) -> int:
    """The ``main`` of a benchmark that computes one block: print it, and with ``--write`` put it in ``doc``."""
    parser = argparse.ArgumentParser(description=description)
    add_write_flag(parser, doc)
    args = parser.parse_args(argv)
    body = block()
    print(body)
    if args.write:
        replace_between(doc, name, body)
    return 0


def computed_line(command: str) -> str:
    """The line under a computed table: the command that rewrites it and the test that checks it."""
    return f"Computed by `{command}`; tests/test_docs_tables.py checks it against the code."


def run_command(argv: list[str] | None = None) -> str:
    """The command this benchmark runs as: ``python benchmarks/X.py`` and its arguments (default ``sys.argv``)."""
    args = sys.argv if argv is None else argv
    return " ".join([f"python benchmarks/{Path(args[0]).name}", *args[1:]])


def measured_line(command: str, *, machine: str = "", when: float | None = None, clock: bool = False,
                  checked: str = "") -> str:
    """The line under a measured table: ``Measured DATE on MACHINE: `COMMAND`.``

    Args:
        command: the exact command that rewrites the block (``python benchmarks/X.py --write``).
        machine: the machine note; default architecture, cores and Python, and a note that the
            machine is shared when its load average is 1 or more.
        when: seconds since the epoch (default now); ``clock`` adds the UTC hour and minute.
        checked: for a table with computed columns too, which of them tests/test_docs_tables.py
            checks (``"every column but CPU s"``).
    """
    stamp = time.gmtime(time.time() if when is None else when)
    date = time.strftime("%Y-%m-%d %H:%M UTC" if clock else "%Y-%m-%d", stamp)
    if not machine:
        load = os.getloadavg()[0]
        machine = (f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
                   + (f", load average {load:.1f} (shared)" if load >= 1 else ""))
    check = f"; tests/test_docs_tables.py checks {checked} against the code" if checked else ""
    return f"Measured {date} on {machine}: `{command}`{check}."


def mask_columns(text: str, headers: set[str] | frozenset[str]) -> str:
    """``text`` with every cell under a header in ``headers`` replaced by ``…`` (measured columns).

    A markdown table's header row is the row above its ``|---|`` row.
    """
    lines = text.split("\n")
    masked: set[int] = set()
    for index, line in enumerate(lines):
        cells = line.split("|")
        if line.startswith("|---") or line.startswith("|:--"):
            header = lines[index - 1].split("|") if index else []
            masked = {i for i, cell in enumerate(header) if cell.strip() in headers}
        elif not line.startswith("|"):
            masked = set()
        elif masked and len(cells) > max(masked):
            lines[index] = "|".join(" … " if i in masked else cell for i, cell in enumerate(cells))
    return "\n".join(lines)


def signed(value: float, spec: str) -> str:
    """``format(value, spec)``, but a value that rounds to zero prints as zero: never ``-0.0%``."""
    text = format(value, spec)
    if text.startswith("-") and not any(digit in text for digit in "123456789"):
        return format(0.0, spec)
    return text
