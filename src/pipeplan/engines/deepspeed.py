"""DeepSpeed: ``ds_config.json``, and a ``PipelineModule`` with pipeplan's stage boundaries or a plain-model script.

    from pipeplan.engines.deepspeed import deepspeed_config, deepspeed_files, zero_stage
    zero_stage("zero2")       # 2: zero_optimization.stage of a data-parallel mode (None: DeepSpeed has none)
    deepspeed_config(plan)    # {"train_batch_size": 64, ..., "bf16": {"enabled": True}, "zero_optimization": {...}}
    deepspeed_files(plan)     # pp > 1: ds_config.json, pipeline_module.py; pp 1: ds_config.json, deepspeed_train.py
    ENGINE.read(folder)       # those files read back: a RunConfig (deepspeed_config.read_deepspeed_config)

What DeepSpeed accepts (deepspeed/runtime/pipe/module.py, pipe/engine.py, runtime/constants.py):
``PipelineModule`` splits by ``partition_method`` ``"uniform"``, ``"parameters"`` or
``"type:<regex>"``; explicit boundaries are its ``parts`` list (``S + 1`` offsets into
the layer specs), which a subclass sets in ``_partition_layers`` before calling
``_set_bounds``. One stage per rank, its own 1F1B-like ``TrainSchedule``.
``train_batch_size = train_micro_batch_size_per_gpu × gradient_accumulation_steps ×
data-parallel size`` (the pipeline engine's ``gradient_accumulation_steps`` is the
number of microbatches). ``PipelineEngine.__init__`` asserts
``zero_optimization_stage() < 2`` ("ZeRO-2 and ZeRO-3 are incompatible with pipeline
parallelism"): with ``pp > 1`` only DDP (stage 0) and ZeRO-1 run. Recompute is
``PipelineModule(activation_checkpoint_interval=1)`` (whole layers).

A plan without a pipeline (``pp = 1``) is no one-stage ``PipelineModule`` (the pipeline
engine is for ``pp > 1``): ``deepspeed_train.py`` calls ``deepspeed.initialize`` on the
plain model, where every ZeRO stage runs; ``engine.backward``/``engine.step`` per
microbatch accumulate ``gradient_accumulation_steps`` of them into one optimizer step.
Both configs carry ``bf16`` (the plans are timed and sized in bf16 with fp32 master
weights) and ``gradient_clipping`` 1.0 (Megatron-LM's ``--clip-grad`` default).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from .. import data_parallel
from ..errors import InvalidInputError
from ..plan import Plan
from ..schedule import Schedule
from ._common import ExportFile, one_stage_per_rank, recompute_notes, strongest_recompute, to_plan
from ._names import LayerName
from .deepspeed_config import (CONFIG_FILE, DEEPSPEED_SCHEDULES, INTERVAL_NAME, PARTS_NAME, PIPELINE_FILE,
                               PIPELINE_MAX_STAGE, TRAIN_FILE, read_deepspeed_config, zero_stage)
from ..plan import RECOMPUTE_MODES
from .record import BUCKET_TAG, GRAD_REDUCE_BYTES, Engine, Files, Knob, Knobs, NumberKnob, Pricing, Runs

__all__ = ["DEEPSPEED_SCHEDULES", "GRADIENT_CLIPPING", "zero_stage", "deepspeed_parts", "deepspeed_config",
           "deepspeed_snippet", "deepspeed_train_script", "deepspeed_files", "deepspeed_notes",
           "REDUCE_BUCKET_SIZE", "STAGE3_PREFETCH_BUCKET_SIZE", "STAGE3_MAX_LIVE_PARAMETERS", "BUCKET_BUFFER_BYTES",
           "FILE_KNOBS", "HOOK_US", "GPU_HOST_FACTOR", "ACCUMULATE_BYTES", "PIPELINE_FACTORS", "DEEPSPEED_KNOBS", "deepspeed_pricing", "ENGINE"]

#: ``gradient_clipping``: the global gradient norm clipped to (Megatron-LM's ``--clip-grad`` default, 1.0)
GRADIENT_CLIPPING = 1.0


def _modes(most: int) -> tuple[str, ...]:
    """The data-parallel modes whose ZeRO stage is at most ``most``."""
    return tuple(mode for mode in data_parallel.names() if (zero_stage(mode) is not None
                                                           and (zero_stage(mode) or 0) <= most))


def deepspeed_parts(plan: Plan | Sequence[int], *, offset: int = 0, trailing: int = 0) -> list[int]:
    """``PipelineModule.parts``: ``S + 1`` offsets into the layer specs.

    Args:
        plan: a Plan with one stage per rank.
        offset: specs before the first profiled layer that belong to stage 0
            (an embedding spec, a lambda), not in the profile.
        trailing: specs after the last profiled layer that belong to the last stage.
    """
    plan = to_plan(plan)
    one_stage_per_rank(plan, "DeepSpeed")
    if offset < 0 or trailing < 0:
        raise InvalidInputError(f"offset and trailing must be >= 0, got {offset} and {trailing}")
    parts = [0]
    for index, count in enumerate(plan.layers_per_stage):
        parts.append(parts[-1] + count + (offset if index == 0 else 0))
    parts[-1] += trailing
    return parts


def _check_runs(plan: Plan) -> None:
    if plan.pp > 1 and plan.schedule not in DEEPSPEED_SCHEDULES:
        raise InvalidInputError(
            f"DeepSpeed's pipeline engine runs its own 1F1B-like schedule, not {plan.schedule!r}; "
            "use the torch or torchtitan export for this plan"
        )
    stage = zero_stage(plan.dp_mode)
    if stage is None:
        raise InvalidInputError(
            f"DeepSpeed has no ZeRO stage for {plan.dp_mode!r} (a shard inside a node, replicated across nodes); "
            "torchtitan runs HSDP (--export torchtitan)"
        )
    if plan.pp > 1 and stage > PIPELINE_MAX_STAGE:
        raise InvalidInputError(
            f"DeepSpeed's pipeline engine runs ZeRO stage 0 or 1 only (PipelineEngine asserts stage < 2), not "
            f"{plan.dp_mode!r} (stage {stage}); torchtitan runs pipeline + {plan.dp_mode}, "
            "or plan with pp 1"
        )
    one_stage_per_rank(plan, "DeepSpeed")


def deepspeed_config(plan: Plan | Sequence[int], knobs: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The DeepSpeed config JSON entries for ``plan``: batch, bf16, clipping, ZeRO stage and recompute.

    ``train_batch_size`` is the plan's global batch, ``train_micro_batch_size_per_gpu`` its
    ``b`` and ``gradient_accumulation_steps`` its ``m`` (DeepSpeed checks
    ``b × m × dp = train_batch_size``). ``knobs``: the knobs given (name → value): ``contiguous-gradients``
    is written as ``zero_optimization.contiguous_gradients`` at ZeRO 1–3, the ``stage3-*`` sizes at ZeRO-3.

    Raises:
        InvalidInputError: a schedule other than 1F1B, a mode DeepSpeed has no stage for, or a
            ZeRO stage the pipeline engine refuses.
    """
    plan = to_plan(plan)
    _check_runs(plan)
    config: dict[str, Any] = {
        "train_batch_size": plan.global_batch,
        "train_micro_batch_size_per_gpu": plan.micro_batch_size,
        "gradient_accumulation_steps": plan.num_microbatches,
        "bf16": {"enabled": True},
        "gradient_clipping": GRADIENT_CLIPPING,
        "zero_optimization": {"stage": zero_stage(plan.dp_mode)},
    }
    stage = config["zero_optimization"]["stage"]
    sync, _, bucket = plan.grad_sync.partition(BUCKET_TAG)
    if sync == "deepspeed-overlap" and stage < 3:  # priced with --overlap-comm on (default off at ZeRO 1-2)
        config["zero_optimization"]["overlap_comm"] = True
    elif sync == "deepspeed" and stage == 3:  # priced with --overlap-comm off (default on at ZeRO-3)
        config["zero_optimization"]["overlap_comm"] = False
    if bucket:  # priced with --reduce-bucket-size (not DeepSpeed's default): the sync's name carries it
        config["zero_optimization"]["reduce_bucket_size"] = int(bucket)
    knobs = knobs or {}
    if "contiguous-gradients" in knobs and stage > 0:  # priced as given (its buffers with on)
        config["zero_optimization"]["contiguous_gradients"] = knobs["contiguous-gradients"] == "on"
    for knob in ("stage3-prefetch-bucket-size", "stage3-max-live-parameters"):
        if knob in knobs and stage == 3:
            config["zero_optimization"][knob.replace("-", "_")] = int(float(knobs[knob]))
    if plan.grad_reduce_dtype is not None:  # priced with --grad-reduce-dtype (runtime/config.py takes fp32, bf16)
        config["communication_data_type"] = plan.grad_reduce_dtype
    if strongest_recompute(plan) != "none":
        config["activation_checkpointing"] = {"partition_activations": False, "cpu_checkpointing": False,
                                              "contiguous_memory_optimization": False}
    return config


