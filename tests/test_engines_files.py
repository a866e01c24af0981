"""The exported files as each engine reads them: Megatron's flags, torchtitan's config, DeepSpeed's ZeRO rule, --out.

Megatron-LM's flag names are vendored in tests/data/megatron_args.txt (its parser at
d98e8a64); torchtitan's config fields in tests/data/torchtitan_fields.json (HEAD b5bcd76c
and the last TOML release e347b1e5e).
"""

from __future__ import annotations

import dataclasses
import json
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
import types
from pathlib import Path

import pytest

import pipeplan
from pipeplan import InvalidInputError
from pipeplan.plan import Plan
from pipeplan.engines import LayerName, export_files
from pipeplan.engines.megatron import megatron_args, megatron_mapping
from pipeplan.engines.torchtitan import torchtitan_settings

from test_engines import megatron_split, parse_megatron_layout

DATA = Path(__file__).parent / "data"
MEGATRON_FLAGS = {line for line in (DATA / "megatron_args.txt").read_text().splitlines() if line.startswith("--")}
TORCHTITAN = json.loads((DATA / "torchtitan_fields.json").read_text())


def gpt_names(decoder: int) -> list[LayerName]:
    """A Megatron GPT's pipeline layers: the embedding, the decoder layers, the output layer + loss."""
    return ([LayerName(("embedding",), "embedding")] + [LayerName((f"decoder.layers.{i}",), "decoder")
                                                         for i in range(decoder)]
            + [LayerName(("output_layer",), "loss")])


def script_line(files) -> str:
    """The flag line of megatron_args.sh as bash sees it (the quoted LINE= word)."""
    text = {f.name: f.text for f in files}["megatron_args.sh"]
    (assignment,) = [line for line in text.splitlines() if line.startswith("LINE=")]
    (line,) = shlex.split(assignment[len("LINE="):])
    return line


def check_megatron(args: list[str], plan: Plan, decoder_layers: int) -> None:
    """Flags Megatron-LM has, and the divisibility rules validate_args and get_num_layers_to_build apply."""
    flags = [token for token in args if token.startswith("--")]
    assert set(flags) <= MEGATRON_FLAGS, set(flags) - MEGATRON_FLAGS
    values = dict(zip(args, args[1:]))
    assert int(values["--num-layers"]) == decoder_layers
    pp = int(values["--pipeline-model-parallel-size"])
    if "--pipeline-model-parallel-layout" in values:
        parse_megatron_layout(values["--pipeline-model-parallel-layout"], pp, decoder_layers)
    elif "--account-for-embedding-in-pipeline-split" in args:
        total = decoder_layers + ("--account-for-loss-in-pipeline-split" in args) + 1
        assert total % (pp * plan.virtual_stages) == 0  # arguments.py: num_layers (+1 +1) % pp == 0
    elif "--num-layers-per-virtual-pipeline-stage" not in values:
        split = megatron_split([a for a in args if a not in ("--sequence-parallel", "--use-distributed-optimizer")])
        assert sum(split) == decoder_layers
    global_batch, micro = int(values["--global-batch-size"]), int(values["--micro-batch-size"])
    assert global_batch % (micro * plan.dp) == 0  # Megatron derives m = global / (micro × dp)


