"""A torchtitan config's ``section.key`` values turned into pipeplan's fields (a :class:`RunConfig`).

    from pathlib import Path
    from pipeplan.engines._torchtitan_fields import _Reader
    values = {"parallelism.tensor_parallel_degree": (2, "run.toml: [parallelism] tensor_parallel_degree = 2")}
    config = _Reader(Path("run.toml"), values, toml=True).read()
    config.value("tp"), config.value("pp")          # 2, 1 (the release's default, its source says so)

The degrees and data-parallel mode, the pipeline (schedule, virtual stages, layers per
stage: the file's module lists, a ``schedule.csv``, or torchtitan's own split), the batches
(in samples, or HEAD's tokens), recompute, sequence parallelism, compile, precision and the
gradient-reduction dtype, and the llama3 model where pipeplan knows its flavour. For a TOML
file a key left out takes the release's default (:func:`._torchtitan_toml._toml_default`).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from ..errors import InvalidInputError
from ..models.spec import ModelSpec
from ._torchtitan_keys import _NOT_A_KEY, _PRECISION, _READ, SINGLE_STAGE_SCHEDULES, TOML_KEYS, Values
from ._torchtitan_model import LLAMA3_FLAVOURS, _layers_in, llama3_spec, torchtitan_default_parts
from ._torchtitan_schedules import pipeplan_schedule_name
from ._torchtitan_toml import _toml_default
from .pipelining_read import CSV_SCHEDULE, read_schedule_csv, recognise_schedule
from .run_config import RunConfig, Setting

class _Reader:
    """Turns ``section.key`` values (and, for TOML, the release's defaults) into a RunConfig."""

    def __init__(self, path: Path, values: Values, *, toml: bool, pipeplan_toml: bool = False,
                 unknown: frozenset[str] = frozenset()) -> None:
        self.path, self.values, self.toml, self._pipeplan_toml = path, values, toml, pipeplan_toml
        self.unknown = unknown
        self.settings: dict[str, Setting] = {}
        self.notes: list[str] = []

    def get(self, key: str) -> tuple[Any, str] | None:
        """The file's value of ``key``, or (TOML) the release's default; ``None`` where neither."""
        if key in self.values:
            return self.values[key]
        if self.toml and key in TOML_KEYS:
            return _toml_default(key, self.path.name)
        return None

    def set(self, field: str, value: Any, source: str) -> None:
        self.settings[field] = Setting(value, source)

    def read(self) -> RunConfig:
        tp, pp = self.get("parallelism.tensor_parallel_degree"), self.get("parallelism.pipeline_parallel_degree")
        for field, got in (("tp", tp), ("pp", pp)):
            if got is not None:
                if got[0] < 1:
                    raise InvalidInputError(f"{got[1]}: must be at least 1")
                self.set(field, got[0], got[1])
        dp = self._data_parallel()
        if tp is not None and pp is not None and dp is not None:
            sources = [tp[1], pp[1], self.settings["dp_mode"].source] if "dp_mode" in self.settings else [tp[1], pp[1]]
            self.set("gpus", dp * tp[0] * pp[0], "; ".join(dict.fromkeys(sources)) + " (dp × tp × pp)")
        pipeline = pp[0] if pp is not None else 1
        if pipeline > 1:
            self._pipeline(pipeline)
        self._batches(pipeline, dp)
        self._recompute()
        if tp is not None and tp[0] > 1 and (sp := self.get("parallelism.enable_sequence_parallel")) is not None:
            self.set("sequence_parallel", "on" if sp[0] else "off", sp[1])
        if (compiled := self.get("compile.enable")) is not None:  # torch.compile: the --compile knob
            components = self.get("compile.components")  # torchtitan's default ["model", "loss"]
            listed = components[0] if components is not None and isinstance(components[0], list) else None
            if compiled[0] and listed is not None and "model" not in listed:
                # the blocks run eager (the loss alone compiled: no knob value says so): priced as eager kernels
                self.set("compile", "off", f"{compiled[1]}; {components[1] if components else ''}")
                self.notes.append(f"{components[1] if components else 'compile.components'} compiles no model: the "
                                  "blocks are priced as eager kernels and the loss as eager")
            elif compiled[0] and listed is not None and "loss" not in listed:
                self.set("compile", "model", f"{compiled[1]}; {components[1] if components else ''}")
            else:
                self.set("compile", "on" if compiled[0] else "off", compiled[1])
        model_compiled = self.settings.get("compile") is not None and self.settings["compile"].value in ("on", "model")
        self._async_tp(tp[0] if tp is not None else 1, model_compiled)
        if (param := self.get("training.mixed_precision_param")) is not None and param[0] in _PRECISION:
            self.set("precision", _PRECISION[param[0]], param[1])
        if (reduce := self.get("training.mixed_precision_reduce")) is not None:  # FSDP2's reduce_dtype
            if reduce[0] == "float32":
                self.set("grad_reduce_dtype", "fp32", reduce[1])
            elif isinstance(reduce[0], str):  # 0.3.0 configs.py: mixed_precision_reduce: Literal["float32"]
                raise InvalidInputError(f"{reduce[1]}: torchtitan takes float32 only (pipeplan's --grad-reduce-dtype "
                                        "fp32)")
            else:
                self.notes.append(f"{reduce[1]} is not a dtype: not priced")
        model, model_source = self._model()
        ignored = tuple(f"{key} = {json.dumps(value)}" + (f" {_NOT_A_KEY}" if key in self.unknown else "")
                        for key, (value, _) in self.values.items()
                        if key not in _READ and not key.startswith("pipeplan."))
        return RunConfig(engine="torchtitan", path=str(self.path), settings=self.settings, model=model,
                         model_source=model_source, ignored=ignored, notes=tuple(self.notes))

    def _async_tp(self, tp: int, compiled: bool) -> None:
        """async_tp (the --async-tp knob) from either release's key, at tp > 1; torchtitan refuses it without
        compile (0.3.0 configs.py CompileConfig.__post_init__), and so does pipeplan."""
        item = self.get("compile.enable_async_tensor_parallel") or self.get("parallelism.enable_async_tensor_parallel")
        if item is None or not isinstance(item[0], bool):
            return
        if item[0] and not compiled:
            raise InvalidInputError(f"{item[1]}: async TP needs compile.enable with \"model\" in compile.components "
                                    "(torchtitan refuses it without the model compiled)")
        if tp > 1:
            self.set("async_tp", "on" if item[0] else "off", item[1])

    def _data_parallel(self) -> int | None:
        """Sets dp_mode from the shard and replicate degrees; the data-parallel width where they fix it."""
        shard, replicate = (self.get("parallelism.data_parallel_shard_degree"),
                            self.get("parallelism.data_parallel_replicate_degree"))
        if shard is None and replicate is None:
            return None
        shard_v = -1 if shard is None else shard[0]
        replicate_v = 1 if replicate is None else replicate[0]
        source = "; ".join(s for s in (shard and shard[1], replicate and replicate[1]) if s)
        if shard_v == 0 or shard_v < -1 or replicate_v < 1:
            raise InvalidInputError(f"{source}: data-parallel degrees must be positive (shard -1: the ranks left)")
        if shard_v == -1:
            self.set("dp_mode", "hsdp" if replicate_v > 1 else "fsdp", source)
            self.notes.append("data_parallel_shard_degree -1 shards over the ranks left: the world size is not "
                              "fixed by the file (give --gpus)")
            return None
        if shard_v > 1:
            self.set("dp_mode", "hsdp" if replicate_v > 1 else "fsdp", source)
        elif replicate_v > 1:
            self.set("dp_mode", "ddp", source)
        reshard = self.values.get("parallelism.fsdp_reshard_after_forward")
        if reshard is not None and shard_v > 1:  # the --reshard-after-forward knob (FSDP/HSDP only)
            self.set("reshard_after_forward", reshard[0], reshard[1])
            if reshard[0] == "never":
                self.notes.append("fsdp_reshard_after_forward 'never' keeps parameters gathered from each layer's "
                                  "forward to its backward (how pipeplan exports zero1/zero2 too): priced as fsdp "
                                  "that gathers once a microbatch")
        return shard_v * replicate_v

    def _pipeline(self, pp: int) -> None:
        """schedule, virtual_stages and layers_per_stage."""
        parts = self.get("parallelism.module_fqns_per_model_part")
        name = self.get("parallelism.pipeline_parallel_schedule")
        csv = self.get("parallelism.pipeline_parallel_schedule_csv")
        ours = None if name is None else pipeplan_schedule_name(name[0])  # refuses a name torch lacks, CSV or not
        if parts is not None and parts[0]:
            stages = len(parts[0])
            if stages % pp:
                raise InvalidInputError(f"{parts[1]}: {stages} model parts do not divide into pipeline degree {pp}")
            self.set("virtual_stages", stages // pp, parts[1])
            if "pipeplan.layers_per_stage" in self.values:
                counts, source = self.values["pipeplan.layers_per_stage"]
                self.set("layers_per_stage", tuple(counts), source)
            else:
                self.set("layers_per_stage", tuple(_layers_in(part) for part in parts[0]), parts[1])
                if self._decoder_layers() is None and not self._pipeplan_toml:
                    self.notes.append("layers per stage counted as one pipeplan layer per module path (norm with "
                                      "the output head): check them against your model's layers")
        else:
            self._default_split(pp, name)
        if csv is not None and csv[0]:
            self._schedule_csv(csv)
        elif name is not None:
            if ours is None:
                self.notes.append(f"{name[1]}: pipeplan has no schedule for torch's {name[0]}: give --schedule")
            else:
                self.set("schedule", ours, name[1])
                if ours == "zb-v" and "virtual_stages" not in self.settings:
                    self.set("virtual_stages", 2, name[1])

    def _default_split(self, pp: int, name: tuple[Any, str] | None) -> None:
        """torchtitan's own stages where the file lists no modules: how many, and (a known model) their layers.

        torchtitan e347b1e5e torchtitan/distributed/pipeline_parallel.py (pipeline_llm): with
        ``pipeline_parallel_layers_per_stage`` K, ⌈(layers + first-stage weight + last-stage weight) / K⌉
        stages; without it, one stage per rank for a single-stage schedule (1F1B, GPipe), two for the
        others; the stages' layers as ``generate_llm_fqn_per_model_part`` deals them.
        """
        schedule = name[0] if name is not None else "1F1B"
        single = schedule.lower() in {name.lower() for name in SINGLE_STAGE_SCHEDULES}
        per_stage = self.get("parallelism.pipeline_parallel_layers_per_stage")
        first = self.get("parallelism.pipeline_parallel_first_stage_less_layers") or (1, "")
        last = self.get("parallelism.pipeline_parallel_last_stage_less_layers") or (1, "")
        layers = self._decoder_layers()
        if per_stage is not None and per_stage[0] is not None:
            if layers is None:
                self.notes.append(f"{per_stage[1]}: the stages it makes depend on the model's layers: layers per "
                                  "stage left open (give --preset or --spec)")
                return
            stages = math.ceil((layers + first[0] + last[0]) / per_stage[0])
            if stages % pp or (single and stages != pp) or (not single and stages < 2 * pp):
                raise InvalidInputError(f"{per_stage[1]}: makes {stages} stages of the model's {layers} layers, "
                                        f"which {schedule} cannot place on {pp} ranks (torchtitan refuses it)")
            source = per_stage[1]
        else:
            stages = pp * (1 if single else 2)
            source = (f"torchtitan's default for {schedule} ({'one stage' if single else 'two stages'} per rank; "
                      "the file sets no module_fqns_per_model_part)")
        self.set("virtual_stages", stages // pp, source)
        if layers is not None:
            parts = torchtitan_default_parts(stages, layers, first[0], last[0])
            self.set("layers_per_stage", tuple(_layers_in(part) for part in parts),
                     f"torchtitan's split of the model's {layers} layers into {stages} stages "
                     "(generate_llm_fqn_per_model_part)")

    def _decoder_layers(self) -> int | None:
        """The decoder layers of the model the file names, where pipeplan knows it."""
        name, flavour = self.get("model.name"), self.get("model.flavor")
        if self.toml and not self._pipeplan_toml and name is not None and flavour is not None \
                and name[0] == "llama3" and flavour[0] in LLAMA3_FLAVOURS:
            return LLAMA3_FLAVOURS[flavour[0]][1]
        return None

    def _schedule_csv(self, csv: tuple[Any, str]) -> None:
        where = Path(csv[0]) if Path(csv[0]).is_absolute() else self.path.parent / csv[0]
        if not where.is_file():
            where = self.path.parent / Path(csv[0]).name
        if not where.is_file():
            self.notes.append(f"{csv[1]}: no such file beside {self.path.name}: the schedule is left open")
            return
        order = read_schedule_csv(where)
        name = recognise_schedule(order)
        if name is None:
            self.notes.append(f"{where.name} is an order none of pipeplan's fixed schedules writes: its schedule "
                              f"is {CSV_SCHEDULE!r}")
        self.set("schedule", name or CSV_SCHEDULE,
                 csv[1] + (f" (the order pipeplan's {name} writes)" if name else " (an order of its own)"))

    def _batches(self, pp: int, dp: int | None) -> None:
        """micro_batch_size, num_microbatches, global_batch, seq_length, in samples."""
        seq = self.get("training.seq_len")
        if "training.max_context_length" in self.values:
            seq = self.values["training.max_context_length"]
        if seq is not None and seq[0] is not None:
            self.set("seq_length", seq[0], seq[1])
        micro_tokens = self.values.get("training.num_tokens_per_microbatch_per_dp_rank")
        if micro_tokens is not None:  # torchtitan HEAD: batches in tokens
            self._token_batches(micro_tokens, seq, pp)
            return
        local = self.values.get("training.batch_size")
        if local is not None:
            self.notes.append(f"{local[1]}: torchtitan's name before local_batch_size, read as it")
        else:
            local = self.get("training.local_batch_size")
        glob = self.get("training.global_batch_size")
        if local is None:
            return
        if pp > 1:
            micro = self.get("parallelism.pipeline_parallel_microbatch_size") or (1, "torchtitan default")
            if local[0] % micro[0]:
                raise InvalidInputError(f"{local[1]}: not divisible by {micro[1]} (torchtitan refuses it)")
            self.set("micro_batch_size", micro[0], micro[1])
            per_rank, per_source = local[0] // micro[0], f"{local[1]} ÷ {micro[1]}"
        else:
            self.set("micro_batch_size", local[0], local[1])
            per_rank, per_source = 1, ""
        if glob is not None and glob[0] > 0:
            self.set("global_batch", glob[0], glob[1])
            if dp is not None:
                if glob[0] % (local[0] * dp):
                    raise InvalidInputError(f"{glob[1]}: not a multiple of local batch × data-parallel degree "
                                            f"({local[0]} × {dp}; torchtitan refuses it)")
                accumulation = glob[0] // (local[0] * dp)
                self.set("num_microbatches", per_rank * accumulation,
                         "; ".join(s for s in (per_source, glob[1]) if s) + f" (over {dp} data-parallel ranks)")
        else:
            if dp is not None:
                source = glob[1] if glob is not None else "torchtitan default"
                self.set("global_batch", local[0] * dp, f"{source}: -1, local batch × data-parallel degree")
            if pp > 1:
                self.set("num_microbatches", per_rank, per_source)

    def _token_batches(self, micro_tokens: tuple[Any, str], seq: tuple[Any, str] | None, pp: int) -> None:
        if seq is None or not seq[0]:
            self.notes.append(f"{micro_tokens[1]}: batches in tokens without a literal max_context_length: "
                              "micro batch size left open")
            return
        self.set("micro_batch_size", micro_tokens[0] // seq[0], f"{micro_tokens[1]} ÷ {seq[1]}")
        step = self.values.get("training.num_tokens_per_train_step")
        if step is not None:
            self.set("global_batch", step[0] // seq[0], f"{step[1]} ÷ {seq[1]}")
        microbatches = self.values.get("parallelism.num_pp_microbatches")
        if microbatches is not None and pp > 1:
            self.set("num_microbatches", microbatches[0], microbatches[1])

    def _recompute(self) -> None:
        """recompute in the planner's modes: torchtitan's per-op policy is ``op``, its layer option ``every:N``."""
        if "pipeplan.recompute" in self.values:  # pipeplan's Python export: what its apply_plan() sets
            written, source = self.values["pipeplan.recompute"]
            runs = {"selective": "op", "op": "op", "none": "none", "full": "full"}.get(written)
            if runs is None and str(written).startswith("every:"):
                runs = "full"
                self.notes.append(f"{source}: torchtitan's Python configs have no layer option, apply_plan() runs "
                                  "full recompute on every block")
            if runs is None:
                raise InvalidInputError(f"{source}: not a recompute mode the export writes")
            if written == "selective":
                self.notes.append(f"{source}: torchtitan runs its per-op policy (op) for it")
            self.set("recompute", runs, source)
            return
        mode = self.get("activation_checkpoint.mode")
        if mode is None:
            return
        if mode[0] in ("none", "full"):
            self.set("recompute", mode[0], mode[1])
        elif mode[0] == "memory_budget":
            self.notes.append(f"{mode[1]}: torchtitan's memory-budget recompute is not priced: give --recompute")
        elif mode[0] == "selective":
            option = self.get("activation_checkpoint.selective_ac_option") if self.toml else None
            value = "op" if option is None else str(option[0])
            source = mode[1] + (f"; {option[1]}" if option is not None else "")
            if value == "op":
                self.set("recompute", "op", source)
            elif value.isdigit() and int(value) >= 1:  # torchtitan: full checkpointing of every Nth block
                self.set("recompute", f"every:{int(value)}", source)
            else:
                raise InvalidInputError(f"{source}: selective_ac_option must be \"op\" or a block count N")
        else:
            raise InvalidInputError(f"{mode[1]}: activation_checkpoint mode must be none, selective, full or "
                                    "memory_budget")

    def _model(self) -> tuple[ModelSpec | None, str]:
        if "pipeplan.layers_per_stage" in self.values or self.path.suffix == ".py":
            self.notes.append(
                "pipeplan's torchtitan export runs on a stand-in base configuration (llama3 debugmodel) you "
                "replace: give --preset or --spec" if "pipeplan.layers_per_stage" in self.values else
                f"{self.path.name} is a Python config: pipeplan does not run it to find the model: give --preset "
                "or --spec")
            return None, ""
        if self._pipeplan_toml:
            self.notes.append("pipeplan's torchtitan export names no model (torchtitan's default base, llama3 "
                              "debugmodel, stands in): give --preset or --spec")
            return None, ""
        name, flavour = self.get("model.name"), self.get("model.flavor")
        if name is None or flavour is None:
            return None, ""
        if name[0] != "llama3" or flavour[0] not in LLAMA3_FLAVOURS:
            self.notes.append(f"give --preset or --spec: pipeplan has no spec for {name[0]} {flavour[0]}")
            return None, ""
        seq = self.settings["seq_length"].value if "seq_length" in self.settings else 2048
        return llama3_spec(flavour[0], seq), f"{name[1]}; {flavour[1]}"
