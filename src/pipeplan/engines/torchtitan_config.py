"""Reads a user's torchtitan config (TOML release, or a Python config) back into pipeplan's fields.

    from pipeplan.engines.torchtitan_config import read_torchtitan_config
    config = read_torchtitan_config(Path("llama3_8b.toml"))
    config.value("tp"), config.source_of("tp")    # 2, 'llama3_8b.toml: [parallelism] tensor_parallel_degree = 2'
    config.model.name                              # 'llama3-8B' (torchtitan's flavour, built from its dimensions)

Three forms are read, none of them run:

* a TOML file of torchtitan's last TOML release (e347b1e5e). pipeplan checks the keys it knows,
  its own list written by hand (:data:`TOML_KEYS`, the keys it prices or maps, with their types and
  that release's defaults; :data:`IGNORED_KEYS`, common keys it lists as ignored): a value of the
  wrong type of a key it reads is refused (torchtitan's tyro only warns there and the run fails
  later), and so is a ``pipeline_parallel_schedule`` torch has no class for. A key or section one
  letter or so from a known one is refused as a typo ("did you mean"), as the Megatron-LM reader
  does; any other key is listed in ``ignored`` "(not a key pipeplan knows; not priced)" (torchtitan
  itself refuses a key its ``JobConfig`` lacks when it runs). Keys the file leaves out take that
  release's defaults (the source says so). ``[training] batch_size``, the name before
  ``local_batch_size``, is read as it with a note;
* the Python config pipeplan's torchtitan export writes (``PARALLELISM = {...}``,
  ``MICRO_BATCH_SIZE``, ``LAYERS_PER_STAGE``, ... as literals), and a user's own Python config
  function for torchtitan 0.3.0 or HEAD, read with :mod:`ast`: the literal keywords of
  ``ParallelismConfig(...)`` / ``TrainingConfig(...)``, assignments ``config.parallelism.KEY = ...``
  and ``activation_checkpoint`` set to ``FullAC.Config()``, ``SelectiveAC.Config()`` or ``None``;
  a value that is no literal is not read (one note names it), the fields pipeplan does not know are
  listed as for TOML (a near miss of one it knows is refused);
* the folder pipeplan's torchtitan export wrote (its ``torchtitan_config.py`` or ``torchtitan.toml``,
  and ``schedule.csv`` beside it).

A ``pipeline_parallel_schedule_csv`` is read from beside the file and its order named by
:func:`~pipeplan.engines.pipelining_read.recognise_schedule`. The model is torchtitan's
``[model] name`` / ``flavor`` where pipeplan knows the flavour (llama3 debugmodel, 8B, 70B,
405B); another model, a Python config, or pipeplan's own export (a stand-in base) gives no model
and a note. A JSON file (DeepSpeed) or a Megatron-LM line is refused with the option that takes it.
"""

from __future__ import annotations

import ast
import difflib
import json
import math
import sys
from pathlib import Path
from collections.abc import Iterable
from typing import Any

from ..errors import InvalidInputError
from ..models.modules import Embedding, LMHead, TransformerStack
from ..models.spec import ModelSpec
from ._torchtitan_schedules import pipeplan_schedule_name
from .pipelining_read import CSV_SCHEDULE, read_schedule_csv, recognise_schedule
from .run_config import RunConfig, Setting

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the tomli backport (a dependency there)
    import tomli as tomllib

__all__ = ["read_torchtitan_config", "llama3_spec", "LLAMA3_FLAVOURS", "TOML_COMMIT", "TOML_KEYS", "PYTHON_KEYS",
           "IGNORED_KEYS", "SINGLE_STAGE_SCHEDULES", "torchtitan_default_parts"]

