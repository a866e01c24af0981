"""torchtitan: the plan as a Python configuration (torchtitan 0.3.0 and HEAD), or the last TOML release's sections.

    from pipeplan.engines.torchtitan import torchtitan_files, torchtitan_parts, torchtitan_settings
    torchtitan_settings(plan)["parallelism"]["pipeline_parallel_degree"]   # 4
    torchtitan_parts(plan, names)     # [["tok_embeddings", "layers.0"], ["layers.1", "norm", "lm_head"]] for a GPT
    torchtitan_files(plan)            # torchtitan_config.py (+ schedule.csv when the order needs one)
    torchtitan_files(plan, toml=True) # torchtitan.toml for the last TOML release (+ schedule.csv)

torchtitan is configured by a Python function returning ``Trainer.Config``, picked with
``--module`` ``--config`` (``torchtitan/config/manager.py``: ``ConfigManager.parse_args``
rebuilds the config with tyro, so ``Trainer.Config.__post_init__`` checks it). Two Python
releases differ in the batch fields, and the written ``apply_plan`` sets whichever the
installed one has:

* 0.3.0 (PyPI; ``torchtitan/config/configs.py``, ``trainer.py``): batches in samples:
  ``TrainingConfig.local_batch_size`` (per data-parallel rank and accumulation step; with a
  pipeline split into microbatches of ``ParallelismConfig.pipeline_parallel_microbatch_size``),
  ``global_batch_size`` (gradient accumulation = global ÷ (local × dp)) and ``seq_len``.
* HEAD (pytorch/torchtitan b5bcd76c, 2026-08-21; batches in tokens since 73aed7f6c,
  2026-08-20): ``TrainingConfig.num_tokens_per_microbatch_per_dp_rank``,
  ``num_tokens_per_train_step`` and ``ParallelismConfig.num_pp_microbatches`` (ignored at pp 1).

Both: ``Trainer.Config.__post_init__`` refuses ``pipeline_parallel_degree > 1`` unless
``training.disable_cuda_graphs`` ("CUDA graphs do not support pipeline parallelism yet"), so
the export sets it for a pipeline. ``ParallelismConfig`` holds ``pipeline_parallel_degree``,
``module_fqns_per_model_part`` (the module paths of each stage, in stage order),
``pipeline_parallel_schedule`` (a torch schedule class; ``ZBVZeroBubble``/``DualPipeV`` place
stages in a V, any other loops stage ``s`` onto rank ``s mod P``),
``pipeline_parallel_schedule_csv`` (a path: ``_PipelineScheduleRuntime._load_csv``),
``tensor_parallel_degree``, ``enable_sequence_parallel``, ``data_parallel_shard_degree`` (FSDP
over that many ranks), ``data_parallel_replicate_degree`` (DDP; both > 1: HSDP) and
``fsdp_reshard_after_forward``. The ``activation_checkpoint`` field is ``FullAC.Config()``,
``SelectiveAC.Config()`` (a per-op policy: saves every other matmul, not Megatron's
attention-only recompute) or ``None``.

torchtitan's splitter (``distributed/pipeline_parallel.py``: ``_split_module``) keeps top-level
modules and the entries of a top-level ``ModuleList``/``ModuleDict`` (``layers.3``) only: a
nested path (π0's ``paligemma_with_expert.paligemma.model.language_model.layers.3``) keeps
nothing. A GPT (every layer an embedding, a decoder layer or the loss) is therefore exported
in torchtitan's own decoder names (``tok_embeddings``, ``layers.N``, ``norm``, ``lm_head``;
``output`` in the TOML release); any other model keeps its own paths, and where they nest the
written config gives the model's pipelining function ``split_model_part`` (in the file) as
its splitter. The last TOML release (e347b1e5e, 2026-02-15; torchtitan removed the TOML
files on 2026-02-23) has ``[parallelism]`` with ``pipeline_parallel_microbatch_size``,
``[training] local_batch_size``/``global_batch_size`` and ``[activation_checkpoint] mode``;
it cannot split nested paths, so that export refuses a pipeline over them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import InvalidInputError
from ..plan import TORCHTITAN_RECOMPUTE, Plan
from ..schedule import Schedule
from ..schedules.patterns import loop_placement, v_placement
from ..units import format_figures
from ._common import ExportFile, recompute_notes, strongest_recompute, to_plan
from ._names import LayerName, layer_names, stage_fqns
from ._torchtitan_schedules import TORCH_SCHEDULE_CLASSES, TORCH_SCHEDULE_NAMES, pipeplan_schedule_name
from .pipelining import plan_schedule, torch_schedule_csv
from ._eager import COMPILE_KNOB, TORCHTITAN_COMPILE_SPEEDUP, TORCHTITAN_EAGER_FACTORS, torch_tp_overlap
from .record import Engine, Files, Knob, Knobs, NumberKnob, Runs
from .torchtitan_config import TOML_COMMIT, read_torchtitan_config

__all__ = ["TORCHTITAN_COMMIT", "TORCHTITAN_EAGER_FACTORS", "TORCHTITAN_RELEASE", "TORCHTITAN_TOML_COMMIT",
           "TORCH_SCHEDULE_CLASSES", "torchtitan_schedule_name", "pipeplan_schedule_name",
           "torchtitan_degrees", "torchtitan_parts", "nested_paths", "plan_row", "torchtitan_settings",
           "torchtitan_config_py", "torchtitan_toml", "torchtitan_files", "torchtitan_notes", "ENGINE"]

TORCHTITAN_COMMIT = "b5bcd76c66d0acb1a08b176d9639425bc55e0b2a"
TORCHTITAN_RELEASE = "0.3.0"
TORCHTITAN_TOML_COMMIT = TOML_COMMIT
_CSV = "schedule.csv"
_GPT_ROLES = frozenset({"embedding", "decoder", "loss"})


def torchtitan_schedule_name(plan: Plan | Sequence[int]) -> tuple[str, bool]:
    """``(pipeline_parallel_schedule, needs_csv)``: torch's class name, or a carrier for a CSV order.

    1F1B, GPipe, interleaved 1F1B and ZB-V have torch classes of their own. Any
    other order (ZB-H1/H2, adaptive) runs from a CSV; the name then only tells
    torchtitan how to place stages: ``ZBVZeroBubble`` for a V, ``Interleaved1F1B``
    for a loop, ``1F1B`` for one stage per rank.
    """
    plan = to_plan(plan)
    if plan.schedule in TORCH_SCHEDULE_NAMES:
        return TORCH_SCHEDULE_NAMES[plan.schedule], False
    if plan.one_stage_per_rank:
        return "1F1B", True
    if plan.placement == loop_placement(plan.pp, plan.num_stages // plan.pp):
        return "Interleaved1F1B", True
    if plan.num_stages == 2 * plan.pp and plan.placement == v_placement(plan.pp, 2):
        return "ZBVZeroBubble", True
    raise InvalidInputError(
        f"torchtitan places stages in a loop or a V; placement {list(plan.placement)} is neither "
        "(use the torch export)"
    )


def torchtitan_degrees(plan: Plan | Sequence[int], *, gpus_per_node: int = 8,
                       reshard: str = "default") -> dict[str, Any]:
    """``data_parallel_shard_degree``, ``data_parallel_replicate_degree``, ``fsdp_reshard_after_forward``.

    ddp: shard 1, replicate dp; fsdp: shard dp; hsdp: shard over the data-parallel
    ranks inside a node (``gpus_per_node / tp``, at most dp), replicate across nodes;
    zero1/zero2 (no torchtitan mode): FSDP that keeps parameters gathered after the
    forward (``"never"``), the closest (see :func:`torchtitan_notes`). ``reshard``: the
    ``--reshard-after-forward`` given for fsdp/hsdp, written where they shard (shard degree > 1; ``"default"``:
    the key is not written).
    """
    plan = to_plan(plan)
    if plan.dp_mode == "ddp":
        return {"data_parallel_shard_degree": 1, "data_parallel_replicate_degree": plan.dp}
    if plan.dp_mode == "hsdp":
        shard = max(1, min(plan.dp, gpus_per_node // plan.tp))
        if plan.dp % shard:
            raise InvalidInputError(f"hsdp: dp {plan.dp} does not divide into node groups of {shard} ranks")
        degrees: dict[str, Any] = {"data_parallel_shard_degree": shard,
                                   "data_parallel_replicate_degree": plan.dp // shard}
    else:
        degrees = {"data_parallel_shard_degree": plan.dp, "data_parallel_replicate_degree": 1}
    if plan.dp_mode in ("zero1", "zero2"):
        degrees["fsdp_reshard_after_forward"] = "never"
    elif reshard != "default" and degrees["data_parallel_shard_degree"] > 1:
        # shard 1 (hsdp with one rank per node group) is torchtitan's DDP (parallelize: FSDP only where
        # dp_shard > 1, else replicate): no FSDP to reshard
        degrees["fsdp_reshard_after_forward"] = reshard
    return degrees


def async_tp(plan: Plan) -> bool:
    """Whether ``plan`` was priced with torch's async TP (``--async-tp on``): its files enable it."""
    return plan.tp > 1 and plan.tp_comm_overlap == "async"


