"""``--grad-reduce-dtype fp32|bf16``: the data-parallel gradient reduction's dtype, one knob across engines.

bf16 halves the bytes each reduction sends and the replicated gradient buffer (Megatron-LM's
``--grad-reduce-in-bf16``: its buffer is allocated in the reduction's dtype), leaves a sharded
gradient (ZeRO-2's, FSDP's fp32 shard) as it is; not given, every mode keeps its own dtype, so
every number is what it was; an engine that cannot express a dtype refuses it in one line, and
the readers take it from each engine's own key.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeplan import data_parallel, engines, hardware
from pipeplan.engines.record import GRAD_REDUCE_BYTES
from pipeplan.errors import InvalidInputError
from pipeplan.models.modules import Embedding, LMHead, TransformerStack
from pipeplan.models.spec import ModelSpec
from pipeplan.plan import Plan
from pipeplan.planner import Cluster, Workload
from pipeplan.planner.engine_costs import EngineCosts
from pipeplan.planner.evaluate import evaluate_layout
from pipeplan.planner.space import Config

H100 = hardware.device("h100-80g")


def gpt(layers: int = 8, hidden: int = 2048, seq: int = 512) -> ModelSpec:
    """A GPT of about 0.4 B parameters: large enough that a reduction's latency is small beside its bytes."""
    return ModelSpec("gpt", (
        Embedding(name="embedding", vocab_size=8192, hidden_size=hidden, tokens=seq, position_tokens=seq),
        TransformerStack(name="layers", num_layers=layers, hidden_size=hidden, num_heads=16, seq_length=seq,
                         ffn_hidden_size=4 * hidden, causal=True, final_norm=True),
        LMHead(name="head", vocab_size=8192, hidden_size=hidden, tokens=seq, tied_to="embedding"),
    ))