#: torchtitan's llama3 flavours pipeplan builds: (dim, n_layers, n_heads, n_kv_heads, ffn_dim_multiplier,
#: multiple_of, vocab_size). pytorch/torchtitan e347b1e5e torchtitan/models/llama3/__init__.py (llama3_args)
#: and model/args.py (TransformerModelArgs defaults: vocab_size 128256, multiple_of 256, n_kv_heads None).
LLAMA3_FLAVOURS: dict[str, tuple[int, int, int, int | None, float | None, int, int]] = {
    "debugmodel": (256, 6, 16, None, None, 256, 2048),
    "8B": (4096, 32, 32, 8, 1.3, 1024, 128_256),
    "70B": (8192, 80, 64, 8, 1.3, 4096, 128_256),
    "405B": (16384, 126, 128, 8, 1.2, 4096, 128_256),
}

#: torchtitan's last release configured by TOML (pytorch/torchtitan, 2026-02-15).
TOML_COMMIT = "e347b1e5e"

#: The TOML keys the reader prices or maps: ``"section.key"`` → (the type as torchtitan writes it, the
#: default the reader applies where the file leaves the key out). pytorch/torchtitan e347b1e5e
#: torchtitan/config/job_config.py: ``Model`` (name, flavor), ``Training``, ``Parallelism``,
#: ``ActivationCheckpoint``. pipeplan's own list, written by hand; tests/test_engines_torchtitan_read.py
#: checks each against torchtitan 0.3.0's config dataclasses, and benchmarks/torchtitan_toml_fields.py
#: against a checkout of e347b1e5e.
TOML_KEYS: dict[str, tuple[str, Any]] = {
    "model.name": ("str", "llama3"),
    "model.flavor": ("str", "debugmodel"),
    "training.local_batch_size": ("int", 8),
    "training.global_batch_size": ("int", -1),
    "training.seq_len": ("int", 2048),
    "training.mixed_precision_param": ("Literal['bfloat16', 'float32']", "bfloat16"),
    "parallelism.data_parallel_replicate_degree": ("int", 1),
    "parallelism.data_parallel_shard_degree": ("int", -1),
    "parallelism.fsdp_reshard_after_forward": ("Literal['default', 'always', 'never']", "default"),
    "parallelism.tensor_parallel_degree": ("int", 1),
    "parallelism.pipeline_parallel_degree": ("int", 1),
    "parallelism.module_fqns_per_model_part": ("list[list[str]] | None", None),
    "parallelism.pipeline_parallel_first_stage_less_layers": ("int", 1),
    "parallelism.pipeline_parallel_last_stage_less_layers": ("int", 1),
    "parallelism.pipeline_parallel_layers_per_stage": ("int | None", None),
    "parallelism.pipeline_parallel_schedule": ("str", "1F1B"),
    "parallelism.pipeline_parallel_schedule_csv": ("str | None", ""),
    "parallelism.pipeline_parallel_microbatch_size": ("int", 1),
    "activation_checkpoint.mode": ("Literal['selective', 'full', 'memory_budget', 'none']", "selective"),
    "activation_checkpoint.selective_ac_option": ("str", "2"),
    "compile.enable": ("bool", False),  # [compile] enable (0.3.0 and HEAD: CompileConfig.enable): --compile
}
#: The keys of torchtitan's Python configs the reader reads that the TOML release does not have, and
#: their types: 0.3.0 (PyPI) torchtitan/config/configs.py ParallelismConfig.enable_sequence_parallel;
#: HEAD b5bcd76c the same file, batches in tokens (num_pp_microbatches, max_context_length,
#: num_tokens_per_microbatch_per_dp_rank, num_tokens_per_train_step). No default is applied.
PYTHON_KEYS: dict[str, str] = {
    "parallelism.enable_sequence_parallel": "bool",
    "parallelism.num_pp_microbatches": "int | None",
    "training.max_context_length": "int",
    "training.num_tokens_per_microbatch_per_dp_rank": "int",
    "training.num_tokens_per_train_step": "int",
}
#: Common TOML keys the reader reads and lists as ignored (logging, checkpoints, data, the optimizer,
#: compile, parallel features pipeplan does not price), without checking them. Names from
#: pytorch/torchtitan e347b1e5e torchtitan/config/job_config.py; any other key is listed too, with
#: "(not a key pipeplan knows; not priced)", unless it is a near miss of a key here or above.
IGNORED_KEYS: frozenset[str] = frozenset({
    "job.dump_folder", "job.description", "job.print_config",
    "profiling.enable_profiling", "profiling.save_traces_folder", "profiling.profile_freq",
    "profiling.enable_memory_snapshot", "profiling.save_memory_snapshot_folder",
    "metrics.log_freq", "metrics.enable_tensorboard", "metrics.save_tb_folder", "metrics.enable_wandb",
    "metrics.disable_color_printing",
    "model.hf_assets_path", "model.tokenizer_path", "model.converters",
    "optimizer.name", "optimizer.lr", "optimizer.eps", "optimizer.beta1", "optimizer.beta2",
    "optimizer.weight_decay", "optimizer.implementation",
    "lr_scheduler.warmup_steps", "lr_scheduler.decay_ratio", "lr_scheduler.decay_type",
    "lr_scheduler.min_lr_factor",
    "training.dataset", "training.dataset_path", "training.max_norm", "training.steps", "training.dtype",
    "training.mixed_precision_reduce", "training.gc_freq", "training.enable_cpu_offload",
    "parallelism.enable_async_tensor_parallel", "parallelism.disable_loss_parallel",
    "parallelism.context_parallel_degree", "parallelism.expert_parallel_degree",
    "parallelism.expert_tensor_parallel_degree",
    "checkpoint.enable", "checkpoint.folder", "checkpoint.interval", "checkpoint.last_save_model_only",
    "checkpoint.export_dtype", "checkpoint.async_mode", "checkpoint.keep_latest_k",
    "checkpoint.initial_load_path",
    "activation_checkpoint.memory_budget", "activation_checkpoint.debug", "activation_checkpoint.early_stop",
    "compile.components", "compile.backend",
    "comm.init_timeout_seconds", "comm.train_timeout_seconds", "debug.seed", "debug.deterministic",
    "validation.enable", "validation.freq", "validation.steps", "validation.dataset",
})
#: The torch schedules that run one stage per rank (subclasses of PipelineScheduleSingle,
#: torch/distributed/pipelining/schedules.py, torch 2.13); torchtitan gives the others two stages per rank.
SINGLE_STAGE_SCHEDULES = ("1F1B", "GPipe", "PipelineScheduleSingle")
#: torchtitan's older name of a key the reader reads, and its type.
_OLDER_NAMES = {"training.batch_size": "int"}
#: The TOML sections of the keys pipeplan knows (a scalar under such a name is refused).
_SECTIONS = frozenset(key.split(".", 1)[0] for key in (*TOML_KEYS, *IGNORED_KEYS))
#: How alike (difflib's ratio) an unknown key must be to a known one to be refused as its typo,
#: the Megatron-LM reader's rule (:mod:`pipeplan.engines.megatron_args`).
_NEAR_MISS_CUTOFF = 0.9
_NOT_A_KEY = "(not a key pipeplan knows; not priced)"
_CONFIG_CLASSES = {"ParallelismConfig": "parallelism", "TrainingConfig": "training", "CompileConfig": "compile"}
_PRECISION = {"bfloat16": "bf16", "float32": "fp32", "float16": "fp16"}
#: The keys whose values become fields; every other key a file sets is listed as ignored.
_READ = frozenset({
    "parallelism.tensor_parallel_degree", "parallelism.pipeline_parallel_degree",
    "parallelism.data_parallel_shard_degree", "parallelism.data_parallel_replicate_degree",
    "parallelism.pipeline_parallel_schedule", "parallelism.pipeline_parallel_schedule_csv",
    "parallelism.pipeline_parallel_microbatch_size", "parallelism.module_fqns_per_model_part",
    "parallelism.enable_sequence_parallel", "parallelism.num_pp_microbatches",
    "training.local_batch_size", "training.global_batch_size", "training.batch_size", "training.seq_len",
    "training.max_context_length", "training.num_tokens_per_microbatch_per_dp_rank",
    "training.num_tokens_per_train_step", "training.mixed_precision_param", "training.mixed_precision_reduce",
    "activation_checkpoint.mode", "activation_checkpoint.selective_ac_option", "model.name", "model.flavor",
    "compile.enable", "parallelism.fsdp_reshard_after_forward",
})

