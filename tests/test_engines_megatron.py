"""The Megatron export as Megatron-Core itself reads it: its config classes, layer split and batch calculator.

Needs the engines extra (``pip install -e '.[engines]'``: megatron-core 0.16.1); skips without it.

Each test takes ``megatron_args.sh`` as written (bash prints its flag line), turns the flags into
the arguments Megatron-LM hands to Megatron-Core — the names of
``megatron/training/argument_utils.py::core_transformer_config_from_args`` and the virtual
pipeline size ``megatron/training/arguments.py::validate_args`` derives (NVIDIA/Megatron-LM
d98e8a64; Megatron-LM's own parser is not on PyPI, so it is restated here, not run) — and asks
Megatron-Core's own code what each pipeline rank builds: ``TransformerConfig`` (its
``__post_init__`` validates the split and parses a layout), ``get_num_layers_to_build`` and
``get_transformer_layer_offset`` per pipeline rank and virtual stage (ranks set through
``parallel_state``'s setters, no process group), ``DistributedDataParallelConfig`` and
``ConstantNumMicroBatchesCalculator``. Every stage must get the plan's decoder layers, in order.
"""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

import pytest

pytest.importorskip("megatron.core", reason="the engines extra (megatron-core) is not installed")

import torch  # noqa: E402  (megatron-core needs torch; after the skip)
from megatron.core import parallel_state  # noqa: E402
from megatron.core.distributed import DistributedDataParallelConfig  # noqa: E402
from megatron.core.num_microbatches_calculator import ConstantNumMicroBatchesCalculator  # noqa: E402
from megatron.core.transformer import TransformerConfig  # noqa: E402
from megatron.core.transformer.pipeline_parallel_layer_layout import PipelineParallelLayerLayout  # noqa: E402
from megatron.core.transformer.transformer_block import get_num_layers_to_build  # noqa: E402
from megatron.core.transformer.transformer_layer import get_transformer_layer_offset  # noqa: E402

from pipeplan import presets  # noqa: E402
from pipeplan.engines import LayerName, export_files, layer_names_in_reference  # noqa: E402
from pipeplan.models.spec import ModelSpec  # noqa: E402
from pipeplan.plan import Plan  # noqa: E402
from pipeplan.schedules.patterns import loop_placement  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent

#: flag → TransformerConfig field, as core_transformer_config_from_args passes them (a flag's dest is
#: its name with "_" for "-"; the two --decoder-*-pipeline-num-layers are renamed there)
_CONFIG = {
    "--bf16": "bf16",  # ModelParallelConfig.bf16
    "--num-layers": "num_layers",
    "--pipeline-model-parallel-size": "pipeline_model_parallel_size",
    "--tensor-model-parallel-size": "tensor_model_parallel_size",
    "--sequence-parallel": "sequence_parallel",
    "--account-for-embedding-in-pipeline-split": "account_for_embedding_in_pipeline_split",
    "--account-for-loss-in-pipeline-split": "account_for_loss_in_pipeline_split",
    "--pipeline-model-parallel-layout": "pipeline_model_parallel_layout",
    "--decoder-first-pipeline-num-layers": "num_layers_in_first_pipeline_stage",
    "--decoder-last-pipeline-num-layers": "num_layers_in_last_pipeline_stage",
    "--recompute-granularity": "recompute_granularity",
    "--recompute-method": "recompute_method",
    "--recompute-num-layers": "recompute_num_layers",
    "--recompute-modules": "recompute_modules",
}
#: flags that go to DistributedDataParallelConfig (megatron/training/training.py get_model: the same dests)
_DDP = {"--use-distributed-optimizer": "use_distributed_optimizer", "--overlap-grad-reduce": "overlap_grad_reduce",
        "--overlap-param-gather": "overlap_param_gather"}
_INTS = {"num_layers", "pipeline_model_parallel_size", "tensor_model_parallel_size", "num_layers_in_first_pipeline_stage",
         "num_layers_in_last_pipeline_stage", "recompute_num_layers"}
