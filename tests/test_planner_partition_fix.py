"""Issue 19, fixes the check found: the planner's memory meets ``simulate --profile``, and chunks balance ranks.

* A plan's activation peaks per rank are the ones ``simulate --profile`` (the
  path :func:`pipeplan.predict.predict` takes) gives for the same profile,
  partition and schedule: the planner's layouts carry the profile's
  ``weight_stash_bytes`` (a split backward frees the rest of a microbatch's
  activations at ``I``).

Relations only: the numbers come from the cost model, which is changing.
"""

from __future__ import annotations

import json

import pytest

from pipeplan import hardware, presets
from pipeplan.layers import LayerProfile
from pipeplan.planner import Cluster, Workload, search
from pipeplan.predict import predict
from pipeplan.schedules import build_schedule, schedule_info

SPLIT_SCHEDULES = ["zb-h1", "zb-h2", "zb-v"]


@pytest.fixture(scope="module")
def gpt_profile() -> LayerProfile:
    """The zero-bubble paper's 1.5B GPT at micro-batch size 6 on an A100 80 GB (its Table 4 setting)."""
    return presets.get("gpt-1.5b").to_layer_profile(hardware.device("a100-80g"), 6, recompute="none")


# --------------------------------------------------------------------------- memory
@pytest.mark.parametrize("schedule", SPLIT_SCHEDULES)
def test_plan_and_simulate_profile_give_one_memory_answer(gpt_profile, schedule):
    # a split backward keeps only the weight stash after I: the planner charged all activations until W
    assert sum(gpt_profile.weight_stash_bytes) < sum(gpt_profile.activation_bytes)
    workload = Workload.from_profile(gpt_profile, micro_batch_size=6)
    result = search(workload, Cluster.of("a100-80g", 8), 144, pp=8, micro_batch_size=6, schedules=[schedule],
                    memory_capacity=1e15, top=1)
    plan = result.best
    assert plan.schedule == schedule
    info = schedule_info(schedule)
    built = build_schedule(schedule, num_stages=plan.num_stages, num_microbatches=plan.num_microbatches,
                           **info.shape_options(plan.virtual_stages))
    simulated = predict(gpt_profile, built, plan.layers_per_stage).peak_bytes
    planned = [rank.activations for rank in plan.memory]
    assert planned == pytest.approx(list(simulated), rel=1e-9)


def test_plan_and_simulate_cli_agree_on_peaks(run_cli, gpt_profile, tmp_path):
    path = str(tmp_path / "gpt.json")
    gpt_profile.to_file(path)
    status, out, err = run_cli("plan", "--profile", path, "--profile-micro-batch-size", "6", "--gpus", "8",
                               "--gpu", "a100-80g", "--global-batch", "144", "--pp", "8", "--schedules", "zb-h1",
                               "--top", "1", "--json")
    assert status == 0, err
    plan = json.loads(out)["plans"][0]
    layers = ",".join(map(str, plan["layers_per_stage"]))
    status, out, err = run_cli("simulate", "--profile", path, "--partition", layers, "-m",
                               str(plan["microbatches"]), "--schedule", "zb-h1", "--json")
    assert status == 0, err
    simulated = [rank["peak_bytes"] for rank in json.loads(out)["ranks"]]
    assert [rank["activations"] for rank in plan["memory"]] == pytest.approx(simulated, rel=1e-9)
