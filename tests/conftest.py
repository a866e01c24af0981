"""Shared test helpers: hypothesis profiles and the ``run_cli`` fixture.

The hypothesis profile is ``$HYPOTHESIS_PROFILE`` when set (``.ci/run`` sets
``ci``: derandomised, so a CI failure replays on any machine), else ``ci`` when
``$CI`` is set, else ``default``::

    HYPOTHESIS_PROFILE=ci .venv/bin/python -m pytest -q -n 2 --dist loadfile    # what .ci/run runs
"""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, settings

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
    """``$PIPEPLAN_TEST_CLOCK=FILE``: time every test into FILE (tests/_test_clock.py)."""
    if os.environ.get("PIPEPLAN_TEST_CLOCK"):
        from _test_clock import SuiteClock

        config.pluginmanager.register(SuiteClock(os.environ["PIPEPLAN_TEST_CLOCK"]), "pipeplan-test-clock")