_SWITCHES = {"--bf16", "--sequence-parallel", "--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split",
             *_DDP}


def _flags(files, tmp_path: Path) -> list[str]:
    """The flag line ``megatron_args.sh`` prints, split as bash would."""
    script = tmp_path / "megatron_args.sh"
    script.write_text({f.name: f.text for f in files}["megatron_args.sh"])
    line = subprocess.run(["bash", str(script)], check=True, capture_output=True, text=True).stdout
    return shlex.split(line)


def _parse(flags: list[str]) -> tuple[dict, dict, dict]:
    """(TransformerConfig fields, DDP config fields, the rest) from the flags; an unknown flag fails the test."""
    config: dict = {}
    ddp: dict = {}
    rest: dict = {}
    index = 0
    while index < len(flags):
        flag = flags[index]
        if flag in _SWITCHES:
            (ddp if flag in _DDP else config)[_DDP.get(flag) or _CONFIG[flag]] = True
            index += 1
            continue
        value = flags[index + 1]
        if flag in _CONFIG:
            field = _CONFIG[flag]
            config[field] = int(value) if field in _INTS else ([value] if field == "recompute_modules" else value)
        elif flag in ("--micro-batch-size", "--global-batch-size", "--num-layers-per-virtual-pipeline-stage"):
            rest[flag] = int(value)
        else:
            raise AssertionError(f"the export writes {flag}, which this test does not map to Megatron-Core")
        index += 2
    return config, ddp, rest


