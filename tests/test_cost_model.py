"""The per-operator cost model: each layer's kernels, and a device that times them."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import given, strategies as st

from pipeplan import hardware, presets
from pipeplan.errors import InvalidInputError
from pipeplan.hardware import GemmPoint
from pipeplan.models.layer_costs import layer_costs, layer_profile
from pipeplan.operations import gemm, memory
from pipeplan.models.modules import TransformerStack
from pipeplan.models.spec import ModelSpec
from pipeplan.presets.reference import zero_bubble_gpt

A100 = hardware.device("a100-80g")


def _matrix_flops(ops):
    return sum(op.flops for op in ops if op.kind != "memory")


def test_a_gpt_layers_kernels_carry_the_papers_flops():
    # Qi et al. 2024, Table 1: F = sbh(24h + 4s), B = sbh(24h + 8s), W = 24sbh² (no recompute)
    spec = presets.get("gpt-1.5b")
    b, s, h = 2, 1024, 2304
    layer = layer_costs(spec, b, recompute="none")[1]
    assert _matrix_flops(layer.forward_ops) == pytest.approx(s * b * h * (24 * h + 4 * s))
    assert _matrix_flops(layer.input_grad_ops) == pytest.approx(s * b * h * (24 * h + 8 * s))
    assert _matrix_flops(layer.weight_grad_ops) == pytest.approx(24 * s * b * h * h)


def _flash(spec):
    """``spec`` with FlashAttention in every stack."""
    return ModelSpec(spec.name, tuple(replace(m, attention="flash") if isinstance(m, TransformerStack) else m
                                      for m in spec.modules))


def test_flash_attention_backward_does_two_and_a_half_forwards_and_full_recompute_adds_the_forward():
    # Dao 2023 (FlashAttention-2) §3.1: the backward kernel performs 2.5x the forward's matmul FLOPs
    spec = _flash(presets.get("gpt-1.5b"))
    none = layer_costs(spec, 2, recompute="none")[1]
    selective = layer_costs(spec, 2, recompute="selective")[1]
    full = layer_costs(spec, 2, recompute="full")[1]
    [forward] = [op for op in selective.forward_ops if op.kind == "attention"]
    [backward] = [op for op in selective.input_grad_ops if op.kind == "attention"]
    assert backward.flops == pytest.approx(2.5 * forward.flops) and forward.causal
    # flash never stores the scores: selective recompute is no recompute at all
    assert none.input_grad_ops == selective.input_grad_ops and none.activation_bytes == selective.activation_bytes
    assert full.input_grad_ops == full.forward_ops + selective.input_grad_ops
    assert A100.ops_milliseconds(full.input_grad_ops) == pytest.approx(
        A100.ops_milliseconds(selective.forward_ops) + A100.ops_milliseconds(selective.input_grad_ops))


def test_eager_selective_recompute_reruns_the_materialised_attention_before_b():
    spec = presets.get("gpt-1.5b")  # Megatron-LM's local (eager) core attention
    none, selective = (layer_costs(spec, 2, recompute=mode)[1] for mode in ("none", "selective"))
    core = [op.name for op in selective.input_grad_ops[:5]]
    assert core == ["scores", "softmax", "attention_dropout", "context", "context.copy"]
    assert selective.input_grad_ops[5:] == none.input_grad_ops
    assert _matrix_flops(selective.input_grad_ops) - _matrix_flops(none.input_grad_ops) == pytest.approx(
        selective.input_grad_flops - none.input_grad_flops)  # the attention core's forward FLOPs, 4bs²h


@pytest.mark.parametrize("name", presets.names())
@pytest.mark.parametrize("attention", ["eager", "flash"])
def test_recompute_never_makes_a_layer_faster_or_larger(name, attention):
    # what the planner relies on: "none" is the fastest mode and holds the most; "full" the slowest and least
    spec = presets.get(name)
    if attention == "flash":
        spec = _flash(spec)
    profiles = [layer_profile(spec, A100, 2, recompute=mode) for mode in ("none", "selective", "full")]
    for faster, slower in zip(profiles, profiles[1:]):
        for a, b in zip(faster.backward, slower.backward):
            assert a <= b * (1 + 1e-12)
        for a, b in zip(faster.activation_bytes, slower.activation_bytes):
            assert a >= b * (1 - 1e-12)
        assert faster.forward == slower.forward


def test_the_split_of_the_backward_follows_the_kernels_not_a_ratio():
    # W is the weight GEMMs only; F and B also carry attention and memory-bound kernels, so W / F
    # depends on the shape (the flat model gave 0.93-0.96 for every GPT; Table 9 measures 0.50-0.67).
    ratios = []
    for size, micro_batch in (("1.5b", 6), ("6.2b", 3)):
        profile = layer_profile(zero_bubble_gpt(size), A100, micro_batch, recompute="none")
        ratios.append(profile.weight[1] / profile.forward[1])
    assert all(0.45 < ratio < 0.75 for ratio in ratios)
    assert abs(ratios[0] - ratios[1]) > 0.05


def test_frozen_and_data_layers_run_the_kernels_the_rules_say():
    spec = presets.get("gpt-1.5b").with_frozen({"layers": True})
    layers = layer_costs(spec, 1, recompute="none")
    embedding, block = layers[0], layers[1]
    assert embedding.input_grad_ops == ()                       # its input is token ids
    assert block.weight_grad_ops == () and block.input_grad_ops  # frozen, but the embedding upstream trains
    frozen_all = presets.get("gpt-1.5b").with_frozen({"layers": True, "embedding": True, "output_layer": True})
    assert all(layer.input_grad_ops == () == layer.weight_grad_ops for layer in layer_costs(frozen_all, 1))


def test_a_device_times_an_op_as_a_roofline_plus_launch():
    big = gemm("big", m=13_824, n=1152, k=8192)  # 108 x 9 tiles of 128 x 128: nine whole waves on 108 SMs
    at_peak = 1e3 * big.flops / A100.peak_flops
    fill = 8192 / (8192 + A100.gemm_fill_k)  # the software pipeline's fill over a k = 8192 reduction
    assert A100.op_milliseconds(big) == pytest.approx(at_peak / (A100.gemm_efficiency * fill)
                                                      + A100.launch_overhead_ms)
    copy = memory("copy", read=1e9, written=1e9)
    expected = 1e3 * 2e9 / (A100.memory_bandwidth * A100.memory_efficiency) + A100.launch_overhead_ms
    assert A100.op_milliseconds(copy) == pytest.approx(expected)
    skinny = gemm("skinny", m=16, n=8192, k=8192)  # weight-read bound: the roof, not the FLOPs
    assert A100.op_milliseconds(skinny) == pytest.approx(1e3 * skinny.bytes / A100.memory_bandwidth
                                                         + A100.launch_overhead_ms)


@given(m=st.integers(1, 20_000), n=st.integers(1, 20_000), k=st.integers(1, 20_000))
def test_no_gemm_beats_the_peak_or_the_bandwidth(m, n, k):
    op = gemm("g", m=m, n=n, k=k)
    for device in (A100, hardware.device("h100-80g"), hardware.device("l40s")):
        seconds = device.op_milliseconds(op) / 1e3
        assert seconds >= op.flops / device.peak_flops * (1 - 1e-12)
        assert seconds >= op.bytes / device.memory_bandwidth * (1 - 1e-12)
        efficiency, measured = device.gemm_efficiency_at(m, n, k)
        assert 0 < efficiency <= device.gemm_efficiency and not measured


def test_micro_batch_size_changes_the_time_per_sample():
    # Small kernels waste waves and pay launches: per sample, b = 8 is faster than b = 1.
    spec = presets.get("pi0")
    one = layer_profile(spec, hardware.device("h100-80g"), 1)
    eight = layer_profile(spec, hardware.device("h100-80g"), 8)
    per_sample_one = sum(one.forward) + sum(one.backward)
    per_sample_eight = (sum(eight.forward) + sum(eight.backward)) / 8
    assert per_sample_eight < 0.95 * per_sample_one


def test_a_measured_gemm_table_gives_the_nearest_shape_and_says_whether_it_was_measured():
    table = (GemmPoint(1024, 1024, 1024, 0.5), GemmPoint(8192, 8192, 8192, 0.9))
    device = replace(A100, gemm_table=table)
    assert device.gemm_efficiency_at(8192, 8192, 8192) == (0.9, True)
    assert device.gemm_efficiency_at(6000, 9000, 7000) == (0.9, False)
    assert device.gemm_efficiency_at(900, 1000, 1100) == (0.5, False)
    ops = [gemm("a", m=8192, n=8192, k=8192), gemm("b", m=900, n=1000, k=1100), gemm("b", m=900, n=1000, k=1100)]
    assert device.gemm_fallbacks(ops) == [{"shape": [900, 1000, 1100], "nearest_measured": [1024, 1024, 1024]}]
    assert A100.gemm_fallbacks(ops) == []  # the curve covers every shape


def test_the_flat_model_is_flops_over_the_fraction():
    flat = hardware.device("a100-80g", achievable_fraction=0.5)
    profile = layer_profile(presets.get("gpt-1.5b"), flat, 2)
    layer = layer_costs(presets.get("gpt-1.5b"), 2)[1]
    assert profile.forward[1] == pytest.approx(1e3 * layer.forward_flops / (0.5 * 312e12))
    assert "flat model" in flat.summary() and "per-operator roofline" in A100.summary()


@pytest.mark.parametrize("field, value, message", [
    ("gemm_efficiency", 0.0, r"gemm_efficiency must be a number > 0"),
    ("memory_efficiency", 1.5, r"memory_efficiency must be in \(0, 1\]"),
    ("random_efficiency", -1.0, r"random_efficiency must be a number > 0"),
    ("memory_bandwidth", 0.0, r"memory_bandwidth must be"),
    ("num_sms", 0, r"num_sms must be"),
])
def test_bad_device_constants_are_one_line(field, value, message):
    with pytest.raises(InvalidInputError, match=message):
        replace(A100, **{field: value})
    with pytest.raises(InvalidInputError, match="gemm_table efficiency"):
        GemmPoint(1, 1, 1, 1.5)


def test_every_device_constant_has_a_source():
    for record in hardware.DEVICES.values():
        device = record.device
        if device.flat:
            continue
        for constant in ("peak_flops", "memory_bandwidth", "gemm_efficiency", "attention_efficiency",
                         "memory_efficiency", "launch_overhead_ms"):
            assert device.sources.get(constant), (device.name, constant)


def _benchmark():
    # the session's one module, so test_docs_tables.py reuses the plans computed here (its cache)
    from _benchmarks import benchmark

    return benchmark("cost_model")


def test_the_a100_constants_are_the_fit_the_benchmark_prints():
    # benchmarks/cost_model.py --fit refits them on Table 9 alone; hardware.A100_FIT must be that output
    fitted = _benchmark().fit_a100(A100)
    for name, value in fitted.items():
        assert hardware.A100_FIT[name] == pytest.approx(value, abs=0.0015), name


def test_table_9_passes_are_within_ten_percent():
    module = _benchmark()
    for published in module.TABLE_9 + module.HELD_OUT_9:
        predicted = module.pass_times(A100, published.model)
        for p, m in zip(predicted, (published.forward, published.input_grad, published.weight_grad)):
            assert math.isclose(p, m, rel_tol=0.10), (published.model, p, m)


def test_tensor_parallel_must_split_whole_heads_and_the_mlp():
    spec = presets.get("gpt-1.5b")  # 24 heads, FFN 9216
    with pytest.raises(InvalidInputError, match=r"tensor_parallel=7 must divide module 'layers''s attention heads \(24\)"):
        layer_costs(spec, 1, tensor_parallel=7)
    assert layer_costs(spec, 1, tensor_parallel=8)[1].params == pytest.approx(layer_costs(spec, 1)[1].params / 8, rel=0.01)


def test_table_4_at_the_first_m_is_within_ten_percent_and_ranked_as_measured():
    # Qi et al. 2024, Table 4 (the benchmark's full table is docs/cost_model.md): never fitted
    module = _benchmark()
    link = hardware.link("nvlink-a100")
    for row in module.TABLE_4:
        plans = module.schedule_plans(row.model, row.microbatches[0], A100, link)
        predicted = {name: module.samples_per_gpu(plans[name]) for name in module.SCHEDULES}
        for name in module.SCHEDULES:
            assert math.isclose(predicted[name], row.samples[name][0], rel_tol=0.10), (row.model, name)
            assert math.isclose(max(plans[name].peak_memory) / 1e9, row.memory_gb[name], rel_tol=0.10)
        assert module.ranked_as_measured({name: row.samples[name][0] for name in module.SCHEDULES}, predicted)
