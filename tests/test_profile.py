"""Measuring layers and stages: relative properties and exact byte counts, not timings."""

from __future__ import annotations

import time

import pytest
import torch
from torch import nn

import pipeplan
from pipeplan.errors import InvalidInputError
from pipeplan.layers import LayerProfile
from pipeplan.partition import partition_layers
from pipeplan.runtime.measure import (
    LayerMeasurement,
    measure_layer_details,
    measure_layers,
    measure_module,
    measure_stage_costs,
)

from _work_clock import WorkClock


class Square(nn.Module):
    """Saves exactly its input for the backward (``x * x`` saves ``x`` twice, one storage)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * x


class Scale(nn.Module):
    """A learnable scalar times the input: saves the input (and the parameter, not counted)."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.tensor(2.0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.weight * x


def mlp(width: int, depth: int) -> nn.Module:
    return nn.Sequential(*(nn.Sequential(nn.Linear(width, width), nn.Tanh()) for _ in range(depth)))


def test_saved_bytes_of_a_known_tensor_are_counted_exactly():
    x = torch.randn(16, 32)
    cost, out = measure_module(Square(), x, repeats=1, warmup=0)
    assert cost.activation_bytes == 16 * 32 * 4  # one float32 input, counted once
    assert cost.output_bytes == 16 * 32 * 4
    assert cost.parameters == 0
    assert torch.equal(out, x * x)


def test_parameters_are_not_activations():
    x = torch.randn(8, 10)
    cost, _ = measure_module(Scale(), x, repeats=1, warmup=0)
    assert cost.activation_bytes == 8 * 10 * 4  # the input only, not the saved weight
    assert cost.parameters == 1


def test_linear_saves_its_input():
    layer = nn.Linear(24, 40)
    x = torch.randn(5, 24)
    cost, _ = measure_module(layer, x, repeats=1, warmup=0)
    assert cost.activation_bytes == 5 * 24 * 4
    assert cost.parameters == 24 * 40 + 40


