"""The torchtitan reader: pipeplan's own exports read back, users' TOML / Python configs, and torchtitan's verdicts.

The round trips and the reader's own checks run everywhere. The agreement with torchtitan
runs where torchtitan 0.3.0 is installed (the engines venv; skipped elsewhere):
``PYTHONPATH=src /work/engvenv/bin/python -m pytest -q tests/test_engines_torchtitan_read.py``.
0.3.0 reads no TOML, so each TOML case goes to its ``ConfigManager`` as the same
``--section.key value`` overrides (tyro parses them against 0.3.0's ``ParallelismConfig`` /
``TrainingConfig``, the fields the TOML release shares); the schedule name goes to torch's
``get_schedule_class``, where torchtitan looks it up. The cases also go, as files, to the TOML
release's own ``ConfigManager`` (its ``torchtitan/config`` and ``tools/logging.py`` run in a
subprocess), and benchmarks/torchtitan_toml_fields.py compares pipeplan's keys with it: torchtitan
0.2.2 installed beside the engines (``pip install --no-deps --target .venv/torchtitan-toml
torchtitan==0.2.2``; its config is e347b1e5e's, tests/_torchtitan_toml.py) or a checkout named by
``$PIPEPLAN_TORCHTITAN_TOML``; skipped without one, failed under ``PIPEPLAN_REQUIRE_ENGINES=1``. The keys pipeplan knows are
its own hand-written lists; with torchtitan 0.3.0 installed each is checked to be a field of its
config dataclasses with the type and default the reader applies, and no torchtitan field to be
refused as a near miss of one.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pipeplan import engines
from pipeplan.engines._torchtitan_schedules import TORCH_SCHEDULE_CLASSES
from pipeplan.engines.torchtitan_config import (IGNORED_KEYS, PYTHON_KEYS, SINGLE_STAGE_SCHEDULES, TOML_KEYS,
                                                llama3_spec, read_torchtitan_config, torchtitan_default_parts)
from pipeplan.errors import InvalidInputError
from pipeplan.plan import Plan
from pipeplan.schedules.patterns import loop_placement, v_placement

from _torchtitan_toml import toml_release

# ----------------------------------------------------------------- round trips
#: (schedule, pp, stages per rank): torch classes and one CSV order (zb-h1).
SHAPES = [("1f1b", 2, 1), ("gpipe", 4, 1), ("interleaved", 2, 2), ("zb-v", 2, 2), ("zb-h1", 4, 1)]


def _plan(schedule: str, pp: int, v: int, mode: str, tp: int, recompute: str, *, m: int = 8) -> Plan:
    stages = pp * v
    placement = v_placement(pp, 2) if schedule == "zb-v" else loop_placement(pp, v)
    dp = 16 if mode == "hsdp" else 2  # hsdp: more ranks than one node holds (inside one node it is fsdp)
    return Plan(pp=pp, dp=dp, tp=tp, layers_per_stage=tuple(2 + s % 2 for s in range(stages)), placement=placement,
                schedule=schedule, micro_batch_size=2, num_microbatches=m, dp_mode=mode,
                recompute=(recompute,) * stages, tokens_per_sample=512)


def _export(plan: Plan, target: str, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for file in engines.export_files(plan, target):
        (folder / file.name).write_text(file.text)
    return folder


def _fields(plan: Plan, v: int) -> dict:
    return dict(tp=plan.tp, pp=plan.pp, schedule=plan.schedule, micro_batch_size=plan.micro_batch_size,
                global_batch=plan.global_batch, num_microbatches=plan.num_microbatches, dp_mode=plan.dp_mode,
                recompute=plan.uniform_recompute, layers_per_stage=plan.layers_per_stage, virtual_stages=v,
                gpus=plan.num_gpus, seq_length=512)


@pytest.mark.parametrize("target", ["torchtitan", "torchtitan-toml"])
@pytest.mark.parametrize("recompute", ["none", "op", "full"])
@pytest.mark.parametrize("tp", [1, 2])
@pytest.mark.parametrize("mode", ["fsdp", "ddp", "hsdp"])
@pytest.mark.parametrize("shape", SHAPES, ids=[s[0] for s in SHAPES])
def test_export_reads_back_as_the_plan(shape, mode, tp, recompute, target, tmp_path):
    plan = _plan(*shape, mode, tp, recompute)
    config = engines.get("torchtitan").read(_export(plan, target, tmp_path))
    assert {name: config.value(name) for name in _fields(plan, shape[2])} == _fields(plan, shape[2])
    assert config.model is None and any("--preset or --spec" in note for note in config.notes)


@pytest.mark.parametrize("target, recompute, runs", [
    ("torchtitan-toml", "every:2", "every:2"), ("torchtitan-toml", "selective", "op"),
    # torchtitan's Python configs have no layer option: apply_plan() runs every:N as full (and says so)
    ("torchtitan", "every:3", "full"), ("torchtitan", "selective", "op")])
def test_recompute_reads_back_as_what_torchtitan_runs(target, recompute, runs, tmp_path):
    config = read_torchtitan_config(_export(_plan("1f1b", 2, 1, "fsdp", 1, recompute), target, tmp_path))
    assert config.value("recompute") == runs
    said = any("no layer option" in note for note in config.notes)
    assert said == (target == "torchtitan" and recompute.startswith("every:"))


@pytest.mark.parametrize("target", ["torchtitan", "torchtitan-toml"])
def test_without_a_pipeline_the_microbatches_are_accumulation_steps(target, tmp_path):
    plan = Plan(pp=1, dp=4, layers_per_stage=(10,), placement=(0,), schedule="1f1b", micro_batch_size=4,
                num_microbatches=3, dp_mode="fsdp", recompute=("full",))
    config = read_torchtitan_config(_export(plan, target, tmp_path))
    assert (config.value("micro_batch_size"), config.value("num_microbatches"), config.value("global_batch")) == (4, 3, 48)
    assert config.value("schedule") is None and config.value("pp") == 1


@pytest.mark.parametrize("mode", ["zero1", "zero2"])
def test_zero_modes_read_back_as_the_fsdp_torchtitan_runs(mode, tmp_path):
    config = read_torchtitan_config(_export(_plan("1f1b", 2, 1, mode, 1, "none"), "torchtitan-toml", tmp_path))
    assert config.value("dp_mode") == "fsdp"
    assert any("reshard_after_forward 'never'" in note for note in config.notes)


# ----------------------------------------------------------------- users' TOML files
NOT_A_KEY = "(not a key pipeplan knows; not priced)"


def _toml(tmp_path: Path, text: str, name: str = "train.toml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_llama3_8b_toml_gives_torchtitans_model_and_its_sources(tmp_path):
    path = _toml(tmp_path, """
        [model]
        name = "llama3"
        flavor = "8B"
        [training]
        local_batch_size = 8
        seq_len = 8192
        [parallelism]
        tensor_parallel_degree = 2
        pipeline_parallel_degree = 2
        data_parallel_shard_degree = 4
        pipeline_parallel_schedule = "Interleaved1F1B"
        [activation_checkpoint]
        mode = "full"
        [compile]
        enable = true
    """)
    config = read_torchtitan_config(path)
    assert config.value("tp") == 2 and config.source_of("tp") == "train.toml: [parallelism] tensor_parallel_degree = 2"
    assert (config.value("dp_mode"), config.value("gpus"), config.value("schedule")) == ("fsdp", 16, "interleaved")
    # local batch 8 through the pipeline as microbatches of 1 (torchtitan's default microbatch size)
    assert (config.value("micro_batch_size"), config.value("num_microbatches"), config.value("global_batch")) == (1, 8, 32)
    assert "torchtitan default" in config.source_of("micro_batch_size")
    assert config.value("recompute") == "full" and config.value("seq_length") == 8192
    assert config.ignored == () and config.value("compile") == "on"  # [compile] enable: the --compile knob
    # meta-llama/Llama-3.1-8B model.safetensors.index.json: total_size 16,060,522,496 bytes in bf16
    assert config.model is not None and config.model.num_parameters() == 16_060_522_496 // 2


def test_llama3_70b_has_its_published_size():
    # meta-llama/Llama-3.1-70B model.safetensors.index.json: total_size 141,107,412,992 bytes in bf16
    assert llama3_spec("70B", 2048).num_parameters() == 141_107_412_992 // 2


@pytest.mark.parametrize("schedule, per_stage, stages", [("Interleaved1F1B", None, 8), ("1F1B", None, 4),
                                                        ("Interleaved1F1B", 3, 12), ("ZBVZeroBubble", None, 8)])
def test_a_known_model_without_module_lists_gets_torchtitans_split(schedule, per_stage, stages, tmp_path):
    per = "" if per_stage is None else f"pipeline_parallel_layers_per_stage = {per_stage}\n"
    config = read_torchtitan_config(_toml(tmp_path, f'[model]\nflavor = "8B"\n[parallelism]\npipeline_parallel_degree = 4\n'
                                                    f'pipeline_parallel_schedule = "{schedule}"\n{per}'))
    split = config.value("layers_per_stage")
    assert config.value("virtual_stages") == stages // 4 and len(split) == stages
    assert sum(split) == 32 + 2  # the embedding, 32 decoder layers, the head


def test_a_split_torchtitan_refuses_is_refused(tmp_path):
    with pytest.raises(InvalidInputError, match="pipeline_parallel_layers_per_stage = 5"):
        # ⌈34 / 5⌉ = 7 stages: not a multiple of 4 ranks
        read_torchtitan_config(_toml(tmp_path, '[model]\nflavor = "8B"\n[parallelism]\npipeline_parallel_degree = 4\n'
                                               'pipeline_parallel_schedule = "Interleaved1F1B"\n'
                                               'pipeline_parallel_layers_per_stage = 5\n'))


def test_torch_schedules_pipeplan_lacks_leave_the_schedule_open(tmp_path):
    config = read_torchtitan_config(_toml(tmp_path, '[parallelism]\npipeline_parallel_degree = 2\n'
                                                    'pipeline_parallel_schedule = "DualPipeV"\n'))
    assert config.value("schedule") is None
    assert any("no schedule for torch's DualPipeV" in note for note in config.notes)


def test_head_python_config_in_tokens(tmp_path):
    path = tmp_path / "head.py"
    path.write_text(textwrap.dedent("""
        def cfg():
            return Trainer.Config(
                training=TrainingConfig(num_tokens_per_microbatch_per_dp_rank=8192, num_tokens_per_train_step=262144,
                                        max_context_length=4096),
                parallelism=ParallelismConfig(pipeline_parallel_degree=2, num_pp_microbatches=8,
                                              data_parallel_shard_degree=4, tensor_parallel_degree=1),
                activation_checkpoint=None,
            )
    """))
    config = read_torchtitan_config(path)
    assert (config.value("micro_batch_size"), config.value("global_batch"), config.value("num_microbatches")) == (2, 64, 8)
    assert (config.value("seq_length"), config.value("recompute"), config.value("gpus")) == (4096, "none", 8)


def test_unknown_model_gives_no_spec_and_says_what_to_give(tmp_path):
    config = read_torchtitan_config(_toml(tmp_path, '[model]\nname = "qwen3"\nflavor = "0.6B"\n'))
    assert config.model is None
    assert "give --preset or --spec: pipeplan has no spec for qwen3 0.6B" in config.notes


def test_selective_checkpointing_is_torchtitans_op_or_every_nth_block(tmp_path):
    config = read_torchtitan_config(_toml(tmp_path, '[activation_checkpoint]\nmode = "selective"\n'
                                                    'selective_ac_option = "3"\n'))
    assert config.value("recompute") == "every:3"
    op = read_torchtitan_config(_toml(tmp_path, '[activation_checkpoint]\nmode = "selective"\n'
                                                'selective_ac_option = "op"\n', "op.toml"))
    assert op.value("recompute") == "op"
    # the TOML release's default: selective, option "2"
    default = read_torchtitan_config(_toml(tmp_path, "[training]\nsteps = 10\n", "default.toml"))
    assert default.value("recompute") == "every:2" and "torchtitan default" in default.source_of("recompute")
    with pytest.raises(InvalidInputError, match="selective_ac_option must be"):
        read_torchtitan_config(_toml(tmp_path, '[activation_checkpoint]\nselective_ac_option = "some"\n', "x.toml"))


def test_unknown_keys_are_listed_and_near_misses_refused(tmp_path):
    config = read_torchtitan_config(_toml(tmp_path, """
        [parallelism]
        tensor_parallel_degree = 2
        my_own_knob = 1
        [nosuch]
        x = 1
        [checkpoint]
        enable = true
        [training.dataloader]
        num_workers = 2
    """))
    assert config.value("tp") == 2
    assert config.ignored == ("parallelism.my_own_knob = 1 " + NOT_A_KEY, "nosuch.x = 1 " + NOT_A_KEY,
                              "checkpoint.enable = true", "training.dataloader.num_workers = 2 " + NOT_A_KEY)
    for text, said in (("[parallelism]\ntensor_parallel_degre = 2\n", "did you mean tensor_parallel_degree"),
                       ("[paralelism]\ntensor_parallel_degree = 2\n", r"did you mean \[parallelism\]"),
                       ("[checkpoint]\nenabled = true\n", "did you mean enable"),
                       ("[parallelism]\nenable_sequence_parallel = true\n", "Python configs; its TOML release")):
        with pytest.raises(InvalidInputError, match=said):
            read_torchtitan_config(_toml(tmp_path, text, "typo.toml"))


@pytest.mark.parametrize("shard, replicate, mode", [(4, 1, "fsdp"), (4, 2, "hsdp"), (1, 4, "ddp"), (-1, 1, "fsdp")])
def test_degrees_give_the_data_parallel_mode(shard, replicate, mode, tmp_path):
    config = read_torchtitan_config(_toml(tmp_path, f"[parallelism]\ndata_parallel_shard_degree = {shard}\n"
                                                    f"data_parallel_replicate_degree = {replicate}\n"))
    assert config.value("dp_mode") == mode
    assert config.value("gpus") == (None if shard == -1 else shard * replicate)


def test_another_engines_file_is_refused_naming_its_option(tmp_path):
    ds = tmp_path / "ds_config.json"
    ds.write_text(json.dumps({"train_batch_size": 32, "zero_optimization": {"stage": 2}}))
    with pytest.raises(InvalidInputError, match="--deepspeed-config"):
        read_torchtitan_config(ds)
    line = tmp_path / "args.txt"
    line.write_text("--num-layers 24 --tensor-model-parallel-size 2\n")
    with pytest.raises(InvalidInputError, match="--megatron-args"):
        read_torchtitan_config(line)


def test_python_config_reads_literal_keywords_and_names_the_rest(tmp_path):
    path = tmp_path / "my_config.py"
    path.write_text(textwrap.dedent("""
        from torchtitan.config.configs import ParallelismConfig, TrainingConfig
        from torchtitan.distributed.activation_checkpoint import FullAC
        DEGREE = compute()

        def my_config():
            return Trainer.Config(
                parallelism=ParallelismConfig(tensor_parallel_degree=4, pipeline_parallel_degree=DEGREE,
                                              data_parallel_shard_degree=2),
                training=TrainingConfig(local_batch_size=4, global_batch_size=64, seq_len=4096),
                activation_checkpoint=FullAC.Config(),
            )
    """))
    config = read_torchtitan_config(path)
    assert (config.value("tp"), config.value("recompute"), config.value("seq_length")) == (4, "full", 4096)
    assert config.value("pp") is None
    assert any("pipeline_parallel_degree" in note and "no literal" in note for note in config.notes)
    path.write_text("c = ParallelismConfig(tensor_parallel_degree='2')\n")
    with pytest.raises(InvalidInputError, match="tensor_parallel_degree.* is not int"):
        read_torchtitan_config(path)
    path.write_text("c = ParallelismConfig(tensor_parallel_degre=2)\n")
    with pytest.raises(InvalidInputError, match="'tensor_parallel_degre'.*did you mean tensor_parallel_degree"):
        read_torchtitan_config(path)
    path.write_text("c = ParallelismConfig(tensor_parallel_degree=2, spmd_backend='x', my_own_knob=3)\n")
    assert read_torchtitan_config(path).ignored == ("parallelism.spmd_backend = \"x\" " + NOT_A_KEY,
                                                    "parallelism.my_own_knob = 3 " + NOT_A_KEY)


# ----------------------------------------------------------------- torchtitan's verdicts
#: (TOML text, the same as 0.3.0 CLI overrides or None where 0.3.0 has no such field): each torchtitan
#: accepts or refuses; the reader must agree.
CASES = {
    "known keys": ("[parallelism]\ntensor_parallel_degree = 2\npipeline_parallel_degree = 2\n"
                   "[training]\nlocal_batch_size = 4\nseq_len = 1024\n",
                   ["--parallelism.tensor_parallel_degree", "2", "--parallelism.pipeline_parallel_degree", "2",
                    "--training.local_batch_size", "4", "--training.seq_len", "1024"]),
    "unknown section": ("[nosuch]\nx = 1\n", ["--nosuch.x", "1"]),
    "unknown key far from any": ("[parallelism]\nmy_own_knob = 1\n", ["--parallelism.my_own_knob", "1"]),
    "unknown key": ("[parallelism]\ntensor_parallel_degre = 2\n", ["--parallelism.tensor_parallel_degre", "2"]),
    "unknown training key": ("[training]\nlocal_batchsize = 2\n", ["--training.local_batchsize", "2"]),
    "string for int": ('[parallelism]\ntensor_parallel_degree = "two"\n',
                       ["--parallelism.tensor_parallel_degree", "two"]),
    "literal outside its choices": ('[training]\nmixed_precision_param = "float8"\n',
                                    ["--training.mixed_precision_param", "float8"]),
    "literal inside": ('[training]\nmixed_precision_param = "float32"\n',
                       ["--training.mixed_precision_param", "float32"]),
    "reshard choice": ('[parallelism]\nfsdp_reshard_after_forward = "never"\n',
                       ["--parallelism.fsdp_reshard_after_forward", "never"]),
    "reshard outside its choices": ('[parallelism]\nfsdp_reshard_after_forward = "sometimes"\n',
                                    ["--parallelism.fsdp_reshard_after_forward", "sometimes"]),
    "torch schedule": ('[parallelism]\npipeline_parallel_schedule = "ZBVZeroBubble"\n',
                       ["--parallelism.pipeline_parallel_schedule", "ZBVZeroBubble"]),
    "schedule in other case": ('[parallelism]\npipeline_parallel_schedule = "gpipe"\n',
                               ["--parallelism.pipeline_parallel_schedule", "gpipe"]),
    "schedule torch lacks": ('[parallelism]\npipeline_parallel_degree = 2\npipeline_parallel_schedule = "ZB2P"\n',
                             ["--parallelism.pipeline_parallel_degree", "2",
                              "--parallelism.pipeline_parallel_schedule", "ZB2P"]),
    "schedule torch lacks beside a CSV": ('[parallelism]\npipeline_parallel_degree = 2\npipeline_parallel_schedule = "ZB2P"\n'
                                          'pipeline_parallel_schedule_csv = "order.csv"\n',
                                          ["--parallelism.pipeline_parallel_degree", "2",
                                           "--parallelism.pipeline_parallel_schedule", "ZB2P",
                                           "--parallelism.pipeline_parallel_schedule_csv", "order.csv"]),
    "any schedule name without a pipeline": ('[parallelism]\npipeline_parallel_schedule = "ZB2P"\n',
                                             ["--parallelism.pipeline_parallel_schedule", "ZB2P"]),
}


#: Cases torchtitan refuses (its ``JobConfig`` has no such key) that the reader lists in ``ignored``,
#: "(not a key pipeplan knows; not priced)", instead of refusing: pipeplan keeps no table of every
#: torchtitan key, only the keys it prices and a few it ignores, so it refuses a near miss of one of
#: those (a typo) and lists any other key; torchtitan itself refuses the file when it runs.
LISTED = {"unknown section", "unknown key far from any"}


def _reader_accepts(text: str, tmp_path: Path) -> bool:
    try:
        read_torchtitan_config(_toml(tmp_path, text, "case.toml"))
    except InvalidInputError as error:
        assert "\n" not in str(error)
        return False
    return True


def _agrees(case: str, torchtitan_accepts: bool, tmp_path: Path) -> None:
    """The reader's verdict on ``case`` is torchtitan's; a LISTED case is read, its unknown key listed."""
    text = CASES[case][0]
    if case in LISTED:
        assert not torchtitan_accepts
        config = read_torchtitan_config(_toml(tmp_path, text, "case.toml"))
        assert len(config.ignored) == 1 and config.ignored[0].endswith(NOT_A_KEY)
    else:
        assert _reader_accepts(text, tmp_path) == torchtitan_accepts


def _torchtitan_030_accepts(overrides: list[str]) -> bool:
    """torchtitan 0.3.0's ConfigManager on the overrides, then torch's lookup of the schedule it names.

    ``--training.disable_cuda_graphs``: 0.3.0 refuses CUDA graphs with a pipeline, a field the TOML
    release does not have (nothing a TOML file could say).
    """
    from torch.distributed.pipelining.schedules import get_schedule_class
    from torchtitan.config.manager import ConfigManager

    try:
        config = ConfigManager().parse_args(["--module", "llama3", "--config", "llama3_debugmodel",
                                              "--training.disable_cuda_graphs", *overrides])
        if config.parallelism.pipeline_parallel_degree > 1:  # torchtitan builds a schedule for a pipeline only
            get_schedule_class(config.parallelism.pipeline_parallel_schedule)
    except (SystemExit, ValueError):
        return False
    return True


@pytest.mark.parametrize("case", list(CASES))
def test_reader_accepts_what_torchtitan_accepts(case, tmp_path, monkeypatch, capsys):
    pytest.importorskip("torchtitan", reason="torchtitan is not installed (pip install .[engines])")
    monkeypatch.chdir(tmp_path)
    _agrees(case, _torchtitan_030_accepts(CASES[case][1]), tmp_path)


_TOML_PROBE = """
import json, sys, warnings
sys.path.insert(0, sys.argv[1])
from torchtitan.config.manager import ConfigManager
from torch.distributed.pipelining.schedules import get_schedule_class
verdicts = {}
for path in sys.argv[2:]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            config = ConfigManager().parse_args(["--job.config_file", path])
            if config.parallelism.pipeline_parallel_degree > 1:
                get_schedule_class(config.parallelism.pipeline_parallel_schedule)
            ok = True
        except ValueError:
            ok = False
    # tyro's word for a value whose type is not its field's: torchtitan runs on and fails later
    verdicts[path] = ok and not any("is annotated with type" in str(w.message) for w in caught)