@pytest.mark.parametrize("sizes,placement", [
    ((6, 6, 6, 6), (0, 1, 2, 3)),       # even with E and L counted: the account-for flags
    ((4, 7, 7, 6), (0, 1, 2, 3)),       # first/last differ, middle equal
    ((5, 8, 5, 6), (0, 1, 2, 3)),       # uneven middle: the layout
    ((3,) * 8, (0, 1, 2, 3) * 2),       # interleaved, equal chunks counting E and L
    ((2, 3, 3, 3, 3, 3, 3, 4), (0, 1, 2, 3) * 2),
])
def test_megatron_line_is_one_shell_word_per_flag_and_megatron_accepts_it(sizes, placement, tmp_path):
    plan = Plan(pp=4, dp=2, layers_per_stage=sizes, placement=placement, micro_batch_size=2, num_microbatches=8,
                schedule="interleaved" if len(sizes) > 4 else "1f1b", tp=2, sequence_parallel=True, dp_mode="zero1",
                recompute=("selective",) * len(sizes))
    names = gpt_names(22)
    files = export_files(plan, "megatron", names)
    args = megatron_args(plan, names)
    assert shlex.split(script_line(files)) == args
    check_megatron(args, plan, 22)
    assert {"--tensor-model-parallel-size", "--sequence-parallel", "--use-distributed-optimizer",
            "--recompute-modules"} <= set(args)
    script = tmp_path / "megatron_args.sh"
    script.write_text(files[0].text)
    echoed = subprocess.run(["bash", str(script), sys.executable, "-c", "import json, sys; print(json.dumps(sys.argv[1:]))"],
                            capture_output=True, text=True, check=True).stdout
    assert json.loads(echoed) == args  # bash hands every flag over intact (the layout's | and * too)
    printed = subprocess.run(["bash", str(script)], capture_output=True, text=True, check=True).stdout
    assert shlex.split(printed) == args


def test_gpt_with_embedding_and_loss_counts_decoder_layers_only():
    """gpt-1.5b's 24 pipeline layers are 22 decoder layers (Megatron: 'Number of decoder layers 24 must match 22')."""
    plan = pipeplan.partition_layers([1.0] * 24, 4)
    args = megatron_args(plan, gpt_names(22))
    values = dict(zip(args, args[1:]))
    assert values["--num-layers"] == "22"
    assert "--account-for-embedding-in-pipeline-split" in args and "--account-for-loss-in-pipeline-split" in args
    # the plan's own names, without reference names, are detected the same way
    named = Plan(pp=4, dp=1, layers_per_stage=(6,) * 4, placement=(0, 1, 2, 3),
                 layer_names=("embedding.0", *[f"layers.{i}" for i in range(22)], "output_layer.0"))
    split = args[:args.index("--micro-batch-size")]
    assert megatron_args(named)[:len(split)] == split


def test_a_model_megatron_has_no_port_of_gets_the_mapping_not_flags():
    names = ([LayerName((f"vision.blocks.{i}",), "other") for i in range(4)]
             + [LayerName((f"llm.layers.{i}", f"expert.layers.{i}"), "other") for i in range(4)])
    plan = Plan(pp=2, dp=1, layers_per_stage=(4, 4), placement=(0, 1))
    with pytest.raises(InvalidInputError, match="no port of this model"):
        megatron_args(plan, names)
    table = megatron_mapping(plan, names).splitlines()
    assert table[0].split("\t") == ["stage", "rank", "layer", "role", "modules"]
    assert table[5].split("\t") == ["1", "1", "4", "other", "llm.layers.0 expert.layers.0"]


def test_deepspeed_runs_zero_stage_0_or_1_with_a_pipeline():
    base = dict(pp=2, dp=4, layers_per_stage=(4, 4), placement=(0, 1), num_microbatches=4)
    config = json.loads(export_files(Plan(**base, dp_mode="zero1"), "deepspeed")[0].text)
    assert config["zero_optimization"] == {"stage": 1}
    for mode in ("zero2", "fsdp"):
        with pytest.raises(InvalidInputError, match="ZeRO stage 0 or 1 only.*torchtitan"):
            export_files(Plan(**base, dp_mode=mode), "deepspeed")
    single = {**base, "pp": 1, "layers_per_stage": (8,), "placement": (0,)}
    assert json.loads(export_files(Plan(**single, dp_mode="fsdp"), "deepspeed")[0].text)["zero_optimization"] == {
        "stage": 3}


def _standin(name: str, fields: list[str]) -> type:
    """A slots dataclass with torchtitan's field names: setting any other name raises, as torchtitan's does."""
    return dataclasses.make_dataclass(name, [(field, object, None) for field in fields], slots=True, kw_only=True)


