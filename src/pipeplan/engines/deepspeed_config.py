"""DeepSpeed's ``ds_config.json`` in pipeplan's vocabulary: the ZeRO stage of a data-parallel mode, and the reader.

    from pathlib import Path
    from pipeplan.engines.deepspeed_config import read_deepspeed_config, zero_stage, data_parallel_mode
    zero_stage("zero2"), data_parallel_mode(3)           # 2, 'fsdp'
    config = read_deepspeed_config(Path("ds_config.json"))   # or the folder `plan --export deepspeed` wrote
    config.value("dp_mode"), config.source_of("dp_mode")     # 'zero2', 'ds_config.json: zero_optimization.stage = 2'

:func:`read_deepspeed_config` reads a user's ``ds_config.json`` (or the directory
pipeplan's DeepSpeed export wrote: ``ds_config.json`` beside ``pipeline_module.py``,
whose ``PIPEPLAN_PARTS`` literal fixes the pipeline, or ``deepspeed_train.py``, the
plain model: no pipeline) into a :class:`~pipeplan.engines.run_config.RunConfig`.
The keys it knows are pipeplan's own lists, written by hand (:data:`READ_KEYS`, the
keys it maps or reads for a note; :data:`IGNORED_KEYS`, common keys it lists as
ignored): a near miss of one (difflib's ratio 0.9, the Megatron-LM and torchtitan
readers' rule) is refused with "did you mean", any other key is listed in ``ignored``
"(not a key pipeplan knows; not priced)". The values it reads it checks as DeepSpeed
0.19.8 does (``deepspeed/runtime/config.py`` ``DeepSpeedConfig``, the pydantic models of
``deepspeed/runtime/zero/config.py``, ``zero/offload_config.py`` and
``precision_config.py``), refusing what DeepSpeed refuses: stage 4, bf16 with fp16,
batch sizes that do not add up, ZeRO 2/3 beside a pipeline, the common removed
features. tests/test_engines_deepspeed_read.py checks it against the installed
DeepSpeed. Differences, on purpose: an unknown key inside a section is listed (DeepSpeed's
models forbid extra keys: DeepSpeed refuses it when it runs), and a near miss of a known
top-level key is refused (DeepSpeed ignores it); ``"auto"`` values (the Hugging Face
Trainer fills them in before DeepSpeed reads the file) leave their field open with a
note; without the world size the batch keys are kept as given (DeepSpeed's rule
``train_batch_size = train_micro_batch_size_per_gpu × gradient_accumulation_steps ×
data-parallel size`` derives a missing one from the data-parallel size, which the check
supplies); and the file must be plain JSON (DeepSpeed parses it with hjson, which also
takes comments).

This module holds the file names, the ZeRO stage of each mode and the reader; the key
lists are :mod:`._deepspeed_keys`, the value checks :mod:`._deepspeed_values`, the file
loading :mod:`._deepspeed_files`.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .. import data_parallel
from ..errors import InvalidInputError
from ._deepspeed_files import _literals, _load, _parse_python
from ._deepspeed_keys import (_ACCUMULATION, _AUTO, _BATCH, _FIELDS, _MICRO, _NEAR_MISS_CUTOFF, _NOT_A_KEY, _TRAIN,
                              DEFAULTS, IGNORED_KEYS, OFFLOAD_DEVICES, READ_KEYS, REMOVED_KEYS, REMOVED_ZERO_KEYS)
from ._deepspeed_values import _elements, _flag, _json, _positive, _stage
from .run_config import RunConfig, Setting
from .record import GRAD_REDUCE_BYTES

__all__ = ["CONFIG_FILE", "PIPELINE_FILE", "TRAIN_FILE", "PARTS_NAME", "INTERVAL_NAME", "DEEPSPEED_SCHEDULES",
           "PIPELINE_MAX_STAGE", "READ_KEYS", "IGNORED_KEYS", "DEFAULTS", "OFFLOAD_DEVICES", "REMOVED_KEYS",
           "REMOVED_ZERO_KEYS", "zero_stage", "data_parallel_mode", "read_deepspeed_config"]

#: The files the DeepSpeed export writes (deepspeed.py) and the reader reads back.
CONFIG_FILE = "ds_config.json"
PIPELINE_FILE = "pipeline_module.py"
TRAIN_FILE = "deepspeed_train.py"
#: The literal in ``pipeline_module.py`` holding ``PipelineModule.parts`` (S + 1 offsets into the layer specs).
PARTS_NAME = "PIPEPLAN_PARTS"
#: The literal in ``pipeline_module.py`` holding ``PipelineModule(activation_checkpoint_interval=...)``.
INTERVAL_NAME = "ACTIVATION_CHECKPOINT_INTERVAL"

#: DeepSpeed's pipeline engine runs its own 1F1B-like ``TrainSchedule`` only (deepspeed/runtime/pipe/schedule.py).
DEEPSPEED_SCHEDULES = ("1f1b",)
#: the highest ZeRO stage DeepSpeed's pipeline engine runs (``PipelineEngine.__init__`` asserts ``stage < 2``)
PIPELINE_MAX_STAGE = 1


def zero_stage(mode: str) -> int | None:
    """DeepSpeed's ``zero_optimization.stage`` for a data-parallel mode (its record in :mod:`pipeplan.data_parallel`).

    0: nothing sharded (DDP); 1: the optimizer state sharded (ZeRO-1); 2: the gradients too,
    reduce-scattered every microbatch (ZeRO-2); 3: the parameters too, gathered per layer
    (ZeRO-3, FSDP). ``None``: a mode DeepSpeed has no stage for — HSDP's shard inside a
    node replicated across nodes (ZeRO++'s ``zero_hpz_partition_size`` keeps a secondary
    copy of the weights per node but still shards the optimizer state over every rank).

    Raises:
        InvalidInputError: an unknown mode.
    """
    record = data_parallel.get(mode)
    if record.shards_within_node:
        return None
    if record.gathers_per_layer:
        return 3
    if record.reduces_every_microbatch:
        return 2
    return 1 if record.shards_state else 0


def data_parallel_mode(stage: int) -> str:
    """The data-parallel mode of ZeRO stage ``stage`` (0 → ``ddp`` ... 3 → ``fsdp``): :func:`zero_stage` inverted.

    Raises:
        InvalidInputError: a stage DeepSpeed does not have.
    """
    for mode in data_parallel.names():
        if zero_stage(mode) == stage:
            return mode
    raise InvalidInputError(f"zero_optimization.stage must be 0, 1, 2 or 3, got {stage!r}")


def read_deepspeed_config(path: Path) -> RunConfig:
    """The user's DeepSpeed configuration in ``path``: a ``ds_config.json``, or the folder the DeepSpeed export wrote.

    Fields: ``global_batch``, ``micro_batch_size`` and ``num_microbatches`` from the batch
    keys (as given; a missing one is left open, DeepSpeed derives it from the
    data-parallel size; ``gradient_accumulation_steps`` is 1 where only one of the other
    two is given, as DeepSpeed sets it), ``dp_mode`` from ``zero_optimization.stage``
    (default 0: ``ddp``; 3: ``fsdp``), ``precision`` from ``bf16``/``fp16`` (default
    fp32), ``overlap_comm`` (``"on"``/``"off"``) from ``zero_optimization.overlap_comm``
    (default DeepSpeed's: on at ZeRO-3 only), ``reduce_bucket_size`` (elements) from
    ``zero_optimization.reduce_bucket_size`` (left out: absent, the knob's default
    applies), ``contiguous_gradients`` (``"on"``/``"off"``), ``stage3_prefetch_bucket_size`` and
    ``stage3_max_live_parameters`` (elements; DeepSpeed's field names without ``stage3_`` too), each
    where given. Keys pipeplan does not know are listed in ``ignored``. From the folder also
    ``pp`` (``pipeline_module.py``'s ``PIPEPLAN_PARTS``, or 1 beside ``deepspeed_train.py``),
    ``layers_per_stage`` and ``schedule`` (``1f1b``) for pp > 1, and ``recompute`` (``ACTIVATION_CHECKPOINT_INTERVAL``: 0 none, else full).

    Raises:
        InvalidInputError: a file that is no DeepSpeed config (naming the option that takes
            it), a near miss of a key pipeplan knows, a removed feature's key, a value
            DeepSpeed refuses, batch sizes no data-parallel size reconciles, or a ZeRO stage
            its pipeline engine refuses.
    """
    reader = _Reader(path)
    return reader.run()


class _Reader:
    """One reading: the settings, ignored keys and notes as they are found."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.file = path / CONFIG_FILE if path.is_dir() else path
        self.name = self.file.name
        self.settings: dict[str, Setting] = {}
        self.ignored: list[str] = []
        self.notes: list[str] = []
        self.auto: list[str] = []

    def run(self) -> RunConfig:
        if self.path.is_dir() and not self.file.exists():
            raise InvalidInputError(f"{self.path} holds no {CONFIG_FILE} (the DeepSpeed export writes it there)")
        payload = _load(self.file)
        self._keys("", payload)
        self._batch(payload)
        stage = self._zero(payload)
        self._precision(payload)
        self._communication(payload)
        self._rest(payload)
        if self.path.is_dir():
            self._pipeline(stage)
        else:
            self.notes.append(f"{self.name} does not fix the pipeline (DeepSpeed's PipelineModule(num_stages=...) "
                              "is in your model code): pp is left open")
        if self.auto:
            keys = ", ".join(self.auto)
            self.notes.append(f"{self.name} leaves {keys} \"auto\" (the Hugging Face Trainer fills it in from its own "
                              "arguments): write the number there")
        return RunConfig("deepspeed", str(self.path), dict(self.settings), ignored=tuple(self.ignored),
                         notes=tuple(self.notes))

    # ------------------------------------------------------------------ settings
    def _set(self, field: str, value: Any, key: str, shown: Any) -> None:
        self.settings[field] = Setting(value, f"{self.name}: {key} = {_json(shown)}")

    def _default(self, field: str, value: Any, what: str) -> None:
        self.settings[field] = Setting(value, f"DeepSpeed default ({self.name} does not set {what})")

    def _batch(self, payload: Mapping[str, Any]) -> None:
        given: dict[str, int] = {}
        for key, field in _BATCH.items():
            raw = payload.get(key)
            if raw is None:
                continue
            if raw == _AUTO:
                self.auto.append(key)
                continue
            given[key] = _positive(f"{self.name}: {key}", raw)
            self._set(field, given[key], key, raw)
        train, micro, accumulation = (given.get(key) for key in _BATCH)
        if self.auto:
            return
        # DeepSpeedConfig._set_batch_related_parameters / _batch_assertion (deepspeed/runtime/config.py)
        if train is None and micro is None:
            raise InvalidInputError(f"{self.name} sets neither {_TRAIN} nor {_MICRO}: DeepSpeed needs one "
                                    "(is it a DeepSpeed config?)")
        if train is not None and micro is not None and accumulation is not None:
            if train % (micro * accumulation):
                raise InvalidInputError(
                    f"{self.name}: {_TRAIN} {train} is not {_MICRO} {micro} × {_ACCUMULATION} {accumulation} "
                    "× a data-parallel size (DeepSpeed asserts the product equals it)")
            self.notes.append(f"{self.name}'s batch sizes imply a data-parallel size of "
                              f"{train // (micro * accumulation)} ({_TRAIN} / ({_MICRO} × {_ACCUMULATION}))")
            return
        if train is not None and micro is not None:
            if train % micro:
                raise InvalidInputError(f"{self.name}: {_TRAIN} {train} is not a multiple of {_MICRO} {micro} "
                                        "(DeepSpeed asserts train = micro × accumulation × data-parallel size)")
            self.notes.append(f"DeepSpeed sets {_ACCUMULATION} to {_TRAIN} / ({_MICRO} × data-parallel size) = "
                              f"{train // micro} / dp: microbatches are left open")
        elif train is not None and accumulation is not None:
            if train % accumulation:
                raise InvalidInputError(f"{self.name}: {_TRAIN} {train} is not a multiple of {_ACCUMULATION} "
                                        f"{accumulation} (DeepSpeed asserts train = micro × accumulation × "
                                        "data-parallel size)")
            self.notes.append(f"DeepSpeed sets {_MICRO} to {_TRAIN} / ({_ACCUMULATION} × data-parallel size) = "
                              f"{train // accumulation} / dp: the micro batch is left open")
        elif micro is not None and accumulation is not None:
            self.notes.append(f"DeepSpeed sets {_TRAIN} to {_MICRO} × {_ACCUMULATION} × data-parallel size = "
                              f"{micro * accumulation} × dp: the global batch is left open")
        else:
            # one of train / micro alone: DeepSpeed sets gradient_accumulation_steps to 1
            self._default("num_microbatches", 1, f"{_ACCUMULATION} with only one of {_TRAIN} and {_MICRO}")
            other = _MICRO if micro is None else _TRAIN
            self.notes.append(f"DeepSpeed sets {other} from the data-parallel size ({_MICRO} × dp = {_TRAIN}): "
                              f"{_BATCH[other].replace('_', ' ')} is left open")

    def _keys(self, section: str, keys: Mapping[str, Any], kind: str | None = None) -> None:
        """Check the keys of ``section`` (``""``: the top level) against the keys pipeplan knows of ``kind``.

        A removed feature's key and a near miss of a known key are refused; a known key that
        becomes no field is listed as ignored (an offload section's keys: the section is listed
        as a whole); any other key is listed "(not a key pipeplan knows; not priced)".
        """
        kind = section if kind is None else kind
        prefix = f"{section}." if section else ""
        removed = REMOVED_KEYS if kind == "" else REMOVED_ZERO_KEYS if kind == "zero_optimization" else {}
        known = READ_KEYS[kind] | IGNORED_KEYS[kind]
        listed = known - _FIELDS.get(kind, known)
        for key in keys:
            if key in removed:
                raise InvalidInputError(f"{self.name}: {prefix}{key}: DeepSpeed removed {removed[key]} (its config "
                                        "refuses the key)")
            if key in listed:
                self.ignored.append(f"{prefix}{key}")
            elif key not in known:
                close = difflib.get_close_matches(key, sorted(known | set(removed)), n=1, cutoff=_NEAR_MISS_CUTOFF)
                if close:
                    raise InvalidInputError(f"{self.name}: {prefix}{key} is not a key pipeplan knows (did you mean "
                                            f"{close[0]}?)")
                self.ignored.append(f"{prefix}{key} {_NOT_A_KEY}")

    def _zero(self, payload: Mapping[str, Any]) -> int:
        zero = payload.get("zero_optimization")
        if zero is None:
            self._default("dp_mode", data_parallel_mode(0), "zero_optimization.stage: stage 0, nothing sharded")
            self._overlap({}, 0)
            return 0
        if not isinstance(zero, dict):
            raise InvalidInputError(f"{self.name}: zero_optimization must be an object ({{\"stage\": ...}}), "
                                    f"got {_json(zero)}")
        self._keys("zero_optimization", zero)
        raw = zero.get("stage")
        if raw is None:
            stage = DEFAULTS["zero_optimization.stage"]
            self._default("dp_mode", data_parallel_mode(stage), "zero_optimization.stage: stage 0, nothing sharded")
        else:
            stage = _stage(self.name, raw)
            self._set("dp_mode", data_parallel_mode(stage), "zero_optimization.stage", raw)
        self._overlap(zero, stage)
        self._bucket(zero)
        self._zero_knobs(zero, stage)
        for key, value in zero.items():
            if key in ("offload_param", "offload_optimizer") and value is not None:
                self._offload(key, value)
            elif key in ("cpu_offload", "cpu_offload_param") and value is True:
                self.notes.append(f"{self.name}: zero_optimization.{key} = true offloads to the CPU: pipeplan "
                                  "does not price CPU/NVMe offload (the step and memory are the GPU-only ones)")
        hpz = zero.get("zero_hpz_partition_size")
        if stage == 3 and isinstance(hpz, int) and not isinstance(hpz, bool) and hpz > 1:
            self.notes.append(f"ZeRO++ hpZ (zero_optimization.zero_hpz_partition_size = {hpz}) keeps a secondary "
                              f"copy of the weights sharded over {hpz} ranks but the optimizer state over every rank: "
                              "pipeplan prices it as fsdp (ZeRO-3), without the secondary copy")
        return stage

    def _overlap(self, zero: Mapping[str, Any], stage: int) -> None:
        """``overlap_comm`` (``"on"``/``"off"``), given or DeepSpeed's default for ``stage``."""
        key = "zero_optimization.overlap_comm"
        raw = zero.get("overlap_comm")
        if raw is None or raw == _AUTO:
            # deepspeed 0.19.8 runtime/zero/config.py: overlap_comm = None, then overlap_comm_valid sets it to
            # stage == 3 (DeepSpeedConfigModel drops an "auto" value first: the default)
            value = "on" if stage == 3 else "off"
            if raw is None:
                self._default("overlap_comm", value, f"{key}: on at ZeRO-3 only, stage {stage} here")
            else:
                self.settings["overlap_comm"] = Setting(
                    value, f"DeepSpeed default ({self.name} leaves {key} \"auto\", which DeepSpeed drops: on at "
                           f"ZeRO-3 only, stage {stage} here)")
            return
        self._set("overlap_comm", "on" if _flag(f"{self.name}: {key}", raw) else "off", key, raw)

    def _bucket(self, zero: Mapping[str, Any]) -> None:
        """``reduce_bucket_size`` in elements, where the file gives it (absent: the knob's default applies)."""
        key = "zero_optimization.reduce_bucket_size"
        if "reduce_bucket_size" not in zero:
            return
        raw = zero["reduce_bucket_size"]
        if raw == _AUTO:
            self.auto.append(key)
            return
        self._set("reduce_bucket_size", _elements(f"{self.name}: {key}", raw), key, raw)

    def _zero_knobs(self, zero: Mapping[str, Any], stage: int) -> None:
        """``contiguous_gradients`` (``"on"``/``"off"``) and ZeRO-3's ``stage3_prefetch_bucket_size`` /
        ``stage3_max_live_parameters`` (elements ≥ 0; DeepSpeed's field names without ``stage3_`` too), where the
        file gives them (absent: the knobs' defaults apply). The stage-3 sizes at another stage are read and noted:
        DeepSpeed uses them at ZeRO-3 only."""
        key = "zero_optimization.contiguous_gradients"
        raw = zero.get("contiguous_gradients")
        if raw == _AUTO:
            self.auto.append(key)
        elif raw is not None:
            self._set("contiguous_gradients", "on" if _flag(f"{self.name}: {key}", raw) else "off", key, raw)
        for field_name, alias in (("prefetch_bucket_size", "stage3_prefetch_bucket_size"),
                                  ("max_live_parameters", "stage3_max_live_parameters")):
            given = [name for name in (alias, field_name) if name in zero]
            if not given:
                continue
            if len(given) > 1:
                raise InvalidInputError(f"{self.name}: zero_optimization sets both {alias} and {field_name} (one "
                                        "field of DeepSpeed's): keep one")
            key = f"zero_optimization.{given[0]}"
            raw = zero[given[0]]
            if raw == _AUTO:
                self.auto.append(key)
                continue
            self._set(alias, _elements(f"{self.name}: {key}", raw, zero=True), key, raw)
            if stage != 3:
                self.notes.append(f"{self.name}: {key} applies at ZeRO-3 only (stage {stage} here): not priced")

    def _offload(self, key: str, value: Any) -> None:
        where = f"{self.name}: zero_optimization.{key}"
        if not isinstance(value, dict):
            raise InvalidInputError(f"{where} must be an object ({{\"device\": \"cpu\"}}), got {_json(value)}")
        self._keys(f"zero_optimization.{key}", value)
        device = value.get("device", DEFAULTS[f"zero_optimization.{key}.device"])
        if device not in OFFLOAD_DEVICES:
            raise InvalidInputError(f"{where}.device must be one of {', '.join(OFFLOAD_DEVICES)}, got {_json(device)}")
        if device != "none":
            self.notes.append(f"{where}.device = {device}: pipeplan does not price CPU/NVMe offload "
                              "(the step and memory are the GPU-only ones)")

    def _precision(self, payload: Mapping[str, Any]) -> None:
        # deepspeed/runtime/precision_config.py get_bfloat16_config: "bf16", else the old name "bfloat16"
        bf16_key = "bf16" if payload.get("bf16") is not None else "bfloat16"
        enabled: dict[str, Any] = {}
        for key, kind in ((bf16_key, "bf16"), ("fp16", "fp16")):
            section = payload.get(key)
            if section is None:
                continue
            if not isinstance(section, dict):
                raise InvalidInputError(f"{self.name}: {key} must be an object ({{\"enabled\": true}}), "
                                        f"got {_json(section)}")
            self._keys(key, section, kind)
            if "enabled" in section:
                value = section["enabled"]
                if value == _AUTO:
                    self.auto.append(f"{key}.enabled")
                elif not isinstance(value, bool):
                    raise InvalidInputError(f"{self.name}: {key}.enabled must be true or false, got {_json(value)}")
                enabled[key] = value
        on = [key for key, value in enabled.items() if value is True]
        if len(on) == 2:
            raise InvalidInputError(f"{self.name}: {on[0]}.enabled and fp16.enabled are both true "
                                    "(DeepSpeed asserts bfloat16 and fp16 cannot be enabled together)")
        if on:
            self._set("precision", "fp16" if on[0] == "fp16" else "bf16", f"{on[0]}.enabled", True)
        elif _AUTO in enabled.values():
            return
        elif enabled:
            shown = ", ".join(f"{key}.enabled = false" for key in enabled)
            self.settings["precision"] = Setting("fp32", f"{self.name}: {shown} (neither enabled: fp32)")
        else:
            self._default("precision", "fp32", "bf16.enabled or fp16.enabled")
        autocast = payload.get("torch_autocast")
        if isinstance(autocast, dict) and autocast.get("enabled") is True:
            self.notes.append(f"{self.name}: torch_autocast is enabled: pipeplan reads the precision from bf16 and "
                              "fp16 only (autocast's lower-precision matmuls are not priced)")

    def _communication(self, payload: Mapping[str, Any]) -> None:
        """``grad_reduce_dtype`` from ``communication_data_type`` where the file gives it (absent: left open).

        deepspeed 0.19.8 runtime/config.py ``get_communication_data_type``: ``fp32``, ``fp16`` or ``bf16``, any
        case; left out, the engine reduces in the training dtype (runtime/engine.py ``communication_data_type``).
        pipeplan prices fp32 and bf16 (``--grad-reduce-dtype``); fp16 is refused in one line.
        """
        raw = payload.get("communication_data_type")
        if raw is None:
            return
        value = raw.lower() if isinstance(raw, str) else raw
        if value not in GRAD_REDUCE_BYTES:
            why = ("pipeplan prices fp32 or bf16 gradient reduction (--grad-reduce-dtype), not fp16"
                   if value == "fp16" else "DeepSpeed takes fp16, bf16 or fp32")
            raise InvalidInputError(f"{self.name}: communication_data_type {_json(raw)}: {why}")
        self._set("grad_reduce_dtype", value, "communication_data_type", raw)

    def _rest(self, payload: Mapping[str, Any]) -> None:
        if "activation_checkpointing" in payload:
            self.notes.append(f"{self.name}'s activation_checkpointing configures deepspeed.checkpointing, which "
                              "your model code calls: it sets no recompute by itself")

    # ------------------------------------------------------------------ the export's python file
    def _pipeline(self, stage: int) -> None:
        module, train = self.path / PIPELINE_FILE, self.path / TRAIN_FILE
        if module.exists() and train.exists():
            raise InvalidInputError(f"{self.path} holds both {PIPELINE_FILE} (a pipeline) and {TRAIN_FILE} "
                                    "(no pipeline): keep the one you run")
        if train.exists():
            _parse_python(train)
            self.settings["pp"] = Setting(1, f"{TRAIN_FILE}: deepspeed.initialize on the plain model (no "
                                             "PipelineModule)")
            return
        if not module.exists():
            self.notes.append(f"{self.path} holds neither {PIPELINE_FILE} nor {TRAIN_FILE}: pp is left open")
            return
        literals = _literals(_parse_python(module))
        parts = literals.get(PARTS_NAME)
        if parts is None:
            self.notes.append(f"{PIPELINE_FILE} sets no {PARTS_NAME} = [...] (the list pipeplan's export writes): "
                              "pp is left open")
        else:
            if (not isinstance(parts, list) or len(parts) < 2 or parts[0] != 0
                    or not all(isinstance(p, int) and not isinstance(p, bool) for p in parts)
                    or any(b <= a for a, b in zip(parts, parts[1:]))):
                raise InvalidInputError(f"{PIPELINE_FILE}: {PARTS_NAME} must be increasing offsets from 0 (one more "
                                        f"than the stages), got {_json(parts)}")
            counts = tuple(b - a for a, b in zip(parts, parts[1:]))
            pp = len(counts)
            source = f"{PIPELINE_FILE}: {PARTS_NAME} = {_json(parts)}"
            self.settings["pp"] = Setting(pp, source)
            if pp > 1:
                self.settings["layers_per_stage"] = Setting(counts, source)
                self.settings["schedule"] = Setting(
                    DEEPSPEED_SCHEDULES[0], f"DeepSpeed's pipeline engine runs its 1F1B TrainSchedule only "
                                            f"({pp} stages in {PIPELINE_FILE})")
                if stage > PIPELINE_MAX_STAGE:
                    raise InvalidInputError(
                        f"{self.name}: zero_optimization.stage {stage} with a pipeline of {pp} stages "
                        f"({PIPELINE_FILE}): DeepSpeed's PipelineEngine runs ZeRO stage 0 or 1 only (it asserts "
                        "stage < 2)")
        interval = literals.get(INTERVAL_NAME)
        if interval is not None:
            if not isinstance(interval, int) or isinstance(interval, bool) or interval < 0:
                raise InvalidInputError(f"{PIPELINE_FILE}: {INTERVAL_NAME} must be an integer >= 0, got "
                                        f"{_json(interval)}")
            # PipelineModule checkpoints every `interval` layers whole (deepspeed/runtime/pipe/module.py forward)
            self.settings["recompute"] = Setting("full" if interval else "none",
                                                 f"{PIPELINE_FILE}: {INTERVAL_NAME} = {interval}")
