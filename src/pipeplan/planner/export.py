"""Turn a :class:`~pipeplan.planner.Plan` into what Megatron-LM, DeepSpeed, torchtitan and torch accept.

    from pipeplan import partition_layers
    from pipeplan.planner.export import megatron_args, torchtitan_toml
    plan = partition_layers([2.0] * 32, 4, first_extra=16, last_extra=8)
    megatron_args(plan)   # ['--pipeline-model-parallel-size', '4', '--num-layers', '32', ...]

Every function takes a Plan (a :class:`~pipeplan.partition.PartitionResult` and a
:class:`~pipeplan.partition.placement.ChunkPlacement` are Plans); a list of layers per
stage is turned into one by :func:`pipeplan.planner.as_plan` first. An engine that cannot
express a plan (a schedule it does not run, a placement it cannot make) raises
:class:`~pipeplan.errors.InvalidInputError` saying which export can;
:func:`export_notes` lists what an export approximates (recompute per stage).

What each engine accepts (read from their sources):

* **Megatron-LM** (``megatron/training/arguments.py``,
  ``megatron/core/transformer/transformer_config.py``,
  ``megatron/core/transformer/pipeline_parallel_layer_layout.py``).
  ``--decoder-first-pipeline-num-layers`` / ``--decoder-last-pipeline-num-layers``
  set the decoder layers of the first / last pipeline rank; every other rank
  gets an equal share of the rest (which must divide evenly), one chunk per
  rank. Anything else goes in ``--pipeline-model-parallel-layout``: stages
  separated by ``|``, listed virtual stage 0 of every rank first (stage ``s``
  runs on rank ``s mod P``), ``E`` embedding, ``t`` a decoder layer, ``L`` the
  loss (with the output layer), ``x*n`` repeats a symbol, commas are cosmetic.
  The layout must have ``P·V`` stages, start with ``E``, end with ``L``, and hold
  exactly ``--num-layers`` ``t``. Megatron cannot express any other placement.
  Equal chunks use ``--num-layers-per-virtual-pipeline-stage``. Batches:
  ``--micro-batch-size``, ``--global-batch-size`` (Megatron derives ``m``).
  Recompute: ``--recompute-granularity selective``, or ``full`` with
  ``--recompute-method uniform --recompute-num-layers 1`` (every layer); it
  applies to every stage alike. Megatron-LM runs 1F1B and interleaved 1F1B only
  (the zero-bubble schedules live in a fork, sail-sg/zero-bubble-pipeline-parallelism).
* **DeepSpeed** (``deepspeed/runtime/pipe/module.py``): ``PipelineModule``
  accepts ``partition_method`` ``"uniform"``, ``"parameters"`` or
  ``"type:<regex>"`` only; explicit boundaries are its ``parts`` list (``S + 1``
  offsets into the layer specs), which a subclass sets in ``_partition_layers``
  before calling ``_set_bounds``. One stage per rank, its own 1F1B-like
  ``TrainSchedule``. The config JSON (``deepspeed/runtime/constants.py``):
  ``train_batch_size = train_micro_batch_size_per_gpu × gradient_accumulation_steps
  × data-parallel size``, where the pipeline engine's ``gradient_accumulation_steps``
  is the number of microbatches; recompute is ``PipelineModule(activation_checkpoint_interval=1)``.
* **torchtitan** (the last TOML release, ``torchtitan/config/job_config.py`` and
  ``torchtitan/distributed/pipeline_parallel.py`` at commit e347b1e5e,
  2026-02-15; later versions configure in Python): ``[parallelism]``
  ``pipeline_parallel_degree``, ``module_fqns_per_model_part`` (the module names
  of each stage, in stage order), ``pipeline_parallel_schedule`` (a torch schedule
  class name; ``ZBVZeroBubble``/``DualPipeV`` place stages in a V, any other
  name loops stage ``s`` onto rank ``s mod P``), ``pipeline_parallel_schedule_csv``
  (a path: torchtitan then runs ``_PipelineScheduleRuntime._load_csv`` on it),
  ``pipeline_parallel_microbatch_size``; ``[training] local_batch_size`` (per
  data-parallel rank: microbatches = local ÷ microbatch size) and
  ``global_batch_size``; ``[activation_checkpoint] mode`` (``none``,
  ``selective``, ``full``).
* **torch.distributed.pipelining** (``_IR.py``, ``schedules.py``): ``pipeline(module,
  mb_args, split_spec={"layers.4": SplitPoint.BEGINNING, ...})`` splits a module
  before the named submodules; a schedule with any stage → rank map is a CSV
  that ``_PipelineScheduleRuntime._load_csv`` reads, one row per rank, one
  action per cell written ``{stage}{F|B|I|W}{microbatch}`` (``I`` is the input
  gradient of a split backward, ``B`` a full backward).
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from typing import Any

from ..errors import InvalidInputError
from ..plan import Plan, as_plan
from ..schedule import Schedule
from ..schedules.patterns import loop_placement, v_placement

__all__ = [
    "megatron_args",
    "megatron_layout",
    "deepspeed_parts",
    "deepspeed_snippet",
    "deepspeed_config",
    "torchtitan_toml",
    "torchtitan_schedule_name",
    "torch_split_spec",
    "torch_split_snippet",
    "torch_schedule_csv",
    "torch_actions",
    "plan_schedule",
    "export_plan",
    "export_notes",
    "plan_exports",
    "export_refusal",
    "ENGINES",
    "ENGINE_SCHEDULES",
]

ENGINES = ("megatron", "deepspeed", "torchtitan", "torch")

#: the schedules each engine runs (``None``: any, from the schedule CSV); Megatron-LM
#: runs 1F1B and interleaved 1F1B, DeepSpeed's pipeline engine its own 1F1B-like order
ENGINE_SCHEDULES: dict[str, tuple[str, ...] | None] = {
    "megatron": ("1f1b", "interleaved"), "deepspeed": ("1f1b",), "torchtitan": None, "torch": None,
}


def _plan(plan: Plan | Sequence[int]) -> Plan:
    """The one conversion: a Plan as it is, a list of layers per stage as one stage per rank."""
    return as_plan(plan)


def _detect(plan: Plan, embedding_layer: bool | None, loss_layer: bool | None) -> tuple[bool, bool]:
    names = plan.layer_names
    if embedding_layer is None:
        embedding_layer = bool(names) and names[0] in ("embedding", "embed", "tok_embeddings")
    if loss_layer is None:
        loss_layer = bool(names) and names[-1] in ("output_layer", "lm_head", "loss", "output")
    return embedding_layer, loss_layer


def _strongest_recompute(plan: Plan) -> str:
    """The most memory-saving mode any stage uses (engines apply one mode to every stage)."""
    modes = set(plan.recompute or ("none",))
    for mode in ("full", "selective"):
        if mode in modes:
            return mode
    return "none"


def export_notes(plan: Plan | Sequence[int], engine: str) -> list[str]:
    """What an export approximates for ``plan`` (empty when it is exact)."""
    plan = _plan(plan)
    notes = []
    if plan.uniform_recompute is None:
        notes.append(
            f"the plan recomputes per stage ({', '.join(plan.recompute)}); {engine} applies one mode to every "
            f"stage, so the export uses {_strongest_recompute(plan)!r} everywhere (slower, never more memory)"
        )
    if engine == "deepspeed" and _strongest_recompute(plan) == "selective":
        notes.append("DeepSpeed checkpoints whole layers: selective recompute is exported as full")
    return notes


# ------------------------------------------------------------------ Megatron
def _decoder_counts(sizes: Sequence[int], embedding_layer: bool, loss_layer: bool) -> list[int]:
    counts = list(sizes)
    if embedding_layer:
        counts[0] -= 1
    if loss_layer:
        counts[-1] -= 1
    return counts


def megatron_layout(
    plan: Plan | Sequence[int], *, embedding_layer: bool | None = None, loss_layer: bool | None = None
) -> str:
    """The ``--pipeline-model-parallel-layout`` string for ``plan``.

    Args:
        plan: a Plan (or what :func:`~pipeplan.planner.as_plan` takes).
        embedding_layer: the first profiled layer *is* the embedding (written ``E``
            instead of ``t``). Default: detected from the layer names; otherwise
            ``E`` is added to the first stage.
        loss_layer: the last profiled layer is the output layer/loss (``L``);
            otherwise ``L`` is added to the last stage.

    Raises:
        InvalidInputError: a placement other than Megatron's ``s mod P``.
    """
    plan = _plan(plan)
    sizes, placement = plan.layers_per_stage, plan.placement
    embedding_layer, loss_layer = _detect(plan, embedding_layer, loss_layer)
    if placement != loop_placement(plan.pp, len(sizes) // plan.pp):
        raise InvalidInputError(
            f"Megatron-LM places stage s on rank s mod P; placement {list(placement)} is not that "
            f"(use the torch export's schedule CSV for a custom placement)"
        )
    stages = []
    for index, count in enumerate(_decoder_counts(sizes, embedding_layer, loss_layer)):
        text = "E" if index == 0 else ""
        if count == 1:
            text += "t"
        elif count > 1:
            text += f"t*{count}"
        if index == len(sizes) - 1:
            text += "L"
        stages.append(text)
    return "|".join(stages)


def megatron_args(
    plan: Plan | Sequence[int], *, embedding_layer: bool | None = None, loss_layer: bool | None = None
) -> list[str]:
    """Megatron-LM command-line arguments that reproduce ``plan``.

    One chunk per rank with equal middle stages gives
    ``--decoder-first-pipeline-num-layers`` / ``--decoder-last-pipeline-num-layers``
    (only those that differ from the middle); equal chunks of an interleaved plan
    give ``--num-layers-per-virtual-pipeline-stage``; anything else gives
    ``--pipeline-model-parallel-layout`` (see :func:`megatron_layout`).
    ``--num-layers`` counts decoder layers only. Then the batch sizes and the
    recompute flags.

    Raises:
        InvalidInputError: a schedule Megatron-LM does not run (zero-bubble,
            adaptive, GPipe), or a placement it cannot make.
    """
    plan = _plan(plan)
    if plan.pp > 1 and plan.schedule not in (ENGINE_SCHEDULES["megatron"] or ()):
        raise InvalidInputError(
            f"Megatron-LM runs 1F1B and interleaved 1F1B only, not {plan.schedule!r}; "
            "use the torch or torchtitan export (schedule CSV) for this plan"
        )
    sizes = plan.layers_per_stage
    embedding_layer, loss_layer = _detect(plan, embedding_layer, loss_layer)
    counts = _decoder_counts(sizes, embedding_layer, loss_layer)
    args = ["--pipeline-model-parallel-size", str(plan.pp), "--num-layers", str(sum(counts))]
    args += _megatron_split(plan, counts, embedding_layer, loss_layer)
    args += ["--micro-batch-size", str(plan.micro_batch_size), "--global-batch-size", str(plan.global_batch)]
    mode = _strongest_recompute(plan)
    if mode == "selective":
        args += ["--recompute-granularity", "selective"]
    elif mode == "full":
        args += ["--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"]
    return args


def _megatron_split(plan: Plan, counts: list[int], embedding_layer: bool, loss_layer: bool) -> list[str]:
    num_ranks = plan.pp
    if plan.one_stage_per_rank:
        if len(set(counts)) == 1:
            return []  # Megatron's default even split
        middle = counts[1:-1]
        if num_ranks > 1 and counts[0] > 0 and counts[-1] > 0 and len(set(middle)) <= 1:
            share = middle[0] if middle else None
            args = []
            if share is None or counts[0] != share:
                args += ["--decoder-first-pipeline-num-layers", str(counts[0])]
            if share is None or counts[-1] != share:
                args += ["--decoder-last-pipeline-num-layers", str(counts[-1])]
            return args
    elif len(set(plan.layers_per_stage)) == 1 and not embedding_layer and not loss_layer:
        megatron_layout(plan)  # checks the placement
        return ["--num-layers-per-virtual-pipeline-stage", str(plan.layers_per_stage[0])]
    return ["--pipeline-model-parallel-layout",
            megatron_layout(plan, embedding_layer=embedding_layer, loss_layer=loss_layer)]


# ------------------------------------------------------------------ DeepSpeed
def _one_stage_per_rank(plan: Plan, engine: str) -> None:
    if not plan.one_stage_per_rank:
        raise InvalidInputError(
            f"{engine} runs one stage per rank in order; placement {list(plan.placement)} is not that"
        )


def deepspeed_parts(plan: Plan | Sequence[int], *, offset: int = 0, trailing: int = 0) -> list[int]:
    """``PipelineModule.parts``: ``S + 1`` offsets into the layer specs.

    Args:
        plan: a Plan with one stage per rank.
        offset: specs before the first profiled layer that belong to stage 0
            (an embedding spec, a lambda), not in the profile.
        trailing: specs after the last profiled layer that belong to the last stage.
    """
    plan = _plan(plan)
    _one_stage_per_rank(plan, "DeepSpeed")
    if offset < 0 or trailing < 0:
        raise InvalidInputError(f"offset and trailing must be >= 0, got {offset} and {trailing}")
    parts = [0]
    for index, count in enumerate(plan.layers_per_stage):
        parts.append(parts[-1] + count + (offset if index == 0 else 0))
    parts[-1] += trailing
    return parts


def deepspeed_config(plan: Plan | Sequence[int]) -> dict[str, Any]:
    """The DeepSpeed config JSON entries for ``plan``'s batch and recompute.

    Raises:
        InvalidInputError: a schedule other than 1F1B (DeepSpeed runs its own).
    """
    plan = _plan(plan)
    if plan.pp > 1 and plan.schedule not in (ENGINE_SCHEDULES["deepspeed"] or ()):
        raise InvalidInputError(
            f"DeepSpeed's pipeline engine runs its own 1F1B-like schedule, not {plan.schedule!r}; "
            "use the torch or torchtitan export for this plan"
        )
    config: dict[str, Any] = {
        "train_batch_size": plan.global_batch,
        "train_micro_batch_size_per_gpu": plan.micro_batch_size,
        "gradient_accumulation_steps": plan.num_microbatches,
    }
    if _strongest_recompute(plan) != "none":
        config["activation_checkpointing"] = {"partition_activations": False, "cpu_checkpointing": False,
                                              "contiguous_memory_optimization": False}
    return config


def deepspeed_snippet(plan: Plan | Sequence[int], *, offset: int = 0, trailing: int = 0) -> str:
    """Python a user pastes: a ``PipelineModule`` subclass with pipeplan's boundaries, and the config."""
    plan = _plan(plan)
    parts = deepspeed_parts(plan, offset=offset, trailing=trailing)
    interval = 1 if _strongest_recompute(plan) != "none" else 0
    text = (
        "from deepspeed.pipe import PipelineModule\n\n"
        f"PIPEPLAN_PARTS = {parts}  # stage s builds layer specs [parts[s], parts[s + 1])\n\n\n"
        "class PlannedPipelineModule(PipelineModule):\n"
        '    """PipelineModule whose stage boundaries come from pipeplan."""\n\n'
        '    def _partition_layers(self, method="uniform"):\n'
        "        stage_id = self._topo.get_coord(self.global_rank).pipe\n"
        "        self.parts = list(PIPEPLAN_PARTS)\n"
        "        assert len(self.parts) == self._topo.get_dim('pipe') + 1\n"
        "        assert self.parts[-1] == len(self._layer_specs)\n"
        "        self._set_bounds(start=self.parts[stage_id], stop=self.parts[stage_id + 1])\n\n\n"
        f"# model = PlannedPipelineModule(layers=specs, num_stages={len(parts) - 1}, loss_fn=loss_fn, "
        f"activation_checkpoint_interval={interval})\n"
    )
    try:
        config = deepspeed_config(plan)
    except InvalidInputError:
        return text
    return text + f"# ds_config (merge into yours): {json.dumps(config)}\n"


