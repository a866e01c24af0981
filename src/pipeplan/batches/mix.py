"""A shape mix (how often each per-sample shape occurs) and what one sample of each shape costs.

A mix file is a CSV whose header names shape fields and then ``count`` (how many
samples) or ``weight`` (a relative frequency), one row per shape::

    cameras,count
    1,400
    2,300
    3,200
    4,100

or the same as JSON: ``[{"cameras": 1, "count": 400}, ...]`` (or ``{"rows": [...]}``).
Shape fields are the presets' shape options (:data:`SHAPE_FIELDS`: ``cameras``,
``text_tokens``, ``action_horizon``, ``image_size``; ``-`` may stand for ``_``); a
field a row leaves out keeps the preset's default::

    from pipeplan.batches.mix import read_mix, mix_costs
    mix = read_mix("embodiments.csv")
    costs = mix_costs("pi0", mix, device="h100-80g")
    costs.sample_ms          # per shape: forward + backward of one sample, ms
    costs.draw(4096, seed=0) # shape index of each sample of a drawn global batch

Every error is one :class:`~pipeplan.errors.InvalidInputError` line naming the
file, the row (counted from 1 after the header) and the field. The per-sample
cost is pipeplan's cost model (:func:`pipeplan.models.layer_costs.layer_profile`)
at ``micro_batch_size`` samples of that one shape, divided by
``micro_batch_size``; a sample's cost therefore assumes variable-length
execution (a sample of 1 camera runs 1 camera, no padding to the largest
shape). torch-free.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import hardware, presets
from .._files import read_text
from ..errors import InvalidInputError
from ..layers import LayerProfile
from ..models.layer_costs import layer_profile
from ..models.spec import ModelSpec
from ..plan import Recompute

__all__ = ["SHAPE_FIELDS", "Mix", "MixCosts", "read_mix", "parse_mix", "mix_costs"]

#: The per-sample shape fields a mix may name: the presets' shape options.
SHAPE_FIELDS: tuple[str, ...] = tuple(presets.OPTION_LIMITS)
_AMOUNTS = ("count", "weight")


@dataclass(frozen=True)
class Mix:
    """Shapes and how often each occurs.

    Attributes:
        fields: the shape fields the mix names (a subset of :data:`SHAPE_FIELDS`, file order).
        shapes: per row, ``{field: value}``.
        weights: per row, its probability (they sum to 1).
        counts: per row, the sample count the file gave, or ``None`` for a ``weight`` column.
        source: the file (or ``"<mix>"``) the mix came from, for messages.
    """

    fields: tuple[str, ...]
    shapes: tuple[Mapping[str, int], ...]
    weights: tuple[float, ...]
    counts: tuple[int, ...] | None
    source: str = "<mix>"

    def label(self, index: int) -> str:
        """``"cameras=2"`` for row ``index``."""
        return ",".join(f"{key}={value}" for key, value in self.shapes[index].items()) or "default"


def _field_name(raw: str) -> str:
    return raw.strip().lower().replace("-", "_")


def parse_mix(rows: Sequence[Mapping[str, Any]], *, source: str = "<mix>") -> Mix:
    """A :class:`Mix` from rows of ``{field: value}`` (a CSV's or a JSON list's), validated.

    Raises:
        InvalidInputError: no rows; a field that is neither a shape field nor ``count``/``weight``;
            neither or both of ``count`` and ``weight``; rows with different fields; a shape value
            that is not an integer in 1..:data:`pipeplan.presets.OPTION_LIMITS`; a count that is not
            a positive integer or a weight that is not a positive finite number; a shape twice.
    """
    if not rows:
        raise InvalidInputError(f"mix {source}: no rows; give a header such as cameras,count and one row per shape")
    header: list[str] | None = None
    shapes: list[dict[str, int]] = []
    amounts: list[float] = []
    amount_key = ""
    seen: dict[tuple[int, ...], int] = {}
    for number, raw in enumerate(rows, start=1):
        where = f"mix {source} row {number}"
        if not isinstance(raw, Mapping):
            raise InvalidInputError(f"{where}: expected an object of fields, got {raw!r}")
        row = {_field_name(str(key)): value for key, value in raw.items()}
        if header is None:
            header = list(row)
            unknown = [key for key in header if key not in SHAPE_FIELDS and key not in _AMOUNTS]
            if unknown:
                raise InvalidInputError(f"{where}: unknown field {unknown[0]!r}; shape fields: "
                                        f"{', '.join(SHAPE_FIELDS)}, plus count or weight")
            given = [key for key in _AMOUNTS if key in header]
            if len(given) != 1:
                raise InvalidInputError(f"{where}: give exactly one of count or weight, got "
                                        f"{' and '.join(given) or 'neither'}")
            amount_key = given[0]
        elif set(row) != set(header):
            missing = sorted(set(header) - set(row)) or sorted(set(row) - set(header))
            raise InvalidInputError(f"{where}: field {missing[0]!r} is not in every row; every row names "
                                    f"{', '.join(header)}")
        shape: dict[str, int] = {}
        for key in header:
            if key == amount_key:
                continue
            shape[key] = _shape_value(where, key, row[key])
        amounts.append(_amount(where, amount_key, row[amount_key]))
        signature = tuple(shape[key] for key in shape)
        if signature in seen:
            raise InvalidInputError(f"{where}: the same shape as row {seen[signature]} "
                                    f"({', '.join(f'{k}={v}' for k, v in shape.items())}); merge the rows")
        seen[signature] = number
        shapes.append(shape)
    assert header is not None
    total = math.fsum(amounts)
    return Mix(fields=tuple(key for key in header if key != amount_key), shapes=tuple(shapes),
               weights=tuple(amount / total for amount in amounts),
               counts=tuple(int(a) for a in amounts) if amount_key == "count" else None, source=source)


def _shape_value(where: str, key: str, value: object) -> int:
    limit = presets.OPTION_LIMITS[key]
    number = _number(value)
    if number is None or number != int(number) or not 1 <= number <= limit:
        raise InvalidInputError(f"{where}: {key} must be an integer in 1..{limit}, got {value!r}")
    return int(number)


def _amount(where: str, key: str, value: object) -> float:
    number = _number(value)
    if key == "count":
        if number is None or number != int(number) or number < 1:
            raise InvalidInputError(f"{where}: count must be a positive integer (samples of this shape), got {value!r}")
    elif number is None or not math.isfinite(number) or number <= 0:
        raise InvalidInputError(f"{where}: weight must be a positive number, got {value!r}")
    assert number is not None
    return number


def _number(value: object) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            return None
    return None


def read_mix(path: str | os.PathLike[str]) -> Mix:
    """The :class:`Mix` of a ``.csv`` or ``.json`` file (JSON when the text starts with ``[`` or ``{``)."""
    text = read_text(path, "mix file")
    source = os.fspath(path)
    stripped = text.lstrip()
    if stripped.startswith(("[", "{")):
        try:
            payload = json.loads(text)
        except json.JSONDecodeError as error:
            raise InvalidInputError(f"mix {source}: not valid JSON at line {error.lineno}: {error.msg}") from None
        if isinstance(payload, Mapping):
            if "rows" not in payload:
                raise InvalidInputError(f"mix {source}: a JSON object needs a \"rows\" list")
            payload = payload["rows"]
        if not isinstance(payload, list):
            raise InvalidInputError(f"mix {source}: expected a JSON list of rows, got {type(payload).__name__}")
        return parse_mix(payload, source=source)
    reader = csv.reader(io.StringIO(text))
    lines = [line for line in reader if any(cell.strip() for cell in line)]
    if not lines:
        raise InvalidInputError(f"mix {source}: no rows")
    header = [_field_name(cell) for cell in lines[0]]
    rows: list[dict[str, str]] = []
    for number, line in enumerate(lines[1:], start=1):
        if len(line) != len(header):
            raise InvalidInputError(f"mix {source} row {number}: {len(line)} values for {len(header)} fields "
                                    f"({','.join(header)})")
        rows.append(dict(zip(header, line)))
    if not rows:
        raise InvalidInputError(f"mix {source}: a header ({','.join(header)}) but no rows")
    return parse_mix(rows, source=source)


@dataclass(frozen=True)
class MixCosts:
    """What one sample of each shape of a mix costs on one device.

    Attributes:
        mix: the mix.
        model: the preset name (or the builder's name).
        profiles: per shape, the :class:`~pipeplan.layers.LayerProfile` of ONE sample (ms per
            layer and bytes crossing a cut after it: the profile at ``micro_batch_size``
            samples divided by it; its activation bytes stay the whole microbatch's).
        sample_ms: per shape, forward + full backward of one sample, summed over layers (ms).
        module_ms: per shape, ``{module: ms}`` (forward + backward of one sample per module;
            a joint layer ``a+b`` counts under ``a+b``).
    """

    mix: Mix
    model: str
    profiles: tuple[LayerProfile, ...]
    sample_ms: tuple[float, ...]
    module_ms: tuple[Mapping[str, float], ...]

    @property
    def mean_ms(self) -> float:
        """The expected cost of one sample drawn from the mix (ms)."""
        return float(np.dot(self.mix.weights, self.sample_ms))

    def draw(self, samples: int, *, seed: int | np.random.Generator = 0) -> np.ndarray:
        """Shape indices of ``samples`` samples drawn independently from the mix's weights."""
        rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
        return rng.choice(len(self.sample_ms), size=samples, p=np.asarray(self.mix.weights))

    def costs_of(self, shape_indices: Sequence[int] | np.ndarray) -> np.ndarray:
        """Per sample, its cost (ms), for samples given by shape index."""
        return np.asarray(self.sample_ms)[np.asarray(shape_indices, dtype=int)]

    def stage_ms(self, layers_per_stage: Sequence[int]) -> np.ndarray:
        """``[shape, stage]``: forward + backward of one sample of each shape on each pipeline stage (ms)."""
        forward, backward = self.stage_forward_backward(layers_per_stage)
        return forward + backward

    def stage_forward_backward(self, layers_per_stage: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        """``([shape, stage], [shape, stage])``: forward and full backward of one sample per shape and stage (ms)."""
        stages = [profile.stage_costs(layers_per_stage) for profile in self.profiles]
        return (np.stack([np.asarray(stage.forward) for stage in stages]),
                np.stack([np.asarray(stage.backward) for stage in stages]))


def mix_costs(model: str | Callable[..., ModelSpec], mix: Mix, *, device: str | hardware.Device = "h100-80g",
              micro_batch_size: int = 1, recompute: Recompute | Mapping[str, Recompute] | None = None,
              tensor_parallel: int = 1, sequence_parallel: bool = False) -> MixCosts:
    """Per-shape sample costs of ``model`` (a preset name, or a builder taking the shape fields) on ``device``.

    ``recompute``: a mode for every module, or ``None`` for the model's reference recipe
    (``"none"`` where it has none), as ``pipeplan plan`` does by default; ``tensor_parallel``
    and ``sequence_parallel`` as in :func:`~pipeplan.models.layer_costs.layer_profile`.

    Raises:
        InvalidInputError: a shape field the preset does not take, or a value it refuses
            (the message names the mix's file and row).
    """
    chip = hardware.device(device) if isinstance(device, str) else device
    if micro_batch_size < 1:
        raise InvalidInputError(f"micro_batch_size must be >= 1, got {micro_batch_size}")
    name = model if isinstance(model, str) else getattr(model, "__name__", "model")
    if isinstance(model, str):
        allowed = presets.options(model)
        for key in mix.fields:
            if key not in allowed:
                has = ", ".join(allowed) or "none"
                raise InvalidInputError(f"mix {mix.source}: field {key!r} is not a shape option of preset "
                                        f"{model!r} (its options: {has})")
    profiles: list[LayerProfile] = []
    module_ms: list[dict[str, float]] = []
    for index, shape in enumerate(mix.shapes, start=1):
        try:
            spec = presets.get(model, **shape) if isinstance(model, str) else model(**shape)
        except InvalidInputError as error:
            raise InvalidInputError(f"mix {mix.source} row {index}: {error}") from None
        mode: Recompute | Mapping[str, Recompute]
        if recompute is not None:
            mode = recompute
        elif spec.training is None:
            mode = "none"
        else:
            mode = {module.name: spec.training.mode_of(module.name) for module in spec.modules}
        batch = layer_profile(spec, chip, micro_batch_size, recompute=mode, tensor_parallel=tensor_parallel,
                              sequence_parallel=sequence_parallel)
        scale = 1.0 / micro_batch_size
        profile = batch.replaced(forward=[f * scale for f in batch.forward],
                                 backward=[b * scale for b in batch.backward],
                                 weight=[w * scale for w in batch.weight],
                                 send_bytes=[size * scale for size in batch.send_bytes])
        per_module: dict[str, float] = {}
        for layer, f, b in zip(profile.names, profile.forward, profile.backward):
            key = layer.rsplit(".", 1)[0]
            per_module[key] = per_module.get(key, 0.0) + f + b
        profiles.append(profile)
        module_ms.append(per_module)
    sample = tuple(float(np.sum(p.forward) + np.sum(p.backward)) for p in profiles)
    return MixCosts(mix=mix, model=name, profiles=tuple(profiles), sample_ms=sample, module_ms=tuple(module_ms))
