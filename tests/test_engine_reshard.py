"""``--reshard-after-forward default|always|never``: FSDP2's reshard after forward, torchtitan's
``parallelism.fsdp_reshard_after_forward``, priced in time (no second all-gather in the backward) and memory (every
layer's bf16 parameters held gathered), written to and read back from torchtitan's configs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeplan import hardware, presets
from pipeplan.planner import Cluster, Workload
from pipeplan.planner.evaluate import evaluate_layout
from pipeplan.planner.space import Config
from pipeplan.planner.step import fsdp_exposed_ms

ARGS = ["--preset", "gpt-1.5b", "--gpus", "8", "--global-batch", "32", "--gpu", "a100-80g"]
PINS = ["--tp", "1", "--pp", "1", "--dp-modes", "fsdp", "--micro-batch-size", "2", "--recompute", "full",
        "--engine", "torchtitan", "--top", "1"]


def test_without_backward_gathers_only_the_reduce_scatters_meet_the_backward() -> None:
    forward, backward, gathers, scatters = [1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [5.0, 5.0, 5.0], [4.0, 4.0, 4.0]
    # forward: the first gather, then 10 of gathers against 3 of forward; backward: 4 of scatters against 10 hidden
    assert fsdp_exposed_ms(forward, backward, gathers, scatters, backward_gathers=False) == 5.0 + 7.0 + 0.0 + 4.0
    # with them: the last layer's gather, then 10 of gathers + 8 of scatters against 10, then the first scatter
    assert fsdp_exposed_ms(forward, backward, gathers, scatters) == 5.0 + 7.0 + 5.0 + 8.0 + 4.0


def _plan(reshard: bool):
    device = hardware.device("a100-80g")
    cluster = Cluster(8, device, hardware.link("nvlink-a100"), hardware.link("ib-hdr"), 8)
    work = Workload.from_spec(presets.get("gpt-1.5b"), device).with_recompute("full")
    work = work.with_reshard_after_forward(reshard)
    config = Config(1, 8, 2, 2, "1f1b", 1, "full", 1, "fsdp")
    return work, evaluate_layout(work, cluster, config, (work.num_layers,), sync="megatron-overlap")


def test_never_is_faster_and_holds_every_layers_bf16_parameters() -> None:
    work, default = _plan(True)
    _, never = _plan(False)
    assert never.step_time < default.step_time and never.dp_exposed_time < default.dp_exposed_time
    params = sorted(work.profile(2).params, reverse=True)
    # default: the gathered layer and the prefetched one (bf16 weights + gradients); never: every layer's bf16
    # weights, and the two layers' bf16 gradients
    assert never.peak_memory[0] - default.peak_memory[0] == pytest.approx(2.0 * sum(params) - 2.0 * sum(params[:2]))
    assert work.with_reshard_after_forward(True) is work


def _step(run_cli, *extra: str) -> tuple[float, float]:
    status, out, err = run_cli("plan", *ARGS, *PINS, *extra, "--json")
    assert status == 0, err
    plan = json.loads(out)["plans"][0]
    return plan["step_time"] * 1e3 * plan["time_unit_seconds"], plan["peak_memory"][0]


def test_the_cli_prices_never_and_takes_default_and_always_alike(run_cli) -> None:
    default = _step(run_cli)
    assert _step(run_cli, "--reshard-after-forward", "default") == default
    assert _step(run_cli, "--reshard-after-forward", "always") == default  # torchtitan's default without a pipeline
    never = _step(run_cli, "--reshard-after-forward", "never")
    assert never[0] < default[0] and never[1] > default[1]


@pytest.mark.parametrize("argv, words", [
    (["--engine", "torchtitan", "--reshard-after-forward", "always"], "priced without a pipeline only: give --pp 1"),
    (["--engine", "torchtitan", "--reshard-after-forward", "sometimes"],
     "--reshard-after-forward for torchtitan must be one of default, always, never, got 'sometimes'"),
    (["--engine", "megatron", "--reshard-after-forward", "never"], "megatron has no knob --reshard-after-forward"),
    (["--engine", "deepspeed", "--reshard-after-forward", "never"], "deepspeed has no knob --reshard-after-forward"),
])
def test_refusals_are_one_line(run_cli, argv: list[str], words: str) -> None:
    status, out, err = run_cli("plan", *ARGS, *argv)
    assert status == 2 and out == "" and len(err.strip().splitlines()) == 1 and words in err, err


@pytest.mark.parametrize("target", ["torchtitan", "torchtitan-toml"])
@pytest.mark.parametrize("value", ["never", "always"])
def test_plan_export_then_check_gives_the_same_step_and_memory(run_cli, tmp_path: Path, target: str,
                                                               value: str) -> None:
    knobs = ["--reshard-after-forward", value]
    status, out, err = run_cli("plan", *ARGS, *PINS, *knobs, "--export", target, "--json")
    assert status == 0, err
    planned = json.loads(out)["export"]["plan"]
    status, _, err = run_cli("plan", *ARGS, *PINS, *knobs, "--export", target, "--out", str(tmp_path / "t"))
    assert status == 0, err
    text = "\n".join(path.read_text() for path in (tmp_path / "t").iterdir())
    assert "fsdp_reshard_after_forward" in text and value in text
    status, out, err = run_cli("check", "--torchtitan-config", str(tmp_path / "t"), *ARGS, "--top", "0", "--json")
    assert status == 0, err
    checked = json.loads(out)
    assert checked["config"]["settings"]["reshard_after_forward"]["value"] == value
    step = planned["step_time"] * 1e3 * planned["time_unit_seconds"]
    assert checked["predicted"]["step_ms"] == pytest.approx(step, rel=1e-12)
    assert checked["predicted"]["peak_memory_bytes"] == planned["peak_memory"]


def test_check_notes_always_with_a_pipeline_prices_the_default_and_leaves_it_out_of_best_files(run_cli,
                                                                                              tmp_path: Path) -> None:
    pins = ["--tp", "1", "--pp", "2", "--schedules", "1f1b", "--dp-modes", "fsdp", "--micro-batch-size", "2",
            "--recompute", "full", "--engine", "torchtitan", "--top", "1"]
    status, _, err = run_cli("plan", *ARGS, *pins, "--reshard-after-forward", "never", "--export", "torchtitan-toml",
                             "--out", str(tmp_path / "t"))
    assert status == 0, err
    config = tmp_path / "t" / "torchtitan.toml"
    text = config.read_text()
    config.write_text(text.replace('fsdp_reshard_after_forward = "never"', 'fsdp_reshard_after_forward = "always"'))
    status, out, err = run_cli("check", "--torchtitan-config", str(tmp_path / "t"), *ARGS, "--top", "1", "--json")
    assert status == 0, err
    checked = json.loads(out)
    assert any("always is priced without a pipeline only (pp 2 here)" in note for note in checked["notes"])
    files = "".join(text for row in checked["best"]["same_engine"] for text in row["files"].values())
    assert files and "always" not in files
    config.write_text(text.replace('fsdp_reshard_after_forward = "never"\n', ""))
    status, out, err = run_cli("check", "--torchtitan-config", str(tmp_path / "t"), *ARGS, "--top", "0", "--json")
    assert status == 0, err
    assert json.loads(out)["predicted"]["step_ms"] == checked["predicted"]["step_ms"]


@pytest.mark.parametrize("mode, tp, written", [("fsdp", 1, True), ("hsdp", 1, True), ("hsdp", 8, False),
                                               ("ddp", 1, False)])
def test_the_export_writes_reshard_only_where_fsdp_shards(mode: str, tp: int, written: bool) -> None:
    from pipeplan.engines.torchtitan import torchtitan_degrees
    from pipeplan.plan import Plan

    plan = Plan(pp=1, dp=4, tp=tp, layers_per_stage=(8,), placement=(0,), micro_batch_size=2, num_microbatches=4,
                dp_mode=mode)
    degrees = torchtitan_degrees(plan, reshard="never", gpus_per_node=8)
    assert ("fsdp_reshard_after_forward" in degrees) == written == (degrees["data_parallel_shard_degree"] > 1)