# ----------------------------------------------------------------- torchtitan
_TORCH_SCHEDULE_NAMES = {"1f1b": "1F1B", "gpipe": "GPipe", "interleaved": "Interleaved1F1B", "zb-v": "ZBVZeroBubble"}


def torchtitan_schedule_name(plan: Plan | Sequence[int]) -> tuple[str, bool]:
    """``(pipeline_parallel_schedule, needs_csv)``: torch's class name, or a carrier for a CSV order.

    1F1B, GPipe, interleaved 1F1B and ZB-V have torch classes of their own. Any
    other order (ZB-H1/H2, adaptive) runs from a CSV; the name then only tells
    torchtitan how to place stages: ``ZBVZeroBubble`` for a V, ``Interleaved1F1B``
    for a loop, ``1F1B`` for one stage per rank.
    """
    plan = _plan(plan)
    if plan.schedule in _TORCH_SCHEDULE_NAMES:
        return _TORCH_SCHEDULE_NAMES[plan.schedule], False
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


def torchtitan_toml(plan: Plan | Sequence[int], *, schedule_csv: str = "pipeplan_schedule.csv") -> str:
    """torchtitan's TOML sections for ``plan`` (paste into the job's ``.toml``).

    Args:
        plan: a Plan; its layer names are the module FQNs of each stage.
        schedule_csv: the path written into ``pipeline_parallel_schedule_csv``
            when the order needs a CSV (write :func:`torch_schedule_csv` there).
    """
    plan = _plan(plan)
    name, needs_csv = torchtitan_schedule_name(plan)
    names = plan.layer_names or tuple(f"layers.{i}" for i in range(plan.num_layers))
    parts = [[names[i] for i in span] for span in plan.layer_ranges]
    lines = [
        "[parallelism]",
        f"pipeline_parallel_degree = {plan.pp}",
        f"pipeline_parallel_schedule = {json.dumps(name)}",
    ]
    if needs_csv:
        lines.append(f"pipeline_parallel_schedule_csv = {json.dumps(schedule_csv)}")
    lines.append(f"pipeline_parallel_microbatch_size = {plan.micro_batch_size}")
    lines.append("module_fqns_per_model_part = [")
    lines += [f"    {json.dumps(part)}," for part in parts]
    lines += [
        "]",
        "",
        "[training]",
        f"local_batch_size = {plan.micro_batch_size * plan.num_microbatches}",
        f"global_batch_size = {plan.global_batch}",
        "",
        "[activation_checkpoint]",
        f"mode = {json.dumps(_strongest_recompute(plan))}",
    ]
    if _strongest_recompute(plan) == "selective":
        lines.append('selective_ac_option = "op"')
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------- torch
def torch_split_spec(plan: Plan | Sequence[int], names: Sequence[str] | None = None) -> dict[str, str]:
    """``{module name: "BEGINNING"}`` for the first layer of stages 1..S-1.

    Args:
        plan: a Plan (its layer names are used).
        names: module names, one per layer; default the plan's (``layers.0``, ...).
    """
    plan = _plan(plan)
    sizes = plan.layers_per_stage
    if names is None:
        names = plan.layer_names or [f"layers.{i}" for i in range(sum(sizes))]
    if len(names) != sum(sizes):
        raise InvalidInputError(f"names has {len(names)} entries, expected {sum(sizes)} (one per layer)")
    spec = {}
    start = 0
    for count in sizes[:-1]:
        start += count
        spec[str(names[start])] = "BEGINNING"
    return spec