def deepspeed_snippet(plan: Plan | Sequence[int], *, offset: int = 0, trailing: int = 0) -> str:
    """``pipeline_module.py``: a ``PipelineModule`` subclass with pipeplan's boundaries."""
    plan = to_plan(plan)
    parts = deepspeed_parts(plan, offset=offset, trailing=trailing)
    interval = 1 if strongest_recompute(plan) != "none" else 0
    return (
        '"""pipeplan: a DeepSpeed PipelineModule whose stage boundaries are the plan\'s; config in ds_config.json."""\n'
        "from deepspeed.pipe import PipelineModule\n\n"
        f"{PARTS_NAME} = {parts}  # stage s builds layer specs [parts[s], parts[s + 1])\n"
        f"{INTERVAL_NAME} = {interval}\n\n\n"
        "class PlannedPipelineModule(PipelineModule):\n"
        '    """PipelineModule whose stage boundaries come from pipeplan."""\n\n'
        '    def _partition_layers(self, method="uniform"):\n'
        "        stage_id = self._topo.get_coord(self.global_rank).pipe\n"
        "        self.parts = list(PIPEPLAN_PARTS)\n"
        "        assert len(self.parts) == self._topo.get_dim('pipe') + 1\n"
        "        assert self.parts[-1] == len(self._layer_specs)\n"
        "        self._set_bounds(start=self.parts[stage_id], stop=self.parts[stage_id + 1])\n\n\n"
        "# deepspeed.init_distributed()  # before the PipelineModule is built\n"
        f"# model = PlannedPipelineModule(layers=specs, num_stages={len(parts) - 1}, loss_fn=loss_fn,\n"
        "#                                activation_checkpoint_interval=ACTIVATION_CHECKPOINT_INTERVAL)\n"
        '# engine, *_ = deepspeed.initialize(model=model, config="ds_config.json", model_parameters=...)\n'
        "# loss = engine.train_batch(data_iter)  # gradient_accumulation_steps (inputs, labels) microbatches, bf16\n"
    )


