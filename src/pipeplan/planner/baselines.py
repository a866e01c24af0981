"""The baselines every answer carries, and the plans that change one knob of the Megatron one.

    from pipeplan.planner.baselines import megatron_split
    megatron_split(50, 4)     # (13, 12, 12, 13): equal middle stages, the rest on the first and last

Two plans a user would otherwise run, planned the same way as the search's
(docs/planner.md, "Baselines in every answer"): :func:`reference_baseline`, what the
model's own repository runs (data parallelism over every GPU in its reference
mode and recompute), and :func:`megatron_recommended`, Megatron-LM's recommended
layout (tensor parallelism over a node, the least pp that fits, 1F1B,
:func:`megatron_split`, the distributed optimizer). :func:`one_knob` changes one
knob of the Megatron plan at a time. Each takes the running search
(:class:`SearchContext`): its space, workload, cluster, options and evaluators.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from .. import data_parallel
from ..data_parallel import DISTRIBUTED_OPTIMIZER, FULLY_SHARDED, REPLICATED
from ..errors import PipeplanError
from ..partition import even_split
from ..plan import Plan, Recompute, recompute_rank
from ..schedules import schedule_info
from ..units import format_gib
from .cluster import Cluster
from .evaluate import Evaluator
from .records import Rejection
from .space import Config, SearchSpace
from .workload import Workload

__all__ = ["Baseline", "SearchContext", "megatron_split", "fastest_fitting", "reference_baseline",
           "megatron_recommended", "megatron_default", "one_knob", "in_space"]


class SearchContext(Protocol):
    """What the baselines read of a running search (:class:`pipeplan.planner.search` builds it)."""

    space: SearchSpace
    workload: Workload
    cluster: Cluster
    global_batch: int
    options: Any

    def evaluator_for(self, config: Config) -> Evaluator:
        """The evaluator of ``config``'s tensor-parallel degree and data-parallel mode."""
        ...


#: name -> (table label, prose) of each baseline.
_LABELS = {"reference-fsdp": ("its repository (reference)", "its repository's layout"),
           "megatron-recommended": ("Megatron recommended", "Megatron's recommended layout")}


@dataclass(frozen=True)
class Baseline:
    """What a user would run without pipeplan, planned the same way (docs/planner.md, "Baselines").

    Attributes:
        name: ``"reference-fsdp"`` (the model's own repository: FSDP over every
            GPU with its reference recompute) or ``"megatron-recommended"``
            (tensor parallelism inside a node, pipeline stages only as needed to
            fit, 1F1B, even layers per stage, the distributed optimizer).
        plan: its plan (``None``: it could not be built), fastest micro-batch size that fits.
        note: how it was chosen, in a line.
        changed: a note for under the table when it runs another data-parallel mode than
            the model's reference records, naming both and why (``""``: it runs the
            reference's own mode); :func:`pipeplan.planner.advice.baseline_notes` collects them.
    """

    name: str
    plan: Plan | None
    note: str = ""
    changed: str = ""

    @property
    def label(self) -> str:
        """The table's row label: ``its repository (reference)``, ``Megatron recommended``."""
        return _LABELS.get(self.name, (self.name, self.name))[0]

    @property
    def prose(self) -> str:
        """The baseline in a sentence: ``its repository's layout``, ``Megatron's recommended layout``."""
        return _LABELS.get(self.name, (self.name, self.name))[1]

    @property
    def fits(self) -> bool:
        """It was built and fits the memory."""
        return self.plan is not None and self.plan.fits

    @property
    def step_time(self) -> float | None:
        """Its step time when it fits."""
        return self.plan.step_time if self.fits and self.plan is not None else None

    def to_dict(self) -> dict[str, Any]:
        """``name``, ``fits``, ``step_time``, ``note`` and the plan's fields."""
        fields = {} if self.plan is None else self.plan.to_dict()
        return dict(fields, name=self.name, fits=self.fits, step_time=self.step_time, note=self.note)


