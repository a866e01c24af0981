"""Megatron-LM's command line for a plan: the split, tensor parallelism, the optimizer, recompute.

    from pipeplan.engines.megatron import megatron_args, megatron_line
    megatron_args([3, 11, 11, 7])   # ['--pipeline-model-parallel-size', '4', '--num-layers', '32', ...]
    megatron_line(plan)             # the same, one shlex-quoted line a shell takes as it is

What Megatron-LM accepts, read from NVIDIA/Megatron-LM at commit d98e8a64 (2026-08-22):
``megatron/training/arguments.py`` (``validate_args``),
``megatron/core/transformer/transformer_block.py`` (``get_num_layers_to_build``) and
``megatron/core/transformer/pipeline_parallel_layer_layout.py``.

* ``--num-layers`` counts decoder (transformer) layers only. The word embedding and
  the output layer + loss sit on the first and last stage.
* An even split counting the embedding and the loss as one layer each is
  ``--account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split``
  (``num_layers + 2`` must divide by ``P`` — by ``P·V`` with virtual stages — and
  the first and last chunk build one decoder layer fewer).
* ``--decoder-first-pipeline-num-layers`` / ``--decoder-last-pipeline-num-layers``
  set the first / last rank's decoder layers; the other ranks share the rest
  equally (it must divide), one chunk per rank.
* Anything else is ``--pipeline-model-parallel-layout``: stages separated by ``|``,
  virtual stage 0 of every rank first (stage ``s`` on rank ``s mod P``), ``E``
  embedding, ``t`` a decoder layer, ``L`` the loss, ``x*n`` repeats. No other
  placement exists in Megatron-LM.
* Batches: ``--micro-batch-size``, ``--global-batch-size`` (Megatron derives ``m``);
  ``--bf16``, the mixed precision the step model prices (Megatron-LM's default is fp32).
  ``--tensor-model-parallel-size``, ``--sequence-parallel``; ZeRO-1 is
  ``--use-distributed-optimizer``. Recompute applies to every transformer layer alike:
  ``--recompute-granularity selective --recompute-modules core_attn`` (attention,
  Korthikanti et al.'s selective recompute) or ``full`` with ``--recompute-method
  uniform --recompute-num-layers 1``; pipeplan's ``block:N`` and ``uniform:N``
  (:func:`pipeplan.plan.stage_recompute`) are ``full`` with ``--recompute-method
  block|uniform --recompute-num-layers N``.
* Megatron-LM runs 1F1B and interleaved 1F1B (the zero-bubble schedules live in a
  fork, sail-sg/zero-bubble-pipeline-parallelism). It has no port of a model whose
  layers are not GPT layers (a vision tower, an action head): :func:`megatron_mapping`
  gives the stage → module table for those instead of flags.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from typing import cast

from ..errors import InvalidInputError
from ..models.spec import ModelSpec
from ..plan import MEGATRON_TP_COMM_OVERLAPS, RECOMPUTE_MODES, STAGE_RECOMPUTE, Plan, stage_recompute
from ..schedule import Schedule
from ..schedules.patterns import loop_placement
from ._common import ExportFile, recompute_notes, strongest_recompute, to_plan
from ._names import LayerName, Role, layer_names, layer_names_in_reference
from .megatron_args import read_megatron_args
from .record import GRAD_REDUCE_BYTES, Engine, Files, Knob, Knobs, NumberKnob, Pricing, Runs

__all__ = [
    "MEGATRON_COMMIT",
    "MEGATRON_SCHEDULES",
    "megatron_args",
    "megatron_line",
    "megatron_layout",
    "megatron_mapping",
    "megatron_files",
    "megatron_notes",
    "megatron_port",
    "megatron_model_refusal",
    "megatron_instead",
    "MEGATRON_KNOBS",
    "ENGINE",
]

#: the Megatron-LM commit the flags and rules were read from
MEGATRON_COMMIT = "d98e8a64ddf34856e74b24714e3bedb2f5a39553"
#: the schedules Megatron-LM runs
MEGATRON_SCHEDULES = ("1f1b", "interleaved")
#: data-parallel modes with a Megatron-LM flag in this export (ZeRO-1: the distributed optimizer)
_DP_FLAGS = {"ddp": [], "zero1": ["--use-distributed-optimizer"]}
#: ``--grad-reduce-dtype`` → Megatron-LM's flag: megatron/training/arguments.py (validate_args under --bf16)
#: and training.py (``grad_reduce_in_fp32=args.accumulate_allreduce_grads_in_fp32``)
_GRAD_REDUCE_FLAGS = {"bf16": "--grad-reduce-in-bf16", "fp32": "--accumulate-allreduce-grads-in-fp32"}
#: the roles of a model Megatron-LM runs as a GPT
_MEGATRON_ROLES = ("embedding", "decoder", "loss")


def megatron_port(spec: ModelSpec) -> bool:
    """True when every layer's role is embedding, decoder or loss (the model runs as a Megatron GPT)."""
    return all(name.role in _MEGATRON_ROLES for name in layer_names_in_reference(spec))


