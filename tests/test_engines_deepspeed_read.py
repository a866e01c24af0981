"""Reading a DeepSpeed ``ds_config.json`` (or the folder the export wrote) back into a RunConfig.

The round trip needs no DeepSpeed: every plan the export writes reads back to its pp,
split, batch, ZeRO stage, schedule and overlap_comm. The validation tests (they skip
without DeepSpeed; ``pip install -e .[engines]`` installs it) hold the reader to
DeepSpeed's own config classes: a config the reader refuses is one ``DeepSpeedConfig``
refuses at every data-parallel size, one it accepts is one DeepSpeed accepts at the
data-parallel size its batch keys imply, with the same batch, ZeRO stage, precision,
overlap_comm and reduce_bucket_size, except where the reader differs on purpose (an
unknown key inside a section, which DeepSpeed's pydantic models refuse, is listed; a near
miss of a known top-level key, which DeepSpeed ignores, is refused). The keys pipeplan
knows are hand-written: each is a key DeepSpeed reads (a field or alias of its pydantic
models, or a top-level key ``DeepSpeedConfig`` looks up), with the default pipeplan
applies, and no key DeepSpeed has is refused as a near miss of one.
Run them with ``PYTHONPATH=src /work/engvenv/bin/python -m pytest -q tests/test_engines_deepspeed_read.py``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

from pipeplan import engines
from pipeplan.engines import deepspeed_config as reader
from pipeplan.engines.deepspeed_config import read_deepspeed_config
from pipeplan.errors import InvalidInputError
from pipeplan.plan import Plan


def _export(plan: Plan, folder: Path) -> Path:
    for file in engines.export_files(plan, "deepspeed"):
        (folder / file.name).write_text(file.text)
    return folder


def _config(folder: Path, payload: Any, name: str = "ds_config.json") -> Path:
    path = folder / name
    path.write_text(payload if isinstance(payload, str) else json.dumps(payload))
    return path


# ---------------------------------------------------------------------------------------------- round trip
_PLANS = [
    Plan(pp=1, dp=2, layers_per_stage=(4,), placement=(0,), micro_batch_size=2, num_microbatches=2, dp_mode=mode)
    for mode in ("ddp", "zero1", "zero2", "fsdp")
] + [
    Plan(pp=1, dp=8, layers_per_stage=(24,), placement=(0,), micro_batch_size=1, num_microbatches=16, dp_mode="zero2"),
    Plan(pp=2, dp=2, layers_per_stage=(3, 5), placement=(0, 1), micro_batch_size=2, num_microbatches=4,
         dp_mode="zero1"),
    Plan(pp=4, dp=1, layers_per_stage=(7, 6, 6, 5), placement=(0, 1, 2, 3), micro_batch_size=4, num_microbatches=8,
         dp_mode="ddp"),
    Plan(pp=3, dp=4, layers_per_stage=(2, 9, 1), placement=(0, 1, 2), micro_batch_size=1, num_microbatches=12,
         dp_mode="zero1", recompute=("full", "full", "full")),
]


@pytest.mark.parametrize("plan", _PLANS, ids=lambda p: f"pp{p.pp}-dp{p.dp}-{p.dp_mode}-b{p.micro_batch_size}"
                                                        f"-m{p.num_microbatches}")
def test_the_folder_the_export_wrote_reads_back_to_the_plan(plan, tmp_path):
    config = engines.get("deepspeed").read(_export(plan, tmp_path))
    assert config.engine == "deepspeed"
    assert config.value("pp") == plan.pp
    assert config.value("micro_batch_size") == plan.micro_batch_size
    assert config.value("num_microbatches") == plan.num_microbatches
    assert config.value("global_batch") == plan.global_batch
    assert config.value("dp_mode") == plan.dp_mode
    assert config.value("precision") == "bf16"
    if plan.pp > 1:
        assert config.value("layers_per_stage") == plan.layers_per_stage
        assert config.value("schedule") == plan.schedule == "1f1b"
        assert config.value("recompute") == (plan.uniform_recompute or "none")
    else:
        assert "layers_per_stage" not in config.settings and "schedule" not in config.settings
    assert any(f"data-parallel size of {plan.dp} " in note for note in config.notes)
    assert config.source_of("global_batch") == f"ds_config.json: train_batch_size = {plan.global_batch}"
    assert "gradient_clipping" in config.ignored
    # the export leaves overlap_comm out for a plan priced without it: DeepSpeed's default, on at ZeRO-3 only
    assert config.value("overlap_comm") == ("on" if plan.dp_mode == "fsdp" else "off")
    assert config.source_of("overlap_comm").startswith("DeepSpeed default (ds_config.json does not set "
                                                       "zero_optimization.overlap_comm")
    assert "reduce_bucket_size" not in config.settings


@pytest.mark.parametrize("plan", [
    Plan(pp=1, dp=4, layers_per_stage=(8,), placement=(0,), micro_batch_size=2, num_microbatches=4,
         dp_mode=mode, grad_sync="deepspeed-overlap") for mode in ("zero1", "zero2")
] + [Plan(pp=2, dp=2, layers_per_stage=(3, 5), placement=(0, 1), micro_batch_size=2, num_microbatches=4,
          dp_mode="zero1", grad_sync="deepspeed-overlap")], ids=lambda p: f"pp{p.pp}-{p.dp_mode}")
def test_a_plan_priced_with_overlap_comm_on_reads_back_on(plan, tmp_path):
    config = read_deepspeed_config(_export(plan, tmp_path))
    assert config.value("overlap_comm") == "on"
    assert config.source_of("overlap_comm") == "ds_config.json: zero_optimization.overlap_comm = true"
    assert "zero_optimization.overlap_comm" not in config.ignored
    assert config.value("dp_mode") == plan.dp_mode


def test_plan_with_overlap_comm_on_exports_a_folder_that_reads_back_on(run_cli, tmp_path):
    status, _, err = run_cli("plan", "--preset", "pi0", "--gpus", "8", "--global-batch", "64", "--pp", "1",
                             "--tp", "1", "--micro-batch-size", "2", "--dp-modes", "zero2", "--top", "1",
                             "--engine", "deepspeed", "--overlap-comm", "on", "--export", "deepspeed",
                             "--out", str(tmp_path))
    assert status == 0, err
    config = read_deepspeed_config(tmp_path)
    assert config.value("overlap_comm") == "on" and config.value("dp_mode") == "zero2"
    assert config.source_of("overlap_comm") == "ds_config.json: zero_optimization.overlap_comm = true"


def test_zero3_priced_without_overlap_comm_exports_it_off(run_cli, tmp_path):
    # ZeRO-3's default is overlap on: a plan priced with it off must say so in the file, or DeepSpeed overlaps
    status, _, err = run_cli("plan", "--preset", "pi0", "--gpus", "8", "--global-batch", "64", "--pp", "1",
                             "--tp", "1", "--dp-modes", "fsdp", "--top", "1", "--engine", "deepspeed",
                             "--overlap-comm", "off", "--export", "deepspeed", "--out", str(tmp_path))
    assert status == 0, err
    config = read_deepspeed_config(tmp_path)
    assert config.value("dp_mode") == "fsdp" and config.value("overlap_comm") == "off"
    assert config.source_of("overlap_comm") == "ds_config.json: zero_optimization.overlap_comm = false"


def test_the_ds_config_alone_leaves_the_pipeline_open(tmp_path):
    plan = _PLANS[5]
    _export(plan, tmp_path)
    config = read_deepspeed_config(tmp_path / "ds_config.json")
    assert "pp" not in config.settings and "schedule" not in config.settings
    assert config.value("dp_mode") == "zero1"
    assert any("pp is left open" in note for note in config.notes)


# ---------------------------------------------------------------------------------------------- fields
@pytest.mark.parametrize("stage, mode", [(0, "ddp"), (1, "zero1"), (2, "zero2"), (3, "fsdp")])
def test_each_zero_stage_is_pipeplans_mode_with_its_source(stage, mode, tmp_path):
    config = read_deepspeed_config(_config(tmp_path, {"train_batch_size": 32,
                                                      "zero_optimization": {"stage": stage}}))
    assert config.value("dp_mode") == mode
    assert config.source_of("dp_mode") == f"ds_config.json: zero_optimization.stage = {stage}"
    assert reader.zero_stage(mode) == stage and reader.data_parallel_mode(stage) == mode


@pytest.mark.parametrize("zero, overlap, source", [
    ({"stage": 2, "overlap_comm": True}, "on", "zero_optimization.overlap_comm = true"),
    ({"stage": 3, "overlap_comm": False}, "off", "zero_optimization.overlap_comm = false"),
    ({"stage": 1, "overlap_comm": "yes"}, "on", 'zero_optimization.overlap_comm = "yes"'),   # pydantic's lax bool
    ({"stage": 2, "overlap_comm": 0}, "off", "zero_optimization.overlap_comm = 0"),
])
def test_overlap_comm_is_read_with_its_source(zero, overlap, source, tmp_path):
    config = read_deepspeed_config(_config(tmp_path, {"train_batch_size": 8, "zero_optimization": zero}))
    assert config.value("overlap_comm") == overlap
    assert config.source_of("overlap_comm") == f"ds_config.json: {source}"
    assert not any("overlap_comm" in key for key in config.ignored)


@pytest.mark.parametrize("zero, overlap", [(None, "off"), ({"stage": 1}, "off"), ({"stage": 2}, "off"),
                                           ({"stage": 3}, "on"), ({"stage": 3, "overlap_comm": None}, "on"),
                                           ({"stage": 2, "overlap_comm": "auto"}, "off")])
def test_overlap_comm_left_out_is_deepspeeds_default_on_at_zero3_only(zero, overlap, tmp_path):
    payload = {"train_batch_size": 8} if zero is None else {"train_batch_size": 8, "zero_optimization": zero}
    config = read_deepspeed_config(_config(tmp_path, payload))
    assert config.value("overlap_comm") == overlap
    assert config.source_of("overlap_comm").startswith("DeepSpeed default (ds_config.json ")
    assert "on at ZeRO-3 only" in config.source_of("overlap_comm")


@pytest.mark.parametrize("raw, elements", [(200_000_000, 200_000_000), (5e8, 500_000_000),
                                           ("50000000", 50_000_000)])
def test_reduce_bucket_size_is_read_in_elements(raw, elements, tmp_path):
    config = read_deepspeed_config(_config(tmp_path, {"train_batch_size": 8, "zero_optimization": {
        "stage": 2, "reduce_bucket_size": raw}}))
    assert config.value("reduce_bucket_size") == elements
    assert config.source_of("reduce_bucket_size") == f"ds_config.json: zero_optimization.reduce_bucket_size = " \
                                                     f"{json.dumps(raw)}"
    assert not any("reduce_bucket_size" in key for key in config.ignored)


def test_reduce_bucket_size_left_out_is_left_to_the_knobs_default(tmp_path):
    config = read_deepspeed_config(_config(tmp_path, {"train_batch_size": 8, "zero_optimization": {"stage": 2}}))
    assert "reduce_bucket_size" not in config.settings
    knob = engines.get("deepspeed").knobs.get("reduce-bucket-size")
    assert knob.default is not None and int(knob.default) > 0     # what the step model prices then


def test_defaults_are_deepspeeds_and_say_so(tmp_path):
    config = read_deepspeed_config(_config(tmp_path, {"train_batch_size": 32}))
    assert config.value("dp_mode") == "ddp"
    assert config.source_of("dp_mode").startswith("DeepSpeed default (ds_config.json does not set "
                                                  "zero_optimization.stage")
    assert config.value("precision") == "fp32"
    assert config.source_of("precision").startswith("DeepSpeed default (ds_config.json does not set bf16.enabled")
    # only train_batch_size: DeepSpeed sets gradient_accumulation_steps 1, the micro batch from dp
    assert config.value("num_microbatches") == 1
    assert config.source_of("num_microbatches").startswith("DeepSpeed default")
    assert "micro_batch_size" not in config.settings


@pytest.mark.parametrize("payload, precision", [
    ({"bf16": {"enabled": True}}, "bf16"),
    ({"bfloat16": {"enabled": True}}, "bf16"),
    ({"fp16": {"enabled": True, "loss_scale": 0}}, "fp16"),
    ({"fp16": {"enabled": False}}, "fp32"),
])
def test_precision_is_the_enabled_section(payload, precision, tmp_path):
    config = read_deepspeed_config(_config(tmp_path, {"train_batch_size": 8, **payload}))
    assert config.value("precision") == precision
    assert config.source_of("precision").startswith("ds_config.json: ")


@pytest.mark.parametrize("payload, given, left_open", [
    ({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 4},
     {"global_batch": 64, "micro_batch_size": 4}, "num_microbatches"),
    ({"train_batch_size": 64, "gradient_accumulation_steps": 4},
     {"global_batch": 64, "num_microbatches": 4}, "micro_batch_size"),
    ({"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 4},
     {"micro_batch_size": 4, "num_microbatches": 4}, "global_batch"),
    ({"train_micro_batch_size_per_gpu": 4}, {"micro_batch_size": 4, "num_microbatches": 1}, "global_batch"),
])
def test_two_batch_keys_are_kept_and_the_third_left_for_the_data_parallel_size(payload, given, left_open, tmp_path):
    config = read_deepspeed_config(_config(tmp_path, payload))
    assert {name: config.value(name) for name in given} == given
    assert left_open not in config.settings


def test_auto_values_are_left_open_with_one_line_asking_for_the_number(tmp_path):
    config = read_deepspeed_config(_config(tmp_path, {
        "train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": 4,
        "bf16": {"enabled": "auto"}, "zero_optimization": {"stage": 2, "reduce_bucket_size": "auto"}}))
    assert "global_batch" not in config.settings and "micro_batch_size" not in config.settings
    assert "precision" not in config.settings
    assert config.value("num_microbatches") == 4 and config.value("dp_mode") == "zero2"
    asking = [note for note in config.notes if '"auto"' in note]
    assert len(asking) == 1
    assert all(key in asking[0] for key in ("train_batch_size", "train_micro_batch_size_per_gpu", "bf16.enabled",
                                            "zero_optimization.reduce_bucket_size"))
    assert "reduce_bucket_size" not in config.settings


def test_zero_tuning_keys_are_read_and_listed_as_ignored_and_offload_gets_a_note(tmp_path):
    config = read_deepspeed_config(_config(tmp_path, {"train_batch_size": 8, "steps_per_print": 10, "zero_optimization": {
        "stage": 3, "overlap_comm": True, "contiguous_gradients": True, "reduce_bucket_size": 5e8,
        "allgather_bucket_size": 5e8, "stage3_prefetch_bucket_size": 1e7,
        "offload_optimizer": {"device": "cpu", "pin_memory": True}, "offload_param": {"device": "none"}}}))
    for key in ("allgather_bucket_size", "offload_optimizer", "offload_param"):
        assert f"zero_optimization.{key}" in config.ignored
    # the priced knobs are fields, not ignored
    assert config.value("overlap_comm") == "on" and config.value("reduce_bucket_size") == 500_000_000
    assert config.value("contiguous_gradients") == "on" and config.value("stage3_prefetch_bucket_size") == 10_000_000
    listed = {key.split(" ")[0] for key in config.ignored}
    assert listed.isdisjoint({"zero_optimization.overlap_comm", "zero_optimization.reduce_bucket_size",
                              "zero_optimization.stage", "zero_optimization.contiguous_gradients",
                              "zero_optimization.stage3_prefetch_bucket_size"})
    assert "steps_per_print" in config.ignored
    offload = [note for note in config.notes if "offload" in note]
    assert len(offload) == 1 and "offload_optimizer.device = cpu" in offload[0]
    assert "does not price CPU/NVMe offload" in offload[0]


@pytest.mark.parametrize("payload, listed", [
    ({"my_own_key": {"a": 1}}, "my_own_key"),
    ({"zero_optimization": {"stage": 2, "foo": 1}}, "zero_optimization.foo"),
    ({"zero_optimization": {"stage": 3, "stage3_use_all_reduce_for_fetch_params": True}},
     "zero_optimization.stage3_use_all_reduce_for_fetch_params"),
    ({"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu", "pinned": True}}},
     "zero_optimization.offload_optimizer.pinned"),
    ({"bf16": {"enabled": True, "master": True}}, "bf16.master"),
    ({"bfloat16": {"enabled": True, "master": True}}, "bfloat16.master"),
    ({"nebula": {"enabled": True}}, "nebula"),    # a removed feature pipeplan does not list: DeepSpeed refuses it
])
def test_a_key_pipeplan_does_not_know_is_listed_as_such(payload, listed, tmp_path):
    config = read_deepspeed_config(_config(tmp_path, {"train_batch_size": 8, **payload}))
    assert f"{listed} (not a key pipeplan knows; not priced)" in config.ignored


def test_a_key_pipeplan_knows_is_listed_bare(tmp_path):
    config = read_deepspeed_config(_config(tmp_path, {"train_batch_size": 8, "optimizer": {"type": "AdamW"},
                                                      "fp16": {"enabled": True, "loss_scale": 0}}))
    assert {"optimizer", "fp16.loss_scale"} <= set(config.ignored)
    assert not any("not a key pipeplan knows" in key for key in config.ignored)


def test_activation_checkpointing_is_a_note_not_a_recompute(tmp_path):
    config = read_deepspeed_config(_config(tmp_path, {"train_batch_size": 8, "activation_checkpointing": {
        "partition_activations": True}}))
    assert "recompute" not in config.settings
    assert "activation_checkpointing" in config.ignored
    assert any("model code calls" in note for note in config.notes)


def test_hpz_stays_fsdp_with_a_note(tmp_path):
    config = read_deepspeed_config(_config(tmp_path, {"train_batch_size": 8, "zero_optimization": {
        "stage": 3, "zero_hpz_partition_size": 8}}))
    assert config.value("dp_mode") == "fsdp"
    assert any("hpZ" in note for note in config.notes)


@pytest.mark.parametrize("payload, words", [
    ({"train_batch_size": 8, "zero_optimization": {"stage": 2, "overlap_com": True}}, "did you mean overlap_comm"),
    ({"train_batch_size": 8, "zero_optimisation": {"stage": 2}}, "did you mean zero_optimization"),
    ({"train_batch_size": 8, "zero_optimization": {"stage": 2, "reduce_bucket_sise": 5}},
     "did you mean reduce_bucket_size"),
    ({"train_batch_size": 8, "fp16": {"enabled": True, "loss_scal": 0}}, "did you mean loss_scale"),
    ({"train_batch_size": 8, "zero_optimization": {"stage": 2, "overlap_comm": "maybe"}}, "true or false"),
    ({"train_batch_size": 8, "zero_optimization": {"stage": 2, "reduce_bucket_size": 0}}, "must be > 0"),
    ({"train_batch_size": 8, "zero_optimization": {"stage": 2, "reduce_bucket_size": "5e8"}}, "whole number"),
    ({"train_batch_size": 8, "zero_optimization": {"stage": 2, "reduce_bucket_size": None}}, "whole number"),
    ({"train_batch_size": 8, "zero_optimization": {"stage": 4}}, "must be 0, 1, 2 or 3, got 4"),
    ({"train_batch_size": 8, "zero_optimization": {"stage": 3, "mics_shard_size": 8}}, "removed MiCS"),
    ({"train_batch_size": 8, "zero_optimization": {"offload_param": {"device": "gpu"}}}, "none, cpu, nvme"),
    ({"train_batch_size": 8, "amp": {"enabled": True}}, "removed NVIDIA Apex AMP"),
    ({"train_micro_batch_size_per_gpu": -1}, "must be > 0, got -1"),
    ({"train_batch_size": 63, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 4}, "63"),
    ({"train_batch_size": 8, "bf16": {"enabled": True}, "fp16": {"enabled": True}}, "both true"),
    ({"gradient_accumulation_steps": 4}, "sets neither"),
    ({"train_batch_size": "64"}, "whole number"),
])
def test_refusals_are_one_line_naming_the_key(payload, words, tmp_path):
    with pytest.raises(InvalidInputError) as error:
        read_deepspeed_config(_config(tmp_path, payload))
    assert words in str(error.value) and "\n" not in str(error.value)


@pytest.mark.parametrize("name, text, option", [
    ("torchtitan.toml", '[job]\ndump_folder = "out"\n[parallelism]\npipeline_parallel_degree = 2\n',
     "--torchtitan-config"),
    ("args.txt", "--num-layers 24 --hidden-size 2048 --micro-batch-size 2\n", "--megatron-args"),
    ("spec.json", json.dumps({"name": "m", "modules": [{"kind": "embedding"}]}), "--spec"),
    ("torchtitan_config.py", "from torchtitan.trainer import Trainer\n\ndef pipeplan_config():\n    "
     "return Trainer.Config()\n", "--torchtitan-config"),
])
def test_another_engines_file_is_named_with_the_option_that_takes_it(name, text, option, tmp_path):
    with pytest.raises(InvalidInputError) as error:
        engines.get("deepspeed").read(_config(tmp_path, text, name))
    assert option in str(error.value) and "\n" not in str(error.value)


def test_a_pipeline_with_zero2_is_refused_as_the_pipeline_engine_does(tmp_path):
    _export(_PLANS[5], tmp_path)
    _config(tmp_path, {"train_batch_size": 16, "zero_optimization": {"stage": 2}})
    with pytest.raises(InvalidInputError, match="PipelineEngine runs ZeRO stage 0 or 1"):
        read_deepspeed_config(tmp_path)


def test_a_folder_without_ds_config_or_with_both_python_files_is_refused(tmp_path):
    with pytest.raises(InvalidInputError, match="holds no ds_config.json"):
        read_deepspeed_config(tmp_path)
    _export(_PLANS[5], tmp_path)
    (tmp_path / "deepspeed_train.py").write_text("import deepspeed\n")
    with pytest.raises(InvalidInputError, match="holds both"):
        read_deepspeed_config(tmp_path)


# ---------------------------------------------------------------------------------------------- DeepSpeed itself
@pytest.fixture(scope="module")
def ds_config() -> Any:
    """``deepspeed.runtime.config`` on DeepSpeed's CPU accelerator."""
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    pytest.importorskip("deepspeed", reason="DeepSpeed is not installed (pip install -e .[engines])")
    import deepspeed.runtime.config as module
    return module