Values = dict[str, tuple[Any, str]]


# ------------------------------------------------------------------ the model
def _ffn_hidden(dim: int, multiple_of: int, multiplier: float | None) -> int:
    """torchtitan's SwiGLU width: ``int(2·4·dim/3)``, times the multiplier, rounded up to ``multiple_of``.

    torchtitan/models/llama3/model/model.py (FeedForward.__init__), e347b1e5e.
    """
    hidden = int(2 * (4 * dim) / 3)
    if multiplier is not None:
        hidden = int(multiplier * hidden)
    return multiple_of * math.ceil(hidden / multiple_of)


def llama3_spec(flavour: str, seq_length: int) -> ModelSpec:
    """torchtitan's llama3 ``flavour`` (a key of :data:`LLAMA3_FLAVOURS`) at ``seq_length`` tokens per sample.

    RoPE (no parameters), GQA, RMSNorm, a SwiGLU MLP, SDPA (flash) attention, causal, an
    untied output head; in torchtitan's module names (``tok_embeddings``, ``layers.N``,
    ``norm`` + ``output``: pipeplan's loss layer).
    """
    dim, layers, heads, kv, multiplier, multiple_of, vocab = LLAMA3_FLAVOURS[flavour]
    modules = (
        Embedding(name="tok_embeddings", vocab_size=vocab, hidden_size=dim, tokens=seq_length,
                  fqn=("tok_embeddings",), role="embedding"),
        TransformerStack(name="layers", num_layers=layers, hidden_size=dim, num_heads=heads, seq_length=seq_length,
                         ffn_hidden_size=_ffn_hidden(dim, multiple_of, multiplier), num_kv_heads=kv, gated_mlp=True,
                         norm="rmsnorm", causal=True, attention="flash", final_norm=True, fqn=("layers.{i}",),
                         role="decoder"),
        LMHead(name="output", vocab_size=vocab, hidden_size=dim, tokens=seq_length, fqn=("norm", "output"),
               role="loss"),
    )
    return ModelSpec(f"llama3-{flavour}", modules,
                     f"torchtitan llama3 {flavour} (torchtitan/models/llama3/__init__.py, {TOML_COMMIT})")