def deepspeed_train_script(plan: Plan | Sequence[int]) -> str:
    """``deepspeed_train.py`` for a plan without a pipeline: ``deepspeed.initialize`` on the plain model.

    The file's ``initialize(model)`` reads ``ds_config.json`` beside it; ``train_step(engine,
    microbatches, loss_fn)`` runs the config's ``gradient_accumulation_steps`` microbatches
    (``engine.backward`` and ``engine.step`` each; DeepSpeed steps the optimizer at the last)
    and returns their mean loss. ``build_model`` and ``microbatches`` are the user's.

    Raises:
        InvalidInputError: a plan with a pipeline (that is ``pipeline_module.py``), or one DeepSpeed cannot run.
    """
    plan = to_plan(plan)
    if plan.pp > 1:
        raise InvalidInputError(f"deepspeed_train.py is for a plan without a pipeline; this one has pp {plan.pp} "
                                "(pipeline_module.py)")
    config = deepspeed_config(plan)
    return f'''"""pipeplan: DeepSpeed without a pipeline: deepspeed.initialize on your plain model, config in ds_config.json.

Plan: dp {plan.dp} ({plan.dp_mode}: ZeRO stage {config["zero_optimization"]["stage"]}), {plan.micro_batch_size} samples \
× {plan.num_microbatches} microbatches per rank = {plan.global_batch} per step, bf16.
Launch: deepspeed --num_gpus {plan.num_gpus} deepspeed_train.py   (after replacing build_model and microbatches)
"""
import argparse
import os

import deepspeed
import torch

DS_CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ds_config.json")


def build_model():
    """Your model, whole (no pipeline): every layer of the plan on every rank."""
    raise NotImplementedError("pipeplan: build your model in build_model() (deepspeed_train.py)")


def make_optimizer(parameters):
    """Your optimizer (the plan's memory is mixed-precision Adam's)."""
    return torch.optim.AdamW(parameters, lr=1e-4)


def microbatches(engine, step):
    """Step ``step``'s gradient_accumulation_steps (input, target) pairs of train_micro_batch_size_per_gpu samples."""
    raise NotImplementedError("pipeplan: yield this rank's microbatches in microbatches() (deepspeed_train.py)")


def initialize(model, optimizer=None, config=DS_CONFIG):
    """deepspeed.initialize on the plain model with the plan's ZeRO stage, bf16 and batch sizes."""
    optimizer = make_optimizer(model.parameters()) if optimizer is None else optimizer
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
    return engine


def _to_engine(engine, value):
    dtype = torch.bfloat16 if engine.bfloat16_enabled() else None
    return value.to(engine.device, dtype=dtype if value.is_floating_point() else None)


def train_step(engine, batches, loss_fn):
    """One optimizer step over ``batches`` (gradient_accumulation_steps (input, target) pairs); their mean loss."""
    batches = list(batches)
    assert len(batches) == engine.gradient_accumulation_steps(), (len(batches), engine.gradient_accumulation_steps())
    losses = []
    for inputs, target in batches:
        loss = loss_fn(engine(_to_engine(engine, inputs)), _to_engine(engine, target))
        engine.backward(loss)  # scaled by 1 / gradient_accumulation_steps
        engine.step()          # the optimizer steps at the last microbatch only
        losses.append(loss.detach().float())
    return torch.stack(losses).mean()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--local_rank", type=int, default=-1)
    parser.add_argument("--steps", type=int, default=1)
    args, _ = parser.parse_known_args()
    deepspeed.init_distributed()
    engine = initialize(build_model())
    for step in range(args.steps):
        loss = train_step(engine, microbatches(engine, step), torch.nn.functional.mse_loss)
        print(f"step {{step}}: loss {{float(loss):.4g}}")
'''