class _Mpu:
    """The one method DeepSpeedConfig asks an mpu for: the data-parallel size."""

    def __init__(self, size: int) -> None:
        self.size = size

    def get_data_parallel_world_size(self) -> int:
        return self.size


def _deepspeed(module: Any, payload: dict[str, Any], dp: int) -> Any:
    """DeepSpeedConfig of ``payload`` at data-parallel size ``dp`` (None: it refuses it)."""
    with mock.patch.object(module.dist, "get_rank", return_value=0):
        try:
            return module.DeepSpeedConfig(json.loads(json.dumps(payload)), mpu=_Mpu(dp))
        except Exception:  # noqa: BLE001 - DeepSpeed refuses with AssertionError, ValidationError, TypeError, ...
            return None


_CONFIGS = {
    "exported pp1": {"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2,
                     "bf16": {"enabled": True}, "gradient_clipping": 1.0, "zero_optimization": {"stage": 2}},
    "exported with overlap_comm": {"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2,
                                   "gradient_accumulation_steps": 2, "bf16": {"enabled": True},
                                   "zero_optimization": {"stage": 2, "overlap_comm": True}},
    "unknown top-level key": {"train_batch_size": 8, "my_own_key": {"a": 1}, "zero_optimization": {"stage": 1}},
    "removed top-level key": {"train_batch_size": 8, "elasticity": {"enabled": True}},
    "removed MiCS": {"train_batch_size": 8, "zero_optimization": {"stage": 3, "mics_shard_size": 4}},
    "stage 4": {"train_batch_size": 8, "zero_optimization": {"stage": 4}},
    "stage -1": {"train_batch_size": 8, "zero_optimization": {"stage": -1}},
    "stage as a string": {"train_batch_size": 8, "zero_optimization": {"stage": "3"}},
    "negative micro batch": {"train_micro_batch_size_per_gpu": -2, "gradient_accumulation_steps": 1},
    "zero accumulation": {"train_batch_size": 8, "gradient_accumulation_steps": 0},
    "batch that does not add up": {"train_batch_size": 30, "train_micro_batch_size_per_gpu": 4,
                                   "gradient_accumulation_steps": 2},
    "batch that adds up at dp 4": {"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4,
                                   "gradient_accumulation_steps": 2},
    "train not a multiple of micro": {"train_batch_size": 30, "train_micro_batch_size_per_gpu": 4},
    "train not a multiple of accumulation": {"train_batch_size": 30, "gradient_accumulation_steps": 4},
    "micro and accumulation": {"train_micro_batch_size_per_gpu": 3, "gradient_accumulation_steps": 5},
    "only accumulation": {"gradient_accumulation_steps": 4},
    "fp16 and bf16": {"train_batch_size": 8, "fp16": {"enabled": True}, "bf16": {"enabled": True}},
    "fp16 with a loss scale": {"train_batch_size": 8, "fp16": {"enabled": True, "initial_scale_power": 12}},
    "offload to cpu": {"train_batch_size": 8, "zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"}}},
    "offload to a gpu": {"train_batch_size": 8, "zero_optimization": {"stage": 1, "offload_param": {"device": "gpu"}}},
    "zero_optimization not an object": {"train_batch_size": 8, "zero_optimization": 2},
    "overlap_comm left out at stage 2": {"train_batch_size": 8, "zero_optimization": {"stage": 2}},
    "overlap_comm left out at stage 3": {"train_batch_size": 8, "zero_optimization": {"stage": 3}},
    "overlap_comm off at stage 3": {"train_batch_size": 8, "zero_optimization": {"stage": 3, "overlap_comm": False}},
    "overlap_comm null at stage 3": {"train_batch_size": 8, "zero_optimization": {"stage": 3, "overlap_comm": None}},
    "overlap_comm auto": {"train_batch_size": 8, "zero_optimization": {"stage": 1, "overlap_comm": "auto"}},
    "overlap_comm as 1": {"train_batch_size": 8, "zero_optimization": {"stage": 1, "overlap_comm": 1}},
    "overlap_comm as on": {"train_batch_size": 8, "zero_optimization": {"stage": 2, "overlap_comm": "on"}},
    "overlap_comm as 2": {"train_batch_size": 8, "zero_optimization": {"stage": 2, "overlap_comm": 2}},
    "overlap_comm as maybe": {"train_batch_size": 8, "zero_optimization": {"stage": 2, "overlap_comm": "maybe"}},
    "reduce_bucket_size": {"train_batch_size": 8, "zero_optimization": {"stage": 2, "reduce_bucket_size": 200000000}},
    "reduce_bucket_size 5e8": {"train_batch_size": 8, "zero_optimization": {"stage": 2, "reduce_bucket_size": 5e8}},
    "reduce_bucket_size a string": {"train_batch_size": 8, "zero_optimization": {"stage": 2,
                                                                                 "reduce_bucket_size": "1000"}},
    "reduce_bucket_size auto": {"train_batch_size": 8, "zero_optimization": {"stage": 2,
                                                                             "reduce_bucket_size": "auto"}},
    "reduce_bucket_size 0": {"train_batch_size": 8, "zero_optimization": {"stage": 2, "reduce_bucket_size": 0}},
    "reduce_bucket_size 5e8 as a string": {"train_batch_size": 8, "zero_optimization": {
        "stage": 2, "reduce_bucket_size": "5e8"}},
    "reduce_bucket_size 2.5": {"train_batch_size": 8, "zero_optimization": {"stage": 2, "reduce_bucket_size": 2.5}},
}
#: Where the reader differs from DeepSpeed on purpose, and what it does instead.
#: An unknown key inside a section DeepSpeed's pydantic models hold (they forbid extra keys, so DeepSpeed
#: refuses the config when it runs): pipeplan lists it as not a key it knows, since it keeps no copy of
#: DeepSpeed's complete key sets.
_LISTED = {
    "unknown key in zero_optimization": ({"train_batch_size": 8, "zero_optimization": {"stage": 2, "foo": 1}},
                                         "zero_optimization.foo"),
    "unknown key in offload_optimizer": ({"train_batch_size": 8, "zero_optimization": {
        "stage": 3, "offload_optimizer": {"device": "cpu", "pinned": True}}},
        "zero_optimization.offload_optimizer.pinned"),
    "unknown key in bf16": ({"train_batch_size": 8, "bf16": {"enabled": True, "master": True}}, "bf16.master"),
    "removed key pipeplan does not list": ({"train_batch_size": 8, "nebula": {"enabled": True}}, "nebula"),
}
#: A near miss of a top-level key pipeplan knows, which DeepSpeed ignores (it runs ZeRO stage 0 here):
#: pipeplan refuses it as a typo, as the Megatron-LM and torchtitan readers do.
_TYPOS = {
    "misspelt zero_optimization": ({"train_batch_size": 8, "zero_optimisation": {"stage": 2}},
                                   "did you mean zero_optimization"),
}
_SIZES = range(1, 17)


