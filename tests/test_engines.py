"""Exports, checked against what Megatron-LM, DeepSpeed and torch accept."""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

import pipeplan
from pipeplan import InvalidInputError, build_schedule
from pipeplan import engines
from pipeplan.engines import export_plan
from pipeplan.engines.deepspeed import deepspeed_config, deepspeed_parts, deepspeed_snippet
from pipeplan.engines.megatron import megatron_args, megatron_layout
from pipeplan.engines.pipelining import torch_actions, torch_schedule_csv, torch_split_snippet, torch_split_spec
from pipeplan.engines.torchtitan import torchtitan_schedule_name, torchtitan_toml
from pipeplan.layers import LayerProfile
from pipeplan.partition.placement import place_chunks
from pipeplan.planner import Plan

# Flags that set batch sizes and recompute, not the split (checked on their own below).
_NON_SPLIT = {"--micro-batch-size", "--global-batch-size", "--recompute-granularity", "--recompute-method",
              "--recompute-num-layers"}


def split_flags(args: list[str]) -> list[str]:
    """The pipeline-split part of Megatron arguments (flags and values in order)."""
    out = []
    pairs = list(zip(args[::2], args[1::2]))
    for flag, value in pairs:
        if flag not in _NON_SPLIT:
            out += [flag, value]
    return out


# ------------------------------------------------------------------ Megatron
def parse_megatron_layout(text: str, pipeline_size: int, num_layers: int) -> list[list[str]]:
    """The grammar and checks of Megatron-LM's PipelineParallelLayerLayout.

    Mirrors ``parse_str_to_list`` (commas dropped, ``(..)*n`` then ``x*n``
    unrolled, stages split on ``|``, symbols E/L/t/m) and
    ``validate_layer_layout`` (stage count a multiple of PP, embedding first and
    once, loss last and once, as many ``t`` as ``--num-layers``).
    """
    text = text.replace(",", "")
    text = re.sub(r"\(([^)]+)\)\*(\d+)", lambda m: m.group(1) * int(m.group(2)), text)
    text = re.sub(r"(.)\*(\d+)", lambda m: m.group(1) * int(m.group(2)), text)
    stages = [list(stage) for stage in text.split("|")]
    assert all(symbol in "ELtm" for stage in stages for symbol in stage)
    assert len(stages) % pipeline_size == 0
    flat = [symbol for stage in stages for symbol in stage]
    assert flat[0] == "E" and flat.count("E") == 1
    assert flat[-1] == "L" and flat.count("L") == 1
    assert flat.count("t") == num_layers
    return stages


def megatron_split(args: list[str]) -> list[int]:
    """Decoder layers per pipeline rank as Megatron's TransformerConfig derives them."""
    values = dict(zip(args[::2], args[1::2]))
    pp = int(values["--pipeline-model-parallel-size"])
    layers = int(values["--num-layers"])
    first = values.get("--decoder-first-pipeline-num-layers")
    last = values.get("--decoder-last-pipeline-num-layers")
    middle_ranks, middle_layers = pp, layers
    if first is not None:
        assert int(first) > 0
        middle_ranks, middle_layers = middle_ranks - 1, middle_layers - int(first)
    if last is not None:
        assert int(last) > 0
        middle_ranks, middle_layers = middle_ranks - 1, middle_layers - int(last)
    if middle_ranks:
        assert middle_layers % middle_ranks == 0  # Megatron raises otherwise
    share = middle_layers // middle_ranks if middle_ranks else 0
    split = [share] * pp
    if first is not None:
        split[0] = int(first)
    if last is not None:
        split[-1] = int(last)
    return split


def test_lesson16_plan_uses_first_and_last_flags():
    plan = pipeplan.partition_layers([2.0] * 32, 4, pipeplan.PartitionOptions(first_extra=16, last_extra=8))
    args = megatron_args(plan)
    assert args == [
        "--pipeline-model-parallel-size", "4", "--num-layers", "32",
        "--decoder-first-pipeline-num-layers", "3", "--decoder-last-pipeline-num-layers", "7",
        "--micro-batch-size", "1", "--global-batch-size", "4",  # m defaults to S in the partitioner
        "--bf16",  # the mixed precision the step model prices
    ]
    assert megatron_split(args) == [3, 11, 11, 7]