def deepspeed_notes(plan: Plan | Sequence[int]) -> list[str]:
    """What the DeepSpeed export approximates of ``plan``."""
    plan = to_plan(plan)
    notes = recompute_notes(plan, "DeepSpeed")
    if strongest_recompute(plan) == "selective":
        notes.append("DeepSpeed checkpoints whole layers: selective recompute is exported as full")
    if plan.pp == 1 and strongest_recompute(plan) != "none":
        notes.append("without a pipeline DeepSpeed recomputes only where your model calls "
                     "deepspeed.checkpointing.checkpoint on each layer (ds_config.json configures it)")
    if plan.tp > 1:
        notes.append(f"DeepSpeed has no tensor parallelism of its own: tp {plan.tp} needs your model's TP layers "
                     "(e.g. Megatron-DeepSpeed) and a topology with a model axis")
    return notes


def deepspeed_files(plan: Plan | Sequence[int], knobs: Mapping[str, str] | None = None) -> list[ExportFile]:
    """``ds_config.json`` (with the ``knobs`` given it carries), then ``pipeline_module.py`` (pp > 1: the boundaries)
    or ``deepspeed_train.py`` (pp 1)."""
    plan = to_plan(plan)
    config = ExportFile(CONFIG_FILE, json.dumps(deepspeed_config(plan, knobs), indent=2) + "\n")
    if plan.pp == 1:
        return [config, ExportFile(TRAIN_FILE, deepspeed_train_script(plan))]
    return [config, ExportFile(PIPELINE_FILE, deepspeed_snippet(plan))]