def torch_split_snippet(plan: Plan | Sequence[int], names: Sequence[str] | None = None) -> str:
    """Python a user pastes: the ``split_spec`` for ``torch.distributed.pipelining.pipeline``."""
    spec = torch_split_spec(plan, names)
    lines = ["from torch.distributed.pipelining import SplitPoint, pipeline", "", "split_spec = {"]
    lines += [f"    {name!r}: SplitPoint.BEGINNING," for name in spec]
    lines += ["}", "# pipe = pipeline(model, mb_args=(example_microbatch,), split_spec=split_spec)"]
    return "\n".join(lines) + "\n"


def torch_actions(schedule: Schedule) -> list[list[str]]:
    """Per rank, the schedule's actions in torch's compact form (``0F0``, ``1B0``, ``2I1``, ``2W1``)."""
    rows = []
    for order in schedule.orders:
        row = []
        for kind, stage, mb in order:
            row.append(f"{stage}{kind.value}{mb}")  # pipeplan's kinds are torch's: F, B (full), I, W
        rows.append(row)
    return rows


def torch_schedule_csv(schedule: Schedule) -> str:
    """The CSV ``_PipelineScheduleRuntime._load_csv(path, format="compute_only")`` reads."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    for row in torch_actions(schedule):
        writer.writerow(row)
    return buffer.getvalue()


def plan_schedule(plan: Plan | Sequence[int]) -> Schedule:
    """The per-rank order ``plan`` runs: its timeline's, or the fixed template rebuilt.

    Raises:
        InvalidInputError: a cost-aware schedule without a timeline (nothing to rebuild it from).
    """
    plan = _plan(plan)
    if plan.timeline is not None:
        return plan.timeline.schedule
    from ..schedules import build_schedule, schedule_info

    if plan.schedule == "custom" or schedule_info(plan.schedule).cost_aware:
        raise InvalidInputError(
            f"schedule {plan.schedule!r} depends on the costs; export a plan from the planner (it keeps its timeline)"
        )
    return build_schedule(plan.schedule, num_stages=plan.num_stages, num_microbatches=plan.num_microbatches,
                          **schedule_info(plan.schedule).shape_options(plan.virtual_stages))


def export_plan(plan: Plan | Sequence[int], engine: str) -> str:
    """The text a user pastes for ``engine`` (one of :data:`ENGINES`).

    Raises:
        InvalidInputError: an unknown engine, or a plan the engine cannot express.
    """
    plan = _plan(plan)
    if engine == "megatron":
        return " ".join(megatron_args(plan))
    if engine == "deepspeed":
        deepspeed_config(plan)  # raises for a schedule DeepSpeed does not run
        return deepspeed_snippet(plan)
    if engine == "torchtitan":
        text = torchtitan_toml(plan)
        if torchtitan_schedule_name(plan)[1]:
            text += "\n# pipeplan_schedule.csv (one row per rank):\n" + _commented(torch_schedule_csv(plan_schedule(plan)))
        return text
    if engine == "torch":
        return (
            torch_split_snippet(plan)
            + "\n# schedule CSV for _PipelineScheduleRuntime._load_csv (one row per rank):\n"
            + torch_schedule_csv(plan_schedule(plan))
        )
    raise InvalidInputError(f"engine must be one of {', '.join(ENGINES)}, got {engine!r}")


def _commented(text: str) -> str:
    return "".join(f"# {line}\n" for line in text.splitlines())


def plan_exports(plan: Plan | Sequence[int]) -> dict[str, dict[str, Any]]:
    """Every engine's export of ``plan``: ``{"text": .., "notes": [..]}``, or ``{"error": ..}`` where it cannot."""
    out: dict[str, dict[str, Any]] = {}
    for engine in ENGINES:
        try:
            out[engine] = {"text": export_plan(plan, engine), "notes": export_notes(plan, engine)}
        except InvalidInputError as error:
            out[engine] = {"error": str(error)}
    return out


def export_refusal(plan: Plan | Sequence[int], engine: str) -> str:
    """Why ``engine`` cannot run ``plan`` (the export's one-line error), or ``""`` when it can."""
    try:
        export_plan(plan, engine)
    except InvalidInputError as error:
        return str(error)
    return ""