@pytest.mark.parametrize("name", list(_CONFIGS))
def test_the_reader_accepts_and_refuses_what_deepspeed_does(name, ds_config, tmp_path):
    payload = _CONFIGS[name]
    try:
        config = read_deepspeed_config(_config(tmp_path, payload))
    except InvalidInputError:
        config = None
    accepted_at = [dp for dp in _SIZES if _deepspeed(ds_config, payload, dp) is not None]
    if config is None:
        assert not accepted_at, f"the reader refuses what DeepSpeed accepts at dp {accepted_at}"
        return
    assert accepted_at, "the reader accepts what DeepSpeed refuses at every data-parallel size"
    implied = [int(note.split("data-parallel size of ")[1].split()[0]) for note in config.notes
               if "data-parallel size of " in note]
    dp = implied[0] if implied else accepted_at[0]
    ds = _deepspeed(ds_config, payload, dp)
    assert ds is not None, f"DeepSpeed refuses it at the data-parallel size the reader implies ({dp})"
    fields = {"global_batch": ds.train_batch_size, "micro_batch_size": ds.train_micro_batch_size_per_gpu,
              "num_microbatches": ds.gradient_accumulation_steps}
    for field, value in fields.items():
        if field in config.settings:
            assert config.value(field) == value, field
    assert reader.zero_stage(config.value("dp_mode")) == ds.zero_optimization_stage
    precision = "bf16" if ds.bfloat16_config.enabled else "fp16" if ds.float16_config.enabled else "fp32"
    assert config.value("precision") == precision
    # overlap_comm always (given, or DeepSpeed's default for the stage); reduce_bucket_size where given,
    # else the knob's default, which must be DeepSpeed's
    assert config.value("overlap_comm") == ("on" if ds.zero_config.overlap_comm else "off")
    if "reduce_bucket_size" in config.settings:
        assert config.value("reduce_bucket_size") == ds.zero_config.reduce_bucket_size
    elif not any("reduce_bucket_size" in note for note in config.notes):     # "auto": the HF Trainer fills it
        knob = engines.get("deepspeed").knobs.get("reduce-bucket-size")
        assert int(str(knob.default)) == ds.zero_config.reduce_bucket_size