def _write(plan: Plan, target: str, names: Sequence[LayerName] | None, *, schedule: Schedule | None,
           gpus_per_node: int) -> list[ExportFile]:
    return deepspeed_files(plan)


def _write_knobs(plan: Plan, target: str, names: Sequence[LayerName] | None, *, schedule: Schedule | None,
                 gpus_per_node: int, knobs: Mapping[str, str]) -> list[ExportFile]:
    """:func:`_write` with the knobs given that ``ds_config.json`` carries (:data:`FILE_KNOBS`)."""
    return deepspeed_files(plan, knobs)


#: the knobs ``ds_config.json`` carries where given (the others reach it through the plan: overlap_comm and
#: reduce_bucket_size through its gradient sync's name, communication_data_type through its reduce dtype)
FILE_KNOBS = ("contiguous-gradients", "stage3-prefetch-bucket-size", "stage3-max-live-parameters")


#: ``zero_optimization.reduce_bucket_size``'s default, in gradient **elements** (not bytes):
#: ``reduce_bucket_size: int = Field(pp_int(5e8), gt=0)``, deepspeed 0.19.8 runtime/zero/config.py
REDUCE_BUCKET_SIZE = 500_000_000

#: DeepSpeed's extra host time per trainable parameter tensor, µs, by ZeRO stage: (each microbatch's
#: backward, each optimizer step). Fitted to benchmarks/deepspeed_hooks.py, the rows of 2 gloo ranks
#: (docs/engines.md, "DeepSpeed's hook cost, measured": DeepSpeed 0.19.8 on a shared 2-core x86_64 host;
#: the columns "b: backward" and "b: step", a negative slope read as 0). At stages 1 and 2 the cost is
#: the gradient hooks (copy into the reduce bucket, bookkeeping), fired in every microbatch's backward;
#: at stage 0 it is the engine's per-tensor all-reduce bucketing in ``engine.step``; ZeRO-3 has both
#: (its step walks every partitioned tensor). Measured at 1 and 2 ranks only: more ranks take the
#: 2-rank value (the stages 0-2 rows do not grow from 1 to 2 ranks beyond the noise; ZeRO-3's does).
HOOK_US: dict[int, tuple[float, float]] = {0: (1.0, 21.0), 1: (39.0, 0.0), 2: (41.0, 0.0), 3: (83.0, 351.0)}

#: A GPU server's host relative to the measuring host, per tensor: 1.0. Basis: the hooks are the same
#: Python per tensor on either (a GPU run adds one copy-kernel launch per tensor, a few µs, and its tensors'
#: copies run on the GPU instead of this host's memcpy); the measuring host is a shared 2-core VM (load
#: 10.5), no faster per core than a training node's (BLOOM's: AMD EPYC 7543), so 1.0 is the high end.
#: Not fitted to any GPU run.
GPU_HOST_FACTOR = 1.0

#: Beside a pipeline (``pp > 1``), device-memory bytes DeepSpeed moves per trainable parameter in each
#: microbatch's backward to accumulate gradients, by ZeRO stage (the configs pipeplan writes are bf16).
#: Megatron-LM moves none: its weight-gradient GEMM accumulates into the fp32 ``main_grad`` in place
#: (``--gradient-accumulation-fusion``, on by default), and pipeplan prices none for it. DeepSpeed 0.19.8:
#: * stage 0 with bf16 runs ``BF16_Optimizer`` (runtime/engine.py ``_configure_optimizer``: no ZeRO and
#:   ``bfloat16_enabled()``). ``PipelineEngine._exec_backward_pass`` (runtime/pipe/engine.py) calls
#:   ``optimizer.clear_lp_grads()`` before each non-last stage's backward (``torch._foreach_zero_`` of the
#:   bf16 grads: 2 bytes written) and ``optimizer.update_hp_grads()`` after it (bf16_optimizer.py
#:   ``_update_hp_grad``: ``hp_grad.add_(lp.grad.to(fp32))``: 2 read + 4 read + 4 written): 12 bytes. The last
#:   stage runs ``DeepSpeedEngine.backward``, whose ``backward_prologue`` (``clear_lp_grads``) and
#:   ``_backward_epilogue`` (``backward_epilogue``: ``update_hp_grads``) do the same: charged alike.
#: * stage 1 (``DeepSpeedZeroOptimizer``): its gradient hooks (installed with ``overlap_comm`` only) do nothing
#:   before the accumulation boundary (stage_1_and_2.py ``reduce_ready_partitions_and_remove_grads``: only
#:   ``partition_gradients``, stage 2, or ``is_gradient_accumulation_boundary()`` reduce), so
#:   autograd accumulates each microbatch's bf16 gradient into ``param.grad`` (torch's ``AccumulateGrad``:
#:   ``grad += new``, 2 + 2 read, 2 written): 6 bytes (the first microbatch assigns instead: charged alike).
ACCUMULATE_BYTES: dict[int, float] = {0: 12.0, 1: 6.0}