@pytest.mark.parametrize("schedule,virtual,dp_mode,shard,replicate", [
    ("1f1b", 1, "ddp", 1, 4), ("zb-h1", 1, "fsdp", 4, 1), ("interleaved", 2, "hsdp", 2, 2), ("zb-v", 2, "zero1", 4, 1),
])
def test_torchtitan_config_sets_only_fields_torchtitan_has(schedule, virtual, dp_mode, shard, replicate, tmp_path,
                                                           monkeypatch):
    stages = 2 * virtual
    placement = (0, 1) * virtual if schedule != "zb-v" else (0, 1, 1, 0)
    plan = Plan(pp=2, dp=4, tp=2, layers_per_stage=(2,) * stages, placement=placement, schedule=schedule,
                num_microbatches=8, micro_batch_size=2, dp_mode=dp_mode, recompute=("full",) * stages,
                layer_names=tuple(f"layers.{i}" for i in range(2 * stages)))
    for file in export_files(plan, "torchtitan", gpus_per_node=4):
        (tmp_path / file.name).write_text(file.text)
    assert (tmp_path / "schedule.csv").exists() == (schedule == "zb-h1")
    ac = types.ModuleType("torchtitan.distributed.activation_checkpoint")
    ac.FullAC = types.SimpleNamespace(Config=lambda: "full-ac")
    ac.SelectiveAC = types.SimpleNamespace(Config=lambda: "selective-ac")
    for module in ("torchtitan", "torchtitan.distributed"):
        monkeypatch.setitem(sys.modules, module, types.ModuleType(module))
    monkeypatch.setitem(sys.modules, "torchtitan.distributed.activation_checkpoint", ac)
    config = types.SimpleNamespace(parallelism=_standin("ParallelismConfig", TORCHTITAN["head"]["parallelism"])(),
                                   training=_standin("TrainingConfig", TORCHTITAN["head"]["training"])(),
                                   compile=_standin("CompileConfig", TORCHTITAN["head"]["compile"])(),
                                   activation_checkpoint=None)
    config.training.max_context_length = 128
    namespace: dict = {"__file__": str(tmp_path / "torchtitan_config.py")}
    exec(compile((tmp_path / "torchtitan_config.py").read_text(), "torchtitan_config.py", "exec"), namespace)  # noqa: S102
    namespace["apply_plan"](config)
    par = config.parallelism
    assert (par.data_parallel_shard_degree, par.data_parallel_replicate_degree) == (shard, replicate)
    assert par.tensor_parallel_degree == 2 and par.num_pp_microbatches == 8 and par.pipeline_parallel_degree == 2
    assert [len(part) for part in par.module_fqns_per_model_part] == [2] * stages
    assert config.training.num_tokens_per_microbatch_per_dp_rank == 2 * 128
    assert config.activation_checkpoint == "full-ac"
    assert config.compile.enable is False  # torchtitan's default, what pipeplan priced without --compile
    if par.pipeline_parallel_schedule_csv:
        assert Path(par.pipeline_parallel_schedule_csv).exists()
    toml = tomllib.loads(export_files(plan, "torchtitan-toml", gpus_per_node=4)[0].text)
    for section, keys in toml.items():
        assert set(keys) <= set(TORCHTITAN["toml"][section])


def test_torchtitan_lists_a_joint_layer_as_its_two_module_paths():
    names = [LayerName(("vision.0",), "other"), LayerName(("llm.layers.0", "expert.layers.0"), "other"),
             LayerName(("llm.layers.1", "expert.layers.1"), "other")]
    plan = Plan(pp=2, dp=1, layers_per_stage=(1, 2), placement=(0, 1))
    parts = torchtitan_settings(plan, names)["parallelism"]["module_fqns_per_model_part"]
    assert parts == [["vision.0"], ["llm.layers.0", "expert.layers.0", "llm.layers.1", "expert.layers.1"]]
    split = {f.name: f.text for f in export_files(plan, "torch", names)}["split_spec.py"]
    assert "split_spec = None" in split and "joint layer" in split


