"""Shared test helpers: hypothesis profiles and the ``run_cli`` fixture.

The hypothesis profile is ``$HYPOTHESIS_PROFILE`` when set (``.ci/run`` sets
``ci``: derandomised, so a CI failure replays on any machine), else ``ci`` when
``$CI`` is set, else ``default``::

    HYPOTHESIS_PROFILE=ci .venv/bin/python -m pytest -q -n 2 --dist loadfile    # what .ci/run runs
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

# One intra-op thread per test process and its subprocesses (torch's OpenMP pool, numpy's BLAS), unless the
# caller set one: the suite runs in two xdist workers on two cores, where a pool's threads wait for a core
# and a tiny op costs many times its work (tests/test_seed003.py: 10.5 CPU s on a loaded machine, 1.1 with
# one thread). Set before any test module imports torch; code that wants more threads sets them itself
# (pipeplan.runtime.spawn gives each rank threads_per_process).
for _variable in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")

settings.register_profile(
    "default", deadline=None, suppress_health_check=[HealthCheck.too_slow], max_examples=60
)
settings.register_profile("ci", deadline=None, suppress_health_check=[HealthCheck.too_slow], max_examples=60,
                          derandomize=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "default"))


@pytest.fixture
def run_cli(capsys: pytest.CaptureFixture[str]) -> Callable[..., tuple[int, str, str]]:
    """``run_cli("simulate", "--forward", "30,10", ...)`` runs ``pipeplan`` in-process.

    Returns ``(exit status, stdout, stderr)`` of that one call; a parser refusal (``SystemExit``)
    is its exit status, as the shell would see it.
    """
    from pipeplan.cli import main  # imported here: some tests hide torch before pipeplan loads

    def run(*argv: str) -> tuple[int, str, str]:
        try:
            status = main(list(argv))
        except SystemExit as exit_:  # the parser's one-line refusal (a bad flag or value): exit 2
            status = int(exit_.code or 0) if not isinstance(exit_.code, str) else 2
        captured = capsys.readouterr()
        return status, captured.out, captured.err

    return run


def pytest_configure(config: pytest.Config) -> None:
    """``$PIPEPLAN_TEST_CLOCK=FILE``: time every test into FILE (tests/_test_clock.py); in an xdist worker,
    the shell's COLUMNS and LINES (see :func:`pytest_configure_node`)."""
    terminal = getattr(config, "workerinput", {}).get("pipeplan_terminal")
    for name, value in (terminal or {}).items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    if os.environ.get("PIPEPLAN_TEST_CLOCK"):
        from _test_clock import SuiteClock

        config.pluginmanager.register(SuiteClock(os.environ["PIPEPLAN_TEST_CLOCK"]), "pipeplan-test-clock")


#: The terminal variables a worker must see as the user's shell set them. Python's ``readline``
#: (which pytest's capture plugin imports first thing, _readline_workaround) sets COLUMNS=80 and LINES=24 in the C environment of the
#: pytest process, though not in ``os.environ``; an xdist worker, started from that environment, would
#: see COLUMNS=80 in ``os.environ`` and every piped table (``make_console``: COLUMNS or 200) would wrap.
_TERMINAL_VARIABLES = ("COLUMNS", "LINES")


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """pytest-xdist, in the controller: hand each worker the shell's COLUMNS and LINES (or their absence)."""
    node.workerinput["pipeplan_terminal"] = {name: os.environ.get(name) for name in _TERMINAL_VARIABLES}