#: The one fitted constant of DeepSpeed's pipeline engine, per device preset: a factor on each stage's
#: forward and backward time (its TP collectives included) beside a pipeline (``pp > 1``), for what the
#: pipeline engine's runs pay beyond what is priced. Fitted by ``python benchmarks/engine_fidelity.py
#: --fit-deepspeed`` to the four Megatron-DeepSpeed runs of docs/engines.md ("DeepSpeed": BLOOM 176B and
#: MT-NLG 530B at 280/350/420 nodes; the geometric mean of published / predicted step is 1). Those runs are
#: therefore fitted, not held out; the benchmark reports each one's error with the factor fitted to the other
#: three (leave one out). A device not listed: 1.
PIPELINE_FACTORS: dict[str, float] = {"a100-80g": 1.233}

#: ``zero_optimization.stage3_prefetch_bucket_size`` / ``stage3_max_live_parameters`` defaults, elements:
#: ``Field(pp_int(5e7), ge=0)`` and ``Field(pp_int(1e9), ge=0)``, deepspeed 0.19.8 runtime/zero/config.py
STAGE3_PREFETCH_BUCKET_SIZE = 50_000_000
STAGE3_MAX_LIVE_PARAMETERS = 1_000_000_000
#: bytes per element of DeepSpeed's contiguous gradient bucket (``_gradient_reduction_buffer_dtype``: the
#: parameters' dtype, bf16 in the configs pipeplan writes; stage3.py: the communication dtype, bf16 too)
BUCKET_BUFFER_BYTES = 2.0