def megatron_split(num_layers: int, stages: int) -> tuple[int, ...]:
    """Layers per stage the way Megatron-LM accepts them: an even split, or equal middle stages with the remainder on
    the first and the last (``--decoder-first/last-pipeline-num-layers``; megatron/training/arguments.py requires
    the layers left to the middle stages to divide evenly)."""
    if num_layers % stages == 0 or stages < 3:
        return tuple(even_split(num_layers, stages))
    middle, rest = divmod(num_layers, stages)
    return (middle + (rest + 1) // 2,) + (middle,) * (stages - 2) + (middle + rest // 2,)


def in_space(search: SearchContext, plan: Plan) -> bool:
    """Whether ``plan`` (a baseline: 1F1B on Megatron's split) may join the searched space's plans: its knobs are
    all searched and the partition is left to the search."""
    space = search.space
    return (plan.tp in space.tensor_degrees() and plan.pp in space.pipeline_degrees(plan.tp)
            and plan.dp_mode in space.modes_for(plan.tp, plan.pp, plan.dp)
            and plan.micro_batch_size in space.micro_batches_for(plan.dp)
            and (plan.pp == 1 or "1f1b" in space.schedule_names)
            and plan.uniform_recompute in search.workload.recompute_modes
            and space.partition is None)


def fastest_fitting(search: SearchContext, configs: Sequence[Config]) -> Plan | None:
    """The fastest fitting plan of ``configs`` on Megatron's split (:func:`megatron_split`) with their own recompute,
    else the one the least over memory."""
    best: Plan | None = None
    closest: Plan | None = None
    for config in configs:
        try:
            sizes = megatron_split(search.workload.num_layers, config.num_stages)
            plan = search.evaluator_for(config).evaluate(config, sizes, (config.recompute,) * config.num_stages)
        except PipeplanError:
            continue
        if plan.fits and (best is None or (plan.step_time or math.inf) < (best.step_time or math.inf)):
            best = plan
        elif not plan.fits and (closest is None or max(plan.peak_memory) < max(closest.peak_memory)):
            closest = plan
    return best if best is not None else closest


def reference_baseline(search: SearchContext) -> Baseline:
    """What the model's own repository runs: data parallelism over every GPU (pp = tp = 1) in its
    reference mode with its reference recompute (FSDP without a record, or where the recorded mode does
    not fit), the fastest micro-batch size that fits."""
    training = getattr(search.workload.spec, "training", None)
    recompute: Recompute = "none"
    modes = [FULLY_SHARDED]
    note = "FSDP over every GPU"
    if training is not None:
        units = [training.mode_of(name) for unit in search.workload.spec.recompute_units() for name in unit]
        recompute = max(units or ["none"], key=recompute_rank)
        modes = list(dict.fromkeys([training.dp_mode, FULLY_SHARDED]))  # its own, then FSDP
        note = f"{training.dp_mode}, recompute {recompute}" + (f" ({training.source})" if training.source else "")
    if recompute not in search.workload.recompute_modes:
        recompute = search.workload.lightest_recompute
    dp = search.cluster.num_gpus
    if search.options.dp_modes is not None:
        modes = [mode for mode in modes if mode in search.options.modes()]
        if not modes:
            return Baseline("reference-fsdp", None, "its data-parallel mode is not searched (--dp-modes)")
    plan: Plan | None = None
    first: Plan | None = None
    for index, mode in enumerate(modes):
        mode = data_parallel.get(mode).runs_as(1, 1, dp, search.cluster.gpus_per_node)  # one node: HSDP is FSDP
        configs = [Config(1, dp, b, search.global_batch // (dp * b), "1f1b", 1, recompute, 1, mode)
                   for b in search.space.micro_batches_for(dp)]
        plan = fastest_fitting(search, configs)
        first = plan if index == 0 else first
        if plan is not None and plan.fits:
            if index:
                note += f"; {modes[0]} does not fit, so {mode}"
                return Baseline("reference-fsdp", plan, note, _mode_change(modes[0], mode, first))
            break
    return Baseline("reference-fsdp", plan, note)


def _mode_change(reference: str, mode: str, over: Plan | None) -> str:
    """The note for a reference baseline that runs ``mode`` because ``reference`` (its record's) does not fit.

    ``over``: the reference mode's plan least over memory (``None``: none could be built).
    """
    why = "does not fit in memory"
    if over is not None and over.memory_capacity:
        why = (f"does not fit in memory (at micro-batch {over.micro_batch_size}, its least, the fullest GPU needs "
               f"{format_gib(max(over.peak_memory))}, over the {format_gib(over.memory_capacity)} it may use)")
    return (f"the reference baseline runs {mode} over every GPU, not its repository's {reference}: "
            f"{reference} {why}")


def megatron_recommended(search: SearchContext) -> Baseline:
    """Megatron-LM's recommended layout (docs/planner.md): tensor parallelism over a node's GPUs (the largest
    degree the model and the node allow), pipeline stages across nodes only as needed to fit, 1F1B, Megatron's
    split, the distributed optimizer; no recompute unless needed, then selective, then full."""
    space = search.space
    degrees = [tp for tp in sorted(space.tensor_degrees(), reverse=True) if space.pipeline_degrees(tp)]
    tp = degrees[0] if degrees else 1  # the largest the node, the model and a fixed pp allow
    closest: Plan | None = None
    for pp in space.pipeline_degrees(tp):
        dp = search.cluster.num_gpus // (tp * pp)
        mode = DISTRIBUTED_OPTIMIZER if dp > 1 and DISTRIBUTED_OPTIMIZER in space.dp_modes else REPLICATED
        for recompute in search.workload.recompute_modes:  # none, then selective, then full: the first that fits
            configs = [Config(pp, dp, b, search.global_batch // (dp * b), "1f1b", 1, recompute, tp, mode)
                       for b in space.micro_batches_for(dp)]
            plan = fastest_fitting(search, configs)
            if plan is not None and plan.fits:
                return Baseline("megatron-recommended", plan,
                                f"tp={tp} over a node, the least pp that fits ({pp}), recompute {recompute}")
            if plan is not None and (closest is None or max(plan.peak_memory) < max(closest.peak_memory)):
                closest = plan
    return Baseline("megatron-recommended", closest, f"no pp fits at tp={tp} with 1F1B and Megatron's split")


def megatron_default(evaluator: Evaluator, best: Plan) -> Plan | None:
    """Even split, 1F1B, no recompute (or the one pinned), the best plan's pp, dp, micro-batch size and m."""
    lightest = evaluator.workload.lightest_recompute
    config = Config(best.pp, best.dp, best.micro_batch_size, best.num_microbatches, "1f1b", 1, lightest, best.tp,
                    best.dp_mode)
    sizes = even_split(best.num_layers, best.pp)
    try:
        none: tuple[Recompute, ...] = tuple(lightest for _ in range(best.pp))
        return evaluator.evaluate(config, sizes, none)
    except PipeplanError:
        return None


def one_knob(search: SearchContext, baseline: Plan, deadline: float = math.inf) -> dict[str, Plan]:
    """The best fitting plan that changes one knob of the Megatron baseline (the knobs tried by ``deadline``)."""
    space = search.space
    evaluator = search.evaluator_for(Config(baseline.pp, baseline.dp, baseline.micro_batch_size,
                                            baseline.num_microbatches, "1f1b", 1, "none", baseline.tp,
                                            baseline.dp_mode))
    mode = baseline.uniform_recompute or search.workload.lightest_recompute
    base = Config(baseline.pp, baseline.dp, baseline.micro_batch_size, baseline.num_microbatches, "1f1b", 1, mode,
                  baseline.tp, baseline.dp_mode)
    num_layers = baseline.num_layers
    gpus = space.num_gpus // base.tp
    trials: dict[str, list[tuple[Config, tuple[int, ...] | None]]] = {
        "partition": [(base, None)] if base.pp > 1 else [],
        "schedule": [
            (replace(base, schedule=name, virtual_stages=v), even_split(num_layers, base.pp * v))
            for name, v in space.schedule_shapes(base.pp, base.num_microbatches)
            if name != base.schedule and not (schedule_info(name).any_placement and v > 1)  # its even split is not its own layout
        ],
        "recompute": [(replace(base, recompute=m), even_split(num_layers, base.pp))
                      for m in evaluator.workload.recompute_modes if m != mode],
        "micro_batch_size": [
            (replace(base, micro_batch_size=b, num_microbatches=space.global_batch // (base.dp * b)),
             even_split(num_layers, base.pp))
            for b in space.micro_batches_for(base.dp) if b != base.micro_batch_size
        ],
        "pp": [
            (replace(base, pp=p, dp=gpus // p,
                     num_microbatches=space.global_batch // (gpus // p * base.micro_batch_size),
                     dp_mode=base.dp_mode if gpus // p > 1 else REPLICATED),
             even_split(num_layers, p))
            for p in space.pipeline_degrees(base.tp)
            if p != base.pp and space.global_batch % (gpus // p * base.micro_batch_size) == 0
        ],
    }
    out: dict[str, Plan] = {}
    for knob, options in trials.items():
        found: Plan | None = None
        for config, sizes in options:
            if time.process_time() > deadline:  # CPU seconds, as the search budget counts them
                break
            try:
                evaluator = search.evaluator_for(config)
                if sizes is None:
                    layout = evaluator.layouts.partitioned(config)
                    if layout is None or isinstance(layout, Rejection):
                        continue
                    plan = evaluator.simulate(config, layout)
                else:
                    if config.pp > 1 and len(sizes) > num_layers:
                        continue
                    plan = evaluator.evaluate(config, sizes, (config.recompute,) * len(sizes), "fast")
            except PipeplanError:
                continue
            if plan.fits and plan.step_time is not None and (found is None or plan.step_time < (found.step_time or 0)):
                found = plan
        if found is not None:
            out[knob] = found
    return out