# ------------------------------------------------------------------ other engines' files
def _refuse_other_engine(path: Path, text: str) -> None:
    """One line for a DeepSpeed JSON given as a torchtitan config."""
    stripped = text.lstrip()
    if stripped.startswith("{"):
        try:
            json.loads(text)
        except ValueError:
            pass
        else:
            raise InvalidInputError(f"{path} is JSON, like a DeepSpeed ds_config.json: give it with --deepspeed-config")

def _refuse_megatron(path: Path, text: str) -> None:
    """One line for a Megatron-LM launch line (asked of a file that is neither TOML nor Python)."""
    if any(flag in text for flag in ("--tensor-model-parallel-size", "--pipeline-model-parallel-size",
                                     "--num-layers", "pretrain_gpt")):
        raise InvalidInputError(f"{path} looks like a Megatron-LM command line: give it with --megatron-args")


# ------------------------------------------------------------------ TOML
def _type_ok(annotation: str, value: Any) -> bool:
    """Whether ``value`` (as TOML parsed it) is of ``annotation`` (job_config.py's, as written)."""
    for alternative in _alternatives(annotation):
        if alternative == "int" and isinstance(value, int) and not isinstance(value, bool):
            return True
        if alternative == "float" and isinstance(value, (int, float)) and not isinstance(value, bool):
            return True
        if alternative == "bool" and isinstance(value, bool):
            return True
        if alternative == "str" and isinstance(value, str):
            return True
        if alternative.startswith("list[") and isinstance(value, list):
            if all(_type_ok(alternative[5:-1], item) for item in value):
                return True
        if alternative.startswith("Literal[") and value in ast.literal_eval("(" + alternative[8:-1] + ",)"):
            return True
        if alternative not in ("int", "float", "bool", "str", "None") and not alternative.startswith(
                ("list[", "Literal[")):
            return True  # an annotation this check does not model: take the value as torchtitan does
    return False