#: DeepSpeed's knobs the step model prices (docs/engines.md, "DeepSpeed").
DEEPSPEED_KNOBS = Knobs((
    Knob("recompute", RECOMPUTE_MODES, None,
         "activation checkpointing (the pipeline engine's activation_checkpoint_interval, whole layers: full; "
         "Megatron-DeepSpeed's --recompute-granularity selective); not given: the planner searches none, "
         "selective and full per stage"),
    NumberKnob("overlap-comm", ("on", "off"), None,
               "zero_optimization.overlap_comm: on, the gradient buckets reduce on a side stream during the "
               "backward (ZeRO 1-2: buckets of --reduce-bucket-size; ZeRO-3: the reduce-scatters); off, on the "
               "compute stream, exposed. Beside a pipeline the engine reduces after the schedule either way; "
               "stage 0 always after the backward",
               assumed="DeepSpeed's default: off at ZeRO 1-2, on at ZeRO-3 (runtime/zero/config.py "
                       "overlap_comm_valid: overlap_comm = stage == 3)"),
    NumberKnob("reduce-bucket-size", (), str(REDUCE_BUCKET_SIZE),
               "zero_optimization.reduce_bucket_size in gradient elements: with overlap-comm on, the last bucket "
               "of the backward stays exposed", unit="elements", zero=False),
    NumberKnob("hook-cost", ("measured", "off"), "measured",
               "the host's time per trainable parameter tensor in DeepSpeed's gradient hooks and step: measured "
               "(benchmarks/deepspeed_hooks.py, by ZeRO stage), off, or µs per tensor per step; a layer's "
               "backward lasts the longer of its GPU time and its hooks' host time", unit="µs per tensor"),
    NumberKnob("contiguous-gradients", ("on", "off"), None,
               "zero_optimization.contiguous_gradients: on, each gradient is copied into a bucket buffer of "
               "reduce-bucket-size elements (bf16) held on every rank from the first backward, two with overlap-comm "
               "at ZeRO 1-2; off, no buffer (the bucket is flattened for its reduction instead, a copy either way: "
               "no time priced)",
               assumed="DeepSpeed's default on (runtime/zero/config.py contiguous_gradients = True): its bucket "
                       "buffers are priced"),
    NumberKnob("stage3-prefetch-bucket-size", (), None,
               "zero_optimization.stage3_prefetch_bucket_size, ZeRO-3 (fsdp) only: the parameter elements gathered "
               "ahead of the layer running (0: none), held in bf16 beside it",
               unit="elements",
               assumed=f"DeepSpeed's default, {STAGE3_PREFETCH_BUCKET_SIZE:g} elements (runtime/zero/config.py)"),
    NumberKnob("stage3-max-live-parameters", (), None,
               "zero_optimization.stage3_max_live_parameters, ZeRO-3 (fsdp) only: the prefetch stops where the "
               "gathered elements would pass it (the layer running is gathered whatever it says)",
               unit="elements",
               assumed=f"DeepSpeed's default, {STAGE3_MAX_LIVE_PARAMETERS:g} elements (runtime/zero/config.py)"),
    NumberKnob("grad-reduce-dtype", tuple(GRAD_REDUCE_BYTES), None,
               "communication_data_type: the dtype the gradients are all-reduced / reduce-scattered in "
               "(bf16: half the bytes of fp32; the replicated gradient buffer priced in it too)",
               assumed="each data-parallel mode's own: bf16 for ddp and zero2, fp32 for zero1 and fsdp "
                       "(DeepSpeed's own default is the training dtype, bf16 under bf16: runtime/engine.py "
                       "communication_data_type)"),
))


def deepspeed_pricing(knobs: Mapping[str, str]) -> Pricing:
    """What DeepSpeed's knobs (``name → value`` as given; absent: the defaults) change in a step.

    * ``overlap-comm``: ``ddp`` (stage 0) never overlaps (``engine.allreduce_gradients`` after the
      backward); ``zero1``/``zero2`` overlap when on (default off); ``fsdp`` (ZeRO-3) overlaps its
      reduce-scatters unless off (default on); beside a pipeline nothing overlaps
      (``PipelineEngine.is_gradient_accumulation_boundary`` is true only inside
      ``_exec_reduce_grads``, after the schedule: the hooks never reduce, pipe/engine.py).
    * ``reduce-bucket-size``: elements per bucket.
    * ``hook-cost``: :data:`HOOK_US` × :data:`GPU_HOST_FACTOR` per stage, 0, or the given µs per tensor
      per step split between backward and step as the stage's measurement splits it.
    * ``grad-reduce-dtype``: ``communication_data_type``'s bytes per gradient element, every stage
      (absent: each mode's own, :mod:`pipeplan.data_parallel`).
    * ``contiguous-gradients``: on (given, or DeepSpeed's default) its bucket buffers' bytes per rank
      (:func:`_bucket_buffers`); off: none.
    * ``stage3-prefetch-bucket-size`` / ``stage3-max-live-parameters`` (given, or DeepSpeed's defaults): ZeRO-3's
      parameters gathered ahead of the layer running (:func:`_gather_ahead`).
    * beside a pipeline (``pp > 1``, the pipeline engine): the gradient accumulation's
      :data:`ACCUMULATE_BYTES` per trainable parameter per microbatch (ZeRO 0 and 1, the stages it runs)
      and the fitted :data:`PIPELINE_FACTORS` per device (no knob).
    """
    overlap = knobs.get("overlap-comm")
    hook = knobs.get("hook-cost", "measured")
    bucket = float(knobs.get("reduce-bucket-size", REDUCE_BUCKET_SIZE))
    modes = [mode for mode in data_parallel.names() if zero_stage(mode) is not None]
    hooks = {}
    for mode in modes:
        backward, step = HOOK_US[zero_stage(mode) or 0]
        if hook == "off":
            backward = step = 0.0
        elif hook == "measured":
            backward, step = backward * GPU_HOST_FACTOR, step * GPU_HOST_FACTOR
        else:
            total = float(hook)
            backward, step = total * backward / (backward + step), total * step / (backward + step)
        hooks[mode] = (backward, step)
    return Pricing(
        sync="deepspeed",
        overlap={mode: overlap == "on" and zero_stage(mode) in (1, 2) for mode in modes
                 if not data_parallel.get(mode).gathers_per_layer},
        bucket_elements=float(knobs.get("reduce-bucket-size", REDUCE_BUCKET_SIZE)),
        overlap_in_pipeline=False,
        overlap_scatter={mode: overlap != "off" for mode in modes if data_parallel.get(mode).gathers_per_layer},
        hook_us=hooks,
        accumulate_bytes={mode: ACCUMULATE_BYTES[zero_stage(mode) or 0] for mode in modes
                          if (zero_stage(mode) or 0) in ACCUMULATE_BYTES},
        pipeline_factors=dict(PIPELINE_FACTORS),
        grad_reduce_bytes=GRAD_REDUCE_BYTES[knobs["grad-reduce-dtype"]] if "grad-reduce-dtype" in knobs else None,
        buffer_bytes=_bucket_buffers(knobs, modes, bucket),
        gather_ahead=_gather_ahead(knobs, modes),
    )


