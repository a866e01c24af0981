"""Per-stage costs and the communication model the simulator charges.

Times are floats in one unit of your choice (the CLI says milliseconds); they are
the cost of one microbatch on one stage. Bytes are bytes::

    >>> from pipeplan.costs import StageCosts, CommModel
    >>> StageCosts(forward=[30, 10, 10, 20]).backward          # backward defaults to 2x forward
    (60.0, 20.0, 20.0, 40.0)
    >>> CommModel(latency=0.5, send_mode="rendezvous")
    CommModel(latency=0.5, bandwidth=inf, boundary_bytes=0.0, send_mode='rendezvous')

Backward convention: ``backward[s]`` is always the *full* backward time of stage
``s`` (a ``B`` action). ``weight[s]`` is the part of it spent on weight gradients.
A split backward runs ``I`` = ``backward - weight`` (input gradient) and
``W`` = ``weight``. When the split halves were measured as a real split
backward runs them (their sum is then more than the full backward: the split
pays a second autograd traversal), pass ``backward_input``: ``I`` then costs
``backward_input`` and ``W`` ``weight``, independently of ``backward``.

**What a profile may hold** (one rule, :func:`forward_backward_weight`; every
reader of a profile, the simulator, the partitioner and the planner, applies
it through :class:`StageCosts` and :class:`~pipeplan.layers.LayerProfile`):
times are finite, ``F > 0``, ``B, W, I >= 0``; without a measured ``I``,
``W <= B`` (``W`` is then a part of ``B``, and ``I = B - W``); with one, ``W`` and
``I`` are measurements of their own and may add up to more than ``B`` (``W > B``
included): split schedules run ``I`` and ``W`` as measured, fused ones ``B``.
Costs rebuilt from other costs keep the measured split (:meth:`StageCosts.replaced`,
:meth:`StageCosts.stagewise`).

**Costs per (stage, microbatch)**: microbatches that are not alike (a 4-camera
microbatch is slower on the vision stage only) take one time per stage *and*
microbatch, :meth:`StageCosts.per_microbatch`; each microbatch obeys the rule above,
the simulator runs each action at its own microbatch's time, and the per-stage
fields hold the mean over microbatches (what code that reads one time per stage
sees)::

    >>> costs = StageCosts.per_microbatch(forward=[[3, 1], [1, 1]])    # [stage][microbatch]
    >>> costs.forward, costs.duration("F", 0, 1), costs.duration("B", 0, 0)
    ((2.0, 1.0), 1.0, 6.0)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Literal, NamedTuple

import numpy as np

from ._validation import finite_floats, non_negative_float, positive_float, positive_int
from .errors import InvalidInputError
from .limits import check_memory

if TYPE_CHECKING:
    from .schedule import Kind

__all__ = ["StageCosts", "MicrobatchCosts", "CommModel", "SendMode", "forward_backward_weight"]

SendMode = Literal["eager", "rendezvous"]
#: the constructor arguments of :class:`StageCosts`, in order
_FIELDS = ("forward", "backward", "weight", "activation_bytes", "weight_stash_bytes", "microbatch_scale", "update",
           "backward_input")
#: the fields a per-microbatch matrix determines (``replaced`` refuses them on such costs)
_TIME_FIELDS = ("forward", "backward", "weight", "microbatch_scale", "backward_input")
Matrix = tuple[tuple[float, ...], ...]

_UNIFORM_BYTES_PER_STAGE = 80
"""Peak bytes per stage of :meth:`StageCosts.uniform` (tracemalloc, 100,000 stages: 80.0)."""


def forward_backward_weight(
    forward: Sequence[float],
    backward: Sequence[float] | None,
    weight: Sequence[float] | None,
    *,
    split_measured: bool = False,
) -> tuple[tuple[float, ...], tuple[float, ...], tuple[float, ...]]:
    """Validate per-stage (or per-layer) times and fill in the defaults: the rule of what costs may hold.

    ``backward`` defaults to twice ``forward``; ``weight`` to half of ``backward``
    and must satisfy ``0 <= weight <= backward`` (see the module doc's convention),
    unless ``split_measured`` (the input-gradient half is given on its own, so
    ``weight`` is a measured time of its own and need only be >= 0).

    Raises:
        InvalidInputError: naming the field and index (``weight[3] = ...``);
            :meth:`~pipeplan.layers.LayerProfile.from_file` restates it with the
            file and the layer's name.
    """
    fwd = finite_floats("forward", forward)
    count = len(fwd)
    if backward is None:
        bwd = tuple(2.0 * f for f in fwd)
        if not all(math.isfinite(b) for b in bwd):
            raise InvalidInputError("forward times are too large: the default backward (2 × forward) overflows")
    else:
        bwd = finite_floats("backward", backward, length=count, allow_zero=True)
    if weight is None:
        return fwd, bwd, tuple(b / 2.0 for b in bwd)
    wgt = finite_floats("weight", weight, length=count, allow_zero=True)
    if split_measured:
        return fwd, bwd, wgt
    for index, (w, b) in enumerate(zip(wgt, bwd)):
        if w > b:
            raise InvalidInputError(
                f"weight[{index}] = {w} must be <= backward[{index}] = {b} "
                "(weight is the weight-gradient part of the full backward; only a profile that also "
                "gives the split's input-gradient time, backward_input, may hold weight > backward)"
            )
    return fwd, bwd, wgt


class MicrobatchCosts(NamedTuple):
    """Times per (stage, microbatch): ``forward[s][mb]`` and likewise; see :meth:`StageCosts.per_microbatch`.

    ``backward_input`` is ``None`` unless the split's input-gradient time was measured
    (then ``I`` is ``backward - weight``, as for per-stage costs).
    """

    forward: Matrix
    backward: Matrix
    weight: Matrix
    backward_input: Matrix | None

    @property
    def num_microbatches(self) -> int:
        """Microbatches the matrices describe (their row length)."""
        return len(self.forward[0])

    def split_input(self) -> Matrix:
        """``I`` per (stage, microbatch): ``backward_input``, else ``backward - weight``."""
        if self.backward_input is not None:
            return self.backward_input
        return tuple(tuple(b - w for b, w in zip(brow, wrow)) for brow, wrow in zip(self.backward, self.weight))


def _row_mean(row: Sequence[float]) -> float:
    """The mean of ``row``; exactly its value when every entry is the same (no rounding)."""
    first = row[0]
    if all(value == first for value in row):
        return first
    return math.fsum(row) / len(row)


def _matrix(name: str, rows: Sequence[Sequence[float]], num_stages: int | None = None) -> list[list[float]]:
    """``rows`` as a ``[stage][microbatch]`` list of lists of one row length (values unchecked)."""
    try:
        table = [[float(value) for value in row] for row in rows]
    except (TypeError, ValueError):
        raise InvalidInputError(f"{name} must be a [stage][microbatch] table of numbers") from None
    if not table or not table[0] or any(len(row) != len(table[0]) for row in table):
        raise InvalidInputError(f"{name} must be a non-empty [stage][microbatch] table with rows of one length")
    if num_stages is not None and len(table) != num_stages:
        raise InvalidInputError(f"{name} has {len(table)} stages, forward has {num_stages}")
    return table


@dataclass(frozen=True, init=False)
class StageCosts:
    """Costs of one microbatch on each stage.

    Args:
        forward: forward time per stage, each > 0.
        backward: full backward time per stage (input + weight gradient), each >= 0.
            Defaults to twice the forward, the usual rule for transformer layers.
        weight: weight-gradient part of ``backward`` per stage, ``0 <= weight <= backward``.
            Defaults to half the backward (the zero-bubble paper's F = B = W assumption).
            Only split-backward schedules (``I``, ``W``) look at it.
        activation_bytes: bytes of activations one microbatch leaves on the stage
            from the end of its ``F`` to the end of its ``B`` (or ``I``). Defaults to 1 per
            stage, so byte counts equal in-flight microbatch counts.
        weight_stash_bytes: of ``activation_bytes``, the part a split backward keeps
            after ``I`` until ``W`` (the inputs of the weight-gradient GEMMs).
            Defaults to all of ``activation_bytes`` (a conservative bound).
        microbatch_scale: optional per-microbatch multiplier of every cost, e.g.
            ``[1, 1, 1, 0.5]`` for a smaller last microbatch. Length ``m``.
        update: time of one optimizer update ``U`` per stage, >= 0 (default 0); only
            schedules that update inside the step (dual-rate) run ``U``.
        backward_input: optional input-gradient time per stage (``I`` of a split
            backward, each >= 0) as measured, independent of ``backward``; with
            it, ``weight`` need only be >= 0 (not below ``backward``). ``None``:
            ``I`` = ``backward - weight``.

    ``microbatch_costs`` is ``None`` here; :meth:`per_microbatch` builds costs with one
    time per (stage, microbatch), held there (the per-stage fields are then the means).
    """

    forward: tuple[float, ...]
    backward: tuple[float, ...]
    weight: tuple[float, ...]
    activation_bytes: tuple[float, ...]
    weight_stash_bytes: tuple[float, ...]
    microbatch_scale: tuple[float, ...] | None
    update: tuple[float, ...]
    backward_input: tuple[float, ...] | None
    microbatch_costs: MicrobatchCosts | None

    def __init__(
        self,
        forward: Sequence[float],
        backward: Sequence[float] | None = None,
        weight: Sequence[float] | None = None,
        activation_bytes: Sequence[float] | None = None,
        weight_stash_bytes: Sequence[float] | None = None,
        microbatch_scale: Sequence[float] | None = None,
        update: Sequence[float] | None = None,
        backward_input: Sequence[float] | None = None,
    ) -> None:
        fwd, bwd, wgt = forward_backward_weight(forward, backward, weight, split_measured=backward_input is not None)
        num_stages = len(fwd)
        split_input = None if backward_input is None else finite_floats(
            "backward_input", backward_input, length=num_stages, allow_zero=True
        )
        act = (
            (1.0,) * num_stages
            if activation_bytes is None
            else finite_floats("activation_bytes", activation_bytes, length=num_stages, allow_zero=True)
        )
        if weight_stash_bytes is None:
            stash = act
        else:
            stash = finite_floats(
                "weight_stash_bytes", weight_stash_bytes, length=num_stages, allow_zero=True
            )
            for stage, (kept, total) in enumerate(zip(stash, act)):
                if kept > total:
                    raise InvalidInputError(
                        f"weight_stash_bytes[{stage}] = {kept} must be <= activation_bytes[{stage}] = {total}"
                    )
        scale = None if microbatch_scale is None else finite_floats("microbatch_scale", microbatch_scale)
        object.__setattr__(self, "forward", fwd)
        object.__setattr__(self, "backward", bwd)
        object.__setattr__(self, "weight", wgt)
        object.__setattr__(self, "activation_bytes", act)
        object.__setattr__(self, "weight_stash_bytes", stash)
        object.__setattr__(self, "microbatch_scale", scale)
        object.__setattr__(
            self, "update",
            (0.0,) * num_stages if update is None
            else finite_floats("update", update, length=num_stages, allow_zero=True),
        )
        object.__setattr__(self, "backward_input", split_input)
        object.__setattr__(self, "microbatch_costs", None)

    @classmethod
    def per_microbatch(
        cls,
        forward: Sequence[Sequence[float]],
        backward: Sequence[Sequence[float]] | None = None,
        weight: Sequence[Sequence[float]] | None = None,
        *,
        backward_input: Sequence[Sequence[float]] | None = None,
        activation_bytes: Sequence[float] | None = None,
        weight_stash_bytes: Sequence[float] | None = None,
        update: Sequence[float] | None = None,
    ) -> StageCosts:
        """Costs with one time per (stage, microbatch): ``forward[s][mb]``, likewise the others.

        Each microbatch's column obeys :func:`forward_backward_weight` (defaults included:
        ``backward`` twice ``forward``, ``weight`` half of ``backward``); ``backward_input``
        is the measured ``I`` (see the class). Bytes and ``update`` stay per stage. The
        per-stage fields (``forward``, ...) are the means over microbatches, exactly the
        value where a stage's microbatches are alike, so a matrix whose columns are all
        equal simulates bit for bit like the per-stage costs it repeats.

        Raises:
            InvalidInputError: a table that is not ``[stage][microbatch]`` with rows of one
                length, or a value the rule refuses (named with its stage and microbatch).
        """
        fwd = _matrix("forward", forward)
        stages, count = len(fwd), len(fwd[0])
        bwd = None if backward is None else _matrix("backward", backward, stages)
        wgt = None if weight is None else _matrix("weight", weight, stages)
        inp = None if backward_input is None else _matrix("backward_input", backward_input, stages)
        for name, table in (("backward", bwd), ("weight", wgt), ("backward_input", inp)):
            if table is not None and len(table[0]) != count:
                raise InvalidInputError(f"{name} has {len(table[0])} microbatches, forward has {count}")
        columns = []
        for mb in range(count):
            try:
                column = forward_backward_weight(
                    [row[mb] for row in fwd], None if bwd is None else [row[mb] for row in bwd],
                    None if wgt is None else [row[mb] for row in wgt], split_measured=inp is not None)
                if inp is not None:
                    finite_floats("backward_input", [row[mb] for row in inp], allow_zero=True)
            except InvalidInputError as error:
                raise InvalidInputError(f"microbatch {mb}: {error} (the index is the stage)") from None
            columns.append(column)
        by_stage = [tuple(tuple(column[part][s] for column in columns) for s in range(stages)) for part in range(3)]
        split = None if inp is None else tuple(tuple(row) for row in inp)
        costs = cls([_row_mean(row) for row in by_stage[0]], [_row_mean(row) for row in by_stage[1]],
                    [_row_mean(row) for row in by_stage[2]], activation_bytes, weight_stash_bytes, None, update,
                    None if split is None else [_row_mean(row) for row in split])
        object.__setattr__(costs, "microbatch_costs", MicrobatchCosts(by_stage[0], by_stage[1], by_stage[2], split))
        return costs

    @classmethod
    def uniform(
        cls, num_stages: int, *, forward: float = 1.0, backward: float | None = None, weight: float | None = None
    ) -> StageCosts:
        """Equal costs on every stage (the textbook case)."""
        count = positive_int("num_stages", num_stages)
        check_memory(f"StageCosts.uniform of {count} stages", count * _UNIFORM_BYTES_PER_STAGE)
        return cls(
            [forward] * count,
            None if backward is None else [backward] * count,
            None if weight is None else [weight] * count,
        )

    def replaced(self, **changes: Sequence[float] | None) -> StageCosts:
        """A copy with some fields replaced (validated like new costs); the others, the measured split included, kept.

        ``costs.replaced(activation_bytes=[2.0, 1.0])``.
        """
        unknown = set(changes) - set(_FIELDS)
        if unknown:
            raise InvalidInputError(f"unknown stage cost fields {sorted(unknown)}; allowed: {', '.join(_FIELDS)}")
        matrix = self.microbatch_costs
        if matrix is not None:
            times = sorted(set(changes) & set(_TIME_FIELDS))
            if times:
                raise InvalidInputError(f"costs per (stage, microbatch) cannot replace {', '.join(times)} "
                                        "(build new ones with StageCosts.per_microbatch)")
        result = StageCosts(**{**{name: getattr(self, name) for name in _FIELDS}, **changes})
        if matrix is not None:
            object.__setattr__(result, "microbatch_costs", matrix)
        return result

    @classmethod
    def stagewise(cls, sources: Sequence[StageCosts]) -> StageCosts:
        """Costs whose stage ``s`` is stage ``s`` of ``sources[s]`` (e.g. each stage's recompute mode's costs).

        Each stage keeps its source's input-gradient time (a measured
        ``backward_input`` where its source has one, else ``backward - weight``);
        every source must have the same ``microbatch_scale``.
        """
        if not sources or len({source.microbatch_scale for source in sources}) != 1:
            raise InvalidInputError("stagewise needs one source per stage, all with the same microbatch_scale")
        pick = lambda name: [getattr(source, name)[s] for s, source in enumerate(sources)]  # noqa: E731
        matrices = [source.microbatch_costs for source in sources]
        if any(matrix is not None for matrix in matrices):
            if any(matrix is None for matrix in matrices) or len({m.num_microbatches for m in matrices if m}) != 1:
                raise InvalidInputError("stagewise: either every source has costs per (stage, microbatch), for "
                                        "the same microbatches, or none")
            rows = lambda part: [getattr(m, part)[s] for s, m in enumerate(matrices) if m]  # noqa: E731
            measured_rows = any(m is not None and m.backward_input is not None for m in matrices)
            return cls.per_microbatch(rows("forward"), rows("backward"), rows("weight"),
                                      backward_input=[m.split_input()[s] for s, m in enumerate(matrices) if m]
                                      if measured_rows else None,
                                      activation_bytes=pick("activation_bytes"),
                                      weight_stash_bytes=pick("weight_stash_bytes"), update=pick("update"))
        measured = any(source.backward_input is not None for source in sources)
        split_input = [source.backward[s] - source.weight[s] if source.backward_input is None
                       else source.backward_input[s] for s, source in enumerate(sources)]
        return cls(pick("forward"), pick("backward"), pick("weight"), pick("activation_bytes"),
                   pick("weight_stash_bytes"), sources[0].microbatch_scale, pick("update"),
                   split_input if measured else None)

    @property
    def num_stages(self) -> int:
        """Number of stages the costs describe."""
        return len(self.forward)

    def duration(self, kind: Kind | str, stage: int, microbatch: int) -> float:
        """Time of one action: ``F`` forward, ``B`` the full backward, ``I`` its
        input-gradient part (``backward_input``, else ``backward - weight``), ``W`` its
        weight part (``weight``), ``U`` the optimizer update (``update``; not scaled per
        microbatch)."""
        if kind == "F":
            base = self.forward[stage]
        elif kind == "B":
            base = self.backward[stage]
        elif kind == "I":
            if self.backward_input is not None:
                base = self.backward_input[stage]
            else:
                base = self.backward[stage] - self.weight[stage]
        elif kind == "W":
            base = self.weight[stage]
        elif kind == "U":
            return self.update[stage]
        else:
            raise InvalidInputError(f"kind must be one of F, B, I, W, U, got {kind!r}")
        matrix = self.microbatch_costs
        if matrix is not None:
            table = {"F": matrix.forward, "B": matrix.backward, "W": matrix.weight}.get(str(kind))
            return (table if table is not None else matrix.split_input())[stage][microbatch]
        if self.microbatch_scale is not None:
            base *= self.microbatch_scale[microbatch]
        return base

    def durations(self, kinds: np.ndarray, stages: np.ndarray, microbatches: np.ndarray) -> np.ndarray:
        """:meth:`duration` of many actions at once, bit for bit.

        Args:
            kinds: per action, the index of its kind in :data:`pipeplan.schedule.KINDS`
                (``F``, ``B``, ``I``, ``W``, ``U``).
            stages, microbatches: per action.
        """
        if self.microbatch_costs is not None:
            return self._matrix_table[kinds, stages, microbatches]
        forward = np.asarray(self.forward)
        backward = np.asarray(self.backward)
        weight = np.asarray(self.weight)
        update = np.asarray(self.update)
        split_input = backward - weight if self.backward_input is None else np.asarray(self.backward_input)
        table = np.stack([forward, backward, split_input, weight, update])  # rows in KINDS order
        base = table[kinds, stages]
        if self.microbatch_scale is not None:
            scale = np.asarray(self.microbatch_scale)[microbatches]
            base = base * np.where(kinds == len(table) - 1, 1.0, scale)  # an update is not per sample
        return base

    @cached_property
    def _matrix_table(self) -> np.ndarray:
        """``[kind, stage, microbatch]`` durations of costs per (stage, microbatch), kinds in KINDS order."""
        matrix = self.microbatch_costs
        assert matrix is not None
        update = np.repeat(np.asarray(self.update, dtype=float)[:, None], matrix.num_microbatches, axis=1)
        return np.stack([np.asarray(matrix.forward, dtype=float), np.asarray(matrix.backward, dtype=float),
                         np.asarray(matrix.split_input(), dtype=float), np.asarray(matrix.weight, dtype=float),
                         update])

    def check_shape(self, num_stages: int, num_microbatches: int) -> None:
        """Raise if these costs do not describe ``num_stages`` stages and ``num_microbatches``."""
        if self.num_stages != num_stages:
            raise InvalidInputError(
                f"costs describe {self.num_stages} stages but the schedule has {num_stages}"
            )
        if self.microbatch_costs is not None and self.microbatch_costs.num_microbatches != num_microbatches:
            raise InvalidInputError(
                f"the costs per (stage, microbatch) describe {self.microbatch_costs.num_microbatches} microbatches, "
                f"the schedule has {num_microbatches}"
            )
        if self.microbatch_scale is not None and len(self.microbatch_scale) != num_microbatches:
            raise InvalidInputError(
                f"microbatch_scale has {len(self.microbatch_scale)} entries, expected "
                f"{num_microbatches} (one per microbatch)"
            )


@dataclass(frozen=True, init=False)
class CommModel:
    """Point-to-point communication between stages on different ranks.

    A message across the boundary between stage ``s`` and ``s + 1`` (an activation
    going down or a gradient coming up) takes ``latency + boundary_bytes[s] /
    bandwidth``. Stages on the same rank exchange nothing. Links carry any number
    of messages at once.

    Args:
        latency: fixed time per message, >= 0.
        bandwidth: bytes per time unit, > 0 (``inf`` means size costs nothing).
        boundary_bytes: bytes per boundary (length ``S - 1``), or one number for all.
        send_mode: ``"eager"``: the sender never waits (buffered, non-blocking
            sends). ``"rendezvous"``: blocking P2P; the sender cannot go on until the
            receiver has posted its receive (it has finished the action before the
            consuming one) and the transfer is done. A rank blocked in a send has
            its next receive posted already, like Megatron's batched
            ``send_forward_recv_backward``.
        microbatch_bytes: optional bytes per boundary *and* microbatch,
            ``[boundary][microbatch]``, for microbatches that are not alike (see
            :meth:`message_times`); ``boundary_bytes`` is then each boundary's mean.
    """

    latency: float
    bandwidth: float
    boundary_bytes: float | tuple[float, ...]
    send_mode: SendMode
    microbatch_bytes: Matrix | None = field(default=None, repr=False)

    def __init__(
        self,
        latency: float = 0.0,
        bandwidth: float = math.inf,
        boundary_bytes: float | Sequence[float] = 0.0,
        send_mode: SendMode = "eager",
        *,
        microbatch_bytes: Sequence[Sequence[float]] | None = None,
    ) -> None:
        lat = non_negative_float("latency", latency)
        band = positive_float("bandwidth", bandwidth, allow_inf=True)
        if isinstance(boundary_bytes, (int, float)):
            sizes: float | tuple[float, ...] = non_negative_float("boundary_bytes", boundary_bytes)
        else:
            sizes = finite_floats("boundary_bytes", boundary_bytes, allow_zero=True)
        if send_mode not in ("eager", "rendezvous"):
            raise InvalidInputError(f"send_mode must be 'eager' or 'rendezvous', got {send_mode!r}")
        object.__setattr__(self, "latency", lat)
        object.__setattr__(self, "bandwidth", band)
        per_microbatch: Matrix | None = None
        if microbatch_bytes is not None:
            table = _matrix("microbatch_bytes", microbatch_bytes)
            per_microbatch = tuple(finite_floats(f"microbatch_bytes[{b}]", row, allow_zero=True)
                                   for b, row in enumerate(table))
            sizes = tuple(_row_mean(row) for row in per_microbatch)
        object.__setattr__(self, "boundary_bytes", sizes)
        object.__setattr__(self, "send_mode", send_mode)
        object.__setattr__(self, "microbatch_bytes", per_microbatch)

    def boundary_times(self, num_stages: int) -> tuple[float, ...]:
        """Message time across each of the ``num_stages - 1`` boundaries."""
        if isinstance(self.boundary_bytes, tuple):
            if len(self.boundary_bytes) != num_stages - 1:
                raise InvalidInputError(
                    f"boundary_bytes has {len(self.boundary_bytes)} entries, expected "
                    f"{num_stages - 1} (one per stage boundary)"
                )
            sizes = self.boundary_bytes
        else:
            sizes = (self.boundary_bytes,) * (num_stages - 1)
        return tuple(self.latency + size / self.bandwidth for size in sizes)

    def message_times(self, num_stages: int, num_microbatches: int) -> np.ndarray:
        """``[boundary, microbatch]``: the time of each microbatch's message across each boundary.

        Each microbatch's own bytes where ``microbatch_bytes`` is given, else
        :meth:`boundary_times` for every microbatch.
        """
        if self.microbatch_bytes is None:
            times = np.asarray(self.boundary_times(num_stages), dtype=float)
            return np.repeat(times.reshape(-1, 1), num_microbatches, axis=1)
        table = np.asarray(self.microbatch_bytes, dtype=float)
        if table.shape != (num_stages - 1, num_microbatches):
            raise InvalidInputError(
                f"microbatch_bytes is {table.shape[0]} boundaries × {table.shape[1]} microbatches, expected "
                f"{num_stages - 1} × {num_microbatches}"
            )
        return self.latency + table / self.bandwidth