@pytest.mark.parametrize("name", list(_LISTED))
def test_an_unknown_key_deepspeed_refuses_is_listed_by_the_reader(name, ds_config, tmp_path):
    payload, key = _LISTED[name]
    assert not any(_deepspeed(ds_config, payload, dp) is not None for dp in _SIZES), "DeepSpeed accepts it"
    config = read_deepspeed_config(_config(tmp_path, payload))
    assert f"{key} (not a key pipeplan knows; not priced)" in config.ignored


@pytest.mark.parametrize("name", list(_TYPOS))
def test_a_near_miss_deepspeed_ignores_is_refused_by_the_reader(name, ds_config, tmp_path):
    payload, words = _TYPOS[name]
    ds = _deepspeed(ds_config, payload, 1)
    assert ds is not None and ds.zero_optimization_stage == 0      # DeepSpeed ran without the section
    with pytest.raises(InvalidInputError, match=words):
        read_deepspeed_config(_config(tmp_path, payload))


def _model_keys(model: Any) -> set[str]:
    """The keys a DeepSpeed pydantic model takes: its fields and their aliases."""
    return set(model.model_fields) | {field.alias for field in model.model_fields.values() if field.alias}


def _model_default(model: Any, key: str) -> Any:
    """The default of ``key`` (a field's name or alias) in ``model``."""
    return next(field.default for name, field in model.model_fields.items() if key in (name, field.alias))


