"""Size limits: refused up front from the machine's memory, one line naming the size."""

from __future__ import annotations

import pytest

import pipeplan
from pipeplan import limits
from pipeplan.errors import InvalidInputError
from pipeplan.schedules import check_schedule_size


def test_available_memory_is_positive_here():
    available = limits.available_memory()
    assert available is not None and available > 0


def test_action_count_counts_kinds():
    assert limits.action_count(4, 8, "none") == 32
    assert limits.action_count(4, 8, "full") == 64
    assert limits.action_count(4, 8, "split") == 96


def test_a_schedule_past_memory_is_refused_with_its_size(monkeypatch):
    monkeypatch.setattr(limits, "available_memory", lambda: 1e9)
    with pytest.raises(InvalidInputError, match=r"num_microbatches = 10000000000 .* would need ~.* of memory; "
                                               r"this machine has 953.7 MiB available"):
        pipeplan.build_schedule("1f1b", num_stages=4, num_microbatches=10**10)


def test_the_limit_follows_the_memory_available(monkeypatch):
    """The same size passes or fails with the memory the machine reports, nothing else."""
    actions = limits.action_count(8, 1000, "full")
    monkeypatch.setattr(limits, "available_memory", lambda: actions * limits.SCHEDULE_BYTES_PER_ACTION * 1.01)
    assert pipeplan.build_schedule("1f1b", num_stages=8, num_microbatches=1000).num_actions == actions
    monkeypatch.setattr(limits, "available_memory", lambda: actions * limits.SCHEDULE_BYTES_PER_ACTION * 0.99)
    with pytest.raises(InvalidInputError, match="would need"):
        pipeplan.build_schedule("1f1b", num_stages=8, num_microbatches=1000)


def test_unknown_memory_refuses_nothing(monkeypatch):
    monkeypatch.setattr(limits, "available_memory", lambda: None)
    assert check_schedule_size("1f1b", num_stages=10**6, num_microbatches=10**6) == 3 * 10**12


def test_million_stages_is_refused_or_fits_on_this_machine():
    """The issue's build_schedule("1f1b", num_stages=10**6, num_microbatches=8): refused iff it cannot fit."""
    needed = limits.action_count(10**6, 8, "full") * limits.SCHEDULE_BYTES_PER_ACTION
    available = limits.available_memory()
    if available is not None and needed > available:
        with pytest.raises(InvalidInputError, match="would need"):
            pipeplan.build_schedule("1f1b", num_stages=10**6, num_microbatches=8)
    else:
        assert check_schedule_size("1f1b", num_stages=10**6, num_microbatches=8, backward="full") == 16 * 10**6


def test_simulate_and_text_gantt_check_their_sizes(monkeypatch):
    from pipeplan.viz import text_gantt

    schedule = pipeplan.build_schedule("1f1b", num_stages=4, num_microbatches=8)
    costs = pipeplan.StageCosts([30, 10, 10, 20])
    timeline = pipeplan.simulate(schedule, costs)
    monkeypatch.setattr(limits, "available_memory", lambda: 1000.0)
    with pytest.raises(InvalidInputError, match="simulating 64 actions would need"):
        pipeplan.simulate(schedule, costs)
    with pytest.raises(InvalidInputError, match="width = 100 .* would need"):
        text_gantt(timeline)


def test_iterations_past_memory_are_refused_before_simulating(monkeypatch):
    """``iterations=10**10`` used to run for hours; each step keeps its ranks' end times."""
    schedule = pipeplan.build_schedule("1f1b", num_stages=4, num_microbatches=8)
    costs = pipeplan.StageCosts([30, 10, 10, 20])
    per_step = limits.ITERATION_BYTES + 4 * limits.ITERATION_BYTES_PER_RANK
    monkeypatch.setattr(limits, "available_memory", lambda: 10**6)
    assert pipeplan.simulate(schedule, costs, iterations=10**6 // per_step - 100).iterations == 10**6 // per_step - 100
    with pytest.raises(InvalidInputError, match=r"iterations = 10000000000 steps × 4 ranks would need ~"):
        pipeplan.simulate(schedule, costs, iterations=10**10)


def test_adaptive_costs_more_per_action(monkeypatch):
    actions = limits.action_count(4, 100, "split")
    monkeypatch.setattr(limits, "available_memory", lambda: actions * limits.SIMULATION_BYTES_PER_ACTION * 1.5)
    check_schedule_size("zb-h1", num_stages=4, num_microbatches=100, simulated=True)
    with pytest.raises(InvalidInputError):
        check_schedule_size("adaptive", num_stages=4, num_microbatches=100)


def test_run_refuses_a_built_in_model_too_deep_for_memory_before_building_it(capsys):
    from pipeplan.cli import main

    assert main(["run", "--nproc", "2", "--layers", "10000000000"]) == 2
    error = capsys.readouterr().err.strip()
    assert error.count("\n") == 0 and "--layers 10000000000" in error and "would need" in error


def test_profile_refuses_a_built_in_model_too_deep_for_memory_before_building_it(capsys, tmp_path):
    from pipeplan.cli import main

    assert main(["profile", "--layers", "10000000000", "--out", str(tmp_path / "p.json")]) == 2
    error = capsys.readouterr().err.strip()
    assert error.count("\n") == 0 and "--layers 10000000000" in error and "would need" in error
