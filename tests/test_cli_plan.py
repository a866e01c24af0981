"""``pipeplan plan``: the table, the --json contract, exports, files, and one-line errors."""

from __future__ import annotations

import json

import pytest

from pipeplan.layers import LayerProfile


@pytest.fixture
def vla_profile(tmp_path):
    """A dumbbell VLA: a heavy vision block, 12 decoder layers, an action head (times in ms)."""
    profile = LayerProfile(
        [30.0] + [2.0] * 12 + [10.0],
        params=[4e8] + [2e8] * 12 + [1e8],
        activation_bytes=[3e9] + [1e9] * 12 + [5e8],
        names=["vision"] + [f"layers.{i}" for i in range(12)] + ["action_head"],
    )
    path = tmp_path / "vla.json"
    path.write_text(json.dumps(profile.to_records()))
    return str(path)


def base(path: str, *extra: str) -> list[str]:
    return ["plan", "--profile", path, "--gpus", "4", "--memory", "40GB", "--global-batch", "16", *extra]


def test_table_baseline_gantt_and_export(run_cli, vla_profile):
    status, out, err = run_cli(*base(vla_profile, "--pp", "4", "--export", "megatron"))
    assert status == 0, err
    for column in ("tp×pp×dp", "dp mode", "schedule", "layers per stage", "recompute", "step ms", "samples/s", "MFU",
                   "bubble", "worst GPU", "× best baseline"):
        assert column in out
    assert "its repository (reference)" in out and "Megatron recommended" in out and "Megatron, only partition" in out
    # the summary names the baseline as the table does, never by its internal name
    assert "best plan: " in out and ("its repository's layout" in out or "Megatron's recommended layout" in out)
    assert "reference-fsdp" not in out and "megatron-recommended" not in out
    assert "search complete" in out and "rank 3 |" in out
    assert "--pipeline-model-parallel-size 4" in out


def test_json_contract(run_cli, vla_profile):
    status, out, err = run_cli(*base(vla_profile, "--json", "--top", "3"))
    assert status == 0, err
    payload = json.loads(out)
    assert set(payload) >= {"plans", "baseline", "search"}
    assert 1 <= len(payload["plans"]) <= 3
    keys = {"schedule", "pp", "dp", "micro_batch_size", "microbatches", "layers_per_stage", "recompute",
            "step_time", "peak_memory", "memory_capacity", "exports"}
    for plan in payload["plans"]:
        assert keys <= set(plan)
        assert plan["pp"] * plan["dp"] == 4
        assert plan["micro_batch_size"] * plan["microbatches"] * plan["dp"] == 16
        assert sum(plan["layers_per_stage"]) == 14
        assert len(plan["peak_memory"]) == plan["pp"]
        assert max(plan["peak_memory"]) <= plan["memory_capacity"] == 40e9
        assert set(plan["exports"]) == {"megatron", "deepspeed", "torchtitan", "torch"}
    times = [plan["step_time"] for plan in payload["plans"]]
    assert times == sorted(times)
    assert keys - {"exports"} <= set(payload["baseline"]) and "fits" in payload["baseline"]
    assert payload["baseline"]["schedule"] == "1f1b"
    assert {"candidates", "simulated", "seconds"} <= set(payload["search"])


def test_plot_and_trace_files(run_cli, vla_profile, tmp_path):
    pytest.importorskip("matplotlib")
    png, trace = tmp_path / "best.png", tmp_path / "best.json"
    status, _, err = run_cli(*base(vla_profile, "--pp", "2", "--plot", str(png), "--trace", str(trace)))
    assert status == 0, err
    assert png.stat().st_size > 1000
    assert json.loads(trace.read_text())["traceEvents"]


def test_budget_says_it_stopped(run_cli, vla_profile):
    status, out, err = run_cli(*base(vla_profile, "--budget", "1e-9"))
    assert status == 0, err
    assert "stopped by --budget" in out and "best plans so far" in out


