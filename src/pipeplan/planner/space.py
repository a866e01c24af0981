"""The search space: every (tp × pp × dp, data-parallel mode, micro-batch size, schedule, v, recompute) the planner tries.

    from pipeplan.planner.space import SearchSpace
    space = SearchSpace(num_gpus=8, global_batch=256, num_layers=48)
    len(space.configs()), space.configs()[0]

A :class:`Config` fixes everything but the partition; the search then solves the
exact partition for it (:mod:`pipeplan.planner.search`). What is enumerated:

* ``tp`` every tensor-parallel degree the workload answers for that divides
  the GPUs of a node and the GPU count (or the one given): tensor parallelism
  stays inside a node;
* ``pp`` every divisor of ``G / tp`` with ``pp ≤ L`` (or the one given);
  ``dp = G / (tp · pp)``;
* the data-parallel mode (:mod:`pipeplan.data_parallel`): ``ddp`` alone at
  ``dp = 1``; ``hsdp`` only where a stage's replicas both share a node and
  span nodes (:meth:`~pipeplan.data_parallel.DataParallelMode.applies`);
* micro-batch size ``b`` every size the workload answers for with
  ``dp · b`` dividing the global batch (or the one given); ``m = B / (dp · b)``;
* every registered synchronous schedule (not ``dual-rate``, which trains on
  stale gradients): ``interleaved`` with each ``v ≥ 2`` such that
  ``pp · v ≤ L`` and ``m`` is a multiple of ``pp`` (Megatron-LM requires it),
  ``zb-v`` with ``v = 2``, ``adaptive`` with one stage per rank and with each
  ``v ≥ 2`` (chunks in a loop, stage ``s`` on rank ``s mod pp``, any ``m``; at
  the smallest micro-batch size only, see below), every other schedule with one
  stage per rank;
  ``pp = 1`` has a single candidate (no pipeline: ``"1f1b"`` of one stage);
* the partition's recompute mode: each mode the workload has (``"none"``,
  ``"selective"``, ``"full"``). A mode other than ``"none"`` counts only where
  memory needs it (the min-max partition without recompute does not fit); the
  search then relaxes it stage by stage where memory allows.

A fixed ``partition`` (``plan --partition``) narrows the space: given layer
counts keep only the configurations with that many stages (``pp · v`` equal to
the counts' length; :meth:`SearchSpace.skipped` says why each other one is left
out), ``"even"`` gives every configuration the even split of its stages, and
``"auto"`` (or ``None``) leaves the partition to the search
(:meth:`SearchSpace.partition_for`).

The search caps interleaved and adaptive at ``v ≤ 4`` by default (``max_virtual_stages``):
Megatron-LM recipes use 2–4, and every extra chunk adds ``2m`` messages per rank.
Adaptive over chunks is tried at the smallest micro-batch size only: the
cost-aware order's gain is the bubble it fills, which the most microbatches make
smallest; a larger size does the same work per sample (exactly so where times
come from FLOPs) with a larger fill and more activation bytes per microbatch, and
each size costs an order of its own (a second or more at ``pp = 16``).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from dataclasses import dataclass

from .. import data_parallel
from .._validation import positive_int
from ..errors import InvalidInputError
from ..partition.choice import PartitionChoice
from ..partition.solver import even_split
from ..plan import RECOMPUTE_MODES, Recompute
from ..schedules import SCHEDULES, planned_schedules, schedule_info, schedule_label

__all__ = ["Config", "SearchSpace", "divisors"]


def divisors(number: int) -> list[int]:
    """The positive divisors of ``number``, ascending (trial division up to its square root)."""
    small = [d for d in range(1, math.isqrt(number) + 1) if number % d == 0]
    return small + [number // d for d in reversed(small) if d * d != number]


@dataclass(frozen=True, order=True)
class Config:
    """One point of the space before the partition is chosen.

    Attributes:
        pp, dp: pipeline and data-parallel degrees.
        micro_batch_size: samples per microbatch ``b``.
        num_microbatches: microbatches per step per pipeline ``m``.
        schedule: registered schedule name.
        virtual_stages: stages per rank ``v``.
        recompute: the mode the partition is solved under (relaxed per stage later).
        tp: tensor-parallel degree (GPUs per layer, inside a node).
        dp_mode: how data parallelism holds the model state, a mode's name (:mod:`pipeplan.data_parallel`).
    """

    pp: int
    dp: int
    micro_batch_size: int
    num_microbatches: int
    schedule: str
    virtual_stages: int = 1
    recompute: Recompute = "none"
    tp: int = 1
    dp_mode: str = data_parallel.REPLICATED

    @property
    def num_gpus(self) -> int:
        """``tp · pp · dp``."""
        return self.tp * self.pp * self.dp

    @property
    def num_stages(self) -> int:
        """Stages ``pp · v``."""
        return self.pp * self.virtual_stages

    @property
    def schedule_label(self) -> str:
        """``"interleaved v=2"``, ``"adaptive v=3"``, ``"zb-v"``, ``"1f1b"`` ..."""
        return schedule_label(self.schedule, self.virtual_stages)

    @property
    def chunked_adaptive(self) -> bool:
        """The cost-aware order over ``v > 1`` chunks per rank placed in a loop."""
        return schedule_info(self.schedule).any_placement and self.virtual_stages > 1 and self.pp > 1


@dataclass(frozen=True)
class SearchSpace:
    """The configurations for one model, GPU count and global batch.

    Args:
        num_gpus: GPUs ``G``.
        global_batch: samples per optimizer step ``B``.
        num_layers: layers of the model ``L``.
        micro_batch_sizes: sizes the workload answers for (``None``: every
            divisor of ``B``).
        recompute_modes: modes the workload answers for.
        pp: fix the pipeline degree (``None``: every divisor of ``G``).
        micro_batch_size: fix ``b``.
        schedules: the schedules to try (default every registered one).
        max_virtual_stages: largest ``v`` tried for ``interleaved`` and ``adaptive`` (``None``: ``L // pp``).
        virtual_stages: fix ``v``, the stages per rank: only the schedules that take it
            (``interleaved`` at ``v ≥ 2``, ``adaptive`` at any, a V schedule at 2, one
            stage per rank at 1), at that ``v``, with ``pp > 1`` where ``v > 1``;
            :attr:`max_virtual_stages` does not cap it (``None``: searched).
        partition: fix the layers per stage: counts ``>= 1`` adding up to ``L``
            (only configurations with that many stages), ``"even"`` (each
            configuration's even split), or ``"auto"`` / ``None`` (solved).
        tensor_parallel_degrees: the ``tp`` the workload answers for.
        tp: fix the tensor-parallel degree.
        dp_modes: the data-parallel modes to try, by name (default ``("ddp",)``).
        gpus_per_node: GPUs per node (``tp`` divides it; HSDP shards inside it).
        dp_modes_alone: the modes tried at ``pp = 1`` (``None``: :attr:`dp_modes`;
            DeepSpeed runs ZeRO-2 and 3 only without a pipeline).
    """

    num_gpus: int
    global_batch: int
    num_layers: int
    micro_batch_sizes: tuple[int, ...] | None = None
    recompute_modes: tuple[Recompute, ...] = RECOMPUTE_MODES
    pp: int | None = None
    micro_batch_size: int | None = None
    schedules: tuple[str, ...] | None = None
    max_virtual_stages: int | None = None
    virtual_stages: int | None = None
    partition: PartitionChoice | None = None
    tensor_parallel_degrees: tuple[int, ...] = (1,)
    tp: int | None = None
    dp_modes: tuple[str, ...] = (data_parallel.REPLICATED,)
    gpus_per_node: int = 8
    dp_modes_alone: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        positive_int("num_gpus", self.num_gpus)
        positive_int("gpus_per_node", self.gpus_per_node)
        data_parallel.check_modes(self.dp_modes)
        if self.dp_modes_alone is not None:
            data_parallel.check_modes(self.dp_modes_alone)
        if self.tp is not None:
            positive_int("tp", self.tp)
            node = min(self.gpus_per_node, self.num_gpus)
            if node % self.tp:
                raise InvalidInputError(
                    f"tp={self.tp} must divide the GPUs of a node ({node}): tensor parallelism stays inside a node")
            if self.tp not in self.tensor_parallel_degrees:
                raise InvalidInputError(
                    f"tp={self.tp} must divide every module's attention heads and FFN width; this model allows "
                    f"tp in {list(self.tensor_parallel_degrees)}")
        positive_int("global_batch", self.global_batch)
        positive_int("num_layers", self.num_layers)
        if self.pp is not None:
            positive_int("pp", self.pp)
            if self.num_gpus % (self.pp * (self.tp or 1)):
                wanted = f"pp={self.pp}" + (f" × tp={self.tp} = {self.pp * self.tp} GPUs" if self.tp else "")
                raise InvalidInputError(f"{wanted} must divide the GPU count {self.num_gpus}")
            if self.pp > self.num_layers:
                raise InvalidInputError(
                    f"pp={self.pp} needs at least that many layers, but the model has {self.num_layers}"
                )
        if self.micro_batch_size is not None:
            positive_int("micro_batch_size", self.micro_batch_size)
            if self.micro_batch_sizes is not None and self.micro_batch_size not in self.micro_batch_sizes:
                raise InvalidInputError(
                    f"micro_batch_size must be one of {list(self.micro_batch_sizes)} for this model, "
                    f"got {self.micro_batch_size}"
                )
        for name in self.schedule_names:
            if name not in SCHEDULES:
                raise InvalidInputError(f"schedules must be among {', '.join(planned_schedules())}, got {name!r}")
            if schedule_info(name).not_planned is not None:
                raise InvalidInputError(f"schedule {name!r} is not planned: {schedule_info(name).not_planned}")
        if self.max_virtual_stages is not None:
            positive_int("max_virtual_stages", self.max_virtual_stages)
        if self.virtual_stages is not None:
            self._check_virtual_stages(positive_int("virtual_stages", self.virtual_stages))
        object.__setattr__(self, "partition", _checked_partition(self.partition, self.num_layers))

    def _check_virtual_stages(self, v: int) -> None:
        """A fixed ``v`` some schedule searched takes, with a pipeline where ``v > 1`` (one line otherwise)."""
        what = f"virtual stages v={v} (--virtual-stages)"
        if v > 1 and self.pp == 1:
            raise InvalidInputError(f"{what} need a pipeline: pp=1 runs one stage per rank")
        if v > 1 and 2 * v > self.num_layers:
            raise InvalidInputError(f"{what} need pp·v ≤ {self.num_layers} layers with pp ≥ 2: the model has "
                                    f"{self.num_layers}, so v ≤ {self.num_layers // 2}")
        if not any(_takes_virtual_stages(name, v) for name in self.schedule_names):
            takes = "; ".join(f"{name}: {_virtual_stages_taken(name)}" for name in self.schedule_names)
            raise InvalidInputError(f"{what}: no schedule searched runs {v} stage"
                                    f"{'s' if v > 1 else ''} per rank ({takes})")

    def partition_for(self, config: Config) -> tuple[int, ...] | None:
        """The layers per stage fixed for ``config`` (the given counts, or its even split); ``None``: solved."""
        if self.partition is None:
            return None
        if isinstance(self.partition, str):  # "even" ("auto" became None)
            return even_split(self.num_layers, config.num_stages)
        return tuple(self.partition)

    def skipped(self) -> list[tuple[Config, str]]:
        """The configurations a fixed partition's stage count leaves out of :meth:`configs`, each with why."""
        if not isinstance(self.partition, tuple):
            return []
        stages = len(self.partition)
        return [(config, f"the partition has {stages} stages, {config.schedule_label} at pp={config.pp} has "
                         f"{config.num_stages}") for config in self._every_config() if config.num_stages != stages]

    @property
    def schedule_names(self) -> tuple[str, ...]:
        """The schedules tried (default every registered one the planner plans)."""
        if self.schedules is None:
            return planned_schedules()
        return tuple(self.schedules)

    def tensor_degrees(self) -> list[int]:
        """``tp`` values tried: the workload's degrees that divide a node's GPUs and the GPU count."""
        if self.tp is not None:
            return [self.tp]
        node = min(self.gpus_per_node, self.num_gpus)
        return [tp for tp in self.tensor_parallel_degrees if node % tp == 0 and self.num_gpus % tp == 0]

    def pipeline_degrees(self, tp: int = 1) -> list[int]:
        """``pp`` values tried at tensor-parallel degree ``tp``."""
        gpus = self.num_gpus // tp
        if self.pp is not None:
            return [self.pp] if gpus % self.pp == 0 else []
        return [pp for pp in divisors(gpus) if pp <= self.num_layers]

    def modes_for(self, tp: int, pp: int, dp: int) -> list[str]:
        """The data-parallel modes tried at ``tp × pp × dp`` (``ddp`` alone without data parallelism)."""
        if dp == 1:
            return [data_parallel.REPLICATED]
        modes = self.dp_modes if pp > 1 or self.dp_modes_alone is None else self.dp_modes_alone
        return [mode for mode in modes if data_parallel.get(mode).applies(tp, pp, dp, self.gpus_per_node)]

    def micro_batches_for(self, dp: int) -> list[int]:
        """Micro-batch sizes ``b`` with ``dp · b`` dividing the global batch."""
        if self.global_batch % dp:
            return []
        per_replica = self.global_batch // dp
        sizes: Sequence[int] = (
            [self.micro_batch_size] if self.micro_batch_size is not None
            else self.micro_batch_sizes if self.micro_batch_sizes is not None
            else divisors(per_replica)
        )
        return [b for b in sizes if per_replica % b == 0]

    def schedule_shapes(self, pp: int, num_microbatches: int) -> list[tuple[str, int]]:
        """``(schedule, v)`` pairs valid for ``pp`` and ``m``."""
        if pp == 1:
            return [("1f1b", 1)] if self.virtual_stages in (None, 1) else []
        shapes: list[tuple[str, int]] = []
        top = self.num_layers // pp
        if self.virtual_stages is not None:  # pinned: only that v, uncapped by max_virtual_stages
            top = min(top, self.virtual_stages)
        elif self.max_virtual_stages is not None:
            top = min(top, self.max_virtual_stages)
        for name in self.schedule_names:
            info = schedule_info(name)
            if info.any_placement:
                # one stage per rank, and chunks in a loop (stage s on rank s mod pp); the
                # cost-aware order needs no m divisible by pp
                shapes += [(name, v) for v in range(1, top + 1)]
            elif info.layout == "loop":
                if num_microbatches % pp:
                    continue  # Megatron-LM's interleaved schedule needs m a multiple of pp
                shapes += [(name, v) for v in range(2, top + 1)]
            elif info.layout == "v":
                if info.stages_for(pp) <= self.num_layers:
                    shapes.append((name, info.chunks_per_rank()))
            else:
                shapes.append((name, 1))
        if self.virtual_stages is not None:
            shapes = [(name, v) for name, v in shapes if v == self.virtual_stages]
        return shapes

    def configs(self) -> list[Config]:
        """Every configuration of the space.

        Raises:
            InvalidInputError: no ``pp``/``b`` pair divides the global batch
                (naming ``B``, ``dp`` and ``b``), or no configuration has as many
                stages as the fixed partition.
        """
        out = self._every_config()
        if isinstance(self.partition, tuple):
            stages = len(self.partition)
            kept = [config for config in out if config.num_stages == stages]
            if out and not kept:
                counts = ", ".join(str(n) for n in sorted({config.num_stages for config in out}))
                raise InvalidInputError(
                    f"partition has {stages} stages but no configuration of the space has that many "
                    f"(pp · v is one of {counts}); give one count per stage of one of them"
                )
            out = kept
        return out

    def _every_config(self) -> list[Config]:
        """:meth:`configs` before a fixed partition filters them."""
        out: list[Config] = []
        for tp in self.tensor_degrees():
            for pp in self.pipeline_degrees(tp):
                dp = self.num_gpus // (tp * pp)
                sizes = self.micro_batches_for(dp)
                for size in sizes:
                    microbatches = self.global_batch // (dp * size)
                    for name, virtual in self.schedule_shapes(pp, microbatches):
                        if schedule_info(name).any_placement and virtual > 1 and size != sizes[0]:
                            continue  # chunked adaptive: the smallest micro-batch only (module doc)
                        for dp_mode in self.modes_for(tp, pp, dp):
                            for mode in self.recompute_modes:
                                out.append(Config(pp, dp, size, microbatches, name, virtual, mode, tp, dp_mode))
        if not out:
            fixed = f" × micro-batch size {self.micro_batch_size}" if self.micro_batch_size else ""
            degrees = ", ".join(f"dp={self.num_gpus // (tp * pp)}" for tp in self.tensor_degrees()
                                for pp in self.pipeline_degrees(tp))
            raise InvalidInputError(
                f"global_batch={self.global_batch} is not divisible by dp{fixed} for any pipeline degree "
                f"({degrees}); choose a global batch that dp × micro-batch size divides"
            )
        return out


def _takes_virtual_stages(name: str, v: int) -> bool:
    """Whether schedule ``name`` runs ``v`` stages per rank."""
    info = schedule_info(name)
    if info.any_placement:
        return True
    return v >= 2 if info.layout == "loop" else v == info.chunks_per_rank()


def _virtual_stages_taken(name: str) -> str:
    """The ``v`` schedule ``name`` runs, in words."""
    info = schedule_info(name)
    if info.any_placement:
        return "any v"
    return "v ≥ 2" if info.layout == "loop" else f"v = {info.chunks_per_rank()}"


def _checked_partition(partition: object, num_layers: int) -> str | tuple[int, ...] | None:
    """``None`` for ``"auto"``, ``"even"`` as given, else the counts (each ``>= 1``, adding up to ``num_layers``)."""
    if partition is None or partition == "auto":
        return None
    if partition == "even":
        return "even"
    if isinstance(partition, str):
        raise InvalidInputError(f"partition must be 'auto', 'even' or layer counts per stage, got {partition!r}")
    try:
        counts = tuple(operator.index(count) for count in partition)  # type: ignore[attr-defined]
    except TypeError:
        counts = ()
    if not counts or min(counts) < 1 or sum(counts) != num_layers:
        raise InvalidInputError(
            f"partition must be layer counts >= 1 adding up to the model's {num_layers} layers, got {partition!r}"
        )
    return counts
