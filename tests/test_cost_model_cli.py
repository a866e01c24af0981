"""The cost model at the command line and in the planner: assumptions said, serialized messages, simulate --preset."""

from __future__ import annotations

import json

import pytest

from pipeplan import hardware, presets
from pipeplan.costs import StageCosts
from pipeplan.layers import LayerProfile
from pipeplan.models.layer_costs import layer_profile
from pipeplan.planner import Cluster, Workload
from pipeplan.planner.evaluate import evaluate_layout
from pipeplan.planner.links import Links
from pipeplan.planner.space import Config


def test_plan_json_says_what_its_numbers_assume(run_cli):
    code, out, _ = run_cli("plan", "--preset", "gpt-1.5b", "--gpus", "8", "--gpu", "a100-80g", "--global-batch", "16",
                           "--pp", "8", "--schedules", "1f1b", "--top", "1", "--send", "serialized",
                           "--dp-modes", "zero1", "--json")
    assert code == 0
    payload = json.loads(out)
    assumptions = payload["assumptions"]
    assert "per-operator roofline" in assumptions["device"] and "0.883" in assumptions["device"]
    assert "zero1 2 + 4 + 12/d" in assumptions["optimizer"]  # the distributed optimizer is zero1
    assert "overlap" in assumptions["gradients"]
    assert assumptions["messages"].startswith("serialized")
    assert payload["device"]["name"] == "a100-80g"


def test_model_prints_the_cost_model_and_mfu_switches_to_the_flat_one(run_cli):
    code, out, _ = run_cli("model", "--preset", "gpt-1.5b", "--gpu", "a100-80g", "--by-module")
    assert code == 0 and "cost model: a100-80g, per-operator roofline" in out
    code, out, _ = run_cli("model", "--preset", "gpt-1.5b", "--gpu", "a100-80g", "--mfu", "0.5", "--by-module")
    assert code == 0 and "flat model: every FLOP at 0.5 of 312 TFLOP/s" in out


def test_simulate_preset_runs_the_cost_models_layers(run_cli):
    code, out, _ = run_cli("simulate", "--preset", "gpt-1.5b", "--gpu", "a100-80g", "--micro-batch-size", "2",
                           "--recompute", "none", "--stages", "4", "--partition", "even", "-m", "8",
                           "--schedule", "zb-h1", "--json")
    assert code == 0
    payload = json.loads(out)
    spec = presets.get("gpt-1.5b")
    profile = layer_profile(spec, hardware.device("a100-80g"), 2, recompute="none")
    stage0 = sum(profile.forward[:6])
    [first] = [a for a in payload["actions"] if a["kind"] == "F" and a["stage"] == 0 and a["microbatch"] == 0]
    assert first["end"] - first["start"] == pytest.approx(stage0)
    assert payload["layers_per_stage"] == [6, 6, 6, 6] and payload["link"] == "nvlink-a100"


def test_simulate_takes_one_cost_source(run_cli):
    code, _, err = run_cli("simulate", "--preset", "gpt-1.5b", "--forward", "1,2")
    assert code == 2 and err.count("\n") == 1 and "give one of --forward, --profile or --preset/--spec" in err


def test_serialized_messages_sit_on_the_senders_timeline():
    profile = LayerProfile([1.0, 1.0, 1.0], params=[1e6] * 3, send_bytes=[1e9, 1e9, 0.0])
    workload = Workload.from_profile(profile)
    link = hardware.link("nvlink-a100")
    cluster = Cluster(3, hardware.device("a100-80g"), link, link)
    links = Links(workload, cluster, "serialized")
    config = Config(pp=3, dp=1, micro_batch_size=1, num_microbatches=4, schedule="1f1b")
    boundary = links.boundary_times(config, (1, 1, 1), (0, 1, 2))
    costs, zero = links.on_timelines(StageCosts([1.0] * 3), boundary)
    assert zero == (0.0, 0.0) and boundary[0] == pytest.approx(link.milliseconds(1e9))
    assert costs.forward == pytest.approx((1 + boundary[0], 1 + boundary[1], 1.0))
    assert costs.backward == pytest.approx((2.0, 2 + boundary[0], 2 + boundary[1]))
    assert costs.weight == pytest.approx(StageCosts([1.0] * 3).weight)
    eager = evaluate_layout(workload, cluster, config, (1, 1, 1))
    serialized = evaluate_layout(workload, cluster, config, (1, 1, 1), send_mode="serialized")
    # a blocking send costs the sender its message, which an eager send overlaps with its next action
    assert serialized.pipeline_time > eager.pipeline_time


def test_json_names_the_shapes_a_measured_table_stands_in_for(run_cli, tmp_path):
    from dataclasses import replace

    from pipeplan.hardware.device_file import write_device
    from pipeplan.hardware import GemmPoint

    device = replace(hardware.device("a100-80g"), gemm_table=(GemmPoint(1024, 1024, 1024, 0.6),))
    path = write_device(tmp_path / "dev.json", device)
    code, out, _ = run_cli("model", "--preset", "gpt-1.5b", "--device", str(path), "--json")
    assert code == 0
    fallbacks = json.loads(out)["gemm_fallbacks"]
    assert fallbacks and all(entry["nearest_measured"] == [1024, 1024, 1024] for entry in fallbacks)
    code, out, _ = run_cli("plan", "--preset", "gpt-1.5b", "--gpus", "2", "--global-batch", "4", "--device", str(path),
                           "--schedules", "1f1b", "--top", "1", "--json")
    assert code == 0 and json.loads(out)["gemm_fallbacks"]
