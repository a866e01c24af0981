"""Lesson 16's exercise API, checked with the lesson's own check block."""

from __future__ import annotations

import pytest

from pipeplan import AsymmetricPipelineScheduler, InvalidInputError


def test_lesson16_check_block_passes_unchanged():
    # The check block of ../shared/seeds/000_cda990b3b2c99189.txt ("检查与验证代码"), verbatim.
    scheduler = AsymmetricPipelineScheduler()

    # 场景 1: 4 个 Stage, 未优化的极端哑铃型负载
    # Stage 0: 30ms (ViT 瓶颈), Stage 1: 10ms, Stage 2: 10ms, Stage 3: 20ms (Action Head 瓶颈)
    latencies_unbalanced = [30.0, 10.0, 10.0, 20.0]
    m = 8 # 8 个微批次

    total_time, bubble_ratio = scheduler.simulate_1f1b_execution(latencies_unbalanced, m)
    # 理论有用总功: 8 * (30 + 10 + 10 + 20) = 8 * 70 = 560ms
    # 瓶颈阶段为 Stage 0 (30ms), 8 个微批次在 Stage 0 耗时即已达到 240ms, 加管道充水
    assert total_time >= 280.0, f"总时间计算异常: {total_time}"
    assert bubble_ratio > 0.40, f"未平衡状态下气泡率应当极高 (>40%), 实际: {bubble_ratio:.2%}"

    # 场景 2: 求解最优层重平衡
    # 总计 32 层 Transformer, 每层耗时 2.0ms
    # Stage 0 有 ViT 固定耗时 16.0ms; Stage 3 有动作头固定耗时 8.0ms; 中间 Stage 无额外开销
    num_stages = 4
    total_layers = 32
    layer_cost = 2.0
    s0_fixed = 16.0
    s3_fixed = 8.0

    optimal_layers = scheduler.solve_optimal_layer_partition(
        total_layers=total_layers,
        layer_cost=layer_cost,
        s0_fixed_cost=s0_fixed,
        s_tail_fixed_cost=s3_fixed,
        num_stages=num_stages
    )

    assert sum(optimal_layers) == total_layers, "总层数必须守恒等于 32"
    # Stage 0 负担最重，分配层数应最少；Stage 1, 2 应分担最多层数
    assert optimal_layers[0] < optimal_layers[1], "Stage 0 应该分配更少层以平衡固定开销"
    assert optimal_layers[3] < optimal_layers[2], "Stage 3 应该分配少于中间 Stage 的层数"

    # 使用平衡后的层数重新计算各 Stage 耗时
    balanced_latencies = [
        s0_fixed + optimal_layers[0] * layer_cost,
        optimal_layers[1] * layer_cost,
        optimal_layers[2] * layer_cost,
        s3_fixed + optimal_layers[3] * layer_cost,
    ]
    _, new_bubble_ratio = scheduler.simulate_1f1b_execution(balanced_latencies, m)
    assert new_bubble_ratio < bubble_ratio, f"层重平衡后气泡率必须显著下降！原气泡: {bubble_ratio:.2%}, 新气泡: {new_bubble_ratio:.2%}"

    print(f"原始异构气泡率: {bubble_ratio:.2%} -> 重平衡后气泡率: {new_bubble_ratio:.2%}")
    print("非均质流水线调度与层重平衡求解测试 100% 通过！")


def test_exact_lesson_numbers():
    scheduler = AsymmetricPipelineScheduler()
    assert scheduler.simulate_1f1b_execution([30.0, 10.0, 10.0, 20.0], 8) == (280.0, 0.5)
    assert scheduler.solve_optimal_layer_partition(32, 2.0, 16.0, 8.0, 4) == [3, 11, 11, 7]


def test_full_step_through_a_keyword():
    scheduler = AsymmetricPipelineScheduler()
    forward_only, _ = scheduler.simulate_1f1b_execution([30.0, 10.0, 10.0, 20.0], 8)
    full, bubble = scheduler.simulate_1f1b_execution([30.0, 10.0, 10.0, 20.0], 8, include_backward=True)
    assert full == pytest.approx(750.0)  # rank 0: 8 x (30 + 60) plus the first gradient's round trip
    assert full > forward_only and 0 < bubble < 1


def test_the_greedy_loop_is_beaten():
    # The lesson's greedy loop starts every stage at one layer; an exact solver can do no worse.
    scheduler = AsymmetricPipelineScheduler()
    layers = scheduler.solve_optimal_layer_partition(10, 1.0, 20.0, 0.0, 3)
    times = [20.0 + layers[0], float(layers[1]), float(layers[2])]
    assert layers[0] == 1 and max(times) == 21.0


@pytest.mark.parametrize("args, field", [
    (([30.0, float("nan")], 8), "stage_latencies"),
    (([30.0, 10.0], 0), "num_microbatches"),
])
def test_bad_input_names_the_field(args, field):
    with pytest.raises(InvalidInputError, match=field):
        AsymmetricPipelineScheduler().simulate_1f1b_execution(*args)


def test_too_few_layers():
    with pytest.raises(InvalidInputError, match="total_layers must be >= num_stages"):
        AsymmetricPipelineScheduler().solve_optimal_layer_partition(3, 1.0, 0.0, 0.0, 4)