# ------------------------------------------------------------------ module lists
def _is_gpt(names: Sequence[LayerName]) -> bool:
    """Every layer an embedding, a one-module decoder layer or the loss: a decoder torchtitan has names for."""
    return all(n.role in _GPT_ROLES for n in names) and all(len(n.fqns) == 1 for n in names if n.role == "decoder")


def torchtitan_parts(plan: Plan | Sequence[int], names: Sequence[LayerName] | None = None, *,
                     toml: bool = False) -> list[list[str]]:
    """The module paths of each stage, in stage order, as torchtitan's model names them.

    With the model's own names (``names``, from its spec) for a GPT (see the module
    docstring): torchtitan's decoder names, ``tok_embeddings``, ``layers.N`` (the
    N-th decoder layer), ``norm`` and ``lm_head`` (``output`` with ``toml``). Any other
    model, or a plan without names (the plan's own layer names): the paths as given,
    a joint layer's two paths together.
    """
    plan = to_plan(plan)
    if names is None or not _is_gpt(resolved := layer_names(plan, names)):
        return stage_fqns(plan, names)
    head = "output" if toml else "lm_head"
    own: list[list[str]] = []
    decoder = 0
    for name in resolved:
        if name.role == "embedding":
            own.append(["tok_embeddings"])
        elif name.role == "loss":
            own.append(["norm", head])
        else:
            own.append([f"layers.{decoder}"])
            decoder += 1
    return [[path for index in span for path in own[index]] for span in plan.layer_ranges]


