"""The seed lesson 003 API: ``PipelineStage``, ``Pipeline`` and ``bubble_fraction``.

A pipeline of stage modules in one process. :class:`Pipeline` really runs the
microbatches through the stages (forward of every microbatch, then every
backward, accumulating gradients equal to the full-batch step), times each
stage's forward and backward, and schedules GPipe on those measured times with
:func:`pipeplan.simulate` to give the step's Gantt chart and bubble::

    pipe = Pipeline([PipelineStage(nn.Linear(64, 64)) for _ in range(4)], num_microbatches=8)
    result = pipe.step(inputs, targets, nn.functional.mse_loss)
    print(result.bubble_ratio, bubble_fraction(4, 8))     # measured vs (N-1)/(M+N-1)

For real multi-process execution see :mod:`pipeplan.runtime`; this module is the
lesson's single-process model of it. ``python examples/seed003_pipeline.py`` (or
``pipeplan demo``) prints the lesson's 4-stage demo.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from .. import analytic
from .._validation import positive_int
from ..costs import StageCosts
from ..errors import InvalidInputError
from ..schedule import Schedule
from ..schedules import build_schedule
from ..simulate import simulate
from ..timeline import Timeline

__all__ = ["PipelineStage", "Pipeline", "PipelineStep", "bubble_fraction", "run_demo"]

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def bubble_fraction(num_stages: int, num_microbatches: int) -> float:
    """Closed-form GPipe bubble with equal stages: ``(N - 1) / (M + N - 1)``.

    Seed 003: ``M = 8, N = 4`` gives 27% (3/11); ``M = 64, N = 4`` gives 4.5% (3/67).

    Raises:
        InvalidInputError: ``num_stages`` or ``num_microbatches`` below 1.
    """
    return analytic.uniform_bubble(num_stages, num_microbatches)


class PipelineStage(nn.Module):
    """One stage of a pipeline: a slice of the model run as ``forward(activation)``.

    Args:
        *layers: the stage's modules, applied in order; each takes and returns one tensor.
        index: the stage's position in the pipeline (set by :class:`Pipeline` when omitted).
    """

    def __init__(self, *layers: nn.Module, index: int | None = None) -> None:
        super().__init__()
        if not layers or not all(isinstance(layer, nn.Module) for layer in layers):
            raise InvalidInputError("PipelineStage needs at least one torch.nn.Module layer")
        self.layers = nn.Sequential(*layers)
        self.index = index

    def forward(self, activation: torch.Tensor) -> torch.Tensor:
        """Run the stage's layers on one microbatch's activation."""
        return self.layers(activation)


@dataclass(frozen=True)
class PipelineStep:
    """What one :meth:`Pipeline.step` did and measured.

    Attributes:
        loss: the full-batch loss (microbatch losses weighted by their sizes).
        costs: per stage, the median over microbatches of the measured forward
            and full backward times, in ms.
        timeline: GPipe scheduled on ``costs`` by :func:`pipeplan.simulate` (ms).
        microbatch_sizes: samples per microbatch (the last ones may be one smaller).
    """

    loss: float
    costs: StageCosts
    timeline: Timeline
    microbatch_sizes: tuple[int, ...]

    @property
    def bubble_ratio(self) -> float:
        """Idle fraction of the scheduled step on the measured stage times."""
        return self.timeline.bubble_ratio


class Pipeline(nn.Module):
    """GPipe over stage modules in one process, with measured per-stage times.

    Args:
        stages: the stage modules in order (plain modules are wrapped in
            :class:`PipelineStage`); one stage per simulated rank.
        num_microbatches: microbatches per step (``M``).
        schedule: the schedule to simulate on the measured times: ``"gpipe"``
            (the lesson's) or another name in :data:`pipeplan.SCHEDULES` with one
            stage per rank, such as ``"1f1b"`` (the lesson's exercise). The real
            execution order in this process does not change the gradients.
        timer: the clock (seconds) stage times are read from: wall time by
            default; ``time.process_time`` (this process's CPU time) is immune to
            other processes' load.
    """

    def __init__(
        self,
        stages: Sequence[nn.Module],
        num_microbatches: int,
        *,
        schedule: str = "gpipe",
        timer: Callable[[], float] = time.perf_counter,
    ) -> None:
        super().__init__()
        self.timer = timer
        if isinstance(stages, nn.Module) and not isinstance(stages, (nn.Sequential, nn.ModuleList)):
            raise InvalidInputError("stages must be a list of stage modules, got a single module")
        wrapped = []
        for index, stage in enumerate(stages):
            if not isinstance(stage, nn.Module):
                raise InvalidInputError(f"stages[{index}] must be a torch.nn.Module, got {type(stage).__name__}")
            if not isinstance(stage, PipelineStage):
                stage = PipelineStage(stage)
            stage.index = index
            wrapped.append(stage)
        if not wrapped:
            raise InvalidInputError("stages must hold at least one stage")
        self.stages = nn.ModuleList(wrapped)
        self.num_microbatches = positive_int("num_microbatches", num_microbatches)
        self.schedule: Schedule = build_schedule(
            schedule, num_stages=len(wrapped), num_microbatches=self.num_microbatches
        )
        if self.schedule.num_ranks != len(wrapped):
            raise InvalidInputError(
                f"schedule {schedule!r} places {len(wrapped)} stages on {self.schedule.num_ranks} ranks; "
                "Pipeline needs one stage per rank"
            )

    @property
    def num_stages(self) -> int:
        """Number of stages (``N``)."""
        return len(self.stages)

    def split(self, tensor: torch.Tensor) -> list[torch.Tensor]:
        """Cut a batch into ``num_microbatches`` along dim 0 (sizes differ by at most 1).

        Raises:
            InvalidInputError: fewer samples than microbatches.
        """
        if tensor.shape[0] < self.num_microbatches:
            raise InvalidInputError(
                f"batch size must be >= num_microbatches={self.num_microbatches}, got {tensor.shape[0]}"
            )
        return list(torch.tensor_split(tensor, self.num_microbatches))

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        """Run every microbatch through every stage and concatenate the outputs."""
        outputs = []
        for microbatch in self.split(inputs):
            for stage in self.stages:
                microbatch = stage(microbatch)
            outputs.append(microbatch)
        return torch.cat(outputs)

    def simulate(self, costs: StageCosts) -> Timeline:
        """The schedule's timeline on ``costs`` (per stage, per microbatch; any unit)."""
        return simulate(self.schedule, costs)

    def step(self, inputs: torch.Tensor, targets: torch.Tensor, loss_fn: LossFn) -> PipelineStep:
        """Run one training step: all forwards, then all backwards, microbatch by microbatch.

        Gradients are *accumulated* into each parameter's ``.grad`` (call
        ``zero_grad`` between steps, as with ``loss.backward()``). Microbatch ``i``
        contributes ``loss_fn(output_i, target_i) * size_i / batch``, so for a
        batch-mean ``loss_fn`` the gradients equal one full-batch backward.

        Args:
            inputs: the whole batch (dim 0 is the batch).
            targets: the matching targets.
            loss_fn: ``loss_fn(output, target)`` returning the batch-mean loss.

        Returns:
            The loss, the measured stage costs (ms) and the simulated timeline.
        """
        if targets.shape[0] != inputs.shape[0]:
            raise InvalidInputError(
                f"targets has {targets.shape[0]} samples, expected {inputs.shape[0]} (one per input)"
            )
        input_mbs = self.split(inputs)
        target_mbs = self.split(targets)
        batch = inputs.shape[0]
        num_stages = self.num_stages
        forward_ms = [[0.0] * self.num_microbatches for _ in range(num_stages)]
        backward_ms = [[0.0] * self.num_microbatches for _ in range(num_stages)]
        stage_inputs: list[list[torch.Tensor]] = [[] for _ in range(num_stages)]
        stage_outputs: list[list[torch.Tensor]] = [[] for _ in range(num_stages)]
        # Forward phase: F(s, mb) for every microbatch (GPipe fills the pipeline first).
        for mb, activation in enumerate(input_mbs):
            for stage_index, stage in enumerate(self.stages):
                leaf = activation.detach()
                if stage_index > 0 and leaf.is_floating_point():
                    leaf.requires_grad_(True)
                begin = self.timer()
                activation = stage(leaf)
                if stage_index == num_stages - 1:  # the last stage's forward ends with the loss
                    output = loss_fn(activation, target_mbs[mb]) * (len(target_mbs[mb]) / batch)
                else:
                    output = activation
                forward_ms[stage_index][mb] = (self.timer() - begin) * 1e3
                stage_inputs[stage_index].append(leaf)
                stage_outputs[stage_index].append(output)
        # Backward phase: B(s, mb) from the last stage down, gradients accumulating.
        total = 0.0
        for mb in range(self.num_microbatches):
            gradient: torch.Tensor | None = None
            for stage_index in reversed(range(num_stages)):
                output = stage_outputs[stage_index][mb]
                begin = self.timer()
                output.backward(gradient)  # gradient is None for the last stage's loss
                backward_ms[stage_index][mb] = (self.timer() - begin) * 1e3
                if stage_index == num_stages - 1:
                    total += float(output.detach())
                gradient = stage_inputs[stage_index][mb].grad
        costs = StageCosts(
            forward=[max(statistics.median(times), 1e-6) for times in forward_ms],
            backward=[max(statistics.median(times), 1e-6) for times in backward_ms],
        )
        return PipelineStep(
            loss=total,
            costs=costs,
            timeline=self.simulate(costs),
            microbatch_sizes=tuple(len(mb) for mb in input_mbs),
        )


def _gantt(timeline: Timeline, width: int) -> str:
    """The text Gantt of :mod:`pipeplan.viz`, or a plain one when it is unavailable."""
    try:
        from ..viz import text_gantt
    except ImportError:
        pass
    else:
        return text_gantt(timeline, width=width)
    scale = width / timeline.makespan
    lines = []
    for rank in range(timeline.num_ranks):
        cells = ["."] * width
        for record in timeline.records(rank):
            first = min(width - 1, int(record.start * scale))
            last = max(first + 1, min(width, int(round(record.end * scale))))
            label = record.action.label.ljust(last - first)[: last - first]
            cells[first:last] = list(label)
        lines.append(f"stage {rank} |{''.join(cells)}|")
    return "\n".join(lines)


def _grad(param: torch.Tensor) -> torch.Tensor:
    if param.grad is None:
        raise RuntimeError("a parameter got no gradient in the step")
    return param.grad


def _demo_stage(width: int) -> nn.Module:
    return nn.Sequential(nn.Linear(width, width), nn.GELU(), nn.Linear(width, width))


def run_demo(
    num_stages: int = 4,
    num_microbatches: int = 8,
    *,
    width: int = 256,
    microbatch_size: int = 32,
    seed: int = 0,
    repeats: int = 3,
    chart_width: int = 96,
) -> str:
    """The seed 003 demo: a GPipe step over equal stages, its Gantt and its bubble.

    Builds ``num_stages`` equal MLP stages, runs one real step (checking that the
    accumulated gradients equal the full-batch ones), schedules GPipe on the
    measured stage times, and reports the measured bubble beside the closed form.
    It also shows what a stage twice as slow does to the same pipeline (the
    lesson's case for balancing compute, not parameters).

    Args:
        num_stages: stages ``N``.
        num_microbatches: microbatches ``M``.
        width: features of each stage's MLP.
        microbatch_size: samples per microbatch.
        seed: seeds the weights and data.
        repeats: measured steps; each stage's time is the median over them.
        chart_width: columns of the Gantt chart.

    Returns:
        The text the demo prints.
    """
    num_stages = positive_int("num_stages", num_stages)
    num_microbatches = positive_int("num_microbatches", num_microbatches)
    width = positive_int("width", width)
    microbatch_size = positive_int("microbatch_size", microbatch_size)
    repeats = positive_int("repeats", repeats)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        stages = [PipelineStage(_demo_stage(width)) for _ in range(num_stages)]
        inputs = torch.randn(num_microbatches * microbatch_size, width)
        targets = torch.randn(num_microbatches * microbatch_size, width)
    pipe = Pipeline(stages, num_microbatches)
    loss_fn = nn.functional.mse_loss
    pipe.step(inputs, targets, loss_fn)  # warm-up step: first-call overheads stay out of the times
    measured = []
    for _ in range(repeats):
        pipe.zero_grad()
        measured.append(pipe.step(inputs, targets, loss_fn))
    piped = [_grad(p).clone() for p in pipe.parameters()]
    costs = StageCosts(
        forward=[statistics.median(step.costs.forward[s] for step in measured) for s in range(num_stages)],
        backward=[statistics.median(step.costs.backward[s] for step in measured) for s in range(num_stages)],
    )
    timeline = pipe.simulate(costs)
    pipe.zero_grad()
    full = inputs
    for module in pipe.stages:
        full = module(full)
    loss_fn(full, targets).backward()
    difference = max(float((a - _grad(p)).abs().max()) for a, p in zip(piped, pipe.parameters()))
    pipe.zero_grad()

    closed = bubble_fraction(num_stages, num_microbatches)
    work = [f + b for f, b in zip(costs.forward, costs.backward)]
    imbalance = max(work) / statistics.mean(work)
    slow = list(costs.forward)
    slow_back = list(costs.backward)
    slow[min(1, num_stages - 1)] *= 2
    slow_back[min(1, num_stages - 1)] *= 2
    unbalanced = pipe.simulate(StageCosts(slow, slow_back)).bubble_ratio
    lines = [
        f"Seed 003: GPipe, N = {num_stages} stages x M = {num_microbatches} microbatches "
        f"of {microbatch_size} samples (MLP width {width})",
        f"measured per-microbatch stage times (ms, median of {num_microbatches} microbatches x {repeats} steps):",
    ]
    for stage in range(num_stages):
        lines.append(f"  stage {stage}: forward {costs.forward[stage]:.3f}  backward {costs.backward[stage]:.3f}")
    lines += [
        "",
        f"GPipe on the measured times (makespan {timeline.makespan:.2f} ms):",
        _gantt(timeline, chart_width),
        "",
        f"bubble of GPipe on the measured stage times {timeline.bubble_ratio:.1%}   closed form (N-1)/(M+N-1) = "
        f"{num_stages - 1}/{num_microbatches + num_stages - 1} = {closed:.1%}",
        f"stage imbalance (slowest F+B / mean F+B) = {imbalance:.2f}; the closed form assumes 1.00",
        f"if stage {min(1, num_stages - 1)} were twice as slow: bubble {unbalanced:.1%} "
        "(balance compute per stage, not parameters)",
        f"loss {measured[-1].loss:.5f}; gradient accumulation vs full batch: max abs difference {difference:.2e}",
    ]
    return "\n".join(lines)