@pytest.mark.parametrize("extra,message", [
    (["--memory", "15GB"], "no plan fits a GPU of 14 GiB (--memory); the smallest memory that fits is 16.6 GiB (pp=4, "
                           "dp=1, adaptive v=3"),
    (["--memory", "1GB"], "no plan fits a GPU of 0.931 GiB (--memory): weights and optimizer state alone need at least"),
    (["--global-batch", "6", "--pp", "1"], "--global-batch=6 is not divisible by dp"),
    (["--micro-batch-size", "4"], "--micro-batch-size must be one of [1] for this model, got 4"),
    (["--pp", "4", "--gpus", "16"], None),
    (["--schedules", "1f2b"], "schedules must be among"),
    (["--budget", "-1"], "--budget must be > 0, got -1"),
    (["--optimizer", "sgd"], "optimizer must be 'adam' or bytes per parameter"),
    (["--optimizer", "distributed"], "the distributed optimizer is the data-parallel mode zero1: --dp-modes zero1"),
    (["--schedules", "1f1b,,zb-v"], "--schedules has an empty entry"),
    (["--gpus", "8", "--gpus-per-node", "3"], "8 GPUs do not fill whole nodes of 3 GPUs"),
    (["--gpus", "1000000000"], "--gpus must be <= 1048576"),  # limits.MAX_GPUS: 1e30 GPUs never ended
    (["--headroom", "5%"], "--headroom does not apply with --memory"),
    (["--tp", "2"], "tp=2 needs a model spec (--preset or --spec): a measured profile was timed at tp=1 only"),
    (["--tp", "3"], "tp=3 must divide the GPUs of a node (4)"),
    (["--dp-modes", "zero4"], "--dp-modes: zero4 is not a data-parallel mode; give some of ddp, zero1, zero2, fsdp, hsdp"),
    (["--dp-modes", "zero1,,ddp"], "--dp-modes has an empty entry"),
    (["--pp", "1", "--dp-modes", "zero2", "--export", "megatron"], "torchtitan runs every mode (--export torchtitan)"),
    (["--pp", "4", "--schedules", "adaptive", "--export", "megatron"],
     "megatron runs only 1f1b, interleaved; data-parallel modes ddp, zero1, and the search tried none of them (--schedules adaptive)"),
])
def test_bad_input_is_one_line_and_exit_2(run_cli, vla_profile, extra, message):
    status, out, err = run_cli(*base(vla_profile), *extra)
    if message is None:  # 16 GPUs, pp=4: a valid request
        assert status == 0, err
        return
    assert status == 2
    assert err.count("\n") == 1 and "Traceback" not in err
    assert message in err


@pytest.mark.parametrize("extra,message", [
    (["--tp", "3"], "tp=3 must divide the GPUs of a node (8)"),
    (["--tp", "16", "--gpus", "32"], "tp=16 must divide the GPUs of a node (8)"),
    (["--tp", "8", "--preset", "cogact"], None),
])
def test_tensor_parallel_bad_input_names_the_node_or_the_module(run_cli, extra, message):
    args = ["plan", "--gpus", "8", "--global-batch", "64", "--top", "1", "--json", *extra]
    if "--preset" not in extra:
        args += ["--preset", "pi0"]
    status, out, err = run_cli(*args)
    if message is None:  # a model whose heads 8 does not divide: the module is named
        assert status == 2 and err.count("\n") == 1 and "must divide module" in err, err
        return
    assert status == 2 and err.count("\n") == 1 and message in err, err


def test_more_stages_than_layers(run_cli, tmp_path):
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(LayerProfile([1.0, 1.0, 1.0]).to_records()))
    status, _, err = run_cli("plan", "--profile", str(path), "--gpus", "4", "--memory", "40GB",
                             "--global-batch", "8", "--pp", "4")
    assert status == 2 and "pp=4 needs at least that many layers, but the model has 3" in err


