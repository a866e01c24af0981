"""Turn a partition (and a schedule) into what Megatron-LM, DeepSpeed and torch accept.

    from pipeplan import partition_layers
    from pipeplan.export import megatron_args, deepspeed_parts, torch_split_spec
    plan = partition_layers([2.0] * 32, 4, first_extra=16, last_extra=8)
    megatron_args(plan)   # ['--pipeline-model-parallel-size', '4', '--num-layers', '32', ...]

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
* **DeepSpeed** (``deepspeed/runtime/pipe/module.py``): ``PipelineModule``
  accepts ``partition_method`` ``"uniform"``, ``"parameters"`` or
  ``"type:<regex>"`` only; explicit boundaries are its ``parts`` list (``S + 1``
  offsets into the layer specs), which a subclass sets in ``_partition_layers``
  before calling ``_set_bounds``. One stage per rank.
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
from collections.abc import Sequence
from typing import Any

from .errors import InvalidInputError
from .schedule import Schedule

__all__ = [
    "megatron_args",
    "megatron_layout",
    "deepspeed_parts",
    "deepspeed_snippet",
    "torch_split_spec",
    "torch_split_snippet",
    "torch_schedule_csv",
    "torch_actions",
]


def _plan_shape(plan: Any) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """``(layers_per_stage, placement)`` of a PartitionResult, ChunkPlacement or list of sizes."""
    if hasattr(plan, "layers_per_stage"):
        sizes = tuple(int(n) for n in plan.layers_per_stage)
        placement = tuple(int(r) for r in getattr(plan, "placement", ()) or range(len(sizes)))
    else:
        sizes = tuple(int(n) for n in plan)
        placement = tuple(range(len(sizes)))
    if not sizes or any(n < 1 for n in sizes):
        raise InvalidInputError(f"layers_per_stage must be counts >= 1, got {list(sizes)}")
    if len(placement) != len(sizes):
        raise InvalidInputError(
            f"placement has {len(placement)} entries, expected {len(sizes)} (one per stage)"
        )
    return sizes, placement


def _detect(plan: Any, embedding_layer: bool | None, loss_layer: bool | None) -> tuple[bool, bool]:
    names: Sequence[str] = getattr(getattr(plan, "profile", None), "names", ()) or ()
    if embedding_layer is None:
        embedding_layer = bool(names) and names[0] in ("embedding", "embed", "tok_embeddings")
    if loss_layer is None:
        loss_layer = bool(names) and names[-1] in ("output_layer", "lm_head", "loss", "output")
    return embedding_layer, loss_layer


# ------------------------------------------------------------------ Megatron
def _decoder_counts(sizes: Sequence[int], embedding_layer: bool, loss_layer: bool) -> list[int]:
    counts = list(sizes)
    if embedding_layer:
        counts[0] -= 1
    if loss_layer:
        counts[-1] -= 1
    return counts


def megatron_layout(
    plan: Any, *, embedding_layer: bool | None = None, loss_layer: bool | None = None
) -> str:
    """The ``--pipeline-model-parallel-layout`` string for ``plan``.

    Args:
        plan: a partition result, a chunk placement, or a list of layers per stage.
        embedding_layer: the first profiled layer *is* the embedding (written ``E``
            instead of ``t``). Default: detected from the profile's layer names;
            otherwise ``E`` is added to the first stage.
        loss_layer: the last profiled layer is the output layer/loss (``L``);
            otherwise ``L`` is added to the last stage.

    Raises:
        InvalidInputError: a placement other than Megatron's ``s mod P``.
    """
    sizes, placement = _plan_shape(plan)
    embedding_layer, loss_layer = _detect(plan, embedding_layer, loss_layer)
    num_ranks = max(placement) + 1
    expected = tuple(s % num_ranks for s in range(len(sizes)))
    if len(sizes) % num_ranks or placement != expected:
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
    plan: Any, *, embedding_layer: bool | None = None, loss_layer: bool | None = None
) -> list[str]:
    """Megatron-LM command-line arguments that reproduce ``plan``.

    One chunk per rank with equal middle stages gives
    ``--decoder-first-pipeline-num-layers`` / ``--decoder-last-pipeline-num-layers``
    (only those that differ from the middle); anything else gives
    ``--pipeline-model-parallel-layout`` (see :func:`megatron_layout`).
    ``--num-layers`` counts decoder layers only.
    """
    sizes, placement = _plan_shape(plan)
    embedding_layer, loss_layer = _detect(plan, embedding_layer, loss_layer)
    num_ranks = max(placement) + 1
    counts = _decoder_counts(sizes, embedding_layer, loss_layer)
    args = ["--pipeline-model-parallel-size", str(num_ranks), "--num-layers", str(sum(counts))]
    one_chunk = len(sizes) == num_ranks and placement == tuple(range(num_ranks))
    if one_chunk and len(set(counts)) == 1:
        return args  # Megatron's default even split
    middle = counts[1:-1]
    if one_chunk and num_ranks > 1 and counts[0] > 0 and counts[-1] > 0 and len(set(middle)) <= 1:
        share = middle[0] if middle else None
        if share is None or counts[0] != share:
            args += ["--decoder-first-pipeline-num-layers", str(counts[0])]
        if share is None or counts[-1] != share:
            args += ["--decoder-last-pipeline-num-layers", str(counts[-1])]
        return args
    layout = megatron_layout(plan, embedding_layer=embedding_layer, loss_layer=loss_layer)
    return args + ["--pipeline-model-parallel-layout", layout]


# ------------------------------------------------------------------ DeepSpeed
def deepspeed_parts(plan: Any, *, offset: int = 0, trailing: int = 0) -> list[int]:
    """``PipelineModule.parts``: ``S + 1`` offsets into the layer specs.

    Args:
        plan: a partition result or a list of layers per stage (one stage per rank).
        offset: specs before the first profiled layer that belong to stage 0
            (an embedding spec, a lambda), not in the profile.
        trailing: specs after the last profiled layer that belong to the last stage.
    """
    sizes, placement = _plan_shape(plan)
    if placement != tuple(range(len(sizes))):
        raise InvalidInputError(
            f"DeepSpeed runs one stage per rank in order; placement {list(placement)} is not that"
        )
    if offset < 0 or trailing < 0:
        raise InvalidInputError(f"offset and trailing must be >= 0, got {offset} and {trailing}")
    parts = [0]
    for index, count in enumerate(sizes):
        parts.append(parts[-1] + count + (offset if index == 0 else 0))
    parts[-1] += trailing
    return parts


def deepspeed_snippet(plan: Any, *, offset: int = 0, trailing: int = 0) -> str:
    """Python a user pastes: a ``PipelineModule`` subclass with pipeplan's boundaries."""
    parts = deepspeed_parts(plan, offset=offset, trailing=trailing)
    return (
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
        f"# model = PlannedPipelineModule(layers=specs, num_stages={len(parts) - 1}, loss_fn=loss_fn)\n"
    )


# ---------------------------------------------------------------------- torch
def torch_split_spec(plan: Any, names: Sequence[str] | None = None) -> dict[str, str]:
    """``{module name: "BEGINNING"}`` for the first layer of stages 1..S-1.

    Args:
        plan: a partition result (its profile's names are used) or a chunk placement.
        names: module names, one per layer; default the profile's (``layers.0``, ...).
    """
    sizes, _ = _plan_shape(plan)
    if names is None:
        profile = getattr(plan, "profile", None)
        names = profile.names if profile is not None else [f"layers.{i}" for i in range(sum(sizes))]
    if len(names) != sum(sizes):
        raise InvalidInputError(f"names has {len(names)} entries, expected {sum(sizes)} (one per layer)")
    spec = {}
    start = 0
    for count in sizes[:-1]:
        start += count
        spec[str(names[start])] = "BEGINNING"
    return spec


def torch_split_snippet(plan: Any, names: Sequence[str] | None = None) -> str:
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