def _top_level_keys(module: Any) -> set[str]:
    """The top-level keys ``DeepSpeedConfig`` looks up, recorded as it reads a small config."""
    seen: set[str] = set()

    class Keys(set):  # type: ignore[type-arg]
        def __contains__(self, key: object) -> bool:
            seen.add(str(key))
            return set.__contains__(self, key)

    class Recording(dict):  # type: ignore[type-arg]
        def get(self, key: Any, *default: Any) -> Any:
            seen.add(key)
            return super().get(key, *default)

        def __getitem__(self, key: Any) -> Any:
            seen.add(key)
            return super().__getitem__(key)

        def __contains__(self, key: object) -> bool:
            seen.add(str(key))
            return super().__contains__(key)

        def keys(self) -> Any:
            return Keys(super().keys())

    with mock.patch.object(module.dist, "get_rank", return_value=0):
        module.DeepSpeedConfig(Recording({"train_batch_size": 8}), mpu=_Mpu(1))
    return seen


@pytest.fixture(scope="module")
def sections(ds_config) -> dict[str, tuple[Any, set[str]]]:
    """Each section pipeplan knows keys of: DeepSpeed's model of it (None: the top level) and its keys."""
    from deepspeed.runtime.precision_config import DeepSpeedBF16Config, DeepSpeedFP16Config
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig
    from deepspeed.runtime.zero.offload_config import (DeepSpeedZeroOffloadOptimizerConfig,
                                                       DeepSpeedZeroOffloadParamConfig)

    models = {"zero_optimization": DeepSpeedZeroConfig,
              "zero_optimization.offload_param": DeepSpeedZeroOffloadParamConfig,
              "zero_optimization.offload_optimizer": DeepSpeedZeroOffloadOptimizerConfig,
              "bf16": DeepSpeedBF16Config, "fp16": DeepSpeedFP16Config}
    found: dict[str, tuple[Any, set[str]]] = {"": (None, _top_level_keys(ds_config))}
    found.update({section: (model, _model_keys(model)) for section, model in models.items()})
    return found


