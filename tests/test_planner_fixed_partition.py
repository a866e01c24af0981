"""``plan --partition``: the planner evaluates only the given layers per stage (issue 19, fixes the check found).

Library first (:func:`pipeplan.planner.search` and
:class:`~pipeplan.planner.SearchSpace` take ``partition``), then the CLI, which
parses with :func:`pipeplan.partition.choice.parse_partition` and calls.
"""

from __future__ import annotations

import json

import pytest

from pipeplan.errors import InfeasiblePlanError, InvalidInputError
from pipeplan.layers import LayerProfile
from pipeplan.partition import even_split
from pipeplan.planner import Cluster, SearchOptions, SearchSpace, Workload, search

LAYERS = 14


@pytest.fixture
def workload() -> Workload:
    """A dumbbell: a heavy first block, 12 decoder layers, a head (ms, bytes)."""
    profile = LayerProfile([30.0] + [2.0] * 12 + [10.0], params=[4e8] + [2e8] * 12 + [1e8],
                           activation_bytes=[3e9] + [1e9] * 12 + [5e8])
    return Workload.from_profile(profile)


@pytest.fixture
def profile_path(tmp_path, workload) -> str:
    path = tmp_path / "dumbbell.json"
    workload.profile(1).to_file(str(path))
    return str(path)


def test_given_counts_are_the_only_partition(workload):
    counts = (2, 4, 4, 4)
    result = search(workload, Cluster.of("h100-80g", 4), 16, SearchOptions(partition=counts, memory_capacity=60e9))
    assert result.plans and all(plan.layers_per_stage == counts for plan in result.plans)
    stage_counts = {plan.num_stages for plan in result.plans}
    assert stage_counts == {4}
    # the configurations of other stage counts are left out, each with why
    skipped = [r for r in result.rejected if "the partition has 4 stages" in r.reason]
    assert skipped and all(r.config.num_stages != 4 for r in skipped)
    # pp = 2 with two chunks a rank has 4 stages too: the counts apply there
    assert any(plan.pp == 2 and plan.virtual_stages == 2 for plan in result.plans)


def test_solved_partition_differs_from_the_fixed_one(workload):
    """Without ``partition`` the search moves layers off the heavy first stage; with it, it cannot."""
    solved = search(workload, Cluster.of("h100-80g", 4), 16, SearchOptions(pp=4, memory_capacity=60e9))
    fixed = search(workload, Cluster.of("h100-80g", 4), 16,
                   SearchOptions(pp=4, memory_capacity=60e9, partition=(2, 4, 4, 4)))
    assert solved.best.layers_per_stage != (2, 4, 4, 4)
    assert fixed.best.step_time >= solved.best.step_time * (1 - 1e-9)


def test_even_gives_each_configuration_its_even_split(workload):
    result = search(workload, Cluster.of("h100-80g", 4), 16, SearchOptions(partition="even", memory_capacity=60e9))
    for plan in result.plans:
        assert plan.layers_per_stage == even_split(LAYERS, plan.num_stages)


def test_auto_is_the_search_own_partition(workload):
    cluster = Cluster.of("h100-80g", 4)
    auto = search(workload, cluster, 16, SearchOptions(partition="auto", memory_capacity=60e9, top=3))
    plain = search(workload, cluster, 16, SearchOptions(memory_capacity=60e9, top=3))
    assert [p.layers_per_stage for p in auto.plans] == [p.layers_per_stage for p in plain.plans]


