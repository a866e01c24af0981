"""``benchmarks/dual_rate.py --quick``: the table, the findings and the closed-form check run end to end."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "dual_rate.py"


def _module():
    spec = importlib.util.spec_from_file_location("dual_rate_benchmark", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_quick_run_prints_the_table_and_the_findings():
    done = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--budget", "0.2"], capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert "| synchronous |" in done.stdout and "| frozen encoder |" in done.stdout
    assert "* Throughput: dual-rate trains" in done.stdout


def test_closed_form_check_agrees_with_the_simulator():
    from pipeplan.dualrate.runtime import DualRateCosts

    costs = DualRateCosts(vision=(2.0, 4.0, 0.5), vision_recompute_backward=6.0, vision_frozen_forward=1.8,
                          action=(0.25, 0.35, 0.3))
    rows = _module().closed_form_check(costs)
    assert len(rows) == 16
    for row in rows:
        assert row["simulated_samples_per_s"] == pytest.approx(row["closed_form_samples_per_s"], rel=1e-9)
