"""Measure a torch model: per-layer and per-stage forward, backward and memory.

    from pipeplan.runtime.measure import measure_layers, measure_stage_costs
    profile = measure_layers(model, sample_inputs, repeats=5)         # a pipeplan LayerProfile, ms
    partition_layers(profile, 4).layers_per_stage                     # from pipeplan.partition
    costs = measure_stage_costs(stages, sample_inputs)                # pipeplan.StageCosts, ms
    pipeplan.simulate(pipeplan.build_schedule("1f1b", num_stages=len(stages), num_microbatches=8), costs)

Every time is the median over ``repeats`` runs (after ``warmup`` runs that are not
timed; ``statistic="min"``: the fastest run instead), in **milliseconds**, for one
microbatch (``sample_inputs``), with its interquartile range beside it. Each
module is measured in isolation on the output of the modules before it,
**running the same calls the runtime runs**
(:mod:`pipeplan.runtime.executor`), so a prediction charges what a step pays:

* ``forward``: the module's forward pass.
* ``full_backward`` (``B`` of a schedule without a split): ``torch.autograd.backward``
  from the output, accumulating every parameter's ``.grad``.
* ``backward_input`` (``I``, a split backward's first half): building the
  :class:`~pipeplan.runtime.split.SplitBackward` of a fresh forward and its
  :meth:`~pipeplan.runtime.split.SplitBackward.backward_input`. The first
  module's input (the data) needs no gradient, as in a real run, so its ``I`` is 0.
* ``backward_weight`` (``W``): that split's
  :meth:`~pipeplan.runtime.split.SplitBackward.backward_weight`. A real split pays
  a second autograd traversal, so ``backward_input + backward_weight`` is more than
  ``full_backward`` (on the default model's transformer blocks about 1.9×); the
  old convention (``W`` = full − input) charged an ideal split no runtime achieves.
* ``activation_bytes``: bytes of the distinct tensors autograd saves for the
  backward during the forward (found with
  ``torch.autograd.graph.saved_tensors_hooks``), the module's own parameters and
  buffers excluded. Tensors sharing storage are counted once.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from torch import nn

from .._validation import positive_int
from ..costs import StageCosts
from ..errors import InvalidInputError
from ..layers import LayerProfile
from .split import SplitBackward

__all__ = [
    "LayerMeasurement",
    "ModuleCost",
    "check_spread",
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
        backward_input: input-gradient time of a split backward as the runtime runs it (``I``).
        backward_weight: weight-gradient time of that split (``W``).
        activation_bytes: bytes saved for the backward (parameters excluded).
        output_bytes: bytes of the output tensor (what a pipeline sends downstream).
        parameters: number of trainable parameter elements.
        full_backward: time of the unsplit backward (input and weight gradients in one call).
        iqr: interquartile range (ms) of each time, keyed ``"forward"``,
            ``"backward"`` (the full one), ``"backward_input"``, ``"weight"``.
    """

    forward: float
    backward_input: float
    backward_weight: float
    activation_bytes: int
    output_bytes: int
    parameters: int
    full_backward: float = 0.0
    iqr: dict[str, float] = field(default_factory=dict)

    @property
    def backward(self) -> float:
        """Full (unsplit) backward time, ms."""
        return self.full_backward


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


STATISTICS = ("median", "min")
"""What a profile reports of its repeats: the typical run, or the fastest (the run least
slowed by anything else on the machine)."""


def _check_statistic(statistic: str) -> str:
    if statistic not in STATISTICS:
        raise InvalidInputError(f"statistic must be one of {', '.join(STATISTICS)}, got {statistic!r}")
    return statistic


def _centre_iqr(samples: Sequence[float], statistic: str = "median") -> tuple[float, float]:
    """``statistic`` (median or min) and interquartile range of ``samples``."""
    if len(samples) < 2:
        return float(samples[0]), 0.0
    quartiles = statistics.quantiles(samples, n=4, method="inclusive")
    centre = min(samples) if statistic == "min" else statistics.median(samples)
    return float(centre), quartiles[2] - quartiles[0]


