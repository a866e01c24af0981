"""Reading a Megatron-LM launch line back (pipeplan.engines.megatron_args): round trips through the export,
launch scripts as users keep them, the GPT the shape flags describe, and one-line refusals.

The flag names are checked against Megatron-LM's parser as vendored in tests/data/megatron_args.txt
(NVIDIA/Megatron-LM d98e8a64); with PIPEPLAN_MEGATRON_ARGUMENTS=/path/to/megatron/training/arguments.py
(``git show HEAD:megatron/training/arguments.py`` of a Megatron-LM checkout) they are also looked up in that file.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from pipeplan import engines, presets
from pipeplan.engines import export_files, layer_names_in_reference
from pipeplan.engines.megatron_args import (
    IGNORED_FLAGS,
    MODEL_FLAGS,
    PRICED_FLAGS,
    REFUSED_FLAGS,
    RETIRED_FLAGS,
    read_megatron_args,
)
from pipeplan.engines.run_config import FIELDS
from pipeplan.errors import InvalidInputError
from pipeplan.models.modules import Embedding, LMHead, TransformerStack
from pipeplan.models.spec import ModelSpec
from pipeplan.plan import Plan
from pipeplan.schedules.patterns import loop_placement

ROOT = Path(__file__).resolve().parent.parent
#: Megatron-LM's own flags (its parser, vendored)
MEGATRON_FLAGS = {line for line in (ROOT / "tests" / "data" / "megatron_args.txt").read_text().splitlines()
                  if line.startswith("--")}
#: the fields the export must give back exactly
ROUND_TRIP = ("tp", "pp", "virtual_stages", "layers_per_stage", "micro_batch_size", "global_batch", "dp_mode",
              "grad_sync", "recompute", "sequence_parallel", "tp_comm_overlap")


def _write(tmp_path: Path, text: str, name: str = "train.sh") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _expected(plan: Plan) -> dict[str, object]:
    """What the reader must give back for ``plan``: its own values, in RunConfig's vocabulary.

    Megatron-LM has no sequence parallelism and no tensor-parallel overlap at tp 1 (validate_args turns
    --sequence-parallel off there) and no gradient reduction to overlap at dp 1 (the export writes
    --overlap-grad-reduce for dp > 1 only): there the plan's value means nothing and the reader gives
    Megatron-LM's default.
    """
    return {
        "tp": plan.tp, "pp": plan.pp, "virtual_stages": plan.virtual_stages,
        "layers_per_stage": tuple(plan.layers_per_stage), "micro_batch_size": plan.micro_batch_size,
        "global_batch": plan.global_batch, "dp_mode": plan.dp_mode,
        "grad_sync": plan.grad_sync if plan.dp > 1 else "megatron",
        "recompute": plan.uniform_recompute,
        "sequence_parallel": "on" if plan.sequence_parallel and plan.tp > 1 else "off",
        "tp_comm_overlap": plan.tp_comm_overlap if plan.tp > 1 else "backward",
    }


def _read_export(plan: Plan, names, tmp_path: Path):
    (exported,) = export_files(plan, "megatron", names)
    directory = tmp_path / "export"
    directory.mkdir()
    (directory / exported.name).write_text(exported.text)
    return engines.get("megatron").read(directory)  # the directory an export wrote


def _gpt(layers_per_stage: tuple[int, ...], pp: int, **options) -> Plan:
    virtual = len(layers_per_stage) // pp
    return Plan(pp=pp, dp=options.pop("dp", 2), layers_per_stage=layers_per_stage, placement=loop_placement(pp, virtual),
                schedule="1f1b" if virtual == 1 else "interleaved", num_microbatches=options.pop("m", 8),
                micro_batch_size=options.pop("micro", 2), **options)


# gpt-1.5b: the embedding, 22 decoder layers, the loss: 24 pipeline layers
_PLANS = {
    "no pipeline, ddp": _gpt((24,), 1, dp=8),
    "no pipeline, tp 2, zero1, full": _gpt((24,), 1, tp=2, sequence_parallel=True, dp_mode="zero1",
                                          recompute=("full",), grad_sync="megatron-overlap"),
    "1f1b pp 2, first and last": _gpt((13, 11), 2, recompute=("selective",) * 2),
    "1f1b pp 2, even counted": _gpt((12, 12), 2, tp=2, sequence_parallel=True, tp_comm_overlap="on", micro=1, m=16),
    "1f1b pp 4, even counted, zero1 overlap": _gpt((6, 6, 6, 6), 4, dp_mode="zero1", grad_sync="megatron-overlap"),
    "1f1b pp 4, decoders even": _gpt((7, 5, 5, 7), 4, tp=2, sequence_parallel=False, tp_comm_overlap="backward"),
    "1f1b pp 4, first and last": _gpt((4, 7, 7, 6), 4, tp=2, sequence_parallel=True, dp_mode="zero1",
                                      grad_sync="megatron-overlap", recompute=("full",) * 4),
    "1f1b pp 4, layout": _gpt((3, 10, 6, 5), 4, recompute=("selective",) * 4, dp=1),
    "interleaved pp 2, even": _gpt((6, 6, 6, 6), 2, dp_mode="zero1", recompute=("selective",) * 4),
    "interleaved pp 2, layout": _gpt((5, 7, 6, 6), 2, recompute=("full",) * 4, tp=2, sequence_parallel=True),
    "interleaved pp 4, even": _gpt((2,) * 12, 4, grad_sync="megatron-overlap"),
    "1f1b pp 2, block 3": _gpt((13, 11), 2, recompute=("block:3",) * 2),
    "interleaved pp 2, uniform 2": _gpt((6, 6, 6, 6), 2, recompute=("uniform:2",) * 4, tp=2, sequence_parallel=True),
    "interleaved pp 4, layout": _gpt((3, 3, 2, 4, 4, 2, 2, 4), 4, tp=2, sequence_parallel=True,
                                     tp_comm_overlap="on", dp_mode="zero1", grad_sync="megatron-overlap"),
}


@pytest.mark.parametrize("case", list(_PLANS))
def test_the_megatron_export_reads_back_exactly(case, tmp_path):
    plan = _PLANS[case]
    config = _read_export(plan, layer_names_in_reference(presets.get("gpt-1.5b")), tmp_path)
    assert {name: config.value(name) for name in ROUND_TRIP} == _expected(plan)
    assert config.value("schedule") == plan.schedule
    assert config.model is None  # the export writes parallelism flags only
    assert config.ignored == () and config.notes == ()


@pytest.mark.parametrize("options", [
    ("--tp", "2", "--pp", "4"),
    ("--tp", "1", "--pp", "2", "--recompute", "full", "--dp-modes", "ddp,zero1", "--schedules", "1f1b,interleaved"),
    ("--tp", "2", "--pp", "1", "--recompute", "selective", "--tp-comm-overlap", "on"),
    ("--tp", "2", "--pp", "4", "--dp-modes", "ddp", "--grad-sync", "megatron", "--schedules", "1f1b",
     "--micro-batch-size", "1"),
])
def test_every_plan_the_search_exports_reads_back_exactly(run_cli, tmp_path, options):
    """plan --spec examples/gpt-6.2b.json --gpus 16 --global-batch 128: each plan's megatron_args.sh, and the
    file --export megatron --out writes, give back the plan."""
    spec = ["--spec", str(ROOT / "examples" / "gpt-6.2b.json"), "--gpus", "16", "--global-batch", "128", *options]
    code, out, err = run_cli("plan", *spec, "--json", "--top", "10")
    assert code == 0, err
    exported = []
    for entry in json.loads(out)["plans"]:
        export = entry["exports"]["megatron"]
        if "error" in export:
            continue
        path = _write(tmp_path, export["files"]["megatron_args.sh"], f"plan{len(exported)}.sh")
        config = read_megatron_args(path)
        recompute = set(entry["recompute"])
        want = {
            "tp": entry["tp"], "pp": entry["pp"], "virtual_stages": entry["virtual_stages"],
            "layers_per_stage": tuple(entry["layers_per_stage"]), "micro_batch_size": entry["micro_batch_size"],
            "global_batch": entry["global_batch"], "dp_mode": entry["dp_mode"],
            "grad_sync": entry["grad_sync"] if entry["dp"] > 1 else "megatron",
            "recompute": recompute.pop() if len(recompute) == 1 else None,
            "sequence_parallel": "on" if entry["sequence_parallel"] and entry["tp"] > 1 else "off",
            "tp_comm_overlap": entry.get("tp_comm_overlap", "backward") if entry["tp"] > 1 else "backward",
        }
        assert {name: config.value(name) for name in ROUND_TRIP} == want
        exported.append(want)
    assert exported
    out_dir = tmp_path / "out"
    code, _, err = run_cli("plan", *spec, "--export", "megatron", "--out", str(out_dir))
    assert code == 0, err
    config = engines.get("megatron").read(out_dir)
    assert {name: config.value(name) for name in ROUND_TRIP} in exported


_SCRIPT = r"""#!/bin/bash
# Runs the "345M" parameter model (examples/gpt3/train_gpt3_175b_distributed.sh's shape, smaller); don't edit
export CUDA_DEVICE_MAX_CONNECTIONS=1