print(json.dumps(verdicts))
"""


@pytest.fixture(scope="module")
def toml_release_verdicts(tmp_path_factory) -> dict[str, bool]:
    """Each case's verdict from the TOML release's own ConfigManager (one subprocess for all)."""
    pytest.importorskip("torchtitan", reason="torchtitan is not installed (pip install .[engines])")
    tree = toml_release()
    root = tmp_path_factory.mktemp("toml_release")
    package = root / "release" / "torchtitan"
    shutil.copytree(tree / "torchtitan" / "config", package / "config")
    (package / "tools").mkdir()
    shutil.copy(tree / "torchtitan" / "tools" / "logging.py", package / "tools" / "logging.py")
    (package / "__init__.py").write_text("")
    paths = {case: _toml(root, text, f"case{index}.toml") for index, (case, (text, _)) in enumerate(CASES.items())}
    out = subprocess.run([sys.executable, "-c", _TOML_PROBE, str(package.parent), *map(str, paths.values())],
                         capture_output=True, text=True, cwd=root, timeout=600)
    verdicts = json.loads(out.stdout.strip().splitlines()[-1])
    return {case: verdicts[str(path)] for case, path in paths.items()}


@pytest.mark.parametrize("case", list(CASES))
def test_reader_accepts_what_the_toml_release_accepts(case, toml_release_verdicts, tmp_path):
    _agrees(case, toml_release_verdicts[case], tmp_path)


@pytest.mark.parametrize("text", ["[training]\nlocal_batch_size = true\n", "[training]\nlocal_batch_size = 2.5\n",
                                  "[parallelism]\npipeline_parallel_schedule = 3\n", "parallelism = 3\n"])
def test_reader_refuses_values_the_toml_releases_tyro_lets_through(text, tmp_path):
    """Where the TOML release passes a value of the wrong type on without a word (bool and float are
    taken for an int, an int for a str, a number for a section: tyro checks a default's type only
    against str), the run fails later; the reader says so now, naming the key."""
    with pytest.raises(InvalidInputError, match="train.toml: "):
        read_torchtitan_config(_toml(tmp_path, text))


def test_default_split_and_single_stage_schedules_are_torchtitan_030s():
    pytest.importorskip("torchtitan", reason="torchtitan is not installed (pip install .[engines])")
    from torch.distributed.pipelining.schedules import PipelineScheduleSingle, get_schedule_class
    from torchtitan.distributed.pipeline_parallel import _generate_llm_fqn_per_model_part

    single = {name for name in TORCH_SCHEDULE_CLASSES if issubclass(get_schedule_class(name), PipelineScheduleSingle)}
    assert single == set(SINGLE_STAGE_SCHEDULES)
    for layers in (2, 6, 32, 80, 126):
        for stages in (1, 2, 3, 4, 8, 16):
            for first, last in ((1, 1), (2, 1), (1, 2)):
                try:
                    theirs = [["output" if m == "lm_head" else m for m in part]
                              for part in _generate_llm_fqn_per_model_part(stages, layers, first, last)]
                except ValueError:
                    with pytest.raises(InvalidInputError):
                        torchtitan_default_parts(stages, layers, first, last)
                    continue
                assert torchtitan_default_parts(stages, layers, first, last) == theirs, (layers, stages, first, last)


def _annotation(kind: object) -> str:
    """A dataclass field's type as job_config.py writes it: ``int``, ``Literal['a', 'b']``, ``str | None``."""
    return kind.__name__ if isinstance(kind, type) else repr(kind).replace("typing.", "")