def _port_gap(resolved: Sequence[LayerName], roles: Sequence[str]) -> str:
    """Why Megatron-LM has no port of a model whose layers have ``roles`` (``""``: it has one)."""
    others = sorted({fqn.rpartition(".")[0] or fqn for name, role in zip(resolved, roles) if role == "other"
                     for fqn in name.fqns[:1]})
    if others:
        return f"its {', '.join(others)} layers are not GPT layers"
    misplaced = [i for i, role in enumerate(roles) if (role == "embedding" and i != 0)
                 or (role == "loss" and i != len(roles) - 1)]
    if misplaced:
        return f"layer {misplaced[0]} is an embedding or loss layer away from the model's ends"
    return ""


def _port_refusal(resolved: Sequence[LayerName], roles: Sequence[str]) -> str:
    """The one-line refusal of a model Megatron-LM has no port of (``""``: it has one)."""
    what = _port_gap(resolved, roles)
    if what:
        return (f"Megatron-LM has no port of this model ({what}): flags would only look runnable; "
                "use --export torch or torchtitan (module paths), or megatron_mapping() for the stage → module table")
    if "decoder" not in roles:
        return "Megatron-LM needs at least one decoder (transformer) layer; the plan has none"
    return ""


def megatron_model_refusal(spec: ModelSpec) -> str:
    """Why Megatron-LM runs no plan of ``spec`` (``""``: a GPT it runs), from the model alone.

    A plain GPT (embedding, transformer stack, LM head) gets its roles without recording
    them (:func:`~pipeplan.engines._names.gpt_roles`); a vision tower, projector or action
    head has no Megatron-LM port.
    """
    resolved = layer_names_in_reference(spec)
    return _port_refusal(resolved, [name.role for name in resolved])


def _roles(plan: Plan, names: Sequence[LayerName] | None, embedding: bool | None, loss: bool | None) -> list[str]:
    """One Megatron role per layer; raises for a model Megatron-LM has no port of."""
    resolved = layer_names(plan, names)
    roles: list[str] = [name.role for name in resolved]
    if embedding is not None:
        roles[0] = "embedding" if embedding else ("decoder" if roles[0] == "embedding" else roles[0])
    if loss is not None:
        roles[-1] = "loss" if loss else ("decoder" if roles[-1] == "loss" else roles[-1])
    refusal = _port_refusal(resolved, roles)
    if refusal:
        raise InvalidInputError(refusal)
    return roles


def _stage_symbols(plan: Plan, roles: list[str]) -> list[tuple[bool, int, bool]]:
    """Per stage: (holds the embedding, decoder layers, holds the loss)."""
    return [("embedding" in [roles[i] for i in span], sum(roles[i] == "decoder" for i in span),
             "loss" in [roles[i] for i in span]) for span in plan.layer_ranges]