def _plan(mode: str, dtype: str | None, *, engine: str = "megatron", pp: int = 1, dp: int = 8) -> Plan:
    """One layout of :func:`gpt` with ``--grad-reduce-dtype dtype`` (``None``: not given), no overlap."""
    work = Workload.from_spec(gpt(), H100)
    config = Config(pp, dp, 1, 4, "1f1b", 1, "none", 1, mode)
    sizes = [work.num_layers // pp + (1 if s < work.num_layers % pp else 0) for s in range(pp)]
    knobs = {} if dtype is None else {"grad-reduce-dtype": dtype}
    costs = EngineCosts.of(engines.get(engine), knobs)
    return evaluate_layout(work, Cluster.of("h100-80g", pp * dp), config, sizes, sync="megatron",
                           engine_costs=costs)


def _gradients(plan: Plan) -> float:
    return max(rank.gradients for rank in plan.memory)


# ------------------------------------------------------------------------------------ the bytes per parameter
@pytest.mark.parametrize("mode", data_parallel.names())
@pytest.mark.parametrize("pipelined", [False, True])
def test_the_reduction_is_sent_in_the_dtype_and_the_replicated_buffer_held_in_it(mode, pipelined):
    record = data_parallel.get(mode)
    own = record.bytes_per_param(8, pipelined=pipelined)
    assert record.bytes_per_param(8, pipelined=pipelined, reduce_bytes=None) == own
    for dtype, size in GRAD_REDUCE_BYTES.items():
        pinned = record.bytes_per_param(8, pipelined=pipelined, reduce_bytes=size)
        assert pinned.reduce == size, dtype
        assert (pinned.weights, pinned.state, pinned.gather) == (own.weights, own.state, own.gather)
    split = record.pipelined_split if pipelined and record.pipelined_split is not None else record.split
    bf16 = record.bytes_per_param(8, pipelined=pipelined, reduce_bytes=2.0)
    if split.gradients.replicated:  # the buffer every rank holds whole (ddp, zero1, fsdp behind a pipeline)
        assert bf16.gradients == 2.0 + split.gradients.sharded / 8
    else:  # a sharded gradient (zero2, fsdp's fp32 shard) keeps its own dtype
        assert bf16.gradients == own.gradients


def test_each_modes_own_dtype_is_what_the_knob_pins_for_it():
    """The default (not given) is each mode's own: pinning that same dtype moves nothing."""
    own = {"ddp": "bf16", "zero1": "fp32", "zero2": "bf16", "fsdp": "fp32"}
    for mode, dtype in own.items():
        assert data_parallel.get(mode).bytes_per_param(8).reduce == GRAD_REDUCE_BYTES[dtype]
        default, pinned = _plan(mode, None), _plan(mode, dtype)
        assert pinned.step_time == default.step_time, mode
        assert pinned.dp_exposed_time == default.dp_exposed_time, mode
        assert pinned.peak_memory == default.peak_memory, mode
        assert default.grad_reduce_dtype is None and pinned.grad_reduce_dtype == dtype


# ------------------------------------------------------------------------------------ priced in the step
@pytest.mark.parametrize("engine", ["megatron", "deepspeed"])
def test_bf16_halves_the_exposed_reduction_and_the_gradient_buffer(engine):
    fp32, bf16 = _plan("ddp", "fp32", engine=engine), _plan("ddp", "bf16", engine=engine)
    # Megatron-LM without --overlap-grad-reduce: one all-reduce after the backward, all exposed
    assert fp32.dp_exposed_time is not None and bf16.dp_exposed_time is not None
    assert 1.9 < fp32.dp_exposed_time / bf16.dp_exposed_time <= 2.0  # half the bytes (a ring's latency stays)
    assert _gradients(fp32) == pytest.approx(2 * _gradients(bf16), rel=1e-12)
    assert bf16.step_time < fp32.step_time
    assert bf16.peak_memory[0] < fp32.peak_memory[0]


def test_the_distributed_optimizer_in_bf16_halves_its_reduce_scatter_and_buffer():
    fp32, bf16 = _plan("zero1", None), _plan("zero1", "bf16")  # zero1's own: Megatron-LM's fp32 buffer
    assert _gradients(fp32) == pytest.approx(2 * _gradients(bf16), rel=1e-12)
    assert bf16.dp_comm_time < fp32.dp_comm_time  # the reduce-scatter halves; the bf16 all-gather stays
    assert bf16.optimizer_time < fp32.optimizer_time  # the step reads the shard's gradient in bf16


def test_zero3_in_bf16_sends_half_and_holds_its_fp32_shard():
    fp32, bf16 = _plan("fsdp", None, engine="deepspeed"), _plan("fsdp", "bf16", engine="deepspeed")
    assert bf16.dp_comm_time < fp32.dp_comm_time
    assert _gradients(bf16) == _gradients(fp32)


# ------------------------------------------------------------------------------------ the command line
ARGS = ["--preset", "gpt-1.5b", "--gpus", "8", "--global-batch", "32", "--tp", "1", "--pp", "1", "--dp-modes",
        "zero1", "--recompute", "none", "--top", "1", "--json"]


def test_plan_prices_it_and_says_so(run_cli):
    status, text, err = run_cli("plan", *ARGS)
    assert status == 0, err
    default = json.loads(text)
    status, text, err = run_cli("plan", *ARGS, "--grad-reduce-dtype", "bf16")
    assert status == 0, err
    pinned = json.loads(text)
    before, after = default["plans"][0], pinned["plans"][0]
    assert "grad_reduce_dtype" not in before and after["grad_reduce_dtype"] == "bf16"
    assert after["memory"][0]["gradients"] == pytest.approx(before["memory"][0]["gradients"] / 2, rel=1e-12)
    assert after["dp_comm_time"] < before["dp_comm_time"]
    assert pinned["assumptions"]["grad-reduce-dtype"] == "bf16 (given: --grad-reduce-dtype)"
    assert "each data-parallel mode's own" in default["assumptions"]["grad-reduce-dtype"]
    assert "reduce-scatter bf16 gradients" in pinned["assumptions"]["gradients"]


@pytest.mark.parametrize(("engine", "value", "words"), [
    ("torchtitan", "bf16", "--grad-reduce-dtype for torchtitan must be one of fp32, got 'bf16'"),
    ("torch", "bf16", "torch has no knob --grad-reduce-dtype"),
    ("megatron", "fp16", "--grad-reduce-dtype for megatron must be one of fp32, bf16, got 'fp16'"),
])
def test_an_engine_that_cannot_express_it_refuses_in_one_line(run_cli, engine, value, words):
    unpinned = [arg for arg in ARGS if arg not in ("--recompute", "none")]  # plain torch has no --recompute
    status, _, err = run_cli("plan", *unpinned, "--engine", engine, "--grad-reduce-dtype", value)
    assert status == 2
    assert words in err and len(err.strip().splitlines()) == 1


# ------------------------------------------------------------------------------------ the readers
def test_megatron_reads_its_two_flags(tmp_path: Path):
    base = ("--num-layers 4 --hidden-size 512 --num-attention-heads 8 --seq-length 256 --max-position-embeddings 256 "
            "--vocab-size 8192 --micro-batch-size 1 --global-batch-size 8 --bf16")
    megatron = engines.get("megatron")
    for flags, dtype in (("--grad-reduce-in-bf16", "bf16"), ("--accumulate-allreduce-grads-in-fp32", "fp32"),
                         ("", None)):
        file = tmp_path / "args.sh"
        file.write_text(f"{base} {flags}\n")
        config = megatron.read(file)
        assert config.value("grad_reduce_dtype") == dtype, flags
        if dtype is not None:
            assert flags in config.source_of("grad_reduce_dtype")


def test_deepspeed_reads_communication_data_type(tmp_path: Path):
    file = tmp_path / "ds_config.json"
    base = {"train_batch_size": 8, "train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
            "zero_optimization": {"stage": 1}}
    for raw, dtype in (("BF16", "bf16"), ("fp32", "fp32"), (None, None)):
        file.write_text(json.dumps({**base, **({} if raw is None else {"communication_data_type": raw})}))
        assert engines.get("deepspeed").read(file).value("grad_reduce_dtype") == dtype
    file.write_text(json.dumps({**base, "communication_data_type": "fp16"}))
    with pytest.raises(InvalidInputError, match="not fp16"):
        engines.get("deepspeed").read(file)


def test_torchtitan_reads_mixed_precision_reduce(tmp_path: Path):
    file = tmp_path / "train.toml"
    file.write_text('[training]\nmixed_precision_reduce = "float32"\n')
    assert engines.get("torchtitan").read(file).value("grad_reduce_dtype") == "fp32"
    assert not any("mixed_precision_reduce" in key for key in engines.get("torchtitan").read(file).ignored)
    from pipeplan.engines.torchtitan_config import IGNORED_KEYS, TOML_KEYS
    assert "training.mixed_precision_reduce" in TOML_KEYS and "training.mixed_precision_reduce" not in IGNORED_KEYS
    file.write_text('[training]\nseq_len = 2048\n')  # left out: the release's default, float32
    assert engines.get("torchtitan").read(file).value("grad_reduce_dtype") == "fp32"
    file.write_text('[training]\nmixed_precision_reduce = "bfloat16"\n')
    with pytest.raises(InvalidInputError, match=r"is not Literal\['float32'\]"):
        engines.get("torchtitan").read(file)


# ------------------------------------------------------------------------------------ the exports
def test_the_exports_write_each_engines_own_key():
    from dataclasses import replace

    from pipeplan.engines.deepspeed import deepspeed_config
    from pipeplan.engines.megatron import megatron_args

    plan = Plan(pp=1, dp=8, layers_per_stage=(4,), placement=(0,), schedule="1f1b", dp_mode="zero1")
    assert "communication_data_type" not in deepspeed_config(plan)
    megatron_flags = {line for line in (Path(__file__).parent / "data" / "megatron_args.txt").read_text().splitlines()
                      if line.startswith("--")}  # Megatron-LM's parser's flags, vendored
    for dtype, flag in (("bf16", "--grad-reduce-in-bf16"), ("fp32", "--accumulate-allreduce-grads-in-fp32")):
        pinned = replace(plan, grad_reduce_dtype=dtype)
        assert deepspeed_config(pinned)["communication_data_type"] == dtype
        assert flag in megatron_args(pinned) and flag in megatron_flags
    assert not {"--grad-reduce-in-bf16", "--accumulate-allreduce-grads-in-fp32"} & set(megatron_args(plan))


def test_deepspeed_takes_the_exported_communication_data_type():
    pytest.importorskip("deepspeed", reason="DeepSpeed is not installed (pip install .[engines])")
    import torch
    from deepspeed.runtime.config import get_communication_data_type

    from pipeplan.engines.deepspeed import deepspeed_config

    for dtype, torch_dtype in (("bf16", torch.bfloat16), ("fp32", torch.float32)):
        plan = Plan(pp=1, dp=8, layers_per_stage=(4,), placement=(0,), schedule="1f1b", dp_mode="zero1",
                    grad_reduce_dtype=dtype)
        assert get_communication_data_type(deepspeed_config(plan)) == torch_dtype


def test_torchtitan_grad_reduce_dtype_assumption_says_which_modes_it_sets(run_cli):
    base = ["plan", "--preset", "gpt-1.5b", "--gpus", "8", "--global-batch", "32", "--gpu", "a100-80g", "--tp", "1",
            "--pp", "1", "--micro-batch-size", "2", "--top", "1", "--engine", "torchtitan", "--json"]
    lines = {}
    for name, extra in (("assumed", []), ("all", ["--grad-reduce-dtype", "fp32"]),
                        ("fsdp", ["--grad-reduce-dtype", "fp32", "--dp-modes", "fsdp,hsdp"])):
        status, out, err = run_cli(*base, *extra)
        assert status == 0, err
        lines[name] = json.loads(out)["assumptions"]["grad-reduce-dtype"]
    assert lines["assumed"].startswith("fsdp/hsdp fp32") and "ddp, zero1, zero2: each mode's own" in lines["assumed"]
    assert "it sets fsdp/hsdp only: ddp, zero1, zero2 priced in each mode's own dtype" in lines["all"]
    assert lines["fsdp"] == "fp32 (given: --grad-reduce-dtype)"
