"""What the planner plans: per-layer costs for each micro-batch size and recompute mode.

A :class:`Workload` is the narrow interface between a model description and the
search. It answers one question, "what does each layer cost with micro-batch
size ``b`` under recompute mode ``r``?", as a :class:`~pipeplan.layers.LayerProfile`,
plus what the search needs for throughput and memory::

    from pipeplan.layers import LayerProfile
    from pipeplan.planner import Workload
    work = Workload.from_profile(LayerProfile.uniform(32, forward=1.0, params=1e8, activation_bytes=1e8))
    work.profile(1, "none").num_layers      # 32

Recompute, in profile terms (what a source must give for modes other than ``"none"``):

* ``activation_bytes`` is what the layer keeps per microbatch under that mode;
* ``backward`` includes the recomputed forward work (``weight`` does not change).

The profile's ``trainable_params`` (frozen layers hold only weights) and
``send_bytes`` (what crosses a cut after a layer) feed the memory model and the
messages. A measured profile is one micro-batch size and no recompute unless the
caller passes profiles for more; :meth:`Workload.from_spec` answers every
micro-batch size and all three modes from a :class:`~pipeplan.models.spec.ModelSpec`::

    from pipeplan import hardware, presets
    work = Workload.from_spec(presets.get("pi0"), hardware.device("h100-80g"))
    work.tensor_parallel_degrees            # (1, 2, 4, 8, 16): the tp that divide every head count
    work.with_tensor_parallel(2).profile(4, "none").forward[1]   # per GPU, the TP collectives included

**Tensor parallelism** (Megatron-LM's, with sequence parallelism): a spec's
workload answers for each ``tp`` in :attr:`Workload.tensor_parallel_degrees`;
:meth:`Workload.with_tensor_parallel` is the workload one GPU of a ``tp`` group
sees: the spec's FLOPs and parameters divided by ``tp`` (the smaller GEMMs
timed at their own efficiency by the device) plus each layer's collectives
(:func:`~pipeplan.models.layer_costs.tensor_parallel_traffic`: ring passes
on the link inside a node, :func:`~pipeplan.planner.cluster.ring_pass_ms`) added
to its forward, exposed (Megatron's default: no ``--tp-comm-overlap``), and to
the input-gradient part of its backward less what the layer's weight-gradient
GEMMs hide (Megatron runs the backward's collectives beside them). A measured
profile has ``tp = 1`` only.

**Engine knobs** (Megatron-LM's; docs/engines.md): ``from_spec(...,
sequence_parallel=False)`` prices tensor parallelism without sequence
parallelism (all-reduces of the same ring volume instead of all-gather +
reduce-scatter, and the norms, dropouts and residuals of each block held and
run whole on every GPU of the group: more memory, more time);
``tp_comm_overlap`` says what the collectives hide behind (``"off"``: nothing;
``"backward"``, the default above; ``"on"``, ``--tp-comm-overlap``: the
forward's behind the layer's forward and the backward's behind its whole
backward). :meth:`Workload.with_recompute` pins one recompute mode: the
planner then considers that mode only, on every stage::

    work = Workload.from_spec(presets.get("pi0"), hardware.device("h100-80g"), sequence_parallel=False)
    work.with_recompute("full").recompute_modes          # ('full',)
    work.with_recompute({"vision": "full", "llm": "selective"}).recompute_by_module["vision"]   # 'full'

Pinned per module, each layer is costed under its own module's mode and the
planner labels every stage with the heaviest (:meth:`Workload.with_recompute`).
Megatron-LM's ``block:N`` and ``uniform:N`` depend on where each stage starts:
:meth:`Workload.stage_costs` prices a partition's stages under them (the planner's
layouts read it; :meth:`Workload.stage_profile` is its per-layer profile),
:meth:`Workload.profile` is a lower bound over partitions::

    work.with_recompute("block:2").stage_costs(1, "block:2", (8, 8))   # the first 2 blocks of each stage

**An engine's kernels** (:meth:`Workload.with_compute_factor`): the device's
kernel model times Megatron-style fused kernels; an engine whose kernels run
slower on a device (torchtitan's eager kernels, ``compile = false``) multiplies
every layer's compute time (forward, backward, weight-gradient, the stage
extras) by the engine's fitted factor for that device
(:attr:`pipeplan.engines.Engine.compute_factors`). Tensor-parallel collectives,
messages, memory and FLOPs are unchanged::

    work.with_compute_factor(1.33).compute_factor        # 1.33
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from .._validation import positive_float, positive_int
from ..errors import InvalidInputError
from ..costs import StageCosts
from ..hardware import Link, intra_node_link
from ..engines._eager import ASYNC_TP_HIDDEN
from ..layers import LayerProfile
from ..models.layer_costs import flops_per_sample, layer_costs, layer_profile, tensor_parallel_traffic
from ..plan import (RECOMPUTE_MODES, TP_COMM_OVERLAPS, Recompute, TpCommOverlap, check_recompute, recompute_rank,
                    stage_recompute)
from .cluster import ring_pass_ms
from .profile_wrappers import backward_floor, gathered_source

__all__ = ["Workload"]


def _is_mode(mode: object) -> bool:
    """``mode`` is a recompute mode (:func:`pipeplan.plan.check_recompute`)."""
    try:
        check_recompute(mode)
    except InvalidInputError:
        return False
    return True

ProfileSource = Callable[[int, Recompute], LayerProfile]
#: ``(micro_batch_size, recompute, tp[, stage_sizes])``: one mode for every module, or a mode per module
#: (:meth:`Workload.with_recompute`); ``stage_sizes`` (layers per stage) for ``block:N`` and ``uniform:N``
#: (:meth:`Workload.stage_costs`)
TensorSource = Callable[..., LayerProfile]
#: tensor-parallel degrees a spec's workload is checked for (a node has at most 16 GPUs here)
_TP_CANDIDATES = tuple(range(1, 17))


def _scaled(profile: LayerProfile, factor: float) -> LayerProfile:
    """``profile`` with its compute times (forward, backward, weight, measured input-gradient, extras) × ``factor``."""
    if factor == 1.0:
        return profile
    split = None if profile.backward_input is None else [t * factor for t in profile.backward_input]
    return profile.replaced(forward=[t * factor for t in profile.forward],
                            backward=[t * factor for t in profile.backward],
                            weight=[t * factor for t in profile.weight], backward_input=split,
                            first_extra=profile.first_extra * factor, last_extra=profile.last_extra * factor)


@dataclass(frozen=True)
class Workload:
    """A model as the planner sees it.

    Args:
        source: ``source(micro_batch_size, recompute)`` → the per-layer profile
            (times in ``time_unit`` seconds, bytes per microbatch).
        micro_batch_sizes: the micro-batch sizes ``source`` answers for
            (``None``: any size).
        recompute_modes: the modes ``source`` answers for and the planner searches, in
            :data:`~pipeplan.plan.RECOMPUTE_MODES` order (``"none"`` among them unless one
            mode is pinned: :meth:`with_recompute`); the first is the lightest in time.
        flops_per_sample: model FLOPs of one sample's forward and backward
            (no recompute), for MFU; ``None`` if unknown.
        tokens_per_sample: tokens per sample, for tokens/s; ``None`` if unknown.
        time_unit: seconds per profile time unit (``1e-3``: milliseconds).
        name: for reports.
        tensor_parallel: the tensor-parallel degree ``source`` answers for.
        tensor_parallel_degrees: the degrees :meth:`with_tensor_parallel` accepts.
        tensor_source: ``tensor_source(micro_batch_size, recompute, tp)``, when the
            workload answers for other degrees (a spec's).
        spec: the :class:`~pipeplan.models.spec.ModelSpec` it comes from, if any
            (its module names and reference training defaults).
        sequence_parallel: at ``tp > 1``, whether the tensor-parallel group also splits
            the sequence (Megatron-LM's ``--sequence-parallel``; module doc).
        tp_comm_overlap: what the tensor-parallel collectives hide behind
            (:data:`~pipeplan.plan.TP_COMM_OVERLAPS`; module doc).
        recompute_by_module: a recompute mode per module pinned by
            :meth:`with_recompute` (every module of :attr:`spec`); ``None``: one mode
            for every module, the one each profile is asked for.
        compute_factor: every layer's compute time as the device's kernel model
            gives it, times this (an engine's kernels on the device; module doc).
        reshard_after_forward: FSDP/HSDP without a pipeline frees each layer's gathered
            parameters after its forward and gathers them again for its backward (FSDP2's
            ``reshard_after_forward=True``, torchtitan's default); ``False``: they stay
            gathered until the layer's backward (one gather a microbatch, every layer's
            bf16 parameters held at the peak) (:meth:`with_reshard_after_forward`).
        saves_gathered_inputs: at ``tp > 1`` with sequence parallelism, a block that runs ``none``
            stores its column-parallel GEMMs' gathered whole-sequence inputs, not their ``1/t``
            shards (torch's DTensor, the torch engines; :meth:`with_saved_gathered_inputs`).
    """

    source: ProfileSource
    micro_batch_sizes: tuple[int, ...] | None = None
    recompute_modes: tuple[Recompute, ...] = ("none",)
    flops_per_sample: float | None = None
    tokens_per_sample: float | None = None
    time_unit: float = 1e-3
    name: str = "model"
    tensor_parallel: int = 1
    tensor_parallel_degrees: tuple[int, ...] = (1,)
    tensor_source: TensorSource | None = field(default=None, repr=False, compare=False)
    spec: Any = field(default=None, repr=False, compare=False)
    sequence_parallel: bool = True
    tp_comm_overlap: TpCommOverlap = "backward"
    recompute_by_module: Mapping[str, Recompute] | None = field(default=None, compare=False)
    compute_factor: float = 1.0
    reshard_after_forward: bool = True
    saves_gathered_inputs: bool = False
    _rebuild: Callable[[bool, TpCommOverlap, float], Workload] | None = field(default=None, repr=False,
                                                                               compare=False)
    _cache: dict[tuple[int, str], LayerProfile] = field(default_factory=dict, repr=False, compare=False)
    #: results derived from the profiles alone (partitions ignoring memory), shared by their users
    memo: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        unknown = [mode for mode in self.recompute_modes if not _is_mode(mode)]
        pinned = len(self.recompute_modes) == 1
        if unknown or not self.recompute_modes or ("none" not in self.recompute_modes and not pinned):
            raise InvalidInputError(
                f"recompute_modes must include 'none' (or be one pinned mode) and be among "
                f"{', '.join(RECOMPUTE_MODES)}, op, every:N, block:N, uniform:N, got {list(self.recompute_modes)}"
            )
        if self.tp_comm_overlap not in TP_COMM_OVERLAPS:
            raise InvalidInputError(f"tp_comm_overlap must be one of {', '.join(TP_COMM_OVERLAPS)}, "
                                    f"got {self.tp_comm_overlap!r}")

    @classmethod
    def from_profile(cls, profile: LayerProfile, *, micro_batch_size: int | None = None,
                     **options: object) -> Workload:
        """A measured (or hand-written) profile: one micro-batch size, no recompute.

        The planner reads the file as ``simulate --profile`` and ``partition`` do
        (:mod:`pipeplan.costs`' rule of what a profile may hold): a measured split
        (``backward_input``) is kept, so split schedules run ``I`` and ``W`` as
        measured, ``W > B`` included, and fused ones ``B``.

        Args:
            micro_batch_size: the size the profile was measured at; ``None``: the
                ``microbatch_size`` its measurement notes give (``pipeplan profile``
                writes it), else 1.
        """
        noted = profile.measurement.get("microbatch_size", 1)
        size = positive_int("micro_batch_size", noted if micro_batch_size is None else micro_batch_size)
        return cls.from_profiles({(size, "none"): profile}, **options)

    @classmethod
    def from_spec(cls, spec: Any, device: Any, *, tensor_parallel: int = 1, tp_link: Link | None = None,
                  sequence_parallel: bool = True, tp_comm_overlap: TpCommOverlap = "backward",
                  compute_factor: float = 1.0, async_tp_hidden: float | None = None) -> Workload:
        """Every micro-batch size and recompute mode of a :class:`~pipeplan.models.spec.ModelSpec` on ``device``.

        Times are ``layer_profile`` milliseconds (each layer's kernels
        timed by the device, docs/cost_model.md) plus, at ``tp > 1``, the layer's
        tensor-parallel collectives on ``tp_link`` (default the device's link
        inside a node; module doc); MFU counts the spec's training FLOPs without
        recompute; tokens per sample are those of its longest module.

        Args:
            sequence_parallel: at ``tp > 1``, split the norms and dropouts over the
                sequence too (default, Megatron-LM's ``--sequence-parallel``); ``False``:
                they run and are held whole on every GPU of the group.
            tp_comm_overlap: ``"backward"`` (default: the backward's collectives beside
                the weight-gradient GEMMs, the forward's exposed), ``"on"``
                (``--tp-comm-overlap``: the forward's hidden behind the layer's forward
                too, the backward's behind its whole backward) or ``"off"`` (all exposed).
            compute_factor: each layer's kernel times (not its TP collectives) times this
                (:meth:`with_compute_factor`).
            async_tp_hidden: under ``tp_comm_overlap="async"``, the share of each collective
                hidden (default :data:`~pipeplan.engines._eager.ASYNC_TP_HIDDEN`; a benchmark fits it).

        Raises:
            InvalidInputError: ``tensor_parallel`` does not divide a module's heads or FFN width,
                or an unknown ``tp_comm_overlap``.
        """
        link = tp_link if tp_link is not None else intra_node_link(getattr(device, "name", ""))
        positive_float("compute_factor", compute_factor)
        hidden = ASYNC_TP_HIDDEN if async_tp_hidden is None else async_tp_hidden
        if tp_comm_overlap not in TP_COMM_OVERLAPS:
            raise InvalidInputError(f"tp_comm_overlap must be one of {', '.join(TP_COMM_OVERLAPS)}, "
                                    f"got {tp_comm_overlap!r}")

        def tensor_source(size: int, mode: Recompute | Mapping[str, Recompute], tp: int,
                          stages: tuple[int, ...] | None = None) -> LayerProfile:
            profile = _scaled(layer_profile(spec, device, size, recompute=mode, tensor_parallel=tp,
                                            sequence_parallel=sequence_parallel and tp > 1, stage_sizes=stages),
                              compute_factor)
            if stages is None and isinstance(mode, str) and (stage_recompute(mode) or ("",))[0] == "block":
                # no stages: a lower bound over them (module doc, Megatron's methods): the model as one
                # stage recomputes the fewest blocks, and no block keeps less than under full recompute
                full = layer_profile(spec, device, size, recompute="full", tensor_parallel=tp,
                                     sequence_parallel=sequence_parallel and tp > 1)
                profile = profile.replaced(activation_bytes=full.activation_bytes,
                                           weight_stash_bytes=full.weight_stash_bytes)
            if tp == 1:
                return profile
            latency = ring_pass_ms(link, 0.0, tp)  # ms per pass, and per byte of its buffer
            per_byte = (ring_pass_ms(link, 1e9, tp) - latency) / 1e9
            # with or without sequence parallelism the ring volume is the same (an all-reduce is an
            # all-gather plus a reduce-scatter: Korthikanti et al. 2022, §4.2.2)
            traffic = tensor_parallel_traffic(spec, size, recompute=mode, stage_sizes=stages)
            forward_comm = [n * latency + b * per_byte for n, _, b, _ in traffic]
            backward_comm = [n * latency + b * per_byte for _, n, _, b in traffic]
            if tp_comm_overlap == "async":
                # torch's async TP (torchtitan's enable_async_tensor_parallel): compile's micro-pipelining
                # splits each all-gather / reduce-scatter beside its matmul, which hides a fitted share of
                # it (ASYNC_TP_HIDDEN, pipeplan.engines._eager), never more than the layer's own pass
                forward = [f + (c - min(hidden * c, f)) for f, c in zip(profile.forward, forward_comm)]
                backward = [g + (c - min(hidden * c, g)) for g, c in zip(profile.backward, backward_comm)]
            elif tp_comm_overlap == "on":
                # --tp-comm-overlap (Transformer Engine's userbuffers) pipelines the forward's
                # all-gathers and reduce-scatters with the GEMMs beside them, and the backward's with
                # the input- and weight-gradient GEMMs: only what the layer's own passes cannot cover shows
                forward = [f + max(0.0, c - f) for f, c in zip(profile.forward, forward_comm)]
                backward = [g + max(0.0, c - g) for g, c in zip(profile.backward, backward_comm)]
            else:  # summed as f + latency + bytes, in that order (the defaults' numbers, bit for bit)
                forward = [f + n * latency + b * per_byte for f, (n, _, b, _) in zip(profile.forward, traffic)]
                if tp_comm_overlap == "backward":
                    # Megatron overlaps the backward's collectives with the weight-gradient GEMMs
                    # (tensor_parallel/layers.py: the input-gradient all-reduce, or with sequence
                    # parallelism the all-gather and reduce-scatter, run asynchronously beside the wgrad
                    # GEMM): only what the layer's W cannot cover shows
                    backward = [g + max(0.0, c - w) for g, w, c in zip(profile.backward, profile.weight, backward_comm)]
                else:  # "off": every collective waited for
                    backward = [g + n * latency + b * per_byte for g, (_, n, _, b) in zip(profile.backward, traffic)]
            return profile.replaced(forward=forward, backward=backward)

        degrees = []
        for tp in _TP_CANDIDATES:
            try:
                layer_costs(spec, 1, recompute="none", tensor_parallel=tp)
            except InvalidInputError:
                continue
            degrees.append(tp)
        positive_int("tensor_parallel", tensor_parallel)
        if tensor_parallel not in degrees:
            layer_costs(spec, 1, recompute="none", tensor_parallel=tensor_parallel)  # raises, naming the module
        tokens = spec.module_tokens()
        return cls(
            lambda size, mode: tensor_source(size, mode, tensor_parallel),
            recompute_modes=RECOMPUTE_MODES,
            flops_per_sample=float(sum(flops_per_sample(spec, recompute="none").values())),
            tokens_per_sample=float(max(tokens.values())) if tokens else None,
            name=getattr(spec, "name", "model"),
            tensor_parallel=tensor_parallel,
            tensor_parallel_degrees=tuple(degrees),
            tensor_source=tensor_source,
            spec=spec,
            sequence_parallel=sequence_parallel,
            tp_comm_overlap=tp_comm_overlap,
            compute_factor=compute_factor,
            _rebuild=lambda sp, overlap, factor: cls.from_spec(spec, device, tensor_parallel=tensor_parallel,
                                                               tp_link=link, sequence_parallel=sp,
                                                               tp_comm_overlap=overlap, compute_factor=factor,
                                                               async_tp_hidden=async_tp_hidden),
        )

    @classmethod
    def from_profiles(cls, profiles: Mapping[tuple[int, Recompute], LayerProfile], **options: object) -> Workload:
        """Profiles given per ``(micro_batch_size, recompute)``; each size needs ``"none"``."""
        if not profiles:
            raise InvalidInputError("profiles must hold at least one (micro_batch_size, recompute) entry")
        table = dict(profiles)
        sizes = tuple(sorted({size for size, _ in table}))
        modes = tuple(mode for mode in RECOMPUTE_MODES if all((size, mode) in table for size in sizes))
        lengths = {profile.num_layers for profile in table.values()}
        if len(lengths) != 1:
            raise InvalidInputError(f"every profile must have the same layers, got layer counts {sorted(lengths)}")

        def source(size: int, mode: Recompute) -> LayerProfile:
            return table[(size, mode)]

        return cls(source, micro_batch_sizes=sizes, recompute_modes=modes, **options)  # type: ignore[arg-type]

    # ---------------------------------------------------------------- queries
    def profile(self, micro_batch_size: int, recompute: Recompute | None = None) -> LayerProfile:
        """The per-layer profile for one micro-batch size and recompute mode (cached).

        ``recompute=None``: the lightest mode the workload answers for (``"none"``, or
        the pinned one; what the layers' parameters and names are read from).
        """
        if recompute is None:
            recompute = self.lightest_recompute
        key = (micro_batch_size, recompute)
        cached = self._cache.get(key)
        if cached is None:
            if self.micro_batch_sizes is not None and micro_batch_size not in self.micro_batch_sizes:
                raise InvalidInputError(
                    f"micro_batch_size must be one of {list(self.micro_batch_sizes)} for this profile, "
                    f"got {micro_batch_size}"
                )
            if recompute not in self.recompute_modes:
                raise InvalidInputError(
                    f"recompute must be one of {', '.join(self.recompute_modes)} for this workload, got {recompute!r}"
                )
            cached = self.source(micro_batch_size, recompute)
            self._cache[key] = cached
        return cached

    def stage_profile(self, micro_batch_size: int, recompute: Recompute | None = None,
                      sizes: Sequence[int] | None = None) -> LayerProfile:
        """The per-layer profile of the layers of ``sizes`` per stage (``None``: the model as one stage).

        :meth:`profile` itself, except for Megatron-LM's ``block:N`` and ``uniform:N``
        (:func:`pipeplan.plan.stage_recompute`): which blocks recompute depends on where
        each stage starts, so a spec's workload prices each layer in its stage
        (:func:`~pipeplan.models.layer_costs.layer_costs` with ``stage_sizes``). For those
        modes :meth:`profile` (what the partitioner and the bounds read) is a lower bound
        over partitions in time and in bytes: the model as one stage, and under ``block:N``
        no block keeping more than under ``full``. Cached in :attr:`memo`.
        """
        if recompute is None:
            recompute = self.lightest_recompute
        profile = self.profile(micro_batch_size, recompute)  # checks the mode and the size
        if stage_recompute(recompute) is None or self.tensor_source is None:
            return profile
        stages = (profile.num_layers,) if sizes is None else tuple(int(size) for size in sizes)
        shared = self.memo.setdefault("stage_profiles", {})
        key = (micro_batch_size, recompute, stages)
        staged = shared.get(key)
        if staged is None:
            staged = shared[key] = self.tensor_source(micro_batch_size, recompute, self.tensor_parallel, stages)
        return staged

    def stage_costs(self, micro_batch_size: int, recompute: Recompute | None, sizes: Sequence[int]) -> StageCosts:
        """Per-stage costs of layers per stage ``sizes`` under ``recompute`` (``None``: :attr:`lightest_recompute`):
        :meth:`stage_profile`'s :meth:`~pipeplan.layers.LayerProfile.stage_costs`."""
        return self.stage_profile(micro_batch_size, recompute, sizes).stage_costs(sizes)

    def with_tensor_parallel(self, tp: int) -> Workload:
        """The workload one GPU of a ``tp``-way tensor-parallel group sees (module doc).

        Raises:
            InvalidInputError: ``tp`` is not one of :attr:`tensor_parallel_degrees`
                (a measured profile: only 1; a spec: ``tp`` must divide every
                module's heads and FFN width, the message names the module).
        """
        positive_int("tp", tp)
        if tp == self.tensor_parallel:
            return self
        if self.tensor_source is None:
            raise InvalidInputError(
                f"tp={tp} needs a model spec (--preset or --spec): a measured profile was timed at "
                f"tp={self.tensor_parallel} only")
        if tp not in self.tensor_parallel_degrees:
            layer_costs(self.spec, 1, recompute="none", tensor_parallel=tp)  # raises, naming the module
            raise InvalidInputError(f"tp must be one of {list(self.tensor_parallel_degrees)}, got {tp}")
        source = self.tensor_source
        return replace(self, source=lambda size, mode: source(size, mode, tp), tensor_parallel=tp, _cache={}, memo={})

    @property
    def lightest_recompute(self) -> Recompute:
        """The recompute mode the planner starts from: ``"none"``, or the one pinned (:meth:`with_recompute`)."""
        return self.recompute_modes[0]

    def with_recompute(self, mode: Recompute | Mapping[str, Recompute]) -> Workload:
        """The workload with recompute pinned: the planner runs it on every stage, nothing lighter.

        ``mode``: one mode for every module, or a mode per module of the spec
        (``{"vision": "full", "llm": "selective"}``; a module left out: ``"none"``).
        Per module, each layer is costed under its own module's mode
        (:func:`~pipeplan.models.layer_costs.layer_profile` takes the mapping);
        the planner labels every stage with the heaviest of them
        (:attr:`recompute_modes` is that one mode) and :attr:`recompute_by_module`
        holds each module's.

        A spec's workload answers for every mode, torchtitan's ``"op"`` and ``"every:N"`` too
        (:func:`pipeplan.plan.check_recompute`).

        Raises:
            InvalidInputError: ``mode`` is not one the workload answers for (a measured profile:
                ``"none"`` only), or per module: a workload without a spec, an unknown
                module or mode (one line naming it).
        """
        if not isinstance(mode, str):
            return self._with_recompute_by_module(mode)
        if self.recompute_by_module is not None:
            raise InvalidInputError("recompute is pinned per module already; pin one mode on the workload it came from")
        return self.with_recompute_modes((mode,))

    def with_recompute_modes(self, modes: tuple[Recompute, ...]) -> Workload:
        """The workload searching ``modes`` (cheapest in time first; ``"none"`` among them unless one is pinned).

        What an engine lets the planner choose from: torchtitan's ``("none", "op", "full")``.

        Raises:
            InvalidInputError: a mode the workload does not answer for (a spec's answers for every
                mode; a measured profile only for those it was given).
        """
        for mode in modes:
            self._check_answers(mode)
        if self.recompute_modes == modes:
            return self
        return replace(self, recompute_modes=modes, _cache={}, memo={})

    def _check_answers(self, mode: Recompute) -> None:
        if self.spec is not None and self.tensor_source is not None and mode not in RECOMPUTE_MODES and _is_mode(mode):
            return  # torchtitan's modes: a spec answers for them whatever it searches
        if mode not in self.recompute_modes:
            raise InvalidInputError(
                f"recompute {mode!r} needs a workload that answers for it: this one has "
                f"{', '.join(self.recompute_modes)} (a measured profile was timed without recompute; "
                "give --preset or --spec)")

    def _with_recompute_by_module(self, given: Mapping[str, Recompute]) -> Workload:
        """:meth:`with_recompute` with a mode per module."""
        if self.spec is None or self.tensor_source is None:
            raise InvalidInputError("recompute per module needs a model spec (--preset or --spec): a measured "
                                    "profile has no modules")
        if self.recompute_by_module is not None:
            raise InvalidInputError("recompute is pinned per module already; pin it on the workload it came from")
        modes: dict[str, Recompute] = self.spec.recompute_modes(given)  # raises on an unknown module or mode
        for wanted in modes.values():
            self._check_answers(wanted)
        label = max(modes.values(), key=recompute_rank)
        base = self.tensor_source
        tp = self.tensor_parallel

        def pinned(size: int, mode: Recompute | Mapping[str, Recompute], degree: int) -> LayerProfile:
            # "none" is every module's none (what the memory model reruns a layer from); any other: the pins
            return base(size, "none" if mode == "none" else modes, degree)

        return replace(self, source=lambda size, mode: pinned(size, mode, tp), tensor_source=pinned,
                       recompute_modes=(label,), recompute_by_module=modes, _cache={}, memo={})

    def with_tensor_knobs(self, *, sequence_parallel: bool | None = None,
                          tp_comm_overlap: TpCommOverlap | None = None) -> Workload:
        """The same spec's workload with sequence parallelism and TP overlap set (``None``: as they are).

        The tensor-parallel degree and the recompute modes are kept.

        Raises:
            InvalidInputError: a workload not built by :meth:`from_spec` (a measured profile,
                ``tp = 1`` only: nothing to set) asked to change them.
        """
        sp = self.sequence_parallel if sequence_parallel is None else sequence_parallel
        overlap = self.tp_comm_overlap if tp_comm_overlap is None else tp_comm_overlap
        if (sp, overlap) == (self.sequence_parallel, self.tp_comm_overlap):
            return self
        if self._rebuild is None:
            raise InvalidInputError("sequence parallelism and TP communication overlap apply to tensor parallelism, "
                                    "which needs a model spec (--preset or --spec), not a measured profile")
        rebuilt = self._rebuild(sp, overlap, self.compute_factor).with_tensor_parallel(self.tensor_parallel)
        rebuilt = replace(rebuilt, reshard_after_forward=self.reshard_after_forward)
        if self.saves_gathered_inputs:
            rebuilt = rebuilt.with_saved_gathered_inputs()
        if self.recompute_by_module is not None:
            return rebuilt.with_recompute(self.recompute_by_module)
        return replace(rebuilt, recompute_modes=self.recompute_modes, _cache={}, memo={})

    def with_compute_factor(self, factor: float) -> Workload:
        """The same spec's workload with every layer's compute time (not its TP collectives) times ``factor``.

        An engine's kernels on a device (module doc): the factor replaces the one
        the workload had (it does not compound). Tensor parallelism, its knobs and
        the recompute modes are kept.

        Raises:
            InvalidInputError: ``factor`` is not positive, or a workload not built by
                :meth:`from_spec` (a measured profile's times are the engine's own).
        """
        positive_float("compute_factor", factor)
        if factor == self.compute_factor:
            return self
        if self._rebuild is None:
            raise InvalidInputError("an engine's kernel factor applies to a model spec (--preset or --spec); a "
                                    "measured profile's times are already its engine's")
        rebuilt = self._rebuild(self.sequence_parallel, self.tp_comm_overlap, factor)
        rebuilt = replace(rebuilt.with_tensor_parallel(self.tensor_parallel),
                          reshard_after_forward=self.reshard_after_forward)
        if self.saves_gathered_inputs:
            rebuilt = rebuilt.with_saved_gathered_inputs()
        if self.recompute_by_module is not None:
            return rebuilt.with_recompute(self.recompute_by_module)
        return replace(rebuilt, recompute_modes=self.recompute_modes, _cache={}, memo={})

    def with_reshard_after_forward(self, reshard: bool) -> Workload:
        """The workload with FSDP/HSDP's parameters freed after each layer's forward (``True``, the default) or
        kept gathered until its backward (``False``: torchtitan's ``fsdp_reshard_after_forward = "never"``).

        Only FSDP/HSDP without a pipeline reads it (:class:`~pipeplan.planner.evaluate.Evaluator`,
        :class:`~pipeplan.planner.memory.MemoryModel`): behind a pipeline the stage's
        parameters stay gathered across the step already. The profiles are kept.
        """
        if reshard == self.reshard_after_forward:
            return self
        return replace(self, reshard_after_forward=bool(reshard))

    def with_saved_gathered_inputs(self) -> Workload:
        """The workload with each stored block keeping its column-parallel GEMMs' gathered inputs at ``tp > 1`` under
        sequence parallelism, for every microbatch in flight (torch's DTensor: :mod:`.profile_wrappers`). A workload
        without a spec: unchanged. The tensor knobs and the kernel factor keep it."""
        if self.saves_gathered_inputs or self.spec is None or self.tensor_source is None:
            return self
        saved, tp = gathered_source(self.spec, self.tensor_source, self.sequence_parallel), self.tensor_parallel
        return replace(self, source=lambda size, mode: saved(size, mode, tp), tensor_source=saved,
                       saves_gathered_inputs=True, _cache={}, memo={})

    def with_backward_floor(self, floor_ms: Sequence[float]) -> Workload:
        """The workload with each layer's backward lasting at least ``floor_ms[l]`` milliseconds per microbatch: the
        host's work beside the GPU (DeepSpeed's hooks, :mod:`.engine_costs`; :func:`.profile_wrappers.backward_floor`).
        Recompute modes, tp and knobs are kept (set the knobs first); all zeros: the same workload.

        Raises:
            InvalidInputError: a profile whose layer count is not ``len(floor_ms)``.
        """
        scale = 1e-3 / self.time_unit
        floor = [float(f) * scale for f in floor_ms]
        if not any(floor):
            return self
        floored = backward_floor(floor)
        source, tensor = self.source, self.tensor_source
        return replace(self, source=lambda size, mode: floored(source(size, mode)),
                       tensor_source=None if tensor is None else (
                           lambda size, mode, tp, *stages: floored(tensor(size, mode, tp, *stages))),
                       _rebuild=None, _cache={}, memo={})

    @property
    def num_layers(self) -> int:
        """Layers of the model."""
        return self.profile(self.smallest_micro_batch).num_layers

    @property
    def smallest_micro_batch(self) -> int:
        """The smallest micro-batch size the source answers for."""
        return min(self.micro_batch_sizes) if self.micro_batch_sizes else 1