def _check_runs(plan: Plan) -> None:
    if plan.pp > 1 and plan.schedule not in MEGATRON_SCHEDULES:
        raise InvalidInputError(
            f"Megatron-LM runs 1F1B and interleaved 1F1B only, not {plan.schedule!r}; "
            "use the torch or torchtitan export (schedule CSV) for this plan"
        )
    if plan.placement != loop_placement(plan.pp, plan.num_stages // plan.pp):
        raise InvalidInputError(
            f"Megatron-LM places stage s on rank s mod P; placement {list(plan.placement)} is not that "
            "(use the torch export's schedule CSV for a custom placement)"
        )
    if plan.dp_mode not in _DP_FLAGS:
        raise InvalidInputError(
            f"pipeplan exports Megatron-LM plans with ddp or zero1 (--use-distributed-optimizer), not "
            f"{plan.dp_mode!r}; torchtitan runs pipeline + {plan.dp_mode} (--export torchtitan)"
        )


def megatron_layout(plan: Plan | Sequence[int], names: Sequence[LayerName] | None = None, *,
                    embedding_layer: bool | None = None, loss_layer: bool | None = None) -> str:
    """The ``--pipeline-model-parallel-layout`` string for ``plan`` (``E`` and ``L`` added where absent).

    Args:
        plan: a Plan (or what :func:`~pipeplan.plan.as_plan` takes).
        names: the model's layer names and roles (default: guessed from the plan's).
        embedding_layer / loss_layer: override whether the first / last layer is
            the embedding / the loss (otherwise from the roles).

    Raises:
        InvalidInputError: a placement other than ``s mod P``, or a model Megatron has no port of.
    """
    plan = to_plan(plan)
    if plan.placement != loop_placement(plan.pp, plan.num_stages // plan.pp):
        raise InvalidInputError(
            f"Megatron-LM places stage s on rank s mod P; placement {list(plan.placement)} is not that "
            "(use the torch export's schedule CSV for a custom placement)"
        )
    stages = []
    symbols = _stage_symbols(plan, _roles(plan, names, embedding_layer, loss_layer))
    for index, (_, count, _) in enumerate(symbols):
        text = "E" if index == 0 else ""
        text += "t" if count == 1 else (f"t*{count}" if count > 1 else "")
        text += "L" if index == len(symbols) - 1 else ""
        stages.append(text)
    return "|".join(stages)


def _split(plan: Plan, roles: list[str]) -> list[str]:
    symbols = _stage_symbols(plan, roles)
    counts = [count for _, count, _ in symbols]
    embedding, loss = roles[0] == "embedding", roles[-1] == "loss"
    sizes = [count + has_e + has_l for has_e, count, has_l in symbols]
    accounted = ["--account-for-embedding-in-pipeline-split"] * embedding + ["--account-for-loss-in-pipeline-split"] * loss
    virtual = plan.virtual_stages
    if len(set(counts)) == 1 and not (virtual > 1 and (embedding or loss)):
        return [] if virtual == 1 else ["--num-layers-per-virtual-pipeline-stage", str(counts[0])]
    if accounted and len(set(sizes)) == 1 and all(counts):
        return accounted + ([] if virtual == 1 else ["--num-layers-per-virtual-pipeline-stage", str(sizes[0])])
    if virtual == 1 and plan.pp > 1 and counts[0] > 0 and counts[-1] > 0 and len(set(counts[1:-1])) <= 1:
        share = counts[1] if plan.pp > 2 else None
        args = []
        if share is None or counts[0] != share:
            args += ["--decoder-first-pipeline-num-layers", str(counts[0])]
        if share is None or counts[-1] != share:
            args += ["--decoder-last-pipeline-num-layers", str(counts[-1])]
        return args
    return ["--pipeline-model-parallel-layout", megatron_layout(plan, [LayerName(("l",), cast(Role, r)) for r in roles])]


def megatron_args(plan: Plan | Sequence[int], names: Sequence[LayerName] | None = None, *,
                  embedding_layer: bool | None = None, loss_layer: bool | None = None) -> list[str]:
    """Megatron-LM command-line arguments that reproduce ``plan``, one string per token.

    The split (see the module docstring), then tensor parallelism, the batch sizes,
    the distributed optimizer for ``zero1`` and the recompute flags.

    Raises:
        InvalidInputError: a schedule Megatron-LM does not run (zero-bubble, adaptive,
            GPipe), a placement it cannot make, a data-parallel mode it is not exported
            with, or a model it has no port of.
    """
    plan = to_plan(plan)
    roles = _roles(plan, names, embedding_layer, loss_layer)  # a model with no port is said first
    _check_runs(plan)
    args = ["--pipeline-model-parallel-size", str(plan.pp), "--num-layers", str(roles.count("decoder"))]
    args += _split(plan, roles)
    if plan.tp > 1:
        args += ["--tensor-model-parallel-size", str(plan.tp)]
        if plan.sequence_parallel:
            args.append("--sequence-parallel")
        if plan.tp_comm_overlap == "on":  # Transformer Engine's userbuffers overlap (the step model's "on")
            args.append("--tp-comm-overlap")
    args += ["--micro-batch-size", str(plan.micro_batch_size), "--global-batch-size", str(plan.global_batch)]
    args += _DP_FLAGS[plan.dp_mode]
    if plan.grad_sync == "megatron-overlap" and plan.dp > 1:
        args.append("--overlap-grad-reduce")
        if plan.dp_mode == "zero1":
            args.append("--overlap-param-gather")
    if plan.grad_reduce_dtype is not None:  # priced with --grad-reduce-dtype: Megatron-LM's flag for that dtype
        args.append(_GRAD_REDUCE_FLAGS[plan.grad_reduce_dtype])
    mode = strongest_recompute(plan)
    method = stage_recompute(mode)
    if mode == "selective":
        args += ["--recompute-granularity", "selective", "--recompute-modules", "core_attn"]
    elif mode == "full":
        args += ["--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"]
    elif method is not None:  # block:N or uniform:N, as the plan was priced (pipeplan.plan.stage_recompute)
        args += ["--recompute-granularity", "full", "--recompute-method", method[0],
                 "--recompute-num-layers", str(method[1])]
    args.append("--bf16")  # the step model prices bf16 mixed precision; without it Megatron-LM trains in fp32
    return args


def megatron_line(plan: Plan | Sequence[int], names: Sequence[LayerName] | None = None) -> str:
    """:func:`megatron_args` as one shell-quoted line (``'Et*15|t*16'`` stays one word in bash)."""
    return shlex.join(megatron_args(plan, names))


def megatron_notes(plan: Plan | Sequence[int]) -> list[str]:
    """What the Megatron export approximates of ``plan`` (recompute per stage or per module, tp-comm-overlap off,
    ``uniform:N``, which older Megatron-Core runs only on stages N divides)."""
    plan = to_plan(plan)
    notes = recompute_notes(plan, "Megatron-LM")
    method = stage_recompute(strongest_recompute(plan))
    if method is not None and method[0] == "uniform":
        notes.append(f"recompute uniform:{method[1]}: megatron-core 0.16.1 runs it only where {method[1]} divides "
                     "each stage's decoder layers (transformer_block.py _checkpointed_forward indexes past them "
                     f"otherwise); Megatron-LM {MEGATRON_COMMIT[:8]} shortens a stage's last group "
                     "(megatron/core/recompute.py), as priced")
    if plan.tp > 1 and plan.tp_comm_overlap == "off":
        notes.append("the plan was priced with tp-comm-overlap off (every tensor-parallel collective exposed); "
                     "Megatron-LM has no flag for that: it overlaps the backward's with the weight-gradient GEMMs "
                     "(tp-comm-overlap backward), never slower than priced")
    return notes


def megatron_mapping(plan: Plan | Sequence[int], names: Sequence[LayerName] | None = None) -> str:
    """The stage → rank → module table of ``plan`` (tab-separated, one row per layer).

    What the Megatron export gives instead of flags for a model it has no port of:
    which module paths each stage holds and their role.
    """
    plan = to_plan(plan)
    resolved = layer_names(plan, names)
    rows = ["stage\trank\tlayer\trole\tmodules"]
    for stage, span in enumerate(plan.layer_ranges):
        for index in span:
            name = resolved[index]
            rows.append(f"{stage}\t{plan.placement[stage]}\t{index}\t{name.role}\t{' '.join(name.fqns)}")
    return "\n".join(rows) + "\n"


def megatron_files(plan: Plan | Sequence[int], names: Sequence[LayerName] | None = None) -> list[ExportFile]:
    """``megatron_args.sh``: the flags as one shell-quoted line, in a script that runs a launcher with them.

    ``./megatron_args.sh`` prints the flags; ``./megatron_args.sh torchrun ... pretrain_gpt.py
    --hidden-size ...`` runs that command with the flags appended.
    """
    plan = to_plan(plan)
    line = megatron_line(plan, names)
    text = (
        "#!/usr/bin/env bash\n"
        f"# pipeplan: Megatron-LM flags for this plan ({plan.pp} pipeline ranks, tp {plan.tp}, dp {plan.dp}, "
        f"{plan.schedule_label}); checked against NVIDIA/Megatron-LM {MEGATRON_COMMIT[:8]}.\n"
        "# ./megatron_args.sh prints them; ./megatron_args.sh torchrun --nproc-per-node N pretrain_gpt.py "
        "[model and data flags] runs that with them appended.\n"
        "set -euo pipefail\n"
        f"LINE={shlex.quote(line)}\n"
        'eval "FLAGS=($LINE)"\n'
        'if [ "$#" -eq 0 ]; then printf \'%s\\n\' "$LINE"; else exec "$@" "${FLAGS[@]}"; fi\n'
    )
    return [ExportFile("megatron_args.sh", text, executable=True, printed=line + "\n")]


def megatron_instead(plan: Plan | Sequence[int], names: Sequence[LayerName] | None = None) -> dict[str, str]:
    """What a refused export gives instead of flags: ``{"mapping": ...}`` for a model Megatron-LM has no port of.

    Empty for any other plan (one Megatron-LM could run with other choices, or names that do not fit it).
    """
    plan = to_plan(plan)
    try:
        resolved = layer_names(plan, names)
    except InvalidInputError:
        return {}
    if not _port_gap(resolved, [name.role for name in resolved]):
        return {}
    return {"mapping": megatron_mapping(plan, names)}


def _write(plan: Plan, target: str, names: Sequence[LayerName] | None, *, schedule: Schedule | None,
           gpus_per_node: int) -> list[ExportFile]:
    return megatron_files(plan, names)


#: Megatron-LM's knobs the step model prices (docs/engines.md; pipeplan.planner.workload prices them).
MEGATRON_KNOBS = Knobs((
    Knob("recompute", RECOMPUTE_MODES + STAGE_RECOMPUTE, None,
         "--recompute-granularity selective (the attention core) or full (every layer's forward again, "
         "--recompute-method uniform --recompute-num-layers 1); block:N (--recompute-method block: the first N "
         "layers of each stage fully, the rest not at all), uniform:N (--recompute-method uniform: groups of N "
         "layers, one kept input per group, every layer's forward again); not given: the planner searches none, "
         "selective and full per stage", searched=RECOMPUTE_MODES),
    Knob("sequence-parallel", ("on", "off"), "on",
         "--sequence-parallel: norms, dropouts and residuals split over the tensor-parallel group "
         "(all-gather + reduce-scatter); off: all-reduces of the same volume and those activations "
         "held whole on every GPU of the group (Megatron-LM's own default is off)"),
    Knob("tp-comm-overlap", MEGATRON_TP_COMM_OVERLAPS, "backward",
         "what the tensor-parallel collectives hide behind: backward (Megatron-LM without "
         "--tp-comm-overlap: the backward's beside the weight-gradient GEMMs, the forward's exposed), "
         "on (--tp-comm-overlap: the forward's too), off (all exposed)"),
    NumberKnob("grad-reduce-dtype", tuple(GRAD_REDUCE_BYTES), None,
               "the data-parallel gradient reduction's dtype and the gradient buffer's: fp32 (Megatron-LM's "
               "default under --bf16: DistributedDataParallelConfig.grad_reduce_in_fp32), bf16 "
               "(--grad-reduce-in-bf16: half the all-reduce / reduce-scatter bytes and half the replicated "
               "gradient buffer)",
               assumed="each data-parallel mode's own: bf16 for ddp and zero2, fp32 for zero1 and fsdp/hsdp "
                       "(docs/planner.md; Megatron-LM itself reduces in fp32 under --bf16)"),
))


def megatron_pricing(knobs: Mapping[str, str]) -> Pricing | None:
    """What Megatron-LM's knobs change beyond the workload: ``grad-reduce-dtype`` only (``None`` without it).

    Source (megatron-core 0.16.1): ``DistributedDataParallelConfig.grad_reduce_in_fp32`` ("If true, reduce
    grads in fp32"), and ``DistributedDataParallel`` allocates each parameter's gradient buffer in
    ``torch.float if grad_reduce_in_fp32 else param.dtype`` (distributed_data_parallel.py): the buffer the
    all-reduce / reduce-scatter sends. Megatron-LM's ``--grad-reduce-in-bf16`` turns it off under ``--bf16``.
    """
    dtype = knobs.get("grad-reduce-dtype")
    if dtype is None:
        return None
    return Pricing(sync="megatron", grad_reduce_bytes=GRAD_REDUCE_BYTES[dtype])

#: Megatron-LM: 1F1B and interleaved 1F1B, with DDP or its distributed optimizer (ZeRO-1).
ENGINE = Engine(
    "megatron",
    Runs(schedules=MEGATRON_SCHEDULES, dp_modes_with_pipeline=tuple(_DP_FLAGS),
         dp_modes_without_pipeline=tuple(_DP_FLAGS), model=megatron_model_refusal),
    Files(targets=("megatron",), write=_write, notes=megatron_notes, instead=megatron_instead, paths=False,
          read=read_megatron_args),
    knobs=MEGATRON_KNOBS,
    pricing=megatron_pricing,
)