@pytest.fixture
def one_thread():
    """One intra-op thread: CPU time then counts work, not OpenMP spinning."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_the_module_is_timed_around_its_forward_and_backward():
    # A clock that moves only while the module works (forward 1 or 4 ms, backward twice that):
    # the measurement must report exactly that (how real work measures: benchmarks/fidelity.py).
    clock = WorkClock()
    light = clock.busy(mlp(256, 1), forward_ms=1.0)
    heavy = clock.busy(mlp(256, 4), forward_ms=4.0)
    x = torch.randn(256, 256)
    light_cost, _ = measure_module(light, x, repeats=5, warmup=1, timer=clock)
    heavy_cost, _ = measure_module(heavy, x, repeats=5, warmup=1, timer=clock)
    assert (light_cost.forward, light_cost.backward) == pytest.approx((1.0, 2.0))
    assert (heavy_cost.forward, heavy_cost.backward) == pytest.approx((4.0, 8.0))
    # Linear saves its input, Tanh its output, and Tanh's output is the next Linear's
    # input (one storage): depth d saves d + 1 tensors of 256 x 256 float32.
    assert light_cost.activation_bytes == 2 * 256 * 256 * 4
    assert heavy_cost.activation_bytes == 5 * 256 * 256 * 4


def test_layer_details_walk_the_sequential():
    model = nn.Sequential(nn.Linear(8, 16), Square(), nn.Linear(16, 4))
    x = torch.randn(3, 8)
    layers = measure_layer_details(model, x, repeats=2, warmup=0)
    assert [layer.index for layer in layers] == [0, 1, 2]
    assert all(isinstance(layer, LayerMeasurement) for layer in layers)
    assert layers[0].name == "0:Linear"
    assert [layer.parameters for layer in layers] == [8 * 16 + 16, 0, 16 * 4 + 4]
    # each layer is fed its predecessor's output: Square saves the 3x16 output of layer 0
    assert layers[1].activation_bytes == 3 * 16 * 4
    assert layers[2].output_bytes == 3 * 4 * 4
    # the first layer's input is data: no input gradient, so its whole backward is W
    assert layers[0].backward_input == 0.0
    assert layers[2].backward_input > 0.0
    assert all(layer.forward > 0 and layer.backward_weight >= 0 for layer in layers)


def test_measure_layers_returns_a_layer_profile_for_the_partitioner():
    model = nn.Sequential(nn.Linear(8, 16), Square(), nn.Linear(16, 4), nn.Linear(4, 4))
    profile = measure_layers(model, torch.randn(3, 8), repeats=2, warmup=0)
    assert isinstance(profile, LayerProfile)
    assert profile.num_layers == 4
    assert profile.names[1] == "1:Square"
    assert profile.params == (8 * 16 + 16, 0, 16 * 4 + 4, 4 * 4 + 4)
    assert profile.activation_bytes[1] == 3 * 16 * 4
    assert profile.send_bytes == (3 * 16 * 4, 3 * 16 * 4, 3 * 4 * 4, 3 * 4 * 4)  # each output, what a cut sends
    # the split halves are measured as the runtime runs them, the data layer has no input gradient
    assert profile.backward_input is not None and profile.backward_input[0] == 0.0
    assert all(w >= 0 for w in profile.weight) and set(profile.spread) == {
        "forward", "backward", "backward_input", "weight"}
    result = partition_layers(profile, 2)
    assert sum(result.layers_per_stage) == 4


def test_stage_costs_feed_the_simulator():
    torch.manual_seed(0)
    stages = [mlp(64, 1), mlp(64, 3), mlp(64, 1)]
    costs = measure_stage_costs(stages, torch.randn(32, 64), repeats=3, warmup=1)
    assert isinstance(costs, pipeplan.StageCosts)
    assert costs.num_stages == 3
    assert costs.activation_bytes[1] > costs.activation_bytes[0]
    assert costs.backward_input is not None and costs.backward_input[0] == 0.0
    assert all(i > 0 for i in costs.backward_input[1:])
    schedule = pipeplan.build_schedule("1f1b", num_stages=3, num_microbatches=4)
    timeline = pipeplan.simulate(schedule, costs)
    assert timeline.makespan > 0


def test_bad_inputs_are_rejected():
    with pytest.raises(InvalidInputError, match="repeats"):
        measure_module(Square(), torch.randn(2), repeats=0)
    with pytest.raises(InvalidInputError, match="sample_inputs"):
        measure_module(Square(), [1.0, 2.0])
    with pytest.raises(InvalidInputError, match="Sequential"):
        measure_layers(Square(), torch.randn(2))
    with pytest.raises(InvalidInputError, match="list"):
        measure_stage_costs([], torch.randn(2))
    with pytest.raises(InvalidInputError, match="one tensor"):
        measure_module(_TupleOut(), torch.randn(2))


class _TupleOut(nn.Module):
    def forward(self, x: torch.Tensor):
        return x, x


def test_split_halves_are_measured_as_the_runtime_runs_them(one_thread):
    """B + W of a real split costs more than the full backward (a second traversal): the profile says so."""
    torch.manual_seed(0)
    model = nn.Sequential(mlp(128, 1), mlp(128, 3), mlp(128, 3))
    x = torch.randn(64, 128)
    layers = measure_layer_details(model, x, repeats=5, warmup=1, timer=time.process_time)
    for layer in layers[1:]:
        assert layer.backward_input > 0 and layer.backward_weight > 0
        assert layer.backward_input + layer.backward_weight > 0.8 * layer.full_backward
    assert layers[0].backward_input == 0.0 and layers[0].backward_weight > 0  # data input: W does it all
    assert set(layers[1].iqr) == {"forward", "backward", "backward_input", "weight"}
    for param in model.parameters():
        assert param.grad is None  # measuring leaves the gradients as they were


def test_a_clock_that_does_not_advance_is_timer_trouble():
    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))
    with pytest.raises(InvalidInputError, match="timer trouble"):
        measure_layer_details(model, torch.randn(2, 4), repeats=2, warmup=0, timer=lambda: 1.0)


def test_a_spread_too_large_is_refused():
    from pipeplan.runtime.measure import check_spread

    steady = LayerProfile([1.0, 2.0], [2.0, 4.0], spread={"forward": [0.1, 0.2], "backward": [0.2, 0.1]})
    check_spread(steady, 0.5)
    noisy = LayerProfile([1.0, 2.0], [2.0, 4.0], names=["a", "b"],
                         spread={"forward": [0.1, 0.2], "backward": [0.2, 4.0]})
    with pytest.raises(InvalidInputError, match=r"layer 1 \(b\): backward median 4.000 ms has an interquartile "
                                                r"range of 4.000 ms, more than 0.5 x"):
        check_spread(noisy, 0.5)


def test_the_min_statistic_reports_each_times_fastest_run():
    """A clock whose every reading advances more than the last: run r of anything takes longer than run r - 1."""
    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))
    x = torch.randn(2, 4)

    def measured(statistic: str) -> list:
        ticks = iter(range(1, 10**6))  # the same fresh clock for both statistics
        now = [0.0]

        def clock() -> float:  # each call advances by one more millisecond than the call before
            now[0] += next(ticks) * 1e-3
            return now[0]

        return measure_layer_details(model, x, repeats=5, warmup=0, timer=clock, statistic=statistic)

    fastest, typical = measured("min"), measured("median")
    for fast, usual in zip(fastest, typical):
        # Same samples, so the two differ only in the statistic: run 0 is the fastest, run 2 the median.
        assert 0 < fast.forward < usual.forward and fast.full_backward < usual.full_backward
        assert fast.iqr == usual.iqr and fast.iqr["forward"] > 0
    profile = measure_layers(model, torch.randn(2, 4), repeats=3, warmup=0, statistic="min")
    assert profile.measurement["statistic"] == "min"
    with pytest.raises(InvalidInputError, match="statistic must be one of median, min, got 'mean'"):
        measure_layers(model, torch.randn(2, 4), repeats=3, statistic="mean")