def test_flags_only_where_needed():
    assert split_flags(megatron_args([8, 8, 8, 8])) == ["--pipeline-model-parallel-size", "4", "--num-layers", "32"]
    args = megatron_args([6, 9, 9, 9])
    assert "--decoder-last-pipeline-num-layers" not in args
    assert megatron_split(args) == [6, 9, 9, 9]
    assert megatron_split(megatron_args([5, 3])) == [5, 3]


def test_uneven_middle_needs_the_layout():
    args = split_flags(megatron_args([3, 10, 12, 7]))
    assert args[:4] == ["--pipeline-model-parallel-size", "4", "--num-layers", "32"]
    assert args[4] == "--pipeline-model-parallel-layout"
    stages = parse_megatron_layout(args[5], 4, 32)
    assert [stage.count("t") for stage in stages] == [3, 10, 12, 7]


def test_interleaved_layout_lists_virtual_stage_zero_first():
    plan = pipeplan.partition_layers([1.0] * 19, 4, pipeplan.PartitionOptions(schedule="interleaved", schedule_options={"virtual_stages": 2}))
    assert plan.placement == (0, 1, 0, 1)
    args = megatron_args(plan)
    layout = args[args.index("--pipeline-model-parallel-layout") + 1]
    stages = parse_megatron_layout(layout, 2, 19)
    assert [stage.count("t") for stage in stages] == list(plan.layers_per_stage)


def test_equal_chunks_use_layers_per_virtual_stage():
    plan = pipeplan.partition_layers([1.0] * 20, 4, pipeplan.PartitionOptions(schedule="interleaved", schedule_options={"virtual_stages": 2}))
    args = dict(pairwise(megatron_args(plan)))
    # Megatron-LM: virtual stages per rank = num_layers / pp / layers per virtual stage
    assert args["--num-layers-per-virtual-pipeline-stage"] == "5"
    assert int(args["--num-layers"]) // int(args["--pipeline-model-parallel-size"]) // 5 == 2


def pairwise(args: list[str]) -> list[tuple[str, str]]:
    return list(zip(args[::2], args[1::2]))


def test_batch_and_recompute_flags():
    plan = Plan(pp=2, dp=4, layers_per_stage=(4, 4), placement=(0, 1), micro_batch_size=2, num_microbatches=8,
                recompute=("full", "none"))
    args = dict(pairwise(megatron_args(plan)))
    # Megatron derives m = global / (micro × dp) = 64 / (2 × 4) = 8
    assert (args["--micro-batch-size"], args["--global-batch-size"]) == ("2", "64")
    assert args["--recompute-granularity"] == "full" and args["--recompute-method"] == "uniform"
    assert args["--recompute-num-layers"] == "1"
    assert "recomputes per stage" in engines.get("megatron").notes(plan)[0]
    selective = Plan(pp=1, dp=8, layers_per_stage=(8,), placement=(0,), recompute=("selective",))
    assert dict(pairwise(megatron_args(selective)))["--recompute-granularity"] == "selective"
    assert engines.get("megatron").notes(selective) == []


def test_embedding_and_loss_layers_are_detected_from_the_profile():
    profile = LayerProfile.from_transformer(
        num_layers=6, hidden_size=64, num_heads=4, seq_length=16, micro_batch_size=1,
        throughput=1e12, vocab_size=50000,
    )
    plan = pipeplan.partition_layers(profile, 3)
    layout = megatron_layout(plan)
    stages = parse_megatron_layout(layout, 3, 6)
    assert sum(len(stage) for stage in stages) == profile.num_layers  # E and L replace their layers
    assert [len(stage) for stage in stages] == list(plan.layers_per_stage)