class _Probe:
    """Times one module's forward, full backward and split backward on a fixed input, one run at a time."""

    def __init__(self, module: nn.Module, sample_inputs: torch.Tensor, *, name: str, input_grad: bool,
                 timer: Timer) -> None:
        if not isinstance(sample_inputs, torch.Tensor):
            raise InvalidInputError(f"sample_inputs must be a torch.Tensor, got {type(sample_inputs).__name__}")
        self.module = module
        self.sample = sample_inputs
        self.name = name
        self.timer = timer
        self.device = sample_inputs.device
        self.differentiable = input_grad and (sample_inputs.is_floating_point() or sample_inputs.is_complex())
        self.params = [p for p in module.parameters() if p.requires_grad]
        self.samples: dict[str, list[float]] = {"forward": [], "backward": [], "backward_input": [], "weight": []}

    def fresh_input(self) -> torch.Tensor:
        leaf = self.sample.detach()
        return leaf.requires_grad_(True) if self.differentiable else leaf

    def run(self, *, keep: bool) -> None:
        """One forward, full backward, forward and split backward; recorded when ``keep``."""
        saved_grads = [p.grad for p in self.params]
        try:
            for param in self.params:
                param.grad = None
            leaf = self.fresh_input()
            elapsed, output = _timed(lambda: self.module(leaf), self.device, self.timer)
            output = _check_output(output, self.name)
            full = inputs_only = weight_only = 0.0
            if output.requires_grad:
                grad_output = torch.ones_like(output)
                full, _ = _timed(lambda: torch.autograd.backward([output], [grad_output]), self.device, self.timer)
                again = _check_output(self.module(leaf), self.name)
                split: list[SplitBackward] = []

                def backward_input() -> None:
                    split.append(SplitBackward([again], [leaf] if self.differentiable else [], self.params))
                    split[0].backward_input([grad_output])

                inputs_only, _ = _timed(backward_input, self.device, self.timer)
                weight_only, _ = _timed(split[0].backward_weight, self.device, self.timer)
                if not self.differentiable:
                    inputs_only = 0.0  # nothing to send upstream: the runtime's I has no work
        finally:
            for param, grad in zip(self.params, saved_grads):
                param.grad = grad
        if keep:
            self.samples["forward"].append(elapsed)
            self.samples["backward"].append(full)
            self.samples["backward_input"].append(inputs_only)
            self.samples["weight"].append(weight_only)

    def result(self, statistic: str = "median") -> tuple[ModuleCost, torch.Tensor]:
        with torch.enable_grad():
            output, saved = _saved_bytes_forward(self.module, self.fresh_input())
        output = _check_output(output, self.name).detach()
        stats = {key: _centre_iqr(values, statistic) for key, values in self.samples.items()}
        cost = ModuleCost(
            forward=stats["forward"][0],
            backward_input=stats["backward_input"][0],
            backward_weight=stats["weight"][0],
            activation_bytes=saved,
            output_bytes=output.nelement() * output.element_size(),
            parameters=sum(p.numel() for p in self.params),
            full_backward=stats["backward"][0],
            iqr={key: value[1] for key, value in stats.items()},
        )
        return cost, output


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

    Each run times a forward, the full backward, then a second forward's split
    backward (``B`` then ``W``), the calls the runtime makes (see the module doc).

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
        The parameters' ``.grad`` are left as they were.
    """
    repeats = positive_int("repeats", repeats)
    warmup = positive_int("warmup", warmup, minimum=0)
    probe = _Probe(module, sample_inputs, name=name, input_grad=input_grad, timer=timer)
    for run in range(warmup + repeats):
        probe.run(keep=run >= warmup)
    return probe.result()


def measure_layer_details(
    model: nn.Sequential,
    sample_inputs: torch.Tensor,
    *,
    repeats: int = 5,
    warmup: int = 1,
    timer: Timer = time.perf_counter,
    statistic: str = "median",
) -> list[LayerMeasurement]:
    """Measure every top-level child of ``model`` in order, each on its predecessor's output.

    The runs go round robin over the layers (run ``r`` of every layer, then run
    ``r + 1``), so load from other processes spreads over all layers alike.

    Args:
        model: an ``nn.Sequential`` whose children each take and return one tensor.
        sample_inputs: one microbatch of the model's input.
        repeats: timed runs per layer; medians are reported.
        warmup: untimed runs per layer first.
        timer: the clock (see :func:`measure_module`).
        statistic: ``"median"`` of the repeats, or ``"min"`` (the fastest run).

    Returns:
        One :class:`LayerMeasurement` per child (times in ms, sizes in bytes),
        with the input/weight split of the backward and the output size.
    """
    if not isinstance(model, nn.Sequential) or len(model) == 0:
        raise InvalidInputError(f"model must be a non-empty torch.nn.Sequential, got {type(model).__name__}")
    repeats = positive_int("repeats", repeats)
    warmup = positive_int("warmup", warmup, minimum=0)
    statistic = _check_statistic(statistic)
    probes = []
    activation = sample_inputs
    for index, (name, layer) in enumerate(model.named_children()):
        probe = _Probe(layer, activation, name=f"layer {index} ({name})", input_grad=index > 0, timer=timer)
        with torch.no_grad():
            activation = _check_output(layer(activation), probe.name)
        probes.append(probe)
    # Round robin: run r of every layer before run r + 1 of any, so a burst of load
    # from other processes falls on all layers alike instead of on one layer's runs.
    for run in range(warmup + repeats):
        for probe in probes:
            probe.run(keep=run >= warmup)
    results = []
    for index, ((name, layer), probe) in enumerate(zip(model.named_children(), probes)):
        cost, _output = probe.result(statistic)
        results.append(LayerMeasurement(**vars(cost), index=index, name=f"{name}:{type(layer).__name__}"))
    if all(layer.forward <= 0 and layer.full_backward <= 0 for layer in results):
        raise InvalidInputError(
            "every measured time is zero or negative: the timer does not advance (timer trouble); "
            "use time.perf_counter or a clock with sub-millisecond resolution"
        )
    return results


def measure_layers(
    model: nn.Sequential,
    sample_inputs: torch.Tensor,
    *,
    repeats: int = 5,
    warmup: int = 1,
    timer: Timer = time.perf_counter,
    statistic: str = "median",
) -> LayerProfile:
    """Measure every top-level child of ``model`` as a :class:`~pipeplan.layers.LayerProfile` (ms).

    The profile feeds :func:`pipeplan.partition.partition_layers` and
    :meth:`~pipeplan.layers.LayerProfile.stage_costs` directly: ``forward``,
    ``backward`` (the full backward), ``backward_input`` and ``weight`` (the
    halves of a split backward as the runtime runs them), ``activation_bytes``,
    ``params`` (counts), ``send_bytes`` (each output's size) and the interquartile ranges
    (``spread``) per layer, named after the children (``"0:ImageEncoder"``).
    ``forward`` and ``backward`` are clamped at 1e-6 ms (a profile needs them
    > 0). ``statistic="min"`` reports each time's fastest run instead of its median.
    Use :func:`measure_layer_details` for the raw numbers.
    """
    layers = measure_layer_details(model, sample_inputs, repeats=repeats, warmup=warmup, timer=timer,
                                   statistic=statistic)
    return LayerProfile(
        forward=[max(layer.forward, _MIN_MS) for layer in layers],
        backward=[max(layer.full_backward, _MIN_MS) for layer in layers],
        weight=[layer.backward_weight for layer in layers],
        backward_input=[layer.backward_input for layer in layers],
        activation_bytes=[layer.activation_bytes for layer in layers],
        params=[layer.parameters for layer in layers],
        send_bytes=[layer.output_bytes for layer in layers],
        names=[layer.name for layer in layers],
        spread={key: [layer.iqr[key] for layer in layers]
                for key in ("forward", "backward", "backward_input", "weight")},
        measurement={"repeats": repeats, "warmup": warmup, "statistic": statistic,
                     "timer": getattr(timer, "__name__", str(timer))},
    )


def check_spread(profile: LayerProfile, max_relative_iqr: float) -> None:
    """Refuse a profile of medians whose measurements scatter too much to plan with.

    A layer fails when the interquartile range of any of its measured times is
    more than ``max_relative_iqr`` times the layer's ``forward + backward``. A
    profile of minima (``statistic="min"``) is not judged: its IQR says how much
    others slowed the runs, and the fastest run is what min keeps regardless.

    Raises:
        InvalidInputError: naming the first such layer, its median and IQR, and
            the ways out (more ``--repeats``, ``--statistic min``, a higher ``--max-spread``).
    """
    statistic = str(profile.measurement.get("statistic", "median")) if profile.measurement else "median"
    if statistic == "min":
        return
    for index, name in enumerate(profile.names):
        total = profile.forward[index] + profile.backward[index]
        for key, spread in profile.spread.items():
            if spread[index] > max_relative_iqr * total:
                value = getattr(profile, key)[index]
                raise InvalidInputError(
                    f"layer {index} ({name}): {key} {statistic} {value:.3f} ms has an interquartile range of "
                    f"{spread[index]:.3f} ms, more than {max_relative_iqr:g} x the layer's forward + backward "
                    f"({total:.3f} ms); the measurement is too noisy to trust (a loaded machine?): measure again "
                    "with more --repeats, keep each time's fastest run with --statistic min (meant for a shared "
                    f"machine; no spread check), or raise --max-spread (now {max_relative_iqr:g}; this layer "
                    f"needs {math.ceil(100 * spread[index] / total) / 100:g})"
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
    backward), ``backward_input`` and ``weight`` (a split backward's halves as
    the runtime runs them) and ``activation_bytes``. Stage 0's input is data, so
    its ``I`` is 0 and its ``W`` is its whole backward.

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
    return StageCosts(
        forward=[max(c.forward, _MIN_MS) for c in costs],
        backward=[max(c.full_backward, _MIN_MS) for c in costs],
        weight=[c.backward_weight for c in costs],
        backward_input=[c.backward_input for c in costs],
        activation_bytes=[c.activation_bytes for c in costs],
    )