def _top_level(path: str) -> bool:
    """A path torchtitan's splitter keeps: a top-level module, or an entry of a top-level container."""
    head, _, tail = path.partition(".")
    return "*" not in path and bool(head) and (not tail or "." not in tail)


def nested_paths(parts: Sequence[Sequence[str]]) -> list[str]:
    """The paths of ``parts`` that torchtitan's own splitter cannot keep (nested deeper than ``name.key``)."""
    return [path for part in parts for path in part if not _top_level(path)]


# ------------------------------------------------------------------ the plan, in one line
def plan_row(plan: Plan | Sequence[int]) -> str:
    """The plan as one row: split, b×m, data-parallel mode, schedule, recompute and predicted step.

    ``"split 14/20/6/6 on ranks 0,1,1,0 (pp 2 × dp 2 × tp 1), b×m 16×8 (global 256),
    fsdp, zb-v, recompute none, predicted step 830 ms"``.
    """
    plan = to_plan(plan)
    step = "not simulated" if plan.step_time is None else f"{format_figures(plan.milliseconds(plan.step_time))} ms"
    recompute = ",".join(plan.recompute) if plan.uniform_recompute is None else plan.uniform_recompute
    return (f"split {'/'.join(map(str, plan.layers_per_stage))} on ranks {','.join(map(str, plan.placement))} "
            f"(pp {plan.pp} × dp {plan.dp} × tp {plan.tp}), b×m {plan.micro_batch_size}×{plan.num_microbatches} "
            f"(global {plan.global_batch}), {plan.dp_mode}, {plan.schedule_label}, recompute {recompute}, "
            f"predicted step {step}")


def _batch_line(plan: Plan) -> str:
    """What one optimizer step is, in samples."""
    b, m, dp = plan.micro_batch_size, plan.num_microbatches, plan.dp
    if plan.pp > 1:
        local = (f"local batch {b * m} samples per data-parallel rank, through the pipeline as {m} microbatches of "
                 f"{b}, no gradient accumulation")
    else:
        local = f"local batch {b} samples per data-parallel rank, {m} accumulation steps (no pipeline)"
    return f"one optimizer step is {plan.global_batch} samples (global batch): {dp} data-parallel ranks × {local}"


def _instead(plan: Plan, *, toml: bool = False) -> list[str]:
    """What torchtitan runs in place of the plan's mode and recompute, when it cannot run them as planned."""
    changes = []
    if plan.dp_mode in ("zero1", "zero2"):
        changes.append((f"fsdp keeping parameters gathered after the forward (reshard 'never') in place of "
                        f"{plan.dp_mode}", f"torchtitan has no {plan.dp_mode}"))
    mode = strongest_recompute(plan)
    if plan.uniform_recompute is None or len(set(plan.recompute_by_module.values())) > 1:
        changes.append((f"recompute {mode} on every layer", "torchtitan applies one recompute policy to every block"))
    if not toml and mode.startswith("every:"):
        changes.append(("full recompute on every block in place of " + mode,
                        "torchtitan 0.3.0's Python configs have no selective layer checkpointing "
                        "(its TOML release has: --export torchtitan-toml)"))
    if not changes:
        return []
    what = " and ".join(change for change, _ in changes)
    why = "; ".join(reason for _, reason in changes)
    return [f"runs instead: that plan with {what}, step not re-predicted, because {why}"]


