"""A search the budget stops says how much it examined and bounds what it did not (issue 30, item 7).

The budget counts CPU seconds; a budget of 1e-9 stops the search right after its
first plan, whatever the machine's load, so these checks count work, not time.
"""

from __future__ import annotations

from pipeplan.planner import Cluster, SearchOptions, Workload, search

from _planner_models import tiny_spec_workload


def _workload() -> tuple[Workload, Cluster]:
    return tiny_spec_workload()


def test_stopped_search_reports_examined_share_and_a_valid_bound() -> None:
    work, cluster = _workload()
    full = search(work, cluster, 64, SearchOptions(top=1))
    stopped = search(work, cluster, 64, SearchOptions(top=1, budget=1e-9))
    stats = stopped.stats
    assert full.stats.complete and not stats.complete
    assert stats.examined is not None and 0 < stats.examined < stats.candidates
    assert stats.examined_share == stats.examined / stats.candidates
    assert stats.unexamined_bound is not None
    # the best of the space is either among what the stopped search found, or no faster than the bound
    best = full.best.step_time
    assert best is not None and stopped.best.step_time is not None
    assert best >= min(stopped.best.step_time, stats.unexamined_bound) * (1 - 1e-9)
    keys = stopped.to_dict()["search"]
    assert keys["examined"] == stats.examined and keys["examined_share"] == stats.examined_share
    assert keys["unexamined_bound"] == stats.unexamined_bound


def test_complete_search_has_no_budget_keys() -> None:
    work, cluster = _workload()
    result = search(work, cluster, 64, SearchOptions(top=1))
    keys = result.to_dict()["search"]
    assert result.stats.examined_share == 1.0
    assert "examined" not in keys and "unexamined_bound" not in keys and "examined_share" not in keys