def test_megatron_rejects_a_custom_placement():
    v_shape = Plan(pp=2, dp=1, layers_per_stage=(3, 3, 3, 3), placement=(0, 1, 1, 0), schedule="interleaved")
    with pytest.raises(InvalidInputError, match="s mod P"):
        megatron_args(v_shape)
    with pytest.raises(InvalidInputError, match="1F1B and interleaved 1F1B only"):
        megatron_args(Plan(pp=2, dp=1, layers_per_stage=(3, 3), placement=(0, 1), schedule="zb-h1"))
    with pytest.raises(InvalidInputError, match="expected a Plan"):
        megatron_args(SimpleNamespace(layers_per_stage=(3, 3), placement=(0, 1)))


# ------------------------------------------------------------------ DeepSpeed
def test_deepspeed_parts_and_snippet():
    plan = pipeplan.partition_layers([2.0] * 32, 4, pipeplan.PartitionOptions(first_extra=16, last_extra=8))
    assert deepspeed_parts(plan) == [0, 3, 14, 25, 32]
    # an embedding spec before the profiled layers and a loss lambda after them
    assert deepspeed_parts(plan, offset=1, trailing=1) == [0, 4, 15, 26, 34]
    code = deepspeed_snippet(plan)
    compile(code, "<deepspeed>", "exec")
    assert "PIPEPLAN_PARTS = [0, 3, 14, 25, 32]" in code
    assert "self._set_bounds(start=self.parts[stage_id], stop=self.parts[stage_id + 1])" in code
    with pytest.raises(InvalidInputError, match="one stage per rank"):
        deepspeed_parts(place_chunks([1.0] * 8, 2, 2))


def test_deepspeed_snippet_runs_against_a_stand_in_module():
    plan = pipeplan.partition_layers([1.0, 5.0, 1.0, 1.0, 1.0], 2)

    class Topology:
        def get_coord(self, rank):
            return type("Coord", (), {"pipe": rank})()

        def get_dim(self, name):
            return 2

    class PipelineModule:  # what the snippet touches of deepspeed's class
        def __init__(self, rank):
            self._topo, self.global_rank, self._layer_specs = Topology(), rank, list(range(5))

        def _set_bounds(self, start=None, stop=None):
            self._local_start, self._local_stop = start, stop

    code = deepspeed_snippet(plan).replace("from deepspeed.pipe import PipelineModule", "")
    namespace = {"PipelineModule": PipelineModule}
    exec(code, namespace)  # noqa: S102 - our own generated code
    module = namespace["PlannedPipelineModule"](1)
    module._partition_layers()
    assert (module._local_start, module._local_stop) == (plan.boundaries[1], 5)


# ---------------------------------------------------------------------- torch
def test_split_spec_names_the_first_layer_of_each_later_stage():
    profile = LayerProfile([1.0] * 6, names=[f"blocks.{i}" for i in range(6)])
    plan = pipeplan.partition_layers(profile, 3)
    spec = torch_split_spec(plan)
    assert spec == {f"blocks.{plan.boundaries[1]}": "BEGINNING", f"blocks.{plan.boundaries[2]}": "BEGINNING"}
    code = torch_split_snippet(plan)
    compile(code, "<torch>", "exec")
    with pytest.raises(InvalidInputError, match="names has 2 entries"):
        torch_split_spec(plan, ["a", "b"])