# ------------------------------------------------------------------ settings
def torchtitan_settings(plan: Plan | Sequence[int], names: Sequence[LayerName] | None = None, *,
                        gpus_per_node: int = 8, reshard: str = "default") -> dict[str, dict[str, Any]]:
    """The values the export sets, by torchtitan config section (``schedule.csv`` beside the config).

    ``parallelism``: what both Python releases name alike; ``batch``: the plan's batch
    in samples (``local_batch_size``: per data-parallel rank and accumulation step,
    ``global_batch_size``), written into whichever fields the release has.
    """
    plan = to_plan(plan)
    name, needs_csv = torchtitan_schedule_name(plan)
    parallelism: dict[str, Any] = {
        "pipeline_parallel_degree": plan.pp,
        "pipeline_parallel_schedule": name,
        "pipeline_parallel_schedule_csv": _CSV if needs_csv else "",
        "module_fqns_per_model_part": torchtitan_parts(plan, names),
        "tensor_parallel_degree": plan.tp,
        "enable_sequence_parallel": bool(plan.sequence_parallel and plan.tp > 1),
        **torchtitan_degrees(plan, gpus_per_node=gpus_per_node, reshard=reshard),
    }
    local = plan.micro_batch_size * (plan.num_microbatches if plan.pp > 1 else 1)
    tokens = plan.tokens_per_sample
    return {"parallelism": parallelism, "activation_checkpoint": {"mode": strongest_recompute(plan)},
            "batch": {"micro_batch_size": plan.micro_batch_size, "num_microbatches": plan.num_microbatches,
                      "local_batch_size": local, "global_batch_size": plan.global_batch,
                      "tokens_per_sample": None if tokens is None else int(round(tokens))}}


def torchtitan_notes(plan: Plan | Sequence[int]) -> list[str]:
    """What the torchtitan export approximates of ``plan``."""
    plan = to_plan(plan)
    notes = recompute_notes(plan, "torchtitan")
    if strongest_recompute(plan).startswith("every:"):
        notes.append("torchtitan 0.3.0's Python configs have no selective layer checkpointing: the torchtitan "
                     "export runs every:N as full on every block (torchtitan-toml writes selective_ac_option N)")
    if strongest_recompute(plan) == "selective":
        notes.append("torchtitan's selective recompute is a per-op policy (saves every other matmul), not the "
                     "attention-only recompute pipeplan timed: memory and time differ")
    if plan.dp_mode in ("zero1", "zero2"):
        notes.append(f"torchtitan has no {plan.dp_mode}: exported as FSDP keeping parameters gathered after the "
                     "forward (fsdp_reshard_after_forward 'never', ZeRO-2's memory), which also shards the "
                     "parameters between steps")
    return notes