#: Keys pipeplan knows whose default it applies for the TOML release but 0.3.0 has in another form
#: (0.3.0, PyPI: torchtitan/trainer.py Trainer.Config; e347b1e5e: torchtitan/config/job_config.py).
DIFFERS_IN_030 = {
    # 0.3.0 has no [model] section: the model is the config function --module / --config name
    "model.name": "no [model] section", "model.flavor": "no [model] section",
    # 0.3.0 picks a class (FullAC, SelectiveAC, MemoryBudgetAC; default SelectiveAC.Config, per-op)
    # where the TOML release has a mode string and a layer option
    "activation_checkpoint.mode": "a class, not a mode", "activation_checkpoint.selective_ac_option": "no layer option",
    # 0.3.0 moved it to CompileConfig (PYTHON_KEYS' compile.enable_async_tensor_parallel)
    "parallelism.enable_async_tensor_parallel": "in compile",
}


def _030_sections() -> dict[str, object]:
    from torchtitan.trainer import Trainer

    config = Trainer.Config()
    return {field.name: getattr(config, field.name) for field in dataclasses.fields(config)}


def test_the_keys_the_reader_prices_are_torchtitan_030s_with_its_defaults():
    """Each key of TOML_KEYS is a field of 0.3.0's config dataclasses, with the type and default pipeplan
    applies, but for DIFFERS_IN_030 (checked to be so); PYTHON_KEYS' 0.3.0 fields have their types."""
    pytest.importorskip("torchtitan", reason="torchtitan is not installed (pip install .[engines])")
    from torchtitan.distributed.activation_checkpoint import SelectiveAC

    sections = _030_sections()
    assert "model" not in sections and isinstance(sections["activation_checkpoint"], SelectiveAC.Config)
    assert not hasattr(sections["activation_checkpoint"], "selective_ac_option")
    for key, (annotation, default) in TOML_KEYS.items():
        section, name = key.split(".")
        if key in DIFFERS_IN_030:
            continue
        fields = {field.name: field for field in dataclasses.fields(sections[section])}
        assert name in fields, key
        assert _annotation(fields[name].type) == annotation, key
        assert getattr(sections[section], name) == default, key
    head_only = {"num_pp_microbatches", "max_context_length", "num_tokens_per_microbatch_per_dp_rank",
                 "num_tokens_per_train_step"}  # torchtitan HEAD b5bcd76c (tests/data/torchtitan_fields.json)
    head = json.loads((Path(__file__).parent / "data" / "torchtitan_fields.json").read_text())["head"]
    for key, annotation in PYTHON_KEYS.items():
        section, name = key.split(".")
        fields = {field.name: field for field in dataclasses.fields(sections[section])}
        if name in head_only:
            assert name in head[section] and name not in fields, key
        else:
            assert _annotation(fields[name].type) == annotation, key


