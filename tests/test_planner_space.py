"""The planner's space beyond the pipeline: tensor parallelism, data-parallel modes, the baselines.

Memory per mode follows ZeRO (Rajbhandari et al. 2020, §5: 2Ψ + 2Ψ + KΨ with K = 12,
sharded by stage) and torchtitan's FSDP2 mixed precision (bf16 parameters, fp32
reduction: torchtitan/distributed/utils.py); tensor parallelism follows Megatron-LM
(Shoeybi et al. 2019 §3: two all-reduces per block forward and two backward).
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeplan import data_parallel, hardware
from pipeplan.data_parallel import hsdp_shards
from pipeplan.errors import InvalidInputError
from pipeplan.models.layer_costs import layer_profile, tensor_parallel_traffic
from pipeplan.models.modules import Embedding, LMHead, TransformerStack
from pipeplan.models.spec import ModelSpec
from pipeplan.models.training import ReferenceTraining
from pipeplan.planner import Cluster, SearchOptions, Workload, search
from pipeplan.planner.search import megatron_split
from pipeplan.engines.megatron import megatron_args
from pipeplan.planner.cluster import ring_pass_ms
from pipeplan.planner.memory import MemoryModel, OptimizerBytes
from pipeplan.planner.space import Config, SearchSpace
from pipeplan.planner.step import fsdp_exposed_ms


def tiny_spec(layers: int = 4, hidden: int = 512, heads: int = 8, seq: int = 256,
              training: ReferenceTraining | None = None) -> ModelSpec:
    return ModelSpec("tiny", (
        Embedding(name="embed", vocab_size=4096, hidden_size=hidden, tokens=seq),
        TransformerStack(name="llm", num_layers=layers, hidden_size=hidden, num_heads=heads, seq_length=seq,
                         ffn_hidden_size=4 * hidden),
        LMHead(name="head", vocab_size=4096, hidden_size=hidden, tokens=seq),
    ), training=training)


# ------------------------------------------------------------------ memory per mode
@pytest.mark.parametrize("d", [2, 4, 8])
def test_bytes_per_parameter_follow_zero_and_fsdp(d):
    mode = data_parallel.get
    assert OptimizerBytes.for_mode("adam", mode("ddp"), d).per_trainable == 16
    assert OptimizerBytes.for_mode("adam", mode("zero1"), d).per_trainable == pytest.approx(6 + 12 / d)
    assert OptimizerBytes.for_mode("adam", mode("zero2"), d).per_trainable == pytest.approx(2 + 14 / d)
    assert OptimizerBytes.for_mode("adam", mode("fsdp"), d).per_trainable == pytest.approx(16 / d)
    assert OptimizerBytes.for_mode("adam", mode("fsdp"), d, pipelined=True).per_trainable == pytest.approx(6 + 16 / d)
    # the evaluator's "distributed" shorthand (Megatron-LM's distributed optimizer) is zero1
    assert OptimizerBytes.for_mode("distributed", mode("ddp"), d) == OptimizerBytes.for_mode("adam", mode("zero1"), d)


def test_static_memory_shrinks_with_sharding_and_fsdp_holds_its_gathered_layers():
    work = Workload.from_spec(tiny_spec(), hardware.device("h100-80g"))
    profile = work.profile(1)
    config = Config(1, 4, 1, 4, "1f1b")
    totals = {}
    for mode in data_parallel.names():
        memory = MemoryModel(work, "adam", None, mode, gpus_per_node=2)
        held = memory.static_memory(Config(1, 4, 1, 4, "1f1b", dp_mode=mode), (profile.num_layers,), (0,))[0]
        totals[mode] = replace(held, activations=0.0)  # the state alone (activations: the loss's transient)
    assert totals["ddp"].total > totals["zero1"].total > totals["zero2"].total
    params = sum(profile.params)
    largest = sorted(profile.params)[-2:]
    assert totals["fsdp"].total == pytest.approx(16 * params / 4 + 4 * sum(largest))
    assert totals["hsdp"].total == pytest.approx(16 * params / 2 + 4 * sum(largest))  # 2 shards in a node
    assert config.num_gpus == 4


def test_hsdp_shards_inside_a_node_and_replicates_across():
    assert hsdp_shards(1, 1, 16, 8) == 8
    assert hsdp_shards(2, 1, 8, 8) == 4
    assert hsdp_shards(1, 8, 4, 8) == 1  # each replica of a stage sits on its own node: no HSDP
    assert hsdp_shards(1, 1, 8, 8) == 1  # one node: that is FSDP
    space = SearchSpace(num_gpus=4, global_batch=8, num_layers=6, dp_modes=data_parallel.names(), gpus_per_node=2)
    assert "hsdp" in space.modes_for(1, 1, 4) and "hsdp" not in space.modes_for(1, 2, 2)
    assert space.modes_for(1, 4, 1) == ["ddp"]


# ------------------------------------------------------------------ FSDP's exposed time
@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 5), st.floats(0, 5), st.floats(0, 2), st.floats(0, 2)), min_size=1, max_size=8))
def test_fsdp_exposure_is_between_its_unhidable_part_and_all_of_it(layers):
    forward, backward, gather, scatter = (list(column) for column in zip(*layers))
    exposed = fsdp_exposed_ms(forward, backward, gather, scatter)
    least = gather[0] + gather[-1] + scatter[0]
    assert least - 1e-9 <= exposed <= 2 * sum(gather) + sum(scatter) + 1e-9
    assert fsdp_exposed_ms([0.0] * len(forward), [0.0] * len(forward), gather, scatter) == pytest.approx(
        2 * sum(gather) + sum(scatter))


# ------------------------------------------------------------------ tensor parallelism
def test_tensor_parallel_divides_the_work_and_adds_its_collectives():
    spec = tiny_spec()
    device = hardware.device("h100-80g")
    work = Workload.from_spec(spec, device)
    assert work.tensor_parallel_degrees == (1, 2, 4, 8)
    one, two = work.profile(2, "none"), work.with_tensor_parallel(2).profile(2, "none")
    assert sum(two.params) == pytest.approx(sum(one.params) / 2)
    bare = layer_profile(spec, device, 2, recompute="none", tensor_parallel=2, sequence_parallel=True)
    traffic = tensor_parallel_traffic(spec, 2, recompute="none")
    block = 1  # layer 1 is the first transformer block: 4 ring passes each way of b·s·h·2 bytes
    assert traffic[block][:2] == (4, 4) and traffic[block][2] == 4 * 2 * 256 * 512 * 2
    link = hardware.link("nvlink-h100")  # the h100's link inside a node
    passes = 4 * ring_pass_ms(link, traffic[block][2] / 4, 2)
    assert two.forward[block] == pytest.approx(bare.forward[block] + passes)  # exposed: no --tp-comm-overlap
    # the backward's collectives run beside the weight-gradient GEMMs: only what they cannot cover shows
    assert two.backward[block] == pytest.approx(bare.backward[block] + max(0.0, passes - bare.weight[block]))
    assert two.weight[block] == bare.weight[block]  # no collective in the weight gradient
    full = tensor_parallel_traffic(spec, 2, recompute="full")
    assert full[block][1] == 8  # the forward's collectives run again in the backward
    with pytest.raises(InvalidInputError, match="must divide"):
        work.with_tensor_parallel(3)


# ------------------------------------------------------------------ the search
@settings(max_examples=4, deadline=None)
@given(batch=st.sampled_from([8, 16]), memory=st.sampled_from([1.2e9, 4e9, 40e9]))
def test_pruned_search_equals_exhaustive_enumeration_with_tp_and_every_mode(batch, memory):
    work = Workload.from_spec(tiny_spec(), hardware.device("h100-80g"))
    cluster = Cluster(4, hardware.device("h100-80g"), hardware.link("nvlink-h100"), hardware.link("ib-ndr"), 2)
    options = dict(memory_capacity=memory, schedules=["1f1b", "zb-h1", "interleaved"], max_virtual_stages=2)
    try:
        full = search(work, cluster, batch, SearchOptions(top=3, exhaustive=True, **options))
    except InvalidInputError:
        return
    except Exception as error:  # noqa: BLE001 - nothing fits: the pruned search must say so too
        with pytest.raises(type(error)):
            search(work, cluster, batch, SearchOptions(top=3, **options))
        return
    pruned = search(work, cluster, batch, SearchOptions(top=3, **options))
    assert pruned.best.step_time == pytest.approx(full.best.step_time, rel=1e-12)
    assert {(p.tp, p.dp_mode) for p in full.plans} <= {(t, m) for t in (1, 2) for m in data_parallel.names()}
    everything = search(work, cluster, batch, SearchOptions(top=200, exhaustive=True, **options))
    seen = {(p.tp, p.dp_mode) for p in everything.plans}
    assert any(t == 2 for t, _ in seen) and {"fsdp", "zero1"} <= {m for _, m in seen}
    assert all(p.num_gpus == 4 for p in full.plans)


def test_baselines_follow_the_reference_and_megatron_puts_tp_over_a_node():
    training = ReferenceTraining(recompute={"llm": "full"}, dp_mode="fsdp", source="a test")
    work = Workload.from_spec(tiny_spec(training=training), hardware.device("h100-80g"))
    cluster = Cluster(4, hardware.device("h100-80g"), hardware.link("nvlink-h100"), hardware.link("ib-ndr"), 2)
    result = search(work, cluster, 16, SearchOptions(top=2))
    reference, megatron = result.baselines
    assert reference.plan is not None and (reference.plan.pp, reference.plan.tp, reference.plan.dp_mode) == (1, 1, "fsdp")
    assert set(reference.plan.recompute) == {"full"}
    assert megatron.plan is not None and (megatron.plan.tp, megatron.plan.pp) == (2, 1)  # a node's 2 GPUs; fits
    assert megatron.plan.dp_mode == "zero1" and megatron.plan.schedule == "1f1b"
    assert "--overlap-grad-reduce" in " ".join(megatron_args(megatron.plan))  # timed with the overlap
    for baseline in result.baselines:
        assert result.best.step_time <= baseline.step_time * (1 + 1e-12)
    payload = result.to_dict()
    assert [b["name"] for b in payload["baselines"]] == ["reference-fsdp", "megatron-recommended"]
    assert all({"tp", "dp_mode", "recompute_by_module", "ratio_to_best_baseline"} <= set(p) for p in payload["plans"])
    assert payload["plans"][0]["recompute_by_module"].keys() == {"llm"}


def test_megatron_recommended_adds_pipeline_stages_only_to_fit():
    work = Workload.from_spec(tiny_spec(layers=8, hidden=2048, heads=16), hardware.device("h100-80g"))
    cluster = Cluster(16, hardware.device("h100-80g"), hardware.link("nvlink-h100"), hardware.link("ib-ndr"), 8)
    loose = search(work, cluster, 16, SearchOptions(dp_modes=["ddp", "zero1"], top=1)).baselines[1].plan
    assert loose is not None and (loose.tp, loose.pp) == (8, 1)
    weights = 16 * sum(work.profile(1).params) / 8
    tight = search(work, cluster, 16, SearchOptions(memory_capacity=weights * 0.6, dp_modes=["ddp", "zero1"], top=1))
    megatron = tight.baselines[1].plan
    assert megatron is not None and megatron.fits and (megatron.tp, megatron.pp) == (8, 2)


@pytest.mark.parametrize("layers,stages", [(50, 4), (50, 8), (48, 8), (7, 2), (23, 5), (100, 16)])
def test_megatron_split_is_one_megatron_accepts(layers, stages):
    sizes = megatron_split(layers, stages)
    assert sum(sizes) == layers and len(sizes) == stages and min(sizes) >= 1
    middle = sizes[1:-1]
    assert len(set(middle)) <= 1  # only the first and last stage may differ (--decoder-first/last-...)
    assert max(sizes) - min(sizes) <= (stages + 1) // 2
