"""The torchtitan config keys pipeplan knows, their types and defaults, and the checks against them.

    from pipeplan.engines._torchtitan_keys import TOML_KEYS, _near_miss, _type_ok
    TOML_KEYS["parallelism.pipeline_parallel_degree"]           # ('int', 1): its type and the release's default
    _type_ok("int | None", 4), _type_ok("int", True)            # (True, False): a TOML bool is no int
    _near_miss("parallelism", "tensor_paralel_degree", TOML_KEYS)   # 'tensor_parallel_degree'

pipeplan's own lists, written by hand: the keys of torchtitan's last TOML release
(:data:`TOML_KEYS`, :data:`IGNORED_KEYS`) and those only its Python configs have
(:data:`PYTHON_KEYS`), with their sources beside them. :func:`_type_ok` checks a value
against an annotation as job_config.py writes it; :func:`_near_miss` is the typo rule
(difflib's ratio 0.9, the Megatron-LM reader's). The TOML reader (:mod:`._torchtitan_toml`),
the Python reader (:mod:`._torchtitan_python`) and the fields (:mod:`._torchtitan_fields`)
read them; :mod:`.torchtitan_config` re-exports the public ones.
"""

from __future__ import annotations

import ast
import difflib
from collections.abc import Iterable
from typing import Any

__all__ = ["TOML_COMMIT", "TOML_KEYS", "PYTHON_KEYS", "IGNORED_KEYS", "SINGLE_STAGE_SCHEDULES", "Values"]

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
    "training.mixed_precision_reduce": ("Literal['float32']", "float32"),  # FSDP2's reduce_dtype: --grad-reduce-dtype
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
    # [compile] components: torch.compile's targets; without "loss", --compile model (0.2.2 job_config.py Compile,
    # 0.3.0 configs.py CompileConfig: default_factory=lambda: ["model", "loss"])
    "compile.components": ("list[str]", ["model", "loss"]),
    # the TOML release's Parallelism.enable_async_tensor_parallel (0.3.0 moved it to CompileConfig): --async-tp
    "parallelism.enable_async_tensor_parallel": ("bool", False),
}
#: The keys of torchtitan's Python configs the reader reads that the TOML release does not have, and
#: their types: 0.3.0 (PyPI) torchtitan/config/configs.py ParallelismConfig.enable_sequence_parallel;
#: HEAD b5bcd76c the same file, batches in tokens (num_pp_microbatches, max_context_length,
#: num_tokens_per_microbatch_per_dp_rank, num_tokens_per_train_step). No default is applied.
PYTHON_KEYS: dict[str, str] = {
    "parallelism.enable_sequence_parallel": "bool",
    "compile.enable_async_tensor_parallel": "bool",  # 0.3.0 configs.py CompileConfig: --async-tp
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
    "training.gc_freq", "training.enable_cpu_offload",
    "parallelism.disable_loss_parallel",
    "parallelism.context_parallel_degree", "parallelism.expert_parallel_degree",
    "parallelism.expert_tensor_parallel_degree",
    "checkpoint.enable", "checkpoint.folder", "checkpoint.interval", "checkpoint.last_save_model_only",
    "checkpoint.export_dtype", "checkpoint.async_mode", "checkpoint.keep_latest_k",
    "checkpoint.initial_load_path",
    "activation_checkpoint.memory_budget", "activation_checkpoint.debug", "activation_checkpoint.early_stop",
    "compile.backend",
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
    "compile.enable", "compile.components", "parallelism.fsdp_reshard_after_forward",
    "parallelism.enable_async_tensor_parallel", "compile.enable_async_tensor_parallel",
})

Values = dict[str, tuple[Any, str]]


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