# ------------------------------------------------------------------ the Python configuration
_CONFIG_TEMPLATE = '''"""pipeplan: this plan as a torchtitan configuration (Python configs: torchtitan {release}, HEAD {commit}).

plan: {row}
{instead}batch: {batch}
model: {model}

From torchtitan's root, with this folder on the path:
    PYTHONPATH={{this folder}}:$PYTHONPATH NGPU={gpus} MODULE=torchtitan_config CONFIG=pipeplan_config ./run_train.sh
(or: torchrun --nproc-per-node {gpus} -m torchtitan.train --module torchtitan_config --config pipeplan_config).
pipeplan_config() is the base configuration with the plan applied by apply_plan(); schedule.csv, when the
plan needs one, is read from this folder.
"""
import copy
import dataclasses
import importlib
import os

BASE_MODULE = os.environ.get("PIPEPLAN_BASE_MODULE", "torchtitan.models.llama3.config_registry")
BASE_CONFIG = os.environ.get("PIPEPLAN_BASE_CONFIG", "llama3_debugmodel")  # a stand-in: name your model's
HERE = os.path.dirname(os.path.abspath(__file__))

PARALLELISM = {parallelism}
LAYERS_PER_STAGE = {layers_per_stage}  # pipeplan's layers per stage (pipeplan check reads it)
MICRO_BATCH_SIZE = {micro}  # samples per microbatch
MICROBATCHES = {microbatches}  # per data-parallel rank and step: through the pipeline, or accumulated without one
LOCAL_BATCH_SIZE = {local}  # samples per data-parallel rank and accumulation step (torchtitan 0.3.0's local_batch_size)
GLOBAL_BATCH_SIZE = {global_batch}  # samples per optimizer step, all data-parallel ranks
TOKENS_PER_SAMPLE = {tokens}  # None: the base configuration's sequence length
RECOMPUTE = {recompute!r}  # "none", "selective" or "op" (torchtitan's per-op policy), "every:N" or "full"
COMPILE = {compile}  # torch.compile (compile.enable); pipeplan priced it (--compile)
COMPILE_COMPONENTS = {components}  # what is compiled (compile.components): torchtitan's default is the model and loss
ASYNC_TP = {async_tp}  # async tensor parallelism (compile.enable_async_tensor_parallel); pipeplan priced it (--async-tp)
# The stage module lists nest deeper than torchtitan's splitter reaches (a top-level module or "layers.N"):
# apply_plan() makes the model's pipelining function split with split_model_part() below.
NESTED = {nested}


def _fields(section):
    return {{f.name for f in dataclasses.fields(section)}} if dataclasses.is_dataclass(section) else set(vars(section))


def apply_plan(config):
    """Set the plan's parallelism, batch and recompute on a torchtitan Trainer.Config (0.3.0 or HEAD); returns it."""
    parallelism, training = config.parallelism, config.training
    for key, value in PARALLELISM.items():
        if key == "pipeline_parallel_schedule_csv" and value:
            value = os.path.join(HERE, value)
        setattr(parallelism, key, value)
    have = _fields(training)
    if "local_batch_size" in have:  # torchtitan 0.3.0: batches in samples
        training.local_batch_size = LOCAL_BATCH_SIZE
        training.global_batch_size = GLOBAL_BATCH_SIZE  # gradient accumulation = global / (local x dp)
        parallelism.pipeline_parallel_microbatch_size = MICRO_BATCH_SIZE
        if TOKENS_PER_SAMPLE:
            training.seq_len = TOKENS_PER_SAMPLE
    else:  # torchtitan HEAD: batches in tokens
        tokens = TOKENS_PER_SAMPLE or training.max_context_length
        training.num_tokens_per_microbatch_per_dp_rank = MICRO_BATCH_SIZE * tokens
        training.num_tokens_per_train_step = GLOBAL_BATCH_SIZE * tokens
        parallelism.num_pp_microbatches = MICROBATCHES  # ignored without a pipeline: accumulation then
    config.compile.enable = COMPILE  # torchtitan's CompileConfig (0.3.0 and HEAD): default False
    config.compile.components = list(COMPILE_COMPONENTS)
    if ASYNC_TP:  # 0.3.0's CompileConfig.enable_async_tensor_parallel (it needs compile.enable)
        config.compile.enable_async_tensor_parallel = True
    if PARALLELISM["pipeline_parallel_degree"] > 1 and "disable_cuda_graphs" in have:
        training.disable_cuda_graphs = True  # torchtitan refuses CUDA graphs with pipeline parallelism
    if RECOMPUTE == "none":
        config.activation_checkpoint = None
    else:
        from torchtitan.distributed.activation_checkpoint import FullAC, SelectiveAC

        # torchtitan 0.3.0 has no selective layer option: every:N runs as full on every block
        full = RECOMPUTE == "full" or RECOMPUTE.startswith("every:")
        config.activation_checkpoint = FullAC.Config() if full else SelectiveAC.Config()
    spec = getattr(config, "model_spec", None)
    if NESTED and PARALLELISM["pipeline_parallel_degree"] > 1 and spec is not None:
        config.model_spec = dataclasses.replace(spec, pipelining_fn=nested_pipelining_fn(spec.pipelining_fn))
    return config


def pipeplan_config():
    """The base configuration with the plan applied (what --module torchtitan_config --config pipeplan_config runs)."""
    return apply_plan(getattr(importlib.import_module(BASE_MODULE), BASE_CONFIG)())


def split_model_part(whole_model, module_names):
    """A copy of whole_model that keeps only module_names (module or parameter paths, nested or not).

    Every child on no kept path is set to None, or removed from its ModuleList/ModuleDict (the kept
    entries keep their names, "layers.7" stays "layers.7", so a checkpoint's paths still hold); a
    parameter of a module on the way is kept only when listed. Paths with "*" (adapters inside every
    layer) are not split by. The model's forward must tolerate the missing modules, as torchtitan
    requires of any model it pipelines.
    """
    from torch import nn

    keep = {{name for name in module_names if "*" not in name}}
    known = {{name for name, _ in whole_model.named_modules()}} | {{name for name, _ in whole_model.named_parameters()}}
    known |= {{name for name, _ in whole_model.named_buffers()}}
    missing = sorted(keep - known)
    if missing:
        raise ValueError(f"the model has no {{missing[0]!r}} ({{len(missing)}} of this stage's {{len(keep)}} paths "
                         "missing): set PIPEPLAN_BASE_MODULE / PIPEPLAN_BASE_CONFIG to your model's configuration")
    model = copy.deepcopy(whole_model)

    def prune(module, prefix):
        for name, child in list(module.named_children()):
            path = prefix + name
            if path in keep:
                continue
            if any(k.startswith(path + ".") for k in keep):
                prune(child, path + ".")
            elif isinstance(module, (nn.ModuleDict, nn.ModuleList)):
                del module._modules[name]  # the kept entries keep their names: a checkpoint's paths still hold
            else:
                setattr(module, name, None)
        for name in [n for n, p in module.named_parameters(recurse=False) if prefix + n not in keep]:
            setattr(module, name, None)

    prune(model, "")
    return model


def nested_pipelining_fn(pipelining_fn=None):
    """The model's pipelining function (default torchtitan's pipeline_llm) with split_model_part as its splitter."""

    def pipelining(model, **kwargs):
        from torchtitan.distributed import pipeline_parallel

        inner = pipelining_fn or pipeline_parallel.pipeline_llm
        own = pipeline_parallel._split_module
        pipeline_parallel._split_module = split_model_part
        try:
            return inner(model, **kwargs)
        finally:
            pipeline_parallel._split_module = own

    return pipelining
'''


