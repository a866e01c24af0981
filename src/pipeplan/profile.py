"""Measure a torch model: per-layer and per-stage forward, backward and memory.

    from pipeplan.profile import measure_layers, measure_stage_costs
    profile = measure_layers(model, sample_inputs, repeats=5)         # a pipeplan LayerProfile, ms
    partition_layers(profile, 4).layers_per_stage                     # from pipeplan.partition
    costs = measure_stage_costs(stages, sample_inputs)                # pipeplan.StageCosts, ms
    pipeplan.simulate(pipeplan.build_schedule("1f1b", num_stages=len(stages), num_microbatches=8), costs)

Every time is the median over ``repeats`` runs (after ``warmup`` runs that are not
timed), in **milliseconds**, for one microbatch (``sample_inputs``). Each module
is measured in isolation on the output of the modules before it:

* ``forward``: the module's forward pass.
* ``backward_input`` (``I``): ``torch.autograd.grad`` of the output with respect
  to the module's input only, the input-gradient half of a split backward.
  The first module's input (the data) needs no gradient, as in a real run, so
  its ``I`` is 0; every later module's input does.
* ``backward_weight`` (``W``): the full backward (input and every parameter)
  minus ``backward_input``, floored at 0; the weight-gradient part of the
  backward in the convention of :class:`~pipeplan.costs.StageCosts`.
* ``activation_bytes``: bytes of the distinct tensors autograd saves for the
  backward during the forward (found with
  ``torch.autograd.graph.saved_tensors_hooks``), the module's own parameters and
  buffers excluded. Tensors sharing storage are counted once.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from ._validation import positive_int
from .costs import StageCosts
from .errors import InvalidInputError
from .layers import LayerProfile

__all__ = [
    "LayerMeasurement",
    "ModuleCost",
    "measure_layer_details",
    "measure_layers",
    "measure_module",
    "measure_stage_costs",
]

_MIN_MS = 1e-6  # StageCosts needs times > 0; a module with nothing to do is charged this


@dataclass(frozen=True)
class ModuleCost:
    """Measured cost of one module on one microbatch (times in ms, sizes in bytes).

    Attributes:
        forward: forward time.
        backward_input: input-gradient time (``I`` of a split backward).
        backward_weight: weight-gradient time (``W``); ``backward_input +
            backward_weight`` is the full backward.
        activation_bytes: bytes saved for the backward (parameters excluded).
        output_bytes: bytes of the output tensor (what a pipeline sends downstream).
        parameters: number of trainable parameter elements.
    """

    forward: float
    backward_input: float
    backward_weight: float
    activation_bytes: int
    output_bytes: int
    parameters: int

    @property
    def backward(self) -> float:
        """Full backward time (input and weight gradients), ms."""
        return self.backward_input + self.backward_weight


@dataclass(frozen=True)
class LayerMeasurement(ModuleCost):
    """A :class:`ModuleCost` for one child of an ``nn.Sequential``, with its index and name."""

    index: int = 0
    name: str = ""


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


Timer = Callable[[], float]


def _timed(fn: Callable[[], object], device: torch.device, timer: Timer) -> tuple[float, object]:
    _synchronize(device)
    begin = timer()
    result = fn()
    _synchronize(device)
    return (timer() - begin) * 1e3, result


def _storage_key(tensor: torch.Tensor) -> tuple[int, int]:
    """Identify a tensor's storage, so views of one buffer are counted once."""
    try:
        storage = tensor.untyped_storage()
        return (storage.data_ptr(), storage.nbytes())
    except (RuntimeError, NotImplementedError):  # tensors without storage (e.g. some subclasses)
        return (id(tensor), tensor.nelement() * tensor.element_size())