def _alternatives(annotation: str) -> list[str]:
    """``"int | None"`` → ``["int", "None"]`` (``|`` outside brackets only)."""
    parts, depth, current = [], 0, ""
    for char in annotation:
        depth += char == "["
        depth -= char == "]"
        if char == "|" and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += char
    return parts + [current.strip()]


def _near_miss(section: str, name: str, keys: Iterable[str]) -> str | None:
    """The key of ``section`` in ``keys`` (``"section.key"``) that ``name`` is a typo of, if any."""
    names = [key.split(".", 1)[1] for key in keys if key.split(".", 1)[0] == section]
    close = difflib.get_close_matches(name, names, n=1, cutoff=_NEAR_MISS_CUTOFF)
    return close[0] if close else None


def _toml_values(path: Path, data: dict[str, Any], unknown: set[str], prefix: str = "") -> Values:
    """Every key ``data`` sets: ``{"section.key": (value, source)}``; a key pipeplan does not know is
    added to ``unknown`` (a near miss of one it knows is refused, as is a wrong type of one it reads)."""
    values: Values = {}
    for key, value in data.items():
        where = f"{prefix}.{key}" if prefix else key
        annotation = TOML_KEYS[where][0] if where in TOML_KEYS else _OLDER_NAMES.get(where)
        if annotation is not None:
            if isinstance(value, dict) or not _type_ok(annotation, value):
                raise InvalidInputError(f"{path}: [{prefix}] {key} = {json.dumps(value)} is not {annotation}")
        elif isinstance(value, dict):
            if not prefix and key not in _SECTIONS:
                near = difflib.get_close_matches(key, sorted(_SECTIONS), n=1, cutoff=_NEAR_MISS_CUTOFF)
                if near:
                    raise InvalidInputError(f"{path}: [{key}] is not a section pipeplan knows (did you mean "
                                            f"[{near[0]}]?)")
            values.update(_toml_values(path, value, unknown, where))
            continue
        elif not prefix and key in _SECTIONS:
            raise InvalidInputError(f"{path}: {key} must be a [{key}] section, got {json.dumps(value)}")
        elif where in PYTHON_KEYS:
            raise InvalidInputError(f"{path}: [{prefix}] {key} is a key of torchtitan's Python configs; its TOML "
                                    f"release ({TOML_COMMIT}) has none")
        elif where not in IGNORED_KEYS:
            if prefix:
                section, name = where.split(".", 1)
                close = _near_miss(section, name, (*TOML_KEYS, *IGNORED_KEYS))
                if close is not None:
                    raise InvalidInputError(f"{path}: [{prefix}] {key} is not a key pipeplan knows (did you mean "
                                            f"{close}?)")
            unknown.add(where)
        values[where] = (value, f"{path.name}: [{prefix}] {key} = {json.dumps(value)}")
    return values


def _toml_default(key: str, file: str) -> tuple[Any, str]:
    """The TOML release's default for ``section.key`` (a key of :data:`TOML_KEYS`), with a source naming it."""
    section, name = key.split(".", 1)
    return TOML_KEYS[key][1], (f"torchtitan default ({file} does not set [{section}] {name}; torchtitan "
                               f"{TOML_COMMIT} torchtitan/config/job_config.py)")


# ------------------------------------------------------------------ Python
def _literal(node: ast.expr) -> tuple[bool, Any]:
    try:
        return True, ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError):
        return False, None


