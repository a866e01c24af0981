"""torch.distributed.pipelining: ``split_spec.py`` (stages by module path, FSDP2 wrapping) and ``schedule.csv``.

    from pipeplan.engines.pipelining import torch_files, torch_schedule_csv
    torch_schedule_csv(schedule)     # "0F0,0F1,...\\n1F0,..." one row per rank, what _load_csv reads
    torch_files(plan)                # split_spec.py and schedule.csv

What torch accepts (torch/distributed/pipelining/_IR.py and schedules.py, torch 2.13):
``pipeline(module, mb_args, split_spec={"layers.4": SplitPoint.BEGINNING, ...})`` splits
before the named submodules; ``_PipelineScheduleRuntime._load_csv(path)`` reads one row
per rank, one action per cell, ``{stage}{F|B|I|W}{microbatch}`` (``I`` the input
gradient of a split backward, ``B`` a full backward), and infers the stage → rank map.
``split_spec.py`` builds each rank's ``PipelineStage`` objects itself from
``MODULE_FQNS_PER_STAGE`` (``build_stages``: the listed modules under their own paths,
run in order) and its schedule from the CSV (``build_schedule``), for every placement.
The tracer's split spec is written only where it runs: not where a stage begins at a
joint layer (two module paths at one depth, π0's Gemma and action-expert layers), which
one split point cannot name, and not where a rank holds two adjacent stages (ZB-V's V:
torch's P2P warm-up of the tracer's stages fails, gloo "Pair is not connected"). With
``fsdp``/``hsdp`` data parallelism each listed module is wrapped with ``fully_shard``
(FSDP2), then the stage (``build_stages(..., prepare=...)``). With ``ddp``/``zero1``/``zero2`` and
the DDP knobs given (``--bucket-cap-mb``, ``--find-unused-parameters``), ``DDP_OPTIONS`` carries
the keyword arguments ``DistributedDataParallel`` takes for them (``pipeplan check`` reads them back).

The DDP knobs (torch 2.13, torch/nn/parallel/distributed.py): ``bucket_cap_mb`` (default
:data:`DDP_BUCKET_CAP_MB`, MiB) caps each gradient bucket, whose all-reduce starts as soon as its
gradients are ready in the backward, one collective call per bucket; ``find_unused_parameters``
(default off) makes DDP walk the autograd graph from the outputs before every backward that
synchronises (``_post_forward`` → ``reducer.prepare_for_backward(outputs)``; skipped under
``no_sync``; torch.distributed.pipelining calls it once per step, before each stage's last backward,
``PipelineStage.backward_maybe_with_nosync``): host time per autograd node,
:data:`FIND_UNUSED_US_PER_NODE` (``benchmarks/ddp_find_unused.py``).
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Mapping, Sequence

from ..errors import InvalidInputError
from ..plan import Plan
from ..schedule import Schedule
from ._common import ExportFile, to_plan
from ._names import LayerName, invented_note, layer_names, stage_fqns
from ._eager import COMPILE_KNOB, TORCHTITAN_COMPILE_SPEEDUP, TORCHTITAN_EAGER_FACTORS, torch_tp_overlap
from .record import Engine, Files, Knob, Knobs, NumberKnob, Pricing, Runs
from .pipelining_read import read_torch_export

__all__ = ["torch_split_spec", "torch_split_snippet", "torch_actions", "torch_schedule_csv", "plan_schedule",
           "torch_files", "DDP_BUCKET_CAP_MB", "FIND_UNUSED_US", "DDP_MODES", "TORCH_KNOBS", "torch_pricing",
           "ENGINE"]

#: the data-parallel modes the torch export runs with ``DistributedDataParallel`` (fsdp/hsdp: ``fully_shard``)
DDP_MODES: tuple[str, ...] = ("ddp", "zero1", "zero2")

#: ``DistributedDataParallel(bucket_cap_mb=None)``'s bucket cap, MiB: ``_DEFAULT_BUCKET_CAP_MB = 25``
#: (torch/nn/parallel/distributed.py, torch 2.13). The one owner: the planner's ``torch-ddp`` sync takes it.
DDP_BUCKET_CAP_MB = 25

#: DDP's host time with ``find_unused_parameters=True``, µs, once per step on each rank (before the backward that
#: synchronises; module doc): ``(per trainable parameter tensor, per autograd node)`` of the rank's graph (the walk
#: visits every node; then every parameter is looked up among those seen). Fitted by ``python
#: benchmarks/ddp_find_unused.py --write`` (docs/engines.md, "DDP's find_unused_parameters, measured"): the
#: least-squares plane ``a + b·tensors + c·nodes`` of the extra CPU time per forward + backward of chains of
#: Linear(8, 8) layers with 1, 4 or 10 autograd ops each (64 to 4096 layers), real DDP on 2 gloo processes,
#: torch 2.13 CPU, a shared 2-core x86_64 host; ``a`` (a constant per step: gloo's all-reduce of the map of used
#: parameters on CPU) is not priced. The walk is the same C++ on a GPU server's host; not checked on a GPU run.
FIND_UNUSED_US: tuple[float, float] = (0.32, 1.35)


def _names_arg(plan: Plan, names: Sequence[str | LayerName] | None) -> list[LayerName] | None:
    """Plain module names (one per layer) as LayerNames; LayerNames as they are."""
    if names is None:
        return None
    return [name if isinstance(name, LayerName) else LayerName(fqns=(str(name),), role="decoder") for name in names]


def torch_split_spec(plan: Plan | Sequence[int], names: Sequence[str | LayerName] | None = None) -> dict[str, str]:
    """``{module path: "BEGINNING"}`` for the first layer of stages 1..S-1.

    Args:
        plan: a Plan (its layer names are used).
        names: module names (or :class:`LayerName`), one per layer; default the plan's.

    Raises:
        InvalidInputError: a stage starts at a joint layer (several module paths):
            torch's tracer cannot split there (use ``MODULE_FQNS_PER_STAGE``).
    """
    plan = to_plan(plan)
    if names is not None and len(names) != plan.num_layers:
        raise InvalidInputError(f"names has {len(names)} entries, expected {plan.num_layers} (one per layer)")
    resolved = layer_names(plan, _names_arg(plan, names))
    spec = {}
    for span in plan.layer_ranges[1:]:
        first = resolved[span.start]
        if len(first.fqns) != 1:
            raise InvalidInputError(
                f"stage starting at layer {span.start} begins with a joint layer ({', '.join(first.fqns)}): a split "
                "point names one module; split by MODULE_FQNS_PER_STAGE instead"
            )
        spec[first.fqns[0]] = "BEGINNING"
    return spec


#: the code ``split_spec.py`` carries: a stage module that keeps its modules' paths, and the stages and
#: the schedule built from ``MODULE_FQNS_PER_STAGE``, ``STAGE_TO_RANK`` and ``schedule.csv``.
_STAGE_CODE = '''

class StageModule(nn.Module):
    """The modules of one stage under their paths in the model, run in list order: ``x = module(x)``.

    ``get_submodule(fqn)`` and the state-dict keys are the model's own. Where a stage's modules are
    not one chain (two embedding tables, a joint layer's two stacks), pass build_stages your own
    ``stage_module(model, fqns)``.
    """

    def __init__(self, model, fqns):
        super().__init__()
        self.stage_fqns = list(fqns)
        for fqn in self.stage_fqns:
            parent = self
            *path, leaf = fqn.split(".")
            for part in path:
                if part not in parent._modules:
                    parent.add_module(part, nn.Module())
                parent = parent._modules[part]
            parent.add_module(leaf, model.get_submodule(fqn))

    def forward(self, x):
        for fqn in self.stage_fqns:
            x = self.get_submodule(fqn)(x)
        return x


def build_stages(model, rank, device, *, group=None, stage_module=StageModule, prepare=None):
    """This rank's PipelineStages: stage s for each s with STAGE_TO_RANK[s] == rank, in stage order.

    Each is stage_module(model, MODULE_FQNS_PER_STAGE[s]) (the model's own modules, shared with it),
    then prepare(module, s) when given (FSDP2: shard_stage with a mesh), moved to device. Works for
    every placement, a rank holding two adjacent stages (zb-v's V) included.
    """
    stages = []
    for index, owner in enumerate(STAGE_TO_RANK):
        if owner != rank:
            continue
        module = stage_module(model, MODULE_FQNS_PER_STAGE[index])
        if prepare is not None:
            module = prepare(module, index)
        stages.append(PipelineStage(module.to(device), index, len(STAGE_TO_RANK), device, group=group))
    return stages


def build_schedule(stages, n_microbatches, loss_fn, **options):
    """The schedule.csv beside this file, in torch's runtime: step(inputs, target=...) runs one batch.

    options go to _PipelineScheduleRuntime (scale_grads=False: gradients summed over microbatches).
    """
    schedule = _PipelineScheduleRuntime(stages, n_microbatches, loss_fn=loss_fn, **options)
    schedule._load_csv(os.path.join(os.path.dirname(os.path.abspath(__file__)), "schedule.csv"))
    return schedule
'''


def _adjacent_on_one_rank(plan: Plan) -> int | None:
    """The first stage ``s`` whose rank also holds stage ``s + 1`` (``None``: none does)."""
    placement = list(plan.placement)
    return next((s for s in range(len(placement) - 1) if placement[s] == placement[s + 1]), None)


def torch_split_snippet(plan: Plan | Sequence[int], names: Sequence[str | LayerName] | None = None, *,
                        compile: bool = False, ddp: Mapping[str, float | bool] | None = None) -> str:
    """``split_spec.py``: every stage's module paths, ``build_stages`` / ``build_schedule``, the tracer's split, FSDP2.

    ``compile``: what pipeplan priced (``--compile on``), written as ``COMPILE = True/False``
    for ``pipeplan check`` to read back; the user wraps the model in ``torch.compile`` themselves.
    ``ddp``: ``DistributedDataParallel``'s keyword arguments pipeplan priced (``bucket_cap_mb``,
    ``find_unused_parameters``), written as ``DDP_OPTIONS`` where the mode runs DDP (:data:`DDP_MODES`).

    ``build_stages(model, rank, device)`` makes this rank's ``PipelineStage`` from the listed
    modules (every placement); the tracer's ``split_spec`` is kept where it works (no rank
    holds two adjacent stages: torch's P2P warm-up fails there, gloo "Pair is not connected").
    """
    plan = to_plan(plan)
    resolved = layer_names(plan, _names_arg(plan, names))
    fqns = stage_fqns(plan, resolved)
    invented = invented_note(resolved)
    lines = [
        '"""pipeplan: how to cut the model into its pipeline stages, and (FSDP/HSDP) how to shard them.',
        "",
        f"{plan.num_stages} stages on {plan.pp} ranks (stage s on rank STAGE_TO_RANK[s]); the order is schedule.csv:",
        "    stages = build_stages(model, rank, device)      # this rank's PipelineStages, from MODULE_FQNS_PER_STAGE",
        "    schedule = build_schedule(stages, n_microbatches, loss_fn)   # _PipelineScheduleRuntime + _load_csv",
        "    schedule.step(inputs if rank == STAGE_TO_RANK[0] else None,",
        "                  target=target if rank == STAGE_TO_RANK[-1] else None)",
        *([""] + [f"NOTE: {invented}"] if invented else []),
        '"""',
        "import os",
        "",
        "from torch import nn",
        "from torch.distributed.pipelining import PipelineStage, SplitPoint",
        "from torch.distributed.pipelining.schedules import _PipelineScheduleRuntime",
        "",
        f"STAGE_TO_RANK = {list(plan.placement)}",
        f"LAYERS_PER_STAGE = {list(plan.layers_per_stage)}  # pipeplan's layers per stage (pipeplan check reads it)",
        "# torch.compile as pipeplan priced it (--compile): with True, wrap the model in torch.compile yourself",
        f"COMPILE = {compile}",
        "MODULE_FQNS_PER_STAGE = [",
        *[f"    {json.dumps(stage)}," for stage in fqns],
        "]",
    ]
    lines += _STAGE_CODE.rstrip("\n").split("\n")
    adjacent = _adjacent_on_one_rank(plan)
    try:
        spec = torch_split_spec(plan, resolved)
    except InvalidInputError as error:
        lines += ["", f"# no tracer split_spec: {error}; use build_stages", "split_spec = None"]
    else:
        if adjacent is not None:
            lines += ["", f"# no tracer split_spec: rank {plan.placement[adjacent]} holds stages {adjacent} and "
                          f"{adjacent + 1}, where pipeline(split_spec)'s stages fail torch's P2P warm-up "
                          "(gloo: Pair is not connected); use build_stages", "split_spec = None"]
        else:
            lines += ["", "# or torch's tracer: pipe = pipeline(model, mb_args=(example_microbatch,), split_spec=split_spec)",
                      "split_spec = {"]
            lines += [f"    {name!r}: SplitPoint.BEGINNING," for name in spec]
            lines.append("}")
    lines += _fsdp_lines(plan, ddp or {})
    return "\n".join(lines) + "\n"


def _fsdp_lines(plan: Plan, ddp: Mapping[str, float | bool]) -> list[str]:
    if plan.dp_mode not in ("fsdp", "hsdp"):
        lines = ["", f"DATA_PARALLEL = {plan.dp_mode!r}  # {plan.dp} replicas; DDP/ZeRO wrap the stage modules whole"]
        if ddp and plan.dp_mode in DDP_MODES:
            options = ", ".join(f"{key!r}: {value!r}" for key, value in ddp.items())
            lines += ["# DistributedDataParallel(stage_module, **DDP_OPTIONS): as pipeplan priced it "
                      "(--bucket-cap-mb, --find-unused-parameters)", f"DDP_OPTIONS = {{{options}}}"]
        return lines
    mesh = "a 2-D mesh (replicate across nodes, shard inside)" if plan.dp_mode == "hsdp" else "a 1-D mesh of dp ranks"
    return [
        "",
        f"DATA_PARALLEL = {plan.dp_mode!r}  # {plan.dp} data-parallel ranks",
        "",
        "",
        "def shard_stage(stage_module, stage_index, mesh):",
        f'    """FSDP2: fully_shard each layer of the stage, then the stage; mesh is {mesh}.',
        "",
        "    build_stages(model, rank, device, prepare=lambda module, index: shard_stage(module, index, mesh))",
        '    """',
        "    from torch.distributed.fsdp import fully_shard",
        "",
        "    for fqn in MODULE_FQNS_PER_STAGE[stage_index]:",
        "        fully_shard(stage_module.get_submodule(fqn), mesh=mesh)",
        "    return fully_shard(stage_module, mesh=mesh)",
    ]


def torch_actions(schedule: Schedule) -> list[list[str]]:
    """Per rank, the schedule's actions in torch's compact form (``0F0``, ``1B0``, ``2I1``, ``2W1``)."""
    # pipeplan's kinds are torch's: F, B (full), I, W
    return [[f"{stage}{kind.value}{mb}" for kind, stage, mb in order] for order in schedule.orders]


def torch_schedule_csv(schedule: Schedule) -> str:
    """The CSV ``_PipelineScheduleRuntime._load_csv(path, format="compute_only")`` reads (no blank line)."""
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
    plan = to_plan(plan)
    if plan.timeline is not None:
        return plan.timeline.schedule
    from ..schedules import build_schedule, schedule_info

    if plan.schedule == "custom" or schedule_info(plan.schedule).cost_aware:
        raise InvalidInputError(
            f"schedule {plan.schedule!r} depends on the costs; export a plan from the planner (it keeps its timeline)"
        )
    return build_schedule(plan.schedule, num_stages=plan.num_stages, num_microbatches=plan.num_microbatches,
                          **schedule_info(plan.schedule).shape_options(plan.virtual_stages))


def torch_files(plan: Plan | Sequence[int], names: Sequence[str | LayerName] | None = None, *,
                schedule: Schedule | None = None, compile: bool = False,
                ddp: Mapping[str, float | bool] | None = None) -> list[ExportFile]:
    """``split_spec.py`` and ``schedule.csv`` (``schedule``: the order to write, default the plan's; ``compile``:
    ``--compile on`` priced, written as ``COMPILE = True``; ``ddp``: DDP's keyword arguments priced,
    ``DDP_OPTIONS``)."""
    plan = to_plan(plan)
    order = schedule if schedule is not None else plan_schedule(plan)
    if tuple(order.placement) != tuple(plan.placement):
        raise InvalidInputError(f"the schedule places stages {list(order.placement)}, the plan {list(plan.placement)}")
    return [ExportFile("split_spec.py", torch_split_snippet(plan, names, compile=compile, ddp=ddp)),
            ExportFile("schedule.csv", torch_schedule_csv(order))]


def _write(plan: Plan, target: str, names: Sequence[LayerName] | None, *, schedule: Schedule | None,
           gpus_per_node: int) -> list[ExportFile]:
    return torch_files(plan, names, schedule=schedule)


def _ddp_options(knobs: Mapping[str, str]) -> dict[str, float | bool]:
    """DDP's keyword arguments of the knobs given: ``bucket_cap_mb`` (MiB, an int where whole) and
    ``find_unused_parameters``."""
    options: dict[str, float | bool] = {}
    if "bucket-cap-mb" in knobs:
        value = float(knobs["bucket-cap-mb"])
        options["bucket_cap_mb"] = int(value) if value.is_integer() else value
    if "find-unused-parameters" in knobs:
        options["find_unused_parameters"] = knobs["find-unused-parameters"] == "on"
    return options


def _write_knobs(plan: Plan, target: str, names: Sequence[LayerName] | None, *, schedule: Schedule | None,
                 gpus_per_node: int, knobs: Mapping[str, str]) -> list[ExportFile]:
    """:func:`_write` with the knobs given: ``compile`` written as ``COMPILE = True/False`` in ``split_spec.py``, the
    DDP knobs as ``DDP_OPTIONS``."""
    return torch_files(plan, names, schedule=schedule, compile=knobs.get("compile") in ("on", "model"),
                       ddp=_ddp_options(knobs))


#: plain torch's knobs: ``torch.compile`` (:mod:`._eager`) and DistributedDataParallel's bucket cap and
#: ``find_unused_parameters`` (docs/engines.md, "plain torch").
TORCH_KNOBS = Knobs((
    COMPILE_KNOB,
    NumberKnob("bucket-cap-mb", (), None,
               "DistributedDataParallel(bucket_cap_mb=N), ddp/zero1/zero2: the gradients all-reduce in buckets of "
               "N MiB during the last microbatch's backward, one all-reduce call (and its latency) per bucket, the "
               "last bucket exposed after the backward",
               unit="MiB", zero=False,
               assumed=f"DDP's own {DDP_BUCKET_CAP_MB} MiB (torch.nn.parallel.DistributedDataParallel)"),
    Knob("find-unused-parameters", ("on", "off"), "off",
         "DistributedDataParallel(find_unused_parameters=True), ddp/zero1/zero2: DDP walks the autograd graph from "
         "the outputs once per step before the backward that synchronises, host time per parameter tensor and "
         "per autograd node (benchmarks/ddp_find_unused.py), exposed"),
))


def torch_pricing(knobs: Mapping[str, str]) -> Pricing:
    """What plain torch's DDP knobs (``name → value`` as given, DDP's defaults otherwise) change in a step.

    * ``bucket-cap-mb`` (default DDP's :data:`DDP_BUCKET_CAP_MB`): ``ddp``/``zero1``/``zero2`` reduce in buckets
      of that many MiB overlapping the last microbatch's backward on every pipeline rank
      (torch.distributed.pipelining reduces at each stage's last backward), each bucket its own all-reduce
      call paying the collective's latency; ``--grad-sync`` does not apply.
    * ``find-unused-parameters on``: :data:`FIND_UNUSED_US` per trainable tensor and per autograd node of each
      rank's graph, once per step, exposed.
    """
    bucket = float(knobs.get("bucket-cap-mb", DDP_BUCKET_CAP_MB))
    walk = knobs.get("find-unused-parameters") == "on"
    return Pricing(sync="torch-ddp", overlap={mode: True for mode in DDP_MODES}, bucket_bytes=bucket * 2 ** 20,
                   bucket_calls=True,
                   walk_us={mode: FIND_UNUSED_US for mode in DDP_MODES} if walk else {})


#: plain torch: any order from the schedule CSV, any data-parallel mode (FSDP2 for fsdp and hsdp); exact. Its
#: kernels are torch's eager ones unless the model is compiled (``--compile``): priced as torchtitan's, which runs
#: the same eager kernels (torchtitan is plain torch with FSDP2), by the same fitted numbers (:mod:`._eager`).
ENGINE = Engine("torch", Runs(), Files(targets=("torch",), write=_write, read=read_torch_export,
                                       knobs=("compile", "bucket-cap-mb", "find-unused-parameters"),
                                       write_knobs=_write_knobs),
                knobs=TORCH_KNOBS, pricing=torch_pricing, compute_factors=TORCHTITAN_EAGER_FACTORS,
                compile_speedup=TORCHTITAN_COMPILE_SPEEDUP, tp_overlap=torch_tp_overlap)