def _bucket_buffers(knobs: Mapping[str, str], modes: Sequence[str], bucket: float) -> dict[str, float]:
    """Per mode, the bytes of ``contiguous_gradients``' bucket buffers on each rank, where ``on`` (given, or DeepSpeed's
    default; deepspeed
    0.19.8: stage_1_and_2.py ``setup_buckets``, from the first gradient hook, which ZeRO 1 and 2 install whenever
    ``contiguous_gradients`` is on: one buffer of ``reduce_bucket_size`` elements per communication dtype, a second
    with ``overlap_comm``; stage3.py: one, whatever ``overlap_comm``). Stage 0 (``BF16_Optimizer``) has none."""
    if knobs.get("contiguous-gradients", "on") != "on":  # runtime/zero/config.py: contiguous_gradients = True
        return {}
    overlap = knobs.get("overlap-comm")
    buffers = {}
    for mode in modes:
        stage = zero_stage(mode) or 0
        if stage in (1, 2):
            buffers[mode] = bucket * BUCKET_BUFFER_BYTES * (2 if overlap == "on" else 1)
        elif stage == 3:
            buffers[mode] = bucket * BUCKET_BUFFER_BYTES
    return buffers


def _gather_ahead(knobs: Mapping[str, str], modes: Sequence[str]) -> dict[str, tuple[float, float]]:
    """Per ZeRO-3 mode, ``(prefetch elements, max live elements)``, each given or DeepSpeed's default:
    partitioned_param_coordinator.py ``fetch_sub_module`` gathers the module running, then prefetches
    ``min(max_live − available, prefetch_bucket_size)`` elements of the next ones."""
    limits = (float(knobs.get("stage3-prefetch-bucket-size", STAGE3_PREFETCH_BUCKET_SIZE)),
              float(knobs.get("stage3-max-live-parameters", STAGE3_MAX_LIVE_PARAMETERS)))
    return {mode: limits for mode in modes if zero_stage(mode) == 3}


#: DeepSpeed: its pipeline engine's 1F1B with ZeRO stage 0 or 1; without a pipeline every ZeRO stage.
ENGINE = Engine(
    "deepspeed",
    Runs(schedules=DEEPSPEED_SCHEDULES,
         dp_modes_with_pipeline=_modes(PIPELINE_MAX_STAGE),
         dp_modes_without_pipeline=_modes(3)),
    Files(targets=("deepspeed",), write=_write, notes=deepspeed_notes, read=read_deepspeed_config,
          knobs=FILE_KNOBS, write_knobs=_write_knobs),
    knobs=DEEPSPEED_KNOBS,
    pricing=deepspeed_pricing,
)
