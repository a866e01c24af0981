"""Every schedule on the same ranks: one step of each, simulated, and the best marked.

    >>> from pipeplan import StageCosts
    >>> from pipeplan.partition.schedule_compare import compare_schedules
    >>> result = compare_schedules(StageCosts([30, 10, 10, 20]), num_microbatches=8,
    ...                            schedules=["1f1b", "interleaved", "zb-v"])
    >>> [(row.label, row.num_ranks, row.num_stages, row.step) for row in result.rows]
    [('1f1b', 4, 4, 750.0), ('interleaved v=2', 4, 8, 590.0), ('zb-v', 4, 8, 615.0)]
    >>> result.best.label
    'interleaved v=2'

Why: ``pipeplan simulate --schedule interleaved --forward 30,10,10,20`` runs the four
stage times as four chunks on *two* ranks (two chunks per rank), so its step is not
comparable with 1F1B's on four. Here the rank count ``P`` is fixed and each schedule
gets the model cut into the stages it needs on those ``P`` ranks:

* **stage times** (:class:`~pipeplan.costs.StageCosts`, one stage per rank, ``P`` = their
  count): a schedule of ``v`` chunks per rank (interleaved: ``v`` = ``virtual_stages``;
  zb-v: 2) splits each stage into ``v`` equal chunks in model order (the stage's work
  taken as divisible: forward, backward, weight part and activation bytes each ``/ v``),
  and chunk ``c`` sits on the rank the schedule's placement gives it (``c mod P`` in a
  loop; ranks ``0..P-1`` then ``P-1..0`` in a V). Without activation sizes each stage
  holds 1 per microbatch (so a chunk ``1 / v``): peak memory is then in a whole stage's
  activations of one microbatch, comparable across ``v``.
* **a layer profile** (:class:`~pipeplan.layers.LayerProfile`): the layers are cut for
  each schedule's layout: ``"auto"`` (default) the balanced cut of that layout (the
  min-max partition for one stage per rank; :func:`~pipeplan.partition.place_chunks`
  with the schedule's fixed placement for chunks), ``"even"`` even layer counts over all
  stages, or given layers per stage (``P`` entries; each stage's layers then cut into
  ``v`` chunks by the min-max partition of that stage).

Each schedule is built for those stages and ``num_microbatches`` and simulated with
the messages (``comm``, or ``messages(boundary bytes)`` per layout for a profile) and
core sharing (``slowdown``). A schedule that cannot run this shape (too few layers for
its chunks, options it refuses, a memory limit it cannot meet, a size too large) gets a
row whose ``reason`` says why instead of an error; dual-rate gets one too (it trains on
stale gradients, a different step). ``best`` marks every row whose step equals the
smallest. Times are in the costs' unit (ms in the CLI). Torch-free.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from .._validation import positive_int
from ..costs import CommModel, StageCosts
from ..errors import InvalidInputError, PipeplanError
from ..layers import LayerProfile
from ..schedules import SCHEDULES, backward_mode, check_schedule_size, schedule_info
from ..schedules.inflight import build_with_costs
from ..simulate import simulate
from ..timeline import Timeline
from .choice import PartitionChoice, resolve_partition
from .placement import Pattern, place_chunks
from .solver import even_split, partition_layers

__all__ = ["ScheduleRow", "ScheduleComparison", "compare_schedules", "DEFAULT_VIRTUAL_STAGES"]

#: Chunks per rank of a loop schedule (interleaved) when none are asked for: Megatron's smallest interleaving.
DEFAULT_VIRTUAL_STAGES = 2

#: Relative tolerance under which two steps tie for the best (float sums in another order).
_TIE = 1e-9


@dataclass(frozen=True)
class ScheduleRow:
    """One schedule on the compared ranks.

    Attributes:
        schedule: the registered name.
        label: how tables name it (``"interleaved v=2"``).
        chunks_per_rank: ``v``, stages each rank holds.
        num_stages: stages it runs, ``v × num_ranks``.
        num_ranks, num_microbatches: the shape every row shares.
        layers_per_stage: with a profile, the layers of each stage in model order; else ``None``.
        step: the simulated step (makespan), in the costs' unit; ``None`` when it did not run.
        bubble_ratio: 1 − Σ busy / (ranks × step), the share of all ranks' time spent idle.
        peak_inflight: the most microbatch-chunks any rank holds at once.
        peak_activations: the most activation bytes any rank holds at once (without sizes:
            in stage-microbatches, a chunk of ``1 / v`` stage counting ``1 / v``).
        best: its step is the smallest of the rows that ran.
        reason: why it did not run (``None`` when it did).
        timeline: the simulated step (not in :meth:`to_dict`).
    """

    schedule: str
    label: str
    chunks_per_rank: int
    num_stages: int
    num_ranks: int
    num_microbatches: int
    layers_per_stage: tuple[int, ...] | None = None
    step: float | None = None
    bubble_ratio: float | None = None
    peak_inflight: int | None = None
    peak_activations: float | None = None
    best: bool = False
    reason: str | None = None
    timeline: Timeline | None = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (every attribute but the timeline)."""
        return {
            "schedule": self.schedule,
            "label": self.label,
            "virtual_stages": self.chunks_per_rank,
            "num_stages": self.num_stages,
            "num_ranks": self.num_ranks,
            "num_microbatches": self.num_microbatches,
            "layers_per_stage": None if self.layers_per_stage is None else list(self.layers_per_stage),
            "step": self.step,
            "bubble_ratio": self.bubble_ratio,
            "peak_inflight": self.peak_inflight,
            "peak_activations": self.peak_activations,
            "best": self.best,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class ScheduleComparison:
    """The rows of :func:`compare_schedules`, in the order asked, and how the stages were made.

    Attributes:
        rows: one per schedule.
        num_ranks, num_microbatches: the shape every row shares.
        split: how each layout's stages were made, in words.
        activation_unit: ``"stage-microbatches"`` for stage times whose every ``activation_bytes`` is 1
            (:class:`~pipeplan.costs.StageCosts`' default: no sizes given), else ``"bytes"``.
    """

    rows: tuple[ScheduleRow, ...]
    num_ranks: int
    num_microbatches: int
    split: str
    activation_unit: str

    @property
    def best(self) -> ScheduleRow | None:
        """The first row marked best (``None`` when no schedule ran)."""
        return next((row for row in self.rows if row.best), None)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form: the shape, the split, the unit of ``peak_activations`` and the rows."""
        best = self.best
        return {
            "num_ranks": self.num_ranks,
            "num_microbatches": self.num_microbatches,
            "split": self.split,
            "activation_unit": self.activation_unit,
            "best": None if best is None else best.label,
            "rows": [row.to_dict() for row in self.rows],
        }


def compare_schedules(
    source: StageCosts | LayerProfile,
    *,
    num_microbatches: int,
    schedules: Sequence[str] | None = None,
    num_ranks: int | None = None,
    virtual_stages: int = DEFAULT_VIRTUAL_STAGES,
    partition: PartitionChoice = "auto",
    comm: CommModel | None = None,
    messages: Callable[[Sequence[float]], CommModel] | None = None,
    slowdown: Sequence[float] | None = None,
    options: Mapping[str, Any] | None = None,
) -> ScheduleComparison:
    """Simulate each schedule on the same ``num_ranks`` ranks (see the module doc).

    Args:
        source: stage times of one stage per rank, or per-layer costs.
        num_microbatches: microbatches per step, the same for every row.
        schedules: registered names, in the order of the rows (``None``: every registered one).
        num_ranks: ``P``; stage times fix it (their count; a different value is refused), a
            profile needs it unless ``partition`` lists the layers of each stage.
        virtual_stages: chunks per rank of a loop schedule (interleaved), >= 2 for it to differ from 1F1B.
        partition: with a profile: ``"auto"``, ``"even"`` or the layers of each of the ``P`` stages.
        comm: messages for stage times (``None``: free); per-boundary sizes fit one stage per rank only.
        messages: with a profile, the message model for a layout's boundary bytes (``None``: ``comm``).
        slowdown: core sharing (:func:`pipeplan.simulate`'s ``slowdown``); ``None``: a core per rank.
        options: generator options (``memory_limit``, ``objective``, ``backward``); each
            schedule gets those it takes, and one that lacks a needed one (``backward="none"``) gets a reason.

    Raises:
        InvalidInputError: an unknown schedule, bad sizes, or stage times and ``num_ranks`` that disagree.
    """
    micro = positive_int("num_microbatches", num_microbatches)
    virtual = positive_int("virtual_stages", virtual_stages)
    names = list(SCHEDULES) if schedules is None else list(schedules)
    for name in names:
        schedule_info(name)  # raises on an unknown name
    if len(set(names)) != len(names):
        raise InvalidInputError(f"schedules lists a name twice: {', '.join(names)}")
    if isinstance(source, StageCosts):
        ranks = source.num_stages
        if num_ranks is not None and positive_int("num_ranks", num_ranks) != ranks:
            raise InvalidInputError(f"stage times give {ranks} stages, one per rank, but num_ranks is {num_ranks}")
        sized = any(value != 1.0 for value in source.activation_bytes)
        split = (f"{ranks} stage times, one stage per rank; a schedule of v chunks per rank splits each stage "
                 "into v equal chunks in model order, chunk c on the rank its placement gives")
    elif isinstance(source, LayerProfile):
        ranks = _profile_ranks(source, num_ranks, partition)
        sized = True
        split = {"auto": "the profile's layers cut for each layout by the balanced partitioner (chunks: for the "
                         "schedule's placement)",
                 "even": "the profile's layers cut into even counts over each layout's stages"}.get(
            partition if isinstance(partition, str) else "",
            f"layers per stage {list(partition)}; a schedule of v chunks per rank cuts each stage's layers into "
            "v chunks by the min-max partition")
    else:
        raise InvalidInputError(f"source must be StageCosts or a LayerProfile, got {type(source).__name__}")
    rows = [_row(name, source, ranks, micro, virtual, partition, comm, messages, slowdown, dict(options or {}))
            for name in names]
    ran = [row.step for row in rows if row.step is not None]
    if ran:
        least = min(ran)
        rows = [row if row.step is None or row.step > least * (1 + _TIE)
                else _replace_best(row) for row in rows]
    return ScheduleComparison(rows=tuple(rows), num_ranks=ranks, num_microbatches=micro, split=split,
                              activation_unit="bytes" if sized else "stage-microbatches")


def _replace_best(row: ScheduleRow) -> ScheduleRow:
    return replace(row, best=True)


def _profile_ranks(profile: LayerProfile, num_ranks: int | None, partition: PartitionChoice) -> int:
    """``P`` for a profile: the given partition's stage count, else ``num_ranks``."""
    if isinstance(partition, str):
        if partition not in ("auto", "even"):
            raise InvalidInputError(f"partition must be 'auto', 'even' or layers per stage, got {partition!r}")
        if num_ranks is None:
            raise InvalidInputError("a profile needs num_ranks (or layers per stage) to compare schedules on")
        ranks = positive_int("num_ranks", num_ranks)
        if ranks > profile.num_layers:
            raise InvalidInputError(f"num_ranks must be <= the profile's {profile.num_layers} layers, got {ranks}")
        return ranks
    counts = list(partition)
    if any(not isinstance(c, int) or c < 1 for c in counts) or sum(counts) != profile.num_layers:
        raise InvalidInputError(f"layers per stage must be counts >= 1 adding up to the profile's "
                                f"{profile.num_layers} layers, got {counts}")
    if num_ranks is not None and positive_int("num_ranks", num_ranks) != len(counts):
        raise InvalidInputError(f"layers per stage give {len(counts)} stages but num_ranks is {num_ranks}")
    return len(counts)


def _chunks(name: str, virtual: int) -> int:
    """Stages per rank ``name`` runs: ``virtual`` in a loop, 2 in a V, else 1."""
    return schedule_info(name).chunks_per_rank(virtual)


def _row(name: str, source: StageCosts | LayerProfile, ranks: int, micro: int, virtual: int,
         partition: PartitionChoice, comm: CommModel | None,
         messages: Callable[[Sequence[float]], CommModel] | None, slowdown: Sequence[float] | None,
         options: dict[str, Any]) -> ScheduleRow:
    """One schedule's row: built, simulated and measured, or the reason it could not run."""
    info = schedule_info(name)
    chunks = _chunks(name, virtual)
    blank = ScheduleRow(schedule=name, label=info.label(chunks), chunks_per_rank=chunks,
                        num_stages=chunks * ranks, num_ranks=ranks, num_microbatches=micro)
    if info.not_planned is not None:
        return _why(blank, info.not_planned)
    accepted = info.options
    if options.get("backward") is not None and "backward" not in accepted:
        return _why(blank, f"it takes no backward option (asked: {options['backward']})")
    try:
        layers, costs, link = _layout(source, info.layout, ranks, chunks, partition, comm, messages)
        given = {key: value for key, value in options.items() if key in accepted and value is not None}
        given.update(info.shape_options(chunks))
        check_schedule_size(name, num_stages=chunks * ranks, num_microbatches=micro,
                            backward=backward_mode(name, given), simulated=True)
        built = build_with_costs(name, chunks * ranks, micro, {**given, **({"comm": link} if "comm" in accepted
                                                                          and link is not None else {})}, costs)
        if built.num_ranks != ranks:  # a generator whose placement differs from its registered layout
            return _why(blank, f"it placed {built.num_stages} stages on {built.num_ranks} ranks, not {ranks}")
        timeline = simulate(built, costs, link, slowdown=slowdown)
    except PipeplanError as error:
        return _why(blank, str(error))
    return ScheduleRow(
        schedule=name, label=blank.label, chunks_per_rank=chunks, num_stages=blank.num_stages, num_ranks=ranks,
        num_microbatches=micro, layers_per_stage=layers, step=timeline.makespan,
        bubble_ratio=timeline.bubble_ratio, peak_inflight=max(timeline.peak_inflight),
        peak_activations=max(timeline.peak_bytes), timeline=timeline,
    )


def _why(row: ScheduleRow, reason: str) -> ScheduleRow:
    return replace(row, reason=reason)


def _layout(source: StageCosts | LayerProfile, layout: str, ranks: int, chunks: int, partition: PartitionChoice,
            comm: CommModel | None, messages: Callable[[Sequence[float]], CommModel] | None
            ) -> tuple[tuple[int, ...] | None, StageCosts, CommModel | None]:
    """Layers per stage (a profile's), the stage costs and the messages of ``chunks`` stages per rank."""
    if isinstance(source, StageCosts):
        if chunks > 1 and comm is not None and isinstance(comm.boundary_bytes, tuple) \
                and len(set(comm.boundary_bytes)) > 1:
            raise InvalidInputError(f"the boundary sizes are given per boundary of one stage per rank; {chunks} "
                                    "chunks per rank have other boundaries (give one size for all)")
        return None, _split_costs(source, chunks), comm
    layers = _profile_layers(source, layout, ranks, chunks, partition)
    link = messages(source.boundary_bytes(layers)) if messages is not None else comm
    return tuple(layers), source.stage_costs(layers), link


def _split_costs(costs: StageCosts, chunks: int) -> StageCosts:
    """Each stage as ``chunks`` equal chunks in model order (``chunks == 1``: the costs as given).

    Costs per microbatch (``microbatch_costs``, ``microbatch_scale``) are not split: a reason for the row.
    """
    if chunks == 1:
        return costs
    if costs.microbatch_costs is not None or costs.microbatch_scale is not None:
        raise InvalidInputError(f"costs per microbatch are not split into {chunks} chunks per rank; compare "
                                "schedules of one stage per rank on them")

    def each(values: Sequence[float] | None) -> list[float] | None:
        return None if values is None else [value / chunks for value in values for _ in range(chunks)]

    return StageCosts(forward=each(costs.forward) or [], backward=each(costs.backward), weight=each(costs.weight),
                      activation_bytes=each(costs.activation_bytes),
                      weight_stash_bytes=each(costs.weight_stash_bytes),
                      backward_input=each(costs.backward_input))


def _profile_layers(profile: LayerProfile, layout: str, ranks: int, chunks: int,
                    partition: PartitionChoice) -> list[int]:
    """Layers per stage of ``chunks`` stages per rank in ``layout`` (see the module doc)."""
    stages = ranks * chunks
    if stages > profile.num_layers:
        raise InvalidInputError(f"{chunks} chunks on each of {ranks} ranks need {stages} stages, more than the "
                                f"profile's {profile.num_layers} layers")
    if isinstance(partition, str):
        if partition == "even":
            return list(even_split(profile.num_layers, stages))
        if chunks == 1:
            return resolve_partition("auto", profile, stages)
        pattern: Pattern = "v" if layout == "v" else "interleaved"
        return list(place_chunks(profile, ranks, chunks, pattern=pattern).layers_per_stage)
    counts = list(partition)
    if chunks == 1:
        return counts
    cut: list[int] = []
    start = 0
    for stage, count in enumerate(counts):
        if count < chunks:
            raise InvalidInputError(f"stage {stage} holds {count} layer(s), too few for {chunks} chunks per rank")
        cut += list(partition_layers(profile.total[start:start + count].tolist(), chunks).layers_per_stage)
        start += count
    return cut