def _model_line(plan: Plan, parts: list[list[str]], gpt: bool, nested: list[str]) -> str:
    """What the user must replace: the base configuration, and what its model must hold."""
    stand_in = ("BASE_CONFIG defaults to torchtitan's llama3 debugmodel, a stand-in that only lets this file load: "
                "set PIPEPLAN_BASE_MODULE / PIPEPLAN_BASE_CONFIG to your model's configuration function")
    if plan.pp == 1:
        return stand_in + " (no pipeline: the module lists are unused)"
    if gpt:
        return stand_in + " (a torchtitan decoder: tok_embeddings, layers.N, norm, lm_head, as listed)"
    if nested:
        return (stand_in + f"; its model must have these module paths (e.g. {nested[0]}), which nest deeper than "
                "torchtitan's splitter reaches, so apply_plan() gives its pipelining function split_model_part()")
    return stand_in + f"; its model must have these module paths (e.g. {parts[0][0]})"


def torchtitan_config_py(plan: Plan | Sequence[int], names: Sequence[LayerName] | None = None, *,
                         gpus_per_node: int = 8, compile: bool | str = False, reshard: str = "default") -> str:
    """``torchtitan_config.py``: ``apply_plan(config)`` and ``pipeplan_config()`` for torchtitan's ``--module``
    (``compile``: ``config.compile.enable``, torchtitan's default off, ``"model"``: with ``compile.components``
    ``["model"]``, the loss eager; ``reshard``: ``fsdp_reshard_after_forward``)."""
    plan = to_plan(plan)
    settings = torchtitan_settings(plan, names, gpus_per_node=gpus_per_node, reshard=reshard)
    parts = settings["parallelism"]["module_fqns_per_model_part"]
    gpt = names is not None and _is_gpt(layer_names(plan, names))
    nested = nested_paths(parts)
    parallelism = "{\n" + "".join(f"    {json.dumps(k)}: {_py(v)},\n" for k, v in settings["parallelism"].items()) + "}"
    batch = settings["batch"]
    instead = "".join(line + "\n" for line in _instead(plan))
    return _CONFIG_TEMPLATE.format(
        release=TORCHTITAN_RELEASE, commit=TORCHTITAN_COMMIT[:9], row=plan_row(plan), instead=instead,
        batch=_batch_line(plan), model=_model_line(plan, parts, gpt, nested), gpus=plan.num_gpus,
        parallelism=parallelism, layers_per_stage=list(plan.layers_per_stage), micro=batch["micro_batch_size"], microbatches=batch["num_microbatches"],
        local=batch["local_batch_size"], global_batch=batch["global_batch_size"], tokens=batch["tokens_per_sample"],
        recompute=settings["activation_checkpoint"]["mode"], nested=bool(nested) and plan.pp > 1,
        compile=bool(compile), async_tp=async_tp(plan),
        components='["model"]' if compile == "model" else '["model", "loss"]')




def _py(value: Any) -> str:
    """A Python literal for a JSON-like value (True/False, not true/false)."""
    if isinstance(value, bool):
        return repr(value)
    return json.dumps(value)


