"""DeepSpeed's knobs in the step model and on ``plan``: overlap_comm, reduce_bucket_size and the hooks' host cost.

``overlap-comm off`` is never faster than ``on`` (and beside a pipeline they are the same: the
pipeline engine reduces after its schedule); the hooks' host time grows with the number of
trainable tensors and is charged by no other engine; with the hooks off and no overlap a
DeepSpeed plan costs what the same Megatron-LM plan without overlap costs, and with the hooks on
it differs by the hooks' floor alone; the CLI refuses a bad value, or a DeepSpeed knob given to
Megatron-LM, in one line.
"""

from __future__ import annotations

import json

import pytest

from pipeplan import engines, hardware
from pipeplan.engines.deepspeed import HOOK_US, REDUCE_BUCKET_SIZE, deepspeed_pricing
from pipeplan.models.modules import Embedding, LMHead, TransformerStack
from pipeplan.models.spec import ModelSpec
from pipeplan.models.tensor_counts import layer_tensor_counts
from pipeplan.plan import Plan
from pipeplan.planner import Cluster, Workload
from pipeplan.planner.engine_costs import EngineCosts
from pipeplan.planner.evaluate import evaluate_layout
from pipeplan.planner.space import Config

H100 = hardware.device("h100-80g")
DEEPSPEED = engines.get("deepspeed")


def gpt(layers: int = 8, hidden: int = 1024, heads: int = 16, seq: int = 512, *, bias: bool = True,
        norm: str = "layernorm") -> ModelSpec:
    """A small GPT: embedding, ``layers`` blocks, a tied head."""
    return ModelSpec("gpt", (
        Embedding(name="embedding", vocab_size=8192, hidden_size=hidden, tokens=seq, position_tokens=seq),
        TransformerStack(name="layers", num_layers=layers, hidden_size=hidden, num_heads=heads, seq_length=seq,
                         ffn_hidden_size=4 * hidden, bias=bias, norm=norm, causal=True,  # type: ignore[arg-type]
                         final_norm=True),
        LMHead(name="head", vocab_size=8192, hidden_size=hidden, tokens=seq, tied_to="embedding"),
    ))


