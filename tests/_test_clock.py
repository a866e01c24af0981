"""Per-test wall and CPU seconds, children included, for finding where the suite's time goes.

Off unless ``$PIPEPLAN_TEST_CLOCK`` names a file; then each test phase appends one JSON line::

    PIPEPLAN_TEST_CLOCK=/tmp/clock.jsonl python -m pytest -q
    python tests/_test_clock.py /tmp/clock.jsonl      # the top 30 by CPU seconds, and the totals

A line holds the test id, the phase (setup, call, teardown), the xdist worker (``main`` without
xdist), wall seconds, this process's CPU seconds (user + system) and its reaped children's CPU
seconds (``RUSAGE_CHILDREN``: subprocesses and spawned ranks, counted once they are waited for).
Wall minus both CPU figures is time the test waited (sleeps, timeouts, a core held by someone else).
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import pytest


def _cpu(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


class SuiteClock:
    """The pytest plugin: time each phase of each test and append it to ``path``."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.worker = os.environ.get("PYTEST_XDIST_WORKER", "main")

    def _timed(self, item: Any, phase: str) -> Iterator[None]:
        wall, own, children = time.perf_counter(), _cpu(resource.RUSAGE_SELF), _cpu(resource.RUSAGE_CHILDREN)
        yield
        record = {"test": item.nodeid, "phase": phase, "worker": self.worker,
                  "wall": time.perf_counter() - wall, "cpu": _cpu(resource.RUSAGE_SELF) - own,
                  "children": _cpu(resource.RUSAGE_CHILDREN) - children}
        with open(self.path, "a", encoding="utf-8") as out:
            out.write(json.dumps(record) + "\n")

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_setup(self, item: Any) -> Iterator[None]:
        yield from self._timed(item, "setup")

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item: Any) -> Iterator[None]:
        yield from self._timed(item, "call")

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_teardown(self, item: Any) -> Iterator[None]:
        yield from self._timed(item, "teardown")


def summary(path: str, top: int = 30) -> str:
    """The ``top`` tests by CPU seconds (own + children) and the totals, as text."""
    per_test: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
    with open(path, encoding="utf-8") as lines:
        for line in lines:
            record = json.loads(line)
            row = per_test[record["test"]]
            row[0] += record["wall"]
            row[1] += record["cpu"]
            row[2] += record["children"]
    rows = sorted(per_test.items(), key=lambda item: -(item[1][1] + item[1][2]))
    out = [f"{'wall s':>7} {'own cpu':>7} {'child cpu':>9} {'idle':>6}  test"]
    for name, (wall, own, children) in rows[:top]:
        out.append(f"{wall:7.1f} {own:7.1f} {children:9.1f} {max(0.0, wall - own - children):6.1f}  {name}")
    wall, own, children = (sum(row[i] for row in per_test.values()) for i in range(3))
    idle = sum(max(0.0, w - o - c) for w, o, c in per_test.values())
    out.append(f"{len(per_test)} tests: wall {wall:.1f} s, own CPU {own:.1f} s, children's CPU {children:.1f} s, "
               f"idle {idle:.1f} s")
    return "\n".join(out)


if __name__ == "__main__":
    print(summary(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 30))