# ------------------------------------------------------------------ the TOML release
def torchtitan_toml(plan: Plan | Sequence[int], names: Sequence[LayerName] | None = None, *,
                    schedule_csv: str = _CSV, gpus_per_node: int = 8, compile: bool | str = False,
                    reshard: str = "default") -> str:
    """The last TOML release's sections for ``plan`` (``schedule_csv``: the path written when it needs one;
    ``compile``: ``[compile] enable``, ``"model"``: with ``components = ["model"]``; ``reshard``:
    ``fsdp_reshard_after_forward``).

    Raises:
        InvalidInputError: a pipeline over module paths that nest deeper than that
            release's splitter reaches (it would build empty stages).
    """
    plan = to_plan(plan)
    settings = torchtitan_settings(plan, names, gpus_per_node=gpus_per_node, reshard=reshard)
    par = settings["parallelism"]
    parts = torchtitan_parts(plan, names, toml=True)
    nested = nested_paths(parts)
    if plan.pp > 1 and nested:
        raise InvalidInputError(
            f"torchtitan's TOML release splits top-level modules only, and this model's paths nest ({nested[0]}): "
            "its stages would be empty; use --export torchtitan (its config splits nested paths)"
        )
    lines = ["[parallelism]"]
    for key in ("pipeline_parallel_degree", "pipeline_parallel_schedule"):
        lines.append(f"{key} = {json.dumps(par[key])}")
    if par["pipeline_parallel_schedule_csv"]:
        lines.append(f"pipeline_parallel_schedule_csv = {json.dumps(schedule_csv)}")
    lines.append(f"pipeline_parallel_microbatch_size = {plan.micro_batch_size}")
    for key in ("tensor_parallel_degree", "data_parallel_shard_degree", "data_parallel_replicate_degree"):
        lines.append(f"{key} = {par[key]}")
    if "fsdp_reshard_after_forward" in par:
        lines.append(f"fsdp_reshard_after_forward = {json.dumps(par['fsdp_reshard_after_forward'])}")
    if async_tp(plan):  # the TOML release's key (job_config.py Parallelism); 0.3.0 moved it to compile
        lines.append("enable_async_tensor_parallel = true")
    lines.append("module_fqns_per_model_part = [")
    lines += [f"    {json.dumps(part)}," for part in parts]
    mode = settings["activation_checkpoint"]["mode"]
    batch = settings["batch"]
    lines += ["]", "", "[training]", f"local_batch_size = {batch['local_batch_size']}",
              f"global_batch_size = {batch['global_batch_size']}"]
    if batch["tokens_per_sample"]:
        lines.append(f"seq_len = {batch['tokens_per_sample']}")
    lines += ["", "[activation_checkpoint]", f"mode = {json.dumps(mode)}"]
    if mode in ("selective", "op"):
        lines[-1] = 'mode = "selective"'
        lines.append('selective_ac_option = "op"')
    elif mode.startswith("every:"):  # selective layer checkpointing: every Nth block
        lines[-1] = 'mode = "selective"'
        lines.append(f"selective_ac_option = {json.dumps(mode.split(':', 1)[1])}")
    lines += ["", "[compile]", f"enable = {json.dumps(bool(compile))}"]
    if compile == "model":  # the model alone, the loss eager (torchtitan's default components: model and loss)
        lines.append('components = ["model"]')
    header = [f"# pipeplan: {plan_row(plan)}", *(f"# {line}" for line in _instead(plan, toml=True)),
              f"# {_batch_line(plan)}", ""]
    return "\n".join(header + lines) + "\n"


def torchtitan_files(plan: Plan | Sequence[int], names: Sequence[LayerName] | None = None, *,
                     toml: bool = False, gpus_per_node: int = 8, compile: bool | str = False,
                     reshard: str = "default") -> list[ExportFile]:
    """``torchtitan_config.py`` (or ``torchtitan.toml``) and, when the order needs one, ``schedule.csv``
    (``compile``: ``torch.compile`` on, ``compile.enable``, ``"model"``: the model alone; ``reshard``: ``fsdp_reshard_after_forward``, written
    for fsdp/hsdp unless ``"default"``)."""
    plan = to_plan(plan)
    needs_csv = torchtitan_schedule_name(plan)[1]
    files = [ExportFile("torchtitan.toml", torchtitan_toml(plan, names, gpus_per_node=gpus_per_node,
                                                           compile=compile, reshard=reshard)) if toml else
             ExportFile("torchtitan_config.py", torchtitan_config_py(plan, names, gpus_per_node=gpus_per_node,
                                                                     compile=compile, reshard=reshard))]
    if needs_csv:
        files.append(ExportFile(_CSV, torch_schedule_csv(plan_schedule(plan))))
    return files