def test_no_key_of_torchtitan_is_refused_as_a_near_miss(tmp_path):
    """Every field of 0.3.0's parallelism / training / compile configs, set in a TOML file (the TOML
    release's names too, tests/data/torchtitan_fields.json) or a Python config, is read or listed."""
    pytest.importorskip("torchtitan", reason="torchtitan is not installed (pip install .[engines])")
    data = json.loads((Path(__file__).parent / "data" / "torchtitan_fields.json").read_text())
    sections = _030_sections()
    names = {section: {field.name for field in dataclasses.fields(sections[section])}
             for section in ("parallelism", "training", "compile")}
    for release in ("toml", "head"):
        for section, keys in data[release].items():
            names.setdefault(section, set()).update(keys)
    for section, keys in names.items():
        for name in sorted(keys - {key.split(".")[1] for key in TOML_KEYS}):
            if f"{section}.{name}" in PYTHON_KEYS or name == "dataloader":
                continue
            read_torchtitan_config(_toml(tmp_path, f"[{section}]\n{name} = 1\n", "probe.toml"))
            if section in ("parallelism", "training"):
                (tmp_path / "probe.py").write_text(f"c = {section.title()}Config({name}=1)\n")
                try:
                    read_torchtitan_config(tmp_path / "probe.py")
                except InvalidInputError as error:  # a key it reads, of another type: not a near miss
                    assert "did you mean" not in str(error), (section, name)