def _dotted(node: ast.expr) -> list[str]:
    """``config.parallelism.tensor_parallel_degree`` → ``["config", "parallelism", "tensor_parallel_degree"]``."""
    names: list[str] = []
    while isinstance(node, ast.Attribute):
        names.insert(0, node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        names.insert(0, node.id)
    return names


def _ac_mode(node: ast.expr) -> str | None:
    """``None`` / ``FullAC.Config()`` / ``SelectiveAC.Config()`` → ``"none"`` / ``"full"`` / ``"selective"``."""
    if isinstance(node, ast.Constant) and node.value is None:
        return "none"
    if isinstance(node, ast.Call):
        names = _dotted(node.func)
        if "FullAC" in names:
            return "full"
        if "SelectiveAC" in names:
            return "selective"
    return None


def _python_values(path: Path, tree: ast.Module, unread: list[str], unknown: set[str]) -> Values:
    """What a Python config sets, literals only (``unread``: what it sets that is no literal; ``unknown``:
    the keys of ``ParallelismConfig`` / ``TrainingConfig`` it sets that pipeplan does not know)."""
    name = path.name
    literals = {node.targets[0].id: node.value for node in tree.body
                if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)}
    values: Values = {}

    def put(key: str, node: ast.expr, shown: str) -> None:
        section, field_name = key.split(".", 1)
        known = key in TOML_KEYS or key in PYTHON_KEYS or key in IGNORED_KEYS
        if section in _CONFIG_CLASSES.values() and not known:
            close = _near_miss(section, field_name, (*TOML_KEYS, *PYTHON_KEYS, *IGNORED_KEYS))
            if close is not None:
                raise InvalidInputError(f"{name} line {node.lineno}: {field_name!r} is not a field of torchtitan's "
                                        f"{section} config pipeplan knows (did you mean {close}?)")
            unknown.add(key)
        ok, value = _literal(node)
        if not ok:
            unread.append(f"{shown} = {ast.unparse(node)} (line {node.lineno}) is no literal: not read")
            return
        expected = TOML_KEYS[key][0] if key in TOML_KEYS else PYTHON_KEYS.get(key)
        if expected is not None and not _type_ok(expected, value):
            raise InvalidInputError(f"{name} line {node.lineno}: {shown} = {ast.unparse(node)} is not {expected}")
        values[key] = (value, f"{name}: {shown} = {ast.unparse(node)}")

    if isinstance(literals.get("PARALLELISM"), ast.Dict):  # pipeplan's own export
        table = literals["PARALLELISM"]
        assert isinstance(table, ast.Dict)
        for key_node, value_node in zip(table.keys, table.values):
            if isinstance(key_node, ast.Constant) and isinstance(key_node.value, str):
                put(f"parallelism.{key_node.value}", value_node, f"PARALLELISM[{key_node.value!r}]")
        for constant, key in (("MICRO_BATCH_SIZE", "parallelism.pipeline_parallel_microbatch_size"),
                              ("LOCAL_BATCH_SIZE", "training.local_batch_size"),
                              ("GLOBAL_BATCH_SIZE", "training.global_batch_size"),
                              ("TOKENS_PER_SAMPLE", "training.seq_len"),
                              ("RECOMPUTE", "pipeplan.recompute"),
                              ("COMPILE", "compile.enable"),
                              ("LAYERS_PER_STAGE", "pipeplan.layers_per_stage")):
            if constant in literals and not (constant == "TOKENS_PER_SAMPLE" and _literal(literals[constant])[1] is None):
                put(key, literals[constant], constant)
        return values
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            names = _dotted(node.func)
            section = _CONFIG_CLASSES.get(names[-1] if names else "")
            for keyword in node.keywords:
                if section and keyword.arg:
                    put(f"{section}.{keyword.arg}", keyword.value, f"{names[-1]}({keyword.arg})")
                elif keyword.arg == "activation_checkpoint" and _ac_mode(keyword.value):
                    values["activation_checkpoint.mode"] = (_ac_mode(keyword.value),
                                                            f"{name}: activation_checkpoint={ast.unparse(keyword.value)}")
        elif isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = _dotted(node.targets[0])
            if len(target) >= 3 and target[-2] in _CONFIG_CLASSES.values():
                put(f"{target[-2]}.{target[-1]}", node.value, ".".join(target))
            elif target and target[-1] == "activation_checkpoint" and _ac_mode(node.value):
                values["activation_checkpoint.mode"] = (_ac_mode(node.value),
                                                        f"{name}: {'.'.join(target)} = {ast.unparse(node.value)}")
    if not values and not unread:
        raise InvalidInputError(f"{path}: no torchtitan setting found (ParallelismConfig(...), TrainingConfig(...) "
                                "or config.parallelism.KEY = ...)")
    return values


