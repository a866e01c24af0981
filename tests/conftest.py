"""Shared test helpers: hypothesis profiles and the ``run_cli`` fixture."""

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
settings.load_profile("ci" if os.environ.get("CI") else "default")


@pytest.fixture
def run_cli(capsys: pytest.CaptureFixture[str]) -> Callable[..., tuple[int, str, str]]:
    """``run_cli("simulate", "--forward", "30,10", ...)`` runs ``pipeplan`` in-process.

    Returns ``(exit status, stdout, stderr)`` of that one call.
    """
    from pipeplan.cli import main  # imported here: some tests hide torch before pipeplan loads

    def run(*argv: str) -> tuple[int, str, str]:
        status = main(list(argv))
        captured = capsys.readouterr()
        return status, captured.out, captured.err

    return run