def _plan(spec: ModelSpec, mode: str, *, pp: int = 1, dp: int = 8, micro: int = 1, m: int = 4,
          knobs: dict[str, str] | None = None, sync: str = "megatron") -> Plan:
    """One layout evaluated as the search would, DeepSpeed's knobs priced when ``knobs`` is given."""
    work = Workload.from_spec(spec, H100)
    cluster = Cluster.of("h100-80g", pp * dp)
    config = Config(pp, dp, micro, m, "1f1b", 1, "none", 1, mode)
    layers = work.num_layers
    sizes = [layers // pp + (1 if s < layers % pp else 0) for s in range(pp)]
    costs = None if knobs is None else EngineCosts.of(DEEPSPEED, knobs)
    return evaluate_layout(work, cluster, config, sizes, sync=sync, engine_costs=costs)


# ------------------------------------------------------------------------------------ the sources
def test_defaults_are_deepspeeds_own():
    # deepspeed 0.19.8 runtime/zero/config.py: reduce_bucket_size = Field(pp_int(5e8)); overlap_comm None, then
    # overlap_comm = (stage == ZeroStageEnum.weights), i.e. on at ZeRO-3 only
    assert REDUCE_BUCKET_SIZE == 500_000_000
    assert DEEPSPEED.knobs.get("reduce-bucket-size").default == "500000000"
    assert DEEPSPEED.knobs.get("overlap-comm").default is None
    pricing = deepspeed_pricing({})
    assert pricing.overlap == {"ddp": False, "zero1": False, "zero2": False}
    assert pricing.overlap_scatter == {"fsdp": True}
    assert pricing.hook_us["zero2"] == HOOK_US[2] and pricing.hook_us["fsdp"] == HOOK_US[3]


def test_tensor_counts_follow_the_layers():
    with_bias = layer_tensor_counts(gpt(layers=3))
    # embedding: table + positions; a block: qkv, proj, fc1, fc2 with biases (8) + two LayerNorms (4); the last
    # block's final norm 2 more; a tied head none
    assert with_bias == [2, 12, 12, 14, 0]
    assert layer_tensor_counts(gpt(layers=3, bias=False, norm="rmsnorm")) == [2, 6, 6, 7, 0]
    frozen = gpt(layers=3)
    frozen = ModelSpec("frozen", (frozen.modules[0], TransformerStack(**{**frozen.modules[1].__dict__, "frozen": True}),
                                  frozen.modules[2]))
    assert layer_tensor_counts(frozen)[1:4] == [0, 0, 0]


# --------------------------------------------------------------------------------- overlap_comm
@pytest.mark.parametrize("mode", ["zero1", "zero2", "fsdp"])
def test_overlap_comm_off_never_faster_than_on(mode):
    spec = gpt()
    for bucket in ("500000000", "10000000"):  # the default holds this model's gradients in one bucket: nothing hides
        on = _plan(spec, mode, knobs={"overlap-comm": "on", "hook-cost": "off", "reduce-bucket-size": bucket})
        off = _plan(spec, mode, knobs={"overlap-comm": "off", "hook-cost": "off", "reduce-bucket-size": bucket})
        assert off.step_time >= on.step_time * (1 - 1e-12)
    assert off.step_time > on.step_time
    assert off.dp_exposed_time > on.dp_exposed_time
    assert off.pipeline_time == on.pipeline_time  # overlap is communication only
    if mode != "fsdp":  # an fsdp plan's grad_sync names the mode (it always gathers per layer)
        # a bucket other than DeepSpeed's default is in the overlapping sync's name (the export writes it)
        assert on.grad_sync == "deepspeed-overlap:bucket=10000000" and off.grad_sync == "deepspeed"


def test_default_overlap_is_off_at_zero2_on_at_zero3():
    spec = gpt()
    for mode, same in (("zero2", "off"), ("fsdp", "on")):
        default = _plan(spec, mode, knobs={"hook-cost": "off"})
        pinned = _plan(spec, mode, knobs={"hook-cost": "off", "overlap-comm": same})
        assert default.step_time == pinned.step_time


def test_beside_a_pipeline_overlap_comm_changes_nothing():
    # PipelineEngine.is_gradient_accumulation_boundary is true only inside _exec_reduce_grads (deepspeed
    # runtime/pipe/engine.py): the hooks never reduce; everything is reduced after the schedule
    spec = gpt()
    on = _plan(spec, "zero1", pp=2, dp=4, knobs={"overlap-comm": "on", "hook-cost": "off"})
    off = _plan(spec, "zero1", pp=2, dp=4, knobs={"overlap-comm": "off", "hook-cost": "off"})
    assert on.step_time == off.step_time


def test_a_smaller_bucket_hides_more():
    spec = gpt(layers=16, hidden=2048)
    big = _plan(spec, "zero2", knobs={"overlap-comm": "on", "hook-cost": "off"})
    small = _plan(spec, "zero2", knobs={"overlap-comm": "on", "hook-cost": "off", "reduce-bucket-size": "2e7"})
    assert small.dp_exposed_time < big.dp_exposed_time


# ------------------------------------------------------------------------------------- the hooks
def _hook_time(spec: ModelSpec, mode: str) -> float:
    measured = _plan(spec, mode, knobs={"hook-cost": "measured"})
    off = _plan(spec, mode, knobs={"hook-cost": "off"})
    assert measured.step_time >= off.step_time
    return measured.step_time - off.step_time


@pytest.mark.parametrize("mode", ["zero2", "fsdp"])
def test_hook_cost_grows_with_tensor_count(mode):
    # tiny layers (host-bound): twice the tensors per block (biases, LayerNorm) at nearly the same FLOPs
    many = _hook_time(gpt(hidden=128, heads=2, seq=64), mode)
    few = _hook_time(gpt(hidden=128, heads=2, seq=64, bias=False, norm="rmsnorm"), mode)
    assert many > few > 0
    deeper = _hook_time(gpt(layers=16, hidden=128, heads=2, seq=64), mode)
    assert deeper > many


def test_hook_cost_is_hidden_behind_a_busy_gpu():
    # a large layer's backward outlasts its dozen hooks: nothing shows at ZeRO-2
    assert _hook_time(gpt(hidden=4096, heads=32, seq=2048, layers=2), "zero2") == 0.0


def test_no_other_engine_prices_hooks():
    for name in engines.names():
        if name != "deepspeed":
            costs = EngineCosts.of(engines.get(name), {})
            assert costs is None or not costs.hooks  # plain torch prices DDP's buckets, no hooks
    costs = EngineCosts.of(DEEPSPEED, {"hook-cost": "off"})
    assert costs is not None and all(costs.hooks_for(mode) == (0.0, 0.0) for mode in ("ddp", "zero1", "fsdp"))


def test_deepspeed_differs_from_megatron_by_the_named_terms_only():
    spec = gpt(hidden=256, heads=4, seq=128)
    for mode in ("ddp", "zero1"):
        megatron = _plan(spec, mode, sync="megatron")  # Megatron-LM without --overlap-grad-reduce
        bare = _plan(spec, mode, knobs={"overlap-comm": "off", "hook-cost": "off"})
        assert bare.step_time == megatron.step_time
        hooked = _plan(spec, mode, knobs={"overlap-comm": "off"})
        backward_us, step_us = HOOK_US[{"ddp": 0, "zero1": 1}[mode]]
        work = Workload.from_spec(spec, H100).profile(1, "none")
        counts = layer_tensor_counts(spec)
        floor = sum(max(0.0, backward_us * 1e-3 * n - b) for n, b in zip(counts, work.backward))
        assert hooked.pipeline_time - megatron.pipeline_time == pytest.approx(4 * floor, rel=1e-9, abs=1e-9)
        optimizer = max(megatron.optimizer_time, step_us * 1e-3 * sum(counts))
        assert hooked.optimizer_time == pytest.approx(optimizer, rel=1e-9)
        assert hooked.dp_exposed_time == pytest.approx(megatron.dp_exposed_time, rel=1e-9)


# ------------------------------------------------------------------------------------------- CLI
PLAN = ("plan", "--preset", "pi0", "--gpus", "8", "--global-batch", "64", "--pp", "1", "--tp", "1",
        "--micro-batch-size", "2", "--dp-modes", "zero2", "--top", "1")


@pytest.mark.parametrize("argv, words", [
    (("--engine", "deepspeed", "--overlap-comm", "maybe"), "--overlap-comm for deepspeed must be one of on, off, got 'maybe'"),
    (("--engine", "megatron", "--overlap-comm", "on"), "megatron has no knob --overlap-comm"),
    (("--overlap-comm", "on"), "megatron has no knob --overlap-comm"),
    (("--engine", "deepspeed", "--reduce-bucket-size", "lots"),
     "--reduce-bucket-size for deepspeed must be a number of elements > 0, got 'lots'"),
    (("--engine", "deepspeed", "--reduce-bucket-size", "0"), "--reduce-bucket-size for deepspeed must be a number"),
    (("--engine", "deepspeed", "--hook-cost", "-3"), "--hook-cost for deepspeed must be measured, off or a number"),
    (("--engine", "deepspeed", "--sequence-parallel", "off"), "deepspeed has no knob --sequence-parallel"),
])
def test_cli_refuses_in_one_line(run_cli, argv, words):
    status, out, err = run_cli(*PLAN, *argv)
    assert status == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and words in err


def test_cli_prices_and_names_the_knobs(run_cli):
    status, out, err = run_cli(*PLAN, "--json", "--engine", "deepspeed")
    assert status == 0, err
    default = json.loads(out)
    assumed = default["assumptions"]
    assert assumed["overlap-comm"].startswith("DeepSpeed's default: off at ZeRO 1-2, on at ZeRO-3")
    assert assumed["reduce-bucket-size"].startswith("500000000 (assumed")
    assert assumed["hook-cost"].startswith("measured (assumed")
    assert default["plans"][0]["grad_sync"] == "deepspeed"
    status, out, err = run_cli(*PLAN, "--json", "--engine", "deepspeed", "--overlap-comm", "on")
    assert status == 0, err
    on = json.loads(out)
    assert on["assumptions"]["overlap-comm"] == "on (given: --overlap-comm)"
    assert on["plans"][0]["grad_sync"] == "deepspeed-overlap"
    assert on["plans"][0]["step_time"] < default["plans"][0]["step_time"]


def test_overlap_comm_on_reaches_the_ds_config(tmp_path):
    # the plan was priced with the reduction overlapped: the export asks DeepSpeed for it (its default is off)
    from pipeplan.engines.deepspeed import deepspeed_config, deepspeed_files

    spec = gpt()
    on = _plan(spec, "zero2", knobs={"overlap-comm": "on"})
    default = _plan(spec, "zero2", knobs={})
    assert deepspeed_config(on)["zero_optimization"] == {"stage": 2, "overlap_comm": True}
    assert deepspeed_config(default)["zero_optimization"] == {"stage": 2}
    for file in deepspeed_files(on):
        (tmp_path / file.name).write_text(file.text)
    read = DEEPSPEED.read(tmp_path)  # read back: overlap_comm is a key DeepSpeed has (listed, not refused)
    assert read.value("dp_mode") == "zero2"


# ------------------------------------------------------------------ the pipeline engine (pp > 1)
A100 = hardware.device("a100-80g")


def _a100_plan(mode: str, *, pp: int, costs: EngineCosts | None, m: int = 8) -> Plan:
    spec = gpt()
    work = Workload.from_spec(spec, A100)
    config = Config(pp, 2, 1, m, "1f1b", 1, "none", 1, mode)
    layers = work.num_layers
    sizes = [layers // pp + (1 if s < layers % pp else 0) for s in range(pp)]
    return evaluate_layout(work, Cluster.of("a100-80g", 2 * pp), config, sizes, sync="megatron", engine_costs=costs)


def _stripped(costs: EngineCosts, *, accumulate: bool = False, factor: bool = False) -> EngineCosts:
    from dataclasses import replace

    return replace(costs, accumulate=costs.accumulate if accumulate else {},
                   pipeline_factors=costs.pipeline_factors if factor else {})


def test_pipeline_engine_costs_come_from_the_source_and_one_fitted_factor():
    from pipeplan.engines.deepspeed import ACCUMULATE_BYTES, PIPELINE_FACTORS

    # BF16_Optimizer (stage 0 + bf16): clear_lp_grads (2 B written) + hp_grad.add_(lp.grad) (2 + 4 read, 4 written);
    # ZeRO-1: autograd's grad += new in bf16 (2 + 2 read, 2 written); the pipeline engine runs no other stage
    assert ACCUMULATE_BYTES == {0: 12.0, 1: 6.0}
    pricing = deepspeed_pricing({})
    assert pricing.accumulate_bytes == {"ddp": 12.0, "zero1": 6.0}
    assert set(pricing.pipeline_factors) == {"a100-80g"} == set(PIPELINE_FACTORS)
    assert pricing.pipeline_factors["a100-80g"] > 1.0  # the published runs are slower than the rest prices them


def test_accumulation_adds_an_hbm_pass_per_microbatch_to_each_backward():
    from pipeplan.costs import StageCosts
    from pipeplan.planner.engine_costs import PipelineEngineCosts
    from pipeplan.planner.step import optimizer_ms

    costs = StageCosts(forward=[1.0, 1.0], backward=[2.0, 2.0])
    params = [1e9, 3e8]
    applied = PipelineEngineCosts(12.0, {"a100-80g": 1.5}).applied(costs, params, A100, 1e-3)
    assert applied.forward == pytest.approx((1.5, 1.5))
    assert applied.backward == pytest.approx(tuple(3.0 + optimizer_ms(12.0 * p, p, A100) for p in params))
    assert applied.backward[0] - 3.0 > 10.0  # 12 GB of HBM traffic: milliseconds on an A100
    # another device takes no factor; no bytes and no factor: the same costs
    other = PipelineEngineCosts(0.0, {"a100-80g": 1.5}).applied(costs, params, H100, 1e-3)
    assert other is costs


def test_pipeline_engine_costs_apply_beside_a_pipeline_only():
    costs = EngineCosts.of(DEEPSPEED, {"hook-cost": "off"})
    assert costs is not None
    for mode in ("ddp", "zero1"):
        alone = _a100_plan(mode, pp=1, costs=costs)
        assert alone.step_time == _a100_plan(mode, pp=1, costs=_stripped(costs)).step_time
        piped = _a100_plan(mode, pp=2, costs=costs)
        bare = _a100_plan(mode, pp=2, costs=_stripped(costs))
        accumulated = _a100_plan(mode, pp=2, costs=_stripped(costs, accumulate=True))
        assert bare.step_time < accumulated.step_time < piped.step_time
        # without them (and hooks off, no overlap) the pipeline engine costs what Megatron-LM does
        assert bare.step_time == _a100_plan(mode, pp=2, costs=None).step_time
    # BF16_Optimizer (ddp: stage 0) moves twice ZeRO-1's bytes per microbatch
    extra = {mode: _a100_plan(mode, pp=2, costs=_stripped(costs, accumulate=True)).pipeline_time
             - _a100_plan(mode, pp=2, costs=_stripped(costs)).pipeline_time for mode in ("ddp", "zero1")}
    assert extra["ddp"] > 1.5 * extra["zero1"] > 0


def test_two_modes_pipeline_costs_are_not_shared_through_the_workloads_caches():
    # the search gives every data-parallel mode at one tp the same workload, whose timelines are cached:
    # DeepSpeed's accumulation differs by mode (ddp 12 B, zero1 6 B per parameter), so the caches must
    # tell them apart — a second evaluator on the shared workload gives what it gives on a fresh one
    from pipeplan.planner import Cluster, Workload
    from pipeplan.planner.engine_costs import PipelineEngineCosts
    from pipeplan.planner.evaluate import Evaluator
    from pipeplan.planner.space import Config

    def step(workload, accumulate_bytes):
        evaluator = Evaluator(workload, Cluster.of("a100-80g", 4), None, "adam", "eager", sync="megatron",
                              dp_mode="ddp", pipeline=PipelineEngineCosts(accumulate_bytes, {}))
        n = workload.num_layers
        return evaluator.evaluate(Config(2, 2, 1, 8, "1f1b", 1, "none", 1, "ddp"), (n // 2, n - n // 2),
                                  ("none", "none")).step_time

    shared = Workload.from_spec(gpt(), A100)
    with_accumulation = step(shared, 12.0)
    assert step(shared, 0.0) == step(Workload.from_spec(gpt(), A100), 0.0) < with_accumulation