def test_every_key_pipeplan_knows_is_deepspeeds_with_the_default_pipeplan_applies(ds_config, sections):
    from deepspeed.runtime.zero.offload_config import OffloadDeviceEnum

    assert set(reader.READ_KEYS) == set(reader.IGNORED_KEYS) == set(sections)
    for section, (_, keys) in sections.items():
        known = reader.READ_KEYS[section] | reader.IGNORED_KEYS[section]
        assert known <= keys, f"{section or 'top level'}: not DeepSpeed's: {sorted(known - keys)}"
    for where, default in reader.DEFAULTS.items():
        section, key = where.rsplit(".", 1)
        model = sections[section][0]
        assert key in reader.READ_KEYS[section]
        assert _model_default(model, key) == default, where
    # overlap_comm's default is DeepSpeed's validator (the agreement test runs it); the knob's
    # reduce-bucket-size default is the model's
    assert _model_default(sections["zero_optimization"][0], "overlap_comm") is None
    knob = engines.get("deepspeed").knobs.get("reduce-bucket-size")
    assert int(str(knob.default)) == _model_default(sections["zero_optimization"][0], "reduce_bucket_size")
    assert {device.value for device in OffloadDeviceEnum} == set(reader.OFFLOAD_DEVICES)
    assert set(reader.REMOVED_KEYS) <= set(ds_config._REMOVED_TOP_LEVEL_CONFIG_KEYS)
    assert set(reader.REMOVED_ZERO_KEYS) <= set(ds_config._REMOVED_ZERO_CONFIG_KEYS)


