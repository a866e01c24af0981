"""The options of one search, in one record: what the space is narrowed to and how plans are priced.

    from pipeplan.planner import Cluster, search
    from pipeplan.planner.options import SearchOptions
    result = search(workload, Cluster.of("h100-80g", 8), 256, SearchOptions(pp=2, dp_modes=("zero1",), top=3))

Every option has its default here and nowhere else; :func:`~pipeplan.planner.search.search`
takes the record, ``pipeplan plan`` builds it from its flags, and the advice
(:mod:`pipeplan.planner.advice`) searches again with one option changed
(``dataclasses.replace``). :meth:`SearchOptions.capacity` checks the options
against a cluster and gives the bytes per GPU a plan may use.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .. import data_parallel
from ..errors import InvalidInputError
from ..partition.choice import PartitionChoice
from .advice import capacity_text
from .cluster import Cluster
from .engine_costs import EngineCosts
from .memory import OptimizerBytes
from .step import gradient_sync

__all__ = ["SearchOptions", "Progress", "DEFAULT_HEADROOM"]

#: ``progress(done, total)`` after each configuration.
Progress = Callable[[int, int], None]

#: the share of a GPU's memory the search leaves free by default (:attr:`SearchOptions.headroom`)
DEFAULT_HEADROOM = 0.1


@dataclass(frozen=True)
class SearchOptions:
    """How one search runs (defaults: the whole space, Adam, 10 % headroom, the ten best plans).

    Attributes:
        pp: fix the pipeline degree.
        micro_batch_size: fix the micro-batch size.
        schedules: schedules to try (default all registered that the planner plans).
        memory_capacity: bytes per GPU a plan may use (default the cluster's
            ``memory_bytes`` less ``headroom``).
        optimizer: ``"adam"`` (16 bytes per parameter, split per data-parallel
            mode) or bytes per parameter (:mod:`pipeplan.planner.memory`);
            Megatron-LM's distributed optimizer is ``dp_modes=("zero1",)``.
        max_virtual_stages: largest ``v`` for interleaved and adaptive (default 4;
            ``None``: every ``v`` with ``pp · v ≤ L``).
        virtual_stages: fix ``v``, the stages per rank (``plan --virtual-stages``):
            only the schedules that run it, at that ``v``
            (:attr:`~pipeplan.planner.space.SearchSpace.virtual_stages`); ``None``: searched.
        send_mode: ``"eager"``, ``"rendezvous"`` or ``"serialized"`` messages
            (:mod:`pipeplan.planner.links`).
        top: how many plans to keep.
        budget: CPU seconds of the search (``time.process_time``, so a loaded
            machine stops it after the same work more nearly than wall time would);
            once a plan is found, the search stops after that many and returns the
            best so far with ``stats.complete = False``, the configurations it
            examined and a bound on those it did not (:class:`~pipeplan.planner.records.SearchStats`; the
            one-knob plans and the bound's refinement stop at it too; the two
            baselines are always simulated).
        progress: ``progress(done, total)`` after each configuration.
        exhaustive: simulate every candidate (no pruning), for checking.
        headroom: the share of each GPU's memory left free when ``memory_capacity``
            is not given (default 10 %: the CUDA context, communication buffers and
            allocator fragmentation live there, and pipeplan's activation bytes
            are estimates); ``0`` plans up to the full memory.
        partition: fix the layers per stage instead of solving them: counts per
            stage (only the configurations with that many stages, ``pp · v``, are
            evaluated; the others come back in ``rejected`` with the reason),
            ``"even"`` (every configuration's even split) or ``"auto"`` /
            ``None`` (the search's own partitions). Recompute is still relaxed per
            stage; the baselines and the one-knob plans stay as they are.
        tp: fix the tensor-parallel degree (default: every degree the workload
            answers for that divides a node).
        dp_modes: the data-parallel modes to try, by name (default every mode of
            :mod:`pipeplan.data_parallel` with ``optimizer="adam"``; the
            replicated one with bytes per parameter).
        sync: how the modes that reduce once a step (``ddp``, ``zero1``,
            ``zero2``) reduce gradients (:data:`~pipeplan.planner.step.SYNCS`:
            ``"megatron-overlap"``, the default, Megatron-LM with
            ``--overlap-grad-reduce --overlap-param-gather`` as its performance
            guides recommend; ``"megatron"``, its bare default, no overlap;
            ``"torch-ddp"``); ``fsdp`` and ``hsdp`` always overlap, layer by layer.
        engine: the engine the plans are for (:func:`pipeplan.engines.names`): the
            search spans only what it runs (:class:`pipeplan.engines.Runs`: its
            schedules, its data-parallel modes beside a pipeline and those it runs
            only without one); ``None``: every schedule and mode.
        engine_costs: what the engine's knobs change in the step beyond the workload
            (:class:`~pipeplan.planner.engine_costs.EngineCosts`: DeepSpeed's gradient
            sync per ZeRO stage, replacing ``sync`` for the modes it prices, and its host
            hooks); ``None``: nothing.
        compiled_loss: :attr:`engine` (torchtitan) compiles its loss with the model (``--compile on``):
            its memory (:class:`~pipeplan.planner.memory.MemoryModel`).
        summaries: compute the one-knob plans and the space's lower bounds (``False``: skipped,
            ``SearchResult.one_knob`` empty and its bounds 0, for a caller that reads only the
            plans and the baselines: ``plan --mix``'s search at the mix's mean sample).
    """

    pp: int | None = None
    micro_batch_size: int | None = None
    schedules: Sequence[str] | None = None
    memory_capacity: float | None = None
    optimizer: str | float = "adam"
    max_virtual_stages: int | None = 4
    virtual_stages: int | None = None
    send_mode: str = "eager"
    top: int = 10
    budget: float | None = None
    progress: Progress | None = None
    exhaustive: bool = False
    headroom: float = DEFAULT_HEADROOM
    partition: PartitionChoice | None = None
    tp: int | None = None
    dp_modes: Sequence[str] | None = None
    sync: str = "megatron-overlap"
    engine: str | None = None
    engine_costs: EngineCosts | None = None
    summaries: bool = True
    compiled_loss: bool = False

    def __post_init__(self) -> None:
        if self.dp_modes is not None:
            object.__setattr__(self, "dp_modes", tuple(self.dp_modes))

    def modes(self) -> tuple[str, ...]:
        """The data-parallel modes searched (see :attr:`dp_modes`).

        Raises:
            InvalidInputError: an unknown mode, or a sharded one with a byte count per parameter.
        """
        if self.dp_modes is not None:
            data_parallel.check_modes(self.dp_modes)
            sharded = [m for m in self.dp_modes if data_parallel.get(m).shards_state]
            if self.optimizer != "adam" and sharded:
                raise InvalidInputError(
                    f"--dp-modes {','.join(sharded)} shards Adam's state, which a byte count per parameter "
                    f"(--optimizer {self.optimizer}) does not describe: use --optimizer adam, or --dp-modes "
                    f"{data_parallel.REPLICATED}")
            return tuple(self.dp_modes)
        return data_parallel.names() if self.optimizer == "adam" else (data_parallel.REPLICATED,)

    def engine_space(self) -> tuple[tuple[str, ...] | None, tuple[str, ...], tuple[str, ...]]:
        """The schedules (``None``: every planned one), the data-parallel modes beside a pipeline and those at
        ``pp = 1`` that the search spans: :attr:`schedules` and :meth:`modes`, narrowed to what :attr:`engine` runs.

        Raises:
            InvalidInputError: an unknown engine, or given schedules or modes of which it runs none
                (one line naming the flag and what the engine runs).
        """
        modes = self.modes()
        schedules = None if self.schedules is None else tuple(self.schedules)
        if self.engine is None:
            return schedules, modes, modes
        from ..engines import get  # the engines' records (layer 3)

        runs = get(self.engine).runs
        if runs.schedules is not None:
            kept = tuple(name for name in (schedules or runs.schedules) if name in runs.schedules)
            if not kept:
                raise InvalidInputError(f"--schedules {','.join(schedules or ())}: {self.engine} runs only "
                                        f"{', '.join(runs.schedules)}; leave --schedules out or choose among them")
            schedules = kept
        with_pipeline = tuple(m for m in modes if runs.dp_modes_with_pipeline is None
                              or m in runs.dp_modes_with_pipeline)
        alone = tuple(m for m in modes if runs.dp_modes_without_pipeline is None
                      or m in runs.dp_modes_without_pipeline)
        if not with_pipeline and not alone:
            runnable = sorted(set(runs.dp_modes_with_pipeline or ()) | set(runs.dp_modes_without_pipeline or ()))
            raise InvalidInputError(f"--dp-modes {','.join(modes)}: {self.engine} runs only "
                                    f"{', '.join(runnable)}; leave --dp-modes out or choose among them")
        return schedules, with_pipeline, alone

    def engine_note(self) -> str:
        """One line naming the given schedules and modes :attr:`engine` does not run (dropped from the search), or ``""``."""
        if self.engine is None:
            return ""
        schedules, modes, alone = self.engine_space()
        dropped = [name for name in self.schedules or () if name not in (schedules or ())]
        dropped += [mode for mode in self.dp_modes or () if mode not in modes and mode not in alone]
        only_alone = [mode for mode in alone if mode not in modes]
        parts = [f"{self.engine} does not run {', '.join(dropped)}: left out of the search"] if dropped else []
        if only_alone and (self.pp or 0) != 1:
            parts.append(f"{self.engine} runs {', '.join(only_alone)} only without a pipeline (pp = 1)")
        return "; ".join(parts)

    def capacity(self, cluster: Cluster) -> float:
        """Check the options but ``top`` and return the bytes per GPU a plan may use on ``cluster``.

        Raises:
            InvalidInputError: an option out of range.
        """
        budget, headroom = self.budget, self.headroom
        if budget is not None and not (isinstance(budget, (int, float)) and budget > 0):
            raise InvalidInputError(f"budget must be a number of seconds > 0, got {budget!r}")
        if self.send_mode not in ("eager", "rendezvous", "serialized"):
            raise InvalidInputError(
                f"send_mode must be 'eager', 'rendezvous' or 'serialized', got {self.send_mode!r}")
        if not (isinstance(headroom, (int, float)) and 0 <= headroom < 1):
            raise InvalidInputError(f"headroom must be a share of the memory in [0, 1), got {headroom!r}")
        given = self.memory_capacity
        capacity = cluster.memory_bytes * (1 - headroom) if given is None else float(given)
        if not capacity > 0:
            raise InvalidInputError(f"memory_capacity must be > 0 bytes, got {given!r}")
        OptimizerBytes.for_optimizer(self.optimizer, 1)  # validates
        gradient_sync(self.sync)  # validates
        return capacity

    def capacity_text(self, cluster: Cluster) -> str:
        """The capacity once, with and without headroom (:func:`~pipeplan.planner.advice.capacity_text`)."""
        return capacity_text(self.capacity(cluster), cluster.memory_bytes, self.headroom,
                             self.memory_capacity is not None)
