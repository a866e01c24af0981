"""Megatron-LM's flags as the launch-line reader sorts them: priced, the model's shape, refused, retired, ignored.

    from pipeplan.engines._megatron_vocab import PRICED_FLAGS, REFUSED_FLAGS, RETIRED_FLAGS
    PRICED_FLAGS["--tensor-model-parallel-size"]              # 'int': the value it takes
    REFUSED_FLAGS["--context-parallel-size"]                  # ('1', 'pipeplan does not plan context parallelism yet')
    RETIRED_FLAGS["--virtual-pipeline-model-parallel-size"]   # '--num-virtual-stages-per-pipeline-rank'

pipeplan's own lists, written by hand from NVIDIA/Megatron-LM at commit d98e8a64
(``megatron/training/arguments.py``); :mod:`.megatron_args` re-exports them, and
tests/test_engines_megatron_read.py checks every name against Megatron-LM's parser as
vendored in tests/data/megatron_args.txt. A flag in none of them is refused when it is a
near miss of one (:func:`._megatron_flags._collect`), else listed as not priced.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["PRICED_FLAGS", "MODEL_FLAGS", "REFUSED_FLAGS", "RETIRED_FLAGS", "IGNORED_FLAGS", "LAUNCHER_FLAGS",
           "TOKENIZER_VOCAB"]

#: Flags the reader turns into RunConfig fields, and what each takes ("int", "str", "flag": no value,
#: "list": one or more values, "float").
PRICED_FLAGS: Mapping[str, str] = {
    "--tensor-model-parallel-size": "int",
    "--pipeline-model-parallel-size": "int",
    "--num-layers-per-virtual-pipeline-stage": "int",
    "--num-virtual-stages-per-pipeline-rank": "int",
    "--pipeline-model-parallel-layout": "str",
    "--account-for-embedding-in-pipeline-split": "flag",
    "--account-for-loss-in-pipeline-split": "flag",
    "--decoder-first-pipeline-num-layers": "int",
    "--decoder-last-pipeline-num-layers": "int",
    "--micro-batch-size": "int",
    "--global-batch-size": "int",
    "--use-distributed-optimizer": "flag",
    "--overlap-grad-reduce": "flag",
    "--overlap-param-gather": "flag",
    "--grad-reduce-in-bf16": "flag",
    "--accumulate-allreduce-grads-in-fp32": "flag",
    "--recompute-granularity": "str",
    "--recompute-method": "str",
    "--recompute-num-layers": "int",
    "--recompute-modules": "list",
    "--recompute-activations": "flag",
    "--sequence-parallel": "flag",
    "--tp-comm-overlap": "flag",
    "--bf16": "flag",
    "--fp16": "flag",
    "--seq-length": "int",
}

#: Flags that give the GPT's shape (:attr:`RunConfig.model`).
MODEL_FLAGS: Mapping[str, str] = {
    "--num-layers": "int",
    "--hidden-size": "int",
    "--num-attention-heads": "int",
    "--ffn-hidden-size": "int",
    "--kv-channels": "int",
    "--group-query-attention": "flag",
    "--num-query-groups": "int",
    "--swiglu": "flag",
    "--normalization": "str",
    "--position-embedding-type": "str",
    "--use-rotary-position-embeddings": "flag",
    "--no-position-embedding": "flag",
    "--max-position-embeddings": "int",
    "--untie-embeddings-and-output-weights": "flag",
    "--disable-bias-linear": "flag",
    "--attention-dropout": "float",
    "--hidden-dropout": "float",
    "--use-flash-attn": "flag",
    "--attention-backend": "str",
    "--transformer-impl": "str",
    "--vocab-size": "int",
    "--padded-vocab-size": "int",
    "--tokenizer-type": "str",
    "--make-vocab-size-divisible-by": "int",
    "--no-pad-vocab-size": "flag",
}

#: Flags of what pipeplan does not plan: refused when set to anything but Megatron-LM's default
#: (flag → (its default, ``""``: none; why it is refused)).
REFUSED_FLAGS: Mapping[str, tuple[str, str]] = {
    "--context-parallel-size": ("1", "pipeplan does not plan context parallelism yet"),
    "--expert-model-parallel-size": ("1", "pipeplan does not plan expert parallelism yet"),
    "--num-experts": ("", "pipeplan does not plan mixture-of-experts layers yet"),
    "--use-torch-fsdp2": ("", "pipeplan does not read Megatron-LM's FSDP yet (plan it with --dp-mode fsdp)"),
    "--use-megatron-fsdp": ("", "pipeplan does not read Megatron-LM's FSDP yet (plan it with --dp-mode fsdp)"),
    "--hybrid-layer-pattern": ("", "pipeplan does not plan hybrid (Mamba) layers yet"),
    "--mtp-num-layers": ("", "pipeplan does not plan multi-token prediction layers yet"),
    "--multi-latent-attention": ("", "pipeplan does not plan multi-latent attention yet"),
    "--encoder-num-layers": ("", "pipeplan does not plan encoder-decoder models yet"),
    "--decoder-num-layers": ("", "pipeplan reads a GPT's layer count from --num-layers; give that instead"),
}

#: Older spellings Megatron-LM no longer has → what replaced them (read as the new one).
#: ``--virtual-pipeline-model-parallel-size``: replaced in NVIDIA/Megatron-LM dcef9069
#: ("Change argument to control the number of model chunks in a stage").
RETIRED_FLAGS: Mapping[str, str] = {
    "--virtual-pipeline-model-parallel-size": "--num-virtual-stages-per-pipeline-rank",
}

#: Megatron-LM flags read and not priced: logging, checkpoints, data, tokenizer files, the
#: learning-rate schedule, optimizer hyper-parameters, initialisation, kernels and fusions, timers.
IGNORED_FLAGS: tuple[str, ...] = (
    # logging and profiling
    "--log-interval", "--log-params-norm", "--log-num-zeros-in-grad", "--log-throughput", "--log-timers-to-tensorboard",
    "--log-validation-ppl-to-tensorboard", "--log-memory-to-tensorboard", "--log-world-size-to-tensorboard",
    "--no-log-loss-scale-to-tensorboard",
    "--log-progress", "--timing-log-level", "--timing-log-option", "--tensorboard-dir", "--tensorboard-log-interval",
    "--tensorboard-queue-size", "--wandb-project", "--wandb-exp-name", "--wandb-save-dir", "--profile",
    "--profile-step-start", "--profile-step-end", "--profile-ranks", "--use-pytorch-profiler", "--record-memory-history",
    "--no-barrier-with-level-1-timing", "--logging-level",
    # checkpoints
    "--save", "--load", "--save-interval", "--no-save-optim", "--no-save-rng", "--no-load-optim", "--no-load-rng",
    "--finetune", "--pretrained-checkpoint", "--ckpt-format", "--ckpt-step", "--ckpt-fully-parallel-load",
    "--ckpt-assume-constant-structure", "--async-save", "--use-dist-ckpt", "--auto-detect-ckpt-format",
    "--dist-ckpt-strictness", "--use-checkpoint-args", "--exit-on-missing-checkpoint", "--non-persistent-save-interval",
    "--non-persistent-ckpt-type",
    # data and tokenizer files
    "--data-path", "--train-data-path", "--valid-data-path", "--test-data-path", "--data-cache-path", "--split",
    "--mock-data", "--vocab-file", "--merge-file", "--tokenizer-model", "--num-workers", "--data-args-path",
    "--per-split-data-args-path", "--no-mmap-bin-files", "--no-create-attention-mask-in-dataloader",
    "--reset-position-ids", "--reset-attention-mask", "--eod-mask-loss", "--dataloader-type", "--vocab-extra-ids",
    "--object-storage-cache-path",
    # training length, evaluation, exit
    "--train-iters", "--train-samples", "--eval-interval", "--eval-iters", "--skip-train", "--exit-interval",
    "--exit-duration-in-mins", "--exit-signal-handler", "--rampup-batch-size",
    # learning-rate schedule
    "--lr", "--min-lr", "--lr-decay-style", "--lr-decay-iters", "--lr-decay-samples", "--lr-warmup-fraction",
    "--lr-warmup-iters", "--lr-warmup-samples", "--lr-warmup-init", "--lr-wsd-decay-style", "--lr-wsd-decay-iters",
    "--lr-wsd-decay-samples", "--override-opt-param-scheduler", "--use-checkpoint-opt-param-scheduler",
    "--override-opt_param-scheduler", "--use-checkpoint-opt_param-scheduler",
    "--start-weight-decay", "--end-weight-decay", "--weight-decay-incr-style",
    # optimizer hyper-parameters and loss scaling
    "--optimizer", "--adam-beta1", "--adam-beta2", "--adam-eps", "--sgd-momentum", "--weight-decay", "--clip-grad",
    "--loss-scale", "--initial-loss-scale", "--min-loss-scale", "--loss-scale-window", "--hysteresis",
    "--attention-softmax-in-fp32", "--fp16-lm-cross-entropy",
    "--apply-query-key-layer-scaling",
    # initialisation and seeds
    "--seed", "--init-method-std", "--init-method-xavier-uniform", "--data-parallel-random-init",
    # model details pipeplan does not price (rope parameters, activations, norms' epsilon)
    "--rotary-base", "--rotary-percent", "--rotary-seq-len-interpolation-factor", "--norm-epsilon",
    "--apply-layernorm-1p", "--apply-residual-connection-post-layernorm", "--openai-gelu", "--squared-relu",
    "--qk-layernorm", "--use-mcore-models", "--spec", "--add-qkv-bias",
    # kernels and fusions
    "--no-masked-softmax-fusion", "--no-bias-gelu-fusion", "--no-bias-swiglu-fusion", "--no-bias-dropout-fusion",
    "--no-gradient-accumulation-fusion", "--no-persist-layer-norm", "--no-rope-fusion", "--cross-entropy-loss-fusion",
    "--cross-entropy-fusion-impl", "--use-fused-weighted-squared-relu",
    # distributed setup and communication details
    "--distributed-backend", "--distributed-timeout-minutes", "--local-rank", "--ddp-bucket-size",
    "--ddp-average-in-collective", "--no-align-grad-reduce", "--no-align-param-gather", "--no-overlap-p2p-communication",
    "--overlap-p2p-communication-warmup-flush", "--no-check-for-nan-in-loss-and-grad",
    "--tp-comm-overlap-cfg",
    "--no-tp-comm-overlap-ag", "--no-tp-comm-overlap-rs", "--disable-tp-comm-overlap-ag", "--disable-tp-comm-overlap-rs",
    "--tp-comm-overlap-rs-dgrad", "--no-tp-comm-bulk-dgrad", "--no-tp-comm-bulk-wgrad", "--no-tp-comm-split-ag",
    "--no-tp-comm-split-rs", "--use-cpu-initialization", "--empty-unused-memory-level", "--manual-gc",
    "--manual-gc-interval", "--deterministic-mode", "--calculate-per-token-loss", "--defer-embedding-wgrad-compute",
    "--overlap-param-gather-with-optimizer-step", "--use-ring-exchange-p2p", "--fp8-format", "--fp8-recipe",
    "--fp8-param-gather", "--fp8-amax-history-len", "--fp8-amax-compute-algo", "--fp4-format", "--fp4-recipe",
    "--fp4-param-gather", "--persistent-save-interval",
)

#: Launcher options that give the world size: (ranks per node, nodes) spellings.
LAUNCHER_FLAGS: Mapping[str, str] = {
    "--nproc_per_node": "per_node", "--nproc-per-node": "per_node", "--num_gpus": "per_node", "--num-gpus": "per_node",
    "--nnodes": "nodes", "--num_nodes": "nodes", "--num-nodes": "nodes",
}

#: Vocabulary sizes of the tokenizers whose size is fixed (before Megatron-LM pads it): GPT-2's BPE
#: (50257 tokens, the vocab.json of openai-community/gpt2).
TOKENIZER_VOCAB: Mapping[str, int] = {"GPT2BPETokenizer": 50257}