def test_no_key_deepspeed_has_is_refused_as_a_near_miss(ds_config, sections, tmp_path):
    removed = {"": set(ds_config._REMOVED_TOP_LEVEL_CONFIG_KEYS),
               "zero_optimization": set(ds_config._REMOVED_ZERO_CONFIG_KEYS)}
    wrap = {"": lambda key: {key: {}},
            "zero_optimization": lambda key: {"zero_optimization": {"stage": 3, key: None}},
            "zero_optimization.offload_param": lambda key: {"zero_optimization": {
                "stage": 3, "offload_param": {key: None}}},
            "zero_optimization.offload_optimizer": lambda key: {"zero_optimization": {
                "stage": 3, "offload_optimizer": {key: None}}},
            "bf16": lambda key: {"bf16": {"enabled": True, key: None}},
            "fp16": lambda key: {"fp16": {"enabled": True, key: None}}}
    checked = 0
    for section, (_, keys) in sections.items():
        known = reader.READ_KEYS[section] | reader.IGNORED_KEYS[section]
        for key in sorted(keys - known - removed.get(section, set())):
            config = read_deepspeed_config(_config(tmp_path, {"train_batch_size": 8, **wrap[section](key)}))
            prefix = f"{section}." if section else ""
            assert f"{prefix}{key} (not a key pipeplan knows; not priced)" in config.ignored
            checked += 1
    assert checked > 30       # the top level and ZeRO's model hold many keys pipeplan does not know


def test_communication_data_type_is_a_priced_field_not_listed_as_ignored(tmp_path):
    config = read_deepspeed_config(_config(tmp_path, {"train_batch_size": 8, "communication_data_type": "fp32",
                                                      "zero_optimization": {"stage": 1}}))
    assert config.value("grad_reduce_dtype") == "fp32"
    assert not any(key.split(" ")[0] == "communication_data_type" for key in config.ignored)