def test_recompute_still_relaxes_on_a_fixed_partition(workload):
    """A fixed partition over memory without recompute: the search recomputes where it must, on those counts."""
    plain = workload.profile(1)
    lighter = {mode: LayerProfile(plain.forward, [b + f for b, f in zip(plain.backward, plain.forward)], plain.weight,
                                  params=plain.params, activation_bytes=[a * share for a in plain.activation_bytes])
               for mode, share in (("selective", 0.5), ("full", 0.1))}
    with_modes = Workload(lambda b, mode: lighter.get(mode, plain), micro_batch_sizes=(1,),
                          recompute_modes=("none", "selective", "full"))
    counts = (2, 4, 4, 4)
    cluster = Cluster.of("h100-80g", 4)
    with pytest.raises(InfeasiblePlanError):
        search(workload, cluster, 16, SearchOptions(pp=4, schedules=["1f1b"], partition=counts, memory_capacity=20e9))
    result = search(with_modes, cluster, 16,
                    SearchOptions(pp=4, schedules=["1f1b"], partition=counts, memory_capacity=20e9))
    assert result.best.layers_per_stage == counts and result.best.fits
    assert set(result.best.recompute) != {"none"}


@pytest.mark.parametrize(("partition", "message"), [
    ((3, 3), "adding up to the model's 14 layers"),
    ((0, 7, 7), "counts >= 1"),
    ("thirds", "'auto', 'even' or layer counts"),
    ((1,) * 12 + (2,), "partition has 13 stages but no configuration"),
])
def test_bad_partitions(workload, partition, message):
    with pytest.raises(InvalidInputError, match=message):
        search(workload, Cluster.of("h100-80g", 4), 16, SearchOptions(partition=partition))


def test_space_partition_for():
    space = SearchSpace(num_gpus=4, global_batch=16, num_layers=LAYERS, partition="even")
    config = space.configs()[0]
    assert space.partition_for(config) == even_split(LAYERS, config.num_stages)
    assert space.skipped() == []
    fixed = SearchSpace(num_gpus=4, global_batch=16, num_layers=LAYERS, partition=[7, 7])
    assert {c.num_stages for c in fixed.configs()} == {2}
    assert {c.num_stages for c, _ in fixed.skipped()} and 2 not in {c.num_stages for c, _ in fixed.skipped()}
    assert SearchSpace(num_gpus=4, global_batch=16, num_layers=LAYERS).partition_for(config) is None


# --------------------------------------------------------------------------- CLI
def _plan(profile_path: str, *extra: str) -> list[str]:
    return ["plan", "--profile", profile_path, "--gpus", "4", "--memory", "60GB", "--global-batch", "16", *extra]


def test_cli_partition(run_cli, profile_path):
    status, out, err = run_cli(*_plan(profile_path, "--partition", "2,4,4,4", "--json"))
    assert status == 0, err
    payload = json.loads(out)
    assert payload["plans"] and all(p["layers_per_stage"] == [2, 4, 4, 4] for p in payload["plans"])
    status, out, err = run_cli(*_plan(profile_path, "--partition", "even", "--json"))
    assert status == 0, err
    for plan in json.loads(out)["plans"]:
        assert plan["layers_per_stage"] == list(even_split(LAYERS, len(plan["layers_per_stage"])))
    status, out, err = run_cli(*_plan(profile_path, "--partition", "2,4,4,4", "--pp", "4"))
    assert status == 0, err
    assert "2,4,4,4" in out


@pytest.mark.parametrize(("value", "message"), [
    ("x,2", "--partition must be 'auto', 'even' or numbers"),
    ("3,3", "adding up to the model's 14 layers"),
    ("1,1,1,1,1,1,1,1,1,1,1,1,2", "partition has 13 stages but no configuration"),
])
def test_cli_bad_partition(run_cli, profile_path, value, message):
    status, out, err = run_cli(*_plan(profile_path, "--partition", value))
    assert status == 2 and message in err and err.count("\n") == 1 and "Traceback" not in err


def test_cli_partition_that_fits_nowhere(run_cli, profile_path):
    """Every configuration the counts apply to is over memory: one line, exit 2."""
    status, _, err = run_cli(*_plan(profile_path, "--partition", "13,1", "--memory", "20GB", "--pp", "2"))
    assert status == 2 and err.count("\n") == 1 and "no plan fits" in err
