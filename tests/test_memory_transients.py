"""The memory model's transients at a rank's peak: the loss's fp32 logits per engine, a recomputed layer's activations."""

from __future__ import annotations

import numpy as np
import pytest

from pipeplan import hardware
from pipeplan.engines.torchtitan_config import llama3_spec
from pipeplan.layers import LayerProfile
from pipeplan.planner import Cluster, Workload
from pipeplan.planner.evaluate import evaluate_layout
from pipeplan.planner.memory import LOSS_LOGIT_COPIES, MemoryModel, loss_layers
from pipeplan.planner.space import Config

SEQ = 512


def _work(mode: str = "none") -> Workload:
    work = Workload.from_spec(llama3_spec("debugmodel", SEQ), hardware.device("h100-80g"))
    return work if mode == "none" else work.with_recompute(mode)


def _logits_fp32(micro_batch: int, tp: int = 1) -> float:
    """The debug model's fp32 logits per microbatch: tokens × vocabulary / tp × 4 bytes."""
    return 4.0 * micro_batch * SEQ * 2048 / tp


@pytest.mark.parametrize("engine", ["torchtitan", "torch", "megatron", "deepspeed", None])
@pytest.mark.parametrize("mode", ["none", "full", "op"])
def test_the_loss_holds_the_engines_copies_of_its_fp32_logits_once(engine, mode):
    work = _work(mode)
    memory = MemoryModel(work, "adam", None, "fsdp", engine=engine)
    loss, _ = memory.transient_bytes(2, mode)
    head = loss_layers(work)[0][0]
    assert head == work.num_layers - 1 and np.count_nonzero(loss) == 1
    stored = work.profile(2, mode).activation_bytes[head]
    logits = _logits_fp32(2)
    counted = logits if stored >= logits else 0.0
    assert counted > 0  # every mode stores the head's logits: no engine checkpoints the head, full neither
    assert loss[head] == pytest.approx(LOSS_LOGIT_COPIES[engine] * logits - counted)


def test_eager_pytorch_loss_holds_twice_megatrons_fused_one():
    assert LOSS_LOGIT_COPIES["torchtitan"] == LOSS_LOGIT_COPIES["torch"] == 3.0
    assert LOSS_LOGIT_COPIES["megatron"] == LOSS_LOGIT_COPIES[None] == 1.5


def test_tensor_parallel_shards_the_logits_over_the_vocabulary():
    work = _work().with_tensor_parallel(2)
    assert loss_layers(work)[0][1] == pytest.approx(SEQ * 2048 / 2)


def test_a_recomputed_layer_holds_its_whole_activations_during_its_backward():
    whole = np.asarray(_work().profile(1, "none").activation_bytes)
    kept = np.asarray(_work("full").profile(1, "full").activation_bytes)
    _, recompute = MemoryModel(_work("full"), "adam", None).transient_bytes(1, "full")
    head = _work().num_layers - 1
    assert recompute[head] == 0.0  # the loss is priced apart
    assert recompute.max() == pytest.approx((whole - kept)[:head].max())
    assert recompute.max() > 0
    _, none = MemoryModel(_work(), "adam", None).transient_bytes(1, "none")
    assert not none.any()


def test_the_peak_of_a_plan_carries_the_engines_loss():
    work = _work()
    cluster = Cluster.of("h100-80g", 1)
    config = Config(1, 1, 2, 1, "1f1b", 1, "none", 1, "ddp")
    peaks = {engine: max(evaluate_layout(work, cluster, config, [work.num_layers], engine=engine).peak_memory)
             for engine in ("torchtitan", "megatron")}
    assert peaks["torchtitan"] - peaks["megatron"] == pytest.approx(1.5 * _logits_fp32(2))


def test_a_measured_profile_has_no_transients():
    profile = LayerProfile.uniform(4, forward=1.0, params=1e6, activation_bytes=1e6)
    loss, recompute = MemoryModel(Workload.from_profile(profile), "adam", None).transient_bytes(1, "none")
    assert not loss.any() and not recompute.any()


def _megatron_block(mode: str) -> Workload:
    from pipeplan import presets
    return Workload.from_spec(presets.get("gpt-1.5b"), hardware.device("h100-80g"), tensor_parallel=2).with_recompute(mode)


def test_block_n_transients_are_the_staged_profiles_not_the_lower_bounds():
    """Under ``block:N`` the head runs ``none`` in its stage and stores one microbatch's fp32 logits: the loss adds
    only the copies beyond them, and only the blocks that recompute hold a recomputed forward (review)."""
    mode, sizes, placement = "block:2", (6, 6, 6, 6), (0, 1, 2, 3)
    work = _megatron_block(mode)
    memory = MemoryModel(work, "adam", None, engine="megatron")
    config = Config(4, 1, 1, 4, "1f1b", 1, mode, 2, "ddp")
    static = memory.static_memory(config, sizes, placement)
    staged = np.asarray(work.stage_profile(1, mode, sizes).activation_bytes)
    whole = np.asarray(work.source(1, "none").activation_bytes)
    head, logits = loss_layers(work)[0]
    fp32 = 4.0 * logits
    assert head == work.num_layers - 1 and staged[head] >= fp32  # the staged head keeps its logits
    last = slice(18, head)  # the last stage's decoders: 18 and 19 recompute, 20 and 21 do not
    expected = (LOSS_LOGIT_COPIES["megatron"] - 1.0) * fp32 + float((whole - staged)[last].max())
    assert static[3].activations == pytest.approx(expected, rel=1e-12)
    lower = memory.transient_bytes(1, mode)[0][head]  # the lower bound's head (full's) keeps its logits too
    assert lower == pytest.approx((LOSS_LOGIT_COPIES["megatron"] - 1.0) * fp32)
    assert static[3].activations == pytest.approx(lower + float((whole - staged)[last].max()), rel=1e-12)


def test_a_relaxed_stage_is_charged_its_own_modes_transients():
    work = _work()
    memory = MemoryModel(work, "adam", None, engine="megatron")
    sizes, placement = (2, work.num_layers - 2), (0, 1)
    config = Config(2, 1, 1, 4, "1f1b", 1, "full", 1, "ddp")
    ceiling = memory.static_memory(config, sizes, placement)
    relaxed = memory.static_memory(config, sizes, placement, ("full", "none"))
    loss_full, recompute_full = memory.transient_bytes(1, "full")
    loss_none, _ = memory.transient_bytes(1, "none")
    assert relaxed[0].activations == ceiling[0].activations == pytest.approx(
        float(loss_full[:2].sum()) + float(recompute_full[:2].max()))
    assert relaxed[1].activations == pytest.approx(float(loss_none.sum()))  # no recomputed forward, the none loss
    assert relaxed[1].activations < ceiling[1].activations
