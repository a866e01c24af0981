"""The ``ds_config.json`` keys pipeplan knows, section by section, and DeepSpeed's defaults for the ones it reads.

    from pipeplan.engines._deepspeed_keys import DEFAULTS, IGNORED_KEYS, READ_KEYS, REMOVED_KEYS
    "stage" in READ_KEYS["zero_optimization"]        # True: it becomes dp_mode
    "optimizer" in IGNORED_KEYS[""]                  # True: listed as not priced
    DEFAULTS["zero_optimization.stage"]              # 0
    REMOVED_KEYS["amp"]                              # 'NVIDIA Apex AMP (use bf16 or fp16)': refused

The reader (:mod:`.deepspeed_config`) checks a file's keys against these lists and
re-exports the public ones; tests/test_engines_deepspeed_read.py checks each list against
the installed DeepSpeed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["READ_KEYS", "IGNORED_KEYS", "DEFAULTS", "OFFLOAD_DEVICES", "REMOVED_KEYS", "REMOVED_ZERO_KEYS"]

# pipeplan's own key lists, written by hand, by section ("" is the top level; "bf16" also stands for its
# old name "bfloat16"). Names from DeepSpeed 0.19.8: deepspeed/runtime/constants.py (the top level),
# runtime/zero/config.py DeepSpeedZeroConfig, zero/offload_config.py DeepSpeedZeroOffload*Config and
# precision_config.py DeepSpeedBF16Config / DeepSpeedFP16Config. tests/test_engines_deepspeed_read.py
# checks each against the installed DeepSpeed; DeepSpeed's complete key sets are not copied here: a key
# of neither list is listed in ``ignored`` "(not a key pipeplan knows; not priced)" (DeepSpeed's pydantic
# models refuse it inside a section when it runs), unless it is a near miss of a known one.
#: The keys the reader turns into fields, or reads for a note.
READ_KEYS: Mapping[str, frozenset[str]] = {
    "": frozenset({"train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
                   "zero_optimization", "bf16", "bfloat16", "fp16", "activation_checkpointing", "torch_autocast",
                   "communication_data_type"}),
    "zero_optimization": frozenset({"stage", "overlap_comm", "reduce_bucket_size", "offload_param",
                                    "offload_optimizer", "cpu_offload", "cpu_offload_param",
                                    "zero_hpz_partition_size", "contiguous_gradients", "prefetch_bucket_size",
                                    "stage3_prefetch_bucket_size", "max_live_parameters",
                                    "stage3_max_live_parameters"}),
    "zero_optimization.offload_param": frozenset({"device"}),
    "zero_optimization.offload_optimizer": frozenset({"device"}),
    "bf16": frozenset({"enabled"}),
    "fp16": frozenset({"enabled"}),
}
#: Common keys the reader reads and lists as ignored (not priced), without checking their values.
IGNORED_KEYS: Mapping[str, frozenset[str]] = {
    "": frozenset({"gradient_clipping", "steps_per_print", "wall_clock_breakdown", "memory_breakdown",
                   "optimizer", "scheduler", "prescale_gradients", "gradient_predivide_factor",
                   "zero_allow_untested_optimizer", "zero_force_ds_cpu_optimizer", "data_types", "checkpoint", "dump_state", "flops_profiler", "tensorboard", "wandb",
                   "csv_monitor", "comms_logger", "aio", "data_efficiency", "compile", "pipeline"}),
    "zero_optimization": frozenset({
        "allgather_partitions", "allgather_bucket_size", "reduce_scatter",
        "round_robin_gradients", "load_from_fp32_weights", "elastic_checkpoint", "ignore_unused_parameters",
        "sub_group_size", "param_persistence_threshold",
        "stage3_param_persistence_threshold", "model_persistence_threshold", "stage3_model_persistence_threshold",
        "max_reuse_distance", "stage3_max_reuse_distance",
        "gather_16bit_weights_on_model_save", "stage3_gather_16bit_weights_on_model_save",
        "stage3_gather_fp16_weights_on_model_save", "zero_quantized_weights", "zero_quantized_gradients"}),
    "zero_optimization.offload_param": frozenset({"pin_memory", "nvme_path", "buffer_count", "buffer_size",
                                                  "max_in_cpu"}),
    "zero_optimization.offload_optimizer": frozenset({"pin_memory", "nvme_path", "buffer_count", "fast_init",
                                                      "ratio", "pipeline_read", "pipeline_write"}),
    "bf16": frozenset({"immediate_grad_update"}),
    "fp16": frozenset({"auto_cast", "loss_scale", "initial_scale_power", "loss_scale_window", "hysteresis",
                       "consecutive_hysteresis", "min_loss_scale"}),
}
#: The defaults the reader applies where the file leaves a key out (``"section.key"``), DeepSpeed's
#: model defaults. ``zero_optimization.overlap_comm`` follows DeepSpeed's rule instead (runtime/zero/config.py
#: ``overlap_comm_valid``: ``overlap_comm = stage == 3``); ``reduce_bucket_size`` has none here: the knob's
#: default (``pipeplan.engines.deepspeed.REDUCE_BUCKET_SIZE``) applies.
DEFAULTS: Mapping[str, Any] = {
    "zero_optimization.stage": 0, "zero_optimization.offload_param.device": "none",
    "zero_optimization.offload_optimizer.device": "none", "bf16.enabled": False, "fp16.enabled": False,
}
#: ``offload_*.device``: offload_config.py ``OffloadDeviceEnum``.
OFFLOAD_DEVICES = ("none", "cpu", "nvme")
#: Top-level keys of removed features DeepSpeed refuses, the common ones (deepspeed/runtime/config.py
#: ``_REMOVED_TOP_LEVEL_CONFIG_KEYS`` has more; the rest are listed as unknown).
REMOVED_KEYS: Mapping[str, str] = {
    "amp": "NVIDIA Apex AMP (use bf16 or fp16)", "elasticity": "elastic training",
    "sparse_attention": "Sparse Attention", "compression_training": "the compression library",
    "curriculum_learning": "top-level curriculum_learning (use data_efficiency.data_sampling.curriculum_learning)",
}
#: ``zero_optimization`` keys of removed features DeepSpeed refuses (config.py ``_REMOVED_ZERO_CONFIG_KEYS``): MiCS.
REMOVED_ZERO_KEYS: Mapping[str, str] = {
    "mics_shard_size": "MiCS sharding", "mics_hierarchical_params_gather": "MiCS sharding",
}

#: The batch keys and the field each fills (DeepSpeed's ``gradient_accumulation_steps`` is the pipeline
#: engine's number of microbatches, deepspeed/runtime/pipe/engine.py).
_BATCH = {"train_batch_size": "global_batch", "train_micro_batch_size_per_gpu": "micro_batch_size",
          "gradient_accumulation_steps": "num_microbatches"}
_TRAIN, _MICRO, _ACCUMULATION = _BATCH
#: The keys of each section that become fields (the reader lists every other key it reads as ignored).
_FIELDS: Mapping[str, frozenset[str]] = {
    "": frozenset({*_BATCH, "zero_optimization", "bf16", "bfloat16", "fp16", "communication_data_type"}),
    "zero_optimization": frozenset({"stage", "overlap_comm", "reduce_bucket_size", "contiguous_gradients",
                                    "prefetch_bucket_size", "stage3_prefetch_bucket_size", "max_live_parameters",
                                    "stage3_max_live_parameters"}),
    "bf16": frozenset({"enabled"}),
    "fp16": frozenset({"enabled"}),
}
#: How alike (difflib's ratio) an unknown key must be to a known one of its section to be refused as its
#: typo: the rule of the Megatron-LM and torchtitan readers (megatron_args.py, torchtitan_config.py).
_NEAR_MISS_CUTOFF = 0.9
_NOT_A_KEY = "(not a key pipeplan knows; not priced)"
_AUTO = "auto"
