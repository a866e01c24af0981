"""What a user's own engine configuration says, in pipeplan's vocabulary, each value with where it came from.

    from pipeplan import engines
    config = engines.get("deepspeed").read(Path("ds_config.json"))     # a RunConfig
    config.value("dp_mode")          # 'zero2'
    config.source_of("dp_mode")      # 'ds_config.json: zero_optimization.stage = 2'
    config.ignored                   # ('steps_per_print', 'wall_clock_breakdown'): read, not priced

Each engine's reader (:attr:`pipeplan.engines.Files.read`) turns the files a user keeps
(a Megatron-LM launch line, a DeepSpeed ``ds_config.json``, a torchtitan config) into a
:class:`RunConfig`: one :class:`Setting` per field of :data:`FIELDS` the files fix, in
the planner's own units and names (``dp_mode`` is ``"zero1"`` for Megatron-LM's
distributed optimizer, ``"fsdp"`` for DeepSpeed's ZeRO-3), plus the engine defaults the
reader applied for fields the files leave out (their source says so), the model where
the files describe one (Megatron-LM's GPT flags, a torchtitan flavour), and the keys the
files set that pipeplan reads but does not price. ``pipeplan check`` answers for it
(:mod:`pipeplan.check`). A key the engine does not have, or a value it refuses, is an
:class:`~pipeplan.errors.InvalidInputError` from the reader, one line naming the key.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import InvalidInputError
from ..models.spec import ModelSpec

__all__ = ["Setting", "RunConfig", "FIELDS"]

#: Every field a reader may set, and what its value is (the planner's names and units).
FIELDS: Mapping[str, str] = {
    "gpus": "int: the world size (ranks), where the files give it (a launcher's --nproc-per-node × --nnodes)",
    "gpus_per_node": "int: ranks per node, where the files give it",
    "tp": "int: tensor-parallel degree",
    "pp": "int: pipeline-parallel degree (1: no pipeline)",
    "virtual_stages": "int: model chunks per pipeline rank (Megatron-LM's virtual pipeline; 1: none)",
    "layers_per_stage": "tuple[int, ...]: pipeplan's layers (the model's Workload layers, embedding and head "
                        "included) per stage, stage 0 first, pp·v entries, where the files fix the split "
                        "(absent: the engine's own default split)",
    "schedule": "str: a pipeline schedule of pipeplan.schedules ('1f1b', 'interleaved', 'zb-v', ...)",
    "micro_batch_size": "int: samples per microbatch per data-parallel rank",
    "global_batch": "int: samples per optimizer step, all ranks together",
    "num_microbatches": "int: microbatches per step per data-parallel rank (gradient accumulation steps)",
    "dp_mode": "str: a data-parallel mode of pipeplan.data_parallel ('ddp', 'zero1', 'zero2', 'fsdp', 'hsdp')",
    "grad_sync": "str: how ddp/zero1/zero2 reduce gradients, one of pipeplan.planner.step.SYNCS",
    "recompute": "str: a mode of pipeplan.plan.check_recompute: 'none', 'selective' or 'full'; torchtitan's "
                 "'op' (its per-op policy) and 'every:N' (full on every Nth block); Megatron-LM's 'block:N' and "
                 "'uniform:N' (--recompute-method block|uniform --recompute-num-layers N)",
    "sequence_parallel": "str: 'on' or 'off'",
    "tp_comm_overlap": "str: 'off', 'backward' or 'on'",
    "precision": "str: 'bf16', 'fp16' or 'fp32' (parameters and activations)",
    "seq_length": "int: tokens per sample",
    "overlap_comm": "str: 'on' or 'off': DeepSpeed's zero_optimization.overlap_comm (its knob --overlap-comm)",
    "reduce_bucket_size": "int: elements per gradient bucket: DeepSpeed's zero_optimization.reduce_bucket_size "
                          "(its knob --reduce-bucket-size)",
    "compile": "str: 'on', 'model' or 'off': torch.compile of the model and loss, the model alone, or neither (torchtitan's compile.enable and compile.components; its knob --compile)",
    "async_tp": "str: 'on' or 'off': torch's async tensor parallelism (torchtitan's enable_async_tensor_parallel; "
                "its knob --async-tp)",
    "reshard_after_forward": "str: 'default', 'always' or 'never': FSDP2's reshard after forward (torchtitan's "
                             "parallelism.fsdp_reshard_after_forward; its knob --reshard-after-forward)",
    "contiguous_gradients": "str: 'on' or 'off': DeepSpeed's zero_optimization.contiguous_gradients (its knob "
                            "--contiguous-gradients)",
    "stage3_prefetch_bucket_size": "int: elements ZeRO-3 gathers ahead: DeepSpeed's "
                                   "zero_optimization.stage3_prefetch_bucket_size (its knob --stage3-prefetch-bucket-size)",
    "stage3_max_live_parameters": "int: elements ZeRO-3 keeps gathered at most: DeepSpeed's "
                                  "zero_optimization.stage3_max_live_parameters (its knob --stage3-max-live-parameters)",
    "bucket_cap_mb": "float: MiB per gradient bucket: DistributedDataParallel's bucket_cap_mb (plain torch's "
                     "knob --bucket-cap-mb)",
    "find_unused_parameters": "str: 'on' or 'off': DistributedDataParallel's find_unused_parameters (plain torch's "
                              "knob --find-unused-parameters)",
    "grad_reduce_dtype": "str: 'fp32' or 'bf16': the data-parallel gradient reduction's dtype (its knob "
                         "--grad-reduce-dtype: Megatron-LM's --grad-reduce-in-bf16, DeepSpeed's "
                         "communication_data_type, torchtitan's training.mixed_precision_reduce)",
}


@dataclass(frozen=True)
class Setting:
    """One value of a user's configuration and where it came from.

    Attributes:
        value: in the planner's names and units (see :data:`FIELDS`).
        source: where it was read, ``"FILE: KEY = VALUE"`` as the user wrote it, or
            ``"<engine> default (FILE does not set KEY)"`` where the reader applied the
            engine's own default.
    """

    value: Any
    source: str


@dataclass(frozen=True)
class RunConfig:
    """A user's engine configuration, read.

    Attributes:
        engine: the engine's registry name (``"megatron"``, ``"deepspeed"``, ``"torchtitan"``, ``"torch"``).
        path: the file (or directory) read, as given.
        settings: field of :data:`FIELDS` → its :class:`Setting`; a field the files leave
            open and the engine has no default for is absent (the check searches it, or
            takes it from the command line).
        model: the model the files describe (``None``: they describe none; give
            ``--preset`` or ``--spec``).
        model_source: where :attr:`model` came from (``"--num-layers 24 --hidden-size 2048 ..."``,
            ``"flavour 8B of llama3 (torchtitan/models/llama3/__init__.py)"``).
        ignored: keys the files set that pipeplan reads but does not price (logging,
            checkpointing, data paths), as the user wrote them.
        notes: what the reading approximated, one sentence each.
    """

    engine: str
    path: str
    settings: Mapping[str, Setting] = field(default_factory=dict)
    model: ModelSpec | None = None
    model_source: str = ""
    ignored: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        unknown = sorted(set(self.settings) - set(FIELDS))
        if unknown:
            raise ValueError(f"RunConfig fields {unknown} are not in FIELDS")

    def value(self, name: str, default: Any = None) -> Any:
        """The value of field ``name`` (``default`` when the files leave it open)."""
        setting = self.settings.get(name)
        return default if setting is None else setting.value

    def source_of(self, name: str) -> str:
        """Where field ``name`` came from (``""`` when the files leave it open)."""
        setting = self.settings.get(name)
        return "" if setting is None else setting.source

    def require(self, name: str, flag: str) -> Any:
        """The value of field ``name``.

        Raises:
            InvalidInputError: the files leave it open: one line naming ``flag``, the
                command-line option or file key that gives it.
        """
        setting = self.settings.get(name)
        if setting is None:
            raise InvalidInputError(f"{self.path} does not give {name.replace('_', ' ')}: give {flag}")
        return setting.value

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: ``engine``, ``path``, ``settings`` (``{field: {"value", "source"}}``), ``model``, ``ignored``, ``notes``."""
        return {
            "engine": self.engine,
            "path": self.path,
            "settings": {name: {"value": list(s.value) if isinstance(s.value, tuple) else s.value, "source": s.source}
                         for name, s in self.settings.items()},
            "model": None if self.model is None else {"name": self.model.name, "source": self.model_source},
            "ignored": list(self.ignored),
            "notes": list(self.notes),
        }