# ----------------------------------------------------------------- the CLI
LESSON16 = ["partition", "--layers", "32", "--layer-cost", "2", "--first-extra", "16", "--last-extra", "8",
            "--stages", "4"]


def test_out_writes_every_file_and_says_so(run_cli, tmp_path):
    out = tmp_path / "export"
    status, stdout, err = run_cli(*LESSON16, "--export", "torch", "--out", str(out))
    assert status == 0, err
    assert sorted(p.name for p in out.iterdir()) == ["schedule.csv", "split_spec.py"]
    assert err.count("wrote ") == 2 and "0F0" not in stdout
    rows = (out / "schedule.csv").read_text().split("\n")
    assert rows[-1] == "" and all(rows[:-1]) and len(rows) == 5  # 4 ranks, no blank fifth


@pytest.mark.parametrize("make,message", [
    (lambda p: p.write_text("x") and p, "exists and is not a folder"),
])
def test_out_that_cannot_take_files_is_one_line(run_cli, tmp_path, make, message):
    target = make(tmp_path / "file")
    status, _, err = run_cli(*LESSON16, "--export", "torch", "--out", str(tmp_path / "file"))
    assert status == 2 and message in err and err.count("\n") == 1
    del target


def test_engine_that_cannot_run_the_plan_writes_nothing(run_cli, tmp_path):
    status, _, err = run_cli(*LESSON16[:-2], "--stages", "4", "--schedule", "zb-h1", "--export", "deepspeed",
                             "--out", str(tmp_path / "ds"))
    assert status == 2 and "torch or torchtitan export" in err
    assert not (tmp_path / "ds").exists()


def test_interleaved_partition_exports_the_interleaved_order(run_cli):
    status, out, err = run_cli("partition", "--layers", "16", "--layer-cost", "2", "--stages", "4", "--schedule",
                               "interleaved", "--export", "torch")
    assert status == 0, err
    rows = [line for line in out.split("# ==> schedule.csv <==\n")[1].splitlines()]
    from pipeplan import build_schedule
    from pipeplan.engines.pipelining import torch_schedule_csv

    # partition's default m is 2 x the pipeline ranks: 4 interleaved stages on 2 ranks
    expected = torch_schedule_csv(build_schedule("interleaved", num_stages=4, num_microbatches=4, virtual_stages=2))
    assert rows == expected.splitlines()


def _documented_commands() -> list[str]:
    root = Path(__file__).parent.parent
    commands = []
    for doc in (root / "README.md", root / "docs" / "exports.md"):
        for line in doc.read_text().splitlines():
            line = line.split("  #")[0].strip().removeprefix("$ ")
            if re.match(r"pipeplan (plan|partition) .*--export", line):
                commands.append(line)
    return commands


@pytest.mark.parametrize("command", _documented_commands())
def test_every_documented_export_command_runs_and_loads(command, tmp_path):
    argv = shlex.split(command)
    shutil.copytree(Path(__file__).parent.parent / "examples", tmp_path / "examples")  # the docs' spec files
    result = subprocess.run([sys.executable, "-m", *argv], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert result.returncode == 0, result.stderr
    for path in tmp_path.rglob("*"):
        if path.name == "megatron_args.sh":
            assert set(a for a in shlex.split(script_line([types.SimpleNamespace(name=path.name, text=path.read_text())]))
                       if a.startswith("--")) <= MEGATRON_FLAGS
        elif path.name == "schedule.csv":
            pipeplan.Schedule.from_csv(path.read_text()).validate()
        elif path.suffix == ".json":
            json.loads(path.read_text())
        elif path.suffix == ".toml":
            tomllib.loads(path.read_text())
        elif path.suffix == ".py":
            compile(path.read_text(), str(path), "exec")
