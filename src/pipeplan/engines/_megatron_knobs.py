"""The knobs of a Megatron-LM line: data-parallel mode, gradient overlap and dtype, recompute, sequence
parallelism, tensor-parallel overlap, precision and sequence length.

    from pipeplan.engines._megatron_flags import _collect
    from pipeplan.engines._megatron_knobs import _knobs
    settings = {}
    _knobs(_collect(["--use-distributed-optimizer", "--recompute-granularity", "selective", "--bf16"],
                    "train.sh"), 1, settings)
    settings["dp_mode"].value, settings["recompute"].value, settings["precision"].value  # 'zero1', 'selective', 'bf16'

A knob the line leaves out gets Megatron-LM's default, with a source saying so; the
combinations ``validate_args`` and ``TransformerConfig`` refuse are refused in one line.
"""

from __future__ import annotations

from ..errors import InvalidInputError
from ._megatron_flags import _Flags
from .run_config import Setting

_RECOMPUTE_GRANULARITY = ("selective", "full")
_RECOMPUTE_METHOD = ("uniform", "block")


def _knobs(flags: _Flags, tp: int, settings: dict[str, Setting]) -> None:
    """dp_mode, grad_sync, recompute, sequence_parallel, tp_comm_overlap, precision and seq_length."""
    distributed = "--use-distributed-optimizer"
    settings["dp_mode"] = (Setting("zero1", flags.source(distributed)) if flags.given(distributed) else
                           Setting("ddp", flags.default(distributed, "(DDP: optimizer state on every rank)")))
    overlap = "--overlap-grad-reduce"
    if flags.given(overlap):
        settings["grad_sync"] = Setting("megatron-overlap", flags.source(overlap, "--overlap-param-gather"))
        if flags.given(distributed) and not flags.given("--overlap-param-gather"):
            flags.notes.append("--overlap-grad-reduce without --overlap-param-gather: priced as both overlapped "
                               "(the parameter all-gather's exposure is not priced separately)")
    else:
        settings["grad_sync"] = Setting("megatron", flags.default(overlap, "(gradients reduced after the backward)"))
    if flags.given("--overlap-param-gather") and not flags.given(distributed):
        raise InvalidInputError("--overlap-param-gather needs --use-distributed-optimizer (Megatron-LM refuses it)")
    settings["recompute"] = _recompute(flags)
    sequence = "--sequence-parallel"
    if flags.given(sequence) and tp == 1:
        settings["sequence_parallel"] = Setting("off", f"{flags.source(sequence)} (Megatron-LM turns it off at tp 1)")
    elif flags.given(sequence):
        settings["sequence_parallel"] = Setting("on", flags.source(sequence))
    else:
        settings["sequence_parallel"] = Setting("off", flags.default(sequence))
    overlap_tp = "--tp-comm-overlap"
    if flags.given(overlap_tp):
        if settings["sequence_parallel"].value != "on":  # validate_args, after turning it off at tp 1
            raise InvalidInputError("--tp-comm-overlap needs --sequence-parallel with --tensor-model-parallel-size "
                                    "> 1 (Megatron-LM refuses it)")
        settings["tp_comm_overlap"] = Setting("on", flags.source(overlap_tp))
    else:
        settings["tp_comm_overlap"] = Setting("backward", flags.default(
            overlap_tp, "(the backward's tensor-parallel collectives overlap the weight-gradient GEMMs)"))
    _grad_reduce(flags, settings)
    if flags.given("--bf16") and flags.given("--fp16"):
        raise InvalidInputError("--bf16 and --fp16 are given together; Megatron-LM takes one")
    if flags.given("--bf16") or flags.given("--fp16"):
        precision = "bf16" if flags.given("--bf16") else "fp16"
        settings["precision"] = Setting(precision, flags.source(f"--{precision}"))
    else:
        settings["precision"] = Setting("fp32", flags.default("--bf16 or --fp16", "(fp32)"))
    if flags.given("--seq-length"):
        settings["seq_length"] = Setting(flags.integer("--seq-length"), flags.source("--seq-length"))
    low = [entry.split()[0] for entry in flags.ignored if entry.startswith(("--fp8-format", "--fp4-format"))]
    if low:
        flags.notes.append(f"{' '.join(low)}: priced at {settings['precision'].value} (pipeplan does not price "
                           "FP8/FP4 matrix multiplies)")


def _grad_reduce(flags: _Flags, settings: dict[str, Setting]) -> None:
    """``grad_reduce_dtype`` where the line gives it: ``--grad-reduce-in-bf16`` (bf16; it wins, as
    ``validate_args`` sets ``accumulate_allreduce_grads_in_fp32 = False`` then) or
    ``--accumulate-allreduce-grads-in-fp32`` (fp32, which ``megatron/training/training.py`` passes on as
    ``DistributedDataParallelConfig.grad_reduce_in_fp32``). Neither: left open (each mode's own dtype)."""
    for flag, dtype in (("--grad-reduce-in-bf16", "bf16"), ("--accumulate-allreduce-grads-in-fp32", "fp32")):
        if flags.given(flag):
            settings["grad_reduce_dtype"] = Setting(dtype, flags.source(flag))
            return


def _recompute(flags: _Flags) -> Setting:
    granularity, method, count = "--recompute-granularity", "--recompute-method", "--recompute-num-layers"
    modules = "--recompute-modules"
    if flags.given(granularity):
        mode = flags.one(granularity)
        if mode not in _RECOMPUTE_GRANULARITY:
            raise InvalidInputError(f"{granularity} must be one of {', '.join(_RECOMPUTE_GRANULARITY)}, got {mode!r}")
    elif flags.given("--recompute-activations"):  # validate_args: sets granularity selective
        mode = "selective"
        return Setting(mode, flags.source("--recompute-activations") + " (Megatron-LM's older spelling of "
                       "--recompute-granularity selective)")
    else:
        if flags.given(method) or flags.given(count):
            flags.notes.append(f"{method}/{count} without {granularity} do nothing in Megatron-LM")
        return Setting("none", flags.default(granularity, "(no recompute)"))
    if mode == "selective":
        if flags.given(method) or flags.given(count):  # validate_args and TransformerConfig refuse them
            raise InvalidInputError(f"{granularity} selective takes no {method} or {count} (Megatron-LM refuses it)")
        listed = flags.values.get(modules, ["core_attn"])
        if listed != ["core_attn"]:
            flags.notes.append(f"{modules} {' '.join(listed)}: pipeplan prices selective recompute as the attention "
                               "core's (core_attn) only")
        return Setting(mode, flags.source(granularity, modules))
    how = flags.one(method) if flags.given(method) else ""
    if how and how not in _RECOMPUTE_METHOD:
        raise InvalidInputError(f"{method} must be one of {', '.join(_RECOMPUTE_METHOD)}, got {how!r}")
    if not how or not flags.given(count):  # TransformerConfig.__post_init__ refuses full without them
        raise InvalidInputError(f"{granularity} full needs {method} uniform or block and {count} "
                                "(Megatron-LM refuses it)")
    layers = flags.integer(count)  # at least 1, as TransformerConfig asks
    # block N: the first N layers of each stage (each virtual chunk) checkpointed one by one, the rest not;
    # uniform N: groups of N checkpointed whole (pipeplan.plan.stage_recompute; uniform 1 is pipeplan's full)
    mode = "full" if how == "uniform" and layers == 1 else f"{how}:{layers}"
    return Setting(mode, flags.source(granularity, method, count))
