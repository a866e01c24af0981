"""Seed lesson 003's API: PipelineStage, Pipeline (real GPipe step) and bubble_fraction."""

from __future__ import annotations

import re

import pytest
import torch
from torch import nn

import pipeplan
from pipeplan.errors import InvalidInputError
from pipeplan.models import build_default_model, split_sequential
from pipeplan.lessons.pipeline import Pipeline, PipelineStage, bubble_fraction, run_demo

from _work_clock import WorkClock


def test_bubble_fraction_worked_examples_from_the_seed():
    # seed 003: "M=8, N=4 gives 27%; M=64, N=4 gives 4.5%"
    assert bubble_fraction(4, 8) == pytest.approx(3 / 11)
    assert round(bubble_fraction(4, 8) * 100) == 27
    assert bubble_fraction(4, 64) == pytest.approx(3 / 67)
    assert round(bubble_fraction(4, 64) * 100, 1) == 4.5
    assert bubble_fraction(1, 5) == 0.0


@pytest.mark.parametrize("stages, microbatches", [(0, 4), (4, 0)])
def test_bubble_fraction_rejects_non_positive(stages, microbatches):
    with pytest.raises(InvalidInputError, match=">= 1"):
        bubble_fraction(stages, microbatches)


def vla_pipeline(num_microbatches: int):
    model, loss_fn, make_batch = build_default_model(num_layers=2, hidden=32, image_size=16, seed=1)
    stages = [PipelineStage(*stage) for stage in split_sequential(model, [1, 1, 1, 1])]
    return model, Pipeline(stages, num_microbatches), loss_fn, make_batch


@pytest.mark.parametrize("batch, microbatches", [(8, 4), (10, 4), (7, 7)])
def test_gradient_accumulation_equals_the_full_batch(batch, microbatches):
    model, pipe, loss_fn, make_batch = vla_pipeline(microbatches)
    inputs, targets = make_batch(batch, seed=2)
    result = pipe.step(inputs, targets, loss_fn)
    piped = {name: p.grad.clone() for name, p in model.named_parameters()}
    model.zero_grad()
    full_loss = loss_fn(model(inputs), targets)
    full_loss.backward()
    assert result.loss == pytest.approx(full_loss.item(), abs=1e-5)
    assert sum(result.microbatch_sizes) == batch and len(result.microbatch_sizes) == microbatches
    for name, p in model.named_parameters():
        assert torch.max(torch.abs(piped[name] - p.grad)) <= 1e-5, name


def test_forward_equals_the_unsplit_model():
    model, pipe, _, make_batch = vla_pipeline(3)
    inputs, _ = make_batch(6)
    assert torch.allclose(pipe(inputs), model(inputs), atol=1e-6)


def test_step_schedules_gpipe_on_the_measured_times():
    _, pipe, loss_fn, make_batch = vla_pipeline(4)
    inputs, targets = make_batch(8)
    result = pipe.step(inputs, targets, loss_fn)
    assert result.timeline.schedule.name == "gpipe"
    assert result.costs.num_stages == 4
    expected = pipeplan.simulate(pipeplan.build_schedule("gpipe", num_stages=4, num_microbatches=4), result.costs)
    assert result.timeline.makespan == pytest.approx(expected.makespan)
    assert result.bubble_ratio == pytest.approx(expected.bubble_ratio)


def test_equal_stage_times_give_the_closed_form():
    stages = [nn.Linear(4, 4) for _ in range(4)]
    pipe = Pipeline(stages, 8)
    timeline = pipe.simulate(pipeplan.StageCosts.uniform(4, forward=1.0))
    assert timeline.bubble_ratio == pytest.approx(bubble_fraction(4, 8))


def test_each_stage_is_timed_around_its_own_work():
    # A clock that moves only while a stage works: stage 1 is charged 8x stage 0, so the
    # measured costs must say exactly that (how real work measures: benchmarks/fidelity.py).
    clock = WorkClock()
    light = clock.busy(nn.Linear(16, 16), forward_ms=1.0)
    heavy = clock.busy(nn.Sequential(nn.Linear(16, 16), nn.Tanh()), forward_ms=8.0)
    pipe = Pipeline([PipelineStage(light), PipelineStage(heavy)], 6, timer=clock)
    costs = pipe.step(torch.randn(12, 16), torch.randn(12, 16), nn.functional.mse_loss).costs
    assert costs.forward == pytest.approx([1.0, 8.0])
    assert costs.backward == pytest.approx([2.0, 16.0])


def test_pipeline_wraps_plain_modules_and_numbers_stages():
    pipe = Pipeline([nn.Linear(2, 2), PipelineStage(nn.Linear(2, 2), nn.ReLU())], 2)
    assert all(isinstance(stage, PipelineStage) for stage in pipe.stages)
    assert [stage.index for stage in pipe.stages] == [0, 1]
    assert pipe.num_stages == 2
    assert len(list(pipe.parameters())) == 4


def test_pipeline_rejects_bad_input():
    with pytest.raises(InvalidInputError, match="at least one stage"):
        Pipeline([], 2)
    with pytest.raises(InvalidInputError, match="num_microbatches"):
        Pipeline([nn.Linear(2, 2)], 0)
    with pytest.raises(InvalidInputError, match=r"stages\[1\]"):
        Pipeline([nn.Linear(2, 2), "layer"], 2)
    with pytest.raises(InvalidInputError, match="PipelineStage needs"):
        PipelineStage()
    pipe = Pipeline([nn.Linear(2, 2)], 4)
    with pytest.raises(InvalidInputError, match="batch size must be >= num_microbatches=4"):
        pipe.step(torch.randn(3, 2), torch.randn(3, 2), nn.functional.mse_loss)
    with pytest.raises(InvalidInputError, match="targets has 5 samples, expected 8"):
        pipe.step(torch.randn(8, 2), torch.randn(5, 2), nn.functional.mse_loss)


def test_demo_prints_gantt_and_bubble_beside_the_closed_form():
    text = run_demo(num_stages=4, num_microbatches=8, width=32, microbatch_size=4, repeats=1)
    assert "closed form (N-1)/(M+N-1) = 3/11 = 27.3%" in text
    assert "N = 4 stages x M = 8 microbatches" in text  # M microbatches, N stages: the demos' one meaning
    assert sum(line.startswith("rank ") for line in text.splitlines()) == 4
    measured = float(re.search(r"bubble of GPipe on the measured stage times ([0-9.]+)%", text).group(1))
    assert 0.0 < measured < 100.0
    difference = float(re.search(r"max abs difference ([0-9.e+-]+)", text).group(1))
    assert difference <= 1e-5