def _virtual(config: dict, rest: dict) -> int | None:
    """The virtual pipeline size validate_args derives (None for one chunk per rank)."""
    pp = config["pipeline_model_parallel_size"]
    if "pipeline_model_parallel_layout" in config:
        size = PipelineParallelLayerLayout.get_num_stages_from_str(config["pipeline_model_parallel_layout"]) // pp
    elif "--num-layers-per-virtual-pipeline-stage" in rest:
        layers = config["num_layers"] + bool(config.get("account_for_embedding_in_pipeline_split")) \
            + bool(config.get("account_for_loss_in_pipeline_split"))
        assert layers % pp == 0 and (layers // pp) % rest["--num-layers-per-virtual-pipeline-stage"] == 0
        size = layers // pp // rest["--num-layers-per-virtual-pipeline-stage"]
    else:
        return None
    return None if size == 1 else size


def _megatron_split(flags: list[str], hidden: int, heads: int) -> tuple[TransformerConfig, list[tuple[int, int]]]:
    """Megatron-Core's config and, per stage (virtual stage v of rank r is stage v·P + r), (offset, decoder layers)."""
    config, _, rest = _parse(flags)
    assert config.get("bf16") is True  # the export asks for the bf16 the step model priced
    virtual = _virtual(config, rest)
    pp = config["pipeline_model_parallel_size"]
    made = TransformerConfig(hidden_size=hidden, num_attention_heads=heads, virtual_pipeline_model_parallel_size=virtual,
                             pipeline_dtype=torch.bfloat16, **config)
    stages = {}
    parallel_state.set_pipeline_model_parallel_world_size(pp)
    parallel_state.set_virtual_pipeline_model_parallel_world_size(virtual)
    try:
        for rank in range(pp):
            parallel_state.set_pipeline_model_parallel_rank(rank)
            for chunk in range(virtual or 1):
                vp_stage = None if virtual is None else chunk
                stages[chunk * pp + rank] = (get_transformer_layer_offset(made, vp_stage=vp_stage, pp_rank=rank),
                                             get_num_layers_to_build(made, vp_stage=vp_stage, pp_rank=rank))
    finally:
        parallel_state.set_pipeline_model_parallel_rank(None)
        parallel_state.set_pipeline_model_parallel_world_size(None)
        parallel_state.set_virtual_pipeline_model_parallel_world_size(None)
    return made, [stages[s] for s in sorted(stages)]


def _plan_split(plan: Plan, names: list[LayerName]) -> list[tuple[int, int]]:
    """Per stage of ``plan``: (decoder layers before it, its decoder layers)."""
    counts = [sum(names[i].role == "decoder" for i in span) for span in plan.layer_ranges]
    return [(sum(counts[:s]), count) for s, count in enumerate(counts)]


def _check(plan: Plan, names: list[LayerName], flags: list[str], hidden: int, heads: int) -> None:
    made, split = _megatron_split(flags, hidden, heads)
    assert split == _plan_split(plan, names)
    assert made.num_layers == sum(name.role == "decoder" for name in names)
    assert made.tensor_model_parallel_size == plan.tp and made.sequence_parallel == plan.sequence_parallel
    _, ddp, rest = _parse(flags)
    DistributedDataParallelConfig(**ddp)  # its own checks
    assert ddp.get("use_distributed_optimizer", False) == (plan.dp_mode == "zero1")
    calculator = ConstantNumMicroBatchesCalculator(rest["--global-batch-size"], rest["--micro-batch-size"], plan.dp,
                                                   decrease_batch_size_if_needed=False, rank=0)
    assert calculator.get() == plan.num_microbatches
    assert calculator.get_current_global_batch_size() == plan.global_batch


def _gpt(layers_per_stage: tuple[int, ...], pp: int, **options) -> Plan:
    virtual = len(layers_per_stage) // pp
    return Plan(pp=pp, dp=options.pop("dp", 2), layers_per_stage=layers_per_stage, placement=loop_placement(pp, virtual),
                schedule="1f1b" if virtual == 1 else "interleaved", num_microbatches=8, micro_batch_size=2, **options)


# gpt-1.5b: the embedding, 22 decoder layers, the loss (Qi et al. 2023 Table 3): 24 pipeline layers
_PLANS = {
    "even, embedding and loss counted": _gpt((6, 6, 6, 6), 4),
    "first and last rank differ": _gpt((4, 7, 7, 6), 4, tp=2, sequence_parallel=True, dp_mode="zero1",
                                       grad_sync="megatron-overlap"),
    "any split: a layout": _gpt((3, 10, 6, 5), 4, recompute=("selective",) * 4),
    "interleaved, even": _gpt((6, 6, 6, 6), 2),
    "interleaved, any split": _gpt((5, 7, 6, 6), 2, recompute=("full",) * 4),
    "interleaved over 3 ranks": _gpt((3, 3, 2, 4, 4, 8), 3),
    "block recompute": _gpt((4, 7, 7, 6), 4, recompute=("block:2",) * 4),
    "uniform recompute, interleaved": _gpt((7, 6, 6, 5), 2, recompute=("uniform:2",) * 4),
    "no pipeline": _gpt((24,), 1, dp=8),
}


@pytest.mark.parametrize("case", list(_PLANS))
def test_megatron_core_builds_the_plans_split(case, tmp_path):
    spec = presets.get("gpt-1.5b")
    names = layer_names_in_reference(spec)
    plan = _PLANS[case]
    _check(plan, names, _flags(export_files(plan, "megatron", names), tmp_path), 2304, 24)


def test_a_plain_gpt_spec_exports_and_megatron_core_builds_every_planned_split(run_cli, tmp_path):
    """examples/gpt-6.2b.json records no roles or paths; every plan the search gives Megatron builds as planned."""
    path = ROOT / "examples" / "gpt-6.2b.json"
    spec = ModelSpec.from_file(path)
    names = layer_names_in_reference(spec)
    code, out, err = run_cli("plan", "--spec", str(path), "--gpus", "16", "--global-batch", "128", "--tp", "2",
                             "--pp", "4", "--json", "--top", "10")
    assert code == 0, err
    payload = json.loads(out)
    checked = 0
    for entry in payload["plans"]:
        export = entry["exports"]["megatron"]
        if "error" in export:
            assert "no port" not in export["error"]  # refused for a plan choice (a schedule, zero2), not the model
            continue
        plan = Plan(pp=entry["pp"], dp=entry["dp"], layers_per_stage=tuple(entry["layers_per_stage"]),
                    placement=tuple(entry["placement"]), schedule=entry["schedule"],
                    micro_batch_size=entry["micro_batch_size"], num_microbatches=entry["microbatches"],
                    tp=entry["tp"], sequence_parallel=entry["sequence_parallel"], dp_mode=entry["dp_mode"])
        _check(plan, names, shlex.split(export["text"]), 4096, 32)
        checked += 1
    assert checked >= 1


@pytest.mark.parametrize(("method", "count", "layers"), [("block", 2, 5), ("block", 7, 5), ("block", 1, 1),
                                                         ("uniform", 2, 6), ("uniform", 3, 6), ("uniform", 1, 4),
                                                         ("uniform", 4, 4)])
def test_megatron_cores_checkpointed_forward_recomputes_what_the_step_model_prices(method, count, layers, monkeypatch):
    """TransformerBlock._checkpointed_forward (megatron-core's own) on a stage of ``layers`` layers: which layers
    run inside a checkpoint, and which keep their input (the first of each checkpoint), are
    pipeplan.models.layer_costs.stage_layer_modes' for block:N / uniform:N."""
    import types

    from megatron.core.transformer import transformer_block

    from pipeplan.models.layer_costs import stage_layer_modes
    from pipeplan.models.modules import Embedding, LMHead, TransformerStack

    group: list[int | None] = [None]
    checkpoints: list[int] = []

    def checkpoint(function, _distribute, *args):  # tensor_parallel.checkpoint: run the function, note the group
        group[0] = len(checkpoints)
        checkpoints.append(group[0])
        try:
            return function(*args)
        finally:
            group[0] = None

    seen: list[int | None] = []

    class Layer:
        def __init__(self, index: int) -> None:
            self.layer_number = index + 1

        def __call__(self, hidden_states, **kwargs):
            seen.append(group[0])
            return hidden_states, kwargs.get("context")

    monkeypatch.setattr(transformer_block.tensor_parallel, "checkpoint", checkpoint)
    built = [Layer(i) for i in range(layers)]
    config = types.SimpleNamespace(recompute_method=method, recompute_num_layers=count, fp8=False, fp4=False,
                                   distribute_saved_activations=False)
    block = types.SimpleNamespace(config=config, num_layers_per_pipeline_rank=layers, layers=built,
                                  _get_layer=lambda index: built[index])
    transformer_block.TransformerBlock._checkpointed_forward(block, torch.zeros(1), None, None, None, None, None,
                                                             None, False)
    ran = [("none", True) if g is None else ("full", i == 0 or seen[i - 1] != g) for i, g in enumerate(seen)]
    spec = ModelSpec("gpt", (
        Embedding(name="embedding", vocab_size=512, hidden_size=64, tokens=32),
        TransformerStack(name="decoder", num_layers=layers, hidden_size=64, num_heads=4, seq_length=32,
                         ffn_hidden_size=256),
        LMHead(name="head", vocab_size=512, hidden_size=64, tokens=32),
    ))
    # the stage holds the embedding, the decoder layers and the loss; Megatron's block holds the decoders
    priced = stage_layer_modes(spec, f"{method}:{count}", (layers + 2,))
    assert priced is not None and priced[0] == priced[-1] == ("none", True)
    assert priced[1:-1] == ran


def test_megatron_core_016_cannot_run_uniform_groups_that_do_not_divide_a_stage():
    """megatron-core 0.16.1 indexes past the stage's layers when N does not divide them (HEAD d98e8a64 shortens
    the last group, megatron/core/recompute.py, as pipeplan prices it): the export says so."""
    from pipeplan import engines

    assert any("uniform:2" in note and "0.16.1" in note
               for note in engines.get("megatron").notes(_PLANS["uniform recompute, interleaved"]))
    assert not any("0.16.1" in note for note in engines.get("megatron").notes(_PLANS["block recompute"]))