def test_split_spec_feeds_torch_pipeline():
    torch = pytest.importorskip("torch")
    from torch.distributed.pipelining import SplitPoint, pipeline

    model = torch.nn.Sequential(*[torch.nn.Linear(4, 4) for _ in range(5)])
    names = [name for name, _ in model.named_children()]
    plan = pipeplan.partition_layers([1.0, 3.0, 1.0, 1.0, 2.0], 3)
    spec = {name: getattr(SplitPoint, point) for name, point in torch_split_spec(plan, names).items()}
    pipe = pipeline(model, mb_args=(torch.randn(2, 4),), split_spec=spec)
    assert pipe.num_stages == 3
    sizes = [len(list(pipe.get_stage_module(s).parameters())) // 2 for s in range(3)]
    assert tuple(sizes) == plan.layers_per_stage


@pytest.mark.parametrize(
    "name,options",
    [
        ("1f1b", {}),
        ("gpipe", {}),
        ("zb-h1", {}),
        ("interleaved", {"virtual_stages": 2}),
    ],
)
def test_torch_parses_and_validates_every_action(name, options):
    pytest.importorskip("torch")
    from torch.distributed.pipelining.schedules import _Action, _validate_schedule

    num_stages = 4
    schedule = build_schedule(name, num_stages=num_stages, num_microbatches=4, **options)
    text = torch_schedule_csv(schedule)
    rows = list(csv.reader(io.StringIO(text)))
    assert len(rows) == schedule.num_ranks
    actions = {rank: [_Action.from_str(cell) for cell in row] for rank, row in enumerate(rows)}
    for rank, parsed in actions.items():
        assert [str(a) for a in parsed] == rows[rank]  # torch's repr round-trips our strings
    mapping = _validate_schedule(actions, schedule.num_ranks, num_stages, 4)
    assert tuple(mapping[s] for s in range(num_stages)) == schedule.placement


def test_custom_placement_schedule_csv_is_accepted_by_torch():
    pytest.importorskip("torch")
    from torch.distributed.pipelining.schedules import _Action, _validate_schedule

    profile = LayerProfile.from_costs([40.0] + [2.0] * 15)
    plan = place_chunks(profile, 2, 2)
    costs = profile.stage_costs(plan.layers_per_stage)
    schedule = build_schedule("adaptive", num_stages=4, num_microbatches=4, costs=costs, placement=plan.placement)
    rows = torch_actions(schedule)
    actions = {rank: [_Action.from_str(cell) for cell in row] for rank, row in enumerate(rows)}
    mapping = _validate_schedule(actions, 2, 4, 4)
    assert tuple(mapping[s] for s in range(4)) == plan.placement
    if schedule.split_backward:
        assert any("I" in cell for row in rows for cell in row)


# ------------------------------------------------------- DeepSpeed config
# deepspeed/runtime/constants.py and runtime/activation_checkpointing/config.py: the keys we may write.
DEEPSPEED_KEYS = {"train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
                  "activation_checkpointing", "zero_optimization", "bf16", "gradient_clipping"}
DEEPSPEED_CHECKPOINT_KEYS = {"partition_activations", "contiguous_memory_optimization", "cpu_checkpointing",
                             "number_checkpoints", "synchronize_checkpoint_boundary", "profile"}


def test_deepspeed_config_satisfies_its_batch_assertion():
    plan = Plan(pp=4, dp=2, layers_per_stage=(2, 2, 2, 2), placement=(0, 1, 2, 3), micro_batch_size=4,
                num_microbatches=8, recompute=("full",) * 4)
    config = deepspeed_config(plan)
    assert set(config) <= DEEPSPEED_KEYS
    assert set(config["activation_checkpointing"]) <= DEEPSPEED_CHECKPOINT_KEYS
    # DeepSpeedConfig._batch_assertion: train_batch = micro × grad_acc × data-parallel world size
    assert config["train_batch_size"] == (config["train_micro_batch_size_per_gpu"]
                                          * config["gradient_accumulation_steps"] * plan.dp) == 64
    assert "ACTIVATION_CHECKPOINT_INTERVAL = 1" in deepspeed_snippet(plan)
    with pytest.raises(InvalidInputError, match="its own 1F1B-like schedule"):
        deepspeed_config(Plan(pp=2, dp=1, layers_per_stage=(2, 2), placement=(0, 1), schedule="zb-h1"))


# ------------------------------------------------------------- torchtitan
# torchtitan's config field names (tests/data/torchtitan_fields.json: the last TOML release, e347b1e5e).
TORCHTITAN_KEYS = {section: set(keys) for section, keys in json.loads(
    (Path(__file__).parent / "data" / "torchtitan_fields.json").read_text())["toml"].items()}


def planned(schedule: str, virtual: int = 1, micro: int = 8):
    from _planner_models import gpt_workload, make_cluster
    from pipeplan.planner import Config, evaluate_layout

    workload = gpt_workload(num_layers=8, hidden=256, heads=4, seq=128, micro_batch_sizes=(2,))
    config = Config(pp=2, dp=2, micro_batch_size=2, num_microbatches=micro, schedule=schedule,
                    virtual_stages=virtual, recompute="selective")
    sizes = (8 // (2 * virtual),) * (2 * virtual)
    return evaluate_layout(workload, make_cluster(4, 80e9), config, sizes)


def check_torchtitan(plan: Plan) -> dict:
    """Parse the TOML and apply torchtitan's own checks (pipeline_parallel.py at e347b1e5e)."""
    import tomllib

    torch = pytest.importorskip("torch")
    from torch.distributed.pipelining.schedules import (
        ScheduleDualPipeV, ScheduleZBVZeroBubble, get_schedule_class,
    )

    toml = tomllib.loads(torchtitan_toml(plan))
    for section, keys in toml.items():
        assert set(keys) <= TORCHTITAN_KEYS[section]
    par, training = toml["parallelism"], toml["training"]
    schedule_class = get_schedule_class(par["pipeline_parallel_schedule"])  # raises on an unknown name
    assert training["local_batch_size"] % par["pipeline_parallel_microbatch_size"] == 0
    assert training["local_batch_size"] // par["pipeline_parallel_microbatch_size"] == plan.num_microbatches
    assert training["global_batch_size"] == training["local_batch_size"] * plan.dp
    parts = par["module_fqns_per_model_part"]
    assert [len(p) for p in parts] == list(plan.layers_per_stage)
    assert [name for part in parts for name in part] == list(plan.layer_names)
    pp, stages = par["pipeline_parallel_degree"], len(parts)
    style = "v" if schedule_class in (ScheduleZBVZeroBubble, ScheduleDualPipeV) else "loop"
    if style == "loop":
        placement = tuple(s % pp for s in range(stages))
    else:
        placement = tuple(s if s < pp else 2 * pp - 1 - s for s in range(stages))
    assert placement == plan.placement
    assert toml["activation_checkpoint"]["mode"] in ("none", "selective", "full")
    del torch
    return toml


@pytest.mark.parametrize("schedule,virtual,csv_needed", [
    ("1f1b", 1, False), ("interleaved", 2, False), ("zb-v", 2, False), ("zb-h1", 1, True), ("adaptive", 1, True),
    ("adaptive", 2, True),  # the cost-aware order over chunks in a loop: Interleaved1F1B places them, the CSV orders
])
def test_torchtitan_toml_passes_torchtitan_checks(schedule, virtual, csv_needed):
    plan = planned(schedule, virtual)
    toml = check_torchtitan(plan)
    assert ("pipeline_parallel_schedule_csv" in toml["parallelism"]) == csv_needed
    assert torchtitan_schedule_name(plan)[1] == csv_needed
    text = export_plan(plan, "torchtitan")
    if csv_needed:
        from torch.distributed.pipelining.schedules import _Action, _validate_schedule

        rows = [line.split(",") for line in text.split("# ==> schedule.csv <==\n")[1].splitlines()]
        actions = {rank: [_Action.from_str(cell) for cell in row] for rank, row in enumerate(rows)}
        mapping = _validate_schedule(actions, plan.pp, plan.num_stages, plan.num_microbatches)
        assert tuple(mapping[s] for s in range(plan.num_stages)) == plan.placement


def test_every_engine_exports_a_planned_one_f_one_b_plan():
    plan = planned("1f1b")
    for engine in ("megatron", "deepspeed", "torchtitan", "torch"):
        assert export_plan(plan, engine)
    with pytest.raises(InvalidInputError, match="engine must be one of"):
        export_plan(plan, "jax")
    with pytest.raises(InvalidInputError, match="1F1B and interleaved 1F1B only"):
        export_plan(planned("zb-h1"), "megatron")
