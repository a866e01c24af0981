"""The layer profile the partition solver splits: per-layer time, memory and name.

A :class:`LayerProfile` holds, for every layer of a model in order, its forward
time, its full backward time (and the weight-gradient part of it), the bytes of
activations one microbatch leaves on the stage, and its parameter count::

    >>> from pipeplan.layers import LayerProfile
    >>> profile = LayerProfile.uniform(32, forward=2 / 3, first_extra=16, last_extra=8)  # or .from_file("p.csv")
    >>> costs = profile.stage_costs([3, 11, 11, 7])      # lesson 16's partition
    >>> [round(forward + backward, 6) for forward, backward in zip(costs.forward, costs.backward)]
    [22.0, 22.0, 22.0, 22.0]

Units and conventions, shared with :class:`~pipeplan.costs.StageCosts`:

* Times are per microbatch, in one unit of your choice (the CLI says ms).
* ``backward`` is the *full* backward; ``weight`` is the weight-gradient part of
  it, so a layer's total time per microbatch is ``forward + backward``
  (= F + B + W of a split-backward schedule).
* ``params`` is a parameter **count**, not bytes; the solver multiplies it by
  ``bytes_per_param`` (16 for mixed-precision Adam: 2 weight + 2 gradient + 4
  master weight + 4 + 4 Adam moments).
* ``activation_bytes`` is bytes per microbatch, held from the end of the
  layer's forward to the end of its backward.
* ``weight_stash_bytes`` (of ``activation_bytes``) is what a split backward keeps
  after B until W; defaults to all of ``activation_bytes``.
* ``send_bytes`` is the size of what crosses a pipeline cut right after the
  layer (activations down, the same size of gradients up); defaults to 0.
* ``trainable_params`` (of ``params``) are the parameters with gradients and
  optimizer state; a frozen layer has 0. Defaults to ``params``.
* ``tied_to``: per layer, the earlier layer whose parameters it shares (a tied LM
  head: the embedding), or -1. Its ``params`` are its copy: a rank holding both
  holds one table (:meth:`LayerProfile.held_params`), two ranks one each, with
  gradients and optimizer state (Megatron-LM's copy on the last stage).
* A layer may have ``backward == 0`` (a frozen layer nothing upstream trains:
  forward only) and ``weight == backward`` (its input is data, so its backward is
  all weight gradient).
* ``first_extra`` / ``last_extra`` are fixed times (F + B) that the first and
  last stage always pay (vision preprocessing, the loss or an action head);
  ``first_extra_bytes`` / ``last_extra_bytes`` are fixed bytes they always hold.
  When a profile is turned into :class:`StageCosts`, an extra time is split
  one third forward, two thirds backward, half of which is weight gradient.

A *measured* profile (``pipeplan profile``, :func:`pipeplan.runtime.measure.measure_layers`)
also carries, per layer, ``backward_input`` (the input-gradient half of a split
backward as the runtime runs it; with it ``weight`` is the weight half as run, and
the two may add up to more than ``backward``, W > B included: what a profile may
hold is :mod:`pipeplan.costs`' one rule), ``send_bytes`` measured as the
layer's output size, the interquartile range of each measured time
(``spread``), and for the whole file a :class:`~pipeplan.calibration.Calibration`
(message latency and bandwidth, processes sharing cores) and free-form
``measurement`` notes (model, batch, threads, repeats, machine load).

File formats (:meth:`LayerProfile.from_file`, :meth:`LayerProfile.to_file`; both
round-trip exactly, floats written with ``repr``):

* CSV with a header; columns ``forward`` (required), ``backward``, ``weight``,
  ``backward_input``, ``activation_bytes``, ``params``, ``name``,
  ``weight_stash_bytes``, ``send_bytes``, ``trainable_params``, ``tied_to`` and
  ``<time>_iqr`` (optional, in any order; no ``tied_to``: no ties). Version 2 files
  start with one comment line ``# pipeplan-profile {json}`` holding the version,
  the extras, the calibration and the measurement notes.
* JSON: a list of objects with the same keys (version 1), or an object
  ``{"format": "pipeplan-profile", "version": 2, "layers": [...], "first_extra": ..,
  "last_extra": .., "first_extra_bytes": .., "last_extra_bytes": .., "calibration":
  {...}, "measurement": {...}}``; an object without ``version`` is version 1 and
  may hold only ``layers`` and the extras.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ._files import read_text
from ._validation import finite_floats, non_negative_float, positive_int
from .calibration import Calibration
from .costs import StageCosts, forward_backward_weight
from .errors import InvalidInputError
from .limits import check_memory
from .profile_format import PROFILE_FORMAT, PROFILE_VERSION, in_file_terms, parse_profile, write_profile

__all__ = ["LayerProfile", "transformer_layer_flops", "PROFILE_VERSION"]

#: Peak bytes per layer of :meth:`LayerProfile.uniform` (tracemalloc, 100,000 layers: 174).
_UNIFORM_BYTES_PER_LAYER = 180
_TIMES = ("forward", "backward", "weight", "backward_input")
_SPREAD = tuple(f"{name}_iqr" for name in _TIMES)
_OPTIONAL_COLUMNS = ("weight_stash_bytes", "send_bytes", "trainable_params", "backward_input", "tied_to")
_FIELDS = ("forward", "backward", "weight", "activation_bytes", "params", "name", *_OPTIONAL_COLUMNS, *_SPREAD)
_EXTRAS = ("first_extra", "last_extra", "first_extra_bytes", "last_extra_bytes")
_TOP_LEVEL = ("format", "version", "layers", *_EXTRAS, "calibration", "measurement")


def transformer_layer_flops(
    *, hidden_size: int, seq_length: int, micro_batch_size: int, ffn_hidden_size: int | None = None
) -> float:
    """Forward FLOPs of one GPT decoder layer on one microbatch.

    ``2·b·s·(4h² + 2h·f) + 4·b·s²·h``: the QKV and output projections
    (``8bsh²``), the MLP (``4bshf``, i.e. ``16bsh²`` for ``f = 4h``) and the two
    attention matmuls (``4bs²h``), counting a multiply-add as 2 FLOPs
    (Narayanan et al., 2021, "Efficient Large-Scale Language Model Training on
    GPU Clusters", eq. 2, without the logit layer).
    """
    h, s, b = hidden_size, seq_length, micro_batch_size
    f = 4 * h if ffn_hidden_size is None else ffn_hidden_size
    return 2.0 * b * s * (4.0 * h * h + 2.0 * h * f) + 4.0 * b * s * s * h


@dataclass(frozen=True, init=False)
class LayerProfile:
    """Per-layer costs of a model, in layer order (see the module doc for units).

    Args:
        forward: forward time per layer per microbatch, each > 0.
        backward: full backward time per layer, each >= 0 (0: forward only); defaults to 2 × forward.
        weight: weight-gradient part of ``backward``, ``0 <= weight <= backward``;
            defaults to half the backward.
        activation_bytes: bytes per microbatch kept from F to B; defaults to 0.
        params: parameter count per layer; defaults to 0.
        names: a name per layer (module names for torch exports); defaults to
            ``layers.0``, ``layers.1``, ...
        first_extra, last_extra: fixed time the first / last stage always pays.
        first_extra_bytes, last_extra_bytes: fixed bytes the first / last stage holds.
        weight_stash_bytes: per layer, the part of ``activation_bytes`` kept after B
            until W; defaults to all of it.
        send_bytes: per layer, bytes crossing a cut right after it; defaults to 0.
        trainable_params: per layer, the part of ``params`` that is trained;
            defaults to ``params``.
        tied_to: per layer, an earlier untied layer whose parameters it shares, or -1 (default).
        backward_input: measured input-gradient time of a split backward per
            layer (>= 0), or ``None`` (then it is ``backward - weight``). With it,
            ``weight`` is the measured weight half (>= 0, not bounded by ``backward``).
        spread: per measured time (``"forward"``, ``"backward"``, ``"weight"``,
            ``"backward_input"``), its interquartile range per layer, same unit.
        calibration: the machine's message and core-sharing calibration, if measured.
        measurement: free-form JSON-ready notes on how the profile was measured.
    """

    forward: tuple[float, ...]
    backward: tuple[float, ...]
    weight: tuple[float, ...]
    activation_bytes: tuple[float, ...]
    params: tuple[float, ...]
    names: tuple[str, ...]
    first_extra: float
    last_extra: float
    first_extra_bytes: float
    last_extra_bytes: float
    weight_stash_bytes: tuple[float, ...]
    send_bytes: tuple[float, ...]
    trainable_params: tuple[float, ...]
    tied_to: tuple[int, ...]
    backward_input: tuple[float, ...] | None
    spread: Mapping[str, tuple[float, ...]]
    calibration: Calibration | None
    measurement: Mapping[str, Any]

    def __init__(
        self,
        forward: Sequence[float],
        backward: Sequence[float] | None = None,
        weight: Sequence[float] | None = None,
        *,
        activation_bytes: Sequence[float] | None = None,
        params: Sequence[float] | None = None,
        names: Sequence[str] | None = None,
        first_extra: float = 0.0,
        last_extra: float = 0.0,
        first_extra_bytes: float = 0.0,
        last_extra_bytes: float = 0.0,
        weight_stash_bytes: Sequence[float] | None = None,
        send_bytes: Sequence[float] | None = None,
        trainable_params: Sequence[float] | None = None,
        tied_to: Sequence[int] | None = None,
        backward_input: Sequence[float] | None = None,
        spread: Mapping[str, Sequence[float]] | None = None,
        calibration: Calibration | None = None,
        measurement: Mapping[str, Any] | None = None,
    ) -> None:
        fwd, bwd, wgt = forward_backward_weight(forward, backward, weight, split_measured=backward_input is not None)
        count = len(fwd)
        zeros = (0.0,) * count
        act = zeros if activation_bytes is None else finite_floats(
            "activation_bytes", activation_bytes, length=count, allow_zero=True
        )
        par = zeros if params is None else finite_floats("params", params, length=count, allow_zero=True)
        if names is None:
            labels = tuple(f"layers.{index}" for index in range(count))
        else:
            if isinstance(names, str) or len(names) != count:
                raise InvalidInputError(
                    f"names must be a list of {count} strings (one per layer), got {names!r}"
                )
            labels = tuple(str(name) for name in names)
        stash = act if weight_stash_bytes is None else _bounded(
            "weight_stash_bytes", weight_stash_bytes, act, "activation_bytes", count)
        sends = zeros if send_bytes is None else finite_floats(
            "send_bytes", send_bytes, length=count, allow_zero=True)
        trainable = par if trainable_params is None else _bounded(
            "trainable_params", trainable_params, par, "params", count)
        object.__setattr__(self, "weight_stash_bytes", stash)
        object.__setattr__(self, "send_bytes", sends)
        object.__setattr__(self, "trainable_params", trainable)
        object.__setattr__(self, "tied_to", (-1,) * count if tied_to is None else _tied_indices(tied_to, par))
        object.__setattr__(self, "forward", fwd)
        object.__setattr__(self, "backward", bwd)
        object.__setattr__(self, "weight", wgt)
        object.__setattr__(self, "activation_bytes", act)
        object.__setattr__(self, "params", par)
        object.__setattr__(self, "names", labels)
        object.__setattr__(self, "first_extra", non_negative_float("first_extra", first_extra))
        object.__setattr__(self, "last_extra", non_negative_float("last_extra", last_extra))
        object.__setattr__(
            self, "first_extra_bytes", non_negative_float("first_extra_bytes", first_extra_bytes)
        )
        object.__setattr__(self, "last_extra_bytes", non_negative_float("last_extra_bytes", last_extra_bytes))
        object.__setattr__(self, "backward_input", None if backward_input is None else finite_floats(
            "backward_input", backward_input, length=count, allow_zero=True))
        spreads = {}
        for key, values in (spread or {}).items():
            if key not in _TIMES:
                raise InvalidInputError(f"spread has unknown time {key!r}; allowed: {', '.join(_TIMES)}")
            spreads[key] = finite_floats(f"{key}_iqr", values, length=count, allow_zero=True)
        object.__setattr__(self, "spread", spreads)
        if calibration is not None and not isinstance(calibration, Calibration):
            raise InvalidInputError(f"calibration must be a Calibration, got {type(calibration).__name__}")
        object.__setattr__(self, "calibration", calibration)
        if measurement is not None and not isinstance(measurement, Mapping):
            raise InvalidInputError(f"measurement must be a mapping of notes, got {measurement!r}")
        object.__setattr__(self, "measurement", dict(measurement or {}))

    # ----------------------------------------------------------- constructors
    @classmethod
    def from_costs(cls, layer_costs: Sequence[float], **options: Any) -> LayerProfile:
        """A profile from total (F + B) times per layer, split 1 : 2 into F and B."""
        total = finite_floats("layer_costs", layer_costs)
        return cls([t / 3.0 for t in total], [2.0 * t / 3.0 for t in total], **options)

    @classmethod
    def uniform(
        cls,
        num_layers: int,
        *,
        forward: float = 1.0,
        backward: float | None = None,
        activation_bytes: float = 0.0,
        params: float = 0.0,
        **options: Any,
    ) -> LayerProfile:
        """``num_layers`` identical layers (the textbook transformer stack)."""
        count = positive_int("num_layers", num_layers)
        check_memory(f"num_layers = {count} identical layers (LayerProfile.uniform)", count * _UNIFORM_BYTES_PER_LAYER)
        back = 2.0 * forward if backward is None else backward
        return cls(
            [forward] * count,
            [back] * count,
            activation_bytes=[activation_bytes] * count,
            params=[params] * count,
            **options,
        )

    @classmethod
    def from_transformer(
        cls,
        *,
        num_layers: int,
        hidden_size: int,
        num_heads: int,
        seq_length: int,
        micro_batch_size: int,
        throughput: float,
        ffn_hidden_size: int | None = None,
        vocab_size: int | None = None,
        tensor_parallel: int = 1,
        **options: Any,
    ) -> LayerProfile:
        """A GPT-style decoder stack from its shapes and a stated throughput.

        Args:
            num_layers, hidden_size, num_heads, seq_length, micro_batch_size: the
                model and microbatch shape (``L, h, a, s, b``).
            throughput: achieved FLOP/s of one device (e.g. ``400e12`` for a
                bf16 H100 at ~40 % MFU). Times come out in **milliseconds**:
                ``1e3 · FLOPs / throughput``.
            ffn_hidden_size: MLP width, default ``4h``.
            vocab_size: when given, an ``embedding`` layer is prepended and an
                ``output_layer`` (logits) appended, each with ``V·h`` parameters;
                the logits cost ``2·b·s·h·V`` forward FLOPs.
            tensor_parallel: tensor-parallel degree ``t``; FLOPs, parameters and
                activations per device are divided by ``t``.

        Backward = 2 × forward, weight gradient = half of it. Parameters per layer
        ``4h² + 2hf`` weights, ``5h + f`` biases and ``4h`` for the two layer
        norms (``12h² + 13h`` for ``f = 4h``). Activation bytes per layer
        ``s·b·h·(34 + 5·a·s/h)`` at 16-bit without recomputation (Korthikanti
        et al., 2022, "Reducing Activation Recomputation in Large Transformer
        Models", eq. 1).
        """
        layers = positive_int("num_layers", num_layers)
        h = positive_int("hidden_size", hidden_size)
        heads = positive_int("num_heads", num_heads)
        s = positive_int("seq_length", seq_length)
        b = positive_int("micro_batch_size", micro_batch_size)
        tp = positive_int("tensor_parallel", tensor_parallel)
        f = 4 * h if ffn_hidden_size is None else positive_int("ffn_hidden_size", ffn_hidden_size)
        rate = non_negative_float("throughput", throughput)
        if not 0 < rate < float("inf"):
            raise InvalidInputError(f"throughput must be a finite number of FLOP/s > 0, got {throughput!r}")
        flops = transformer_layer_flops(hidden_size=h, seq_length=s, micro_batch_size=b, ffn_hidden_size=f)
        to_ms = 1e3 / (rate * tp)
        layer_params = (4 * h * h + 2 * h * f + f + 9 * h) / tp
        layer_act = s * b * h * (34.0 + 5.0 * heads * s / h) / tp
        forward = [flops * to_ms] * layers
        params = [layer_params] * layers
        act = [layer_act] * layers
        names = [f"layers.{index}" for index in range(layers)]
        if vocab_size is not None:
            vocab = positive_int("vocab_size", vocab_size)
            embed_ms = 2.0 * b * s * h * to_ms  # a gather: charge one pass over its output
            logits_ms = 2.0 * b * s * h * vocab * to_ms
            forward = [embed_ms, *forward, logits_ms]
            params = [vocab * h / tp, *params, vocab * h / tp]
            act = [2.0 * s * b * h / tp, *act, 4.0 * s * b * vocab / tp]
            names = ["embedding", *names, "output_layer"]
        return cls(forward, activation_bytes=act, params=params, names=names, **options)

    @classmethod
    def from_records(cls, records: Sequence[Mapping[str, Any]], **options: Any) -> LayerProfile:
        """A profile from one mapping per layer with the CSV column names as keys."""
        if isinstance(records, (str, bytes)) or not isinstance(records, Sequence) or not records:
            raise InvalidInputError(f"layers must be a non-empty list of objects, got {records!r}")
        columns: dict[str, list[Any]] = {key: [] for key in _FIELDS}
        present: set[str] = set()
        for index, record in enumerate(records):
            if not isinstance(record, Mapping):
                raise InvalidInputError(f"layers[{index}] must be an object, got {record!r}")
            unknown = set(record) - set(_FIELDS)
            if unknown:
                raise InvalidInputError(
                    f"layers[{index}] has unknown keys {sorted(unknown)}; allowed: {', '.join(_FIELDS)}"
                )
            if "forward" not in record:
                raise InvalidInputError(f"layers[{index}] needs a 'forward' time")
            present.update(record)
            for key in _FIELDS:
                columns[key].append(record.get(key))
        for key in _FIELDS:
            if key in present and any(value is None or value == "" for value in columns[key]):
                missing = next(i for i, value in enumerate(columns[key]) if value is None or value == "")
                raise InvalidInputError(f"layers[{missing}] lacks '{key}', which other layers give")

        def column(key: str) -> list[Any] | None:
            return columns[key] if key in present else None

        optional: dict[str, Any] = {key: columns[key] for key in _OPTIONAL_COLUMNS if key in present}
        spread = {time: columns[f"{time}_iqr"] for time in _TIMES if f"{time}_iqr" in present}
        return cls(
            columns["forward"],
            column("backward"),
            column("weight"),
            activation_bytes=column("activation_bytes"),
            params=column("params"),
            names=column("name"),
            spread=spread or None,
            **optional,
            **options,
        )

    @classmethod
    def from_file(cls, path: str | Path, **options: Any) -> LayerProfile:
        """Load a ``.csv`` or ``.json`` profile (formats and versions in the module doc).

        Raises:
            InvalidInputError: a file that is missing, a directory, not a regular
                file, unreadable, empty or not UTF-8; an unknown suffix; a version
                this pipeplan does not read; or bad values (naming the file, the layer's
                index and name, and the field).
        """
        file = Path(path)
        where = f"profile file {str(file)!r}"
        payload = parse_profile(read_text(file, "profile file"), file, where)
        try:
            return (cls._from_payload(payload, where, options) if isinstance(payload, Mapping)
                    else cls.from_records(payload, **options))
        except InvalidInputError as error:
            raise InvalidInputError(in_file_terms(str(error), payload, where)) from None

    @classmethod
    def _from_payload(cls, payload: Mapping[str, Any], where: str, options: Mapping[str, Any]) -> LayerProfile:
        """A profile from a file's top-level object (version 1 or 2)."""
        version = payload.get("version", 1)
        if version not in (1, PROFILE_VERSION) or isinstance(version, bool):
            raise InvalidInputError(
                f"{where} has version {version!r}; this pipeplan reads versions 1 and {PROFILE_VERSION} "
                "(re-measure it with 'pipeplan profile')"
            )
        allowed = _TOP_LEVEL if version == PROFILE_VERSION else ("layers", *_EXTRAS)
        unknown = set(payload) - set(allowed)
        if unknown or "layers" not in payload:
            raise InvalidInputError(
                f"a version {version} JSON profile object needs 'layers' and may have "
                f"{', '.join(k for k in allowed if k != 'layers')}; got keys {sorted(payload)}"
            )
        if version == PROFILE_VERSION and payload.get("format", PROFILE_FORMAT) != PROFILE_FORMAT:
            raise InvalidInputError(f"{where}: 'format' must be {PROFILE_FORMAT!r}, got {payload.get('format')!r}")
        extras = {key: payload[key] for key in _EXTRAS if key in payload}
        calibration = payload.get("calibration")
        if calibration is not None:
            extras["calibration"] = Calibration.from_dict(calibration)
        if payload.get("measurement") is not None:
            extras["measurement"] = payload["measurement"]
        return cls.from_records(payload["layers"], **{**extras, **options})

    def to_file(self, path: str | Path) -> None:
        """Write the profile as ``.json`` or ``.csv`` (version 2); :meth:`from_file` reads it back equal.

        Raises:
            InvalidInputError: an unknown suffix or a path that cannot be written.
        """
        header: dict[str, Any] = {"format": PROFILE_FORMAT, "version": PROFILE_VERSION}
        header.update({key: getattr(self, key) for key in _EXTRAS})
        if self.calibration is not None:
            header["calibration"] = self.calibration.to_dict()
        if self.measurement:
            header["measurement"] = dict(self.measurement)
        write_profile(Path(path), header, self.to_records())

    # ---------------------------------------------------------------- queries
    @property
    def num_layers(self) -> int:
        """Number of layers ``L``."""
        return len(self.forward)

    @property
    def total(self) -> np.ndarray:
        """Per-layer time per microbatch, ``forward + backward`` (F + B + W)."""
        return np.add(self.forward, self.backward)

    @functools.cached_property
    def tied_groups(self) -> tuple[tuple[int, ...], ...]:
        """Per layer that others share (``tied_to``): it, then the layers sharing it."""
        return tuple((t, *(i for i, s in enumerate(self.tied_to) if s == t)) for t in sorted(set(self.tied_to) - {-1}))

    def held_params(self, layers: Iterable[int] | None = None) -> tuple[float, float]:
        """``(params, trainable_params)`` of ``layers`` (default all), a tied group once (its largest held)."""
        held = set(range(self.num_layers) if layers is None else layers)
        groups = [[i for i in group if i in held] for group in self.tied_groups]  # held members of each
        params, trained = (sum(v[i] for i in held) - sum(sum(v[i] for i in g) - max((v[i] for i in g), default=0.0)
                                                         for g in groups) for v in (self.params, self.trainable_params))
        return params, trained

    def stage_extras(self, num_stages: int) -> tuple[np.ndarray, np.ndarray]:
        """Fixed ``(time, bytes)`` per stage: the first/last extras, added on one stage if S = 1."""
        time = np.zeros(num_stages)
        memory = np.zeros(num_stages)
        time[0] += self.first_extra
        time[-1] += self.last_extra
        memory[0] += self.first_extra_bytes
        memory[-1] += self.last_extra_bytes
        return time, memory

    def with_extras(self, **extras: float) -> LayerProfile:
        """A copy with some of ``first_extra``, ``last_extra``, ... replaced."""
        unknown = set(extras) - set(_EXTRAS)
        if unknown:
            raise InvalidInputError(f"unknown extras {sorted(unknown)}; allowed: {', '.join(_EXTRAS)}")
        return self.replaced(**extras)

    def replaced(self, **changes: Any) -> LayerProfile:
        """A copy with the named constructor arguments replaced (validated like a new profile).

        ``profile.replaced(calibration=None)``; ``names`` is the constructor's name for :attr:`names`.
        """
        keys = ("forward", "backward", "weight", "activation_bytes", "params", "names", *_OPTIONAL_COLUMNS,
                "spread", "calibration", "measurement", *_EXTRAS)  # the constructor's arguments, all attributes
        values: dict[str, Any] = {key: getattr(self, key) for key in keys}
        unknown = set(changes) - set(values)
        if unknown:
            raise InvalidInputError(f"unknown profile fields {sorted(unknown)}; allowed: {', '.join(values)}")
        values.update(changes)
        return LayerProfile(values.pop("forward"), values.pop("backward"), values.pop("weight"), **values)

    def stage_costs(self, layers_per_stage: Sequence[int]) -> StageCosts:
        """Per-stage :class:`StageCosts` for a partition (extras split as the module doc says).

        With measured ``backward_input``, a stage's ``I`` is the sum of its
        layers' ``backward_input`` and its ``W`` the sum of their ``weight``,
        except on stage 0: its input is data, so a split backward there has no
        input gradient to compute (``I`` costs 0) and its ``W`` runs the stage's
        whole backward (the sum of ``backward``), as the runtime does.
        """
        sizes = _check_sizes(layers_per_stage, self.num_layers)
        bounds = np.concatenate([[0], np.cumsum(sizes)])
        extra_time, extra_bytes = self.stage_extras(len(sizes))
        fwd = _segment_sums(self.forward, bounds) + extra_time / 3.0
        bwd = _segment_sums(self.backward, bounds) + 2.0 * extra_time / 3.0
        wgt = _segment_sums(self.weight, bounds) + extra_time / 3.0
        if self.backward_input is None:
            # a layer may have weight == backward; sums rounded apart must not make W > B (unmeasured split)
            wgt = np.minimum(wgt, bwd)
        act = _segment_sums(self.activation_bytes, bounds)
        stash = np.minimum(_segment_sums(self.weight_stash_bytes, bounds), act)
        if self.backward_input is None:
            return StageCosts(fwd.tolist(), bwd.tolist(), wgt.tolist(), activation_bytes=act.tolist(),
                              weight_stash_bytes=stash.tolist())
        split_input = _segment_sums(self.backward_input, bounds) + extra_time / 3.0
        split_input[0] = extra_time[0] / 3.0
        wgt[0] = bwd[0] - split_input[0]
        return StageCosts(fwd.tolist(), bwd.tolist(), wgt.tolist(), activation_bytes=act.tolist(),
                          weight_stash_bytes=stash.tolist(), backward_input=split_input.tolist())

    def boundary_bytes(self, layers_per_stage: Sequence[int]) -> tuple[float, ...]:
        """Bytes sent across each of the ``S - 1`` stage boundaries (for :class:`CommModel`)."""
        sizes = _check_sizes(layers_per_stage, self.num_layers)
        ends = np.cumsum(sizes)[:-1] - 1
        return tuple(float(self.send_bytes[end]) for end in ends)

    def to_records(self) -> list[dict[str, Any]]:
        """One JSON-ready dict per layer (the inverse of :meth:`from_records`).

        ``backward_input``, ``tied_to`` and the ``*_iqr`` columns appear only when the profile has them.
        """
        records = []
        for index, name in enumerate(self.names):
            record: dict[str, Any] = {
                "name": name,
                "forward": self.forward[index],
                "backward": self.backward[index],
                "weight": self.weight[index],
            }
            if self.backward_input is not None:
                record["backward_input"] = self.backward_input[index]
            record.update(
                activation_bytes=self.activation_bytes[index],
                params=self.params[index],
                weight_stash_bytes=self.weight_stash_bytes[index],
                send_bytes=self.send_bytes[index],
                trainable_params=self.trainable_params[index],
            )
            record.update({"tied_to": self.tied_to[index]} if self.tied_groups else {})
            for time in _TIMES:
                if time in self.spread:
                    record[f"{time}_iqr"] = self.spread[time][index]
            records.append(record)
        return records


def _bounded(field: str, values: Sequence[float], bound: tuple[float, ...], bound_field: str,
             count: int) -> tuple[float, ...]:
    """Per-layer values in ``[0, bound]`` (a part of another per-layer quantity)."""
    out = finite_floats(field, values, length=count, allow_zero=True)
    for index, (value, limit) in enumerate(zip(out, bound)):
        if value > limit:
            raise InvalidInputError(f"{field}[{index}] = {value} must be <= {bound_field}[{index}] = {limit}")
    return out


def _tied_indices(values: Sequence[int], params: tuple[float, ...]) -> tuple[int, ...]:
    """Per-layer ``tied_to``: -1, or an earlier untied layer with at least as many params."""
    if isinstance(values, (str, bytes)) or not isinstance(values, (Sequence, np.ndarray)) or len(values) != len(params):
        raise InvalidInputError(f"tied_to must be {len(params)} layer indices (-1: none), got {values!r:.60}")
    out: list[int] = []
    for index, raw in enumerate(values):
        number = float(raw) if isinstance(raw, str) and raw.strip().lstrip("-").isdigit() else raw
        if isinstance(number, bool) or not isinstance(number, (int, float, np.integer, np.floating)) \
                or not float(number).is_integer() or not -1 <= number < index:
            raise InvalidInputError(f"tied_to[{index}] must be -1 (none) or an earlier layer's index, got {raw!r}")
        target = int(number)
        if target >= 0 and (out[target] >= 0 or params[index] > params[target]):
            raise InvalidInputError(f"tied_to[{index}] = {target} must name an untied layer with at least its {params[index]:g} "
                                    f"params; layer {target} has {params[target]:g} and tied_to {out[target]}")
        out.append(target)
    return tuple(out)


def _segment_sums(values: Sequence[float], bounds: np.ndarray) -> np.ndarray:
    prefix = np.concatenate([[0.0], np.cumsum(values)])
    return prefix[bounds[1:]] - prefix[bounds[:-1]]


def _check_sizes(layers_per_stage: Sequence[int], num_layers: int) -> list[int]:
    try:
        counts = list(layers_per_stage)
    except TypeError:
        raise InvalidInputError(f"layers_per_stage must be a list of positive layer counts summing to {num_layers}, "
                                f"got {layers_per_stage!r:.60}") from None
    sizes = [positive_int(f"layers_per_stage[{k}]", n) for k, n in enumerate(counts)]
    if not sizes or sum(sizes) != num_layers:
        raise InvalidInputError(
            f"layers_per_stage must be positive counts summing to {num_layers}, got {list(layers_per_stage)}"
        )
    return sizes
