"""The record of one engine: what it runs and how its files are written.

    from pipeplan import engines
    engine = engines.get("deepspeed")
    engine.runs.schedules                  # ('1f1b',): the planner searches only these for it
    engine.export(plan)                    # [ExportFile('ds_config.json', ...), ExportFile('pipeline_module.py', ...)]
    engine.refusal(plan)                   # "" when it runs the plan, else the one-line reason
    engine.model_refusal(spec)             # "" unless it runs no plan of this model (asked before any search)
    engine.read(Path("ds_config.json"))    # RunConfig: the user's own files, read back (pipeplan check)
    engines.get("megatron").knobs.get("tp-comm-overlap").default    # 'backward'

Each engine module (:mod:`.megatron`, :mod:`.deepspeed`, :mod:`.torchtitan`,
:mod:`.pipelining`) ends with its :class:`Engine`; the registry in
:mod:`pipeplan.engines` lists them. The record has one part per question asked of an
engine: :class:`Runs` (what the planner may search for it), :class:`Files` (the
files it is given, written by its export) and :class:`Knobs` (the settings a user
pins on the command line, ``plan --recompute full``, each a :class:`Knob` with its
choices and the default pipeplan assumes; the step model prices them:
:meth:`pipeplan.planner.Workload.from_spec`, docs/engines.md). Reading its files back
belongs in :class:`Files`, beside :attr:`Files.write`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from ..errors import InvalidInputError
from ..models.spec import ModelSpec
from ..plan import Plan, TpCommOverlap
from ..schedule import Schedule
from ._common import ExportFile, to_plan
from ._names import LayerName, invented_note
from .run_config import RunConfig

__all__ = ["Engine", "Runs", "Files", "ExportWriter", "KnobExportWriter", "Knob", "NumberKnob", "Knobs", "Pricing",
           "GRAD_REDUCE_BYTES", "grad_reduce_dtype"]


class ExportWriter(Protocol):
    """Writes an engine's files for one plan: ``(plan, target, names, *, schedule, gpus_per_node) -> files``.

    ``target`` is one of the engine's :attr:`Files.targets`; ``names`` the model's layer
    names (``None``: guessed from the plan's); ``schedule`` the order a schedule CSV
    carries (``None``: the plan's own); ``gpus_per_node`` for a layout by node. Raises
    :class:`~pipeplan.errors.InvalidInputError` with one line for a plan the engine
    cannot run.
    """

    def __call__(self, plan: Plan, target: str, names: Sequence[LayerName] | None, *,
                 schedule: Schedule | None, gpus_per_node: int) -> list[ExportFile]: ...


class KnobExportWriter(Protocol):
    """An :class:`ExportWriter` that also writes the engine's knobs given (``knobs``: name → value, only those of
    :attr:`Files.knobs`): torchtitan's ``compile.enable``."""

    def __call__(self, plan: Plan, target: str, names: Sequence[LayerName] | None, *,
                 schedule: Schedule | None, gpus_per_node: int, knobs: Mapping[str, str]) -> list[ExportFile]: ...


def _exact(plan: Plan) -> list[str]:
    return []


def _any_model(spec: ModelSpec) -> str:
    return ""


def _nothing_instead(plan: Plan, names: Sequence[LayerName] | None) -> dict[str, str]:
    return {}


def _no_reader(path: Path) -> RunConfig:
    raise InvalidInputError(f"pipeplan cannot read this engine's files yet ({path})")


@dataclass(frozen=True)
class Runs:
    """What an engine runs: the planner's fallback search for it spans only this.

    Attributes:
        schedules: the pipeline schedules it runs (``None``: any order, from a schedule CSV).
        dp_modes_with_pipeline: the data-parallel modes it runs beside a pipeline of
            more than one rank (``None``: every mode).
        dp_modes_without_pipeline: the data-parallel modes it runs without one
            (pp 1; ``None``: every mode).
        model: why it runs no plan at all of a model (one line; ``""``: it may run
            some): what depends on the model alone, asked before any search
            (Megatron-LM: a model that is no GPT).
    """

    schedules: tuple[str, ...] | None = None
    dp_modes_with_pipeline: tuple[str, ...] | None = None
    dp_modes_without_pipeline: tuple[str, ...] | None = None
    model: Callable[[ModelSpec], str] = _any_model


@dataclass(frozen=True)
class Files:
    """The files an engine is given for a plan.

    Attributes:
        targets: the ``--export`` names it writes, its own name first (torchtitan
            also writes its last TOML release, ``torchtitan-toml``).
        write: the export (see :class:`ExportWriter`).
        notes: what the files approximate of a plan, one sentence each (empty: exact).
        instead: what a refused export carries beside its one-line error, by JSON key
            (Megatron-LM: the stage → module table of a model it has no port of).
        paths: the files name the model's modules (a model whose paths pipeplan
            invented gets a note saying so); Megatron-LM's flags name none.
        read: reads a user's files (a file, or the directory an export wrote) back
            into a :class:`~pipeplan.engines.run_config.RunConfig`; raises
            :class:`~pipeplan.errors.InvalidInputError` with one line naming the key
            the engine does not have or the value it refuses.
        knobs: the knobs (:class:`Knob` names) its files carry where given (torchtitan:
            ``compile``); :attr:`write_knobs` writes them.
        write_knobs: the export with those knobs (``None``: :attr:`write`, the knobs'
            defaults left to the engine).
    """

    targets: tuple[str, ...]
    write: ExportWriter
    notes: Callable[[Plan], list[str]] = _exact
    instead: Callable[[Plan, Sequence[LayerName] | None], dict[str, str]] = _nothing_instead
    paths: bool = True
    read: Callable[[Path], RunConfig] = _no_reader
    knobs: tuple[str, ...] = ()
    write_knobs: KnobExportWriter | None = None


def _numbered(choice: str, value: str) -> bool:
    """``value`` is ``choice``'s prefix with a positive integer, for a choice ending in ``:N`` (``every:N``)."""
    if not choice.endswith(":N"):
        return False
    prefix = choice[:-1]
    count = value[len(prefix):]
    return value.startswith(prefix) and count.isdigit() and int(count) >= 1


@dataclass(frozen=True)
class Knob:
    """One setting of an engine a user can pin (``--NAME VALUE`` on ``plan``).

    Attributes:
        name: its flag without the dashes, one spelling across engines (``"recompute"``,
            ``"sequence-parallel"``, ``"tp-comm-overlap"``).
        choices: the values it takes; one ending in ``:N`` (``"every:N"``) stands for that
            prefix with any positive integer (``every:2``).
        default: what pipeplan assumes when it is not given: one of ``choices``, or
            ``None`` where the planner searches (recompute).
        doc: what each choice does in the engine and what it costs (one sentence or two).
        searched: with ``default=None``, the values the planner searches (``None``: every
            choice; torchtitan's recompute: ``none``, ``op``, ``full``).
        elsewhere: why an engine without this knob has none (``--compile``: Megatron-LM and
            DeepSpeed run fused kernels already), the refusal's reason; ``""``: the plain
            "has no knob" line.
        modes: the data-parallel modes the knob sets (torchtitan's ``grad-reduce-dtype``:
            fsdp and hsdp); the others are priced as without it, and the assumptions say
            so where it is given with them. Empty: every mode.
    """

    name: str
    choices: tuple[str, ...]
    default: str | None
    doc: str
    searched: tuple[str, ...] | None = None
    elsewhere: str = ""
    modes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.default is not None and self.default not in self.choices:
            raise ValueError(f"knob {self.name}: default {self.default!r} is not one of {self.choices}")

    def parse(self, value: str, engine: str = "") -> str:
        """``value`` when it is one of :attr:`choices` (``every:2`` for ``every:N``).

        Raises:
            InvalidInputError: one line naming the flag, the value and the choices.
        """
        plain = value in self.choices and not value.endswith(":N")
        if not plain and not any(_numbered(choice, value) for choice in self.choices):
            owner = f" for {engine}" if engine else ""
            raise InvalidInputError(f"--{self.name}{owner} must be one of {', '.join(self.choices)}, got {value!r}")
        return value


@dataclass(frozen=True)
class NumberKnob(Knob):
    """A knob that takes a number as well as its :attr:`choices` (``--reduce-bucket-size 2e8``).

    Attributes:
        unit: what the number counts (``"elements"``, ``"µs per tensor"``), for ``--help``.
        assumed: with ``default=None``, what pipeplan assumes when it is not given, in words
            (an engine's own rule: DeepSpeed's ``overlap_comm`` is off at ZeRO 1–2 and on at
            ZeRO-3), printed in the assumptions; ``""``: the planner searches.
        zero: the number may be 0 (``False``: it must be > 0, as DeepSpeed's bucket sizes).
    """

    unit: str = ""
    assumed: str = ""
    zero: bool = True

    def __post_init__(self) -> None:
        if self.default is not None and self.default not in self.choices:
            try:
                self.parse(self.default)
            except InvalidInputError as error:
                raise ValueError(f"knob {self.name}: default {self.default!r} is not what it takes") from error

    def parse(self, value: str, engine: str = "") -> str:
        """``value`` when it is one of :attr:`choices`, or (with a :attr:`unit`) a finite number ≥ 0 (> 0 without
        :attr:`zero`): ``5e8``, ``200000000``.

        Raises:
            InvalidInputError: one line naming the flag, the value and what it takes.
        """
        if value in self.choices:
            return value
        if self.unit:
            try:
                number = float(value)
            except ValueError:
                number = -1.0
            if (number > 0 or (self.zero and number == 0)) and number != float("inf"):
                return value
        owner = f" for {engine}" if engine else ""
        number_text = f"a number of {self.unit}{'' if self.zero else ' > 0'}"
        if not self.unit:
            takes = f"one of {', '.join(self.choices)}"
        else:
            takes = " or ".join(part for part in (", ".join(self.choices), number_text) if part)
        raise InvalidInputError(f"--{self.name}{owner} must be {takes}, got {value!r}")


@dataclass(frozen=True)
class Knobs:
    """The knobs of one engine, in the order ``--help`` and the assumptions list them."""

    knobs: tuple[Knob, ...] = ()

    def names(self) -> tuple[str, ...]:
        """Each knob's name."""
        return tuple(knob.name for knob in self.knobs)

    def get(self, name: str, engine: str = "") -> Knob:
        """The knob called ``name``.

        Raises:
            InvalidInputError: the engine has no such knob (one line naming the ones it has).
        """
        for knob in self.knobs:
            if knob.name == name:
                return knob
        owner = engine or "this engine"
        if not self.knobs:
            raise InvalidInputError(f"--{name}: {owner}'s knobs are not priced yet; leave it out, or use "
                                    "--engine megatron")
        have = ", ".join(f"--{n}" for n in self.names())
        raise InvalidInputError(f"{owner} has no knob --{name} (its knobs: {have})")

    def defaults(self) -> dict[str, str | None]:
        """Each knob's default by name (``None``: searched)."""
        return {knob.name: knob.default for knob in self.knobs}


#: what follows an overlapping gradient sync's name when its bucket is not :attr:`Pricing.bucket_elements`'s
#: default: ``deepspeed-overlap:bucket=100000000`` (a plan records which bucket it was timed with)
BUCKET_TAG = ":bucket="


@dataclass(frozen=True)
class Pricing:
    """What an engine's knobs change in a step beyond the kernels, as plain numbers the planner prices.

    The planner turns it into a gradient sync per data-parallel mode and a host time per
    parameter tensor (:mod:`pipeplan.planner.engine_costs`); the engine's module says where
    each number comes from (DeepSpeed: :func:`pipeplan.engines.deepspeed.deepspeed_pricing`).

    Attributes:
        sync: the name a plan's ``grad_sync`` gets (``"deepspeed"``; ``"-overlap"`` appended
            where the reduction overlaps the backward).
        overlap: per data-parallel mode, whether its gradient reduction overlaps the backward
            (a mode not named: the planner's own ``--grad-sync``).
        bucket_elements: gradient elements per bucket when it overlaps.
        overlap_in_pipeline: the overlap also runs beside a pipeline (False: with ``pp > 1``
            every reduction waits for the schedule's last backward).
        overlap_scatter: per data-parallel mode that gathers per layer (ZeRO-3), whether its
            gradient reduce-scatters overlap the backward (absent: they do).
        hook_us: per data-parallel mode, the host's extra time per trainable parameter tensor in
            microseconds: ``(each microbatch's backward, each optimizer step)``.
        accumulate_bytes: per data-parallel mode, beside a pipeline (``pp > 1``), the device-memory
            bytes the engine moves per trainable parameter in each microbatch's backward beyond the
            kernels (its gradient accumulation; absent: none).
        pipeline_factors: per device preset name, a factor on every stage's forward and backward
            time beside a pipeline (``pp > 1``): what the engine's pipeline runtime costs beyond
            what is priced (absent: 1). Each value is fitted to published runs named beside it.
        grad_reduce_bytes: bytes per gradient element of the data-parallel reduction, for every
            mode (``--grad-reduce-dtype``: 4 fp32, 2 bf16); the replicated gradient buffer is held
            in it too (:mod:`pipeplan.data_parallel`). ``None``: each mode's own.
        bucket_bytes: bytes per bucket when it overlaps (DDP's ``bucket_cap_mb``); overrides
            :attr:`bucket_elements`. ``None``: :attr:`bucket_elements`.
        bucket_calls: each bucket is its own collective call, paying the collective's latency
            (DDP: one all-reduce per bucket); ``False``: the reduction is priced as one call.
        walk_us: per data-parallel mode, the host's time once per step on each rank before its
            last backward, µs ``(per trainable parameter tensor, per autograd node)`` of the rank's
            graph, exposed (DDP's ``find_unused_parameters``; absent: none).
        buffer_bytes: per data-parallel mode, device bytes each rank holds for the reduction's
            buckets (DeepSpeed's ``contiguous_gradients`` buffers; absent: none).
        gather_ahead: per data-parallel mode that gathers per layer, ``(prefetch elements, most
            elements live)``: what is gathered beside the layer running (DeepSpeed ZeRO-3's
            ``stage3_prefetch_bucket_size`` and ``stage3_max_live_parameters``; absent: the next
            layer, FSDP2's).
    """

    sync: str
    overlap: Mapping[str, bool] = field(default_factory=dict)
    bucket_elements: float = 5e8
    overlap_in_pipeline: bool = True
    overlap_scatter: Mapping[str, bool] = field(default_factory=dict)
    hook_us: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    accumulate_bytes: Mapping[str, float] = field(default_factory=dict)
    pipeline_factors: Mapping[str, float] = field(default_factory=dict)
    grad_reduce_bytes: float | None = None
    bucket_bytes: float | None = None
    bucket_calls: bool = False
    walk_us: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    buffer_bytes: Mapping[str, float] = field(default_factory=dict)
    gather_ahead: Mapping[str, tuple[float, float]] = field(default_factory=dict)


#: bytes per gradient element of each ``--grad-reduce-dtype`` value
GRAD_REDUCE_BYTES: Mapping[str, float] = {"fp32": 4.0, "bf16": 2.0}


def grad_reduce_dtype(reduce_bytes: float | None) -> str | None:
    """The ``--grad-reduce-dtype`` value of ``reduce_bytes`` bytes per element (``None`` for ``None``)."""
    if reduce_bytes is None:
        return None
    return next(name for name, size in GRAD_REDUCE_BYTES.items() if size == reduce_bytes)


def _no_pricing(knobs: Mapping[str, str]) -> Pricing | None:
    return None


def _megatron_tp(knobs: Mapping[str, str]) -> TpCommOverlap | None:
    return None


@dataclass(frozen=True)
class Engine:
    """One training engine pipeplan plans for.

    Attributes:
        name: how ``--export`` and the JSON name it (``"megatron"``, ``"torch"``).
        runs: what it runs.
        files: how its files are written.
        knobs: the settings a user can pin, with the defaults pipeplan assumes
            (empty: none priced yet).
        pricing: the knobs given (name → value) → what they change in the step beyond the
            kernels (:class:`Pricing`), or ``None`` where the workload's pricing is all
            (Megatron-LM's knobs are priced in :class:`pipeplan.planner.Workload`).
        compute_factors: per device preset name, what the engine's kernels take
            beside the device's kernel model (Megatron-style fused kernels), as a
            factor on every layer's compute time
            (:meth:`pipeplan.planner.Workload.with_compute_factor`); a device not
            listed: 1. Each value is fitted to published runs named beside it.
        compile_speedup: with its knob ``compile`` at ``on`` (``torch.compile``), what
            the compiled kernels gain over the eager ones the factors price: the factor
            becomes ``max(1, factor / compile_speedup)`` (never below the device's fused
            kernels); 1: the knob changes nothing.
        tp_overlap: the knobs given (name → value) → what its tensor-parallel collectives hide
            behind (:data:`~pipeplan.plan.TP_COMM_OVERLAPS`: torch's DTensor ``"off"``, its async
            TP ``"async"``); ``None``: the ``tp-comm-overlap`` knob or the step model's default
            (Megatron-LM's ``"backward"``).
    """

    name: str
    runs: Runs
    files: Files
    knobs: Knobs = Knobs()
    pricing: Callable[[Mapping[str, str]], Pricing | None] = _no_pricing
    compute_factors: Mapping[str, float] = field(default_factory=dict)
    compile_speedup: float = 1.0
    tp_overlap: Callable[[Mapping[str, str]], TpCommOverlap | None] = _megatron_tp

    def compute_factor(self, device: str, knobs: Mapping[str, str] | None = None) -> float:
        """The factor on a layer's compute time for this engine's kernels on ``device`` (a preset name; 1 if unfitted).

        ``knobs``: the knobs given (name → value); ``compile`` ``on`` divides the eager
        factor by :attr:`compile_speedup`, down to 1 at least.
        """
        factor = float(self.compute_factors.get(device, 1.0))
        if (knobs or {}).get("compile") in ("on", "model"):  # the model compiled (the loss too or not)
            return max(1.0, factor / self.compile_speedup)
        return factor

    def export(self, plan: Plan | Sequence[int], target: str | None = None,
               names: Sequence[LayerName] | None = None, *, schedule: Schedule | None = None,
               gpus_per_node: int = 8, knobs: Mapping[str, str] | None = None) -> list[ExportFile]:
        """Every file the engine needs to run ``plan``.

        Args:
            plan: the plan (a list of layers per stage: one stage per rank).
            target: one of :attr:`Files.targets` (default the engine's name).
            names: the model's layer names (module paths, roles), one per layer.
            schedule: the order the CSV files carry (default the plan's own: its
                timeline's, or its fixed schedule rebuilt).
            gpus_per_node: GPUs per node (torchtitan's HSDP shard degree).
            knobs: the knobs given (name → value): those its files carry
                (:attr:`Files.knobs`) are written, the others are priced only.

        Raises:
            InvalidInputError: a target the engine does not write, or a plan it cannot run.
        """
        target = self.name if target is None else target
        if target not in self.files.targets:
            raise InvalidInputError(f"{self.name} writes {', '.join(self.files.targets)}, not {target!r}")
        carried = {name: value for name, value in (knobs or {}).items() if name in self.files.knobs}
        if carried and self.files.write_knobs is not None:
            return self.files.write_knobs(to_plan(plan), target, names, schedule=schedule,
                                          gpus_per_node=gpus_per_node, knobs=carried)
        return self.files.write(to_plan(plan), target, names, schedule=schedule, gpus_per_node=gpus_per_node)

    def notes(self, plan: Plan | Sequence[int], names: Sequence[LayerName] | None = None) -> list[str]:
        """What the engine's files approximate of ``plan`` (empty when they are exact).

        With ``names`` (the model's layer names) whose paths pipeplan invented, and files
        that name modules, one more note says so (:func:`~pipeplan.engines._names.invented_note`).
        """
        notes = self.files.notes(to_plan(plan))
        invented = invented_note(names) if self.files.paths else ""
        return notes + [invented] if invented else notes

    def read(self, path: Path | str) -> RunConfig:
        """The user's configuration in ``path`` (a file of the engine's, or the directory an export wrote).

        Raises:
            InvalidInputError: a missing file, a key the engine does not have, a value it
                refuses, or a file of another engine (one line naming it).
        """
        path = Path(path)
        if not path.exists():
            raise InvalidInputError(f"{path}: no such file or directory")
        return self.files.read(path)

    def model_refusal(self, spec: ModelSpec) -> str:
        """Why the engine runs no plan of ``spec`` whatever the plan (one line), or ``""``; ask it before searching."""
        return self.runs.model(spec)

    def refusal(self, plan: Plan | Sequence[int], names: Sequence[LayerName] | None = None) -> str:
        """Why the engine cannot run ``plan`` (its export's one-line error), or ``""`` when it can."""
        try:
            self.export(plan, names=names)
        except InvalidInputError as error:
            return str(error)
        return ""