def _saved_bytes_forward(module: nn.Module, inputs: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Run the forward once, returning the output and the bytes autograd saved."""
    excluded = {_storage_key(t) for t in list(module.parameters()) + list(module.buffers())}
    seen: dict[tuple[int, int], int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        key = _storage_key(tensor)
        if key not in excluded:
            seen[key] = key[1]
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        output = module(inputs)
    return output, sum(seen.values())


def _check_output(output: object, where: str) -> torch.Tensor:
    if not isinstance(output, torch.Tensor):
        raise InvalidInputError(f"{where} must return one tensor, got {type(output).__name__}")
    return output


def measure_module(
    module: nn.Module,
    sample_inputs: torch.Tensor,
    *,
    repeats: int = 5,
    warmup: int = 1,
    name: str = "module",
    input_grad: bool = True,
    timer: Timer = time.perf_counter,
) -> tuple[ModuleCost, torch.Tensor]:
    """Measure one module on one microbatch; also return its output (detached).

    Args:
        module: takes one tensor and returns one tensor.
        sample_inputs: one microbatch of the module's input.
        repeats: timed runs; the median is reported (>= 1).
        warmup: untimed runs before them (>= 0).
        name: how errors refer to the module.
        input_grad: whether the input needs a gradient (False for the model's
            first module, whose input is data); ignored for non-float inputs.
        timer: the clock, in seconds. The default, ``time.perf_counter``, is wall
            time; ``time.process_time`` counts this process's CPU time only,
            which other processes' load does not inflate (CPU runs only).

    Returns:
        ``(cost, output)``; ``output`` feeds the next module's measurement.
    """
    repeats = positive_int("repeats", repeats)
    warmup = positive_int("warmup", warmup, minimum=0)
    if not isinstance(sample_inputs, torch.Tensor):
        raise InvalidInputError(f"sample_inputs must be a torch.Tensor, got {type(sample_inputs).__name__}")
    device = sample_inputs.device
    differentiable = input_grad and (sample_inputs.is_floating_point() or sample_inputs.is_complex())
    params = [p for p in module.parameters() if p.requires_grad]

    def fresh_input() -> torch.Tensor:
        leaf = sample_inputs.detach()
        return leaf.requires_grad_(True) if differentiable else leaf

    forward_ms: list[float] = []
    input_ms: list[float] = []
    full_ms: list[float] = []
    output: torch.Tensor | None = None
    for run in range(warmup + repeats):
        leaf = fresh_input()
        elapsed, produced = _timed(lambda: module(leaf), device, timer)
        output = result = _check_output(produced, name)
        needs_grad = output.requires_grad
        grad_output = torch.ones_like(output) if needs_grad else None
        full = 0.0
        inputs_only = 0.0
        if needs_grad:
            targets = ([leaf] if differentiable else []) + params
            full, _ = _timed(
                lambda: torch.autograd.grad(result, targets, grad_output, allow_unused=True), device, timer
            )
            if differentiable:
                again = module(leaf)
                inputs_only, _ = _timed(
                    lambda: torch.autograd.grad(again, [leaf], grad_output, allow_unused=True), device, timer
                )
        if run >= warmup:
            forward_ms.append(elapsed)
            full_ms.append(full)
            input_ms.append(inputs_only)
    with torch.enable_grad():
        output, saved = _saved_bytes_forward(module, fresh_input())
    output = _check_output(output, name).detach()
    forward = statistics.median(forward_ms)
    backward_input = statistics.median(input_ms)
    backward_weight = max(statistics.median(full_ms) - backward_input, 0.0)
    cost = ModuleCost(
        forward=forward,
        backward_input=backward_input,
        backward_weight=backward_weight,
        activation_bytes=saved,
        output_bytes=output.nelement() * output.element_size(),
        parameters=sum(p.numel() for p in params),
    )
    return cost, output


def measure_layer_details(
    model: nn.Sequential,
    sample_inputs: torch.Tensor,
    *,
    repeats: int = 5,
    warmup: int = 1,
    timer: Timer = time.perf_counter,
) -> list[LayerMeasurement]:
    """Measure every top-level child of ``model`` in order, each on its predecessor's output.

    Args:
        model: an ``nn.Sequential`` whose children each take and return one tensor.
        sample_inputs: one microbatch of the model's input.
        repeats: timed runs per layer; medians are reported.
        warmup: untimed runs per layer first.
        timer: the clock (see :func:`measure_module`).

    Returns:
        One :class:`LayerMeasurement` per child (times in ms, sizes in bytes),
        with the input/weight split of the backward and the output size.
    """
    if not isinstance(model, nn.Sequential) or len(model) == 0:
        raise InvalidInputError(f"model must be a non-empty torch.nn.Sequential, got {type(model).__name__}")
    results = []
    activation = sample_inputs
    for index, (name, layer) in enumerate(model.named_children()):
        cost, activation = measure_module(
            layer,
            activation,
            repeats=repeats,
            warmup=warmup,
            name=f"layer {index} ({name})",
            input_grad=index > 0,
            timer=timer,
        )
        results.append(LayerMeasurement(**vars(cost), index=index, name=f"{name}:{type(layer).__name__}"))
    return results


def measure_layers(
    model: nn.Sequential,
    sample_inputs: torch.Tensor,
    *,
    repeats: int = 5,
    warmup: int = 1,
    timer: Timer = time.perf_counter,
) -> LayerProfile:
    """Measure every top-level child of ``model`` as a :class:`~pipeplan.layers.LayerProfile` (ms).

    The profile feeds :func:`pipeplan.partition.partition_layers` directly:
    ``forward``, ``backward`` (full: input plus weight gradient), ``weight``,
    ``activation_bytes`` and ``params`` (counts) per layer, named after the
    children (``"0:ImageEncoder"``). Times are clamped as the profile requires
    (``forward``, ``backward`` > 0 and ``weight < backward``: the first layer,
    whose input is data, gets ``weight`` = ``backward`` − 1e-6 ms). Use
    :func:`measure_layer_details` for the unclamped numbers and output sizes.
    """
    layers = measure_layer_details(model, sample_inputs, repeats=repeats, warmup=warmup, timer=timer)
    backward = [max(layer.backward, 2 * _MIN_MS) for layer in layers]
    return LayerProfile(
        forward=[max(layer.forward, _MIN_MS) for layer in layers],
        backward=backward,
        weight=[min(layer.backward_weight, b - _MIN_MS) for layer, b in zip(layers, backward)],
        activation_bytes=[layer.activation_bytes for layer in layers],
        params=[layer.parameters for layer in layers],
        names=[layer.name for layer in layers],
    )


def measure_stage_costs(
    stages: Sequence[nn.Module],
    sample_inputs: torch.Tensor,
    *,
    repeats: int = 5,
    warmup: int = 1,
    timer: Timer = time.perf_counter,
) -> StageCosts:
    """Measure each stage module in isolation on one microbatch, as ``StageCosts`` in ms.

    Stage ``s`` is measured on stage ``s - 1``'s output. The result feeds
    :func:`pipeplan.simulate` directly: ``forward``, ``backward`` (the full
    backward), ``weight`` (its weight-gradient part) and ``activation_bytes``.
    Stage 0's input is data, so its whole backward is weight gradient; ``weight``
    is then kept 1e-6 ms below ``backward``, as ``StageCosts`` requires.

    Args:
        stages: the stage modules in pipeline order.
        sample_inputs: one microbatch of the first stage's input.
        repeats: timed runs per stage; medians are reported.
        warmup: untimed runs per stage first.
        timer: the clock (see :func:`measure_module`).
    """
    if isinstance(stages, nn.Module) and not isinstance(stages, (nn.Sequential, nn.ModuleList)):
        raise InvalidInputError("stages must be a list of nn.Module, got a single module")
    stage_list = list(stages)
    if not stage_list or not all(isinstance(stage, nn.Module) for stage in stage_list):
        raise InvalidInputError("stages must be a non-empty list of torch.nn.Module")
    costs = []
    activation = sample_inputs
    for index, stage in enumerate(stage_list):
        cost, activation = measure_module(
                        stage,
            activation,
            repeats=repeats,
            warmup=warmup,
            name=f"stage {index}",
            input_grad=index > 0,
            timer=timer,
        )
        costs.append(cost)
    backward = [max(c.backward, 2 * _MIN_MS) for c in costs]
    weight = [min(c.backward_weight, b - _MIN_MS) for c, b in zip(costs, backward)]
    return StageCosts(
        forward=[max(c.forward, _MIN_MS) for c in costs],
        backward=backward,
        weight=weight,
        activation_bytes=[c.activation_bytes for c in costs],
    )