def test_preset_end_to_end_with_torchtitan_export(run_cli):
    status, out, err = run_cli("plan", "--preset", "pi0", "--gpus", "8", "--gpu", "h100-80g",
                               "--global-batch", "64", "--pp", "2", "--micro-batch-size", "4",
                               "--schedules", "1f1b,zb-h1", "--export", "torchtitan", "--top", "3")
    assert status == 0, err
    assert "pi0 on 8 × h100-80g" in out and "Megatron recommended" in out
    assert "def apply_plan(config):" in out and "\"pipeline_parallel_degree\": 2," in out


def test_preset_json_frozen_vision_holds_less(run_cli):
    args = ["plan", "--preset", "pi0", "--gpus", "4", "--global-batch", "16", "--pp", "2", "--micro-batch-size",
            "2", "--schedules", "1f1b", "--json", "--top", "1"]
    status, out, err = run_cli(*args)
    assert status == 0, err
    trained = json.loads(out)["plans"][0]
    status, out, err = run_cli(*args, "--freeze", "vision")
    assert status == 0, err
    frozen = json.loads(out)["plans"][0]
    assert sum(r["optimizer"] for r in frozen["memory"]) < sum(r["optimizer"] for r in trained["memory"])
    assert frozen["step_time"] < trained["step_time"]  # no weight gradients for the frozen tower


@pytest.mark.parametrize("argv,message", [
    (["--preset", "pi9"], "--preset 'pi9' is not one of pi0, "),
    (["--preset", "pi0", "--profile", "x.json"], "exactly one of --preset"),
    (["--preset", "pi0", "--gpu", "tpu"], "--gpu 'tpu' is not one of a100-40g"),
    (["--preset", "pi0", "--inter-link", "smoke-signals"], "link must be one of"),
])
def test_bad_model_and_hardware(run_cli, argv, message):
    status, _, err = run_cli("plan", "--gpus", "8", "--global-batch", "64", *argv)
    assert status == 2 and message in err and err.count("\n") == 1


def test_pi0_demo_story(run_cli):
    """The honest story: plain FSDP is as good on 8 GPUs at 32 samples each; at one sample per GPU on 64,
    tensor and pipeline parallelism pay."""
    status, out, err = run_cli("demo", "--story", "pi0")
    assert status == 0, err
    first, second = out.split("64 × H100 80GB, global batch 64")
    assert "Plain sharded data parallelism is the best plan here" in first
    assert "its repository (reference)" in first and "Megatron recommended" in first
    assert ("Pipelining pays: tp=" in second or "Tensor parallelism inside a node pays" in second)
    assert "faster than" in second
    status, _, err = run_cli("demo", "--story", "pi0", "-m", "4")
    assert status == 2 and "does not apply to --story pi0" in err


def test_export_falls_back_to_the_best_plan_the_engine_runs(run_cli, vla_profile):
    """With --top 1 the list holds one zero-bubble plan; Megatron-LM's flags come from a search over what it runs."""
    status, out, err = run_cli(*base(vla_profile, "--pp", "4", "--top", "1", "--export", "megatron"))
    assert status == 0, err
    assert "megatron runs instead (the best plan of a search over only what it runs" in out
    assert "changed from plan 1: schedule" in out and "→ 1f1b" in out
    assert "megatron cannot run plan 1" in out and "--pipeline-model-parallel-size 4" in out


def test_headroom_leaves_a_share_of_the_gpu_free(run_cli):
    status, out, err = run_cli("plan", "--preset", "gr00t-n1", "--gpus", "8", "--global-batch", "64",
                               "--pp", "8", "--json", "--top", "1")
    assert status == 0, err
    default = json.loads(out)["plans"][0]["memory_capacity"]
    status, out, err = run_cli("plan", "--preset", "gr00t-n1", "--gpus", "8", "--global-batch", "64",
                               "--pp", "8", "--json", "--top", "1", "--headroom", "0")
    assert status == 0, err
    full = json.loads(out)["plans"][0]["memory_capacity"]
    assert default == pytest.approx(0.9 * full) and full == pytest.approx(81_559 * 2**20)