# ------------------------------------------------------------------ into pipeplan's fields
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
            self.set("compile", "on" if compiled[0] else "off", compiled[1])
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


def torchtitan_default_parts(stages: int, layers: int, first: int, last: int) -> list[list[str]]:
    """torchtitan's module lists for ``stages`` stages of a decoder of ``layers`` layers.

    The rule of torchtitan e347b1e5e ``generate_llm_fqn_per_model_part`` (distributed/pipeline_parallel.py):
    the embedding counts as ``first`` layers and ``norm`` + ``output`` as ``last``; the total is dealt
    evenly, the first stages one more where it does not divide.

    Raises:
        InvalidInputError: where torchtitan refuses the split (an empty stage, a weight above a stage's share).
    """
    if stages == 1:
        return [["tok_embeddings", *(f"layers.{i}" for i in range(layers)), "norm", "output"]]
    base, extra = divmod(layers + first + last, stages)
    if base == 0 or first > base or last > base:
        raise InvalidInputError(f"torchtitan cannot split {layers} layers (+{first} +{last}) into {stages} stages")
    parts: list[list[str]] = []
    current = 0
    for stage in range(stages):
        share = base + (stage < extra) - (first if stage == 0 else last if stage == stages - 1 else 0)
        taken = [f"layers.{i}" for i in range(current, min(layers, current + share))]
        current += len(taken)
        parts.append((["tok_embeddings"] if stage == 0 else []) + taken +
                     (["norm", "output"] if stage == stages - 1 else []))
    return parts


def _layers_in(part: list[str]) -> int:
    """pipeplan's layers in one model part: one per module path, torchtitan's final ``norm`` counted with the head."""
    heads = {"output", "lm_head"}
    return len(part) - (1 if "norm" in part and heads & set(part) else 0)


def _pick(path: Path) -> Path:
    """The config file in a folder pipeplan's export wrote (or the file itself)."""
    if not path.is_dir():
        return path
    for name in ("torchtitan_config.py", "torchtitan.toml"):
        if (path / name).is_file():
            return path / name
    tomls = sorted(path.glob("*.toml"))
    if len(tomls) == 1:
        return tomls[0]
    raise InvalidInputError(f"{path}: no torchtitan_config.py or torchtitan.toml (give the config file)")


def read_torchtitan_config(path: Path | str) -> RunConfig:
    """A torchtitan TOML or Python config (or the folder pipeplan's torchtitan export wrote), read.

    Raises:
        InvalidInputError: a near miss of a section or key pipeplan knows, a value of the wrong type
            of a key it reads, a schedule torch has no class for, a DeepSpeed or Megatron-LM file (one line).
    """
    given = Path(path)
    file = _pick(given)
    try:
        text = file.read_text()
    except (OSError, UnicodeDecodeError) as error:
        raise InvalidInputError(f"{file}: cannot read it ({error})") from None
    _refuse_other_engine(file, text)
    unread: list[str] = []
    unknown: set[str] = set()
    if file.suffix == ".py":
        try:
            tree = ast.parse(text, filename=str(file))
        except SyntaxError as error:
            _refuse_megatron(file, text)
            raise InvalidInputError(f"{file}: not Python ({error.msg}, line {error.lineno})") from None
        reader = _Reader(file, _python_values(file, tree, unread, unknown), toml=False, unknown=frozenset(unknown))
    else:
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as error:
            _refuse_megatron(file, text)
            raise InvalidInputError(f"{file}: not TOML ({error})") from None
        values = _toml_values(file, data, unknown)
        reader = _Reader(file, values, toml=True, pipeplan_toml=text.startswith("# pipeplan:"),
                         unknown=frozenset(unknown))
    reader.notes.extend(unread)
    config = reader.read()
    if given != file:
        return RunConfig(engine=config.engine, path=str(given), settings=config.settings, model=config.model,
                         model_source=config.model_source, ignored=config.ignored, notes=config.notes)
    return config