def test_the_keys_pipeplan_knows_are_the_toml_releases(tmp_path):
    """benchmarks/torchtitan_toml_fields.py finds no difference on the TOML release (tests/_torchtitan_toml.py)."""
    tree = toml_release()
    root = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, str(root / "benchmarks" / "torchtitan_toml_fields.py"), str(tree)],
                         capture_output=True, text=True, timeout=600,
                         env={**os.environ, "PYTHONPATH": str(root / "src")})
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_ignored_keys_are_the_toml_releases():
    """The keys pipeplan lists as ignored in the sections tests/data/torchtitan_fields.json holds of
    e347b1e5e are that release's (the benchmark checks them all against a checkout)."""
    toml = json.loads((Path(__file__).parent / "data" / "torchtitan_fields.json").read_text())["toml"]
    for key in IGNORED_KEYS:
        section, name = key.split(".", 1)
        if section in toml:
            assert name in toml[section], key


def test_the_exported_python_config_is_what_torchtitan_loads(tmp_path, monkeypatch):
    """What the reader reads from the Python export is what torchtitan 0.3.0 builds from it."""
    pytest.importorskip("torchtitan", reason="torchtitan is not installed (pip install .[engines])")
    from torchtitan.config.manager import ConfigManager

    plan = _plan("interleaved", 2, 2, "hsdp", 2, "full")
    folder = _export(plan, "torchtitan", tmp_path / "out")
    read = read_torchtitan_config(folder)
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.delitem(sys.modules, "torchtitan_config", raising=False)
    assert importlib.util.find_spec("torchtitan_config") is not None
    built = ConfigManager().parse_args(["--module", "torchtitan_config", "--config", "pipeplan_config"])
    par = built.parallelism
    assert (par.tensor_parallel_degree, par.pipeline_parallel_degree) == (read.value("tp"), read.value("pp"))
    assert par.pipeline_parallel_microbatch_size == read.value("micro_batch_size")
    assert par.data_parallel_shard_degree * par.data_parallel_replicate_degree * par.tensor_parallel_degree * \
        par.pipeline_parallel_degree == read.value("gpus")
    assert built.training.global_batch_size == read.value("global_batch")