def _write(plan: Plan, target: str, names: Sequence[LayerName] | None, *, schedule: Schedule | None,
           gpus_per_node: int) -> list[ExportFile]:
    """``torchtitan`` (the Python configuration) or ``torchtitan-toml``; ``schedule`` replaces the CSV's order."""
    return _write_knobs(plan, target, names, schedule=schedule, gpus_per_node=gpus_per_node, knobs={})


def _write_knobs(plan: Plan, target: str, names: Sequence[LayerName] | None, *, schedule: Schedule | None,
                 gpus_per_node: int, knobs: Mapping[str, str]) -> list[ExportFile]:
    """:func:`_write` with the knobs given: ``compile`` (``on``/``model``/``off``) written as ``compile.enable``
    (``model``: and ``compile.components = ["model"]``),
    ``reshard-after-forward`` as ``fsdp_reshard_after_forward``."""
    files = torchtitan_files(plan, names, toml=target == "torchtitan-toml", gpus_per_node=gpus_per_node,
                             compile="model" if knobs.get("compile") == "model" else knobs.get("compile") == "on",
                             reshard=knobs.get("reshard-after-forward", "default"))
    if schedule is None:
        return files
    return [ExportFile(f.name, torch_schedule_csv(schedule)) if f.name == _CSV else f for f in files]


#: torchtitan's knobs the step model prices (docs/engines.md, "torchtitan"; pipeplan.models.layer_costs prices
#: the recompute modes; source: torchtitan/parallelisms/parallelize_llama.py at 0413364, checkpoint_wrapper).
TORCHTITAN_KNOBS = Knobs((
    Knob("recompute", TORCHTITAN_RECOMPUTE, None,
         "activation checkpointing of every transformer block: op (selective per-op: saves every other "
         "matmul's output and the attention's, reruns the rest before the block's backward), every:N (full "
         "on every Nth block, the others none: selective_ac_option = N), full, none; not given: the planner "
         "searches none, op and full per stage",
         searched=("none", "op", "full")),
    COMPILE_KNOB,
    Knob("reshard-after-forward", ("default", "always", "never"), "default",
         "FSDP2's reshard_after_forward (parallelism.fsdp_reshard_after_forward): default frees each layer's "
         "gathered parameters after its forward without a pipeline (gathered again for its backward) and keeps "
         "them with one (torchtitan/distributed/fsdp.py, 0.3.0); never keeps them gathered from the forward to "
         "the backward (one all-gather a layer and microbatch, not two; every layer's bf16 parameters held at "
         "the peak); always, priced without a pipeline only (--pp 1), as default there"),
    Knob("async-tp", ("on", "off"), "off",
         "parallelism.enable_async_tensor_parallel (needs --compile on, as torchtitan does): off, vanilla TP, "
         "torch's DTensor collectives waited for beside the matmuls, every one exposed; on, async TP hides a "
         "fitted share of each behind its layer's own pass (docs/engines.md, torchtitan-h100); no effect at tp 1"),
    NumberKnob("grad-reduce-dtype", ("fp32",), None,
               "training.mixed_precision_reduce: FSDP2's MixedPrecisionPolicy(reduce_dtype=float32) for fsdp/hsdp, "
               "what pipeplan prices there; torchtitan 0.3.0 takes float32 only (Literal['float32']), so bf16 is "
               "refused; ddp and zero1/2 are priced in each mode's own dtype",
               modes=("fsdp", "hsdp"),
               assumed="fsdp/hsdp fp32 (torchtitan's training.mixed_precision_reduce); ddp, zero1, zero2: each "
                       "mode's own (docs/planner.md)"),
))

#: torchtitan: any order (torch's classes, or a schedule CSV) on a loop or a V, every data-parallel mode
#: (ZeRO-1/2 as FSDP that keeps parameters gathered); in its Python releases (0.3.0, HEAD) and its last
#: TOML release (top-level module paths only).

ENGINE = Engine(
    "torchtitan",
    Runs(),
    Files(targets=("torchtitan", "torchtitan-toml"), write=_write, notes=torchtitan_notes, read=read_torchtitan_config,
          knobs=("compile", "reshard-after-forward"), write_knobs=_write_knobs),
    knobs=TORCHTITAN_KNOBS,
    compute_factors=TORCHTITAN_EAGER_FACTORS,
    compile_speedup=TORCHTITAN_COMPILE_SPEEDUP,
    tp_overlap=torch_tp_overlap,
)
