"""A user's configuration as given, pinned and priced: the plan it runs, each value with where it came from.

    from pipeplan.check.pin import pin
    pinned = pin(config, workload, cluster, global_batch=256)   # config: a RunConfig
    pinned.plan.step_time                      # ms, the planner's evaluation of exactly that configuration
    pinned.values["micro_batch_size"]          # Filled(value=2, source='ds_config.json: train_micro_batch_size_per_gpu = 2')
    pinned.searched                            # ('dp_mode',): the fields the files left open, filled by a search

Every field the planner needs (tp, pp, dp, v, schedule, micro batch, microbatches,
global batch, data-parallel mode, gradient sync, recompute, sequence parallelism, TP
overlap, layers per stage) comes from the :class:`~pipeplan.engines.RunConfig` when the
files give it, is derived from the others (``dp = gpus / (tp · pp)``, ``m = B / (dp · b)``),
takes pipeplan's default where the files leave a knob open that the planner does not
search (gradient sync, the TP knobs: :class:`~pipeplan.planner.SearchOptions`,
:class:`~pipeplan.planner.Workload`), or is searched: the search narrowed to every value
known and to what the engine runs (:attr:`~pipeplan.planner.SearchOptions.engine`) fills it, and its source says ``"searched"``.
A fully given configuration is evaluated as is
(:func:`~pipeplan.planner.evaluate.evaluate_layout`: the same step the search gives the
same layout), on the engine's own split of the layers when the files give none
(:func:`default_split`). Memory is checked against the whole device (the user runs it;
:attr:`Pinned.plan` ``.fits`` says whether it fits); a search filling open fields keeps
pipeplan's headroom (:data:`~pipeplan.planner.DEFAULT_HEADROOM`), as ``plan`` does.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from .. import data_parallel, engines
from ..engines import RunConfig
from ..engines.pipelining_read import CSV_SCHEDULE
from ..engines._eager import compiles_loss
from ..errors import InvalidInputError
from ..partition.solver import even_split
from ..plan import MEGATRON_TP_COMM_OVERLAPS, Plan, Recompute, TpCommOverlap
from ..planner import Cluster, SearchOptions, Workload, search
from ..planner.baselines import megatron_split
from ..planner.engine_costs import EngineCosts
from ..planner.engine_memory import GATHERED_INPUT_ENGINES
from ..planner.evaluate import evaluate_layout
from ..planner.space import Config
from ..planner.step import SYNCS
from ..schedules import schedule_info

__all__ = ["Filled", "Pinned", "pin", "config_of", "default_split", "engine_knobs", "SEARCHED", "DEFAULT"]

#: The source of a value the search filled.
SEARCHED = "searched"
#: The source of a value pipeplan assumed where the files leave a knob open that is not searched.
DEFAULT = "pipeplan default"

#: Each engine's own split of ``L`` layers into ``S`` stages when its files name none. Megatron-LM:
#: equal middle stages with the remainder on the first and last (megatron/training/arguments.py);
#: the others: an even split (the export's own default). This belongs in the engine record
#: (:class:`pipeplan.engines.Runs`) once it says how each engine splits by default.
_SPLITS: Mapping[str, Callable[[int, int], tuple[int, ...]]] = {"megatron": megatron_split}

#: The planner fields, in the order the output lists them (``dp`` is derived, never read).
ORDER = ("gpus", "tp", "pp", "dp", "dp_mode", "grad_sync", "schedule", "virtual_stages", "micro_batch_size",
         "num_microbatches", "global_batch", "layers_per_stage", "recompute", "sequence_parallel",
         "tp_comm_overlap", "overlap_comm", "reduce_bucket_size", "contiguous_gradients",
         "stage3_prefetch_bucket_size", "stage3_max_live_parameters", "bucket_cap_mb", "find_unused_parameters",
         "compile", "reshard_after_forward", "grad_reduce_dtype")


def default_split(engine: str, num_layers: int, stages: int) -> tuple[int, ...]:
    """The layers per stage ``engine`` runs when its files fix none (see :data:`_SPLITS`)."""
    split = _SPLITS.get(engine)
    return split(num_layers, stages) if split is not None else tuple(even_split(num_layers, stages))


@dataclass(frozen=True)
class Filled:
    """One value of the pinned configuration and where it came from.

    Attributes:
        value: in the planner's names and units (a tuple for ``layers_per_stage``, a
            ``"/"``-joined text for a per-stage recompute).
        source: the files' :attr:`~pipeplan.engines.Setting.source`, ``"searched"``,
            ``"pipeplan default (...)"``, ``"derived: ..."`` or ``"given: --flag"``.
    """

    value: Any
    source: str

    def to_dict(self) -> dict[str, Any]:
        """``{"value", "source"}``, a tuple as a list."""
        return {"value": list(self.value) if isinstance(self.value, tuple) else self.value, "source": self.source}


@dataclass(frozen=True)
class Pinned:
    """The configuration as given, with its open fields filled, and its plan.

    Attributes:
        plan: the configuration priced (``plan.fits``: it fits the device's memory).
        values: every planner field (:data:`ORDER`) → :class:`Filled`.
        searched: the fields the files left open that the search filled.
        workload: the workload with the configuration's knobs applied (recompute pinned
            where given), the one :attr:`plan` was priced with.
        knobbed: the same with only the TP knobs applied (recompute left to the search:
            the best plans are searched on it).
        sync: the gradient sync priced (a name of :data:`~pipeplan.planner.step.SYNCS`).
        batch_held: what a change of GPU count keeps: ``"global batch"`` (``m`` follows
            ``dp``) or ``"micro batch × microbatches"`` (the global batch grows with ``dp``).
        notes: what the pinning approximated or overrode, one sentence each.
        engine_costs: what the engine's knobs change in the step beyond the workload
            (DeepSpeed's gradient sync and host hooks, :class:`~pipeplan.planner.engine_costs.EngineCosts`),
            as ``plan --engine`` prices them; ``None`` for the other engines.
        engine: the engine the files are for (its loss's memory: :mod:`pipeplan.planner.memory`).
        compiled_loss: the engine compiles its loss (torchtitan's ``compile.components`` with the loss), priced
            as ``plan`` prices it.
    """

    plan: Plan
    values: dict[str, Filled]
    searched: tuple[str, ...]
    workload: Workload
    knobbed: Workload
    sync: str
    batch_held: str
    notes: tuple[str, ...] = field(default=())
    engine_costs: EngineCosts | None = None
    engine: str | None = None
    compiled_loss: bool = False

    def value(self, name: str) -> Any:
        """The value of field ``name``."""
        return self.values[name].value


def config_of(plan: Plan) -> Config:
    """The planner :class:`~pipeplan.planner.space.Config` of ``plan`` (its first stage's recompute)."""
    return Config(plan.pp, plan.dp, plan.micro_batch_size, plan.num_microbatches, plan.schedule,
                  plan.virtual_stages, (plan.recompute or ("none",))[0], plan.tp, plan.dp_mode)


def _given(config: RunConfig, name: str) -> Filled | None:
    setting = config.settings.get(name)
    return None if setting is None else Filled(setting.value, setting.source)


def _knobs(config: RunConfig, workload: Workload, values: dict[str, Filled]) -> tuple[Workload, Workload]:
    """The workload with the TP knobs and recompute the files give (the defaults kept and named otherwise)."""
    given = {name: _given(config, name) for name in ("sequence_parallel", "tp_comm_overlap", "recompute")}
    sp, overlap = given["sequence_parallel"], given["tp_comm_overlap"]
    for name, item, default in (("sequence_parallel", sp, "on" if workload.sequence_parallel else "off"),
                                ("tp_comm_overlap", overlap, workload.tp_comm_overlap)):
        if item is None and name in values:  # the engine's own (_engine_pricing)
            continue
        if item is not None and item.value not in (("on", "off") if name == "sequence_parallel"
                                                   else MEGATRON_TP_COMM_OVERLAPS):
            raise InvalidInputError(f"{config.path}: {name.replace('_', ' ')} {item.value!r} is not one pipeplan "
                                    f"prices ({item.source})")
        values[name] = item if item is not None else Filled(
            default, f"{DEFAULT} (Megatron-LM's tensor parallelism as the step model prices it: docs/engines.md)")
    knobbed = workload.with_tensor_knobs(
        sequence_parallel=None if sp is None else sp.value == "on",
        tp_comm_overlap=None if overlap is None else cast(TpCommOverlap, overlap.value))
    mode = given["recompute"]
    if mode is None:
        return knobbed, knobbed
    values["recompute"] = mode
    return knobbed.with_recompute(cast(Recompute, mode.value)), knobbed


def engine_default(item: Filled | None) -> bool:
    """Whether a value is the engine's own default, not the files' (its source reads ``"<engine> default (...)"``,
    :class:`~pipeplan.engines.Setting`'s convention)."""
    return item is not None and re.match(r"[\w.\- ]+ default\b", item.source) is not None


def _batch(config: RunConfig, global_batch: int | None, dp: int | None, values: dict[str, Filled],
           notes: list[str], other_gpus: bool, files_dp: int | None) -> tuple[int, str]:
    """The global batch (checked against ``b × m × dp`` where all are given) and what scaling holds.

    ``other_gpus``: checked on another GPU count than the files'; microbatches the files give
    beside a global batch are then derived again from it (Megatron-LM derives them so).
    A global batch that is the engine's default (torchtitan's: the local batch × the
    data-parallel degree) follows dp: the files' per-replica batch (``b × m``, ``m`` from it
    over ``files_dp``, the files' own data-parallel degree) is what is held.
    """
    b, m, given = (_given(config, name) for name in ("micro_batch_size", "num_microbatches", "global_batch"))
    if given is not None and engine_default(given) and b is not None:
        if global_batch is not None:  # --global-batch over the engine's default
            given = None
        else:
            if m is None and files_dp and int(given.value) % (files_dp * int(b.value)) == 0:
                m = Filled(int(given.value) // (files_dp * int(b.value)),
                           f"derived: {given.value} / (the files' dp {files_dp} × micro batch {b.value})")
            if m is not None and dp is not None:
                notes.append(f"the global batch is {config.engine}'s default ({given.source}): it follows dp")
                given = None
    if other_gpus and given is not None and b is not None and m is not None and dp is not None \
            and int(b.value) * int(m.value) * dp != int(given.value):
        notes.append(f"{m.value} microbatches ({m.source}) hold at the files' GPU count, not at dp {dp}: "
                     f"derived again from the global batch")
        m = None
    for item in (b, m):
        if item is not None:
            values["micro_batch_size" if item is b else "num_microbatches"] = item
    if given is not None:
        if global_batch is not None and global_batch != given.value:
            raise InvalidInputError(f"--global-batch {global_batch} disagrees with {given.source}: leave "
                                    "--global-batch out")
        values["global_batch"] = given
        total = int(given.value)
        held = "global batch"
    elif b is not None and m is not None and dp is not None:
        total = int(b.value) * int(m.value) * dp
        if global_batch is not None and global_batch != total:
            raise InvalidInputError(
                f"--global-batch {global_batch} disagrees with {config.path}: micro batch {b.value} × "
                f"{m.value} microbatches × dp {dp} = {total}; leave --global-batch out")
        values["global_batch"] = Filled(total, f"derived: micro batch {b.value} × {m.value} microbatches × dp {dp}")
        held = "micro batch × microbatches"
    elif global_batch is not None:
        total = global_batch
        values["global_batch"] = Filled(total, "given: --global-batch")
        held = "global batch"
    else:
        raise InvalidInputError(f"{config.path} does not give the global batch (nor micro batch and gradient "
                                "accumulation with tp and pp): give --global-batch")
    if b is not None and m is not None and dp is not None and int(b.value) * int(m.value) * dp != total:
        raise InvalidInputError(
            f"{config.path}: global batch {total} is not micro batch {b.value} × {m.value} microbatches × dp {dp} "
            f"({int(b.value) * int(m.value) * dp}): fix {values['global_batch'].source.split(':')[0]}")
    if dp is not None and b is not None and m is None:
        if total % (dp * int(b.value)):
            raise InvalidInputError(f"{config.path}: global batch {total} is no multiple of dp {dp} × micro batch "
                                    f"{b.value}")
        values["num_microbatches"] = Filled(total // (dp * int(b.value)),
                                            f"derived: global batch {total} / (dp {dp} × micro batch {b.value})")
    if dp is not None and m is not None and b is None:
        if total % (dp * int(m.value)):
            raise InvalidInputError(f"{config.path}: global batch {total} is no multiple of dp {dp} × "
                                    f"{m.value} microbatches")
        values["micro_batch_size"] = Filled(total // (dp * int(m.value)),
                                            f"derived: global batch {total} / (dp {dp} × {m.value} microbatches)")
    return total, held


def _schedule(config: RunConfig, pp: int | None, values: dict[str, Filled], notes: list[str]) -> None:
    """Schedule and v as given, or what they must be (no pipeline: none; one stage per rank: v = 1). An order no
    fixed schedule writes (``"csv"``: adaptive's, or the user's own) is left to the search, and a note says so."""
    schedule, virtual = _given(config, "schedule"), _given(config, "virtual_stages")
    if schedule is not None and schedule.value == CSV_SCHEDULE:
        notes.append("that order (adaptive's, or your own) is not priced as written: priced as the best schedule "
                     "over the files' stages and microbatches")
        schedule = None
    if pp == 1:
        values["schedule"] = schedule or Filled("1f1b", "derived: pp 1 runs no pipeline schedule")
        values["virtual_stages"] = virtual or Filled(1, "derived: pp 1")
        return
    if schedule is not None:
        values["schedule"] = schedule
        layout = schedule_info(str(schedule.value)).layout
        if virtual is None and layout != "loop":
            virtual = Filled(1 if layout == "one" else 2, f"derived: {schedule.value} places "
                             f"{'one stage' if layout == 'one' else 'two stages'} per rank")
    if virtual is not None:
        values["virtual_stages"] = virtual


def _sync(config: RunConfig, values: dict[str, Filled]) -> str:
    given = _given(config, "grad_sync")
    if given is not None and given.value not in SYNCS:
        raise InvalidInputError(f"{config.path}: gradient sync {given.value!r} is not one of {', '.join(SYNCS)} "
                                f"({given.source})")
    values["grad_sync"] = given or Filled(SearchOptions().sync, f"{DEFAULT} (plan --grad-sync's default)")
    return str(values["grad_sync"].value)


def _recompute_text(plan: Plan) -> str:
    modes = plan.recompute or ("none",)
    return modes[0] if len(set(modes)) == 1 else "/".join(modes)


def _from_plan(plan: Plan, name: str) -> Any:
    return {"tp": plan.tp, "pp": plan.pp, "dp": plan.dp, "dp_mode": plan.dp_mode, "schedule": plan.schedule,
            "virtual_stages": plan.virtual_stages, "micro_batch_size": plan.micro_batch_size,
            "num_microbatches": plan.num_microbatches, "global_batch": plan.global_batch,
            "layers_per_stage": tuple(plan.layers_per_stage), "recompute": _recompute_text(plan)}[name]



#: RunConfig fields that are an engine's priced knobs (:class:`~pipeplan.engines.Knob`), by knob name.
_ENGINE_KNOBS = {"overlap_comm": "overlap-comm", "reduce_bucket_size": "reduce-bucket-size", "compile": "compile",
                 "reshard_after_forward": "reshard-after-forward", "grad_reduce_dtype": "grad-reduce-dtype",
                 "async_tp": "async-tp",
                 "bucket_cap_mb": "bucket-cap-mb", "find_unused_parameters": "find-unused-parameters",
                 "contiguous_gradients": "contiguous-gradients",
                 "stage3_prefetch_bucket_size": "stage3-prefetch-bucket-size",
                 "stage3_max_live_parameters": "stage3-max-live-parameters"}


def _engine_pricing(config: RunConfig, workload: Workload, device: str, notes: list[str],
                    values: dict[str, Filled]) -> tuple[Workload, EngineCosts | None]:
    """The engine's kernels on ``device`` (its compute factor) and its priced knobs, as ``plan --engine`` prices them."""
    engine = engines.get(config.engine)
    knobs: dict[str, str] = {}
    pp = _given(config, "pp")
    for name, knob in _ENGINE_KNOBS.items():
        item = _given(config, name)
        if (item is not None and knob == "reshard-after-forward" and item.value == "always" and pp is not None
                and pp.value != 1):
            # as plan refuses it (cli/_engine_args.py): torchtitan/distributed/fsdp.py keeps the parameters gathered
            # with a pipeline by default, which pipeplan prices; always through the pipeline is not priced
            notes.append(f"{item.source}: reshard after forward always is priced without a pipeline only "
                         f"(pp {pp.value} here): priced as torchtitan's default with a pipeline, parameters kept "
                         "gathered, and left out of the best plans' files")
            continue
        if item is not None and knob in engine.knobs.names():
            knobs[knob] = str(item.value)
            values[name] = item
    if "compile" in engine.knobs.names() and "compile" not in knobs:
        default = engine.knobs.get("compile").default
        values["compile"] = Filled(default, f"{engine.name} default (the files do not set it: eager kernels)")
    if knobs.get("reshard-after-forward") == "never":  # FSDP2 keeps each layer gathered for its backward
        workload = workload.with_reshard_after_forward(False)
    if engine.name in GATHERED_INPUT_ENGINES:  # DTensor saves a none block's gathered inputs whole
        workload = workload.with_saved_gathered_inputs()
    overlap = engine.tp_overlap(knobs)
    if overlap is not None and _given(config, "tp_comm_overlap") is None:  # the engine's own TP (torch's DTensor)
        given = _given(config, "async_tp")
        values["tp_comm_overlap"] = Filled(overlap, given.source if given is not None else (
            f"{engine.name} default (torch's DTensor tensor parallelism: every collective waited for; "
            "docs/engines.md)"))
        workload = workload.with_tensor_knobs(tp_comm_overlap=overlap)
    factor = engine.compute_factor(device, knobs)
    if factor != 1.0 and workload.spec is not None:
        workload = workload.with_compute_factor(factor)
        compiled = " (torch.compile)" if knobs.get("compile") in ("on", "model") else ""
        notes.append(f"{engine.name}'s kernels on {device}: each layer's compute x {factor:.3f}{compiled} "
                     "(docs/engines.md)")
    return workload, EngineCosts.of(engine, knobs)


def engine_knobs(pinned: Pinned) -> dict[str, str]:
    """The engine's knobs the configuration set (knob name → value: ``{"compile": "on"}``), what its best plans'
    files carry again."""
    return {knob: str(pinned.values[name].value) for name, knob in _ENGINE_KNOBS.items() if name in pinned.values}


def _engine_sync(config: RunConfig, plan: Plan, costs: EngineCosts | None, values: dict[str, Filled]) -> None:
    """The gradient sync row as the engine prices it, where it does (DeepSpeed's ``overlap_comm`` per ZeRO stage)."""
    if costs is None or plan.dp == 1 or plan.dp_mode not in costs.syncs:
        return
    key = "bucket_cap_mb" if config.engine == "torch" else "overlap_comm"  # the knob that sets the engine's sync
    given = _given(config, key)
    why = given.source if given is not None else f"{config.engine} default for {plan.dp_mode} (the file sets none)"
    values["grad_sync"] = Filled(costs.syncs[plan.dp_mode].name, f"{config.engine} {key}: {why}")


def pin(config: RunConfig, workload: Workload, cluster: Cluster, *, global_batch: int | None = None) -> Pinned:
    """Price ``config`` as given on ``cluster``; fields it leaves open are searched (module doc).

    Args:
        config: the user's configuration (:meth:`pipeplan.engines.Engine.read`).
        workload: the model's workload on ``cluster``'s device (``Workload.from_spec``),
            without knobs: the configuration's are applied here.
        cluster: the GPUs it runs on (``cluster.num_gpus`` is the world size checked).
        global_batch: samples per step where the files give none (``--global-batch``).

    Raises:
        InvalidInputError: values that contradict each other or the GPU count, a field
            the search cannot fill (no global batch), or no plan of the given values.
        InfeasiblePlanError: open fields and no plan with the given values fits.
    """
    values: dict[str, Filled] = {}
    notes: list[str] = []
    gpus = cluster.num_gpus
    files_gpus = _given(config, "gpus")
    values["gpus"] = Filled(gpus, "given: --gpus") if files_gpus is None or files_gpus.value != gpus else files_gpus
    if files_gpus is not None and files_gpus.value != gpus:
        notes.append(f"checked on {gpus} GPUs, not the {files_gpus.value} of {files_gpus.source}")
    tp, pp = _given(config, "tp"), _given(config, "pp")
    for item in (tp, pp):
        if item is not None:
            values["tp" if item is tp else "pp"] = item
    dp: int | None = None
    if tp is not None and pp is not None:
        ranks = int(tp.value) * int(pp.value)
        if gpus % ranks:
            raise InvalidInputError(f"tp {tp.value} × pp {pp.value} = {ranks} does not divide {gpus} GPUs: "
                                    "give --gpus a multiple of it")
        dp = gpus // ranks
        values["dp"] = Filled(dp, f"derived: {gpus} GPUs / (tp {tp.value} × pp {pp.value})")
    workload, costs = _engine_pricing(config, workload, cluster.device.name, notes, values)
    workload, knobbed = _knobs(config, workload, values)
    files_dp = (int(files_gpus.value) // (int(tp.value) * int(pp.value))
                if files_gpus is not None and tp is not None and pp is not None else None)
    total, held = _batch(config, global_batch, dp, values, notes,
                         files_gpus is not None and files_gpus.value != gpus, files_dp)
    sync = _sync(config, values)
    _schedule(config, None if pp is None else int(pp.value), values, notes)
    mode = _given(config, "dp_mode")
    if mode is not None:
        values["dp_mode"] = mode
    elif dp == 1:
        values["dp_mode"] = Filled(data_parallel.REPLICATED, "derived: dp 1 (no data parallelism)")
    split = _given(config, "layers_per_stage")
    if split is not None:
        values["layers_per_stage"] = split
    elif pp is not None and "virtual_stages" in values:
        stages = int(pp.value) * int(values["virtual_stages"].value)
        values["layers_per_stage"] = Filled(
            default_split(config.engine, workload.num_layers, stages),
            f"derived: one stage holds all {workload.num_layers} layers" if stages == 1 else
            f"{config.engine} default split of {workload.num_layers} layers into {stages} stages (the files fix none)")
    needed = ("tp", "pp", "dp", "dp_mode", "schedule", "virtual_stages", "micro_batch_size", "num_microbatches",
              "layers_per_stage", "recompute")
    open_fields = tuple(name for name in needed if name not in values)
    compiled = compiles_loss(config.engine, {"compile": str(values["compile"].value)} if "compile" in values else {})
    if not open_fields:
        plan = _evaluate(values, workload, cluster, sync, costs, config.engine, compiled)
    else:
        plan = _search(config, values, knobbed if "recompute" in open_fields else workload, cluster, total, sync,
                       costs, compiled)
        for name in open_fields:
            values[name] = Filled(_from_plan(plan, name), SEARCHED)
    if config.value("precision", "bf16") != "bf16":
        notes.append(f"precision {config.value('precision')} is priced as bf16 mixed precision, the only one "
                     f"pipeplan's step model knows; from: {config.source_of('precision')}")
    seq = config.value("seq_length")
    if seq is not None and workload.tokens_per_sample is not None and seq != workload.tokens_per_sample:
        notes.append(f"sequence length {seq} is not the model's {workload.tokens_per_sample:g} tokens per sample: "
                     f"the model's is priced; from: {config.source_of('seq_length')}")
    _engine_sync(config, plan, costs, values)
    sync_item = values["grad_sync"]
    if sync_item.source.startswith(DEFAULT) and (plan.dp == 1 or data_parallel.get(plan.dp_mode).gathers_per_layer):
        why = "at dp 1" if plan.dp == 1 else f"with {plan.dp_mode}: it reduces layer by layer"
        values["grad_sync"] = Filled(sync_item.value, f"{sync_item.source} (no effect {why})")
    if plan.tp == 1:  # the TP knobs change nothing without tensor parallelism
        for name in ("sequence_parallel", "tp_comm_overlap"):
            if values[name].source.startswith(DEFAULT):
                values[name] = Filled(values[name].value, f"{DEFAULT} (no effect at tp 1)")
    ordered = {name: values[name] for name in ORDER if name in values}
    return Pinned(plan, ordered, tuple(n for n in ORDER if n in open_fields), workload, knobbed, sync, held,
                  tuple(notes), costs, config.engine, compiled)


def _evaluate(values: dict[str, Filled], workload: Workload, cluster: Cluster, sync: str,
              costs: EngineCosts | None = None, engine: str | None = None, compiled_loss: bool = False) -> Plan:
    """The fully given configuration, priced as the search prices a layout (``engine``'s loss, compiled or not),
    against the whole device."""
    v = {name: item.value for name, item in values.items()}
    sizes = tuple(int(n) for n in v["layers_per_stage"])
    stages = int(v["pp"]) * int(v["virtual_stages"])
    if len(sizes) != stages or sum(sizes) != workload.num_layers:
        raise InvalidInputError(
            f"layers per stage {','.join(map(str, sizes))} ({values['layers_per_stage'].source}) must be "
            f"{stages} counts (pp × v) adding up to the model's {workload.num_layers} layers")
    config = Config(int(v["pp"]), int(v["dp"]), int(v["micro_batch_size"]), int(v["num_microbatches"]),
                    str(v["schedule"]), int(v["virtual_stages"]), cast(Recompute, v["recompute"]), int(v["tp"]),
                    str(v["dp_mode"]))
    data_parallel.get(config.dp_mode)  # an unknown mode: one line
    return evaluate_layout(workload, cluster, config, sizes, memory_capacity=cluster.memory_bytes, sync=sync,
                           engine_costs=costs, engine=engine, compiled_loss=compiled_loss)


def _search(config: RunConfig, values: dict[str, Filled], workload: Workload, cluster: Cluster, total: int,
            sync: str, costs: EngineCosts | None = None, compiled_loss: bool = False) -> Plan:
    """The fastest plan with every given value, the search filling the rest (within what the engine runs)."""
    v = {name: item.value for name, item in values.items()}
    virtual = v.get("virtual_stages")
    options = SearchOptions(
        pp=v.get("pp"), tp=v.get("tp"), micro_batch_size=v.get("micro_batch_size"),
        schedules=(v["schedule"],) if "schedule" in v else None,
        dp_modes=(v["dp_mode"],) if "dp_mode" in v else None, sync=sync, engine=config.engine,
        partition=v.get("layers_per_stage"), max_virtual_stages=max(4, int(virtual or 1)), top=20,
        engine_costs=costs, compiled_loss=compiled_loss)
    result = search(workload, cluster, total, options)
    matching = [plan for plan in result.plans
                if (virtual is None or plan.virtual_stages == virtual)
                and ("num_microbatches" not in v or plan.num_microbatches == v["num_microbatches"])]
    if not matching:
        raise InvalidInputError(f"no plan of {config.path}'s values fits or exists on {cluster.num_gpus} GPUs "
                                f"(v {virtual}, {v.get('num_microbatches')} microbatches): check the files")
    engine = engines.get(config.engine)
    runnable = [plan for plan in matching if not engine.refusal(plan)]
    return (runnable or matching)[0]