GPUS_PER_NODE=8
NNODES=2
CHECKPOINT_PATH=$1 # <Specify path>
DATA_PATH=/data/my-gpt2_text_document

DISTRIBUTED_ARGS=(
    --nproc_per_node $GPUS_PER_NODE
    --nnodes $NNODES   # two nodes
    --master_addr localhost
)

GPT_ARGS="
    --num-layers 24
    --hidden-size 1024
    --num-attention-heads 16
    --seq-length 1024
    --max-position-embeddings 1024
    --micro-batch-size 4
    --global-batch-size 64
    --lr 0.00015
    --bf16
"
PARALLEL_ARGS="--tensor-model-parallel-size ${TP:-2} --pipeline-model-parallel-size 2 --sequence-parallel"

torchrun ${DISTRIBUTED_ARGS[@]} pretrain_gpt.py \
    $GPT_ARGS \
    ${PARALLEL_ARGS} \
    --use-distributed-optimizer --overlap-grad-reduce \
    --recompute-activations \
    --tokenizer-type GPT2BPETokenizer --vocab-file gpt2-vocab.json --merge-file gpt2-merges.txt \
    --data-path $DATA_PATH \
    --save $CHECKPOINT_PATH --load $CHECKPOINT_PATH \
    --log-interval 100
"""


def test_a_launch_script_with_variables_arrays_comments_and_continuations(tmp_path):
    config = read_megatron_args(_write(tmp_path, _SCRIPT))
    values = {name: config.value(name) for name in FIELDS if config.value(name) is not None}
    assert values == {
        "gpus": 16, "gpus_per_node": 8, "tp": 2, "pp": 2, "virtual_stages": 1, "schedule": "1f1b",
        "layers_per_stage": (13, 13), "micro_batch_size": 4, "global_batch": 64,
        "num_microbatches": 4,  # 64 / (4 × dp 4)
        "dp_mode": "zero1", "grad_sync": "megatron-overlap", "recompute": "selective", "sequence_parallel": "on",
        "tp_comm_overlap": "backward", "precision": "bf16", "seq_length": 1024,
    }
    assert config.source_of("tp").endswith(": --tensor-model-parallel-size 2")
    assert config.source_of("gpus").endswith("--nproc_per_node 8 --nnodes 2")
    assert "does not set --tp-comm-overlap" in config.source_of("tp_comm_overlap")
    assert "--data-path /data/my-gpt2_text_document" in config.ignored
    assert "--save $1" in config.ignored and "--log-interval 100" in config.ignored
    assert "--lr 0.00015" in config.ignored and "--vocab-file gpt2-vocab.json" in config.ignored
    # GPT-2's 50257 tokens padded to a multiple of 128 × tp 2: 50432 (vocab_size_with_padding)
    assert config.model is not None
    assert config.model.modules == (
        Embedding(name="embedding", vocab_size=50432, hidden_size=1024, tokens=1024, position_tokens=1024,
                  dropout=True),
        TransformerStack(name="decoder", num_layers=24, hidden_size=1024, num_heads=16, seq_length=1024,
                         ffn_hidden_size=4096, bias=True, dropout=True, causal=True, attention="flash",
                         final_norm=True),
        LMHead(name="output_layer", vocab_size=50432, hidden_size=1024, tokens=1024, tied_to="embedding"),
    )
    assert config.model_source.startswith("--num-layers 24 --hidden-size 1024 --num-attention-heads 16 --seq-length 1024")
    assert "--tokenizer-type GPT2BPETokenizer" in config.model_source
    assert config.to_dict()["settings"]["layers_per_stage"]["value"] == [13, 13]


def test_a_llama_shape_with_swiglu_gqa_rmsnorm_rope_and_no_bias(tmp_path):
    line = ("python -m torch.distributed.run --nproc-per-node=8 pretrain_gpt.py --num-layers 32 --hidden-size 4096 "
            "--num-attention-heads 32 --group-query-attention --num-query-groups 8 --swiglu --ffn-hidden-size 14336 "
            "--normalization RMSNorm --position-embedding-type rope --untie-embeddings-and-output-weights "
            "--disable-bias-linear --attention-dropout 0 --hidden-dropout 0 --seq-length 8192 "
            "--max-position-embeddings 8192 --vocab-size 128256 --tensor-model-parallel-size 8 --micro-batch-size 1 "
            "--global-batch-size 8 --recompute-granularity full --recompute-method uniform --recompute-num-layers 1")
    config = read_megatron_args(_write(tmp_path, line + "\n"))
    assert (config.value("gpus"), config.value("num_microbatches"), config.value("recompute")) == (8, 8, "full")
    assert config.model is not None
    embedding, decoder, head = config.model.modules
    # 128256 padded to a multiple of 128 × tp 8 = 1024: 129024 (vocab_size_with_padding)
    assert embedding == Embedding(name="embedding", vocab_size=129024, hidden_size=4096, tokens=8192)
    assert decoder == TransformerStack(name="decoder", num_layers=32, hidden_size=4096, num_heads=32, seq_length=8192,
                                       ffn_hidden_size=14336, num_kv_heads=8, gated_mlp=True, norm="rmsnorm",
                                       bias=False, dropout=False, causal=True, attention="flash", final_norm=True)
    assert head == LMHead(name="output_layer", vocab_size=129024, hidden_size=4096, tokens=8192, tied_to=None)
    assert config.notes == ()


@pytest.mark.parametrize("flags, ffn, attention", [
    ("--swiglu", int((4 * 1024 * 2 / 3) / 64) * 64, "flash"),  # validate_args' SwiGLU default: 2/3 of 4h, /64
    ("--transformer-impl local", 4096, "eager"),
    ("--transformer-impl local --use-flash-attn", 4096, "flash"),
    ("--attention-backend unfused", 4096, "eager"),
    ("--attention-backend fused", 4096, "flash"),
])
def test_the_mlp_width_and_attention_kernel_follow_megatron_defaults(tmp_path, flags, ffn, attention):
    line = f"--num-layers 2 --hidden-size 1024 --num-attention-heads 16 --seq-length 512 --vocab-size 1000 {flags}"
    config = read_megatron_args(_write(tmp_path, line))
    assert config.model is not None
    decoder = config.model.modules[1]
    assert (decoder.ffn_hidden_size, decoder.attention) == (ffn, attention)
    assert config.model.modules[0].vocab_size == 1024  # 1000 padded to a multiple of 128
    assert config.model.modules[0].position_tokens == 512  # learned positions, --seq-length rows (noted)
    assert any("--max-position-embeddings" in note for note in config.notes)


def test_launchers_give_the_world_size(tmp_path):
    ds = read_megatron_args(_write(tmp_path, "deepspeed --num_gpus 4 --num_nodes 3 pretrain_gpt.py "
                                             "--pipeline-model-parallel-size 3 --micro-batch-size 2 --num-layers 6"))
    assert (ds.value("gpus"), ds.value("gpus_per_node"), ds.value("global_batch"), ds.value("num_microbatches")) \
        == (12, 4, 8, 1)  # the global batch defaults to micro × dp (one microbatch)
    assert "does not set --global-batch-size" in ds.source_of("global_batch")
    assert ds.value("layers_per_stage") == (3, 2, 3)  # 2 decoders each; the embedding and the loss at the ends
    single = read_megatron_args(_write(tmp_path, "python pretrain_gpt.py --micro-batch-size 2", "one.sh"))
    assert (single.value("gpus"), single.value("global_batch")) == (1, 2)
    elastic = read_megatron_args(_write(tmp_path, "torchrun --nproc-per-node gpu pretrain_gpt.py --bf16", "e.sh"))
    assert elastic.value("gpus") is None and any("world size is left open" in n for n in elastic.notes)
    env = read_megatron_args(_write(tmp_path, "torchrun --nnodes $NNODES --nproc-per-node 8 pretrain_gpt.py", "n.sh"))
    assert env.value("gpus") is None and any("$NNODES" in n for n in env.notes)
    outside = read_megatron_args(_write(tmp_path, "$LAUNCHER pretrain_gpt.py --bf16", "l.sh"))  # from the environment
    assert (outside.value("gpus"), outside.value("precision")) == (None, "bf16")


def test_a_bare_flag_line_and_the_printed_export(tmp_path):
    plan = _PLANS["interleaved pp 4, layout"]
    (exported,) = export_files(plan, "megatron", layer_names_in_reference(presets.get("gpt-1.5b")))
    config = read_megatron_args(_write(tmp_path, exported.printed))  # what ./megatron_args.sh prints
    assert {name: config.value(name) for name in ROUND_TRIP} == _expected(plan)


def test_older_spellings_read_as_the_new_ones(tmp_path):
    config = read_megatron_args(_write(tmp_path, "--pipeline-model-parallel-size 4 --num-layers 32 "
                                                 "--virtual-pipeline-model-parallel-size 2"))
    assert (config.value("virtual_stages"), config.value("schedule")) == (2, "interleaved")
    assert config.value("layers_per_stage") == (5, 4, 4, 4, 4, 4, 4, 5)  # 32 decoders over 8 chunks, E and L added
    assert any("older spelling" in note for note in config.notes)


def test_partial_and_grouped_full_recompute_are_read_as_their_own_modes(tmp_path):
    # megatron/core/transformer/transformer_block.py _checkpointed_forward: block N checkpoints the first N
    # layers of each stage, uniform N groups of N; uniform 1 is every layer alone, pipeplan's full
    block = read_megatron_args(_write(tmp_path, "--recompute-granularity full --recompute-method block "
                                                "--recompute-num-layers 2"))
    assert block.value("recompute") == "block:2" and not any("recompute" in note for note in block.notes)
    grouped = read_megatron_args(_write(tmp_path, "--recompute-granularity full --recompute-method uniform "
                                                  "--recompute-num-layers 4", "g.sh"))
    assert grouped.value("recompute") == "uniform:4" and not any("recompute" in note for note in grouped.notes)
    single = read_megatron_args(_write(tmp_path, "--recompute-granularity full --recompute-method uniform "
                                                 "--recompute-num-layers 1", "s.sh"))
    assert single.value("recompute") == "full"
    with pytest.raises(InvalidInputError, match=r"^--recompute-num-layers must be an integer >= 1, got 0$"):
        read_megatron_args(_write(tmp_path, "--recompute-granularity full --recompute-method block "
                                            "--recompute-num-layers 0", "z.sh"))


def test_an_unknown_flag_is_listed_unless_it_is_a_near_miss(tmp_path):
    config = read_megatron_args(_write(tmp_path, "--my-own-flag 3 --bf16"))
    assert config.ignored == ("--my-own-flag 3 (not a flag pipeplan knows; not priced)",)
    with pytest.raises(InvalidInputError, match=r"^--tensor-model-paralel-size is not a Megatron-LM flag "
                                                r"\(did you mean --tensor-model-parallel-size\?\)$"):
        read_megatron_args(_write(tmp_path, "--tensor-model-paralel-size 2", "typo.sh"))


@pytest.mark.parametrize("text, message", [
    ("torchrun pretrain_gpt.py $GPT_ARGS", r"^\$GPT_ARGS is never assigned in .*train.sh"),
    ("--tensor-model-parallel-size $TP", r"^--tensor-model-parallel-size is \$TP, which .* never assigns"),
    ("torchrun pretrain_gpt.py --bf16 ${EXTRA_ARGS}", r"^\$\{EXTRA_ARGS\} is never assigned in"),
    ("--tensor-model-parallel-size two", r"^--tensor-model-parallel-size must be an integer >= 1, got 'two'$"),
    ("--pipeline-model-parallel-size 0", r"^--pipeline-model-parallel-size must be an integer >= 1, got 0$"),
    ("--micro-batch-size 0", r"^--micro-batch-size must be an integer >= 1, got 0$"),
    ("torchrun --nproc-per-node 8 pretrain_gpt.py --micro-batch-size 2 --global-batch-size 20",
     r"^--global-batch-size 20 is not divisible by --micro-batch-size 2 × data-parallel 8"),
    ("torchrun --nproc-per-node 6 pretrain_gpt.py --tensor-model-parallel-size 4",
     r"^tp 4 × pp 1 = 4 does not divide the 6 GPUs"),
    ("--recompute-granularity some", r"^--recompute-granularity must be one of selective, full, got 'some'$"),
    ("--recompute-granularity full", r"^--recompute-granularity full needs --recompute-method"),
    ("--context-parallel-size 2", r"^--context-parallel-size 2: pipeplan does not plan context parallelism yet$"),
    ("--tp-comm-overlap", r"^--tp-comm-overlap needs --sequence-parallel"),
    ("--num-layers 30 --pipeline-model-parallel-size 4", r"^--num-layers 30 = 30 does not divide by"),
    ("--bf16 yes", r"^--bf16 takes no value"),
    ("--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 128 --tokenizer-type HuggingFaceTokenizer",
     r"gives the GPT's shape but not its vocabulary \(--tokenizer-type HuggingFaceTokenizer.*: give --vocab-size$"),
    ("--pipeline-model-parallel-size 2 --num-layers 4 --pipeline-model-parallel-layout 'Et*2|mt*2L'",
     r"'m' is not a layer pipeplan plans"),
    ("echo hello", r"holds no Megatron-LM launch line"),
    ("--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 128 --vocab-size 100 --no-position-embedding",
     r"^--no-position-embedding without rope: Megatron-LM refuses it"),
    ("--use-torch-fsdp2", r"^--use-torch-fsdp2: pipeplan does not read Megatron-LM's FSDP yet"),
    ("--pipeline-model-parallel-size 4 --num-layers 8 --num-virtual-stages-per-pipeline-rank 2 "
     "--num-layers-per-virtual-pipeline-stage 1", r"are given together; Megatron-LM takes one of them$"),
])
def test_bad_lines_are_one_line_refusals(tmp_path, text, message):
    with pytest.raises(InvalidInputError, match=message) as error:
        read_megatron_args(_write(tmp_path, text + "\n"))
    assert "\n" not in str(error.value)


def test_a_deepspeed_or_torchtitan_config_names_the_option_that_takes_it(tmp_path):
    with pytest.raises(InvalidInputError, match=r"looks like a DeepSpeed config .*--deepspeed-config$"):
        read_megatron_args(_write(tmp_path, '{"train_batch_size": 8}', "ds_config.txt"))
    with pytest.raises(InvalidInputError, match=r"looks like a torchtitan config .*--torchtitan-config$"):
        read_megatron_args(_write(tmp_path, "[job]\ndump_folder = './out'\n[parallelism]\npipeline_parallel_degree = 2\n",
                                  "run.cfg"))


def test_the_flag_lists_are_megatron_flags_and_no_real_flag_is_taken_for_a_typo(tmp_path):
    listed = set(PRICED_FLAGS) | set(MODEL_FLAGS) | set(IGNORED_FLAGS) | set(REFUSED_FLAGS)
    assert sorted(listed - MEGATRON_FLAGS) == []
    assert not set(RETIRED_FLAGS) & MEGATRON_FLAGS and set(RETIRED_FLAGS.values()) <= MEGATRON_FLAGS
    others = sorted(MEGATRON_FLAGS - listed - {"-h", "--help"})
    config = read_megatron_args(_write(tmp_path, " ".join(others)))  # each alone: none refused as a near miss
    assert len(config.ignored) == len(others)


#: the Megatron-LM files whose flags the reader's lists name: the parser, and the config classes whose fields
#: ArgumentGroupFactory (megatron/training/argument_utils.py) adds as flags
_MEGATRON_SOURCES = ("megatron/training/arguments.py", "megatron/core/transformer/transformer_config.py",
                     "megatron/core/model_parallel_config.py", "megatron/training/config/training_config.py",
                     "megatron/training/config/common_config.py")


def _in_megatron_sources(flag: str, texts: list[str]) -> bool:
    """``flag`` is added by name (``'--flag'``), or is a config-class field (``flag_name: ...``) that
    ArgumentGroupFactory turns into ``--flag-name`` (``--no-flag-name`` / ``--disable-...`` for a field on by default)."""
    if any(f"'{flag}'" in text or f'"{flag}"' in text for text in texts):
        return True
    name = flag[2:]
    names = {name} | {name[len(prefix):] for prefix in ("no-", "disable-") if name.startswith(prefix)}
    return any(re.search(rf"^\s+{re.escape(n.replace('-', '_'))}\s*:", text, re.M) for n in names for text in texts)


def _installed_megatron_sources() -> list[str]:
    """_MEGATRON_SOURCES from an installed megatron-core that ships megatron/training (0.17.0 on: Megatron-LM
    9088d4fb "Add training code to MCore wheel"; those wheels need Python >= 3.12, so the engines extra, pinned
    for 3.11, installs 0.16.1, which has megatron/core only)."""
    import importlib.util

    try:
        found = importlib.util.find_spec("megatron.training")
    except (ImportError, ValueError):
        return []
    if found is None or not found.submodule_search_locations:
        return []
    root = Path(next(iter(found.submodule_search_locations))).parent.parent
    return [str(root / path) for path in _MEGATRON_SOURCES if (root / path).exists()]


@pytest.mark.skipif(not os.environ.get("PIPEPLAN_MEGATRON_ARGUMENTS") and not _installed_megatron_sources(),
                    reason="no Megatron-LM parser: no PyPI release holds megatron/training for Python 3.11 "
                           "(megatron-core >= 0.17 ships it, on Python >= 3.12); set PIPEPLAN_MEGATRON_ARGUMENTS "
                           "to a checkout's arguments.py (and its config files)")
def test_the_flag_lists_are_in_megatron_sources():
    """PIPEPLAN_MEGATRON_ARGUMENTS: Megatron-LM's megatron/training/arguments.py, or it and the config files of
    _MEGATRON_SOURCES joined by os.pathsep (``git -C CHECKOUT show HEAD:PATH > FILE`` each); the flags the
    parser builds from config classes are found only with those files. Without it, the files of an installed
    megatron-core that ships megatron/training."""
    given = os.environ.get("PIPEPLAN_MEGATRON_ARGUMENTS")
    paths = given.split(os.pathsep) if given else _installed_megatron_sources()
    texts = [Path(path).read_text() for path in paths]
    listed = set(PRICED_FLAGS) | set(MODEL_FLAGS) | set(IGNORED_FLAGS) | set(REFUSED_FLAGS)
    missing = [flag for flag in sorted(listed) if not _in_megatron_sources(flag, texts)]
    assert missing == [], f"not in {', '.join(paths)} (give the config files of _MEGATRON_SOURCES too)"
    assert not [flag for flag in RETIRED_FLAGS if any(f"'{flag}'" in text for text in texts)]


#: splits users write that the export does not: (flags, pipeline size)
_USER_SPLITS = {
    "virtual stages per rank": ("--num-layers 24 --num-virtual-stages-per-pipeline-rank 3", 4),
    "virtual stages, both counted": ("--num-layers 22 --num-virtual-stages-per-pipeline-rank 2 "
                                     "--account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split", 4),
    "embedding counted only": ("--num-layers 23 --account-for-embedding-in-pipeline-split", 4),
    "first rank only": ("--num-layers 20 --decoder-first-pipeline-num-layers 4", 3),
    "last rank only": ("--num-layers 20 --decoder-last-pipeline-num-layers 2", 4),
    "layout with repeats": ("--num-layers 8 --pipeline-model-parallel-layout 'E|(tt|)*3,tt|L'", 3),
}


@pytest.mark.parametrize("case", list(_USER_SPLITS))
def test_megatron_core_builds_the_split_the_reader_reads(case, tmp_path):
    """Megatron-Core's own split (TransformerConfig, get_num_layers_to_build per rank and virtual stage) of a
    line the export does not write is the reader's, less the embedding on stage 0 and the loss on the last."""
    pytest.importorskip("megatron.core", reason="the engines extra (megatron-core) is not installed")
    import torch
    from megatron.core import parallel_state
    from megatron.core.transformer import TransformerConfig
    from megatron.core.transformer.transformer_block import get_num_layers_to_build

    flags, pp = _USER_SPLITS[case]
    config = read_megatron_args(_write(tmp_path, f"--pipeline-model-parallel-size {pp} {flags}"))
    virtual = config.value("virtual_stages")
    words = {w.split()[0]: w.split()[1:] for w in re.split(r" (?=--)", flags)}
    layout = words.get("--pipeline-model-parallel-layout", [None])[0]
    made = TransformerConfig(
        num_layers=int(words["--num-layers"][0]), hidden_size=64, num_attention_heads=4,
        pipeline_model_parallel_size=pp, virtual_pipeline_model_parallel_size=None if virtual == 1 else virtual,
        pipeline_dtype=torch.bfloat16, bf16=True, pipeline_model_parallel_layout=layout and layout.strip("'"),
        account_for_embedding_in_pipeline_split="--account-for-embedding-in-pipeline-split" in words,
        account_for_loss_in_pipeline_split="--account-for-loss-in-pipeline-split" in words,
        num_layers_in_first_pipeline_stage=int(words["--decoder-first-pipeline-num-layers"][0])
        if "--decoder-first-pipeline-num-layers" in words else None,
        num_layers_in_last_pipeline_stage=int(words["--decoder-last-pipeline-num-layers"][0])
        if "--decoder-last-pipeline-num-layers" in words else None)
    built = {}
    parallel_state.set_pipeline_model_parallel_world_size(pp)
    parallel_state.set_virtual_pipeline_model_parallel_world_size(None if virtual == 1 else virtual)
    try:
        for rank in range(pp):
            parallel_state.set_pipeline_model_parallel_rank(rank)
            for chunk in range(virtual):
                built[chunk * pp + rank] = get_num_layers_to_build(made, vp_stage=None if virtual == 1 else chunk,
                                                                   pp_rank=rank)
    finally:
        parallel_state.set_pipeline_model_parallel_rank(None)
        parallel_state.set_pipeline_model_parallel_world_size(None)
        parallel_state.set_virtual_pipeline_model_parallel_world_size(None)
    decoders = list(config.value("layers_per_stage"))
    decoders[0] -= 1
    decoders[-1] -= 1
    assert [built[s] for s in sorted(built)] == decoders


def test_the_launch_line_is_the_command_with_the_most_megatron_flags(tmp_path):
    script = ("python tools/preprocess_data.py --input data.json --output-prefix my-gpt2 --workers 8 --append-eod\n"
              "torchrun --nproc-per-node 4 pretrain_gpt.py --tensor-model-parallel-size 2 --bf16\n"
              "echo done\n")
    config = read_megatron_args(_write(tmp_path, script))
    assert (config.value("gpus"), config.value("tp"), config.ignored) == (4, 2, ())
    assert config.path == str(tmp_path / "train.sh")


def test_tp_comm_overlap_off_has_no_flag_and_the_export_says_so(tmp_path):
    plan = _gpt((12, 12), 2, tp=2, sequence_parallel=True, tp_comm_overlap="off")
    config = _read_export(plan, layer_names_in_reference(presets.get("gpt-1.5b")), tmp_path)
    assert config.value("tp_comm_overlap") == "backward"  # what Megatron-LM runs without --tp-comm-overlap
    (note,) = engines.get("megatron").notes(plan)
    assert "tp-comm-overlap off" in note and "no flag" in note
    assert engines.get("megatron").notes(_PLANS["1f1b pp 2, even counted"]) == []
